from bigfleet.v1 import machine_pb2 as _machine_pb2
from bigfleet.v1 import provider_pb2 as _provider_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BootstrapRequest(_message.Message):
    __slots__ = ("cluster", "requirements", "machine_id", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    REQUIREMENTS_FIELD_NUMBER: _ClassVar[int]
    MACHINE_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    requirements: _containers.RepeatedCompositeFieldContainer[_machine_pb2.NodeSelectorRequirement]
    machine_id: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, cluster: _Optional[str] = ..., requirements: _Optional[_Iterable[_Union[_machine_pb2.NodeSelectorRequirement, _Mapping]]] = ..., machine_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpcomingNode(_message.Message):
    __slots__ = ("machine_id", "instance_type")
    MACHINE_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    machine_id: str
    instance_type: str
    def __init__(self, machine_id: _Optional[str] = ..., instance_type: _Optional[str] = ...) -> None: ...

class Reclaim(_message.Message):
    __slots__ = ("machine_id", "grace_seconds")
    MACHINE_ID_FIELD_NUMBER: _ClassVar[int]
    GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    machine_id: str
    grace_seconds: float
    def __init__(self, machine_id: _Optional[str] = ..., grace_seconds: _Optional[float] = ...) -> None: ...

class OperatorUpdate(_message.Message):
    __slots__ = ("cluster", "upcoming", "reclaims", "available")
    class AvailableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    UPCOMING_FIELD_NUMBER: _ClassVar[int]
    RECLAIMS_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    upcoming: _containers.RepeatedCompositeFieldContainer[UpcomingNode]
    reclaims: _containers.RepeatedCompositeFieldContainer[Reclaim]
    available: _containers.ScalarMap[str, int]
    def __init__(self, cluster: _Optional[str] = ..., upcoming: _Optional[_Iterable[_Union[UpcomingNode, _Mapping]]] = ..., reclaims: _Optional[_Iterable[_Union[Reclaim, _Mapping]]] = ..., available: _Optional[_Mapping[str, int]] = ...) -> None: ...

class NotifyAck(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
