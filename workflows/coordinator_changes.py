"""The coordinator's updates that change the fleet (`FleetChanges`, mixed into
workflows/coordinator.py): splitting, adding and merging shards (design §16), decommissioning
machines proportionally across shards, repairing what `bigfleet audit` found, and (from
`ClusterModeChanges`) a cluster's mode.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from activities.audit_wire import AuditReport
    from activities.wire import CoordinatorInput, DecommissionRequest, MembershipResult
    from bigfleet.coordinator import Coordinator
    from bigfleet.decommission import Matching, decommission_plan
    from bigfleet.inputs import Rejected, clip
    from workflows.audit import check_repair
    from workflows.audit import repair as repair_findings
    from workflows.coordinator_modes import ClusterModeChanges
    from workflows.fleet_membership import FleetMembership
    from workflows.guard import NO_ARGUMENT, Guard, accepts, guarded
    from workflows.sagas import STEP


def _selectors(where: dict[str, str]) -> str:
    """A decommission's selectors as a sentence: `provider 'dc', zone 'ams-9'`."""
    return ", ".join(f"{k.replace('_', ' ')} {clip(v, 80)!r}" for k, v in where.items())


class FleetChanges(ClusterModeChanges):
    """The coordinator workflow's membership, decommission and repair updates; what they use
    is made in its `__init__`."""

    inp: CoordinatorInput
    c: Coordinator
    members: FleetMembership
    guard: Guard
    ready: bool
    providers: set[str] | None
    sagas: dict[str, dict[str, Any]]
    _start_saga: Callable[..., Awaitable[str]]

    # ---- membership (design §16) ---------------------------------------------------------------

    @workflow.update
    @guarded
    async def split_shard(self, raw: RawValue = NO_ARGUMENT) -> str:
        """Divide `shard` in two: half its clusters and machines go to a new shard."""
        shard = self.guard.arg(raw, int, "split_shard")
        await workflow.wait_condition(lambda: self.ready)
        return await self.members.start("split", shard, self.c.new_shard_id())

    @split_shard.validator
    def _split_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self.members.check([self.guard.arg(raw, int, "split_shard")])

    @workflow.update
    @guarded
    async def add_shard(self, raw: RawValue = NO_ARGUMENT) -> int:
        """A new, empty shard (design §16): new clusters go to it first (it is the least loaded)
        and the coordinator moves capacity to it as its shortfalls ask."""
        await workflow.wait_condition(lambda: self.ready)
        return await self.members.add()

    @add_shard.validator
    def _add_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        if raw is not NO_ARGUMENT:
            raise Rejected("add_shard: takes no argument")
        if not self.c.shards:
            raise Rejected("add_shard: no shard to model the new one on")

    @workflow.update
    @guarded
    async def merge_shards(self, raw: RawValue = NO_ARGUMENT) -> str:
        """Merge shard `donor_into[0]` into `donor_into[1]`; the first retires."""
        donor, into = self.guard.arg(raw, tuple[int, int], "merge_shards")
        await workflow.wait_condition(lambda: self.ready)
        return await self.members.start("merge", donor, into)

    @merge_shards.validator
    def _merge_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        donor_into = self.guard.arg(raw, tuple[int, int], "merge_shards")
        if donor_into[0] == donor_into[1]:
            raise Rejected(f"merge_shards: two different shards are needed, got {donor_into}")
        self.members.check(list(donor_into))

    @accepts(MembershipResult)
    def membership_done(self, result: MembershipResult) -> None:
        """A split or merge ended (see `FleetMembership.done`)."""
        self.members.done(result)

    # ---- machines out of the fleet, and an audit's repairs -----------------------------------

    @workflow.update
    @guarded
    async def decommission(self, raw: RawValue = NO_ARGUMENT) -> dict[str, Any]:
        """Take machines out of the fleet proportionally across shards (design §16): each shard
        drains its share (idle ones first) and gives it up; cloud machines are deleted."""
        req = self.guard.arg(raw, DecommissionRequest, "decommission")
        await workflow.wait_condition(lambda: self.ready)
        self._known_provider(req)  # (learnt meanwhile: a coordinator started just now)
        where = req.where()
        found: dict[int, Matching] = {}
        for shard in self.c.shards:
            found[shard] = await workflow.execute_activity(
                "shard_matching", args=[shard, where, req.count], result_type=Matching, **STEP
            )
        if not any(f.free_count + f.configured_count for f in found.values()) and (
            workflow.patched("decommission-matching-nothing")
        ):
            # (Runs begun before: answered every shard's share of nothing, as they did.)
            raise Rejected(f"decommission: no shard has a machine of {_selectors(where)}")
        shares, picks = decommission_plan(found, req.count)
        sagas = []
        for shard, (free, configured) in picks.items():
            # Each saga within the share limit of the shard as it will be once its share left.
            size = self.c.reports[shard].size if shard in self.c.reports else shares[shard]
            limit = max(1, int((size - shares[shard]) * self.inp.max_share))
            for drain, group in ((False, free), (True, configured)):
                for i in range(0, len(group), limit):
                    part = group[i : i + limit]
                    saga = await self._start_saga(
                        "decommission", shard, -1, part, 0, "", req.grace_seconds, drain=drain
                    )
                    sagas.append(saga)
        return {"shares": {str(s): n for s, n in shares.items()}, "sagas": sagas}

    @decommission.validator
    def _decommission_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        """A provider the shards do not run with is refused before anything enters history
        (its zone, type and rack can only be checked against the shards' machines: one that
        matches nothing fails the update, see above)."""
        self._known_provider(self.guard.arg(raw, DecommissionRequest, "decommission"))

    def _known_provider(self, req: DecommissionRequest) -> None:
        """Not learnt yet (a coordinator starting, no shard answering): judged by the shards'
        machines, like a zone."""
        if self.providers is not None and req.provider not in self.providers:
            known = ", ".join(sorted(self.providers)) or "none"
            raise Rejected(
                f"decommission: provider: {clip(req.provider, 80)!r} is not a provider of this "
                f"fleet (its shards run with: {clip(known, 200)})"
            )

    @workflow.update
    @guarded
    async def repair(self, raw: RawValue = NO_ARGUMENT) -> dict[str, Any]:
        """Resolve what `bigfleet audit` found, with fenced instructions (workflows/audit.py)."""
        report = self.guard.arg(raw, AuditReport, "repair")
        await workflow.wait_condition(lambda: self.ready)
        return await repair_findings(self.c, report, self.inp.max_share, self.sagas)

    @repair.validator
    def _repair_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        check_repair(self.guard.arg(raw, AuditReport, "repair"), self.members.running)
