from bigfleet.v1 import machine_pb2 as _machine_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ProviderInfo(_message.Message):
    __slots__ = ("name", "capacity_types", "max_create_batch", "calls_per_second", "supports_delete", "max_list_page")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_TYPES_FIELD_NUMBER: _ClassVar[int]
    MAX_CREATE_BATCH_FIELD_NUMBER: _ClassVar[int]
    CALLS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_DELETE_FIELD_NUMBER: _ClassVar[int]
    MAX_LIST_PAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    capacity_types: _containers.RepeatedScalarFieldContainer[str]
    max_create_batch: int
    calls_per_second: float
    supports_delete: bool
    max_list_page: int
    def __init__(self, name: _Optional[str] = ..., capacity_types: _Optional[_Iterable[str]] = ..., max_create_batch: _Optional[int] = ..., calls_per_second: _Optional[float] = ..., supports_delete: _Optional[bool] = ..., max_list_page: _Optional[int] = ...) -> None: ...

class CreateRequest(_message.Message):
    __slots__ = ("machine_ids", "token", "idempotency_key")
    MACHINE_IDS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    machine_ids: _containers.RepeatedScalarFieldContainer[str]
    token: _machine_pb2.FencingToken
    idempotency_key: str
    def __init__(self, machine_ids: _Optional[_Iterable[str]] = ..., token: _Optional[_Union[_machine_pb2.FencingToken, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class BootstrapBlob(_message.Message):
    __slots__ = ("user_data", "ttl_seconds")
    USER_DATA_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    user_data: bytes
    ttl_seconds: int
    def __init__(self, user_data: _Optional[bytes] = ..., ttl_seconds: _Optional[int] = ...) -> None: ...

class ConfigureRequest(_message.Message):
    __slots__ = ("machine_id", "blob", "cluster", "token", "idempotency_key")
    MACHINE_ID_FIELD_NUMBER: _ClassVar[int]
    BLOB_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    machine_id: str
    blob: BootstrapBlob
    cluster: str
    token: _machine_pb2.FencingToken
    idempotency_key: str
    def __init__(self, machine_id: _Optional[str] = ..., blob: _Optional[_Union[BootstrapBlob, _Mapping]] = ..., cluster: _Optional[str] = ..., token: _Optional[_Union[_machine_pb2.FencingToken, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ("machine_id", "grace_seconds", "force", "token", "idempotency_key")
    MACHINE_ID_FIELD_NUMBER: _ClassVar[int]
    GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    machine_id: str
    grace_seconds: float
    force: bool
    token: _machine_pb2.FencingToken
    idempotency_key: str
    def __init__(self, machine_id: _Optional[str] = ..., grace_seconds: _Optional[float] = ..., force: _Optional[bool] = ..., token: _Optional[_Union[_machine_pb2.FencingToken, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("machine_id", "token", "idempotency_key")
    MACHINE_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    machine_id: str
    token: _machine_pb2.FencingToken
    idempotency_key: str
    def __init__(self, machine_id: _Optional[str] = ..., token: _Optional[_Union[_machine_pb2.FencingToken, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class MachineRef(_message.Message):
    __slots__ = ("machine_id",)
    MACHINE_ID_FIELD_NUMBER: _ClassVar[int]
    machine_id: str
    def __init__(self, machine_id: _Optional[str] = ...) -> None: ...

class TransitionAck(_message.Message):
    __slots__ = ("operation_id", "machine")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    machine: _machine_pb2.Machine
    def __init__(self, operation_id: _Optional[str] = ..., machine: _Optional[_Union[_machine_pb2.Machine, _Mapping]] = ...) -> None: ...

class TransitionAcks(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[TransitionAck]
    def __init__(self, acks: _Optional[_Iterable[_Union[TransitionAck, _Mapping]]] = ...) -> None: ...

class ListFilter(_message.Message):
    __slots__ = ("states", "zone", "instance_type", "max_results", "page_token", "noticed")
    STATES_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NOTICED_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[_machine_pb2.MachineState]
    zone: str
    instance_type: str
    max_results: int
    page_token: str
    noticed: bool
    def __init__(self, states: _Optional[_Iterable[_Union[_machine_pb2.MachineState, str]]] = ..., zone: _Optional[str] = ..., instance_type: _Optional[str] = ..., max_results: _Optional[int] = ..., page_token: _Optional[str] = ..., noticed: _Optional[bool] = ...) -> None: ...

class MachineList(_message.Message):
    __slots__ = ("machines", "next_page_token")
    MACHINES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    machines: _containers.RepeatedCompositeFieldContainer[_machine_pb2.Machine]
    next_page_token: str
    def __init__(self, machines: _Optional[_Iterable[_Union[_machine_pb2.Machine, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
