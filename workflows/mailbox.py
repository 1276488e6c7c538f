"""A shard's mailbox: where its transition workflows leave their results, and where the shard
takes them from, a batch each cycle (issue 32).

Why not signal the shard: Temporal refuses a continue-as-new while events the workflow task
did not see are waiting (`WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND`), and the worker then
evicts the run and replays it whole. A shard of 100 000 machines takes seconds to replay, ten
results a second arrived during each replay, and one continue-as-new took 42 s of failed
tasks, replays and forced closes (docs/temporal.md, "The cycle that never waits"). Results now
wait here; the shard takes them with an activity of its own, which it lets finish before it
continues as new. The mailbox continues as new too, but it is small: a replay is a few
hundred results, and those that wait travel in its input.

A result stays until the shard says it has it. Results are numbered as they come, and each take
(`take_after`) names the last one the shard received: those go, the ones after it are answered.
A take whose answer was lost (its worker killed as the answer came back) is answered again by the
next. A take that emptied the mailbox as it answered lost such a batch, and its machines stayed
in their transition in the shard for good. Runs of the shard begun before still use `take`.

Bounded: it holds at most PENDING_BYTES of results (a shard that stopped taking them loses the
rest, and reconciles with its providers), a batch taken is at most TAKE_BYTES, and a run ends
past RUN_EVENTS events or RUN_BYTES of history. Anyone with access to the namespace can signal
it or take from it, as they can signal the shard itself; a take that does not name the
mailbox's chain lets nothing go.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from activities.wire import MailboxInput, MailboxTake, TakenResults, TransitionResult
    from bigfleet.inputs import Rejected, json_size
    from workflows.guard import (
        NO_ARGUMENT,
        SMALL_PAYLOADS,
        Guard,
        TakesSignals,
        accepts,
        guarded,
    )

MAX_MACHINES = 64  # machines a result may carry (a batched create's)
# Results held for the shard (its input, if it continues as new), and those one `take` returns
# (an update's result): payloads under the server's limit (workers/dev/server.py
# BLOB_ERROR_BYTES: 600 KB since issue 44). Runs begun before: the _BEFORE bounds.
PENDING_BYTES = 400_000
TAKE_BYTES = 400_000
PENDING_BYTES_BEFORE = TAKE_BYTES_BEFORE = 1_500_000
RUN_EVENTS = 2_000  # a run continues as new past this many events
RUN_BYTES = 4_000_000  # or this much history


@workflow.defn(name="ShardMailbox")
class ShardMailbox(TakesSignals):
    """Workflow `ShardMailbox`, one per shard: holds the results of the shard's transition
    workflows, numbered, until the shard says it has them (see the module)."""
    @workflow.init
    def __init__(self, inp: MailboxInput) -> None:
        self.guard = Guard(self, "ShardMailbox")
        small = workflow.patched(SMALL_PAYLOADS)
        self.pending_max = PENDING_BYTES if small else PENDING_BYTES_BEFORE
        self.take_max = TAKE_BYTES if small else TAKE_BYTES_BEFORE
        self.results: list[tuple[int, TransitionResult]] = []
        self.held = 0
        # Results are numbered in the order they came: results[0] is number `first`, in the
        # mailbox `chain` (its first run: a mailbox started again numbers from 0 again).
        self.first = inp.first
        self.chain = inp.chain or workflow.info().run_id
        for result in inp.results[:10_000]:  # (what the last run held: within the bounds)
            try:
                self._hold(result)
            except Rejected as err:  # (an input someone else made: the rest is dropped)
                self.guard.reject("transition_done", str(err))
                break

    def _hold(self, result: TransitionResult) -> None:
        size = json_size(result.model_dump(mode="json"))
        if self.held + size > self.pending_max:
            raise Rejected(
                f"transition_done: the mailbox already holds {self.held} bytes of results "
                "(its shard is not taking them); the shard's reconcile finds this one"
            )
        self.results.append((size, result))
        self.held += size

    @accepts(TransitionResult)
    def transition_done(self, result: TransitionResult) -> None:
        """A transition's result, held until the shard takes it."""
        count = len(result.machines) + (len(result.page.rows) if result.page else 0)
        if count > MAX_MACHINES:
            raise Rejected(
                f"transition_done: machines: {count} records, a transition has at most "
                f"{MAX_MACHINES}"
            )
        self._hold(result)

    @workflow.update
    @guarded
    def take(self, raw: RawValue = NO_ARGUMENT) -> list[TransitionResult]:
        """The results held, oldest first, up to TAKE_BYTES (the rest stay for the next
        take); they leave the mailbox."""
        out = self._batch()
        self._let_go(len(out))
        return out

    def _batch(self) -> list[TransitionResult]:
        """The oldest results held, up to TAKE_BYTES (one at least)."""
        taken, size = 0, 0
        for item_size, _ in self.results:
            if taken and size + item_size > self.take_max:
                break
            taken, size = taken + 1, size + item_size
        return [r for _, r in self.results[:taken]]

    def _let_go(self, n: int) -> None:
        self.held -= sum(size for size, _ in self.results[:n])
        del self.results[:n]
        self.first += n

    @workflow.update
    @guarded
    def take_after(self, raw: RawValue = NO_ARGUMENT) -> TakenResults:
        """The shard's take (`MailboxTake`): the results it has (up to `after`, of this chain)
        go, and those that follow are answered, oldest first, up to TAKE_BYTES. They stay until
        a take says it has them: a batch whose answer was lost is answered again."""
        ask: MailboxTake = self.guard.arg(raw, MailboxTake, "take_after")
        if ask.chain == self.chain:
            self._let_go(max(0, min(ask.after - self.first + 1, len(self.results))))
        return TakenResults(results=self._batch(), first=self.first, chain=self.chain)

    @take_after.validator
    def _take_after_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self.guard.arg(raw, MailboxTake, "take_after")

    @take.validator
    def _take_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        if raw is not NO_ARGUMENT and raw.payload.data:
            self.guard.count("take")
            raise Rejected("take: takes no argument")

    @workflow.query
    def held_results(self) -> dict[str, Any]:
        """How many results wait, and their bytes."""
        return {"results": len(self.results), "bytes": self.held}

    @workflow.run
    async def run(self, inp: MailboxInput) -> None:
        """Serve until the run's history is large, then continue as new with what is held."""
        info = workflow.info()
        await workflow.wait_condition(
            lambda: info.get_current_history_length() > RUN_EVENTS
            or info.get_current_history_size() > RUN_BYTES
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(
            MailboxInput(
                shard=inp.shard,
                results=[r for _, r in self.results],
                first=self.first,
                chain=self.chain,
            )
        )
