"""What transition workflows report back to their shard: the `transition_done` signal, folded
into the shard at the next cycle, a bounded number of machine records a cycle. Mixed into the
shard workflow (workflows/shard.py).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.wire import ShardConfig, TransitionInput, TransitionResult
    from bigfleet.inputs import Rejected, clip
    from workflows.actions import TransitionInputs
    from workflows.guard import Guard, accepts
    from workflows.outbox import Outbox

MAX_CREATE_BATCH = 64  # machines a transition (a batched create) may report
PENDING_RESULTS = 50_000  # transition results waiting for the next cycle
HISTORY_BYTES_REGARDLESS = 30_000_000  # continue as new past this even with results waiting


class TransitionResults:
    """The shard workflow's results waiting to be folded in (`results`), and what it needs of
    the rest of the shard to fold them."""

    results: list[TransitionResult]
    pipeline: list[TransitionInput]
    outbox: Outbox
    guard: Guard
    cfg: ShardConfig
    inputs: TransitionInputs

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
