"""What transition workflows report back to their shard: the `transition_done` signal, or the
shard's mailbox it takes them from each cycle, folded into the shard at the next cycle, a
bounded number of machine records a cycle. Mixed into the shard workflow (workflows/shard.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.wire import MailboxTake, TakenResults, TransitionResult
    from bigfleet.inputs import Rejected, clip
    from workflows.guard import accepts
    from workflows.shard_parts import ShardParts

MAX_CREATE_BATCH = 64  # machines a transition (a batched create) may report
PENDING_RESULTS = 50_000  # transition results waiting for the next cycle
HISTORY_BYTES_REGARDLESS = 30_000_000  # continue as new past this even with results waiting
# Taking from the mailbox: quick tries; a take that failed is tried again next cycle. Runs
# with ACKED_TAKE say what they have, and the mailbox lets results go only then.
ACKED_TAKE = "acked-take"
TAKE_WAKES = "take-wakes-the-cycle"  # the take is answered when the next cycle is due
QUICK_TAKE: dict[str, Any] = dict(
    start_to_close_timeout=timedelta(seconds=30),
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2),
)


class TransitionResults(ShardParts):
    """The shard workflow's results waiting to be folded in (`results`): how they arrive
    (signalled, or taken from the mailbox) and how they are folded in."""

    @accepts(TransitionResult)
    def transition_done(self, result: TransitionResult) -> None:
        """What a transition workflow ended with (its machines as records, or as a page);
        machines this shard does not own are ignored when it is folded in."""
        page = result.page
        count = len(result.machines) + (len(page.rows) if page else 0)
        if count > MAX_CREATE_BATCH:
            raise Rejected(
                f"transition_done: machines: {count} records, a transition has "
                f"at most {MAX_CREATE_BATCH}"
            )
        if len(self.results) >= PENDING_RESULTS:
            raise Rejected(f"transition_done: {PENDING_RESULTS} results already wait")
        # A page is read when the result is folded in (bounded a cycle), not here: dozens of
        # results arrive in one activation, and it must yield within the SDK's 2 s.
        ids = [m.id for m in result.machines] + result.unavailable
        if page is not None:
            ids += [row[0] for row in page.rows if row and isinstance(row[0], str)]
        self.results.append(result)
        self.outbox.landed(result.transition.value, ids)

    def _fold_results(self, now: float) -> None:
        """Fold in what transitions ended with: whole results, until `fold_per_cycle` machine
        records are in (~50 µs each: 70 000 creates coming back at once would hold one
        workflow task for seconds, past the SDK's deadlock detector); the rest wait for the
        next cycle, in the order they came."""
        results, self.results = self.results, []
        limit = self.cfg.fold_per_cycle
        if self._backlog(results) > limit and workflow.patched("bounded-fold"):
            taken = 0
            for i, result in enumerate(results):
                taken += self._backlog([result])
                if taken >= limit:
                    results, self.results = results[: i + 1], results[i + 1 :] + self.results
                    break
        self.pipeline += self.inputs.fold([r for r in map(self._read_page, results) if r], now)

    def _read_page(self, result: TransitionResult) -> TransitionResult | None:
        """A result with its page read into machines; None (rejected) if it makes none."""
        page = result.page
        if page is None:
            return result
        try:
            machines = page.machines()
        except Exception as err:  # rows or shapes that do not make machines
            self.guard.reject("transition_done", f"transition_done: page: {clip(str(err), 300)}")
            return None
        return result.model_copy(update={"machines": result.machines + machines, "page": None})

    @staticmethod
    def _backlog(results: list[TransitionResult]) -> int:
        return sum(len(r.machines) + (len(r.page.rows) if r.page else 0) for r in results)

    def _may_continue_as_new(self) -> bool:
        """Not while more results wait than a cycle folds (the next run would get them all in
        its input, and fold them in one task), unless the history nears Temporal's limit."""
        waiting = self._backlog(self.results)
        if waiting <= self.cfg.fold_per_cycle or not workflow.patched("bounded-fold"):
            return True
        return workflow.info().get_current_history_size() > HISTORY_BYTES_REGARDLESS

    async def _collect(self) -> None:
        """Take the results waiting in the mailbox; they are folded in from the next cycle on,
        as signalled ones are (`transition_done`: the same bounds)."""
        try:
            if workflow.patched(ACKED_TAKE):
                taken = await self._take_after()
            else:  # (runs begun before: a batch leaves the mailbox as it is answered)
                taken = await workflow.execute_activity(
                    "mailbox_take",
                    self.cfg.shard,
                    task_queue=workflow.info().task_queue,
                    result_type=list[TransitionResult],
                    **QUICK_TAKE,
                )
        except ActivityError as err:  # (tried again next cycle: what it did not take waits)
            self._note_failure("taking results from the mailbox", err)
            return
        for result in taken:
            try:
                self.transition_done(result)
            except Rejected as err:
                self.guard.reject("transition_done", str(err))

    async def _take_after(self) -> list[TransitionResult]:
        """The results after the last one taken; the mailbox lets that one and those before it
        go. A take whose answer was lost (its worker killed) is answered again by the next."""
        chain, after = self.taken
        # The take is answered when the next cycle is due, and its answer wakes the shard for
        # it: a loaded server fires the cycle timer late (9-10 s late with four shards on the
        # dev server), and since results wait in the mailbox nothing else woke the shard.
        # Runs begun before are answered at once and wait for the timer alone.
        at = 0.0
        if workflow.patched(TAKE_WAKES):
            at = workflow.now().timestamp() + self.cfg.cycle_seconds
        batch: TakenResults = await workflow.execute_activity(
            "mailbox_take_after",
            MailboxTake(shard=self.cfg.shard, after=after, chain=chain, at=at),
            task_queue=workflow.info().task_queue,
            result_type=TakenResults,
            **QUICK_TAKE,
        )
        self.woken = at > 0  # (whatever the clocks of worker and server say)
        if batch.chain != chain or batch.results:  # (a mailbox started again: from its first)
            self.taken = (batch.chain, batch.first + len(batch.results) - 1)
        return batch.results
