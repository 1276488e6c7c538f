"""A shard workflow and its providers (design §7, §10, §11): what it adopts when it starts, how a
revived shard reconciles with the providers' lists, machines that failed unwatched, and
capacity that comes and goes — every listing read page by page, and no machine kept that
another shard owns. A helper object of the shard workflow, handed the shard it serves, how that
shard runs and how to make transition inputs; it keeps one thing of its own (`unowned`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.membership import ShareRead, UnownedPage, UnownedRead
    from activities.wire import (
        ELSEWHERE_MAX,
        LIST_PAGE,
        AdoptCursor,
        CapacityDiff,
        CapacityRead,
        MachinePage,
        ProviderRead,
        ShardConfig,
        TransitionInput,
        provider_task_queue,
    )
    from bigfleet.assignment import machine_shard
    from bigfleet.engine import Decision
    from bigfleet.models import DeleteReason, Machine, MachineState, Transition
    from bigfleet.shard import Shard
    from workflows.actions import TransitionInputs

S = MachineState
T = Transition
# Runs begun before adopt a configured machine by rack or id, not into its cluster's home.
BY_CLUSTER = "adopt-by-cluster"
# Runs begun before neither read providers' notices nor repair machines a verify found up
# while their cluster did not see them (bigfleet/notices.py).
NOTICES = "provider-notices"
REPAIR = "repair-unseen"
CARRY_NOTICES = "carry-notices"  # (their state across continue-as-new, workflows/shard_carry.py)
NOTICED_MAX = 2000  # machines under notice read from one provider at a time
QUICK: dict[str, Any] = dict(
    start_to_close_timeout=timedelta(seconds=60),
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=10),
)
# Reads of the periodic reconcile: a few quick tries, then the shard carries on and reads again
# at the next reconcile (a provider down must not stall every decision of the shard).
PERIODIC: dict[str, Any] = dict(
    start_to_close_timeout=timedelta(seconds=60),
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3),
)
# The read of notices: once, briefly (it comes again in `notice_seconds`; a provider that
# does not answer must not hold up the verifies and reconciles that follow it).
GLANCE: dict[str, Any] = dict(
    start_to_close_timeout=timedelta(seconds=20),
    retry_policy=RetryPolicy(maximum_attempts=1),
)
# Reads a shard cannot start without (its machines): tried until they answer.
PATIENT: dict[str, Any] = dict(
    start_to_close_timeout=timedelta(seconds=60),
    retry_policy=RetryPolicy(
        initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=60)
    ),
)


class ProviderSync:
    """How a shard keeps in step with its providers: adoption at start, reconcile after a revival,
    failed machines nobody watched, and capacity that came or went (see the module)."""
    def __init__(
        self,
        shard: Shard,
        cfg: ShardConfig,
        inputs: TransitionInputs,
        note: Callable[[str, ActivityError], None],
    ) -> None:
        self.shard = shard
        self.cfg = cfg
        self.inputs = inputs
        # How a failed read is reported (the shard's `status` failures).
        self.note = note
        # New capacity seen unowned at the last look (adopted if still unowned at the next).
        self.unowned: set[str] = set()
        # Providers whose listing failed at start or revival (down for good, a malformed reply):
        # the shard serves from the others, and lists these again at every reconcile until one
        # answers (`catch_up`). Carried across continue-as-new in the state.
        self.owed: set[str] = set()

    async def reconcile_restored(self) -> None:
        """Observe every machine this shard owns as its provider lists it now; give up those
        no provider lists. Adopts nothing: machines it does not own are another shard's."""
        listed: list[Machine] = []
        answered: set[str] = set()
        for provider in self.cfg.providers:
            try:
                listed += await self.listing(provider, workflow.now().timestamp(), patient=True)
                answered.add(provider)
            except ActivityError as err:  # its machines stay as they were until it answers
                self.note(f"listing provider {provider} after a restart", err)
                self.owed.add(provider)
        summary = self.shard.reconcile_listing(listed, workflow.now().timestamp(), answered)
        workflow.logger.warning(
            "shard %s restarted with epoch %s, reconciled with providers: %s",
            self.shard.id,
            self.shard.epoch,
            summary,
        )

    async def drop_owned_elsewhere(self) -> None:
        """Machines another shard owns now are not this one's: they moved away after the state
        it started from (a revival from an older snapshot, or from scratch by the assignment
        rule). Ownership stays exactly-once. The `owned_elsewhere` activity reads this shard's
        ids by queries; only the answer enters the history."""
        while True:
            elsewhere: list[str] = await workflow.execute_activity(
                "owned_elsewhere",
                self.shard.id,
                task_queue=workflow.info().task_queue,
                result_type=list[str],
                heartbeat_timeout=timedelta(seconds=60),
                **{**PATIENT, "start_to_close_timeout": timedelta(minutes=10)},
            )
            if elsewhere:
                self.shard.release(elsewhere)
                self.shard.transfer_out.difference_update(elsewhere)
                workflow.logger.warning(
                    "shard %s gave up %d machines other shards own: %s",
                    self.shard.id, len(elsewhere), elsewhere[:10],
                )
            if len(elsewhere) < ELSEWHERE_MAX:
                return

    async def adopt_unowned(self, inherited: list[int], clusters: list[str] | None = None) -> int:
        """After a revival, before the shard decides again: take back the machines no shard
        owns that are this shard's — configured (configuring, draining) for one of its
        clusters, or without a cluster, not speculative, and its by the assignment rule (or a
        merged-away shard's it inherited). Those are what it adopted after the point it came
        back from (a saga's adopt after its snapshot, or after a reset point): left alone,
        nobody would own them until an audit, and the needs they served would be short, so
        the shard would create or preempt to replace its own machines. `provider_unowned`
        lists and asks the shards and the coordinator (no machine a transfer saga carries);
        only what to adopt, a page at a time, enters the history. Returns how many.
        `clusters`: those clusters' (one managed again: bigfleet/cluster_modes.py), instead."""
        clusters = self.shard.needs.clusters() if clusters is None else clusters
        taken = 0
        for provider in self.cfg.providers:
            now = workflow.now().timestamp()  # one listing for all the calls
            after = ""
            while True:
                try:
                    page: UnownedPage = await workflow.execute_activity(
                        "provider_unowned",
                        UnownedRead(
                            provider=provider,
                            now=now,
                            shard=self.cfg.shard,
                            shards=self.cfg.shards,
                            shares=[self.cfg.shard, *inherited],
                            clusters=clusters,
                            after=after,
                        ),
                        task_queue=provider_task_queue(provider) + "-read",
                        result_type=UnownedPage,
                        heartbeat_timeout=timedelta(seconds=60),
                        **{**QUICK, "start_to_close_timeout": timedelta(minutes=10)},
                    )
                except ActivityError as err:  # they stay nobody's (an audit finds them)
                    self.note(f"taking back machines of provider {provider} no shard owns", err)
                    break
                # Asked while this run waited: only those still not its own.
                nobodys = [
                    m for m in page.page.machines() if self.shard.ownership(m.id) == "GONE"
                ]
                if nobodys:
                    self.shard.adopt(nobodys, workflow.now().timestamp())
                    taken += len(nobodys)
                    shown = [f"{m.id} ({m.state.value} {m.cluster or ''})" for m in nobodys[:10]]
                    workflow.logger.warning(
                        "shard %s took back %d machines of %s that no shard owned: %s",
                        self.shard.id,
                        len(nobodys),
                        provider,
                        shown,
                    )
                if not page.after:
                    break
                after = page.after
        return taken

    async def listing(
        self, provider: str, now: float, states: list[S] | None = None, patient: bool = False
    ) -> list[Machine]:
        """A provider's machines (in `states`), page by page; `patient` at start-up."""
        out: list[Machine] = []
        while True:
            after = out[-1].id if out else ""
            page = await self.listing_page(provider, now, states, after, patient)
            out += page
            if len(page) < LIST_PAGE:
                return out

    async def share_page(
        self, provider: str, now: float, after: str, by_cluster: bool
    ) -> tuple[list[Machine], str]:
        """This shard's machines of one page of a provider's listing (`provider_share`: only
        they enter the history), and the id the next page goes on after ("": the end)."""
        page: UnownedPage = await workflow.execute_activity(
            "provider_share",
            ShareRead(
                provider=provider,
                now=now,
                shard=self.cfg.shard,
                shards=self.cfg.shards,
                after=after,
                by_cluster=by_cluster,
            ),
            task_queue=provider_task_queue(provider) + "-read",
            result_type=UnownedPage,
            **PATIENT,
        )
        return page.page.machines(), page.after

    async def listing_page(
        self, provider: str, now: float, states: list[S] | None, after: str, patient: bool
    ) -> list[Machine]:
        """One page of a provider's listing: the machines after id `after`."""
        page: MachinePage = await workflow.execute_activity(
            "provider_list",
            ProviderRead(
                provider=provider, now=now, states=[s.value for s in states or []], after=after
            ),
            task_queue=provider_task_queue(provider) + "-read",
            result_type=MachinePage,
            **(PATIENT if patient else PERIODIC),
        )
        return page.machines()

    async def adopt(self, start: AdoptCursor | None) -> AdoptCursor | None:
        """Take this shard's share of every provider's machines: whole racks, cloud slots by id
        (design §5), page by page from `start`. Every machine it takes costs history (~90 bytes),
        so past `adopt_history_bytes` this stops and returns where the next run goes on (a
        100 000-machine fleet would otherwise pass Temporal's 50 MB limit in one run); None
        once everything is adopted. A restarted shard adopts machines as they are,
        mid-transition included."""
        first = start.provider if start else 0
        own_share = workflow.patched("adopt-own-share")
        by_cluster = workflow.patched(BY_CLUSTER)
        for i, provider in enumerate(self.cfg.providers[first:], start=first):
            after = start.after if start and i == first else ""
            now = workflow.now().timestamp()  # one listing for all its pages
            try:
                while True:
                    if own_share:
                        mine, after = await self.share_page(provider, now, after, by_cluster)
                        done = not after
                    else:  # (runs begun before read every shard's machines)
                        page = await self.listing_page(provider, now, None, after, patient=True)
                        shards = self.cfg.shards
                        mine = [m for m in page if machine_shard(m, shards) == self.cfg.shard]
                        done, after = len(page) < LIST_PAGE, page[-1].id if page else ""
                    self.shard.adopt(mine, workflow.now().timestamp())
                    if done:
                        break
                    if workflow.info().get_current_history_size() > self.cfg.adopt_history_bytes:
                        return AdoptCursor(provider=i, after=after)
            except ActivityError as err:  # the shard serves from the other providers
                self.note(f"adopting the machines of provider {provider}", err)
                self.owed.add(provider)
        return None

    async def catch_up(self) -> None:
        """List the providers owed since start or revival again: adopt this shard's share of
        their machines and bring those it holds in line. One that fails again stays owed."""
        for provider in sorted(self.owed):
            now = workflow.now().timestamp()
            try:
                listed = await self.listing(provider, now)
            except ActivityError as err:
                self.note(f"listing provider {provider} (owed since start)", err)
                continue
            shards, by_cluster = self.cfg.shards, workflow.patched(BY_CLUSTER)
            mine = [m for m in listed if machine_shard(m, shards, by_cluster) == self.cfg.shard]
            self.shard.adopt(mine, now)
            self.shard.reconcile_listing(listed, now, {provider})
            self.owed.discard(provider)
            await self.drop_owned_elsewhere()

    async def reconcile_failed(self, now: float) -> list[TransitionInput]:
        """Machines that failed while nobody watched (a spot interruption): fold them in; the
        deletes that clean them up (so their need gets a replacement) are returned."""
        cleanups: list[TransitionInput] = []
        for provider in self.cfg.providers:
            try:
                failed = await self.listing(provider, now, [S.FAILED])
            except ActivityError as err:  # the others are still read
                self.note(f"listing failed machines of provider {provider}", err)
                continue
            inv = self.shard.inventory
            for m in failed:
                row = inv.ids.find(m.id)
                if row < 0 or m.failed_from not in (S.IDLE, S.CONFIGURED, None):
                    continue  # a failed transition: its own workflow takes the corrective path
                if inv.state_of(row) is not S.FAILED:
                    self.shard.observe(m, now)
                    if m.capacity_type.value != "bare-metal":
                        cleanups.append(
                            self.inputs.make(T.DELETE, [m.id], reason=DeleteReason.FAILED.value)
                        )
        return cleanups

    async def capacity(self, now: float, inherited: list[int]) -> None:
        """Capacity that came or went since the shard started (design §16): speculative machines
        its providers no longer list are given up (quota shrank); new ones that are this
        shard's by the assignment rule — or a merged-away shard's it inherited — are adopted
        once no shard owns them at two looks in a row and no transfer saga carries them (a
        machine between a saga's release and adopt is nobody's, for as long as the adopt is
        late). The comparison runs in `provider_capacity`, which
        reads the listing and asks this shard by queries: only the changes enter the history
        (a listing of 20 000 slots here was 12 MB of history per reconcile). `inherited`: the
        shards merged into this one, whose share it takes."""
        inv = self.shard.inventory
        unowned: set[str] = set()
        for provider in self.cfg.providers:
            try:
                diff: CapacityDiff = await workflow.execute_activity(
                    "provider_capacity",
                    CapacityRead(
                        provider=provider,
                        now=now,
                        shard=self.cfg.shard,
                        shards=self.cfg.shards,
                        shares=[self.cfg.shard, *inherited],
                    ),
                    task_queue=provider_task_queue(provider) + "-read",
                    result_type=CapacityDiff,
                    **PERIODIC,
                )
            except ActivityError as err:  # the others are still read
                self.note(f"reading the capacity of provider {provider}", err)
                unowned |= self.unowned  # its candidates wait for the next look
                continue
            # Read while this run waited: keep what still holds now.
            gone = [
                mid
                for mid in diff.gone
                if (row := inv.ids.find(mid)) >= 0 and inv.state_of(row) is S.SPECULATIVE
            ]
            if gone:
                self.shard.release(gone)
                workflow.logger.info("shard %s: %d speculative gone", self.shard.id, len(gone))
            nobodys = [m for m in diff.fresh if self.shard.ownership(m.id) == "GONE"]
            unowned.update(m.id for m in nobodys)
            new = [m for m in nobodys if m.id in self.unowned]
            if new:
                self.shard.adopt(new, now)
                workflow.logger.info("shard %s: adopted %d new machines", self.shard.id, len(new))
        self.unowned = unowned

    async def verify(self, decision: Decision, now: float) -> None:
        """Machines a cluster stopped reporting: ask their provider; dead ones are replaced."""
        suspects: dict[str, list[str]] = {}
        for a in decision.actions:
            if a.kind == "verify":
                suspects.setdefault(a.provider, []).append(a.machine_id)
        for provider, ids in suspects.items():
            machines: list[Machine] = await workflow.execute_activity(
                "provider_get",
                ProviderRead(provider=provider, machine_ids=ids, now=now),
                task_queue=provider_task_queue(provider) + "-read",
                result_type=list[Machine],
                **PERIODIC,
            )
            repair = workflow.patched(REPAIR)  # (runs begun before take "up" as healthy)
            for m in machines:
                if m.state is S.CONFIGURED:
                    self.shard.verified_up(m.id, repair)
                    self.shard.notices.note(m.id, m.notice, now)
                else:
                    self.shard.observe(m, now)

    async def notices(self, now: float) -> None:
        """Each provider's machines under a notice (`Machine.notice`, bigfleet/notices.py):
        the shard takes the notices of its own; the notices of its other machines of that
        provider have ended. Only the notice: a machine's state comes from its transition's
        result (a read taken while a drain starts would undo it). A provider that does not
        answer is asked again next time; the others are still read."""
        inv = self.shard.inventory
        for provider in self.cfg.providers:
            try:
                machines: list[Machine] = await workflow.execute_activity(
                    "provider_noticed",
                    ProviderRead(provider=provider, now=now, limit=NOTICED_MAX),
                    task_queue=provider_task_queue(provider) + "-read",
                    result_type=list[Machine],
                    **GLANCE,
                )
            except ActivityError as err:
                self.note(f"reading the notices of provider {provider}", err)
                continue
            for m in machines:
                if inv.ids.find(m.id) >= 0:
                    self.shard.notices.note(m.id, m.notice, now)
            if len(machines) < NOTICED_MAX:  # (all of them: the rest have none)
                theirs = {
                    mid
                    for mid in self.shard.notices.notes
                    if (row := inv.ids.find(mid)) >= 0 and inv.profile_of(row).provider == provider
                }
                self.shard.notices.settle(theirs, {m.id for m in machines})

    async def unstick(self, stuck: list[str], now: float) -> None:
        """Machines the shard failed for their transition's time (`Shard.timed_out`) that no
        result came back for since: their transition's answer was lost on the way (design §9: a
        shard watches transitional states for ones stuck too long). Their provider is asked
        what they are and its word taken; one it no longer has is given up."""
        inv = self.shard.inventory
        asked: dict[str, list[str]] = {}
        for mid in stuck:
            asked.setdefault(inv.profile_of(inv.row(mid)).provider, []).append(mid)
        for provider, ids in sorted(asked.items()):
            machines: list[Machine] = await workflow.execute_activity(
                "provider_get",
                ProviderRead(provider=provider, machine_ids=ids, now=now, missing_ok=True),
                task_queue=provider_task_queue(provider) + "-read",
                result_type=list[Machine],
                **PERIODIC,
            )
            for m in machines:
                self.shard.observe(m, now)
            answered = {m.id for m in machines}
            # (Still held and still failed: a result may have come while the provider answered.)
            gone = [
                mid
                for mid in ids
                if mid not in answered
                and inv.ids.find(mid) >= 0
                and inv.state_of(inv.ids.find(mid)) is S.FAILED
            ]
            self.shard.release(gone)
