"""Moving a shard to another build of the shard workers (`bigfleet rollout`, docs/rollout.md;
issue 46): the shard's `move_to_build` update.

A build's workers poll a shard task queue of their own (`bigfleet worker --build NAME`:
`bigfleet-shards@NAME`; the unnamed build polls `bigfleet-shards`). A shard asked to move
keeps running where it is and continues as new onto the build's queue at its next
continue-as-new: its run never changes code mid-history, and the machine transitions it
started run on the transition workers whatever the shard's build. A build no worker polls is
refused (a shard moved there would stop deciding): the shard asks Temporal first.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.wire import BuildMove, build_queue, queue_build
    from bigfleet.inputs import Rejected
    from workflows.guard import NO_ARGUMENT, Guard, guarded
    from workflows.shard_parts import ShardParts

BUILD_LOG = 20  # moves a shard remembers (carried across continue-as-new)


class BuildMoves(ShardParts):
    """The shard workflow's `move_to_build` update, its validator, and its log of moves."""

    guard: Guard
    next_queue = ""  # the queue its next run runs on ("": where it runs now)
    build_log: tuple[dict[str, Any], ...] = ()

    @workflow.update
    @guarded
    async def move_to_build(self, raw: RawValue = NO_ARGUMENT) -> dict[str, Any]:
        """Run on `build` from the next continue-as-new on (see the module); answers where
        the shard runs and where it will. Refused if no worker polls the build's queue."""
        self._move_ok(raw)
        ask: BuildMove = self.guard.arg(raw, BuildMove, "move_to_build")
        here, target = workflow.info().task_queue, build_queue(ask.build)
        if target != here:
            polled = await workflow.execute_activity(
                "queue_polled",
                target,
                result_type=bool,
                task_queue=here,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=3),
            )
            if not polled:
                raise Rejected(
                    f"move_to_build: build: no worker polls {target} (start one: bigfleet "
                    f"worker --role shards --build {ask.build}); shard {self.cfg.shard} stays "
                    f"on {queue_build(here) or 'the default build'}"
                )
        self.next_queue = "" if target == here else target
        entry = {
            "at": workflow.now().timestamp(),
            "from": queue_build(here),
            "to": ask.build,
            "reason": ask.reason,
            "by": ask.by,
        }
        self.build_log = (*self.build_log[-(BUILD_LOG - 1) :], entry)
        workflow.logger.warning("shard %s: moving to build %r: %s", self.cfg.shard, ask.build,
                                entry)  # fmt: skip
        return {
            "shard": self.cfg.shard,
            "build": queue_build(here),
            "next": ask.build,
            "when": "now" if target == here else "at its next continue-as-new",
        }

    @move_to_build.validator
    def _move_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self._not_restoring()
        self.guard.arg(raw, BuildMove, "move_to_build")

    def build_status(self) -> dict[str, Any]:
        """Where the shard runs, where its next run will, and its last moves (`status`)."""
        return {
            "build": queue_build(workflow.info().task_queue),
            "next_build": queue_build(self.next_queue) if self.next_queue else None,
            "moves": list(self.build_log[-3:]),
        }
