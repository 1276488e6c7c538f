"""The coordinator tells each shard what the others hold free (`SendsPoolSummaries`, mixed into
workflows/coordinator.py; issue 45, bigfleet/pooling/ask_first.py), so a shard asks before it
preempts: after each round's moves, a `pool_summary` signal to every member shard whose
summary changed, or was last sent `REFRESH_SECONDS` ago (a shard drops one older than
`STALE_SECONDS`: a coordinator that stopped leaves no shard waiting on it). Runs begun before
send none (`ASK_PATCH`). What was sent is not carried across continue-as-new: the next run
sends every summary once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.wire import CoordinatorInput, shard_workflow_id
    from bigfleet.coordinator import Coordinator, Move
    from bigfleet.pooling.ask_first import REFRESH_SECONDS, FreeElsewhere, summaries
    from bigfleet.pooling.pace import Pace
    from bigfleet.reports import ShardReport

ASK_PATCH = "shards-ask-before-preempting"  # (the shard's patch of the same name: shard_pool.py)
POOL_PATCH = "one-pool-across-shards"  # bigfleet/pooling/ (issue 45)
USE = "machines-follow-use"  # `Coordinator.follows_use`: bigfleet/pooling/quota.py
CHEAPEST = "shortfalls-take-the-cheapest"  # `Coordinator.cheapest_first`
# A round's plan over several workflow tasks, each within the SDK's 2 s bound (`_plan`,
# bigfleet/pooling/pace.py); runs begun before plan a round in one task.
STEPS = "plan-in-steps"
STEP_PAUSE = 0.001  # seconds: the timer that ends a workflow task between two steps


class SendsPoolSummaries:
    """The coordinator's part that sends the summaries (`_send_pool_summaries`, each round)."""

    c: Coordinator
    sagas: dict[str, dict[str, Any]]
    # Per shard: the entries last sent it, and when (this run only).
    pool_sent: dict[int, tuple[list[FreeElsewhere], float]] | None = None
    # While a round plans in steps: per shard, its newest report since the plan began.
    held_reports: dict[int, tuple[ShardReport, float]] | None = None

    def _hold(self, report: ShardReport, now: float) -> bool:
        """Whether `report` waits for the end of a plan in steps (which reads the reports as
        they were when it began); the newest of a shard's waits."""
        held = self.held_reports
        if held is None:
            return False
        if report.shard not in held or held[report.shard][0].at <= report.at:
            held[report.shard] = (report, now)
        return True

    async def _plan(
        self, inp: CoordinatorInput, busy: list[str], pending: dict[tuple[int, str, int], int]
    ) -> tuple[list[Move], bool]:
        """The round's moves (`Coordinator.plan`), planned in steps, each its own workflow
        task (a short timer between two), so that no task of a large fleet's round outlasts
        the SDK's deadlock bound; and whether it took more than one. Reports that came
        meanwhile are taken in after."""
        if not workflow.patched(STEPS):
            return self.c.plan(inp.max_share, busy, pending, inp.idle_share), False
        pace = Pace(len(self.c.reports), inp.plan_step_work)
        steps = self.c.plan_steps(inp.max_share, busy, pending, inp.idle_share, pace)
        self.held_reports = {}
        try:
            while True:
                try:
                    next(steps)
                except StopIteration as done:
                    return done.value, pace.steps > 1
                await workflow.sleep(STEP_PAUSE)
        finally:
            held, self.held_reports = self.held_reports, None
            for report, at in held.values():
                self.c.receive(report, at)

    def _pool_rules(self) -> None:
        """Which of issue 45's rules this run plans with (runs begun before a rule replay
        without it)."""
        c = self.c
        c.pools, c.follows_use = workflow.patched(POOL_PATCH), workflow.patched(USE)
        c.cheapest_first = workflow.patched(CHEAPEST)

    @staticmethod
    async def _pause(stepped: bool) -> None:
        """Between two steps of a round planned in steps, the workflow task ends."""
        if stepped:
            await workflow.sleep(STEP_PAUSE)

    async def _send_pool_summaries(self) -> None:
        if not workflow.patched(ASK_PATCH):
            return
        if self.pool_sent is None:
            self.pool_sent = {}
        sent = self.pool_sent
        now = workflow.now().timestamp()
        members = [s for s in self.c.shards if s not in self.c.retired and s in self.c.reports]
        busy = [mid for saga in self.sagas.values() for mid in saga["machine_ids"]]
        due = []
        c = self.c  # (the rules as the round's plan had them)
        told = summaries(
            c.reports, members, c.term, now, busy, c.pools and c.follows_use,
            c.pools and c.cheapest_first,
        )  # fmt: skip
        for shard, summary in told.items():
            last = sent.get(shard)
            if last is not None and last[0] == summary.free and now - last[1] < REFRESH_SECONDS:
                continue
            sent[shard] = (summary.free, now)
            handle = workflow.get_external_workflow_handle(shard_workflow_id(shard))
            due.append((shard, handle.signal("pool_summary", summary.model_dump(mode="json"))))
        if not due:
            return
        outcomes = await asyncio.gather(*(signal for _, signal in due), return_exceptions=True)
        for (shard, _), outcome in zip(due, outcomes, strict=True):
            if isinstance(outcome, BaseException):  # (sent again next round)
                sent.pop(shard, None)
                workflow.logger.warning("pool_summary to shard %s failed: %s", shard, outcome)
