from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MachineState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MACHINE_STATE_UNSPECIFIED: _ClassVar[MachineState]
    SPECULATIVE: _ClassVar[MachineState]
    CREATING: _ClassVar[MachineState]
    IDLE: _ClassVar[MachineState]
    CONFIGURING: _ClassVar[MachineState]
    CONFIGURED: _ClassVar[MachineState]
    DRAINING: _ClassVar[MachineState]
    DELETING: _ClassVar[MachineState]
    FAILED: _ClassVar[MachineState]

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    STALE_FENCING_TOKEN: _ClassVar[ErrorReason]
    NOT_FOUND: _ClassVar[ErrorReason]
    QUOTA_EXHAUSTED: _ClassVar[ErrorReason]
    NOT_SUPPORTED: _ClassVar[ErrorReason]
    INVALID_TRANSITION: _ClassVar[ErrorReason]
    RATE_LIMITED: _ClassVar[ErrorReason]
    BOOTSTRAP_REFUSED: _ClassVar[ErrorReason]
    INVALID_FIELD: _ClassVar[ErrorReason]
    UNAUTHENTICATED: _ClassVar[ErrorReason]
    PERMISSION_DENIED: _ClassVar[ErrorReason]
    UNKNOWN_CLUSTER: _ClassVar[ErrorReason]
    STALE_GENERATION: _ClassVar[ErrorReason]
    ROLLUP_TOO_LARGE: _ClassVar[ErrorReason]
MACHINE_STATE_UNSPECIFIED: MachineState
SPECULATIVE: MachineState
CREATING: MachineState
IDLE: MachineState
CONFIGURING: MachineState
CONFIGURED: MachineState
DRAINING: MachineState
DELETING: MachineState
FAILED: MachineState
ERROR_REASON_UNSPECIFIED: ErrorReason
STALE_FENCING_TOKEN: ErrorReason
NOT_FOUND: ErrorReason
QUOTA_EXHAUSTED: ErrorReason
NOT_SUPPORTED: ErrorReason
INVALID_TRANSITION: ErrorReason
RATE_LIMITED: ErrorReason
BOOTSTRAP_REFUSED: ErrorReason
INVALID_FIELD: ErrorReason
UNAUTHENTICATED: ErrorReason
PERMISSION_DENIED: ErrorReason
UNKNOWN_CLUSTER: ErrorReason
STALE_GENERATION: ErrorReason
ROLLUP_TOO_LARGE: ErrorReason

class HostRef(_message.Message):
    __slots__ = ("provider", "ref")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    provider: str
    ref: str
    def __init__(self, provider: _Optional[str] = ..., ref: _Optional[str] = ...) -> None: ...

class Resources(_message.Message):
    __slots__ = ("cpu", "memory_gib", "gpu")
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_GIB_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    cpu: float
    memory_gib: float
    gpu: int
    def __init__(self, cpu: _Optional[float] = ..., memory_gib: _Optional[float] = ..., gpu: _Optional[int] = ...) -> None: ...

class Machine(_message.Message):
    __slots__ = ("id", "state", "host", "instance_type", "zone", "capacity_type", "price_per_hour", "interruption_probability", "resources", "labels", "transition_started_unix", "last_error", "cluster", "failed_from", "notice")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRICE_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTION_PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    TRANSITION_STARTED_UNIX_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    FAILED_FROM_FIELD_NUMBER: _ClassVar[int]
    NOTICE_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: MachineState
    host: HostRef
    instance_type: str
    zone: str
    capacity_type: str
    price_per_hour: float
    interruption_probability: float
    resources: Resources
    labels: _containers.ScalarMap[str, str]
    transition_started_unix: int
    last_error: str
    cluster: str
    failed_from: MachineState
    notice: Notice
    def __init__(self, id: _Optional[str] = ..., state: _Optional[_Union[MachineState, str]] = ..., host: _Optional[_Union[HostRef, _Mapping]] = ..., instance_type: _Optional[str] = ..., zone: _Optional[str] = ..., capacity_type: _Optional[str] = ..., price_per_hour: _Optional[float] = ..., interruption_probability: _Optional[float] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., transition_started_unix: _Optional[int] = ..., last_error: _Optional[str] = ..., cluster: _Optional[str] = ..., failed_from: _Optional[_Union[MachineState, str]] = ..., notice: _Optional[_Union[Notice, _Mapping]] = ...) -> None: ...

class Notice(_message.Message):
    __slots__ = ("kind", "deadline_unix", "detail")
    KIND_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    kind: str
    deadline_unix: int
    detail: str
    def __init__(self, kind: _Optional[str] = ..., deadline_unix: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class FencingToken(_message.Message):
    __slots__ = ("shard_id", "shard_epoch", "seq")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    SHARD_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    shard_epoch: int
    seq: int
    def __init__(self, shard_id: _Optional[int] = ..., shard_epoch: _Optional[int] = ..., seq: _Optional[int] = ...) -> None: ...

class NodeSelectorRequirement(_message.Message):
    __slots__ = ("key", "operator", "values")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    key: str
    operator: str
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, key: _Optional[str] = ..., operator: _Optional[str] = ..., values: _Optional[_Iterable[str]] = ...) -> None: ...

class ErrorInfo(_message.Message):
    __slots__ = ("reason", "message", "machine_id", "field", "retry_after_seconds", "state", "failed_from", "call", "pool", "shard_id", "presented_epoch", "highest_epoch", "current_generation", "size_bytes", "limit_bytes")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MACHINE_ID_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FAILED_FROM_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    PRESENTED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURRENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    reason: ErrorReason
    message: str
    machine_id: str
    field: str
    retry_after_seconds: float
    state: MachineState
    failed_from: MachineState
    call: str
    pool: str
    shard_id: int
    presented_epoch: int
    highest_epoch: int
    current_generation: int
    size_bytes: int
    limit_bytes: int
    def __init__(self, reason: _Optional[_Union[ErrorReason, str]] = ..., message: _Optional[str] = ..., machine_id: _Optional[str] = ..., field: _Optional[str] = ..., retry_after_seconds: _Optional[float] = ..., state: _Optional[_Union[MachineState, str]] = ..., failed_from: _Optional[_Union[MachineState, str]] = ..., call: _Optional[str] = ..., pool: _Optional[str] = ..., shard_id: _Optional[int] = ..., presented_epoch: _Optional[int] = ..., highest_epoch: _Optional[int] = ..., current_generation: _Optional[int] = ..., size_bytes: _Optional[int] = ..., limit_bytes: _Optional[int] = ...) -> None: ...
