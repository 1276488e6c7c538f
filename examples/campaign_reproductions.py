"""Issue 30's six defects, replayed against the hostile campaign's running fleet
(examples/hostile_campaign.py): a forged coordinator term, a history flood, out-of-range
generations, a year-ahead provider epoch, oversized roll-ups through the gateway, a phantom
cluster and the decommission of an unknown provider."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
from campaign_fleet import SECONDS, CampaignFleet
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.service import RPCError

from activities.shards import RESET_HISTORY_BYTES
from activities.wire import DecommissionRequest, Instruction
from bigfleet.edge.rollup_client import RollupSender
from bigfleet.models import MAX_GENERATION, FencingToken, ListFilter, MachineState
from bigfleet.providers.base import ProviderError
from bigfleet.v1 import rollups_pb2 as rpb
from tests.edge.test_gateway import _dep, thousand_needs
from tests.edge.test_provider_contract import BLOB, settle
from tests.temporal.test_chaos import KIND, rollup
from tests.temporal.test_shard_restart import revivals
from workers.dev.server import BLOB_ERROR_BYTES
from workers.gateway import TokenTable, start_gateway
from workers.generations import Generations
from workers.routing import ShardRouter, assign_cluster
from workers.verbs.audit import audit

PHANTOM = "кластер-😀"
# The largest signal the server takes (`bigfleet dev`'s limit; issue 30's 1.5 MB ones are
# refused since issue 44), over the shard's guard.
FLOOD_BYTES = BLOB_ERROR_BYTES - 1_000


class Reproductions(CampaignFleet):
    """Each reproduction records whether the fleet held against it (`out["reproductions"]`)."""

    # ---- the six reproductions of issue 30 ----------------------------------------------------

    async def answer(self, wid: str, update: str, arg: Any) -> str:
        try:
            done = await self.handle(wid).execute_update(update, arg, rpc_timeout=SECONDS)
            return f"{update} answered {done}"
        except WorkflowUpdateFailedError as err:
            return f"{update} refused: {str(err.cause)[:110]}"
        except Exception as err:  # (no answer: the workflow decides nothing)
            return f"{update} unanswered: {type(err).__name__}"

    def repro(self, n: int, what: str, held: bool, observed: str) -> None:
        self.out["reproductions"][str(n)] = {"what": what, "held": held, "observed": observed}

    async def forged_term(self) -> None:
        real = (await self.query("coordinator", "status"))["term"]
        before = (await self.query("shard-1", "status"))["coordinator_term"]
        forged = int(time.time() * 1000) + 240_000  # within the 5-minute clock tolerance
        answers = [await self.answer("shard-1", update, Instruction(term=forged, seq=seq))
                   for seq, update in ((1, "cancel_transfer"), (2, "adopt"), (3, "adopt"))]
        after = (await self.query("shard-1", "status"))["coordinator_term"]
        taken = [a for a in answers if a.startswith("adopt answered")]
        held = after in (before, real) and after != forged and not taken
        self.repro(1, "forged term to shard-1", held, f"coordinator_term {before} -> {after} "
                   f"(forged {forged}, coordinator's {real}); {answers[0]}; {answers[2]}")

    async def flood(self) -> None:
        shard, status = self.handle("shard-0"), await self.query("shard-0", "status")
        dead, sent, refusal = (await shard.describe()).run_id, 0, "none"
        for i in range(150):
            try:
                await shard.signal("rollup", {"cluster": f"flood-{i}", "pad": "x" * FLOOD_BYTES})
                sent += 1
            except RPCError as err:
                refusal = str(err)[:60]
                break
        ended = await self.until(self.handle("shard-0", dead).describe,
                                 lambda d: d.status == WorkflowExecutionStatus.TERMINATED, 30)
        started = time.monotonic()
        back = await self.until(shard.describe, lambda d: d.run_id != dead and d.status
                                == WorkflowExecutionStatus.RUNNING, 150)
        cycling = back and await self.until(
            lambda: self.query("shard-0", "status"),
            lambda s: s["epoch"] > status["epoch"] and s["cycles"] > status["cycles"], 60)
        took = round(time.monotonic() - started, 1)
        size = back.raw_description.workflow_execution_info.history_size_bytes if back else -1
        outcomes = await revivals(self.client)
        clean = await self.until(lambda: audit(self.client, settle_seconds=1.0),
                                 lambda a: a["report"]["counts"].get("orphan", 0) == 0, 60)
        held = bool(ended and cycling and "reset" in outcomes and clean
                    and size < RESET_HISTORY_BYTES + 2 * FLOOD_BYTES)
        self.repro(2, "history flood of shard-0", held,
                   f"{sent} signals of {FLOOD_BYTES / 1e6:.1f} MB, then '{refusal}'; run "
                   f"terminated: {bool(ended)}; "
                   f"coordinator revived it: {outcomes or 'never'} {took} s after; new run "
                   f"{size / 1e6:.1f} MB of history; audit then: "
                   + ("0 owned by nobody" if clean else "machines owned by nobody for 60 s"))

    async def generations(self) -> None:
        wid = f"shard-{self.assigned['web']}"
        before = (await self.query(wid, "rejections"))["total"]
        for generation in (2**63, time.time_ns()):
            await self.handle(wid).signal("rollup", {**rollup("web", 6), "generation": generation})
        seen = await self.until(lambda: self.query(wid, "rejections"),
                                lambda r: r["total"] >= before + 2, 30)
        why = [r["error"] for r in (seen or {"recent": []})["recent"] if "generation" in r["error"]]
        kept = (await self.query(wid, "cluster", "web"))["generation"]
        moved = await self.until(lambda: self.query(wid, "cluster", "web"),
                                 lambda v: v["generation"] > kept, 30)
        self.repro(3, "generations 2**63 and time_ns() to web's shard",
                   bool(seen and len(why) >= 2 and kept <= MAX_GENERATION and moved),
                   f"{seen['total'] - before if seen else 0} rejections recorded "
                   f"('{why[-1][why[-1].find('generation'):][:80] if why else '-'}'); web's "
                   f"generation {kept}, then "
                   f"moving on with the churn: {bool(moved)}")

    async def provider_epoch(self) -> None:
        epoch = (await self.query("shard-0", "status"))["epoch"]  # the real shard's
        held, seen = await asyncio.to_thread(self._provider_epoch, epoch)
        self.repro(4, "year-ahead epoch at `bigfleet provider serve` (cloud)", held, seen)

    def _provider_epoch(self, epoch: int) -> tuple[bool, str]:
        def token(e: int) -> FencingToken:
            return FencingToken(shard_id=0, shard_epoch=e, seq=1)

        p = self.provider_server.client("cloud")
        try:
            a = p.list(ListFilter(states=[MachineState.SPECULATIVE]))[0].id
            p.create([a], token(epoch), key="real/create")
            settle(p, a, MachineState.IDLE)
            p.configure(a, BLOB, "web", token(epoch), key="real/configure")
            settle(p, a, MachineState.CONFIGURED)
            year = 365 * 24 * 3600 * 1000
            try:
                p.configure("no-such-machine", BLOB, "web", token(epoch + year), key="forged")
                forged = "ACCEPTED"
            except ProviderError as err:
                forged = f"{type(err).__name__}: {str(err)[:80]}"
            try:
                real = p.drain(a, 0.0, token(epoch), key="real/drain").machine.state.value
            except ProviderError as err:
                real = f"refused: {type(err).__name__}: {str(err)[:80]}"
        finally:
            p.close()
        held = forged != "ACCEPTED" and real in ("DRAINING", "IDLE")
        return held, f"Configure no-such-machine a year ahead: {forged}; the real epoch's " \
                     f"Drain after: {real}"

    async def gateway(self) -> None:
        router, dep = ShardRouter(self.client, 2), _dep(("web",))
        server = await start_gateway(dep, TokenTable.load(dep), router, None,
                                     Generations(router.generation))
        sender = RollupSender(f"127.0.0.1:{server.port}", token="web-secret")
        wid = f"shard-{self.assigned['web']}"
        before, now = (await self.query(wid, "rejections"))["total"], time.time_ns() // 10**6
        need = rpb.CapacityNeed(priority=500_000, count=self.last_counts.get("web", 1))
        need.requirements.add(key="node.kubernetes.io/instance-type", operator="In",
                              values=[KIND["web"]])
        sends = {"1 000 needs": thousand_needs("web", now),
                 "generation time_ns": rpb.ClusterCapacityNeeds(
                     cluster="web", generation=time.time_ns(), needs=[need]),
                 "good": rpb.ClusterCapacityNeeds(cluster="web", generation=now, needs=[need])}
        got = {}
        try:
            for label, pb in sends.items():
                try:
                    await sender.send_proto(pb)
                    got[label] = "ACCEPTED"
                except grpc.RpcError as err:
                    got[label] = err.code().name  # type: ignore[attr-defined]
        finally:
            await sender.close()
            await server.stop(0)
        await asyncio.sleep(2)
        after = (await self.query(wid, "rejections"))["total"]
        good = got.pop("good")
        self.repro(5, "oversized roll-up through the gateway",
                   after == before and good == "ACCEPTED" and "ACCEPTED" not in got.values(),
                   ", ".join(f"{k}: {v}" for k, v in got.items()) + f"; a good one: {good}; "
                   f"the shard's rejections {before} -> {after} (nothing bad reached it)")

    async def phantom(self) -> None:
        owner = await asyncio.wait_for(assign_cluster(self.client, PHANTOM, 2), 60)
        other = f"shard-{1 - owner}"
        need = {"requirements": [], "priority": 1000, "count": 6}
        await self.handle(other).signal("rollup", {"cluster": PHANTOM, "generation": 1,
                                                   "needs": [need]})
        text = f"'{PHANTOM}' is not assigned to shard {1 - owner}"
        refused = await self.until(lambda: self.query(other, "rejections"),
                                   lambda r: any(text in x["error"] for x in r["recent"]), 60)
        clusters = (await self.query(other, "status"))["clusters"]
        await self.until(lambda: self.query("coordinator", "status"),
                         lambda s: s.get("providers") is not None, 30)
        decom = await self.answer("coordinator", "decommission",
                                  DecommissionRequest(provider="nope", count=1))
        self.repro(6, f"phantom cluster to {other}, decommission of provider 'nope'",
                   bool(refused) and PHANTOM not in clusters and "refused" in decom,
                   f"roll-up refused and recorded: {bool(refused)}; {other} serves "
                   f"{sorted(clusters)}; {decom}")
