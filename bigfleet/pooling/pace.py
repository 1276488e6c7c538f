"""A coordinator round's planning in steps (issue 45): a workflow task must end within the
SDK's 2 s deadlock bound, or it fails and is retried, as long, for as long as the fleet stays
that size. A round of 100 shards plans for 1–2 s on a quiet core (`bigfleet bench
coordinator`), longer on a busy one, so `Coordinator.plan_steps` stops after each step of work
and the coordinator workflow ends its task there (a short timer) before the next step. The
step is counted in work, never in time (a workflow replays by counting): a shortfall answered,
an elastic group matched or a machine moved looks at every shard's report, so a step is
`STEP_WORK` such looks over the shards reporting. A fleet of a few shards plans a round in one
step, as before."""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

# Work a step, counted in shard reports looked at: at 100 shards, 50 shortfalls, elastic groups
# or machines moved, under 0.5 s on a quiet core of the shared 2-core machine, garbage
# collection included (`bigfleet bench coordinator`: its longest step).
STEP_WORK = 5_000

T = TypeVar("T")


class Pace:
    """Counts a plan's work (a shortfall or elastic group looked at, a machine moved: `add`)
    and says, where the plan may stop (`tick`), when a step is done: every `STEP_WORK //
    shards` of them (at least one)."""

    def __init__(self, shards: int, work: int = STEP_WORK) -> None:
        self.every = max(1, work // max(1, shards))
        self.done = 0
        self.until = self.every
        self.steps = 1

    def add(self, work: int = 1) -> None:
        self.done += work

    def tick(self) -> bool:
        """One more piece of work done; whether the step is over (then a new one begins)."""
        self.done += 1
        if self.done < self.until:
            return False
        self.until = self.done + self.every
        self.steps += 1
        return True


def finish(steps: Generator[None, None, T]) -> T:
    """Run a plan's steps to the end, at once (the simulator, tests): its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
