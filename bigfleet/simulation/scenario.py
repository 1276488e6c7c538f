"""Scenario files for `bigfleet simulate`: validated, with errors that name the field."""

from __future__ import annotations

import pathlib
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from ..coordinator import MembershipThresholds
from ..decommission import DecommissionRequest
from ..models import CapacityNeed, Count, Name, Transition
from ..policy import Policy
from ..providers.simulated.baremetal import RackSpec
from ..providers.simulated.cloud import QuotaSpec
from ..yamlfile import load_model

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
# A scenario's `shards:`, and `bigfleet simulate --shards` overriding it.
ShardCount = Annotated[int, Field(ge=1, le=64)]


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QuotaChange(Spec):
    at: Seconds
    instance_type: Name
    zone: Name
    capacity_type: str
    count: Count


class CloudProviderSpec(Spec):
    name: Name
    kind: Literal["cloud"]
    region: str | None = None  # defaults to the first quota line's zone without its letter
    api_calls_per_second: Annotated[float, Field(gt=0)] = 2.0
    create_latency: tuple[Seconds, Seconds] = (30.0, 90.0)
    configure_latency: Seconds = 30.0
    delete_latency: Seconds = 5.0
    drain_latency: Seconds = 60.0
    failure_rates: dict[Transition, Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=dict
    )
    quota: list[QuotaSpec]
    quota_changes: list[QuotaChange] = Field(default_factory=list)
    # A spot interruption is announced this long before it comes (EC2: 2 minutes); 0: never.
    notice_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 120.0


class BareMetalProviderSpec(Spec):
    name: Name
    kind: Literal["bare-metal"]
    configure_latency: Seconds = 120.0
    drain_latency: Seconds = 60.0
    failure_rates: dict[Transition, Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=dict
    )
    racks: list[RackSpec]


ProviderSpec = Annotated[CloudProviderSpec | BareMetalProviderSpec, Field(discriminator="kind")]


class TimedRollup(Spec):
    at: Seconds
    needs: list[CapacityNeed]


class WorkloadSpec(Spec):
    """Roll-ups derived from a real trace (see `bigfleet.simulation.workload`, docs/traces.md).

    `mapping` names a mapping file (bigfleet/simulation/trace_mapping.py) saying how to read the
    trace; without one the trace is an Alibaba openb pod list, packed with the `gpu_*` and `cpu_*`
    fields below (which a mapping file replaces by its `kinds`).
    `time_scale` is trace seconds per simulated second; `start` the trace second that becomes
    simulated second 0 (default: the first job start of the trace's busiest 34 days, or a time
    series' first row); `demand_scale` multiplies every job's resources (each trace job stands
    for that many). The cluster replays the jobs of group column value `group` when given, else
    group `index` of `clusters` groups by a stable hash of the job id.
    `closed_loop`: demand that cannot be served waits in a queue (bigfleet/simulation/
    closed_loop.py) instead of vanishing; job logs only.
    """

    trace: str
    mapping: str | None = None
    nodes: str | None = None
    time_scale: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    start: Seconds | None = None
    demand_scale: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    clusters: Annotated[int, Field(ge=1)] = 1
    index: Annotated[int, Field(ge=0)] = 0
    group: str | None = None
    closed_loop: bool = False
    gpu_instance_type: Name = "gpu-8xh100"
    gpus_per_node: Annotated[int, Field(ge=1)] = 8
    cpu_instance_type: Name = "cpu-64"
    cpus_per_node: Annotated[int, Field(ge=1)] = 64

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadSpec:
        if self.index >= self.clusters:
            raise ValueError(
                f"index {self.index} is not a group of {self.clusters} cluster(s) "
                f"(0..{self.clusters - 1})"
            )
        packing = {"gpu_instance_type", "gpus_per_node", "cpu_instance_type", "cpus_per_node"}
        if self.mapping is not None and (given := sorted(packing & self.model_fields_set)):
            raise ValueError(
                f"{', '.join(given)}: with a mapping file, set machines in its kinds instead"
            )
        if self.group is not None and (self.clusters != 1 or self.index != 0):
            raise ValueError("give either group (a group column value) or clusters/index")
        return self


class ClusterSpec(Spec):
    name: Name
    endpoint: str | None = None
    kubelet_version: str = "1.33"
    rollups: list[TimedRollup] = Field(default_factory=list)
    workload: WorkloadSpec | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ClusterSpec:
        if self.rollups and self.workload:
            raise ValueError("give either rollups or workload, not both")
        return self


class RackFailure(Spec):
    """At `at`, rack `rack` of provider `provider` fails, for `duration_seconds` (none: for
    good): `power` (its machines die), `network` (up, but their clusters stop seeing them) or
    `degraded` (their provider's health check warns). bigfleet/simulation/trouble.py."""

    at: Annotated[float, Field(ge=0)]
    provider: Name
    rack: Name
    kind: Literal["power", "network", "degraded"]
    duration_seconds: Seconds | None = None


class TimedDecommission(DecommissionRequest):
    """At `at`, take `count` machines of `provider` out of the fleet (design §16)."""

    at: Seconds


class PolicyOverrides(Policy):
    """Policy knobs a scenario sets; the cycle length is the scenario's own `cycle_seconds`."""

    @field_validator("cycle_seconds")
    @classmethod
    def _not_here(cls, value: float) -> float:
        raise ValueError("set cycle_seconds at the top level of the scenario, not in policy")


class Scenario(Spec):
    name: Name
    seed: int = 1
    cycle_seconds: Annotated[float, Field(gt=0)] = 10.0
    duration_seconds: Annotated[float, Field(gt=0)]
    shards: ShardCount = 1
    # Transition workflows running at once in the whole fleet, shared equally by its shards:
    # they share one Temporal server (workflows/outbox.py; past it, starts wait in the shards'
    # pipelines). Four shards of 1 000 each had 3 600 running on a server that completed 7.5
    # a second, and two of them configured nothing in 4 minutes.
    max_in_flight: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    providers: list[ProviderSpec]
    clusters: list[ClusterSpec]
    policy: PolicyOverrides = Field(default_factory=lambda: PolicyOverrides())
    sample_seconds: Annotated[float, Field(gt=0)] = 60.0
    # The coordinator's shard splits and merges, and decommissions along the way (design §16).
    membership: MembershipThresholds = Field(default_factory=MembershipThresholds)
    decommissions: list[TimedDecommission] = Field(default_factory=list)
    # The clusters' operators put their nodes' health in their roll-ups this often (0: never;
    # design §9 says 30 s), and racks fail (issue 33).
    health_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    rack_failures: list[RackFailure] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_names(self) -> Scenario:
        for kind, names in (
            ("provider", [p.name for p in self.providers]),
            ("cluster", [c.name for c in self.clusters]),
        ):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{kind} names must be unique: {', '.join(dupes)}")
        providers = {p.name for p in self.providers}
        for i, f in enumerate(self.rack_failures):
            if f.provider not in providers:
                raise ValueError(f"rack_failures.{i}.provider: no provider named {f.provider}")
        return self

    def make_policy(self) -> Policy:
        return self.policy.model_copy(update={"cycle_seconds": self.cycle_seconds})

    def policy_overrides(self) -> dict[str, Any]:
        """The policy knobs this file sets, as JSON (what a shard workflow is started with)."""
        return self.policy.model_dump(mode="json", exclude_unset=True)


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message names the file and every bad field."""


def shard_count(value: object) -> int:
    """`value` checked as a scenario's `shards:` is (a whole number, 1..64); ValueError
    saying what is wrong otherwise (the caller names the field or flag)."""
    try:
        return int(TypeAdapter(ShardCount).validate_python(value, strict=False))
    except ValidationError as err:
        raise ValueError(err.errors()[0]["msg"]) from None


def on_shards(scenario: Scenario, shards: int) -> Scenario:
    """The same scenario run on `shards` shards (checked like the file's `shards:`)."""
    return scenario.model_copy(update={"shards": shard_count(shards)})


def load(path: str | pathlib.Path) -> Scenario:
    path = pathlib.Path(path)
    scenario = load_model(path, Scenario, "scenario", ScenarioError)
    for cluster in scenario.clusters:
        if cluster.workload is not None:
            trace = (path.parent / cluster.workload.trace).resolve()
            cluster.workload.trace = str(trace)
            if cluster.workload.mapping:
                cluster.workload.mapping = str((path.parent / cluster.workload.mapping).resolve())
            if cluster.workload.nodes:
                cluster.workload.nodes = str((path.parent / cluster.workload.nodes).resolve())
    return scenario
