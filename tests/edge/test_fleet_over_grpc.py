"""BigFleet against systems it did not write (issue 11): every edge over gRPC, every part in its
own process, as a platform team runs it.

A real Temporal dev server; `bigfleet provider serve` (the reference bare-metal provider, its
machines in SQLite); `bigfleet operator serve` (the operator of cluster `a`); `bigfleet gateway`;
and `bigfleet worker --config` (all roles) reaching them through a deployment config. Roll-ups
go in through the gateway with `bigfleet rollup send`, as a cluster's operator would send them.

What a user checks: the worker SIGKILLed mid-configure and again mid-drain resumes, and the
provider's own call log shows one operation started per machine and transition (a retried call
is a repeat, never a second operation); the provider server restarted mid-run keeps every
machine; a cluster whose operator is unreachable gets its machine back to idle and a shortfall
that says why, instead of a machine stuck CONFIGURING; a second provider that answers malformed
machines is refused with the field named while the shard serves from the first.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from bigfleet.deployment import ProviderEndpoint
from bigfleet.models import ListFilter, Machine, MachineState
from tests.conftest import query_retrying
from tests.procs import ROOT, Proc, free_port

S = MachineState
GPU = "gpu-8xh100"
BIGFLEET = [sys.executable, "-m", "workers.cli"]
FLEET = {
    "name": "edge",
    "cycle_seconds": 1,
    "duration_seconds": 1,
    "providers": [
        {
            "name": "dc",
            "kind": "bare-metal",
            # Long enough to kill the worker while machines are mid-transition.
            "configure_latency": 6,
            "drain_latency": 6,
            "racks": [{"rack": "r1", "zone": "z-1", "instance_type": GPU, "count": 4}],
        }
    ],
    "clusters": [{"name": "a"}, {"name": "b"}],
}


def need(count: int) -> dict[str, Any]:
    return {
        "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [GPU]}
        ],
        "priority": 1000,
        "count": count,
    }


class Edge:
    """The processes of one fleet, their ports and files."""

    def __init__(self, tmp: Path, temporal: str) -> None:
        self.tmp = tmp
        self.temporal = temporal
        self.provider_port, self.operator_port, self.gateway_port, self.broken_port = (
            free_port() for _ in "pogb"
        )
        dead = free_port()  # nothing listens there: b's operator is unreachable
        (tmp / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
        for cluster in ("a", "b"):
            (tmp / "tokens").mkdir(exist_ok=True)
            (tmp / "tokens" / cluster).write_text(f"token-of-{cluster}\n")
        deployment = {
            "name": "edge",
            "cycle_seconds": 1,
            # The worker is killed mid-task twice: a small fleet's shard needs no minute.
            "shard_task_timeout_seconds": 10,
            "policy": {"excess_grace_seconds": 2, "max_silence_seconds": 3600},
            "providers": [
                {"name": "dc", "endpoint": f"127.0.0.1:{self.provider_port}"},
                # Answers machines BigFleet must not accept (List: a machine without an id).
                {"name": "cloud", "endpoint": f"127.0.0.1:{self.broken_port}"},
            ],
            "operators": {
                "clusters": [
                    {"cluster": "a", "endpoint": f"127.0.0.1:{self.operator_port}"},
                    {"cluster": "b", "endpoint": f"127.0.0.1:{dead}"},
                ],
                "deadline_seconds": 2,
            },
            "gateway": {
                "listen": f"127.0.0.1:{self.gateway_port}",
                "tokens": [{"cluster": c, "file": f"tokens/{c}"} for c in ("a", "b")],
            },
        }
        self.config = tmp / "deployment.yaml"
        self.config.write_text(yaml.safe_dump(deployment))
        self.state = tmp / "provider-state"
        self.provider = Proc(
            "provider",
            [*BIGFLEET, "provider", "serve", "--fleet", str(tmp / "fleet.yaml"),
             "--provider", "dc", "--listen", f"127.0.0.1:{self.provider_port}",
             "--state-dir", str(self.state)],
            tmp / "provider.log",
        )  # fmt: skip
        self.operator = Proc(
            "operator",
            [*BIGFLEET, "operator", "serve", "--fleet", str(tmp / "fleet.yaml"),
             "--cluster", "a", "--listen", f"127.0.0.1:{self.operator_port}",
             "--gateway", f"127.0.0.1:{self.gateway_port}", "--token-dir", str(tmp / "tokens")],
            tmp / "operator.log",
        )  # fmt: skip
        self.broken = Proc(
            "malformed provider",
            [sys.executable, "-m", "tests.edge.broken_provider", "--mode", "malformed",
             "--listen", f"127.0.0.1:{self.broken_port}"],
            tmp / "broken.log",
        )  # fmt: skip
        self.gateway = Proc(
            "gateway",
            [*BIGFLEET, "gateway", "--config", str(self.config), "--address", temporal],
            tmp / "gateway.log",
        )
        self.worker = Proc(
            "worker",
            [*BIGFLEET, "worker", "--config", str(self.config), "--address", temporal,
             "--metrics-port", "0", "--log-level", "warning",
             "--snapshot-dir", str(tmp / "snapshots")],
            tmp / "worker.log",
        )  # fmt: skip
        self.procs = [self.provider, self.broken, self.operator, self.gateway, self.worker]

    async def start(self) -> None:
        """Every process, the servers listening before the worker starts."""
        servers = (
            (self.provider, self.provider_port),
            (self.broken, self.broken_port),
            (self.operator, self.operator_port),
            (self.gateway, self.gateway_port),
        )
        for proc, _ in servers:
            proc.start()
        for proc, port in servers:
            await proc.listening(port)
        self.worker.start()

    def machines(self) -> list[Machine]:
        from bigfleet.edge.provider_client import GrpcProvider

        p = GrpcProvider(ProviderEndpoint(name="dc", endpoint=f"127.0.0.1:{self.provider_port}"))
        try:
            return sorted(p.list(ListFilter()), key=lambda m: m.id)
        finally:
            p.close()

    def send(self, cluster: str, count: int) -> subprocess.CompletedProcess[str]:
        path = self.tmp / f"rollup-{cluster}.yaml"
        path.write_text(yaml.safe_dump({"cluster": cluster, "needs": [need(count)]}))
        return subprocess.run(
            [*BIGFLEET, "rollup", "send", str(path), "--gateway",
             f"127.0.0.1:{self.gateway_port}", "--token-file", str(self.tmp / "tokens" / cluster)],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    def calls(self) -> list[dict[str, Any]]:
        out = subprocess.run(
            [*BIGFLEET, "provider", "calls", "--state-dir", str(self.state), "--json"],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return json.loads(out.stdout)

    def logs(self) -> str:
        return "\n".join(p.tail() for p in self.procs)

    async def until(self, what: str, check: Any, timeout: float = 90.0) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = await asyncio.to_thread(check)
            except Exception as err:  # a server restarting
                last = err
            if last and not isinstance(last, Exception):
                return last
            await asyncio.sleep(0.5)
        raise AssertionError(f"{what}: not after {timeout} s (last: {last})\n{self.logs()}")


def in_state(edge: Edge, state: S, count: int, cluster: str) -> Any:
    def check() -> list[Machine] | None:
        hit = [m for m in edge.machines() if m.state is state and m.cluster == cluster]
        return hit if len(hit) == count else None

    return check


def started(calls: list[dict[str, Any]], method: str) -> dict[str, int]:
    """Operations started per machine, by the provider's own log."""
    per: dict[str, int] = {}
    for c in calls:
        if c["method"] == method and c["outcome"] == "started":
            for mid in c["machine_ids"]:
                per[mid] = per.get(mid, 0) + 1
    return per


@pytest.mark.temporal
async def test_a_fleet_over_grpc_survives_its_worker_and_its_provider_restarting(dev_env, tmp_path):
    temporal = dev_env.client.service_client.config.target_host
    edge = Edge(tmp_path, temporal)
    try:
        await edge.start()

        # Through the gateway, as an operator sends it.
        sent = await edge.until("the gateway accepts a's roll-up", lambda: (
            r := edge.send("a", 3)).returncode == 0 and r)  # fmt: skip
        assert "shard 0" in sent.stdout, sent.stdout
        # The shard runs with the deployment's task timeout (the Temporal UI shows it).
        shard = await dev_env.client.get_workflow_handle("shard-0").describe()
        timeout = shard.raw_description.execution_config.default_workflow_task_timeout
        assert timeout.ToTimedelta().total_seconds() == 10

        # Mid-configure: the worker dies with the configure calls made or in flight.
        await edge.until("a machine configuring", lambda: [
            m for m in edge.machines() if m.state is S.CONFIGURING])  # fmt: skip
        edge.worker.kill()
        edge.worker.start()
        configured = await edge.until("3 machines configured for a",
                                      in_state(edge, S.CONFIGURED, 3, "a"))  # fmt: skip

        # The provider server restarted: it keeps every machine, as it had it.
        before = {m.id: (m.state, m.host, m.cluster) for m in edge.machines()}
        edge.provider.kill()
        edge.provider.start()
        await edge.provider.listening(edge.provider_port)
        after = {m.id: (m.state, m.host, m.cluster) for m in edge.machines()}
        assert after == before

        # Mid-drain: a asks for nothing; the worker dies while the machines drain.
        assert edge.send("a", 0).returncode == 0
        await edge.until("a machine draining", lambda: [
            m for m in edge.machines() if m.state is S.DRAINING])  # fmt: skip
        edge.worker.kill()
        edge.worker.start()
        ids = sorted(m.id for m in configured)
        await edge.until("a's machines idle again", lambda: [
            m.state for m in edge.machines() if m.id in ids] == [S.IDLE] * 3)  # fmt: skip

        calls = edge.calls()
        assert started(calls, "Configure") == {mid: 1 for mid in ids}, calls
        assert started(calls, "Drain") == {mid: 1 for mid in ids}, calls

        # b's operator is unreachable: its machine goes back to idle and the shard says why,
        # within a few cycles (not ten minutes in CONFIGURING).
        assert edge.send("b", 1).returncode == 0

        async def shortfall() -> list[dict[str, Any]]:
            st = await query_retrying(
                lambda: dev_env.client.get_workflow_handle("shard-0").query("status")
            )
            return [s for s in st["shortfalls"] if s["cluster"] == "b"]

        deadline = time.monotonic() + 60
        why: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not why:
            why = [s for s in await shortfall() if "unreachable" in s["profile"]]
            await asyncio.sleep(0.5)
        assert why, f"no shortfall for b naming its operator\n{edge.logs()}"
        assert not [m for m in edge.machines() if m.cluster == "b"]

        # All along, the malformed provider was refused with the field named, and the shard
        # served from the other one.
        st = await query_retrying(
            lambda: dev_env.client.get_workflow_handle("shard-0").query("status")
        )
        refused = [f["error"] for f in st["failures"] if "provider cloud" in f["error"]]
        assert refused and "machines.0.id" in refused[-1], st["failures"]
    finally:
        for proc in reversed(edge.procs):
            proc.stop()
