"""Starting transition workflows from an activity: idempotent and detached from the shard's run.

A child workflow would not survive the shard's continue-as-new; a workflow started here with
`USE_EXISTING` is the same workflow however often the start is retried (design §7 idempotency).
"""

from __future__ import annotations

import asyncio
import json

from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)

from activities.wire import (
    CLUSTER,
    MACHINE_IDS,
    PROVIDER,
    SHARD,
    TRANSITION,
    TRANSITION_TASK_QUEUE,
    TransitionInput,
    TransitionResult,
    transition_workflow_id,
)


def summary(t: TransitionInput) -> str:
    """The workflow's one-line static summary (the Temporal UI's list, `machine history`)."""
    machines = t.machine_ids[0] if len(t.machine_ids) == 1 else f"{len(t.machine_ids)} machines"
    where = f" for {t.cluster}" if t.cluster else ""
    why = f" ({t.reason})" if t.reason else ""
    grace = f", grace {t.grace_seconds:g} s" if t.transition.value == "drain" else ""
    forced = " forced" if t.force else ""
    return f"{t.transition.value}{forced} {machines}{where} on {t.provider}{grace}{why}"


def memo(t: TransitionInput) -> dict[str, object]:
    """What `bigfleet machine history` shows of a transition besides its search attributes,
    read back with the workflow list (no call per workflow): its summary, and a drain's grace
    and force, and its reason (a drain's or a delete's). Memo, not search attributes: nobody
    searches by them, and a namespace's custom search attributes are few."""
    out: dict[str, object] = {"summary": summary(t)}
    if t.transition.value == "drain":
        out["grace_seconds"] = t.grace_seconds
        out["force"] = t.force
    if t.reason:
        out["reason"] = t.reason
    return out


# Temporal refuses a search attribute value over 2 KB (`limit.searchAttributeValueSize`, 2048
# bytes by default, on the dev server too): a batched create of 64 machines lists ~3 KB of ids.
MACHINE_IDS_BYTES = 1800
# Starts of one batch in flight at once (the shard runs its batches side by side too).
CONCURRENT_STARTS = 32


def searchable(t: TransitionInput) -> list[TransitionInput]:
    """`t`, or a batched `t` cut into transitions whose machine ids fit one search attribute
    value (so `BigFleetMachineIds = "<id>"` keeps finding every machine's workflows). Same
    input, same cut: a retried start finds the same workflows."""
    parts: list[list[str]] = [[]]
    size = 2  # the JSON list's brackets
    for mid in t.machine_ids:
        cost = len(json.dumps(mid)) + 1
        if parts[-1] and size + cost > MACHINE_IDS_BYTES:
            parts.append([])
            size = 2
        parts[-1].append(mid)
        size += cost
    if len(parts) == 1:
        return [t]
    return [t.model_copy(update={"machine_ids": ids}) for ids in parts]


async def start_transition(client: Client, t: TransitionInput) -> WorkflowHandle:
    """Start (or find, if already started) the workflow of one transition."""
    return await client.start_workflow(
        "MachineTransition",
        t,
        id=transition_workflow_id(t),
        task_queue=TRANSITION_TASK_QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(MACHINE_IDS, t.machine_ids),
                SearchAttributePair(SHARD, str(t.shard)),
                SearchAttributePair(CLUSTER, t.cluster or ""),
                SearchAttributePair(PROVIDER, t.provider),
                SearchAttributePair(TRANSITION, t.transition.value),
            ]
        ),
        memo=memo(t),
        static_summary=summary(t),
        result_type=TransitionResult,
    )


class StarterActivities:
    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name="start_transitions")
    async def start_transitions(self, transitions: list[TransitionInput]) -> list[str]:
        """Start a batch, `CONCURRENT_STARTS` at a time: each start is a round trip to the
        server, and one after another they bound how fast a shard's decisions take effect."""
        gate = asyncio.Semaphore(CONCURRENT_STARTS)

        async def start(t: TransitionInput) -> str:
            async with gate:
                return (await start_transition(self.client, t)).id

        return list(await asyncio.gather(*(start(p) for t in transitions for p in searchable(t))))
