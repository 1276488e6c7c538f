"""The shard controller (design §5, §6 tier 2) as a long-running workflow, one per shard.

State lives in memory (needs table + columnar inventory) and crosses continue-as-new as a compact
snapshot. Roll-ups arrive as signals, transition results as signals from the transition
workflows, coordinator instructions as fenced updates. Every cycle (a durable timer) runs the
pure `decide()` and starts the transition workflows it asks for.
"""

# Here: the shard's signals and its decision loop (design §8's cycle). The rest is mixed in, one
# concept a module, all reading what they share from `ShardParts` (shard_parts.py): what it
# answers (shard_queries), a cycle's work (shard_cycle), continue-as-new (shard_carry), what
# transitions report back (shard_results), the coordinator's instructions (instructions,
# audit_handlers). Helper objects act for it: actions, provider_sync, snapshot_store, guard,
# instruction_steps, outbox, new_clusters.

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.wire import ShardInput
    from bigfleet.cluster_modes import ClusterModes, drop_rollups
    from bigfleet.engine import Decision
    from bigfleet.inputs import SIGNAL_BYTES, Rejected, json_size
    from bigfleet.policy import Policy
    from bigfleet.reports import ShardReport
    from bigfleet.shard import Shard
    from workflows.actions import TransitionInputs
    from workflows.audit_handlers import AuditHandlers
    from workflows.guard import (
        SMALL_PAYLOADS,
        Guard,
        HistorySurge,
        TakesSignals,
        accepts,
    )
    from workflows.outbox import Outbox
    from workflows.provider_sync import ProviderSync
    from workflows.shadow import ShadowSync
    from workflows.shard_carry import CYCLE_ENDS, QUIET_CYCLES, SURGE_BYTES, CarriesState
    from workflows.shard_cycle import ShardCycle
    from workflows.shard_fences import supersede_fences
    from workflows.shard_generations import GenerationReset
    from workflows.shard_modes import ClusterModeHandlers
    from workflows.shard_pool import AsksFirst
    from workflows.shard_queries import ShardQueries
    from workflows.shard_results import TransitionResults
    from workflows.snapshot_store import SnapshotStore

EARLY_ROLLUP_BYTES = 500_000  # roll-ups waiting while the state is read back or written
ROLLUP_BATCH = 500  # roll-ups in one `rollups` signal, at most
# A `rollups` signal's payload, under the server's payload limit (workers/dev/server.py
# BLOB_ERROR_BYTES: 600 KB since issue 44); runs begun before take what they did.
ROLLUPS_BYTES = 450_000
ROLLUPS_BYTES_BEFORE = 1_900_000

GENERATION_BOUND = "generation-clock-bound"  # (the patch: runs begun before take any generation)


def rollups_bytes() -> int:
    """The `rollups` signal's bound (runs begun before: as it was)."""
    return ROLLUPS_BYTES if workflow.patched(SMALL_PAYLOADS) else ROLLUPS_BYTES_BEFORE


@workflow.defn(name="Shard")
class ShardWorkflow(
    ClusterModeHandlers,
    AuditHandlers,
    GenerationReset,
    TransitionResults,
    ShardQueries,
    ShardCycle,
    CarriesState,
    AsksFirst,
    TakesSignals,
):
    """One shard of the fleet (workflow type "Shard", id `shard-<n>`): it keeps its clusters'
    needs and its machines in memory, decides every `cycle_seconds` what to create, configure,
    drain and delete, starts the transitions, and takes the coordinator's fenced instructions.
    It runs for as long as the shard exists, continuing as new with its state."""

    @workflow.init
    def __init__(self, inp: ShardInput) -> None:
        self.cfg = inp.config
        self.shard = Shard(
            self.cfg.shard, Policy(cycle_seconds=self.cfg.cycle_seconds, **self.cfg.policy)
        )
        self.fresh = inp.state is None and inp.snapshot is None
        # The machines' cost as of the last cycle (spend.py), when, from what, which gauges.
        self.spend_now = None
        self.spend_at = None
        self.spend_seen = None
        self.spend_set = None
        self.spend_keys = ()
        self.restarted = inp.restarted and not self.fresh
        # State in the snapshot store: read back first thing in `run`; until then roll-ups
        # wait and instructions are told to retry.
        self.restoring = inp.snapshot is not None
        self.snapshotting = False
        self.early_rollups = list(inp.rollups)
        self.early_bytes = 0
        self.guard = Guard(self, "Shard")
        # The signals' bytes when the last cycle ended (None until the cycles begin), and
        self.surge = HistorySurge(self.guard, SURGE_BYTES, self._wake)
        self.inputs = TransitionInputs(self.shard, self.cfg)
        self.providers = ProviderSync(self.shard, self.cfg, self.inputs, self._note_failure)
        self.shadow = ShadowSync(self.shard, self.cfg, self.providers, self._note_failure)
        self.store = SnapshotStore(self.cfg)
        self.outbox = Outbox(self.cfg, self._note_failure)
        self.cycle_ends = deque(maxlen=CYCLE_ENDS)  # (workflow time; `status`)
        # The last result taken: its mailbox chain and number (the next take lets it go).
        # Set before `_restore`, which takes up the last run's: set after it, a state that
        # travelled inline lost it, and the next take got back results already folded in.
        self.taken = ("", -1)
        self._restore(inp.state, inp.joining)
        self.forward = {}
        self.results = list(inp.results)
        self.pipeline = list(inp.pipeline)  # (a revived shard drops it)
        self.revive = False  # `revived` arrived: catch up with the providers next cycle
        self.revived_run = False  # (once per run)
        self.last_cycle_ms = 0.0
        # A cycle that never waits (workflows/outbox.py; set in `run`): its outside chores
        # (verify, reconcile, reports) run beside it, one of each at a time.
        self.background = False
        self.chores = None
        self.pumping = None  # the outbox's `pump`
        self.reporting = None
        # Results taken from the shard's mailbox (workflows/mailbox.py; set in `run`).
        self.mailbox = False
        self.collecting = None
        self.woken = False  # a take came back at its time: the next cycle is due
        self.forwarding = None
        self.next_reconcile = 0.0
        self.next_notices = 0.0
        self.base_history = (0, 0)  # history bytes and events before the first cycle
        self.started = {}
        # The last outside calls that failed after their retries (shown in `status`).
        self.failures = []

    # ---- what people and operators send -----------------------------------------------------

    @accepts(dict[str, Any])
    def rollup(self, raw: dict[str, Any]) -> None:
        """A cluster's roll-up. An invalid one is recorded (`status`'s rejections) and dropped;
        the previous stands. One for a cluster that moved away in a split or merge is passed
        on to its new shard; one for a cluster this shard does not serve yet waits until the
        coordinator says it is this shard's (workflows/new_clusters.py)."""
        self._take_rollup(raw)

    @accepts(list[Any], max_bytes=rollups_bytes)
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
        # (Set here too: a roll-up may come in the run's first task, before `run` begins.)
        self.shard.needs.host_spread_holds = workflow.patched("host-spread-holds")
        # A generation far ahead of the clock is refused (issue 44; runs begun before: taken).
        self.shard.generations_bounded = workflow.patched(GENERATION_BOUND)
        reason = self.shard.receive(raw, workflow.now().timestamp())
        if reason:
            raise Rejected(reason)

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
        """Back from a dead run's durable state (design §6): a new epoch fences the dead run's
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

    # ---- the loop ---------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: ShardInput) -> None:
        """The shard's run: take the state over (read back, adopted, or revived), then cycle
        until the history is full enough to continue as new (a few quiet cycles first, so
        nothing is out), or until the shard has merged away and retires."""
        self._replay_as_begun()
        await self._take_over(inp)
        at_once = self._begin_cycles()
        cycles_this_run = machine_cycles = 0
        # The cycles before a continue-as-new start nothing it would wait for (`_quiet_first`).
        closing, quiet_cycles = False, 0
        while True:
            if at_once:
                at_once = False
            else:
                await self._next_cycle(closing)
            if not await self._one_cycle(closing):
                return  # (retired)
            cycles_this_run += 1
            machine_cycles += len(self.shard.inventory)
            self.surge.mark()
            closing, quiet_cycles = await self._close_or_continue(
                cycles_this_run, machine_cycles, quiet_cycles
            )

    def _replay_as_begun(self) -> None:
        """Runs begun before a change of how the shard decides decide, on replay, as then."""
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
        # Runs begun before marks steered the engine took victims off the start of a claim.
        self.shard.steer_by_marks = workflow.patched("marks-steer")
        # Runs begun before a spread need kept to its skew in Phase 2 preempted anywhere.
        self.shard.spread_in_phase_2 = workflow.patched("spread-in-phase-2")
        # Runs begun before placed a need by its first spread rule only.
        self.shard.every_spread_rule = workflow.patched("every-spread-rule")
        # Runs begun before consolidated marked machines too (their replacements then waited).
        self.shard.marks_steer_moves = workflow.patched("marks-steer-moves")
        # Runs begun before displaced marked backfill for cost (and waited on it unreported).
        self.shard.cost_moves_bounded = workflow.patched("cost-moves-bounded")
        # Runs begun before kept owned machines where they were placed (engine/yielding.py).
        self.shard.owned_yields = workflow.patched("owned-yields")
        # Runs begun before read a spread over kubernetes.io/hostname as binding (and placed
        # nothing for it); set before the state is read back, whose needs it shapes.
        self.shard.needs.host_spread_holds = workflow.patched("host-spread-holds")

    async def _take_over(self, inp: ShardInput) -> None:
        """The state this run starts from: read back from the snapshot store; for a shard
        started from scratch a new epoch and the providers' machines (adopted over as many
        runs as it takes); for a revived one, what became of its machines meanwhile."""
        modes = workflow.patched("cluster-modes")  # unmanaged clusters left alone (issue 46)
        if modes:
            self.shard.modes = ClusterModes(self.cfg.unmanaged, self.cfg.shadow_clusters)
        if inp.snapshot is not None:
            await self._load(inp.snapshot, inp.joining, inp.late)
        else:
            self._apply_early_rollups()
        if modes:
            self.shard.modes.forget(self.shard)
        if self.fresh:
            # A shard started from scratch fences out every earlier incarnation (design §11).
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
            if inp.rollups_dropped:  # (the recovery ladder's last rung: activities/shards.py)
                dropped = drop_rollups(self.shard, workflow.now().timestamp())
                workflow.logger.warning("revived without the roll-ups of %d clusters", len(dropped))
            await self._after_revival()

    def _begin_cycles(self) -> bool:
        """How this run's cycles go (in the background, with a mailbox); whether the first
        one comes at once."""
        self.next_reconcile = workflow.now().timestamp() + self.cfg.reconcile_seconds
        # What the run's history held before its first cycle (the state read back from the
        # snapshot store, the adoption): `_history_full` counts what the cycles add to it.
        info = workflow.info()
        self.base_history = (info.get_current_history_size(), info.get_current_history_length())
        self.surge.mark()  # (a flood is watched for from here on)
        # A cycle that never waits on Temporal: starts and notices go through the outbox,
        # which `pump` sends beside the loop (issue 32; runs begun before wait as they did).
        self.background = workflow.patched("background-outbox") and not self.cfg.shadow
        # Results come through the mailbox, which the shard takes from each cycle (runs begun
        # before were signalled: they are still, by transitions that find no mailbox).
        self.mailbox = self.background and workflow.patched("results-by-mailbox")
        # A run continued from another decides at once: the last cycle was before the state
        # was written and read back (a loaded server takes seconds), not a cycle ago.
        return not self.fresh and self.background and workflow.patched("first-cycle-at-once")

    async def _one_cycle(self, closing: bool) -> bool:
        """One cycle: fold in results, pass roll-ups on, settle new clusters, decide, carry
        the decision out, report. False once the shard has retired (merged away)."""
        if self.revive:
            self.revive = False
            await self._after_revival()
        now = workflow.now().timestamp()
        self._fold_results(now)
        supersede_fences(self.shard, now)
        await self._pass_on(closing)
        # New clusters' roll-ups: this shard's? (A quiet cycle asks nothing new.)
        await self.new_clusters.settle(wait=not self.background, ask=not closing)
        if self.steps.retired:
            await workflow.wait_condition(workflow.all_handlers_finished)
            return False
        decision = self._decide(now)
        self.cycle_ends.append(now)
        report = None if closing else self.report_due(now)
        await self._carry_out(decision, now, closing)
        await self._report(report)
        return True

    async def _pass_on(self, closing: bool) -> None:
        """Roll-ups of clusters that moved away go to their new shard (in the background:
        beside the loop, one forward at a time with a mailbox; not in a quiet cycle)."""
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

    def _decide(self, now: float) -> Decision:
        """The cycle's decision: none mid-split or merging away (machines and results still
        fold in), shadow mode's would-be, or `decide()`'s."""
        if self.steps.joining or self.steps.merging:
            return Decision()
        if self.cfg.shadow:
            return self.shadow.decide(now, self._cycle)
        if self.background:
            self._drop_unwanted_creates()
        return self._cycle(now)

    async def _carry_out(self, decision: Decision, now: float, closing: bool) -> None:
        """Start what the decision asks for: nothing in shadow mode, through the outbox in
        the background (and the next take from the mailbox), or at once."""
        if self.cfg.shadow:
            # Nothing is started, nobody is told: the providers' listing replaces the
            # decision's transitions (workflows/shadow.py).
            self.pipeline = []
            await self.shadow.follow()
            if self.cfg.record:  # (what it would do, and what it saw: workflows/shard_record.py)
                await self.recorder.shadow_cycle(now, decision.actions)
        elif self.background:
            self.outbox.quiet = closing
            self._queue(decision, now, chores=not closing)
            # (Closing, the results wait in the mailbox for the next run.)
            if not closing and self.mailbox and (self.collecting is None or self.collecting.done()):
                self.collecting = asyncio.ensure_future(self._collect())
        else:
            self.next_reconcile = await self._act(decision, now, self.next_reconcile)

    async def _report(self, report: ShardReport | None) -> None:
        """The shard's report to the coordinator, if one is due (beside the loop, in the
        background)."""
        if not self.background:
            await self.send_report(report)
        elif report is not None and (self.reporting is None or self.reporting.done()):
            self.reporting = asyncio.ensure_future(self.send_report(report))

    async def _close_or_continue(
        self, cycles_this_run: int, machine_cycles: int, quiet_cycles: int
    ) -> tuple[bool, int]:
        """After a cycle: continue as new if due (returns only if the store failed), or first
        close with a quiet cycle while something is out; the next cycle's `closing` and the
        quiet cycles so far."""
        due = (
            self.surge.surged
            or self._history_full()
            or cycles_this_run >= self.cfg.max_cycles_per_run
            or self._replay_budget_spent(machine_cycles)
        ) and self._may_continue_as_new()
        quiet = quiet_cycles < QUIET_CYCLES and not self.surge.surged  # (a flood: at once)
        if due and quiet and not self._settled() and self._quiet_first():
            self.outbox.holding = True  # (its current wave is its last)
            return True, quiet_cycles + 1
        if due:
            await self._continue_as_new()  # returns if the store failed: next cycle
            self.outbox.quiet = False
            return False, 0
        self.outbox.quiet = self.outbox.holding = False
        return False, 0
