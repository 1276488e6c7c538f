"""A shard cycle's work beyond the decision loop (`ShardCycle`, mixed into workflows/shard.py):
waiting for the cycle, running `decide()` with its metrics, carrying the decision out (at once,
or through the outbox beside the loop), and the periodic reads of the outside world that
never fail the shard (verify, notices, catch up, reconcile, capacity, unstick).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from functools import partial

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.wire import TransitionInput, shard_workflow_id
    from bigfleet.engine import Decision
    from bigfleet.models import Transition
    from bigfleet.spend import export
    from workflows.actions import batched
    from workflows.outbox import NOTICE_ITEMS
    from workflows.provider_sync import NOTICES
    from workflows.shard_parts import ShardParts

UNSTICK = "unstick-timed-out"  # runs begun before leave a machine stuck in its transition
UNSTICK_MAX = 200  # machines failed for their transition's time read back at one reconcile


class ShardCycle(ShardParts):
    """What a shard cycle does around `decide()`, and the outside reads it survives."""

    async def _next_cycle(self, closing: bool = False) -> None:
        """Wait for the next cycle: `cycle_seconds`. A cycle that never waits on Temporal runs
        at the first activation past its time (a result, a roll-up, a start acknowledged) or at
        its timer, whichever comes first: a loaded server fires timers late (cycle timers
        18-21 s late at 1 000 transitions in flight, each polling on its own timer), while
        signals and activity results keep arriving. The quiet cycle before a continue-as-new
        (`closing`) comes as soon as nothing is out (`_settled`)."""
        if not self.background:
            await workflow.sleep(self.cfg.cycle_seconds)
            return
        due = workflow.now().timestamp() + self.cfg.cycle_seconds
        self.woken = False
        try:
            await workflow.wait_condition(
                lambda: workflow.now().timestamp() >= due
                or self.woken
                or (closing and self._settled()),
                timeout=self.cfg.cycle_seconds,
            )
        except TimeoutError:
            pass

    def _cycle(self, now: float) -> Decision:
        """Run `decide()` (the pure shard's cycle), and record what it took and decided, and
        what the machines cost, as metrics (`status` and `cluster` show the cost too)."""
        with workflow.unsafe.sandbox_unrestricted():
            start = time.perf_counter()
        self._tell_engine(now)  # (what the coordinator says is free elsewhere: shard_pool.py)
        decision = self.shard.cycle(now)
        with workflow.unsafe.sandbox_unrestricted():
            self.last_cycle_ms = (time.perf_counter() - start) * 1000
        meter = workflow.metric_meter().with_additional_attributes({"shard": str(self.shard.id)})
        meter.create_histogram_float(
            "bigfleet_decision_cycle_seconds", "decide() plus applying its actions", "s"
        ).record(self.last_cycle_ms / 1000)
        actions = meter.create_counter("bigfleet_actions_total", "actions decided")
        for kind in ("create", "configure", "drain", "delete", "verify"):
            # (0 too: every kind exported from the first cycle, so a rate sees the first one)
            actions.add(decision.count(kind), {"kind": kind})
        for state, n in self.shard.machines_by_state().items():
            meter.create_gauge("bigfleet_machines", "machines by state").set(n, {"state": state})
        meter.create_gauge("bigfleet_shortfalls", "unserved needs").set(len(decision.shortfalls))
        # What the machines cost (bigfleet/spend.py), measured right after the cycle (its
        # assignments are newer than its claims) and again only once what it reads changed;
        # kept for `status` and `cluster`, set as gauges (once more after a replay, which
        # records no metrics). It reads the shard and enters no history; a bug in it is
        # logged, never a failed workflow task.
        try:
            shard = self.shard
            read = (shard.inventory, shard.needs, shard.engine.claims)
            seen = (read, (shard.inventory.version, shard.needs.version))
            last = self.spend_seen
            if (
                last is None
                or last[1] != seen[1]
                or any(a is not b for a, b in zip(last[0], read, strict=True))
            ):
                self.spend_now = shard.spend(assigned_at=now)
                self.spend_at = now
            self.spend_seen = seen
            now_spend = self.spend_now
            if now_spend is not None and self.spend_set is not now_spend:
                if not workflow.unsafe.is_replaying():
                    self.spend_keys = export(meter, now_spend, self.spend_keys)
                    self.spend_set = now_spend
        except Exception as err:
            workflow.logger.warning("shard %s: measuring its cost: %r", self.shard.id, err)
        return decision

    async def _act(self, decision: Decision, now: float, next_reconcile: float) -> float:
        """Carry the decision out, and reconcile with the providers when it is time; returns
        when the next reconcile is due."""
        # Suspects stay suspect: a verify that failed is asked for again next cycle.
        verify = partial(self.providers.verify, decision, now)
        await self._survive("verifying silent machines", verify)
        await self._notices(now)
        starts = self._take_starts(decision)
        if workflow.patched("batched-transitions"):  # (runs begun before start one per machine)
            starts = batched(starts, self._batch_limits())
        # Runs begun before bounded cycles replay as they ran (every start in one task).
        bounded = workflow.patched("bounded-cycle")
        left = await self.outbox.send(
            starts,
            self.shard.operator_updates(decision, NOTICE_ITEMS if bounded else None),
            bounded,
        )
        self.pipeline = left + self.pipeline
        return await self._reconcile(now, next_reconcile)

    def _queue(self, decision: Decision, now: float, chores: bool = True) -> None:
        """The background cycle's `_act`: queue the decision's starts and notices in the
        outbox, and start the chores that are due (verify, catch up, reconcile) unless the
        last ones are still out (or `chores` is False). Nothing here waits."""
        if self.cfg.record:  # (workflows/shard_record.py)
            self.recorder.cycle(now, decision.actions)
        self.outbox.push(batched(self._take_starts(decision), self._batch_limits()), now)
        self.outbox.tell(self.shard.operator_updates(decision, NOTICE_ITEMS))
        if self.pumping is None or self.pumping.done():  # (started, or restarted after a bug)
            self.pumping = asyncio.ensure_future(self.outbox.pump())
            self.pumping.add_done_callback(self._pump_stopped)
        if chores and (self.chores is None or self.chores.done()):
            self.chores = asyncio.ensure_future(self._chores(decision, now))

    async def _chores(self, decision: Decision, now: float) -> None:
        """What `_act` does after the starts, beside the loop."""
        await self._survive(
            "verifying silent machines", partial(self.providers.verify, decision, now)
        )
        await self._notices(now)
        due = self.next_reconcile
        self.next_reconcile = await self._reconcile(now, due)
        if self.cfg.record:
            if self.next_reconcile != due:  # (reconciled: what it holds, as listed)
                self.recorder.holdings(now)
            await self.recorder.flush()

    def _take_starts(self, decision: Decision) -> list[TransitionInput]:
        """The decision's transitions, after those queued since the last cycle; the queue is
        emptied (instructions may queue more while the starts go out)."""
        made = [self.inputs.of_action(a) for a in decision.actions]
        starts = self.pipeline + [s for s in made if s is not None]
        self.pipeline = []
        return starts

    def _batch_limits(self) -> dict[Transition, int]:
        """Machines a workflow of each kind carries (deletes batched only where the cycle
        never waits: runs begun before replay as they ran)."""
        limits = {
            Transition.CONFIGURE: self.cfg.configure_batch,
            Transition.DRAIN: self.cfg.drain_batch,
        }
        if self.background:
            limits[Transition.DELETE] = self.cfg.delete_batch
        return limits

    async def _notices(self, now: float) -> None:
        """Read the providers' notices when due (`notice_seconds`; runs begun before do not)."""
        if now >= self.next_notices and workflow.patched(NOTICES):
            self.next_notices = now + self.cfg.notice_seconds
            await self.providers.notices(now)

    async def _reconcile(self, now: float, next_reconcile: float) -> float:
        """Catch up and reconcile with the providers if it is time; when it is next due."""
        if now >= next_reconcile and self.providers.owed:
            await self._survive("catching up with providers", self.providers.catch_up)
        if now >= next_reconcile and await self._survive(
            "reconciling with the providers",
            partial(self._reconcile_failed, now),
            partial(self._capacity, now),
            partial(self._unstick, now),
        ):
            next_reconcile = now + self.cfg.reconcile_seconds
        return next_reconcile

    async def _reconcile_failed(self, now: float) -> None:
        """Failed machines read back from their providers; what they need queued."""
        self.pipeline += await self.providers.reconcile_failed(now)

    async def _unstick(self, now: float) -> None:
        """Machines failed for their transition's time that no result came back for within
        `unstick_seconds` are read from their providers (`ProviderSync.unstick`; runs begun
        before leave them failed)."""
        stuck = self.shard.timed_out(now - self.cfg.unstick_seconds, UNSTICK_MAX)
        if stuck and workflow.patched(UNSTICK):
            await self.providers.unstick(stuck, now)

    async def _capacity(self, now: float) -> None:
        """The providers' capacity read (mid-split or merging away: the split decides where
        capacity goes)."""
        if not (self.steps.joining or self.steps.merging):
            await self.providers.capacity(now, self.steps.inherited)

    async def _survive(self, what: str, *steps: Callable[[], Awaitable[None]]) -> bool:
        """Run periodic steps that read the outside world, in order; one that fails after its
        retries (a provider down, a malformed reply) is logged and surfaced in `status`, the
        rest wait for the next time, and the shard carries on with its last good state: it
        never fails for it. False if a step failed."""
        for step in steps:
            try:
                await step()
            except ActivityError as err:
                self._note_failure(what, err)
                return False
        return True

    def _note_failure(self, what: str, err: ActivityError) -> None:
        """An outside call that failed after its retries: logged, and kept for `status`."""
        cause = err.cause if err.cause is not None else err
        message = f"{what}: {cause}"
        workflow.logger.warning("shard %s: %s", self.shard.id, message)
        self.failures = [*self.failures[-9:], {"at": workflow.now().timestamp(), "error": message}]

    def _drop_unwanted_creates(self) -> None:
        """Creates still queued for demand that has gone are dropped, their machines let go
        (bigfleet/shard.py `unwanted_creates`)."""
        queued = [
            (t.cluster, t.machine_ids)
            for t in self.outbox.queued()
            if t.transition is Transition.CREATE and t.cluster
        ]
        gone = set(self.shard.unwanted_creates(queued))
        if not gone:
            return
        self.shard.withdraw(gone)

        def keep(t: TransitionInput) -> TransitionInput | None:
            if t.transition is not Transition.CREATE or gone.isdisjoint(t.machine_ids):
                return t
            ids = [m for m in t.machine_ids if m not in gone]
            return t.model_copy(update={"machine_ids": ids}) if ids else None

        self.outbox.keep(keep)

    async def _forward(self) -> None:
        """Roll-ups of clusters that moved away go to their new shard."""
        forward, self.forward = self.forward, {}
        for cluster, raw in forward.items():
            target = shard_workflow_id(self.shard.moved[cluster])
            try:
                await workflow.get_external_workflow_handle(target).signal("rollup", raw)
            except Exception as err:  # gone (merged away): the sender asks the coordinator
                workflow.logger.warning("roll-up of %s not passed to %s: %s", cluster, target, err)

    def _pump_stopped(self, pumping: asyncio.Future[None]) -> None:
        """A bug in the outbox is logged; the next cycle starts it again."""
        err = None if pumping.cancelled() else pumping.exception()
        if err is not None:
            workflow.logger.error("shard %s: the outbox stopped: %r", self.shard.id, err)
