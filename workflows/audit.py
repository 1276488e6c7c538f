"""`bigfleet audit`: every provider's listing against every shard's holdings (issue 9).

The `FleetAudit` workflow (short-lived, on the shard task queue) runs `provider_audit` on each
provider's read queue, where the provider's listing is at hand (the simulated providers live
only in the `providers` worker); that activity reads the shards by queries, page by page, and
returns only what disagrees — counts, and at most `limit` examples with the provider's records
— never a listing. `repair` is the coordinator's side of `bigfleet audit --repair`: it turns a
report into fenced instructions (`adopt`, `disown`, `observe_records`) sent through the
`shard_update` activity with the coordinator's term and fresh sequence numbers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.audit_wire import (
        EXAMPLES_MAX,
        AuditRead,
        AuditReport,
        AuditScope,
    )
    from activities.wire import (
        Instruction,
        MachinePage,
        ShardCall,
        provider_task_queue,
    )
    from bigfleet.audit import KINDS
    from bigfleet.coordinator import Coordinator
    from bigfleet.models import Machine, MachineState
    from bigfleet.states import STABLE
    from workflows.guard import NoSignals
    from workflows.sagas import STEP

S = MachineState
SKIPPED_SHOWN = 100  # machines a repair result names as not repaired
ADOPT_CHUNK = 200  # machine records an instruction carries (far below the 2 MB payload limit)


def merge(reports: list[AuditReport], scope: AuditScope) -> AuditReport:
    """One report of the per-provider ones, with at most `scope.limit` examples."""
    out = AuditReport(
        providers=list(scope.providers), shards=list(scope.shards),
        not_running=list(scope.not_running),
    )
    machines: list[Machine] = []
    for r in reports:
        out.listed += r.listed
        out.held += r.held
        for key, n in r.counts.items():
            out.counts[key] = out.counts.get(key, 0) + n
        for key, n in r.configured.items():
            out.configured[key] = out.configured.get(key, 0) + n
        room = scope.limit - len(out.findings)
        kept = r.findings[: max(0, room)]
        out.truncated |= r.truncated or len(kept) < len(r.findings)
        out.findings += kept
        ids = {f.machine_id for f in kept}
        machines += [m for m in r.machines.machines() if m.id in ids]
    out.machines = MachinePage.of(machines)
    return out


@workflow.defn(name="FleetAudit")
class FleetAuditWorkflow(NoSignals):
    """Workflow `FleetAudit`: one audit of every provider against every shard."""
    @workflow.run
    async def run(self, scope: AuditScope) -> AuditReport:
        """Audit each provider in `scope` on its own queue and merge what disagrees."""
        now = workflow.now().timestamp()
        workflow.set_current_details(
            f"auditing {len(scope.providers)} provider(s) against shards {scope.shards}"
        )
        reports = await asyncio.gather(
            *(
                workflow.execute_activity(
                    "provider_audit",
                    AuditRead(**scope.model_dump(), provider=p, now=now),
                    task_queue=provider_task_queue(p) + "-read",
                    result_type=AuditReport,
                    start_to_close_timeout=timedelta(minutes=10),
                    heartbeat_timeout=timedelta(minutes=1),
                    retry_policy=RetryPolicy(
                        initial_interval=timedelta(seconds=1), maximum_attempts=3
                    ),
                )
                for p in scope.providers
            )
        )
        return merge(list(reports), scope)


# ---- repair (the coordinator's side) ------------------------------------------------------------


def check_repair(report: AuditReport, membership: Mapping[str, Any] | None = None) -> None:
    """The `repair` update's validator: a bounded report, of running shards only, and no split
    or merge running (its machines are nobody's between a hand-out and a take-in)."""
    if membership:
        raise ValueError(
            f"repair: a split or merge is running ({sorted(membership)}): audit again after it"
        )
    if not report.findings:
        raise ValueError("repair: the report has no findings: nothing to repair")
    if len(report.findings) > EXAMPLES_MAX or len(report.machines.rows) > EXAMPLES_MAX:
        raise ValueError(
            f"repair: at most {EXAMPLES_MAX} findings a time, got {len(report.findings)} "
            f"findings and {len(report.machines.rows)} records"
        )
    if report.not_running:
        raise ValueError(
            f"repair: shards {report.not_running} are not running; the coordinator revives "
            "them (or `bigfleet shard revive N`): audit again once they run"
        )
    bad = sorted({f.kind for f in report.findings} - set(KINDS))
    if bad:
        raise ValueError(f"repair: unknown kinds of finding {bad}; expected {list(KINDS)}")


# Over 60 lines: one finding kind after another (orphans, doubles, mismatches,
# unlisted), each a few lines; the order of the kinds is the order repairs run in.
def plan_repair(
    c: Coordinator, report: AuditReport, busy: Collection[str] = ()
) -> tuple[dict[tuple[int, str], list[Any]], list[list[str]]]:
    """(shard, update) → machines or ids, and [machine, why not] for what is left alone.
    Machines of a running saga (`busy`) are its own: between its release and adopt they are
    nobody's, and adopting them here would make them two shards' once it adopts them.

    - owned by no shard: a machine configured for a cluster goes to the cluster's shard (the
      coordinator's assignment); any other stable one to the shard the assignment rule gives;
      one in a transition at its provider is left (audit again once it settled);
    - owned by several: the cluster's shard keeps it (else the holder that has it for the
      provider's cluster, else the rule's shard, else the lowest); the others `disown` it, and
      the keeper observes the provider's record if it sees it otherwise;
    - a state or cluster that differs: the holder observes the provider's record;
    - held but listed by no provider: every holder disowns it.
    """
    records = {m.id: m for m in report.machines.machines()}
    members = [s for s in c.shards if s not in c.retiring]
    work: dict[tuple[int, str], list[Any]] = {}
    skipped: list[list[str]] = []

    def member(shard: int | None) -> int | None:
        return shard if shard is not None and shard in members else None

    def add(shard: int, update: str, item: Any) -> None:
        work.setdefault((shard, update), []).append(item)

    for f in report.findings:
        m = records.get(f.machine_id)
        if f.machine_id in busy:
            skipped.append([f.machine_id, "in a running saga: audit again once it ended"])
            continue
        if f.kind == "unlisted" or (f.kind == "double" and m is None):
            for h in f.holders:
                add(h.shard, "disown", f.machine_id)
            continue
        if m is None:
            skipped.append([f.machine_id, "no provider record in the report"])
            continue
        if m.state not in STABLE:
            skipped.append([f.machine_id, f"{m.state.value} at its provider: audit again later"])
            continue
        by_cluster = member(c.clusters.get(m.cluster)) if m.cluster else None
        if f.kind == "orphan":
            target = by_cluster if by_cluster is not None else member(f.rule_shard)
            if target is None:
                skipped.append([f.machine_id, "no running shard to take it"])
            else:
                add(target, "adopt", m)
        elif f.kind == "double":
            holders = sorted(h.shard for h in f.holders)
            same = [h.shard for h in f.holders if m.cluster and h.cluster == m.cluster]
            keep = next(
                s for s in (by_cluster, *same, f.rule_shard, holders[0]) if s in holders
            )
            for h in f.holders:
                if h.shard != keep:
                    add(h.shard, "disown", f.machine_id)
                elif h.state != m.state.value or h.cluster != m.cluster:
                    add(keep, "observe_records", m)
        else:  # mismatch
            for h in f.holders:
                add(h.shard, "observe_records", m)
    return work, skipped


async def repair(
    c: Coordinator, report: AuditReport, max_share: float, sagas: Mapping[str, Any]
) -> dict[str, Any]:
    """Carry out `plan_repair` with fenced instructions: every disown first (within each shard's
    share limit a step), then adoptions, then observations. A refused step is reported, the
    rest go on. Runs inside the coordinator's `repair` update; `sagas` are its sagas."""
    busy = {
        mid for saga in sagas.values() if saga["done_at"] is None for mid in saga["machine_ids"]
    }
    work, skipped = plan_repair(c, report, busy)
    done: dict[str, dict[str, int]] = {"disown": {}, "adopt": {}, "observe_records": {}}
    refused: list[dict[str, Any]] = []
    order = {"disown": 0, "adopt": 1, "observe_records": 2}
    for (shard, update), items in sorted(work.items(), key=lambda kv: (order[kv[0][1]], kv[0])):
        chunk = ADOPT_CHUNK
        if update == "disown":
            size = c.reports[shard].size if shard in c.reports else 0
            chunk = max(1, min(ADOPT_CHUNK, int(size * max_share)))
        for i in range(0, len(items), chunk):
            part = items[i : i + chunk]
            machines = [m for m in part if isinstance(m, Machine)]
            ids = [m.id for m in machines] or [mid for mid in part if isinstance(mid, str)]
            _, seq = c.next_token()
            ins = Instruction(term=c.term, seq=seq, machine_ids=ids, machines=machines)
            try:
                out = await workflow.execute_activity(
                    "shard_update", ShardCall(shard=shard, update=update, instruction=ins), **STEP
                )
            except ActivityError as err:
                refused.append(
                    {"shard": shard, "update": update, "machines": ids[:10],
                     "error": str(err.cause or err)}
                )
                continue
            # What the shard did: the ids it disowned, how many it adopted or changed.
            n = len(out) if isinstance(out, list) else int(out or 0)
            key = str(shard)
            done[update][key] = done[update].get(key, 0) + n
    return {
        "term": c.term,
        "adopted": done["adopt"],
        "disowned": done["disown"],
        "observed": done["observe_records"],
        "skipped": skipped[:SKIPPED_SHOWN],
        "skipped_count": len(skipped),
        "refused": refused,
    }
