"""The shard's `cluster_mode` instruction (`ClusterModeHandlers`, mixed into
workflows/shard.py): the coordinator's run-time change of a cluster's mode
(workflows/coordinator_modes.py, bigfleet/cluster_modes.py; issue 46).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.wire import Instruction
    from bigfleet.cluster_modes import MAX_UNMANAGED
    from workflows.guard import NO_ARGUMENT, guarded
    from workflows.instructions import InstructionHandlers


class ClusterModeHandlers(InstructionHandlers):
    """`cluster_mode`, fenced like every coordinator instruction (term and seq; a repeat is
    answered without acting again). It moves no machine through a provider, so the share
    bound of `max_share` does not apply: a cluster is handed back or taken back whole."""

    @workflow.update
    @guarded
    async def cluster_mode(self, raw: RawValue = NO_ARGUMENT) -> dict[str, Any]:
        """Unmanaged: the cluster's machines leave the inventory as they stand (no drain, no
        delete) and its needs go; its roll-ups are refused from now on. Managed: it is no
        longer left alone; with `adopt` (this is its shard) its machines that no shard owns
        are taken back as the providers list them (a transition in flight stays theirs).
        Answers what the cluster was, and how many machines were given up or taken back."""
        ins = self._ins(raw, Instruction, "cluster_mode")
        if await self._new_term(ins):
            self._cluster_mode_ok(raw)
        modes = self.shard.modes
        if self._fence(ins, 0):  # (a repeat of one carried out: answered, not done again)
            return {"was": ins.mode, "repeat": True}
        assert ins.cluster is not None and ins.mode is not None
        answer: dict[str, Any] = {"was": modes.set(ins.cluster, ins.mode)}
        self.shard.shadows.forget(modes.shadow)  # (a cluster no longer in shadow: its record)
        if ins.mode != "managed":
            answer["given_up"] = len(modes.forget(self.shard))
        elif ins.adopt:
            # (Its roll-ups wait meanwhile: `ClusterModes.taking_back`.)
            modes.taking_back.add(ins.cluster)
            try:
                answer["taken_back"] = await self.providers.adopt_unowned(
                    self.steps.inherited, [ins.cluster]
                )
            finally:
                modes.taking_back.discard(ins.cluster)
        workflow.logger.warning("shard %s: cluster %s is %s: %s", self.shard.id, ins.cluster,
                                ins.mode, answer)  # fmt: skip
        return answer

    @cluster_mode.validator
    def _cluster_mode_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self._not_moving()
        ins = self._ins(raw, Instruction, "cluster_mode")
        if ins.cluster is None or ins.mode is None:
            raise ApplicationError(
                "cluster_mode: cluster and mode are required", non_retryable=True
            )
        modes = self.shard.modes
        if ins.mode != "managed" and ins.cluster not in modes.unmanaged:
            if len(modes.unmanaged) >= MAX_UNMANAGED:
                raise ApplicationError(
                    f"cluster_mode: at most {MAX_UNMANAGED} clusters may be unmanaged",
                    non_retryable=True,
                )
