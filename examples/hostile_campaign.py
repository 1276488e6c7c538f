"""Issue 30's reliability campaign, re-run and bounded: a fleet laid out as separate processes is
fed hostile input and killed while its roll-ups churn, then audited.

    python examples/hostile_campaign.py [--minutes N] [--seed S] [--json]

The fleet is tests/temporal/test_chaos.py's (2 shards, 12 GPUs, 12 cloud VMs, 3 clusters):
`temporal server start-dev` on a SQLite file with `bigfleet dev`'s blob limits, `bigfleet worker
--role shards,transitions` (the one killed) and `--role providers`. Under a roll-up per cluster
every 2 s (counts drawn from --seed) it sends test_fuzz_handlers.py's `hostile()` catalogue to
the signals and updates of the shards and the coordinator (refusals counted by the workflows'
`rejections` query before and after; each update must come back an error); replays issue 30's
six defects (a `bigfleet provider serve` of the fleet file's `cloud` provider, standalone, for
the 4th; a gateway in this process delivering to the fleet's shards for the 5th); SIGKILLs the
worker 3 times and the server once, then the worker every ~30 s while --minutes last; sends the
last counts again and audits until clean.

Exit 0 if the fleet held: audit clean (none owned by nobody or twice), every shard and the
coordinator running with no failing workflow task, every kill recovered, every hostile input
refused, every reproduction held; else 1. Takes about --minutes plus ~20 s (the scripted steps
alone take ~1.5-2 min; default 4: ~4.5 min on 2 cores); it gives up, failing, at --minutes + 5.5.
Logs and the Temporal database are kept (in /tmp) if it fails.
"""
# ruff: noqa: E402  (the repository root goes on sys.path before its modules are imported)

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc
import yaml
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.service import RPCError

from activities.shards import RESET_HISTORY_BYTES
from activities.wire import DecommissionRequest, Instruction
from bigfleet.edge.rollup_client import RollupSender
from bigfleet.models import MAX_GENERATION, FencingToken, ListFilter, MachineState, from_wire
from bigfleet.providers.base import ProviderError
from bigfleet.simulation.scenario import Scenario
from bigfleet.v1 import rollups_pb2 as rpb
from tests.conftest import TEMPORAL
from tests.edge.test_gateway import _dep, thousand_needs
from tests.edge.test_provider_contract import BLOB, Server, settle
from tests.procs import Proc, free_port, retrying
from tests.temporal.test_chaos import FLEET, KIND, rollup
from tests.temporal.test_fuzz_handlers import LEGITIMATE, hostile
from tests.temporal.test_shard_restart import revivals
from workers.connect import connect
from workers.dev.server import BLOB_LIMITS, SQLITE_PRAGMAS, search_attribute_flags
from workers.gateway import TokenTable, start_gateway
from workers.generations import Generations
from workers.routing import ShardRouter, assign_cluster
from workers.verbs.audit import audit
from workers.worker import ensure_shards

PHANTOM = "кластер-😀"
FLOOD_BYTES = 1_500_000  # under the server's 2 MB blob limit, over the shard's guard
SHARD_SIGNALS = ["rollup", "transition_done", "revived", "no_such_signal"]
SHARD_UPDATES = ["adopt", "release", "drain_for_transfer", "cancel_transfer", "split_out",
                 "hand_out", "take_in", "retire", "decommission", "disown", "observe_records"]
COORD_SIGNALS = ["shard_report", "saga_done", "membership_done", "x" * 200]
COORD_UPDATES = ["assign_cluster", "split_shard", "merge_shards", "add_shard", "decommission",
                 "repair", "cluster_owners"]
# Also an operator's command, not hostile: the random JSON can be a real shard's number.
OPERATOR = {**LEGITIMATE,
            "split_shard": lambda a: len(a) == 1 and type(a[0]) is int and a[0] in (0, 1),
            "merge_shards": lambda a: len(a) == 1 and a[0] in ([0, 1], [1, 0])}
SECONDS = timedelta(seconds=10)


class Campaign:
    def __init__(self, seed: int, minutes: float, tmp: Path) -> None:
        self.seed, self.minutes, self.rng = seed, minutes, random.Random(seed)
        self.address = f"127.0.0.1:{free_port()}"
        fleet_file = tmp / "fleet.yaml"
        fleet_file.write_text(yaml.safe_dump({**FLEET, "name": "hostile-campaign"}))
        self.fleet = from_wire(Scenario, FLEET)
        self.server = Proc("temporal server", [
            str(TEMPORAL), "server", "start-dev", "--ip", "127.0.0.1", "--port",
            self.address.split(":")[1], "--headless", "--db-filename", str(tmp / "temporal.db"),
            *SQLITE_PRAGMAS, *BLOB_LIMITS, "--log-level", "error", *search_attribute_flags(),
        ], tmp / "temporal.log")
        bf = [sys.executable, "-m", "workers.cli"]
        worker = [*bf, "worker", "--fleet", str(fleet_file), "--address", self.address,
                  "--metrics-port", "0", "--log-level", "warning", "--snapshot-dir",
                  str(tmp / "snapshots")]
        self.worker = Proc("worker", [*worker, "--role", "shards,transitions"], tmp / "shards.log")
        self.providers = Proc("providers", [*worker, "--role", "providers"], tmp / "providers.log")
        self.provider_server = Server(
            [*bf, "provider", "serve", "--fleet", str(fleet_file), "--provider", "cloud",
             "--listen", "127.0.0.1:0", "--state-dir", str(tmp / "cloud")], tmp / "provider.log")
        self.out: dict[str, Any] = {"seed": seed, "kills": [], "hostile": [], "reproductions": {},
                                    "workflows": {}, "audit": {}, "rounds": 0, "send_errors": 0,
                                    "step_errors": []}
        self.last_counts: dict[str, int] = {}

    # ---- the fleet ----------------------------------------------------------------------------

    def handle(self, wid: str, run_id: str | None = None) -> Any:
        return self.client.get_workflow_handle(wid, run_id=run_id)

    async def query(self, wid: str, name: str, *args: Any) -> Any:
        return await self.handle(wid).query(name, *args, rpc_timeout=SECONDS)

    async def until(self, probe: Any, ok: Any, timeout: float) -> Any:
        """probe() until ok(its value) (an error: not yet): that value, or None at the timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if ok(value := await probe()):
                    return value
            except Exception:
                pass
            await asyncio.sleep(0.5)
        return None

    async def cycles(self) -> dict[int, int]:
        """Each shard's decision cycles; raises unless the coordinator answers too (replays)."""
        await self.query("coordinator", "status")
        return {s: (await self.query(f"shard-{s}", "status"))["cycles"] for s in (0, 1)}

    async def start(self) -> None:
        self.server.start()
        quiet = TelemetryConfig(logging=LoggingConfig(TelemetryFilter("ERROR", "ERROR")))
        rt = Runtime(telemetry=quiet)  # (no warning per 1.5 MB payload sent)
        self.client = await retrying("connecting", lambda: connect(self.address, "default", rt))
        await retrying("the server answering", self.client.count_workflows)
        await ensure_shards(self.client, self.fleet, plan_seconds=2, transition_poll_seconds=1.0,
                            report_seconds=1.0, reconcile_seconds=5.0, task_timeout_seconds=10)
        self.providers.start()
        self.worker.start()
        await asyncio.to_thread(self.provider_server.start)
        self.assigned = {c: await assign_cluster(self.client, c, 2) for c in KIND}
        await self.until(self.cycles, lambda c: min(c.values()) > 2, 60)

    async def send(self, counts: dict[str, int]) -> None:
        for cluster, count in counts.items():
            try:
                await self.handle(f"shard-{self.assigned[cluster]}").signal(
                    "rollup", rollup(cluster, count), rpc_timeout=SECONDS)
            except Exception:
                self.out["send_errors"] += 1  # the server or the shard is down
        self.last_counts = counts

    async def churn(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            r = self.rng
            await self.send({"train": r.randint(2, 6), "web": r.randint(1, 6),
                             "batch": r.randint(1, 5)})
            self.out["rounds"] += 1
            await asyncio.wait([asyncio.create_task(stop.wait())], timeout=2.0)

    async def kill(self, proc: Proc, pause: float = 0.5) -> None:
        """SIGKILL, restart; recovered when both shards decide again (their cycles move) and
        the coordinator answers (a workflow whose history no longer replays cannot)."""
        before = await retrying("shard cycles", self.cycles, 120)
        started = time.monotonic()
        proc.kill()
        await asyncio.sleep(pause)
        proc.start()
        moved = await self.until(self.cycles, lambda c: all(c[s] > before[s] for s in c), 120)
        took = round(time.monotonic() - started, 1)
        self.out["kills"].append({"what": proc.name, "recovered": bool(moved), "seconds": took})

    # ---- hostile input --------------------------------------------------------------------------

    async def hostile(self, label: str, wid: str, signals: list[str], updates: list[str],
                      seed: int) -> None:
        handle, h = self.handle(wid), {"batch": label, "workflow": wid, "signals_sent": 0,
                                       "send_errors": 0, "updates_refused": 0, "accepted": [],
                                       "unanswered": 0, "skipped": 0}
        before = (await retrying("rejections", lambda: handle.query("rejections")))["total"]
        for name in signals:
            for _, args in hostile(seed):
                try:
                    await handle.signal(name, args=args, rpc_timeout=SECONDS)
                    h["signals_sent"] += 1
                except Exception:
                    h["send_errors"] += 1
        for name in updates:
            for what, args in hostile(seed):
                if OPERATOR.get(name, lambda _: False)(args):
                    h["skipped"] += 1  # what the update rightly takes
                    continue
                try:
                    await handle.execute_update(name, args=args, rpc_timeout=2 * SECONDS)
                    h["accepted"].append(f"{name}: {what}")
                except (WorkflowUpdateFailedError, RPCError):
                    h["updates_refused"] += 1
                except Exception:
                    h["unanswered"] += 1
        after = await self.until(lambda: handle.query("rejections"),
                                 lambda r: r["total"] >= before + h["signals_sent"], 60)
        after = (after or await handle.query("rejections"))["total"]
        h.update(rejections_before=before, rejections_after=after, signals_refused=after - before,
                 updates_sent=h["updates_refused"] + len(h["accepted"]) + h["unanswered"])
        self.out["hostile"].append(h)

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
        for i in range(60):
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
                   f"{sent} signals of 1.5 MB, then '{refusal}'; run terminated: {bool(ended)}; "
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

    # ---- the campaign ---------------------------------------------------------------------------

    async def step(self, step: Any) -> None:
        """One step; one that fails is recorded and the campaign goes on."""
        try:
            await step()
        except Exception as err:
            self.out["step_errors"].append(f"{getattr(step, '__name__', 'step')}: "
                                           f"{type(err).__name__}: {str(err)[:300]}")

    async def run(self) -> None:
        began = time.monotonic()
        await self.start()
        self.out["setup_seconds"] = round(time.monotonic() - began, 1)
        began, stop = time.monotonic(), asyncio.Event()
        churn = asyncio.create_task(self.churn(stop))
        try:
            steps = [
                lambda: asyncio.gather(
                    self.hostile("A", "shard-1", SHARD_SIGNALS, SHARD_UPDATES, self.seed),
                    self.hostile("A", "coordinator", COORD_SIGNALS, COORD_UPDATES, self.seed + 1)),
                lambda: self.kill(self.worker), self.generations, self.phantom,
                lambda: self.kill(self.server, pause=1.0), self.forged_term, self.provider_epoch,
                self.gateway, lambda: self.kill(self.worker), self.flood,
                lambda: asyncio.gather(
                    self.hostile("B", "shard-0", SHARD_SIGNALS, SHARD_UPDATES, self.seed + 2),
                    self.hostile("B", "shard-1", SHARD_SIGNALS, [], self.seed + 3)),
                lambda: self.kill(self.worker)]
            for step in steps:
                await self.step(step)
            while time.monotonic() - began + 32 < self.minutes * 60:  # (a kill: ~32 s)
                await asyncio.sleep(20)
                await self.step(lambda: self.kill(self.worker))
        finally:
            stop.set()
            await churn
        self.out["chaos_seconds"] = round(time.monotonic() - began, 1)
        await self.converge()

    async def converge(self) -> None:
        final, started, last = self.last_counts, time.monotonic(), {}
        await self.send(final)  # once more, after every restart
        while time.monotonic() - started < 180:
            try:
                last = await audit(self.client, settle_seconds=1.0)
                served = {c: last["report"]["configured"].get(c, 0) for c in final}
                if last["clean"] and served == final:
                    break
            except Exception as err:
                last = {"error": str(err)[:200]}
            await asyncio.sleep(3)
        cli = subprocess.run([sys.executable, "-m", "workers.cli", "audit", "--address",
                              self.address], cwd=ROOT, capture_output=True, timeout=120)
        r = last.get("report", {})
        self.out["audit"] = {
            "seconds": round(time.monotonic() - started, 1), "clean": last.get("clean", False),
            "machines_audited": r.get("listed"), "error": last.get("error"),
            **{k: r.get("counts", {}).get(kind) for k, kind in (
                ("nobody_owned", "orphan"), ("owned_twice", "double"), ("mismatch", "mismatch"),
                ("unlisted", "unlisted"), ("in_flight", "in_flight"))},
            "configured": r.get("configured"), "asked": final, "cli_exit_code": cli.returncode}
        shards = (await self.until(lambda: self.query("coordinator", "status"), bool, 30) or
                  {"shards": [0, 1]})["shards"]
        for wid in [f"shard-{s}" for s in shards] + ["coordinator"]:
            desc = await self.handle(wid).describe()
            answers = await self.until(lambda w=wid: self.query(w, "rejections"), bool, 30)
            self.out["workflows"][wid] = {
                "status": desc.status.name if desc.status else "?", "answers": bool(answers),
                "task_attempt": desc.raw_description.pending_workflow_task.attempt}
        self.out["processes_alive"] = all(
            p.alive() for p in (self.server, self.worker, self.providers))

    def stop(self) -> None:
        for p in (self.worker, self.providers, self.server):
            p.kill()
        self.provider_server.kill()


def held(out: dict[str, Any]) -> bool:
    a, ws = out["audit"], out["workflows"].values()
    return bool(
        a.get("clean") and a.get("owned_twice") == 0 and a.get("nobody_owned") == 0
        and a.get("cli_exit_code") == 0 and out.get("processes_alive") and len(ws) >= 3
        and all(w["status"] == "RUNNING" and w["answers"] and w["task_attempt"] <= 1 for w in ws)
        and out["kills"] and all(k["recovered"] for k in out["kills"])
        and all(h["signals_refused"] >= h["signals_sent"] and not h["accepted"]
                and not h["send_errors"] for h in out["hostile"])
        and len(out["reproductions"]) == 6
        and all(r["held"] for r in out["reproductions"].values())
        and not out["step_errors"] and "error" not in out)


def table(out: dict[str, Any]) -> str:
    lines = [f"hostile campaign, seed {out['seed']}: setup {out.get('setup_seconds')} s, churn "
             f"and chaos {out.get('chaos_seconds')} s ({out['rounds']} rounds of roll-ups; "
             f"{out['send_errors']} sends failed while something was down)", "", "KILLS"]
    for what in sorted({k["what"] for k in out["kills"]}):
        ks = [k for k in out["kills"] if k["what"] == what]
        lines.append(f"  {what:<16} x{len(ks)}  recovered: " + ", ".join(
            f"yes {k['seconds']} s" if k["recovered"] else "NO" for k in ks))
    lines += ["", "HOSTILE PAYLOADS (signals: refusals the workflow counted, before -> after; "
              "updates: an error to the sender)"]
    for h in out["hostile"]:
        lines.append(
            f"  {h['batch']} {h['workflow']:<12} signals {h['signals_sent']:>3} sent, "
            f"{h['signals_refused']:>3} refused ({h['rejections_before']} -> "
            f"{h['rejections_after']}); updates {h['updates_sent']:>3} sent, "
            f"{h['updates_refused']:>3} refused, {len(h['accepted'])} accepted"
            f"{' ' + str(h['accepted']) if h['accepted'] else ''}, {h['unanswered']} "
            f"unanswered, {h['skipped']} legitimate not sent")
    sent = sum(h["signals_sent"] + h["updates_sent"] for h in out["hostile"])
    refused = sum(h["signals_refused"] + h["updates_refused"] for h in out["hostile"])
    lines += [f"  total: {sent} sent, {refused} refused", "", "REPRODUCTIONS (issue 30)"]
    for n, r in sorted(out["reproductions"].items()):
        lines.append(f"  {n}. {r['what']}: {'held' if r['held'] else 'FAILED'}\n"
                     f"       {r['observed']}")
    lines += ["", "WORKFLOWS AT THE END"] + [
        f"  {wid:<12} {w['status']}, answering queries: {w['answers']} (workflow task attempt "
        f"{w['task_attempt']})"
        for wid, w in out["workflows"].items()]
    a = out["audit"]
    lines += ["", "FINAL AUDIT", f"  machines audited {a.get('machines_audited')}, nobody-owned "
              f"{a.get('nobody_owned')}, owned twice {a.get('owned_twice')}, mismatched "
              f"{a.get('mismatch')}, unlisted {a.get('unlisted')}, in flight {a.get('in_flight')}"
              f"; clean: {a.get('clean')} after {a.get('seconds')} s; `bigfleet audit` exit "
              f"code {a.get('cli_exit_code')}", f"  configured {a.get('configured')}, last asked "
              f"{a.get('asked')}" + (f"\n  last audit error: {a['error']}" if a.get("error")
                                     else ""),
              *[f"STEP FAILED: {e}" for e in out["step_errors"]],
              "", f"THE FLEET {'HELD' if out['held'] else 'DID NOT HOLD'}"]
    return "\n".join(lines)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=4.0,
                    help="least length of the churn-and-chaos phase (default 4)")
    ap.add_argument("--seed", type=int, default=30, help="roll-up counts, hostile JSON")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)  # (the gateway logs each refusal)
    tmp = Path(tempfile.mkdtemp(prefix="hostile-campaign-"))
    campaign, began = Campaign(args.seed, args.minutes, tmp), time.monotonic()
    try:
        await asyncio.wait_for(campaign.run(), timeout=args.minutes * 60 + 330)
    except Exception as err:  # (a timeout too): report what was measured, and fail
        campaign.out["error"] = f"{type(err).__name__}: {err}"[:2000]
    finally:
        campaign.stop()
    out = campaign.out
    out["held"], out["wall_seconds"] = held(out), round(time.monotonic() - began, 1)
    if args.json:
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(table(out) + f" (wall time {out['wall_seconds']} s)")
        if "error" in out:
            print(f"campaign stopped: {out['error']}")
    if out["held"]:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"logs and the Temporal database: {tmp}", file=sys.stderr)
    return 0 if out["held"] else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
