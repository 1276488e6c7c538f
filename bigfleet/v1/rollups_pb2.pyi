from bigfleet.v1 import machine_pb2 as _machine_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TopologySpread(_message.Message):
    __slots__ = ("key", "max_skew")
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_SKEW_FIELD_NUMBER: _ClassVar[int]
    key: str
    max_skew: int
    def __init__(self, key: _Optional[str] = ..., max_skew: _Optional[int] = ...) -> None: ...

class CapacityNeed(_message.Message):
    __slots__ = ("requirements", "resources", "priority", "count", "same", "spread", "interruption_penalty", "reclamation_penalty", "drain_seconds")
    REQUIREMENTS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SAME_FIELD_NUMBER: _ClassVar[int]
    SPREAD_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    RECLAMATION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    DRAIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    requirements: _containers.RepeatedCompositeFieldContainer[_machine_pb2.NodeSelectorRequirement]
    resources: _machine_pb2.Resources
    priority: int
    count: int
    same: str
    spread: _containers.RepeatedCompositeFieldContainer[TopologySpread]
    interruption_penalty: float
    reclamation_penalty: float
    drain_seconds: float
    def __init__(self, requirements: _Optional[_Iterable[_Union[_machine_pb2.NodeSelectorRequirement, _Mapping]]] = ..., resources: _Optional[_Union[_machine_pb2.Resources, _Mapping]] = ..., priority: _Optional[int] = ..., count: _Optional[int] = ..., same: _Optional[str] = ..., spread: _Optional[_Iterable[_Union[TopologySpread, _Mapping]]] = ..., interruption_penalty: _Optional[float] = ..., reclamation_penalty: _Optional[float] = ..., drain_seconds: _Optional[float] = ...) -> None: ...

class NodeHealth(_message.Message):
    __slots__ = ("machine_ids",)
    MACHINE_IDS_FIELD_NUMBER: _ClassVar[int]
    machine_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, machine_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DisruptionBudget(_message.Message):
    __slots__ = ("machines", "reasons", "schedule", "duration_seconds")
    MACHINES_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    machines: str
    reasons: _containers.RepeatedScalarFieldContainer[str]
    schedule: str
    duration_seconds: float
    def __init__(self, machines: _Optional[str] = ..., reasons: _Optional[_Iterable[str]] = ..., schedule: _Optional[str] = ..., duration_seconds: _Optional[float] = ...) -> None: ...

class DoNotDisrupt(_message.Message):
    __slots__ = ("machine_id", "until")
    MACHINE_ID_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    machine_id: str
    until: float
    def __init__(self, machine_id: _Optional[str] = ..., until: _Optional[float] = ...) -> None: ...

class Disruption(_message.Message):
    __slots__ = ("budgets", "do_not_disrupt", "max_unhealthy")
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    DO_NOT_DISRUPT_FIELD_NUMBER: _ClassVar[int]
    MAX_UNHEALTHY_FIELD_NUMBER: _ClassVar[int]
    budgets: _containers.RepeatedCompositeFieldContainer[DisruptionBudget]
    do_not_disrupt: _containers.RepeatedCompositeFieldContainer[DoNotDisrupt]
    max_unhealthy: str
    def __init__(self, budgets: _Optional[_Iterable[_Union[DisruptionBudget, _Mapping]]] = ..., do_not_disrupt: _Optional[_Iterable[_Union[DoNotDisrupt, _Mapping]]] = ..., max_unhealthy: _Optional[str] = ...) -> None: ...

class ClusterCapacityNeeds(_message.Message):
    __slots__ = ("cluster", "generation", "needs", "health", "disruption")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    NEEDS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    DISRUPTION_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    generation: int
    needs: _containers.RepeatedCompositeFieldContainer[CapacityNeed]
    health: NodeHealth
    disruption: Disruption
    def __init__(self, cluster: _Optional[str] = ..., generation: _Optional[int] = ..., needs: _Optional[_Iterable[_Union[CapacityNeed, _Mapping]]] = ..., health: _Optional[_Union[NodeHealth, _Mapping]] = ..., disruption: _Optional[_Union[Disruption, _Mapping]] = ...) -> None: ...

class RollupAccepted(_message.Message):
    __slots__ = ("shard", "generation", "workflow_id")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    shard: int
    generation: int
    workflow_id: str
    def __init__(self, shard: _Optional[int] = ..., generation: _Optional[int] = ..., workflow_id: _Optional[str] = ...) -> None: ...
