"""A cycle's outside work in bounded workflow tasks (docs/temporal.md, "Bounded workflow
tasks"). A helper object of the shard workflow.

A workflow task's completion carries every command it schedules with its input, and gRPC
refuses a message over 4 MB; the SDK fails a task whose Python runs 2 s without yielding. A
decision at fleet scale is far larger than that: the first roll-ups of 1 000 clusters ask for
~70 000 machines, ~2 000 batched creates announced to the operators as 70 000 upcoming nodes
(~4 MB), and their creates come back as 70 000 configures (~40 MB of inputs). Such a cycle used
to be one task that failed for ever. Here:

- at most `max_starts_per_cycle` transitions start in a cycle; the rest wait in the pipeline
  for the next (they are in the inventory already, in CREATING, CONFIGURING or DRAINING);
- starts go out in waves of `WAVE_BATCHES` activities of `START_BATCH` inputs, each wave
  awaited (one workflow task each), and the operators' notices ride along, split into notices of
  at most `NOTICE_ITEMS` machines, `WAVE_NOTICES` a wave.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.wire import (
        SHARD_TASK_QUEUE,
        TRANSITION_TASK_QUEUE,
        ShardConfig,
        TransitionInput,
    )
    from bigfleet.operators import OperatorUpdate
    from workflows.provider_sync import QUICK

START_BATCH = 200  # inputs a `start_transitions` call carries (~1 KB each at most)
WAVE_BATCHES = 4  # `start_transitions` calls in one workflow task
NOTICE_ITEMS = 500  # upcoming nodes and reclaims in one `notify_operator` call (~60 B each)
WAVE_NOTICES = 16  # `notify_operator` calls in one workflow task
NOTICE_PAUSE = 0.001  # a timer that ends a task of notices only (no start to wait for)


class Outbox:
    def __init__(
        self,
        cfg: ShardConfig,
        note_failure: Callable[[str, ActivityError], None],
    ) -> None:
        self.cfg = cfg
        self.note_failure = note_failure

    async def send(
        self,
        starts: list[TransitionInput],
        notices: Iterator[OperatorUpdate],
        bounded: bool = True,
    ) -> list[TransitionInput]:
        """Start the cycle's share of `starts` and tell the operators, in waves; the starts
        left for the next cycle (over the budget, or in a batch that could not be started:
        starting is idempotent, a workflow already started is found, not started twice).
        `bounded=False` is how runs begun before this replay: every start in one task, the
        notices after them."""
        if not bounded:
            batches = [starts[i : i + START_BATCH] for i in range(0, len(starts), START_BATCH)]
            left = await self._start(batches)
            for notice in notices:
                self._notify(notice)
            return left
        budget = self.cfg.max_starts_per_cycle
        now, later = starts[:budget], starts[budget:]
        batches = [now[i : i + START_BATCH] for i in range(0, len(now), START_BATCH)]
        left = []
        more = True
        while batches or more:
            wave, batches = batches[:WAVE_BATCHES], batches[WAVE_BATCHES:]
            starting = asyncio.ensure_future(self._start(wave))
            told = list(itertools.islice(notices, WAVE_NOTICES))
            more = len(told) == WAVE_NOTICES
            for notice in told:
                self._notify(notice)
            if wave:
                left += await starting
            elif more:
                await workflow.sleep(NOTICE_PAUSE)  # ends this task: the next wave in another
        return left + later

    async def _start(self, batches: list[list[TransitionInput]]) -> list[TransitionInput]:
        """Start the batches at once; those that could not be started are returned."""
        outcomes = await asyncio.gather(
            *(
                workflow.execute_activity(
                    "start_transitions", batch, task_queue=SHARD_TASK_QUEUE, **QUICK
                )
                for batch in batches
            ),
            return_exceptions=True,
        )
        left: list[TransitionInput] = []
        for batch, outcome in zip(batches, outcomes, strict=True):
            if isinstance(outcome, ActivityError):
                self.note_failure("starting transitions", outcome)
                left += batch
            elif isinstance(outcome, BaseException):
                raise outcome
        return left

    def _notify(self, notice: OperatorUpdate) -> None:
        # Not awaited (the cycle goes on); a failure is read and shown in `status`.
        workflow.start_activity(
            "notify_operator", notice, task_queue=TRANSITION_TASK_QUEUE, **QUICK
        ).add_done_callback(self.notified)

    def notified(self, handle: asyncio.Future[Any]) -> None:
        if handle.cancelled():
            return
        err = handle.exception()
        if isinstance(err, ActivityError):
            self.note_failure("notifying an operator", err)
        elif err is not None:
            workflow.logger.warning("notifying an operator: %s", err)
