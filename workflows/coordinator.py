"""The global coordinator (design §6 tier 1) as a singleton workflow, id `coordinator`.

Temporal's one-open-run-per-id replaces the seed's Raft leader election; the coordinator term
(every instruction's fencing token) is set when it starts from scratch, so a zombie's
instructions are refused by shards that have seen a newer term. Shards report every 30 s; every
round the pure planner turns shortfalls into transfer sagas. Shards never wait for it: without a
coordinator they keep serving from their own inventory (static stability).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from activities.wire import CoordinatorInput, EscalateDrains, SagaInput
    from bigfleet.cluster_questions import AssignArgument, asked
    from bigfleet.coordinator import (
        ASSIGNMENT_BYTES,
        ASSIGNMENT_BYTES_BEFORE,
        ClusterQuestion,
        Coordinator,
    )
    from bigfleet.inputs import Rejected, clip
    from bigfleet.reports import ShardReport
    from workflows.coordinator_changes import FleetChanges
    from workflows.coordinator_metrics import PoolVisible
    from workflows.coordinator_pool import POOL_PATCH, SendsPoolSummaries
    from workflows.fleet_membership import FleetMembership
    from workflows.guard import (
        HISTORY_SURGE,
        NO_ARGUMENT,
        SMALL_PAYLOADS,
        Guard,
        HistorySurge,
        TakesSignals,
        accepts,
        guarded,
    )
    from workflows.instruction_steps import RECORDS_MAX, RECORDS_MAX_BEFORE
    from workflows.sagas import STEP, TransferSagaWorkflow

SEQS_PER_SAGA = 4  # drain, release, adopt, and one compensation
REPORT_BYTES = 450_000  # a shard report (its offers are bounded samples: ~10s of KB)
REPORT_BYTES_BEFORE = 1_000_000  # (runs begun before the server's lower payload limit, issue 44)


def report_bytes() -> int:
    """The `shard_report` signal's bound (runs begun before: as it was)."""
    return REPORT_BYTES if workflow.patched(SMALL_PAYLOADS) else REPORT_BYTES_BEFORE


MAX_REPORT_CLUSTERS = 20_000


# Bytes the signals between two rounds may add to the history before the coordinator continues
# as new at once (`_watch_history`); shard reports are KBs each. Lower than a shard's: a
# continue-as-new refused because signals came during its task replays the whole run, and the
# smaller the run the sooner one gets through a flood. Runs begun before: their round.
SURGE_BYTES = 4_000_000
# Runs begun before give a new cluster the least-loaded shard, never its home.
HOME_PATCH = "clusters-go-home"
ESCALATE_PATCH = "escalate-blocked-drains"
MISSING_PATCH = "missing-since-start"


@workflow.defn(name="Coordinator")
class CoordinatorWorkflow(FleetChanges, PoolVisible, SendsPoolSummaries, TakesSignals):
    """The fleet's one coordinator (workflow type "Coordinator", id `coordinator`): it
    assigns clusters to shards, takes their reports, and every `plan_seconds` turns their
    shortfalls into transfer sagas; it also runs splits, merges and decommissions (the
    updates of `FleetChanges`), and revives shards that stopped reporting. Its term fences
    every instruction it sends. It runs forever, continuing as new with its state."""

    @workflow.init
    def __init__(self, inp: CoordinatorInput) -> None:
        self.inp = inp
        state = inp.state or {}
        self.c = Coordinator(
            term=int(state.get("term", 0)),
            seq=int(state.get("seq", 0)),
            shards=list(state.get("shards", range(inp.shards))),
            clusters=dict(state.get("clusters", {})),
            retiring=set(state.get("retiring", [])),
            retired=set(state.get("retired", [])),
            founding=inp.shards,
            escalated_drains=set(state.get("escalated_drains", [])),
        )
        self.members = FleetMembership(self.c, inp, state.get("membership", {}))
        # Running sagas, and finished ones until the receiver's next report shows their effect.
        self.sagas: dict[str, dict[str, Any]] = dict(state.get("sagas", {}))
        # A coordinator started from scratch answers no assignment before it has learnt which
        # clusters the shards already serve (else a known cluster could land on a second shard).
        self.ready = inp.state is not None
        self.revived: dict[int, float] = {}  # shard → last revival attempt (this run only)
        self.guard = Guard(self, "Coordinator", state.get("guard"))
        # The providers the shards run with (their configs), asked of them at a fresh start
        # (or at the first round of a run whose state has none): a decommission must name one.
        # None: not learnt yet.
        known = state.get("providers")
        self.providers: set[str] | None = set(known) if isinstance(known, list) else None
        self.started = -float("inf")  # (when `run` began: shards never heard from count from it)
        # Runs begun before the server's lower payload limit keep the map's bound they had.
        small = workflow.patched(SMALL_PAYLOADS)
        self.c.assignment_max = ASSIGNMENT_BYTES if small else ASSIGNMENT_BYTES_BEFORE
        # Signals that grew the history past SURGE_BYTES since the last round: a flood.
        self.surge = HistorySurge(self.guard, SURGE_BYTES)

    @accepts(ShardReport, max_bytes=report_bytes)
    def shard_report(self, report: ShardReport) -> None:
        """A shard's report. Refused unless it names a member shard, is no older than that
        shard's last report, and is not from the future (a report names the shard's time)."""
        now = workflow.now().timestamp()
        if report.shard not in self.c.shards or report.shard in self.c.retired:
            raise Rejected(f"shard_report: shard: {report.shard} is not a member of the fleet")
        if not report.at <= now + 60:
            raise Rejected(f"shard_report: at: {report.at} is in the future")
        last = self.c.reports.get(report.shard)
        if last is not None and report.at < last.at:
            raise Rejected(f"shard_report: at: older than shard {report.shard}'s last report")
        if len(report.clusters) > MAX_REPORT_CLUSTERS:
            raise Rejected(f"shard_report: clusters: more than {MAX_REPORT_CLUSTERS}")
        if not self._hold(report, now):  # (a round planning in steps takes it after)
            self.c.receive(report, now)

    @accepts(str)
    def saga_done(self, saga_id: str) -> None:
        """A transfer saga this coordinator started has ended (its effect shows in the
        receiver's next report)."""
        saga = self.sagas.get(saga_id)
        if saga is None or saga["done_at"] is not None:
            raise Rejected(f"saga_done: saga_id: {clip(saga_id, 80)} is not a running saga")
        saga["done_at"] = workflow.now().timestamp()

    @workflow.update
    @guarded
    async def assign_cluster(self, raw: RawValue = NO_ARGUMENT) -> int:
        """A cluster's shard: its home, else the least-loaded, on first contact; permanent
        after (design §16; `Coordinator.assign`). Roll-up senders ask once (update-with-start)
        and then signal the shard directly."""
        ask = asked(self.guard.arg(raw, AssignArgument, "assign_cluster"))
        await workflow.wait_condition(lambda: self.ready)
        self._room_for(ask.cluster)
        self.c.by_home, self.c.pools = workflow.patched(HOME_PATCH), workflow.patched(POOL_PATCH)
        return self.c.assign(ask.cluster, wants=ask.wants)

    @assign_cluster.validator
    def _assign_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        cluster = asked(self.guard.arg(raw, AssignArgument, "assign_cluster")).cluster
        if not cluster.strip():
            raise Rejected("assign_cluster: cluster: a non-empty name is required")
        self._room_for(cluster)

    @workflow.update
    @guarded
    async def cluster_owners(self, raw: RawValue = NO_ARGUMENT) -> dict[str, int]:
        """Asked by a shard (the `cluster_owners` activity) that got roll-ups of clusters it
        does not serve yet: whose each is. One nobody has asked about is assigned now, as
        `assign_cluster` would, the asking shard first among equally loaded ones (its sender
        could have asked and got that answer); one a running split or merge moves to the
        asking shard is its. -1: no room for it in the map."""
        question = self.guard.arg(raw, ClusterQuestion, "cluster_owners")
        await workflow.wait_condition(lambda: self.ready)
        moving = {m["donor"]: m["into"] for m in self.members.running.values()}
        self.c.by_home, self.c.pools = workflow.patched(HOME_PATCH), workflow.patched(POOL_PATCH)
        return self.c.owners(question.shard, question.clusters, moving, question.wants)

    @cluster_owners.validator
    def _owners_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        question = self.guard.arg(raw, ClusterQuestion, "cluster_owners")
        if question.shard not in self.c.shards or question.shard in self.c.retired:
            raise Rejected(f"cluster_owners: shard: {question.shard} is not a member of the fleet")

    def _room_for(self, cluster: str) -> None:
        """The assignments cross continue-as-new in one payload: bounded in bytes."""
        if cluster not in self.c.clusters and not self.c.room_for(cluster):
            raise Rejected(
                f"assign_cluster: the coordinator holds {len(self.c.clusters)} clusters, "
                f"{self.c.assignment_max} bytes of names: no room for more (split the fleet)"
            )

    @workflow.query
    def saga_machines(self, machine_ids: list[str]) -> list[str]:
        """Which of `machine_ids` a transfer saga has in hand: running, or finished before
        its receiver reported since. Between a saga's release and its adopt a machine is no
        shard's, and a shard must not take it by the assignment rule meanwhile (the saga's
        receiver would then hold it too: `provider_capacity` asks here)."""
        if not isinstance(machine_ids, list):
            raise ApplicationError("saga_machines: machine_ids: expected a list of ids")
        moving = {mid for saga in self.sagas.values() for mid in saga["machine_ids"]}
        return [mid for mid in machine_ids if isinstance(mid, str) and mid in moving]

    @workflow.query
    def term(self) -> int:
        """This coordinator's term (0 before its first workflow task): a shard asks before it
        takes a term it has not seen (activities/terms.py)."""
        return self.c.term

    @workflow.query
    def status(self) -> dict[str, Any]:
        """The fleet as the coordinator sees it: term, shards, cluster assignments, missing
        shards, running sagas, splits and merges, escalations and shared shortfalls."""
        now = workflow.now().timestamp()
        return {
            "term": self.c.term,
            "shards": self.c.shards,
            "clusters": self.c.clusters,
            "missing_shards": self.c.missing(now, since=self.started),
            "sagas_running": sorted(k for k, v in self.sagas.items() if v["done_at"] is None),
            "membership": sorted(self.members.running),
            "retiring": sorted(self.c.retiring),
            "escalations": [
                {"shard": s, **sf.model_dump(mode="json")} for s, sf in self.c.escalations()
            ],
            "shared_shortfalls": self.c.shared_shortfalls(),
            "rejected_inputs": self.guard.rejections.counts,
            # What a decommission may name (None: not learnt from the shards yet).
            "providers": None if self.providers is None else sorted(self.providers),
            "pool": self.pool.status(now),  # (issue 45: workflows/coordinator_metrics.py)
        }

    @workflow.run
    async def run(self, inp: CoordinatorInput) -> None:
        """Learn the clusters the shards serve (from scratch: a new term first), then plan a
        round every `plan_seconds`, continuing as new when the history is long enough."""
        self.started = workflow.now().timestamp()
        if inp.state is None:
            self.c.term = int(workflow.now().timestamp() * 1000)
            await self._learn_clusters()
        rounds = 0
        watch = workflow.patched(HISTORY_SURGE)  # (runs begun before: a round, then a check)
        while True:
            if watch:
                await self.surge.wait(inp.plan_seconds)
            else:
                await workflow.sleep(inp.plan_seconds)
            if not self.surge.surged:
                await self._round(inp)
                rounds += 1
            full = workflow.info().is_continue_as_new_suggested()
            if self.surge.surged or full or rounds >= inp.max_rounds_per_run:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    CoordinatorInput(**{**inp.model_dump(), "state": self._carried()})
                )

    def _carried(self) -> dict[str, Any]:
        """What the next run starts from (read back in `__init__`)."""
        state = {
            "term": self.c.term,
            "seq": self.c.seq,
            "shards": self.c.shards,
            "clusters": self.c.clusters,
            "sagas": self.sagas,
            "retiring": sorted(self.c.retiring),
            "retired": sorted(self.c.retired),
            "escalated_drains": sorted(self.c.escalated_drains),
            "membership": self.members.running,
            "guard": self.guard.rejections.state(),
            "pool": self.pool.state(), **self.modes_state(),
        }
        if self.providers is not None:
            state["providers"] = sorted(self.providers)
        return state

    async def _learn_clusters(self) -> None:
        """Which clusters each shard serves already (a coordinator started from scratch)."""
        for shard in self.c.shards:
            clusters: list[str] = await workflow.execute_activity(
                "shard_clusters", shard, result_type=list[str], **STEP
            )
            self.c.learn(shard, clusters)
        if workflow.patched("coordinator-learns-providers"):
            await self._learn_providers()
        self.ready = True

    async def _learn_providers(self) -> None:
        """The providers the shards run with (`ShardConfig.providers`, the same for every
        shard of a fleet; a split copies its donor's). Left unknown, to be asked again next
        round, if no shard answers."""
        found: set[str] = set()
        answered = False
        for shard in self.c.shards:
            if shard in self.c.retired:
                continue
            try:
                got: dict[str, Any] = await workflow.execute_activity(
                    "shard_providers", shard, result_type=dict[str, Any], **STEP
                )
            except ActivityError as err:
                workflow.logger.warning("shard %s did not say its providers: %s", shard, err)
                continue
            if got.get("running"):
                answered = True
                found.update(p for p in got.get("providers", []) if isinstance(p, str))
        if answered:
            self.providers = found

    async def _revive_missing(self, inp: CoordinatorInput, now: float) -> None:
        """A missing shard whose workflow is gone is restarted from its durable state (seed
        §6); at most one attempt per shard every 4 × `missing_after_seconds`."""
        restarts = workflow.metric_meter().create_counter(
            "bigfleet_shard_restarts_total", "shard workflows restarted by the coordinator"
        )
        for shard in self.c.shards:  # exported at 0, so an alert sees the first restart
            restarts.add(0, {"shard": str(shard)})
        for shard in self.c.missing(now, inp.missing_after_seconds, self._since()):
            if shard in self.c.retiring:
                continue  # merging away: its workflow ends on purpose
            if now - self.revived.get(shard, -float("inf")) < 4 * inp.missing_after_seconds:
                continue
            self.revived[shard] = now
            try:
                outcome: str = await workflow.execute_activity(
                    "revive_shard", shard, result_type=str, **STEP
                )
            except ActivityError as err:
                workflow.logger.warning("shard %s could not be revived: %s", shard, err.cause)
                continue
            workflow.logger.warning("missing shard %s: revive_shard says %s", shard, outcome)
            if outcome in ("reset", "restarted"):
                restarts.add(1, {"shard": str(shard)})

    def _since(self) -> float:
        """Shards never heard from are missing counted from the run's start (runs begun
        before: from always, and so at once)."""
        return self.started if workflow.patched(MISSING_PATCH) else -float("inf")

    async def _round(self, inp: CoordinatorInput) -> None:
        """One planning round: metrics, revive missing shards, drop finished sagas, start the
        planner's transfers, escalate blocked drains, and move splits and merges on."""
        now = workflow.now().timestamp()
        meter = workflow.metric_meter()
        meter.create_gauge("bigfleet_escalated_shortfalls", "shortfalls for a human").set(
            len(self.c.escalations())
        )
        meter.create_gauge(
            "bigfleet_fleet_wide_shortfalls", "profiles every shard is short of: buy capacity"
        ).set(len(self.c.shared_shortfalls()))
        meter.create_gauge("bigfleet_missing_shards", "shards not reporting").set(
            len(self.c.missing(now, inp.missing_after_seconds, self._since()))
        )
        for shard in self.c.missing(now, inp.missing_after_seconds, self._since()):
            workflow.logger.warning(
                "shard %s has not reported for %s s", shard, inp.missing_after_seconds
            )
        await self._revive_missing(inp, now)
        if self.providers is None and workflow.patched("coordinator-learns-providers"):
            await self._learn_providers()  # (a run whose state had none)
        for saga_id, saga in list(self.sagas.items()):
            report = self.c.reports.get(saga["receiver"])
            done = saga["done_at"]
            if done is not None and (saga["receiver"] < 0 or (report and report.at > done)):
                del self.sagas[saga_id]
        busy = [mid for saga in self.sagas.values() for mid in saga["machine_ids"]]
        pending: dict[tuple[int, str, int], int] = {}
        for saga in self.sagas.values():
            key = (saga["receiver"], saga["cluster"], saga["priority"])
            pending[key] = pending.get(key, 0) + len(saga["machine_ids"])
        self._pool_rules()
        moves, stepped = await self._plan(inp, busy, pending)
        await self._pause(stepped)  # (a large fleet's round: the gauges' count below is a step)
        for move in self.pool.planned(moves):
            # A saga's release returns the machines' records in one reply: parts of at most
            # RECORDS_MAX (shards refuse more).
            part = RECORDS_MAX if workflow.patched(SMALL_PAYLOADS) else RECORDS_MAX_BEFORE
            for i in range(0, len(move.machine_ids), part):
                await self._start_saga(
                    move.kind.value,
                    move.donor,
                    move.receiver,
                    move.machine_ids[i : i + part],
                    move.priority,
                    move.cluster,
                    move.grace_seconds,
                )
        await self._pause(stepped)  # (and the summaries another)
        await self._send_pool_summaries()  # (each shard: what the others hold free)
        if workflow.patched(ESCALATE_PATCH):  # (runs begun before escalate nothing)
            await self._escalate_blocked(inp)
        await self.members.round()

    async def _escalate_blocked(self, inp: CoordinatorInput) -> None:
        """Seed §7: a slow preemption drain whose preemptor's shortfall is escalated has its
        grace shortened to the floor (`drain_floor_seconds`); the drain itself runs on."""
        drains = self.c.drains_to_escalate()
        if not drains:
            return
        try:
            n: int = await workflow.execute_activity(
                "escalate_drains",
                EscalateDrains(machine_ids=drains, grace_seconds=inp.drain_floor_seconds),
                result_type=int,
                **STEP,
            )
        except ActivityError as err:
            self.c.escalated_drains.difference_update(drains)  # (tried again next round)
            workflow.logger.warning("escalating blocked drains failed: %s", err)
            return
        workflow.logger.info(
            "escalated %d drain workflow(s) of %d blocked machine(s) to grace %s s",
            n, len(drains), inp.drain_floor_seconds,
        )  # fmt: skip

    async def _start_saga(
        self,
        kind: str,
        donor: int,
        receiver: int,
        machine_ids: list[str],
        priority: int,
        cluster: str,
        grace_seconds: float,
        drain: bool = False,
    ) -> str:
        seqs = [self.c.next_token()[1] for _ in range(SEQS_PER_SAGA)]
        saga_id = f"saga-{kind}-{self.c.term}-{seqs[0]}"
        where = f"shard {donor} → shard {receiver}" if receiver >= 0 else f"shard {donor}"
        await workflow.start_child_workflow(
            TransferSagaWorkflow.run,
            SagaInput(
                kind=kind,
                donor=donor,
                receiver=receiver,
                machine_ids=machine_ids,
                term=self.c.term,
                seqs=seqs,
                priority=priority,
                grace_seconds=grace_seconds,
                drain=drain,
                poll_seconds=min(10.0, self.inp.plan_seconds),
            ),
            id=saga_id,
            parent_close_policy=ParentClosePolicy.ABANDON,
            static_summary=self.pool.summary(kind, machine_ids, where),
            execution_timeout=timedelta(hours=6),
        )
        self.sagas[saga_id] = {
            "machine_ids": machine_ids,
            "receiver": receiver,
            "cluster": cluster,
            "priority": priority,
            "done_at": None,
        }
        return saga_id
