"""An operator's way out of a roll-up generation far ahead of what its cluster's operator sends
(issue 44): the shard's `reset_generation` update (`bigfleet cluster NAME --reset-generation`).
A generation beyond the shard's clock is refused when it arrives (bigfleet/models/rollups.py);
one below that bound but ahead of the operator's own still made every later roll-up stale.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from activities.wire import ResetGeneration
    from bigfleet.inputs import Rejected, clip
    from workflows.guard import NO_ARGUMENT, Guard, guarded
    from workflows.shard_parts import ShardParts

class GenerationReset(ShardParts):
    """The shard workflow's `reset_generation` update and its validator."""

    guard: Guard

    @workflow.update
    @guarded
    def reset_generation(self, raw: RawValue = NO_ARGUMENT) -> dict[str, Any]:
        """An operator forgets a cluster's roll-up generation (`bigfleet cluster NAME
        --reset-generation`): a generation far ahead of what its operator sends made every
        later roll-up stale (issue 44). Its needs stay in force; its next roll-up applies
        whatever its generation. Recorded with the shard's refused roll-ups (`status`)."""
        self._reset_ok(raw)
        ask: ResetGeneration = self.guard.arg(raw, ResetGeneration, "reset_generation")
        was = self.shard.needs.reset_generation(ask.cluster)
        note = (
            f"cluster {ask.cluster}: generation {was} reset by an operator"
            + (f" ({clip(ask.reason, 120)})" if ask.reason else "")
            + "; its next roll-up applies"
        )
        self.shard.rejections.append(note)
        workflow.logger.warning("Shard: %s", note)
        return {"cluster": ask.cluster, "was": was}

    @reset_generation.validator
    def _reset_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self._not_restoring()
        ask: ResetGeneration = self.guard.arg(raw, ResetGeneration, "reset_generation")
        if self.shard.needs.generation(ask.cluster) < 0:
            self.guard.count("reset_generation")
            raise Rejected(
                f"reset_generation: cluster: {clip(ask.cluster, 80)} has no generation on "
                f"shard {self.cfg.shard} (not served here, or reset already)"
            )
