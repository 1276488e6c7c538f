"""The command line against a running fleet (issue 9): `bigfleet cluster` of a cluster nobody
serves fails without assigning it, a closed pipe is not a traceback, and `bigfleet status`
says when the coordinator is not running, which the workers bring back on their own."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tests.conftest import eventually, fleet_workers
from tests.temporal.test_temporal_coordinator import gpu_fleet, start
from workers import cli
from workers.worker import keep_coordinator

BIGFLEET = Path(sys.executable).parent / "bigfleet"
NEED = {"requirements": [], "priority": 1000, "count": 1}


async def run(argv: list[str]) -> int:
    return await asyncio.to_thread(cli.main, argv)


async def test_cluster_status_and_a_coordinator_that_comes_back(
    dev_env: WorkflowEnvironment, capsys
):
    client = dev_env.client
    address = client.service_client.config.target_host
    raw = gpu_fleet(1, {"r1": 2}, ["web"])
    coordinator = client.get_workflow_handle("coordinator")
    async with fleet_workers(client, raw):
        await start(client, raw)
        await client.get_workflow_handle("shard-0").signal(
            "rollup", {"cluster": "web", "generation": 1, "needs": [NEED]}
        )
        await eventually(
            lambda: client.get_workflow_handle("shard-0").query("status"),
            lambda s: s["clusters"] == ["web"],
            what="web known",
        )
        capsys.readouterr()

        # A cluster nobody serves: an error, and no assignment made by asking.
        assert await run(["cluster", "NO-SUCH-CLUSTER", "--address", address]) == 1
        assert "no shard serves it" in capsys.readouterr().err
        assert "NO-SUCH-CLUSTER" not in (await coordinator.query("status"))["clusters"]
        assert await run(["cluster", "web", "--address", address]) == 0

        # The reader of a pipe left before the output came: no BrokenPipeError traceback.
        piped = await asyncio.to_thread(
            subprocess.run,
            ["bash", "-c", f"set -o pipefail; '{BIGFLEET}' cluster web --address {address} | true"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert piped.returncode == 0, piped.stderr
        assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr

        # A terminated coordinator: `status` says so (it would otherwise print its last
        # term), and the workers' keeper starts it again.
        await coordinator.terminate(reason="test")
        assert await run(["status", "--address", address]) == 1
        assert "coordinator  NOT RUNNING: terminated" in capsys.readouterr().out
        stop = asyncio.Event()
        keeper = asyncio.create_task(keep_coordinator(client, 1, stop, every=0.5))
        try:
            await eventually(
                lambda: run(["status", "--address", address]),
                lambda code: code == 0,
                timeout=60,
                what="the coordinator back",
            )
        finally:
            stop.set()
            await keeper
        assert "coordinator  term" in capsys.readouterr().out
