"""The actions a reference cycle emits for the machines it decided on: a configure for an idle
machine, creates for speculative ones (in the policy's batches), a drain for a preemption."""

from __future__ import annotations

from ...cost import drain_grace_period
from ...models import ConfigureAction, CreateAction, DrainAction, DrainReason
from ...needs import Need
from ...policy import Policy
from ..decision import Decision, Preemption
from .fleet import Rec


def configure(need: Need, m: Rec) -> ConfigureAction:
    """Configure idle machine `m` for `need`."""
    return ConfigureAction(
        provider=m.profile.provider,
        machine_id=m.id,
        cluster=need.cluster,
        need=need.key,
        requirements=list(need.requirements),
        priority=need.priority,
    )


def create(
    creates: dict[tuple[str, str], list[Rec]],
    holder: dict[int, Need],
    policy: Policy,
    out: Decision,
) -> None:
    """Create actions for speculative machines assigned to a need, per (provider, need)."""
    for (provider, _), recs in creates.items():
        if not recs:
            continue
        need = holder[recs[0].ordinal]
        for i in range(0, len(recs), policy.create_batch):
            batch = recs[i : i + policy.create_batch]
            out.actions.append(
                CreateAction(
                    provider=provider,
                    machine_ids=[m.id for m in batch],
                    cluster=need.cluster,
                    need=need.key,
                    requirements=list(need.requirements),
                    priority=need.priority,
                )
            )


def preempt(
    m: Rec, h: Need, need: Need, preempted: set[int], out: Decision, for_cost: bool = False
) -> None:
    """`m`, held by `h`, drains for `need` with the grace of their priority gap (`for_cost`:
    displaced for the fleet's cost)."""
    preempted.add(m.ordinal)
    grace = drain_grace_period(need.priority, h.priority)
    out.actions.append(
        DrainAction(
            provider=m.profile.provider,
            machine_id=m.id,
            cluster=m.cluster or "",
            grace_seconds=grace,
            reason=DrainReason.PREEMPT,
            preemptor_cluster=need.cluster,
            preemptor_priority=need.priority,
            victim_priority=h.priority,
        )
    )
    out.preemptions.append(
        Preemption(m.id, h.cluster, h.priority, need.cluster, need.priority, grace, for_cost)
    )
