"""The global coordinator (seed §6 tier 1) as a singleton workflow, id `coordinator`.

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
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from bigfleet.coordinator import Coordinator, ShardReport
    from workflows.sagas import STEP, TransferSagaWorkflow
    from workflows.types import CoordinatorInput, SagaInput

SEQS_PER_SAGA = 4  # drain, release, adopt, and one compensation


@workflow.defn(name="Coordinator")
class CoordinatorWorkflow:
    @workflow.init
    def __init__(self, inp: CoordinatorInput) -> None:
        state = inp.state or {}
        self.c = Coordinator(
            term=int(state.get("term", 0)),
            seq=int(state.get("seq", 0)),
            shards=list(state.get("shards", range(inp.shards))),
            clusters=dict(state.get("clusters", {})),
        )
        # Running sagas, and finished ones until the receiver's next report shows their effect.
        self.sagas: dict[str, dict[str, Any]] = dict(state.get("sagas", {}))
        # A coordinator started from scratch answers no assignment before it has learnt which
        # clusters the shards already serve (else a known cluster could land on a second shard).
        self.ready = inp.state is not None

    @workflow.signal
    def shard_report(self, report: ShardReport) -> None:
        self.c.receive(report, workflow.now().timestamp())

    @workflow.signal
    def saga_done(self, saga_id: str) -> None:
        saga = self.sagas.get(saga_id)
        if saga is not None:
            saga["done_at"] = workflow.now().timestamp()

    @workflow.update
    async def assign_cluster(self, cluster: str) -> int:
        """A cluster's shard: least-loaded on first contact, permanent after (seed §16).
        Roll-up senders ask once (update-with-start) and then signal the shard directly."""
        await workflow.wait_condition(lambda: self.ready)
        return self.c.assign(cluster)

    @assign_cluster.validator
    def _assign_ok(self, cluster: str) -> None:
        if not isinstance(cluster, str) or not cluster.strip():
            raise ValueError(f"cluster: a non-empty name is required, got {cluster!r}")

    @workflow.query
    def status(self) -> dict[str, Any]:
        now = workflow.now().timestamp()
        return {
            "term": self.c.term,
            "shards": self.c.shards,
            "clusters": self.c.clusters,
            "missing_shards": self.c.missing(now),
            "sagas_running": sorted(k for k, v in self.sagas.items() if v["done_at"] is None),
            "escalations": [
                {"shard": s, **sf.model_dump(mode="json")} for s, sf in self.c.escalations()
            ],
            "shared_shortfalls": self.c.shared_shortfalls(),
        }

    @workflow.run
    async def run(self, inp: CoordinatorInput) -> None:
        if inp.state is None:
            self.c.term = int(workflow.now().timestamp() * 1000)
            await self._learn_clusters()
        rounds = 0
        while True:
            await workflow.sleep(inp.plan_seconds)
            await self._round(inp)
            rounds += 1
            if workflow.info().is_continue_as_new_suggested() or rounds >= inp.max_rounds_per_run:
                await workflow.wait_condition(workflow.all_handlers_finished)
                state = {
                    "term": self.c.term,
                    "seq": self.c.seq,
                    "shards": self.c.shards,
                    "clusters": self.c.clusters,
                    "sagas": self.sagas,
                }
                workflow.continue_as_new(
                    CoordinatorInput(**{**inp.model_dump(), "state": state})
                )

    async def _learn_clusters(self) -> None:
        for shard in self.c.shards:
            clusters: list[str] = await workflow.execute_activity(
                "shard_clusters", shard, result_type=list[str], **STEP
            )
            self.c.learn(shard, clusters)
        self.ready = True

    async def _round(self, inp: CoordinatorInput) -> None:
        now = workflow.now().timestamp()
        meter = workflow.metric_meter()
        meter.create_gauge("bigfleet_escalated_shortfalls", "shortfalls for a human").set(
            len(self.c.escalations())
        )
        meter.create_gauge(
            "bigfleet_fleet_wide_shortfalls", "profiles every shard is short of: buy capacity"
        ).set(len(self.c.shared_shortfalls()))
        meter.create_gauge("bigfleet_missing_shards", "shards not reporting").set(
            len(self.c.missing(now, inp.missing_after_seconds))
        )
        for shard in self.c.missing(now, inp.missing_after_seconds):
            workflow.logger.warning(
                "shard %s has not reported for %s s", shard, inp.missing_after_seconds
            )
        for saga_id, saga in list(self.sagas.items()):
            report = self.c.reports.get(saga["receiver"])
            if saga["done_at"] is not None and report is not None and report.at > saga["done_at"]:
                del self.sagas[saga_id]
        busy = [mid for saga in self.sagas.values() for mid in saga["machine_ids"]]
        pending: dict[tuple[int, str, int], int] = {}
        for saga in self.sagas.values():
            key = (saga["receiver"], saga["cluster"], saga["priority"])
            pending[key] = pending.get(key, 0) + len(saga["machine_ids"])
        for move in self.c.plan(busy=busy, pending=pending):
            seqs = [self.c.next_token()[1] for _ in range(SEQS_PER_SAGA)]
            saga_id = f"saga-{move.kind.value}-{self.c.term}-{seqs[0]}"
            await workflow.start_child_workflow(
                TransferSagaWorkflow.run,
                SagaInput(
                    kind=move.kind.value,
                    donor=move.donor,
                    receiver=move.receiver,
                    machine_ids=move.machine_ids,
                    term=self.c.term,
                    seqs=seqs,
                    priority=move.priority,
                    grace_seconds=move.grace_seconds,
                ),
                id=saga_id,
                parent_close_policy=ParentClosePolicy.ABANDON,
                static_summary=(
                    f"{move.kind.value}: {len(move.machine_ids)} machines, "
                    f"shard {move.donor} → shard {move.receiver}"
                ),
                execution_timeout=timedelta(hours=6),
            )
            self.sagas[saga_id] = {
                "machine_ids": move.machine_ids,
                "receiver": move.receiver,
                "cluster": move.cluster,
                "priority": move.priority,
                "done_at": None,
            }

