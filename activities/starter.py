"""Starting transition workflows from an activity: idempotent and detached from the shard's run.

A child workflow would not survive the shard's continue-as-new; a workflow started here with
`USE_EXISTING` is the same workflow however often the start is retried (seed §7 idempotency).
"""

from __future__ import annotations

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
    machines = t.machine_ids[0] if len(t.machine_ids) == 1 else f"{len(t.machine_ids)} machines"
    where = f" for {t.cluster}" if t.cluster else ""
    why = f" ({t.reason})" if t.reason else ""
    grace = f", grace {t.grace_seconds:g} s" if t.transition.value == "drain" else ""
    return f"{t.transition.value} {machines}{where} on {t.provider}{grace}{why}"


async def start_transition(client: Client, t: TransitionInput) -> WorkflowHandle:
    """Start (or find, if already started) the workflow of one transition."""
    return await client.start_workflow(
        "MachineTransition",
        t,
        id=transition_workflow_id(t.machine_ids[0], t.transition, t.token),
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
        static_summary=summary(t),
        result_type=TransitionResult,
    )


class StarterActivities:
    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name="start_transitions")
    async def start_transitions(self, transitions: list[TransitionInput]) -> list[str]:
        return [(await start_transition(self.client, t)).id for t in transitions]
