"""Coordinator instructions a shard accepts (seed §6, §11): fenced updates, and shard reports.

Every instruction carries (coordinator_term, seq). A stale term, a replayed seq, or one that
would take more than `MAX_SHARE` of the shard's machines away is refused before it changes
anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from bigfleet.models import Machine, MachineState, Transition
    from bigfleet.shard import Shard
    from workflows.sagas import COORDINATOR_ID
    from workflows.types import Instruction, ShardConfig, TransitionInput

S = MachineState
MAX_SHARE = 0.10
REPORT_SAMPLE = 32
SEEN_KEPT = 1000


class InstructionHandlers:
    """Mixed into the shard workflow, whose state these handlers share."""

    shard: Shard
    cfg: ShardConfig
    pipeline: list[TransitionInput]
    _input: Callable[..., TransitionInput]

    def __init__(self, state: dict[str, Any]) -> None:
        self.term = int(state.get("term", 0))
        # Sequence numbers seen in the current term: sagas run side by side, so instructions
        # may arrive out of order; a seq seen before is a replay.
        self.seen: list[int] = list(state.get("seen", []))
        self.last_report = 0.0

    def instruction_state(self) -> dict[str, Any]:
        return {"term": self.term, "seen": self.seen[-SEEN_KEPT:]}

    def _fence(self, ins: Instruction, touched: int) -> None:
        if ins.term < self.term:
            raise ApplicationError(
                f"stale instruction from coordinator term {ins.term}: shard {self.shard.id} "
                f"has seen term {self.term}",
                type="StaleInstruction",
                non_retryable=True,
            )
        if ins.term == self.term and ins.seq in self.seen:
            raise ApplicationError(
                f"instruction (term {ins.term}, seq {ins.seq}) was already carried out",
                type="ReplayedInstruction",
                non_retryable=True,
            )
        size = len(self.shard.inventory) + len(self.shard.handoff)
        limit = max(1, int(size * MAX_SHARE))
        if touched > limit:
            raise ApplicationError(
                f"instruction touches {touched} machines, more than {MAX_SHARE:.0%} of shard "
                f"{self.shard.id}'s {size} (limit {limit})",
                type="InstructionTooLarge",
                non_retryable=True,
            )

    def _accept(self, ins: Instruction) -> None:
        if ins.term > self.term:
            self.term, self.seen = ins.term, []
        self.seen.append(ins.seq)
        del self.seen[:-SEEN_KEPT]

    @workflow.query
    def machine_states(self, machine_ids: list[str]) -> dict[str, str]:
        """Where a saga's machines are now (a drain for transfer is done when they are idle)."""
        inv = self.shard.inventory
        out = {}
        for mid in machine_ids:
            row = inv.ids.find(mid)
            if mid in self.shard.handoff:
                out[mid] = MachineState.IDLE.value
            else:
                out[mid] = inv.state_of(row).value if row >= 0 else "GONE"
        return out

    @workflow.update
    def adopt(self, ins: Instruction) -> int:
        """Take ownership of machines another shard released (or new capacity)."""
        self._accept(ins)
        return self.shard.adopt(ins.machines, workflow.now().timestamp())

    @adopt.validator
    def _adopt_ok(self, ins: Instruction) -> None:
        # Adopting takes nothing away from the shard: fenced, but no share limit.
        self._fence(ins, 0)

    @workflow.update
    def release(self, ins: Instruction) -> list[Machine]:
        """Give up idle or speculative machines; returns their records for the receiver."""
        self._accept(ins)
        return self.shard.release(ins.machine_ids)

    @release.validator
    def _release_ok(self, ins: Instruction) -> None:
        # Machines drained for this transfer were counted when the drain was accepted.
        self._fence(ins, sum(1 for mid in ins.machine_ids if mid not in self.shard.handoff))
        inv = self.shard.inventory
        for mid in ins.machine_ids:
            if mid in self.shard.handoff:
                continue
            row = inv.ids.find(mid)
            if row < 0:
                raise ApplicationError(f"machine {mid} is not owned by shard {self.shard.id}")
            if inv.state_of(row) not in (S.IDLE, S.SPECULATIVE):
                raise ApplicationError(
                    f"machine {mid} is {inv.state_of(row)}: only idle or speculative machines "
                    "move between shards"
                )

    @workflow.update
    def drain_for_transfer(self, ins: Instruction) -> list[str]:
        """Drain configured machines so they can be handed over (cross-shard preemption)."""
        self._accept(ins)
        now = workflow.now().timestamp()
        inv = self.shard.inventory
        clusters = {mid: inv.cluster_of(inv.row(mid)) for mid in ins.machine_ids}
        self.shard.drain_for_transfer(ins.machine_ids, now)
        for mid in ins.machine_ids:
            self.pipeline.append(
                self._input(
                    Transition.DRAIN,
                    [mid],
                    cluster=clusters[mid],
                    grace_seconds=ins.grace_seconds,
                    reason="transfer",
                )
            )
        return ins.machine_ids

    @workflow.update
    def cancel_transfer(self, ins: Instruction) -> list[str]:
        """Compensation of a drain for transfer: the machines stay and are the shard's again."""
        self._accept(ins)
        self.shard.cancel_transfer(ins.machine_ids, workflow.now().timestamp())
        return ins.machine_ids

    @cancel_transfer.validator
    def _cancel_ok(self, ins: Instruction) -> None:
        self._fence(ins, 0)

    @drain_for_transfer.validator
    def _drain_ok(self, ins: Instruction) -> None:
        self._fence(ins, len(ins.machine_ids))
        inv = self.shard.inventory
        for mid in ins.machine_ids:
            row = inv.ids.find(mid)
            if row < 0 or inv.state_of(row) is not S.CONFIGURED:
                raise ApplicationError(f"machine {mid} is not a configured machine of this shard")

    async def report(self) -> None:
        """Summary and shortfalls to the coordinator every 30 s, if one runs (static stability:
        without one the shard carries on alone)."""
        now = workflow.now().timestamp()
        if now - self.last_report < self.cfg.report_seconds:
            return
        self.last_report = now
        # Small samples: every report lands in the coordinator's history.
        report = self.shard.report(now, sample=REPORT_SAMPLE)
        try:
            await workflow.get_external_workflow_handle(COORDINATOR_ID).signal(
                "shard_report", report
            )
        except Exception:  # no coordinator running: nothing to tell
            pass
