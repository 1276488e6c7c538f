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
- starts go out in waves of at most `WAVE_BATCHES` activities of `START_BATCH` inputs and
  `START_BATCH_BYTES`, `WAVE_START_BYTES` a wave, each wave awaited (one workflow task each),
  and the operators' notices ride along, split into notices of at most `NOTICE_ITEMS` machines,
  `WAVE_NOTICE_BYTES` a wave (runs begun before bytes were counted replay with `WAVE_NOTICES`);
- at most `max_in_flight` transition workflows of the shard run at once: each polls its
  machines every few seconds, so thousands started ahead of what the server completes only
  multiply its load (and starve the shard's own workflow tasks) without finishing any sooner.
  A transition counts from its start until its result comes back, or until its own time is up
  (a transition that failed without telling the shard does not hold a place for ever).

Runs begun with the "background-outbox" patch never wait for any of this (issue 32): the cycle
queues its starts and notices here and goes on; `pump`, a coroutine of the workflow of its own,
sends them in the same waves, as fast as the server takes them and `max_in_flight` allows. The
queue is ordered by the band a start serves (`rank`): a create or configure by its need's
priority, a preemption drain by its preemptor's, everything else (excess drains, deletes,
repairs) after them; equal ranks keep their order. It is bounded by the inventory: a queued
start is a machine already in CREATING, CONFIGURING or DRAINING, and a machine is in one
transition at a time. Notices wait at most NOTICE_BACKLOG cycles' worth; older ones are dropped
and counted (an operator learns the same from the next ones and from its nodes).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.wire import (
        TRANSITION_TASK_QUEUE,
        ShardConfig,
        TransitionInput,
    )
    from bigfleet.models import Transition
    from bigfleet.operators import OperatorUpdate
    from workflows.provider_sync import QUICK

START_BATCH = 200  # inputs a `start_transitions` call carries (~1 KB each at most)
WAVE_BATCHES = 4  # `start_transitions` calls in one workflow task
NOTICE_ITEMS = 500  # upcoming nodes and reclaims in one `notify_operator` call (~60 B each)
WAVE_NOTICES = 16  # `notify_operator` calls in one workflow task
NOTICE_PAUSE = 0.001  # a timer that ends a task of notices only (no start to wait for)
# How long past its own timeout a transition is still counted as running (its corrective path).
IN_FLIGHT_MARGIN = 1200.0
NOTICE_BACKLOG = 30  # cycles' notices waiting to go out, at most (background outbox)
LAST = -(2**40)  # the rank of starts that serve no band (below every Int32 priority)


def rank(start: TransitionInput) -> int:
    """Where a start stands in the background outbox: the band it serves (higher first)."""
    if start.transition in (Transition.CREATE, Transition.CONFIGURE):
        return start.priority
    if start.transition is Transition.DRAIN and start.reason == "preempt":
        return start.priority  # (the preemptor's: workflows/actions.py)
    return LAST


def flight_key(transition: str, machine_ids: Iterable[str]) -> str:
    """A transition workflow's place among those in flight: its kind and lowest machine id."""
    return f"{transition}:{min(machine_ids, default='')}"


START_BATCH_BYTES = 400_000  # JSON bytes of one `start_transitions` call's inputs, at most
WAVE_START_BYTES = 1_500_000  # of one wave's calls: with its notices, far below gRPC's 4 MB


def _by_bytes(starts: list[TransitionInput]) -> tuple[list[list[TransitionInput]], list[int]]:
    """`starts` in batches of at most START_BATCH inputs and START_BATCH_BYTES (a batched
    create names 64 machines: ~3.3 KB an input, so 200 of them would be 660 KB), with each
    batch's bytes (each input is serialised once: ~20 µs, thousands a cycle)."""
    batches: list[list[TransitionInput]] = []
    sizes: list[int] = []
    for t in starts:
        n = len(t.model_dump_json())
        if not batches or len(batches[-1]) >= START_BATCH or sizes[-1] + n > START_BATCH_BYTES:
            batches.append([])
            sizes.append(0)
        batches[-1].append(t)
        sizes[-1] += n
    return batches, sizes


def _wave_size(sizes: list[int]) -> int:
    """How many of the batches (of `sizes` bytes) go in the next wave: at most WAVE_BATCHES,
    and (after the first) no more than WAVE_START_BYTES in all."""
    total = 0
    for i, size in enumerate(sizes[:WAVE_BATCHES]):
        total += size
        if i and total > WAVE_START_BYTES:
            return i
    return min(len(sizes), WAVE_BATCHES)


WAVE_NOTICE_BYTES = 1_000_000  # JSON bytes of one wave's notices (past it, one more at most)
WAVE_NOTICES_MAX = 500  # and notices, at most (most clusters' are a few hundred bytes)


def _notices_by_bytes(notices: Iterator[OperatorUpdate]) -> tuple[list[OperatorUpdate], bool]:
    """The next wave's notices: until WAVE_NOTICE_BYTES or WAVE_NOTICES_MAX. Each wave ends a
    workflow task with a timer, and a loaded server takes seconds to fire even a 1 ms one: a
    cycle telling 1 000 clusters must not take 60 of them."""
    told: list[OperatorUpdate] = []
    size = 0
    for notice in notices:
        told.append(notice)
        size += len(notice.model_dump_json())
        if size >= WAVE_NOTICE_BYTES or len(told) >= WAVE_NOTICES_MAX:
            return told, True
    return told, False


class Outbox:
    """A shard's transition starts and operator notices, sent beside the cycle in bounded
    waves, highest band first (see the module)."""
    def __init__(
        self,
        cfg: ShardConfig,
        note_failure: Callable[[str, ActivityError], None],
    ) -> None:
        self.cfg = cfg
        self.note_failure = note_failure
        # Transitions started and not reported back: key -> when to stop counting it.
        self.in_flight: dict[str, float] = {}
        # The background outbox: a heap of (-rank, order, queued at, start), the notices of
        # the last cycles, whether `pump` is sending a wave, and whether it should look again.
        self.queue: list[tuple[int, int, float, TransitionInput]] = []
        self.order = 0
        self.notices: deque[Iterator[OperatorUpdate]] = deque()
        self.batched: bool | None = None  # (`batch_notices`)
        self.dropped_notices = 0
        self.sending = False
        self.kicked = False
        self.holding = False  # a continue-as-new waits: the pump ends with its current wave
        # The quiet cycles before a continue-as-new: notices go out, starts wait (they travel in the
        # snapshot; a wave out then is one the continue-as-new would wait for).
        self.quiet = False
        self.starting = False  # a wave of starts is out (`busy`)

    def state(self) -> list[list[Any]]:
        """The transitions in flight, as carried across continue-as-new."""
        return [[k, until] for k, until in self.in_flight.items()]

    def restore(self, state: Any) -> None:
        """Take up `state()` from the last run (anything else is ignored)."""
        if isinstance(state, list):
            self.in_flight = {
                str(k): float(until) for k, until in state if isinstance(until, int | float)
            }

    def landed(self, transition: str, machine_ids: Iterable[str]) -> None:
        """A transition's result came back: its place is free (used from the next cycle)."""
        self.in_flight.pop(flight_key(transition, machine_ids), None)

    def room(self) -> int:
        """How many more transitions may start now (`max_in_flight` less those running)."""
        now = workflow.now().timestamp()
        self.in_flight = {k: until for k, until in self.in_flight.items() if until > now}
        return max(0, self.cfg.max_in_flight - len(self.in_flight))

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
        if workflow.patched("in-flight-bound"):
            budget = min(budget, self.room())
        now, later = starts[:budget], starts[budget:]
        by_bytes = workflow.patched("start-bytes")
        if by_bytes:
            batches, sizes = _by_bytes(now)
        else:  # (runs begun before: by count alone)
            batches = [now[i : i + START_BATCH] for i in range(0, len(now), START_BATCH)]
            sizes = [0] * len(batches)
        left = []
        more = True
        while batches or more:
            take = _wave_size(sizes) if by_bytes else WAVE_BATCHES
            wave, batches, sizes = batches[:take], batches[take:], sizes[take:]
            starting = asyncio.ensure_future(self._start(wave))
            if by_bytes:
                told, more = _notices_by_bytes(notices)
            else:
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
        """Start the batches at once; those that could not be started are returned. Each
        counts as in flight from before its start: its result may come back in the very
        activation that tells the shard it was started."""
        now = workflow.now().timestamp()
        for batch in batches:
            for t in batch:
                until = now + t.timeout_seconds + t.grace_seconds + IN_FLIGHT_MARGIN
                self.in_flight[flight_key(t.transition.value, t.machine_ids)] = until
        outcomes = await asyncio.gather(
            *(
                workflow.execute_activity(
                    "start_transitions", batch, task_queue=workflow.info().task_queue, **QUICK
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
                for t in batch:  # (not started: no place held)
                    self.landed(t.transition.value, t.machine_ids)
            elif isinstance(outcome, BaseException):
                raise outcome
        return left

    def _notify(self, notice: OperatorUpdate) -> None:
        # Not awaited (the cycle goes on); a failure is read and shown in `status`.
        workflow.start_activity(
            "notify_operator", notice, task_queue=TRANSITION_TASK_QUEUE, **QUICK
        ).add_done_callback(self.notified)

    def batch_notices(self) -> bool:
        """A wave's notices in one `notify_operators` call (runs begun before: one call each)."""
        if self.batched is None:
            self.batched = workflow.patched("batched-notices")
        return self.batched

    def _notify_all(self, notices: list[OperatorUpdate]) -> None:
        # Not awaited either (nor by a continue-as-new: workflows/shard_carry.py).
        workflow.start_activity(
            "notify_operators", notices, task_queue=TRANSITION_TASK_QUEUE, **QUICK
        ).add_done_callback(self.notified)

    def notified(self, handle: asyncio.Future[Any]) -> None:
        """A wave of notices ended: note a failure, if any, and let the next go."""
        if handle.cancelled():
            return
        err = handle.exception()
        if isinstance(err, ActivityError):
            self.note_failure("notifying an operator", err)
        elif err is not None:
            workflow.logger.warning("notifying an operator: %s", err)

    # ---- the background outbox ("background-outbox") ---------------------------------------

    def push(self, starts: Iterable[TransitionInput], now: float) -> None:
        """Queue starts; `pump` sends them, highest rank first."""
        for start in starts:
            heapq.heappush(self.queue, (-rank(start), self.order, now, start))
            self.order += 1
        self.kicked = True

    def tell(self, notices: Iterator[OperatorUpdate]) -> None:
        """Queue a cycle's notices (built as they are read); the oldest go past NOTICE_BACKLOG."""
        self.notices.append(notices)
        while len(self.notices) > NOTICE_BACKLOG:
            self.notices.popleft()
            self.dropped_notices += 1
        self.kicked = True

    def busy(self) -> bool:
        """Whether the pump has something out a continue-as-new waits for: a wave, or a kick
        it has not looked at; while `quiet`, only a wave of starts (notices are not waited
        for, and a quiet cycle tells its own)."""
        return self.starting if self.quiet else self.kicked or self.sending

    def queued(self) -> list[TransitionInput]:
        """The queued starts, in the order they would go."""
        return [entry[3] for entry in sorted(self.queue)]

    def oldest(self, now: float) -> float:
        """Seconds the longest-queued start has waited (0 if none)."""
        return max((now - entry[2] for entry in self.queue), default=0.0)

    def clear(self) -> None:
        """Forget every start still queued."""
        self.queue = []

    def keep(self, changed: Callable[[TransitionInput], TransitionInput | None]) -> None:
        """Rewrite the queue: each start as `changed` returns it (the same object to keep it,
        None to drop it, a copy with fewer machines to shrink it)."""
        kept = []
        for neg, order, at, start in self.queue:
            after = changed(start)
            if after is not None:
                kept.append((neg, order, at, after))
        heapq.heapify(kept)
        self.queue = kept

    def _next_wave(
        self, budget: int
    ) -> tuple[list[tuple[int, int, float, TransitionInput]], list[list[TransitionInput]]]:
        """Pop what the next wave starts, and its batches: at most WAVE_BATCHES batches,
        `budget` starts and the room left."""
        budget = min(WAVE_BATCHES * START_BATCH, self.room(), budget)
        popped = [heapq.heappop(self.queue) for _ in range(min(budget, len(self.queue)))]
        batches, sizes = _by_bytes([entry[3] for entry in popped])
        wave = batches[: _wave_size(sizes)]
        take = sum(len(b) for b in wave)
        for entry in popped[take:]:  # (back in their places)
            heapq.heappush(self.queue, entry)
        return popped[:take], wave

    def _next_notices(self) -> list[OperatorUpdate]:
        """The next wave's notices. A cycle's notices are built as they are read, from the
        inventory as it is then: one that cannot be built (its machine gone meanwhile) drops
        the rest of its cycle's, never the pump."""
        while self.notices:
            try:
                told, more = _notices_by_bytes(self.notices[0])
            except Exception as err:
                workflow.logger.warning("notices of a cycle dropped: %r", err)
                told, more = [], False
                self.dropped_notices += 1
            if not more:
                self.notices.popleft()
            if told:
                return told
        return []

    async def _next_activation(self) -> None:
        """Until the next workflow task (its history is longer), or a kick."""
        seen = workflow.info().get_current_history_length()
        await workflow.wait_condition(
            lambda: self.kicked or workflow.info().get_current_history_length() > seen
        )

    async def pump(self) -> None:
        """Send the queue and the notices for as long as the run lives, a wave a workflow task,
        up to `max_starts_per_cycle` starts a kick while there is room in flight; then wait for
        the next cycle's kick (results back free room meanwhile: waves stay large, a few a
        cycle, not one per result). A wave that could not be started goes back in the queue and
        waits for the next kick. While a continue-as-new waits (`holding`), one wave at most."""
        while True:
            await workflow.wait_condition(lambda: self.kicked)
            self.kicked = False
            failed = False
            budget = self.cfg.max_starts_per_cycle  # (a kick: a cycle's worth)
            sent = False
            while not failed and (
                (self.queue and budget and self.room() and not self.quiet) or self.notices
            ):
                if self.holding and sent:
                    break
                sent = True
                self.sending = True
                try:
                    starting_any = self.queue and budget and not self.quiet
                    entries, wave = self._next_wave(budget) if starting_any else ([], [])
                    budget -= len(entries)
                    starting = asyncio.ensure_future(self._start(wave)) if entries else None
                    self.starting = starting is not None
                    told = self._next_notices()
                    if told and self.batch_notices():
                        self._notify_all(told)
                    else:
                        for notice in told:
                            self._notify(notice)
                    if starting is not None:
                        left = {id(start) for start in await starting}
                        for entry in entries:  # (not started: back in its place, as old)
                            if id(entry[3]) in left:
                                heapq.heappush(self.queue, entry)
                        failed = bool(left)
                    elif told:
                        # The next wave in another workflow task: the next activation (these
                        # notices' own completions, a result, a cycle) rather than a timer,
                        # which a loaded server fires many seconds late.
                        await self._next_activation()
                finally:
                    self.sending = self.starting = False
