"""The shard controller (seed §5, §6 tier 2) as a long-running workflow, one per shard.

State lives in memory (needs table + columnar inventory) and crosses continue-as-new as a compact
snapshot. Roll-ups arrive as signals, transition results as signals from the transition
workflows, coordinator instructions as fenced updates. Every cycle (a durable timer) runs the
pure `decide()` and starts the transition workflows it asks for.
"""

# About 450 lines: the shard's signals, queries and decision loop (seed §8's cycle) in one
# place; what they use is in helper objects (actions, provider_sync, snapshot_store, guard,
# instruction_steps) and mixins (instructions, audit_handlers, shard_results: what transitions
# report back).

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import cached_property, partial
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.wire import (
        SHARD_TASK_QUEUE,
        AdoptCursor,
        MailboxTake,
        ShardConfig,
        ShardInput,
        SnapshotRef,
        TakenResults,
        TransitionInput,
        TransitionResult,
        shard_workflow_id,
    )
    from bigfleet.engine import Decision
    from bigfleet.inputs import SIGNAL_BYTES, Rejected, json_size, number
    from bigfleet.models import (
        MachineState,
        Transition,
        from_wire,
    )
    from bigfleet.policy import Policy
    from bigfleet.shard import Shard
    from bigfleet.snapshot import restore_shard, shard_state
    from bigfleet.spend import Spend, export
    from workflows.actions import TransitionInputs, batched
    from workflows.audit_handlers import AuditHandlers
    from workflows.guard import Guard, TakesSignals, accepts
    from workflows.instruction_steps import InstructionSteps
    from workflows.instructions import InstructionHandlers
    from workflows.new_clusters import NewClusters
    from workflows.outbox import NOTICE_ITEMS, Outbox
    from workflows.provider_sync import CARRY_NOTICES, NOTICES, ProviderSync
    from workflows.shadow import ShadowSync
    from workflows.shard_results import HISTORY_BYTES_REGARDLESS, TransitionResults
    from workflows.snapshot_store import SnapshotStore

S = MachineState
T = Transition
EARLY_ROLLUP_BYTES = 500_000  # roll-ups waiting while the state is read back or written
ROLLUP_BATCH = 500  # roll-ups in one `rollups` signal, at most
ROLLUPS_BYTES = 1_900_000  # a `rollups` signal's payload (Temporal refuses one over 2 MB)
CYCLE_ENDS = 64  # when the last cycles ran, kept for `status` (the intervals between them)
LATE_INLINE_BYTES = 1_000_000  # results and roll-ups a continue-as-new's input carries
LATE_ROUNDS = 3  # writes of what arrives while the state is written, at most
# Quiet cycles a due continue-as-new waits through at most for what is out (`_quiet_first`).
QUIET_CYCLES = 10
RUN_GROWTH_BYTES = 6_000_000  # history a run's cycles add before it continues as new
RUN_GROWTH_EVENTS = 8_000  # or events (Temporal's own suggestion comes at 4 MB / 4 096)
# Taking from the mailbox: quick tries; a take that failed is tried again next cycle. Runs
# with ACKED_TAKE say what they have, and the mailbox lets results go only then.
ACKED_TAKE = "acked-take"
TAKE_WAKES = "take-wakes-the-cycle"  # the take is answered when the next cycle is due
UNSTICK = "unstick-timed-out"  # runs begun before leave a machine stuck in its transition
UNSTICK_MAX = 200  # machines failed for their transition's time read back at one reconcile
QUICK_TAKE: dict[str, Any] = dict(
    start_to_close_timeout=timedelta(seconds=30),
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2),
)


def _taken(state: object) -> tuple[str, int]:
    """The last result taken, as the last run saved it (anyone may start a shard with any
    input: what is not a chain and a number is no result taken)."""
    if isinstance(state, list) and len(state) == 2:
        chain, after = state
        if isinstance(chain, str) and type(after) is int and after >= -1:
            return chain[:200], after
    return "", -1


def _fits(results: list[TransitionResult], rollups: list[dict[str, Any]]) -> bool:
    """Whether these travel inline in a continue-as-new's input (LATE_INLINE_BYTES)."""
    size = json_size(rollups)
    for r in results:
        size += json_size(r.model_dump(mode="json"))
        if size > LATE_INLINE_BYTES:
            return False
    return size <= LATE_INLINE_BYTES


@workflow.defn(name="Shard")
class ShardWorkflow(InstructionHandlers, AuditHandlers, TransitionResults, TakesSignals):
    @workflow.init
    def __init__(self, inp: ShardInput) -> None:
        self.cfg = inp.config
        self.shard = Shard(
            self.cfg.shard, Policy(cycle_seconds=self.cfg.cycle_seconds, **self.cfg.policy)
        )
        self.fresh = inp.state is None and inp.snapshot is None
        # What the machines cost as of the last cycle (bigfleet/spend.py; `_cycle`), when it
        # was measured, from what, and which gauges it last set.
        self.spend_now: Spend | None = None
        self.spend_at: float | None = None
        self.spend_seen: tuple | None = None
        self.spend_set: Spend | None = None
        self.spend_keys: Any = ()
        self.restarted = inp.restarted and not self.fresh
        # State in the snapshot store: read back first thing in `run`; until then roll-ups
        # wait and instructions are told to retry.
        self.restoring = inp.snapshot is not None
        self.snapshotting = False
        self.early_rollups: list[dict[str, Any]] = list(inp.rollups)
        self.early_bytes = 0
        self.guard = Guard(self, "Shard")
        self.inputs = TransitionInputs(self.shard, self.cfg)
        self.providers = ProviderSync(self.shard, self.cfg, self.inputs, self._note_failure)
        self.shadow = ShadowSync(self.shard, self.cfg, self.providers, self._note_failure)
        self.store = SnapshotStore(self.cfg)
        self.outbox = Outbox(self.cfg, self._note_failure)
        self.cycle_ends: deque[float] = deque(maxlen=CYCLE_ENDS)  # (workflow time; `status`)
        self._restore(inp.state, inp.joining)
        self.forward: dict[str, dict[str, Any]] = {}
        self.results: list[TransitionResult] = list(inp.results)
        self.pipeline: list[TransitionInput] = list(inp.pipeline)  # (a revived shard drops it)
        self.revive = False  # `revived` arrived: catch up with the providers next cycle
        self.revived_run = False  # (once per run)
        self.last_cycle_ms = 0.0
        # A cycle that never waits (workflows/outbox.py; set in `run`): its outside chores
        # (verify, reconcile, reports) run beside it, one of each at a time.
        self.background = False
        self.chores: asyncio.Future[None] | None = None
        self.pumping: asyncio.Future[None] | None = None  # the outbox's `pump`
        self.reporting: asyncio.Future[None] | None = None
        # Results taken from the shard's mailbox (workflows/mailbox.py; set in `run`).
        self.mailbox = False
        self.collecting: asyncio.Future[None] | None = None
        # The last result taken: its mailbox chain and number (the next take lets it go).
        self.taken: tuple[str, int] = ("", -1)
        self.woken = False  # a take came back at its time: the next cycle is due
        self.forwarding: asyncio.Future[None] | None = None
        self.next_reconcile = 0.0
        self.next_notices = 0.0
        self.base_history = (0, 0)  # history bytes and events before the first cycle
        self.started: dict[str, int] = {}
        # The last outside calls that failed after their retries (shown in `status`).
        self.failures: list[dict[str, Any]] = []

    def _restore(self, state: dict[str, Any] | None, joining: bool = False) -> None:
        if state is not None:
            restore_shard(state, self.shard)
            self.guard.rejections.absorb(state.get("guard"))
            self.providers.owed = set(state.get("owed_providers", []))
            self.outbox.restore(state.get("in_flight"))
            self.taken = _taken(state.get("taken"))
            ends = state.get("cycle_ends")
            for t in ends[-CYCLE_ENDS:] if isinstance(ends, list) else []:
                try:  # (the last run's; anyone may start a shard with any input)
                    self.cycle_ends.append(number(t, "cycle_ends"))
                except Rejected:
                    pass
        self.steps = InstructionSteps(self.shard, self.cfg, self.inputs, state or {})
        if self.cfg.shadow:
            self.shadow.restore((state or {}).get("shadow"))
        self.steps.joining = self.steps.joining or joining

    # ---- what people and operators send and ask ---------------------------------------------

    @accepts(dict[str, Any])
    def rollup(self, raw: dict[str, Any]) -> None:
        """A cluster's roll-up. An invalid one is recorded (`status`'s rejections) and dropped;
        the previous stands. One for a cluster that moved away in a split or merge is passed
        on to its new shard; one for a cluster this shard does not serve yet waits until the
        coordinator says it is this shard's (workflows/new_clusters.py)."""
        self._take_rollup(raw)

    @accepts(list[Any], max_bytes=ROLLUPS_BYTES)
    def rollups(self, batch: list[Any]) -> None:
        """Several clusters' roll-ups in one signal (ShardRouter batches what the gateway and
        operators send): each is taken as if sent alone, a bad one rejected on its own. One
        signal instead of hundreds: Temporal buffers at most 100 events while a workflow task
        runs and restarts the task past that, so a shard taking a roll-up signal per cluster
        could not finish a long task at fleet scale."""
        if len(batch) > ROLLUP_BATCH:
            raise Rejected(f"rollups: {len(batch)} roll-ups, at most {ROLLUP_BATCH} a signal")
        for i, raw in enumerate(batch):
            try:
                if not isinstance(raw, dict):
                    kind = type(raw).__name__
                    raise Rejected(f"rollups[{i}]: a roll-up is an object, got {kind}")
                size = json_size(raw)
                if size > SIGNAL_BYTES:
                    raise Rejected(
                        f"rollups[{i}]: {size} bytes, a roll-up has at most {SIGNAL_BYTES}"
                    )
                self._take_rollup(raw)
            except Rejected as err:
                self.guard.reject("rollups", str(err))

    def _take_rollup(self, raw: dict[str, Any]) -> None:
        if self.restoring or self.snapshotting:
            # Applied once the state is read / carried over; they may cross continue-as-new
            # in its input, so they are bounded in bytes.
            if not self.early_rollups:
                self.early_bytes = 0
            size = json_size(raw)
            if self.early_bytes + size > EARLY_ROLLUP_BYTES:
                raise Rejected(
                    f"rollup: the shard is busy reading or writing its state and "
                    f"{len(self.early_rollups)} roll-ups wait already; send it again"
                )
            self.early_rollups.append(raw)
            self.early_bytes += size
            return
        cluster = raw.get("cluster")
        if isinstance(cluster, str) and cluster in self.shard.moved:
            self.forward[cluster] = raw
            return
        if (
            isinstance(cluster, str)
            and not self.new_clusters.serves(cluster)
            and self.new_clusters.held(raw)
        ):
            return  # (in `early_rollups` until the coordinator answers: `new_clusters.settle`)
        # A stale roll-up still proves its cluster alive (runs begun before: as they ran).
        self.shard.needs.stale_keeps_alive = workflow.patched("stale-rollup-keeps-alive")
        reason = self.shard.receive(raw, workflow.now().timestamp())
        if reason:
            raise Rejected(reason)

    @cached_property
    def new_clusters(self) -> NewClusters:
        """Roll-ups of clusters this shard does not serve yet, and the question about them."""
        return NewClusters(self)

    @accepts(dict[str, str], optional=True)
    def revived(self, proof: dict[str, str] | None) -> None:
        """Sent by `revive_shard` right after the reset that brought this run back from the
        dead, naming this run. Refused unless this run was born of a reset (Temporal keeps the
        original run id across resets), names it, and is the first: a reset happens once per
        run, so anyone else's `revived` cannot force a new epoch on a healthy shard."""
        info = workflow.info()
        if not workflow.patched("revived-names-its-run"):
            self.revive = True  # (a history from before the check: replayed as it ran)
            return
        if info.run_id == info.original_execution_run_id:
            raise Rejected("revived: this run was not reset; nothing to revive")
        if not proof or proof.get("run_id") != info.run_id:
            raise Rejected("revived: run_id: must name the run the reset created")
        if self.revive or self.revived_run:
            raise Rejected("revived: this run was already revived")
        self.revive = self.revived_run = True

    async def _after_revival(self) -> None:
        """Back from a dead run's durable state (seed §6): a new epoch fences the dead run's
        transitions out, its queued starts are dropped (most were started; the next cycle redoes
        the rest), and the providers say what became of its machines meanwhile. Machines it
        adopted after the point it came back from are nobody's now: it takes back those of its
        clusters (and of its share) before it decides again, so it never replaces them."""
        self.shard.epoch = int(workflow.now().timestamp() * 1000)
        self.pipeline = []
        self.outbox.clear()
        await self.providers.reconcile_restored()
        await self.providers.drop_owned_elsewhere()
        # (Runs revived before this step replay without it. Mid-split or merging away, the
        # split decides where machines go.)
        if workflow.patched("revival-adopts-unowned") and not (
            self.steps.joining or self.steps.merging
        ):
            await self.providers.adopt_unowned(self.steps.inherited)

    @workflow.query
    def status(self) -> dict[str, Any]:
        self._not_restoring()
        last = self.shard.last
        return {
            "shard": self.shard.id,
            "epoch": self.shard.epoch,
            "cycles": self.shard.cycles,
            "last_cycle_ms": round(self.last_cycle_ms, 3),
            "machines": self.shard.machines_by_state(),
            "clusters": self.shard.needs.clusters(),
            "needs": len(self.shard.needs),
            "shortfalls": [s.model_dump(mode="json") for s in last.shortfalls],
            "rejections": list(self.shard.rejections)[-10:],
            "rejected_inputs": self.guard.rejections.counts,
            "coordinator_term": self.steps.fencing.term,
            "inherited": self.steps.inherited,
            "failures": self.failures,
            "shadow": self.cfg.shadow,
            # When the last cycles ran (workflow time, s): their intervals show a shard that
            # keeps deciding, or one that waits.
            "cycle_ends": [round(t, 3) for t in self.cycle_ends],
            # Transitions decided but not started yet, and how long the oldest has waited.
            "queued_starts": len(self.pipeline) + len(self.outbox.queue),
            "oldest_queued_seconds": round(self.outbox.oldest(workflow.now().timestamp()), 1),
            # Cycles' notices to operators not sent yet, and those dropped for newer ones.
            "queued_notices": len(self.outbox.notices),
            "dropped_notices": self.outbox.dropped_notices,
            # Transitions started and not reported back (at most `max_in_flight`).
            "in_flight": len(self.outbox.in_flight),
            # Machine records of transition results not folded in yet (over `fold_per_cycle`).
            "waiting_results": self._backlog(self.results),
            # $/h in all, by capacity type and band, idle owned machines, elastic machines an
            # idle owned one could replace, as of the last cycle (None before this run's first).
            "spend": (
                {**self.spend_now.summary(), "at": self.spend_at}
                if self.spend_now is not None
                else None
            ),
        }

    @workflow.query
    def shadow_report(self) -> dict[str, Any]:
        """Shadow mode's record (docs/shadow.md): would-be against actual."""
        self._not_restoring()
        if not self.cfg.shadow:
            raise ApplicationError(f"shard {self.shard.id} is not in shadow mode")
        return self.shadow.report()

    @workflow.query
    def cluster(self, name: str) -> dict[str, Any]:
        self._not_restoring()
        spend = self.spend_now  # (the cluster's $/h by band, as of the last cycle)
        now = workflow.now().timestamp()
        return {
            **self.shard.cluster_view(name),
            "spend": spend.of_cluster(name) if spend is not None else None,
            "disruption": self.shard.disruption.view(name, self.shard.inventory, now),
            "health": self.shard.notices.view(name, self.shard.inventory),
        }

    @workflow.query
    def config(self) -> ShardConfig:
        """How this shard runs: a shard split from it runs the same way."""
        return self.cfg

    # ---- the loop ---------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: ShardInput) -> None:
        if not workflow.patched("consolidation"):
            # A run begun before the engine consolidated decides, on replay, as it did then.
            off = self.shard.policy.model_copy(update={"consolidation_max_fraction": 0.0})
            self.shard.policy = self.shard.engine.policy = off
        if not workflow.patched("fleet-cost"):
            # Likewise a run begun before placement by the fleet's cost (docs/decisions/0012).
            off = self.shard.policy.model_copy(update={"fleet_cost": False})
            self.shard.policy = self.shard.engine.policy = off
            self.shard.engine.supply.sunk = False
        # Runs begun before drained the adopted machines of clusters not heard from yet.
        self.shard.keep_unheard = workflow.patched("unheard-clusters-kept")
        if inp.snapshot is not None:
            await self._load(inp.snapshot, inp.joining, inp.late)
        else:
            self._apply_early_rollups()
        if self.fresh:
            # A shard started from scratch fences out every earlier incarnation (seed §11).
            self.shard.epoch = int(workflow.now().timestamp() * 1000)
        if (self.fresh or inp.adopting) and not self.steps.joining:
            # (A split-born shard gets its machines from the split.)
            more = await self.providers.adopt(inp.adopting)
            while more is not None:
                await self._continue_as_new(adopting=more)  # returns if the store failed
                await workflow.sleep(self.cfg.cycle_seconds)
            await self.providers.drop_owned_elsewhere()
            heavy = workflow.info().get_current_history_size() > self.cfg.adopted_continue_bytes
            if heavy and workflow.patched("adopted-continue"):
                await self._continue_as_new()  # the next run decides (returns if it failed)
        if self.restarted:
            await self._after_revival()
        cycles_this_run = machine_cycles = 0
        next_reconcile = workflow.now().timestamp() + self.cfg.reconcile_seconds
        # What the run's history held before its first cycle (the state read back from the
        # snapshot store, the adoption): `_history_full` counts what the cycles add to it.
        info = workflow.info()
        self.base_history = (info.get_current_history_size(), info.get_current_history_length())
        # A cycle that never waits on Temporal: starts and notices go through the outbox,
        # which `pump` sends beside the loop (issue 32; runs begun before wait as they did).
        self.background = workflow.patched("background-outbox") and not self.cfg.shadow
        # Results come through the mailbox, which the shard takes from each cycle (runs begun
        # before were signalled: they are still, by transitions that find no mailbox).
        self.mailbox = self.background and workflow.patched("results-by-mailbox")
        self.next_reconcile = next_reconcile
        # A run continued from another decides at once: the last cycle was before the state
        # was written and read back (a loaded server takes seconds), not a cycle ago.
        at_once = not self.fresh and self.background and workflow.patched("first-cycle-at-once")
        # The cycles before a continue-as-new start nothing it would wait for (`_quiet_first`).
        closing, quiet_cycles = False, 0
        while True:
            if at_once:
                at_once = False
            else:
                await self._next_cycle(closing)
            if self.revive:
                self.revive = False
                await self._after_revival()
            now = workflow.now().timestamp()
            self._fold_results(now)
            if self.background and closing:
                pass  # (forwards, and the question of whose new clusters are, wait a cycle)
            elif self.background:
                if self.forward and self.mailbox:  # (one at a time: continue-as-new waits)
                    if self.forwarding is None or self.forwarding.done():
                        self.forwarding = asyncio.ensure_future(self._forward())
                elif self.forward:
                    asyncio.ensure_future(self._forward())
            else:
                await self._forward()
            # New clusters' roll-ups: this shard's? (A quiet cycle asks nothing new.)
            await self.new_clusters.settle(wait=not self.background, ask=not closing)
            if self.steps.retired:
                await workflow.wait_condition(workflow.all_handlers_finished)
                return
            # Mid-split or merging away: machines and results still fold in; nothing is decided.
            if self.steps.joining or self.steps.merging:
                decision = Decision()
            elif self.cfg.shadow:
                decision = self.shadow.decide(now, self._cycle)
            else:
                if self.background:
                    self._drop_unwanted_creates()
                decision = self._cycle(now)
            self.cycle_ends.append(now)
            report = None if closing else self.report_due(now)
            if self.cfg.shadow:
                # Nothing is started, nobody is told: the providers' listing replaces the
                # decision's transitions (workflows/shadow.py).
                self.pipeline = []
                await self.shadow.follow()
            elif self.background:
                self.outbox.quiet = closing
                self._queue(decision, now, chores=not closing)
                if closing:
                    pass  # (the results wait in the mailbox for the next run)
                elif self.mailbox and (self.collecting is None or self.collecting.done()):
                    self.collecting = asyncio.ensure_future(self._collect())
            else:
                next_reconcile = await self._act(decision, now, next_reconcile)
            if not self.background:
                await self.send_report(report)
            elif report is not None and (self.reporting is None or self.reporting.done()):
                self.reporting = asyncio.ensure_future(self.send_report(report))
            cycles_this_run += 1
            machine_cycles += len(self.shard.inventory)
            due = (
                self._history_full()
                or cycles_this_run >= self.cfg.max_cycles_per_run
                or self._replay_budget_spent(machine_cycles)
            ) and self._may_continue_as_new()
            if due and quiet_cycles < QUIET_CYCLES and not self._settled() and self._quiet_first():
                closing = self.outbox.holding = True  # (its current wave is its last)
                quiet_cycles += 1
            elif due:
                closing, quiet_cycles = False, 0
                await self._continue_as_new()  # returns if the store failed: next cycle
                self.outbox.quiet = False
            else:
                closing = self.outbox.quiet = self.outbox.holding = False
                quiet_cycles = 0

    def _settled(self) -> bool:
        """Nothing of the shard's own out that a continue-as-new waits for: the pump's wave,
        the chores, the question of whose new clusters are, and (with a mailbox) the take,
        report and forward. Any of them coming back during that task would make Temporal
        refuse it (UnhandledCommand), and the worker replay the whole run. Notices are not
        waited for: a loaded transition worker took 3-6 s to answer a wave, and one that
        answers during the short last task is rare."""
        pump, box, asking = self.pumping, self.outbox, self.new_clusters.asking
        outstanding = (self.collecting, self.reporting, self.forwarding) if self.mailbox else ()
        return (
            (pump is None or pump.done() or not box.busy())
            and (self.chores is None or self.chores.done())
            and (asking is None or asking.done())
            and all(f is None or f.done() for f in outstanding)
        )

    def _quiet_first(self) -> bool:
        """Whether a continue-as-new that is due, with something of the shard's still out,
        waits for it through quiet cycles: cycles that start nothing it would wait for (no take
        from the mailbox, no report, forward, question or chore, no wave of starts: those
        travel in the snapshot; notices still go). A quiet cycle comes once what is out has
        come back (`_settled`), or at its time if sooner; the continue-as-new follows the
        first one that ends with nothing out, or the QUIET_CYCLES-th. Waiting after the
        cycle instead made most of a 3-4 s interval around each continue-as-new: a take or a
        wave of starts still out took 1.6-2.6 s to come back on a loaded server (issue 32).
        Runs begun before continue as new at once."""
        return self.mailbox and workflow.patched("quiet-cycle-before-continue")

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

    def _queue(self, decision: Decision, now: float, chores: bool = True) -> None:
        """The background cycle's `_act`: queue the decision's starts and notices in the
        outbox, and start the chores that are due (verify, catch up, reconcile) unless the
        last ones are still out (or `chores` is False). Nothing here waits."""
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
        self.next_reconcile = await self._reconcile(now, self.next_reconcile)

    async def _notices(self, now: float) -> None:
        """Read the providers' notices when due (`notice_seconds`; runs begun before do not)."""
        if now >= self.next_notices and workflow.patched(NOTICES):
            self.next_notices = now + self.cfg.notice_seconds
            await self.providers.notices(now)

    async def _collect(self) -> None:
        """Take the results waiting in the mailbox; they are folded in from the next cycle on,
        as signalled ones are (`transition_done`: the same bounds)."""
        try:
            if workflow.patched(ACKED_TAKE):
                taken = await self._take_after()
            else:  # (runs begun before: a batch leaves the mailbox as it is answered)
                taken = await workflow.execute_activity(
                    "mailbox_take",
                    self.cfg.shard,
                    task_queue=SHARD_TASK_QUEUE,
                    result_type=list[TransitionResult],
                    **QUICK_TAKE,
                )
        except ActivityError as err:  # (tried again next cycle: what it did not take waits)
            self._note_failure("taking results from the mailbox", err)
            return
        for result in taken:
            try:
                self.transition_done(result)
            except Rejected as err:
                self.guard.reject("transition_done", str(err))

    async def _take_after(self) -> list[TransitionResult]:
        """The results after the last one taken; the mailbox lets that one and those before it
        go. A take whose answer was lost (its worker killed) is answered again by the next."""
        chain, after = self.taken
        # The take is answered when the next cycle is due, and its answer wakes the shard for
        # it: a loaded server fires the cycle timer late (9-10 s late with four shards on the
        # dev server), and since results wait in the mailbox nothing else woke the shard.
        # Runs begun before are answered at once and wait for the timer alone.
        at = 0.0
        if workflow.patched(TAKE_WAKES):
            at = workflow.now().timestamp() + self.cfg.cycle_seconds
        batch: TakenResults = await workflow.execute_activity(
            "mailbox_take_after",
            MailboxTake(shard=self.cfg.shard, after=after, chain=chain, at=at),
            task_queue=SHARD_TASK_QUEUE,
            result_type=TakenResults,
            **QUICK_TAKE,
        )
        self.woken = at > 0  # (whatever the clocks of worker and server say)
        if batch.chain != chain or batch.results:  # (a mailbox started again: from its first)
            self.taken = (batch.chain, batch.first + len(batch.results) - 1)
        return batch.results

    def _pump_stopped(self, pumping: asyncio.Future[None]) -> None:
        """A bug in the outbox is logged; the next cycle starts it again."""
        err = None if pumping.cancelled() else pumping.exception()
        if err is not None:
            workflow.logger.error("shard %s: the outbox stopped: %r", self.shard.id, err)

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

    async def _continue_as_new(self, adopting: AdoptCursor | None = None) -> None:
        """Hand the state to the next run: inline, or through the snapshot store. Returns only
        if the store could not be written (the run carries on; try again later)."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self.background:
            # The outbox sends what the last cycle gave it, a chore ends, and the question of
            # whose new clusters are is answered and applied, first (a run of one cycle must
            # get something done).
            box, asking = self.outbox, self.new_clusters.asking
            box.holding = True  # (one wave at most: the rest travels in the snapshot)
            await workflow.wait_condition(self._settled)
            if asking is not None:
                await self.new_clusters.settle(wait=False)
            box.holding = False  # (if this run goes on: the store failed)
            self.pipeline = self.outbox.queued() + self.pipeline
            self.outbox.clear()
        self._fold_results(workflow.now().timestamp())
        state = shard_state(self.shard)
        # Notices, repair and blocked drains (bigfleet/notices.py, blocked.py) are carried by
        # runs begun after them: a run begun before replays with a snapshot of its old size.
        if ("notices" in state or "blocked" in state) and not workflow.patched(CARRY_NOTICES):
            state.pop("notices", None)
            state.pop("blocked", None)
        state.update(self.steps.state())
        state["guard"] = self.guard.rejections.state()
        state["owed_providers"] = sorted(self.providers.owed)
        # The last cycles' ends, so `status` shows the interval across the continue-as-new
        # (a benchmark sampling `status` every few seconds saw the old run's last cycles
        # only if it asked between them and the continue-as-new). Runs begun before: none.
        if workflow.patched("cycle-ends-carried"):
            state["cycle_ends"] = list(self.cycle_ends)
        if self.taken != ("", -1):  # (runs begun before acked takes: none)
            state["taken"] = list(self.taken)
        if self.outbox.in_flight and workflow.patched("in-flight-bound"):
            state["in_flight"] = self.outbox.state()  # (runs begun before: their state as it was)
        if self.cfg.shadow:
            state["shadow"] = self.shadow.book.state()
        # Results not folded yet travel in the snapshot too: up to `fold_per_cycle` machine
        # records wait, ~2.6 MB, past the 2 MB Temporal takes as a continue-as-new's input
        # (a shard at 100 000 machines failed every task on it). Runs begun before: inline.
        carried = list(self.results) if workflow.patched("results-in-snapshot") else []
        stored = {**state, "pipeline": [t.model_dump(mode="json") for t in self.pipeline]}
        if carried:
            stored["results"] = [r.model_dump(mode="json") for r in carried]
        blob = self.store.encode(stored)
        snapshot = None
        if blob is not None:
            # From here the state is written: signals wait in the next run's input,
            # instructions are told to retry.
            self.snapshotting = True
            try:
                snapshot = await self.store.put(blob)
            except ActivityError as err:
                # This run goes on (its history grows a little longer); what waited for the
                # next run is applied here.
                self._note_failure("writing the snapshot", err)
                self.snapshotting = False
                self._apply_early_rollups()
                return
        late_ref, late, rollups = None, self.results, self.early_rollups
        if snapshot is not None and workflow.patched("late-in-snapshot"):
            written = await self._put_late(len(carried))
            if written is None:
                self.snapshotting = False
                self._apply_early_rollups()
                return
            late_ref, late, rollups = written
        elif snapshot is not None:
            late = self.results[len(carried) :]
        workflow.continue_as_new(
            ShardInput(
                config=self.cfg,
                state=None if snapshot else state,
                snapshot=snapshot,
                # With a snapshot, the queued starts travel in it: they can be many.
                pipeline=[] if snapshot else self.pipeline,
                # What arrived while the snapshot was written (none if inline).
                rollups=rollups,
                results=late,
                late=late_ref,
                # A `revived` not yet acted on: the next run does it.
                restarted=self.revive,
                adopting=adopting,
            )
        )

    async def _put_late(
        self, first: int
    ) -> tuple[SnapshotRef | None, list[TransitionResult], list[dict[str, Any]]] | None:
        """What arrived while the state was written (results from `first` on, roll-ups), in
        the store too when it would not fit a continue-as-new's input (Temporal refuses one over
        2 MB; a loaded server takes many seconds to take a big state): the reference, and what
        is left to travel inline. More arrives while that is written: each round writes all of
        it again under a new key, until the rest is small. None after LATE_ROUNDS, or if the
        store failed: the run goes on, everything still in memory."""
        ref: SnapshotRef | None = None
        results_done, rollups_done = first, 0
        for round_ in range(LATE_ROUNDS):
            results = self.results[results_done:]
            rollups = self.early_rollups[rollups_done:]
            if _fits(results, rollups):
                return ref, results, rollups
            upto, upto_rollups = len(self.results), len(self.early_rollups)
            blob = {
                "results": [r.model_dump(mode="json") for r in self.results[first:upto]],
                "rollups": self.early_rollups[:upto_rollups],
            }
            try:
                ref = await self.store.put(
                    json.dumps(blob, separators=(",", ":")), f"-late{round_}"
                )
            except ActivityError as err:
                self._note_failure("writing what arrived during the snapshot", err)
                return None
            results_done, rollups_done = upto, upto_rollups
        return None

    async def _load(self, ref: SnapshotRef, joining: bool, late: SnapshotRef | None) -> None:
        """The state the last run left in the snapshot store, with its queued starts, the
        results it had not folded, and what arrived while it was written (`late`)."""
        state = await self.store.get(ref)
        # Stored as JSON: read back as JSON (strict enums take "In", not only Operator.IN).
        queued = [from_wire(TransitionInput, t) for t in state.pop("pipeline", [])]
        waiting = [from_wire(TransitionResult, r) for r in state.pop("results", [])]
        if late is not None:
            extra = await self.store.get(late)
            waiting += [from_wire(TransitionResult, r) for r in extra.get("results", [])]
            self.early_rollups = list(extra.get("rollups", [])) + self.early_rollups
        self._restore(state, joining)
        self.pipeline = queued + self.pipeline
        self.results = waiting + self.results  # (then those that came during the write)
        self.restoring = False
        self._apply_early_rollups()

    def _apply_early_rollups(self) -> None:
        early, self.early_rollups = self.early_rollups, []
        for raw in early:
            try:
                self._take_rollup(raw)
            except Rejected as err:  # (judged now as it would have been on arrival)
                self.guard.reject("rollup", str(err))

    async def _reconcile_failed(self, now: float) -> None:
        self.pipeline += await self.providers.reconcile_failed(now)

    async def _unstick(self, now: float) -> None:
        """Machines failed for their transition's time that no result came back for within
        `unstick_seconds` are read from their providers (`ProviderSync.unstick`; runs begun
        before leave them failed)."""
        stuck = self.shard.timed_out(now - self.cfg.unstick_seconds, UNSTICK_MAX)
        if stuck and workflow.patched(UNSTICK):
            await self.providers.unstick(stuck, now)

    async def _capacity(self, now: float) -> None:
        # Mid-split or merging away: the split decides where capacity goes.
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
        cause = err.cause if err.cause is not None else err
        message = f"{what}: {cause}"
        workflow.logger.warning("shard %s: %s", self.shard.id, message)
        self.failures = [*self.failures[-9:], {"at": workflow.now().timestamp(), "error": message}]

    def _cycle(self, now: float) -> Decision:
        with workflow.unsafe.sandbox_unrestricted():
            start = time.perf_counter()
        decision = self.shard.cycle(now)
        with workflow.unsafe.sandbox_unrestricted():
            self.last_cycle_ms = (time.perf_counter() - start) * 1000
        meter = workflow.metric_meter().with_additional_attributes({"shard": str(self.shard.id)})
        meter.create_histogram_float(
            "bigfleet_decision_cycle_seconds", "decide() plus applying its actions", "s"
        ).record(self.last_cycle_ms / 1000)
        for kind in ("create", "configure", "drain", "delete", "verify"):
            n = decision.count(kind)
            if n:
                meter.create_counter("bigfleet_actions_total", "actions decided").add(
                    n, {"kind": kind}
                )
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

    async def _forward(self) -> None:
        """Roll-ups of clusters that moved away go to their new shard."""
        forward, self.forward = self.forward, {}
        for cluster, raw in forward.items():
            target = shard_workflow_id(self.shard.moved[cluster])
            try:
                await workflow.get_external_workflow_handle(target).signal("rollup", raw)
            except Exception as err:  # gone (merged away): the sender asks the coordinator
                workflow.logger.warning("roll-up of %s not passed to %s: %s", cluster, target, err)

    # ---- continuing as new ------------------------------------------------------------------

    def _history_full(self) -> bool:
        """Time to continue as new: Temporal suggests it (past a few MB or thousands of
        events), and the cycles of this run added RUN_GROWTH_BYTES or RUN_GROWTH_EVENTS to
        what it started with; or its history passed HISTORY_BYTES_REGARDLESS. A big shard's
        state, read back from the snapshot store, alone passes the suggestion's threshold:
        judged by the suggestion alone it continued as new after every cycle, and spent its
        time writing and reading its state (issue 32). Runs begun before replay as they ran."""
        info = workflow.info()
        suggested = info.is_continue_as_new_suggested()
        if not workflow.patched("history-past-the-state"):
            return suggested
        size, length = info.get_current_history_size(), info.get_current_history_length()
        grown = size - self.base_history[0] > RUN_GROWTH_BYTES
        longer = length - self.base_history[1] > RUN_GROWTH_EVENTS
        return (suggested and (grown or longer)) or size > HISTORY_BYTES_REGARDLESS

    def _replay_budget_spent(self, machine_cycles: int) -> bool:
        """The run's cycles have decided over `replay_machine_cycles` machines: replaying it
        would take a worker that lost it from its cache too long (SHARD_TASK_TIMEOUT)."""
        return machine_cycles > self.cfg.replay_machine_cycles and workflow.patched(
            "replay-budget"
        )
