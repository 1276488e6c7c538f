"""The hostile campaign's fleet (examples/hostile_campaign.py, which puts the repository root on
sys.path before importing this): the Temporal server, the two workers and a provider server
as separate processes, started, fed roll-ups, killed and watched until they recover, and the
final audit."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

from bigfleet.models import from_wire
from bigfleet.simulation.scenario import Scenario
from tests.conftest import TEMPORAL
from tests.edge.test_provider_contract import Server
from tests.procs import Proc, free_port, retrying
from tests.temporal.test_chaos import FLEET, KIND, rollup
from workers.connect import connect
from workers.dev.server import BLOB_LIMITS, SQLITE_PRAGMAS, search_attribute_flags
from workers.routing import assign_cluster
from workers.verbs.audit import audit
from workers.worker import ensure_shards

ROOT = Path(__file__).resolve().parents[1]
SECONDS = timedelta(seconds=10)


class CampaignFleet:
    """The campaign's processes and its client, and what it measured (`out`)."""

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
