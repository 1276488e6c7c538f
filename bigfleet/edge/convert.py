"""Between the wire (protobuf, proto/bigfleet/v1) and BigFleet's own models (bigfleet/models/).

Whatever arrives from outside is decoded into a dict and validated by the same strict pydantic
models the rest of BigFleet uses, so a bad field is named the same way whether it came in a
signal, a YAML file or a gRPC message ("needs.0.count: Input should be greater than or equal to
0"). Proto3 has no "unset" for scalars: an empty string or a zero enum is read as absent where
the model has an absent form (a machine's cluster, a FAILED machine's failed_from, a disruption
budget's schedule and duration_seconds).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..models import (
    BootstrapBlob,
    BootstrapRequest,
    ClusterCapacityNeeds,
    Disruption,
    FencingToken,
    ListFilter,
    Machine,
    MachineState,
    NodeSelectorRequirement,
    TransitionAck,
    from_wire,
)
from ..operators import OperatorUpdate
from ..v1 import machine_pb2 as mpb
from ..v1 import operator_pb2 as opb
from ..v1 import provider_pb2 as ppb
from ..v1 import rollups_pb2 as rpb

M = TypeVar("M", bound=BaseModel)


class WireError(ValueError):
    """A message that does not make a valid model; `problems` are (field, message) pairs."""

    def __init__(self, what: str, problems: list[tuple[str, str]]) -> None:
        detail = "; ".join(f"{f}: {m}" if f else m for f, m in problems)
        super().__init__(f"invalid {what}: {detail}")
        self.problems = problems

    @property
    def field(self) -> str:
        return next((f for f, _ in self.problems if f), "")


def validated(model: type[M], data: dict[str, Any], what: str, prefix: str = "") -> M:
    try:
        return from_wire(model, data)
    except ValidationError as err:
        problems = [
            (".".join(x for x in (prefix, *(str(p) for p in e["loc"])) if x), e["msg"])
            for e in err.errors()
        ]
        raise WireError(what, problems) from None
    except ValueError as err:
        raise WireError(what, [(prefix, str(err))]) from None


# ---- shared types ----------------------------------------------------------------------------


def state_name(value: int) -> str | None:
    """A MachineState enum number as the model's spelling; None for 0 (unset)."""
    if value == 0:
        return None
    try:
        return mpb.MachineState.Name(value)  # type: ignore[arg-type]
    except ValueError:
        return f"<unknown enum value {value}>"


def state_number(state: MachineState | str | None) -> int:
    return 0 if state is None else int(mpb.MachineState.Value(str(state)))


def token_to_proto(t: FencingToken) -> mpb.FencingToken:
    return mpb.FencingToken(shard_id=t.shard_id, shard_epoch=t.shard_epoch, seq=t.seq)


def token_from_proto(pb: mpb.FencingToken, present: bool, field: str = "token") -> FencingToken:
    if not present:
        raise WireError("request", [(field, "missing: every mutating call carries a token")])
    data = {"shard_id": pb.shard_id, "shard_epoch": pb.shard_epoch, "seq": pb.seq}
    return validated(FencingToken, data, "request", field)


def requirements_to_proto(reqs: list[NodeSelectorRequirement]) -> list[mpb.NodeSelectorRequirement]:
    return [
        mpb.NodeSelectorRequirement(key=r.key, operator=str(r.operator), values=list(r.values))
        for r in reqs
    ]


def requirements_dicts(reqs: Any) -> list[dict[str, Any]]:
    return [{"key": r.key, "operator": r.operator, "values": list(r.values)} for r in reqs]


# ---- machines --------------------------------------------------------------------------------


def machine_to_proto(m: Machine) -> mpb.Machine:
    pb = mpb.Machine(
        id=m.id,
        state=state_number(m.state),  # type: ignore[arg-type]
        instance_type=m.instance_type,
        zone=m.zone,
        capacity_type=str(m.capacity_type),
        price_per_hour=m.price_per_hour,
        interruption_probability=m.interruption_probability,
        resources=mpb.Resources(
            cpu=m.resources.cpu, memory_gib=m.resources.memory_gib, gpu=m.resources.gpu
        ),
        labels=dict(m.labels),
        transition_started_unix=m.transition_started_unix,
        last_error=m.last_error,
        cluster=m.cluster or "",
        failed_from=state_number(m.failed_from),  # type: ignore[arg-type]
    )
    if m.host is not None:
        pb.host.CopyFrom(mpb.HostRef(provider=m.host.provider, ref=m.host.ref))
    if m.notice is not None:
        n = m.notice
        pb.notice.CopyFrom(
            mpb.Notice(kind=str(n.kind), deadline_unix=n.deadline_unix, detail=n.detail)
        )
    return pb


def machine_dict(pb: mpb.Machine) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": pb.id,
        "state": state_name(pb.state),
        "instance_type": pb.instance_type,
        "zone": pb.zone,
        "capacity_type": pb.capacity_type,
        "price_per_hour": pb.price_per_hour,
        "interruption_probability": pb.interruption_probability,
        "resources": {
            "cpu": pb.resources.cpu,
            "memory_gib": pb.resources.memory_gib,
            "gpu": pb.resources.gpu,
        },
        "labels": dict(pb.labels),
        "transition_started_unix": pb.transition_started_unix,
        "last_error": pb.last_error,
        "cluster": pb.cluster or None,
        "failed_from": state_name(pb.failed_from),
    }
    if pb.HasField("host"):
        data["host"] = {"provider": pb.host.provider, "ref": pb.host.ref}
    if pb.HasField("notice"):
        n = pb.notice
        data["notice"] = {"kind": n.kind, "deadline_unix": n.deadline_unix, "detail": n.detail}
    return data


def machine_from_proto(pb: mpb.Machine, field: str = "machine") -> Machine:
    return validated(Machine, machine_dict(pb), "machine", field)


def ack_to_proto(ack: TransitionAck) -> ppb.TransitionAck:
    return ppb.TransitionAck(operation_id=ack.operation_id, machine=machine_to_proto(ack.machine))


def ack_from_proto(pb: ppb.TransitionAck, field: str = "") -> TransitionAck:
    if not pb.HasField("machine"):
        raise WireError("ack", [(f"{field}.machine" if field else "machine", "missing")])
    data = {"operation_id": pb.operation_id, "machine": machine_dict(pb.machine)}
    return validated(TransitionAck, data, "ack", field)


def list_filter_to_proto(f: ListFilter, page_token: str = "") -> ppb.ListFilter:
    return ppb.ListFilter(
        states=[state_number(s) for s in f.states],  # type: ignore[misc]
        zone=f.zone,
        instance_type=f.instance_type,
        max_results=f.max_results,
        page_token=page_token,
        noticed=f.noticed,
    )


def list_filter_from_proto(pb: ppb.ListFilter) -> ListFilter:
    data = {
        "states": [state_name(s) for s in pb.states],
        "zone": pb.zone,
        "instance_type": pb.instance_type,
        "max_results": pb.max_results,
        "noticed": pb.noticed,
    }
    return validated(ListFilter, data, "list filter")


# ---- operators -------------------------------------------------------------------------------


def bootstrap_request_to_proto(r: BootstrapRequest) -> opb.BootstrapRequest:
    return opb.BootstrapRequest(
        cluster=r.cluster,
        machine_id=r.machine_id,
        requirements=requirements_to_proto(r.requirements),
        labels=dict(r.labels),
    )


def bootstrap_request_from_proto(pb: opb.BootstrapRequest) -> BootstrapRequest:
    data = {
        "cluster": pb.cluster,
        "machine_id": pb.machine_id,
        "requirements": requirements_dicts(pb.requirements),
        "labels": dict(pb.labels),
    }
    return validated(BootstrapRequest, data, "bootstrap request")


def blob_to_proto(b: BootstrapBlob) -> ppb.BootstrapBlob:
    return ppb.BootstrapBlob(user_data=b.user_data, ttl_seconds=b.ttl_seconds)


def blob_from_proto(pb: ppb.BootstrapBlob, field: str = "blob") -> BootstrapBlob:
    try:
        return BootstrapBlob(user_data=bytes(pb.user_data), ttl_seconds=pb.ttl_seconds)
    except ValidationError as err:
        problems = [
            (".".join((field, *(str(p) for p in e["loc"]))), e["msg"]) for e in err.errors()
        ]
        raise WireError("bootstrap blob", problems) from None


def update_to_proto(u: OperatorUpdate) -> opb.OperatorUpdate:
    return opb.OperatorUpdate(
        cluster=u.cluster,
        upcoming=[
            opb.UpcomingNode(machine_id=n.machine_id, instance_type=n.instance_type)
            for n in u.upcoming
        ],
        reclaims=[
            opb.Reclaim(machine_id=r.machine_id, grace_seconds=r.grace_seconds)
            for r in u.reclaims
        ],
        available=dict(u.available),
    )


def update_from_proto(pb: opb.OperatorUpdate) -> OperatorUpdate:
    data = {
        "cluster": pb.cluster,
        "upcoming": [
            {"machine_id": n.machine_id, "instance_type": n.instance_type} for n in pb.upcoming
        ],
        "reclaims": [
            {"machine_id": r.machine_id, "grace_seconds": r.grace_seconds} for r in pb.reclaims
        ],
        "available": dict(pb.available),
    }
    return validated(OperatorUpdate, data, "operator update")


# ---- roll-ups --------------------------------------------------------------------------------


def rollup_dict(pb: rpb.ClusterCapacityNeeds) -> dict[str, Any]:
    needs = []
    for n in pb.needs:
        need: dict[str, Any] = {
            "requirements": requirements_dicts(n.requirements),
            "resources": {
                "cpu": n.resources.cpu,
                "memory_gib": n.resources.memory_gib,
                "gpu": n.resources.gpu,
            },
            "priority": n.priority,
            "count": n.count,
            "spread": [{"key": s.key, "max_skew": s.max_skew or 1} for s in n.spread],
            "interruption_penalty": n.interruption_penalty,
            "reclamation_penalty": n.reclamation_penalty,
        }
        if n.HasField("same"):
            need["same"] = n.same
        if n.HasField("drain_seconds"):
            need["drain_seconds"] = n.drain_seconds
        needs.append(need)
    data: dict[str, Any] = {"cluster": pb.cluster, "generation": pb.generation, "needs": needs}
    if pb.HasField("health"):
        data["health"] = {"machine_ids": list(pb.health.machine_ids)}
    if pb.HasField("disruption"):
        data["disruption"] = disruption_dict(pb.disruption)
    return data


def disruption_dict(pb: rpb.Disruption) -> dict[str, Any]:
    """A roll-up's `disruption` as the model reads it: a budget's empty schedule and zero
    duration are unset, so "both or neither" judges what the sender set."""
    budgets = []
    for b in pb.budgets:
        budget: dict[str, Any] = {"machines": b.machines, "reasons": list(b.reasons)}
        if b.schedule:
            budget["schedule"] = b.schedule
        if b.duration_seconds != 0:
            budget["duration_seconds"] = b.duration_seconds
        budgets.append(budget)
    marks = [{"machine_id": m.machine_id, "until": m.until} for m in pb.do_not_disrupt]
    out: dict[str, Any] = {"budgets": budgets, "do_not_disrupt": marks}
    if pb.max_unhealthy:
        out["max_unhealthy"] = pb.max_unhealthy
    return out


def rollup_from_proto(pb: rpb.ClusterCapacityNeeds) -> ClusterCapacityNeeds:
    return validated(ClusterCapacityNeeds, rollup_dict(pb), "roll-up")


def rollup_to_proto(r: ClusterCapacityNeeds) -> rpb.ClusterCapacityNeeds:
    pb = rpb.ClusterCapacityNeeds(cluster=r.cluster, generation=r.generation)
    for n in r.needs:
        need = pb.needs.add(
            requirements=requirements_to_proto(n.requirements),
            resources=mpb.Resources(
                cpu=n.resources.cpu, memory_gib=n.resources.memory_gib, gpu=n.resources.gpu
            ),
            priority=n.priority,
            count=n.count,
            spread=[rpb.TopologySpread(key=s.key, max_skew=s.max_skew) for s in n.spread],
            interruption_penalty=n.interruption_penalty,
            reclamation_penalty=n.reclamation_penalty,
        )
        if n.same is not None:
            need.same = n.same
        if n.drain_seconds is not None:
            need.drain_seconds = n.drain_seconds
    if r.health is not None:
        pb.health.CopyFrom(rpb.NodeHealth(machine_ids=list(r.health.machine_ids)))
    if r.disruption is not None:
        pb.disruption.CopyFrom(disruption_to_proto(r.disruption))
    return pb


def disruption_to_proto(d: Disruption) -> rpb.Disruption:
    return rpb.Disruption(
        budgets=[
            rpb.DisruptionBudget(
                machines=b.machines,
                reasons=[str(r) for r in b.reasons],
                schedule=b.schedule or "",
                duration_seconds=b.duration_seconds or 0.0,
            )
            for b in d.budgets
        ],
        do_not_disrupt=[
            rpb.DoNotDisrupt(machine_id=m.machine_id, until=m.until) for m in d.do_not_disrupt
        ],
        max_unhealthy=d.max_unhealthy or "",
    )
