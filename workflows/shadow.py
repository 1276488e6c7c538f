"""A shard in shadow mode (docs/shadow.md, design §13 phase 1): it decides every cycle on the
fleet as the providers show it, and starts nothing. A helper object of the shard workflow:
each cycle `decide` runs the decision and records it, then `follow` lists every provider (reads
only), records what others changed since the last listing, and folds the listing in, which
undoes the decision's hypothetical transitions. Its record (bigfleet/shadow.py) crosses
continue-as-new in the shard's state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.wire import ShardConfig
    from bigfleet.assignment import machine_shard
    from bigfleet.engine import Decision
    from bigfleet.models import Machine
    from bigfleet.shadow import Baseline, ShadowBook, observed_changes, per_cluster, would_be
    from bigfleet.shard import Shard
    from workflows.provider_sync import ProviderSync


class ShadowSync:
    """A shadow shard's decide-and-follow loop and its record (see the module)."""
    def __init__(
        self,
        shard: Shard,
        cfg: ShardConfig,
        providers: ProviderSync,
        note: Callable[[str, ActivityError], None],
    ) -> None:
        self.shard = shard
        self.cfg = cfg
        self.providers = providers
        self.note = note
        self.book = ShadowBook()
        # The inventory as the last listing left it (taken before this run's first decision).
        self.base: Baseline | None = None
        # Configured and on their way per cluster at every provider, by the last listing.
        self.at_providers: tuple[Counter[str], Counter[str]] | None = None

    def restore(self, state: dict[str, Any] | None) -> None:
        """Take up the record carried across continue-as-new (None: a fresh one)."""
        self.book = ShadowBook(state)

    def decide(self, now: float, cycle: Callable[[float], Decision]) -> Decision:
        """The cycle's decision, recorded as what the shard would have done."""
        inv = self.shard.inventory
        self.base = Baseline.of(inv)
        decision = cycle(now)
        actions = would_be(decision, inv, now)
        self.book.decided(self.base, inv, self.shard.needs, actions, now, self.at_providers)
        try:  # (the report's spend figures: a bug there is logged, never a failed task)
            base = self.base
            self.book.measured(
                self.shard.spend(assigned_at=now),
                self.shard.spend(state=base.state, cluster=base.cluster),
            )
        except Exception as err:
            workflow.logger.warning("shadow shard %s: measuring spend: %r", self.shard.id, err)
        return decision

    async def follow(self) -> None:
        """List every provider; record what changed there since the decision's baseline and
        make the inventory what they show (machines of this shard by the assignment rule). A
        provider that does not answer keeps its machines as they were until the next cycle."""
        now = workflow.now().timestamp()
        listed: list[tuple[str, Machine]] = []
        answered: set[str] = set()
        for provider in self.cfg.providers:
            try:
                listed += [(provider, m) for m in await self.providers.listing(provider, now)]
                answered.add(provider)
            except ActivityError as err:
                self.note(f"listing provider {provider} (shadow)", err)
        shards = self.cfg.shards
        ours = [(p, m) for p, m in listed if machine_shard(m, shards) == self.cfg.shard]
        mine = [m for _, m in ours]
        inv = self.shard.inventory
        changes = observed_changes(self.base, inv, ours, answered, now) if self.base else []
        # Every machine the listing shows otherwise is replaced by the listed record, whatever
        # the jump (the decision's transitions, or a CONFIGURING machine whose provider does
        # not name its cluster yet); unlisted ones of the providers that answered are let go.
        changed = [
            m.id
            for m in mine
            if (row := inv.ids.find(m.id)) >= 0
            and (inv.state_of(row) is not m.state or inv.cluster_of(row) != m.cluster)
        ]
        self.shard.release(changed)
        self.shard.adopt(mine, now)
        self.shard.reconcile_listing(mine, now, answered)
        if answered == set(self.cfg.providers):
            self.at_providers = per_cluster(m for _, m in listed)
        configured = (self.at_providers or per_cluster(m for _, m in listed))[0]
        self.book.listed(changes, configured, self.shard.needs, now)

    def report(self) -> dict[str, Any]:
        """What the shard would have done against what happened (`bigfleet shadow report`)."""
        return self.book.report(self.shard.id)
