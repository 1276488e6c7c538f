"""Continue-as-new for the shard workflow (`CarriesState`, mixed into workflows/shard.py): the
state a run hands the next (`bigfleet.shard_state.ShardState`), inline or through the snapshot
store, and how the next run takes it back; when a run is due to continue as new, and the
quiet cycles it waits through first.

`_carried` and `_restore` mirror each other field by field.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.wire import (
        AdoptCursor,
        ShardInput,
        SnapshotRef,
        TransitionInput,
        TransitionResult,
    )
    from bigfleet.inputs import Rejected, json_size, number
    from bigfleet.models import from_wire
    from bigfleet.shard_state import ShardState
    from bigfleet.snapshot import restore_shard, shard_state
    from workflows.guard import SMALL_PAYLOADS
    from workflows.instruction_steps import InstructionSteps
    from workflows.provider_sync import CARRY_NOTICES
    from workflows.shard_builds import BUILD_LOG, BuildMoves
    from workflows.shard_results import HISTORY_BYTES_REGARDLESS

CYCLE_ENDS = 64  # when the last cycles ran, kept for `status` (the intervals between them)
# Results and roll-ups a continue-as-new's input carries beside the state or its reference,
# under the server's payload limit (workers/dev/server.py BLOB_ERROR_BYTES: 600 KB since issue
# 44) with the state inline (at most `snapshot_inline_bytes`) or the reference; runs begun
# before carried up to LATE_INLINE_BYTES_BEFORE.
LATE_INLINE_BYTES = 150_000
LATE_INLINE_BYTES_BEFORE = 1_000_000
LATE_ROUNDS = 3  # writes of what arrives while the state is written, at most
# Quiet cycles a due continue-as-new waits through at most for what is out (`_quiet_first`).
QUIET_CYCLES = 10
RUN_GROWTH_BYTES = 6_000_000  # history a run's cycles add before it continues as new
RUN_GROWTH_EVENTS = 8_000  # or events (Temporal's own suggestion comes at 4 MB / 4 096)
# What arrived while the state was written: in the store, what is left to travel inline.
Late = tuple[SnapshotRef | None, list[TransitionResult], list[dict[str, Any]]]


def _taken(state: object) -> tuple[str, int]:
    """The last result taken, as the last run saved it (anyone may start a shard with any
    input: what is not a chain and a number is no result taken)."""
    if isinstance(state, list) and len(state) == 2:
        chain, after = state
        if isinstance(chain, str) and type(after) is int and after >= -1:
            return chain[:200], after
    return "", -1


def _late_inline_bytes() -> int:
    return LATE_INLINE_BYTES if workflow.patched(SMALL_PAYLOADS) else LATE_INLINE_BYTES_BEFORE


def _fits(results: list[TransitionResult], rollups: list[dict[str, Any]]) -> bool:
    """Whether these travel inline in a continue-as-new's input (LATE_INLINE_BYTES)."""
    size, most = json_size(rollups), _late_inline_bytes()
    for r in results:
        size += json_size(r.model_dump(mode="json"))
        if size > most:
            return False
    return size <= most


# Bytes the signals between two cycles may add to the history before the shard continues as
# new at once (`HistorySurge`): a thousand clusters' roll-ups of ~2 KB are 2 MB; a flood of
# refused signals of the largest payload the server takes (600 KB) passes it after 14, the
# server's 50 MB after 84. Runs begun before wait for their cycle.
SURGE_BYTES = 8_000_000


class CarriesState(BuildMoves):
    """How a shard run hands its state to the next, and takes it back."""

    # ---- the state, both ways -----------------------------------------------------------------

    def _carried(self) -> ShardState:
        """What this run hands the next: the shard's state, then the workflow's. Keys some
        runs did not carry stay out for them (`workflow.patched`, in the order they ran)."""
        mine = shard_state(self.shard)
        # Notices, repair and blocked drains (bigfleet/notices.py, blocked.py) are carried by
        # runs begun after them: a run begun before replays with a snapshot of its old size.
        if ("notices" in mine or "blocked" in mine) and not workflow.patched(CARRY_NOTICES):
            mine.pop("notices", None)
            mine.pop("blocked", None)
        return ShardState(
            **mine,
            **self.steps.state(),
            guard=self.guard.rejections.state(),
            owed_providers=sorted(self.providers.owed),
            # The last cycles' ends, so `status` shows the interval across the continue-as-new
            # (a benchmark sampling `status` every few seconds saw the old run's last cycles
            # only if it asked between them and the continue-as-new). Runs begun before: none.
            cycle_ends=(
                list(self.cycle_ends) if workflow.patched("cycle-ends-carried") else None
            ),
            # (Runs begun before acked takes: none.)
            taken=list(self.taken) if self.taken != ("", -1) else None,
            # (Runs begun before the bound: their state as it was.)
            in_flight=(
                self.outbox.state()
                if self.outbox.in_flight and workflow.patched("in-flight-bound")
                else None
            ),
            shadow=self.shadow.book.state() if self.cfg.shadow else None,
            # (Only a run that took a summary has one: `shard_pool.ASK_PATCH`.)
            pool_summary=self._summary_carried(),
            builds=list(self.build_log) or None,  # (workflows/shard_builds.py; when any)
        )

    def _restore(self, state: ShardState | None, joining: bool = False) -> None:
        """Take back what the last run handed over (`_carried`); None: a shard's first run."""
        if state is not None:
            restore_shard(state, self.shard)
            self.guard.rejections.absorb(state.guard)
            self.providers.owed = set(state.owed_providers)
            self.outbox.restore(state.in_flight)
            self.taken = _taken(state.taken)
            self._summary_restored(state.pool_summary)
            moves = state.builds if isinstance(state.builds, list) else []
            self.build_log = tuple(m for m in moves[-BUILD_LOG:] if isinstance(m, dict))
            ends = state.cycle_ends
            for t in ends[-CYCLE_ENDS:] if isinstance(ends, list) else []:
                try:  # (the last run's; anyone may start a shard with any input)
                    self.cycle_ends.append(number(t, "cycle_ends"))
                except Rejected:
                    pass
        self.steps = InstructionSteps(self.shard, self.cfg, self.inputs, state)
        if self.cfg.shadow:
            self.shadow.restore(state.shadow if state else None)
        self.steps.joining = self.steps.joining or joining

    # ---- handing over -------------------------------------------------------------------------

    async def _continue_as_new(self, adopting: AdoptCursor | None = None) -> None:
        """Hand the state to the next run: inline, or through the snapshot store. Returns only
        if the store could not be written (the run carries on; try again later)."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self.background:
            await self._empty_outbox()
        if self.cfg.record:  # (its recording's lines do not travel: written first)
            await self.recorder.flush()
        self._fold_results(workflow.now().timestamp())
        state = self._carried()
        # Results not folded yet travel in the snapshot too: up to `fold_per_cycle` machine
        # records wait, ~2.6 MB, past the 2 MB Temporal takes as a continue-as-new's input
        # (a shard at 100 000 machines failed every task on it). Runs begun before: inline.
        carried = list(self.results) if workflow.patched("results-in-snapshot") else []
        snapshot = None
        # Roll-ups waiting travel beside an inline state: counted with it (runs begun before
        # judged the state alone).
        beside = json_size(self.early_rollups) if workflow.patched(SMALL_PAYLOADS) else 0
        blob = self.store.encode(self._stored(state, carried).dump(), beside)
        if blob is not None:
            snapshot = await self._put_state(blob)
            if snapshot is None:
                return
        late = await self._late(snapshot, len(carried))
        if late is not None:
            self._hand_over(state, snapshot, late, adopting)

    async def _empty_outbox(self) -> None:
        """The outbox sends what the last cycle gave it, a chore ends, and the question of
        whose new clusters are is answered and applied, first (a run of one cycle must get
        something done); what it still holds travels as queued starts."""
        box, asking = self.outbox, self.new_clusters.asking
        box.holding = True  # (one wave at most: the rest travels in the snapshot)
        await workflow.wait_condition(self._settled)
        if asking is not None:
            await self.new_clusters.settle(wait=False)
        box.holding = False  # (if this run goes on: the store failed)
        self.pipeline = self.outbox.queued() + self.pipeline
        self.outbox.clear()

    def _stored(self, state: ShardState, carried: list[TransitionResult]) -> ShardState:
        """The state as the snapshot store keeps it: with the queued starts and `carried`."""
        return state.model_copy(
            update={
                "pipeline": [t.model_dump(mode="json") for t in self.pipeline],
                "results": [r.model_dump(mode="json") for r in carried] if carried else None,
            }
        )

    async def _put_state(self, blob: str) -> SnapshotRef | None:
        """Write the state to the store; None if that failed (this run goes on, its history
        a little longer, and what waited for the next run is applied here)."""
        # From here the state is written: signals wait in the next run's input, instructions
        # are told to retry.
        self.snapshotting = True
        try:
            return await self.store.put(blob)
        except ActivityError as err:
            self._note_failure("writing the snapshot", err)
            self.snapshotting = False
            self._apply_early_rollups()
            return None

    async def _late(self, snapshot: SnapshotRef | None, first: int) -> Late | None:
        """What arrived while the state was written (results from `first` on, roll-ups): in
        the store if need be (`_put_late`), and what travels inline. None if the store failed:
        this run goes on."""
        if snapshot is None:
            return None, self.results, self.early_rollups
        if not workflow.patched("late-in-snapshot"):
            return None, self.results[first:], self.early_rollups
        written = await self._put_late(first)
        if written is None:
            self.snapshotting = False
            self._apply_early_rollups()
        return written

    def _hand_over(
        self,
        state: ShardState,
        snapshot: SnapshotRef | None,
        late: Late,
        adopting: AdoptCursor | None,
    ) -> None:
        """Continue as new with the state (or its reference) and what travels beside it."""
        late_ref, results, rollups = late
        workflow.continue_as_new(
            # (A move to another build takes effect here: workflows/shard_builds.py.)
            task_queue=self.next_queue or None,
            arg=ShardInput(
                config=self.cfg,
                state=None if snapshot else state,
                snapshot=snapshot,
                # With a snapshot, the queued starts travel in it: they can be many.
                pipeline=[] if snapshot else self.pipeline,
                # What arrived while the snapshot was written (none if inline).
                rollups=rollups,
                results=results,
                late=late_ref,
                # A `revived` not yet acted on: the next run does it.
                restarted=self.revive,
                adopting=adopting,
            ),
        )

    async def _put_late(self, first: int) -> Late | None:
        """What arrived while the state was written (results from `first` on, roll-ups), in
        the store too when it would not fit a continue-as-new's input (Temporal refuses one over
        2 MB; a loaded server takes many seconds to take a big state): the reference, and what
        is left to travel inline. More arrives while that is written: each round writes all of
        it again under a new key, until the rest is small. None after LATE_ROUNDS, or if the
        store failed: the run goes on, everything still in memory."""
        ref: SnapshotRef | None = None
        results_done, rollups_done = first, 0
        for round_ in range(LATE_ROUNDS):
            results = self.results[results_done:]
            rollups = self.early_rollups[rollups_done:]
            if _fits(results, rollups):
                return ref, results, rollups
            upto, upto_rollups = len(self.results), len(self.early_rollups)
            blob = {
                "results": [r.model_dump(mode="json") for r in self.results[first:upto]],
                "rollups": self.early_rollups[:upto_rollups],
            }
            try:
                ref = await self.store.put(
                    json.dumps(blob, separators=(",", ":")), f"-late{round_}"
                )
            except ActivityError as err:
                self._note_failure("writing what arrived during the snapshot", err)
                return None
            results_done, rollups_done = upto, upto_rollups
        return None

    # ---- taking back --------------------------------------------------------------------------

    async def _load(self, ref: SnapshotRef, joining: bool, late: SnapshotRef | None) -> None:
        """The state the last run left in the snapshot store, with its queued starts, the
        results it had not folded, and what arrived while it was written (`late`)."""
        state = ShardState.model_validate(await self.store.get(ref))
        # Stored as JSON: read back as JSON (strict enums take "In", not only Operator.IN).
        queued = [from_wire(TransitionInput, t) for t in state.pipeline or []]
        waiting = [from_wire(TransitionResult, r) for r in state.results or []]
        if late is not None:
            extra = await self.store.get(late)
            waiting += [from_wire(TransitionResult, r) for r in extra.get("results", [])]
            self.early_rollups = list(extra.get("rollups", [])) + self.early_rollups
        self._restore(state, joining)
        self.pipeline = queued + self.pipeline
        self.results = waiting + self.results  # (then those that came during the write)
        self.restoring = False
        self._apply_early_rollups()

    def _apply_early_rollups(self) -> None:
        """The roll-ups that waited while the state moved, taken now."""
        early, self.early_rollups = self.early_rollups, []
        for raw in early:
            try:
                self._take_rollup(raw)
            except Rejected as err:  # (judged now as it would have been on arrival)
                self.guard.reject("rollup", str(err))

    def _settled(self) -> bool:
        """Nothing of the shard's own out that a continue-as-new waits for: the pump's wave,
        the chores, the question of whose new clusters are, and (with a mailbox) the take,
        report and forward. Any of them coming back during that task would make Temporal
        refuse it (UnhandledCommand), and the worker replay the whole run. Notices are not
        waited for: a loaded transition worker took 3-6 s to answer a wave, and one that
        answers during the short last task is rare."""
        pump, box, asking = self.pumping, self.outbox, self.new_clusters.asking
        outstanding = (self.collecting, self.reporting, self.forwarding) if self.mailbox else ()
        return (
            (pump is None or pump.done() or not box.busy())
            and (self.chores is None or self.chores.done())
            and (asking is None or asking.done())
            and all(f is None or f.done() for f in outstanding)
        )

    def _quiet_first(self) -> bool:
        """Whether a continue-as-new that is due, with something of the shard's still out,
        waits for it through quiet cycles: cycles that start nothing it would wait for (no take
        from the mailbox, no report, forward, question or chore, no wave of starts: those
        travel in the snapshot; notices still go). A quiet cycle comes once what is out has
        come back (`_settled`), or at its time if sooner; the continue-as-new follows the
        first one that ends with nothing out, or the QUIET_CYCLES-th. Waiting after the
        cycle instead made most of a 3-4 s interval around each continue-as-new: a take or a
        wave of starts still out took 1.6-2.6 s to come back on a loaded server (issue 32).
        Runs begun before continue as new at once."""
        return self.mailbox and workflow.patched("quiet-cycle-before-continue")

    def _wake(self) -> None:
        """A flood (`HistorySurge`): the next cycle comes at once, and the run continues as new
        after it without quiet cycles first (`_close_or_continue`)."""
        self.woken = True

    def _history_full(self) -> bool:
        """Time to continue as new: Temporal suggests it (past a few MB or thousands of
        events), and the cycles of this run added RUN_GROWTH_BYTES or RUN_GROWTH_EVENTS to
        what it started with; or its history passed HISTORY_BYTES_REGARDLESS. A big shard's
        state, read back from the snapshot store, alone passes the suggestion's threshold:
        judged by the suggestion alone it continued as new after every cycle, and spent its
        time writing and reading its state (issue 32). Runs begun before replay as they ran."""
        info = workflow.info()
        suggested = info.is_continue_as_new_suggested()
        if not workflow.patched("history-past-the-state"):
            return suggested
        size, length = info.get_current_history_size(), info.get_current_history_length()
        grown = size - self.base_history[0] > RUN_GROWTH_BYTES
        longer = length - self.base_history[1] > RUN_GROWTH_EVENTS
        return (suggested and (grown or longer)) or size > HISTORY_BYTES_REGARDLESS

    def _replay_budget_spent(self, machine_cycles: int) -> bool:
        """The run's cycles have decided over `replay_machine_cycles` machines: replaying it
        would take a worker that lost it from its cache too long (SHARD_TASK_TIMEOUT)."""
        return machine_cycles > self.cfg.replay_machine_cycles and workflow.patched(
            "replay-budget"
        )

