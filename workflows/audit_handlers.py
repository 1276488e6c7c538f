"""What a shard answers and accepts for `bigfleet audit` (workflows/audit.py): the `holdings`
query (what it holds of a provider's machines, a bounded page), and two fenced repair updates
the coordinator sends — `disown` (give up machines another shard keeps, or no provider lists)
and `observe_records` (take the provider's record of machines it sees otherwise). Mixed into
the shard workflow after `InstructionHandlers`, whose fencing these handlers use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.audit_wire import EXAMPLES_MAX
    from activities.wire import Instruction
    from bigfleet.audit import EXTRA, HOLDINGS_PAGE_MAX, holdings_page
    from bigfleet.inputs import clip
    from workflows.guard import NO_ARGUMENT, guarded
    from workflows.shard_parts import ShardParts


class AuditHandlers(ShardParts):
    """The shard workflow's audit query and repair updates (fenced as instructions are)."""

    _ins: Callable[..., Instruction]  # instructions.py

    @workflow.query
    def holdings(self, provider: str, cursor: int, limit: int) -> tuple[list[list[Any]], int]:
        """A page of this shard's machines of `provider`: `[id, state, cluster, since]` rows
        from `cursor` (0 to start), at most `limit` (1 … 10 000), and the next cursor (-1:
        the last page)."""
        self._not_restoring()
        if not isinstance(provider, str) or not provider:
            raise ApplicationError(f"holdings: provider: a name, got {clip(provider, 50)}")
        if isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0:
            raise ApplicationError(f"holdings: cursor: an integer >= 0, got {clip(cursor, 40)}")
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ApplicationError(f"holdings: limit must be an integer, got {clip(limit, 40)}")
        if not 1 <= limit <= HOLDINGS_PAGE_MAX:
            raise ApplicationError(f"holdings: limit must be 1 … {HOLDINGS_PAGE_MAX}, got {limit}")
        if cursor > EXTRA + len(self.shard.handoff) + len(self.shard.leaving):
            raise ApplicationError(f"holdings: cursor {cursor} is past the end")
        return holdings_page(self.shard, provider, cursor, limit)

    @workflow.update
    @guarded
    async def disown(self, raw: RawValue = NO_ARGUMENT) -> list[str]:
        """Give machines up without handing them anywhere (an audit's repair: another shard
        keeps them, or no provider lists them). Their queued transitions are dropped; one
        still running reports a machine this shard no longer has, which it ignores."""
        ins = self._ins(raw, Instruction, "disown")
        if await self._new_term(ins):
            self._disown_ok(raw)  # (checked again: the shard went on while it asked)
        if self.steps.fencing.accept(ins):
            return ins.machine_ids
        shard = self.shard
        mine = [
            mid
            for mid in ins.machine_ids
            if mid not in shard.leaving and mid not in shard.transfer_out
            and (mid in shard.handoff or shard.inventory.ids.find(mid) >= 0)
        ]
        shard.release(mine)
        dropped = set(mine)
        self.pipeline = [t for t in self.pipeline if not dropped.intersection(t.machine_ids)]
        self.outbox.keep(lambda t: None if dropped.intersection(t.machine_ids) else t)
        return mine

    @disown.validator
    def _disown_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        ins = self._ins(raw, Instruction, "disown")
        # It takes machines away: share-limited like a release.
        if self._fence(ins, len(ins.machine_ids)):
            return
        if len(ins.machine_ids) > EXAMPLES_MAX:
            raise ApplicationError(
                f"disown: at most {EXAMPLES_MAX} machines, got {len(ins.machine_ids)}"
            )

    @workflow.update
    @guarded
    async def observe_records(self, raw: RawValue = NO_ARGUMENT) -> int:
        """Take the provider's record of machines this shard holds but sees in another state
        (or configured for another cluster): the provider is the source of truth. Returns how
        many changed."""
        ins = self._ins(raw, Instruction, "observe_records")
        if await self._new_term(ins):
            self._observe_ok(raw)
        if self.steps.fencing.accept(ins):
            return 0
        now = workflow.now().timestamp()
        inv = self.shard.inventory
        changed = 0
        for m in ins.machines:
            row = inv.ids.find(m.id)
            if row < 0 or m.id in self.shard.transfer_out:
                continue
            if inv.state_of(row) is not m.state:
                changed += self.shard.observe(m, now)
            elif inv.cluster_of(row) != m.cluster:
                inv.remove(m.id)
                inv.add([m], now)
                changed += 1
        return changed

    @observe_records.validator
    def _observe_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        ins = self._ins(raw, Instruction, "observe_records")
        if self._fence(ins, 0):
            return
        if len(ins.machines) > EXAMPLES_MAX:
            raise ApplicationError(
                f"observe_records: at most {EXAMPLES_MAX}, got {len(ins.machines)}"
            )
