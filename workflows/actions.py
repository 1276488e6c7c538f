"""The engine's actions as machine transition workflow inputs (design §5, §7): which provider,
which fencing token, how long the transition may take; and their results folded back. A
helper object of the shard workflow, handed the shard it serves and how that shard runs."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.wire import ShardConfig, TransitionInput, TransitionResult
    from bigfleet.models import (
        Action,
        CreateAction,
        DeleteAction,
        DrainAction,
        MachineState,
        Transition,
    )
    from bigfleet.shard import REFUSAL_BACKOFF_SECONDS, Shard
    from bigfleet.states import IllegalTransition

S = MachineState
T = Transition
DEFAULT_TIMEOUT = 900.0
DRAIN_WATCH_MAX = 600.0  # how long a drain is watched beyond its grace period
# Runs begun before wait 5 minutes after each refused bootstrap, and never escalate it.
REFUSAL_STREAKS = "refusal-streaks"
# Batches decided from here on are named as batches (`batch-drain-web-…-x4-…`); runs begun
# before name them after their first machine, as their starts already recorded did.
BATCH_NAMES = "batch-names"


class TransitionInputs:
    """Turns the engine's actions into transition workflow inputs (provider, fencing token,
    timeout, batch name) and folds their results back into the shard."""
    def __init__(self, shard: Shard, cfg: ShardConfig) -> None:
        self.shard = shard
        self.cfg = cfg

    def of_action(self, a: Action) -> TransitionInput | None:
        """The workflow input of an action; None for an action that starts no transition (a
        verify is answered by the shard itself)."""
        if isinstance(a, CreateAction):
            return self.make(
                T.CREATE,
                a.machine_ids,
                cluster=a.cluster,
                need=a.need,
                priority=a.priority,
                requirements=list(a.requirements),
            )
        if a.kind == "configure":
            return self.make(
                T.CONFIGURE,
                [a.machine_id],
                cluster=a.cluster,
                need=a.need,
                priority=a.priority,
                requirements=list(a.requirements),
            )
        if isinstance(a, DrainAction):
            return self.make(
                T.DRAIN,
                [a.machine_id],
                cluster=a.cluster,
                grace_seconds=a.grace_seconds,
                force=a.force,
                reason=a.reason.value,  # reasons travel as their string values
                # The band a preemption serves: its place in the outbox (workflows/outbox.py).
                priority=a.preemptor_priority or 0,
            )
        if isinstance(a, DeleteAction):
            return self.make(T.DELETE, [a.machine_id], reason=a.reason.value)
        return None

    def make(
        self, transition: Transition, machine_ids: list[str], **fields: Any
    ) -> TransitionInput:
        """A transition of machines this shard owns, with the next fencing token."""
        inv = self.shard.inventory
        profile = inv.profile_of(inv.row(machine_ids[0]))
        timeout = self.shard.policy.transition_timeouts().get(
            {T.CREATE: S.CREATING, T.CONFIGURE: S.CONFIGURING, T.DRAIN: S.DRAINING}.get(
                transition, S.DELETING
            ),
            DEFAULT_TIMEOUT,
        )
        if transition is T.DRAIN:
            timeout = min(timeout, DRAIN_WATCH_MAX)
        return TransitionInput(
            shard=self.shard.id,
            transition=transition,
            machine_ids=machine_ids,
            provider=profile.provider,
            capacity_type=profile.capacity_type.value,
            token=self.shard.token(),
            timeout_seconds=timeout,
            poll_seconds=self.cfg.transition_poll_seconds,
            batch_name=workflow.patched(BATCH_NAMES),
            **fields,
        )

    def fold(self, results: list[TransitionResult], now: float) -> list[TransitionInput]:
        """Fold what transition workflows ended with into the shard; a machine created for a
        need is configured for that need's cluster right away (the inputs returned)."""
        follow: list[TransitionInput] = []
        for result in results:
            self._fences(result)
            self.shard.withdraw(result.unavailable)
            for m in result.machines:
                inv = self.shard.inventory
                row = inv.ids.find(m.id)
                destination = inv.cluster_of(row) if row >= 0 else None
                try:
                    self.shard.observe(m, now)
                except IllegalTransition as err:  # (a bug must not fail the workflow task)
                    workflow.logger.error("result of %s not folded in: %s", result.transition, err)
                    continue
                if result.refused and result.cluster:
                    if workflow.patched(REFUSAL_STREAKS):  # (runs begun before: 5 min each)
                        self.shard.refuse_again(
                            result.cluster, result.priority, result.refused, now
                        )
                    else:
                        self.shard.refuse(
                            result.cluster,
                            result.priority,
                            result.refused,
                            now + REFUSAL_BACKOFF_SECONDS,
                        )
                elif result.transition is T.CREATE and m.state is S.IDLE and destination:
                    self.shard.begin_configure(m.id, destination, now)
                    follow.append(
                        self.make(
                            T.CONFIGURE,
                            [m.id],
                            cluster=destination,
                            need=result.need,
                            priority=result.priority,
                            requirements=result.requirements,
                        )
                    )
        return follow


    def _fences(self, result: TransitionResult) -> None:
        """A refusal as stale goes to the shard's fence book (workflows/shard_fences.py acts
        on it); a result of any other call says its provider took the shard's epoch."""
        f = result.fenced
        if f is not None:  # (of a provider it has machines of: a name anyone may send is not)
            if self.shard.inventory.providers.get(f.provider) is not None:
                self.shard.fences.refused(f.provider, f.presented, f.kept, self.shard.epoch)
            return
        if not self.shard.fences or not result.machines:
            return
        inv = self.shard.inventory
        row = inv.ids.find(result.machines[0].id)
        if row >= 0:
            self.shard.fences.served(inv.profile_of(row).provider)


def batched(starts: list[TransitionInput], limits: dict[Transition, int]) -> list[TransitionInput]:
    """`starts` with the configures (or drains) that agree on everything but their machines
    merged, up to `limits[transition]` machines a workflow (`ShardConfig.configure_batch`,
    `drain_batch`), where the first of them stood; every other start as it was, in its place.
    Each machine keeps its own provider call (and a configure its own bootstrap:
    workflows/transition.py `_each`), but a Temporal server's work grows with workflows, not
    machines: one configure costs it about seven times a trivial workflow (docs/temporal.md).
    A merged start carries the newest fencing token of those it merges, so no machine's call
    is fenced off by a token older than one it was sent."""
    out: list[TransitionInput] = []
    open_: dict[tuple, TransitionInput] = {}
    for s in starts:
        limit = limits.get(s.transition, 1)
        if limit <= 1:
            out.append(s)
            continue
        key = (
            s.transition,
            s.provider,
            s.capacity_type,
            s.cluster,
            s.need,
            s.priority,
            s.grace_seconds,
            s.force,
            s.reason,
            s.timeout_seconds,
            s.poll_seconds,
            tuple((r.key, r.operator, tuple(r.values)) for r in s.requirements),
        )
        into = open_.get(key)
        if into is None or len(into.machine_ids) + len(s.machine_ids) > limit:
            open_[key] = into = s.model_copy(update={"machine_ids": list(s.machine_ids)})
            out.append(into)
            continue
        into.machine_ids += s.machine_ids
        if s.token.seq > into.token.seq:
            into.token = s.token
    return out
