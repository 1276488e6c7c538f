"""Issue 44 end to end, every part in its own process (the fleet of test_fleet_over_grpc.py: a
real Temporal dev server, `bigfleet provider serve`, `bigfleet operator serve`, the gateway and
a worker): anyone holding the workers' client certificate sends the reference provider a Drain
of a served machine with a forged near-future epoch.

- An epoch beyond the provider's skew (PROVIDER_FUTURE_MS, tens of seconds) is refused as
  never issued and moves no fence: two minutes ahead was accepted before, inside the five
  minutes allowed.
- One within the skew is taken: the fence moves above the real shard's epoch, and the shard's
  next call is refused as stale. The shard notices (a distinct outcome), takes a new epoch
  above the forged one, and its calls go through: the cluster gets its machines. Before,
  every call of the shard was refused from then on, silently.
- `bigfleet provider fence show` says so, and `fence reset` is recorded in the call log.
- Someone who keeps moving the fence above the shard gets MAX_REEPOCHS new epochs out of it
  within the hour, then no more: the shard escalates, and `bigfleet status` names the provider
  and the epoch it keeps.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import time
from typing import Any

import pytest

from bigfleet.deployment import ProviderEndpoint
from bigfleet.edge.provider_client import GrpcProvider
from bigfleet.epochs import PROVIDER_FUTURE_MS
from bigfleet.fences import MAX_REEPOCHS
from bigfleet.models import FencingToken, MachineState
from bigfleet.providers.base import ProviderError
from tests.conftest import query_retrying
from tests.edge.test_fleet_over_grpc import BIGFLEET, Edge, in_state
from tests.procs import ROOT

S = MachineState


def fences(edge: Edge) -> dict[str, int]:
    """The server's fences, read from its SQLite store as `provider fence show` reads them."""
    db = sqlite3.connect(f"file:{edge.state / 'provider.sqlite3'}?mode=ro", uri=True)
    try:
        return {str(k): v for k, v in db.execute("SELECT shard_id, highest_epoch FROM fences")}
    finally:
        db.close()


def fence(edge: Edge, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BIGFLEET, "provider", "fence", *args, "--state-dir", str(edge.state)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def serving(edge: Edge) -> list[Any]:
    return [m for m in edge.machines() if m.state is S.CONFIGURED and m.cluster == "a"]


def forged_drain(edge: Edge, machine_id: str, ahead_ms: int) -> Any:
    """A Drain as anyone with the workers' certificate may send it: shard 0, an epoch
    `ahead_ms` beyond now."""
    p = GrpcProvider(ProviderEndpoint(name="dc", endpoint=f"127.0.0.1:{edge.provider_port}"))
    token = FencingToken(shard_id=0, shard_epoch=time.time_ns() // 1_000_000 + ahead_ms, seq=1)
    try:
        return p.drain(machine_id, 0.0, token, force=True, key=f"forged/{ahead_ms}"), token
    finally:
        p.close()


async def quiet(shard: Any, timeout: float = 120.0) -> dict[str, Any]:
    """The shard's status once nothing it started is out (polled, as `Edge.until` does)."""
    deadline = time.monotonic() + timeout
    while True:
        st = await query_retrying(lambda: shard.query("status"))
        if st["in_flight"] == 0 and st["queued_starts"] == 0 and not st["machines"]["CONFIGURING"]:
            return st
        assert time.monotonic() < deadline, st
        await asyncio.sleep(0.5)


@pytest.mark.temporal
async def test_a_forged_near_future_epoch_no_longer_fences_a_shard_out(dev_env, tmp_path):
    temporal = dev_env.client.service_client.config.target_host
    edge = Edge(tmp_path, temporal)
    try:
        await edge.start()
        await edge.until(
            "the gateway accepts a's roll-up", lambda: edge.send("a", 2).returncode == 0
        )
        shard = dev_env.client.get_workflow_handle("shard-0")
        served = await edge.until(
            "2 machines configured for a", in_state(edge, S.CONFIGURED, 2, "a")
        )
        await quiet(shard)  # (a drain under a running configure's watch strands it until its time)
        real = fences(edge)["0"]

        # Two minutes ahead: inside the five minutes allowed before, beyond the skew now.
        with pytest.raises(ProviderError) as beyond:
            forged_drain(edge, served[0].id, 120_000)
        assert "token.shard_epoch" in str(beyond.value) and "never issued" in str(beyond.value)
        assert fences(edge) == {"0": real}

        # Within the skew: taken, and the real shard's epoch is below the fence now.
        _, token = forged_drain(edge, served[0].id, PROVIDER_FUTURE_MS // 2)
        assert fences(edge)["0"] == token.shard_epoch > real

        # The shard's next call is refused as stale; it supersedes the fence and goes on.
        assert edge.send("a", 3).returncode == 0

        async def reepoched() -> int | None:
            st = await query_retrying(lambda: shard.query("status"))
            return st["epoch"] if st["epoch"] > token.shard_epoch else None

        deadline = time.monotonic() + 120
        while (epoch := await reepoched()) is None:  # (polled, as `edge.until` does)
            assert time.monotonic() < deadline, f"no new epoch\n{edge.logs()}"
            await asyncio.sleep(0.5)
        await edge.until(
            "a's third machine configured with the new epoch",
            lambda: len(serving(edge)) >= 2 and fences(edge)["0"] >= epoch,
            timeout=120,
        )
        calls = edge.calls()
        refused = [c for c in calls if c["outcome"] == "STALE_FENCING_TOKEN"]
        assert refused, calls
        after = [c for c in calls if c["seq"] > refused[-1]["seq"] and c["outcome"] == "started"]
        assert after, calls  # the shard's calls go through again
        st = await query_retrying(lambda: shard.query("status"))
        assert st["fences_escalated"] == []  # one re-epoch is within the bound

        # The operator's view and reset, audited.
        shown = fence(edge, "show", "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout) == fences(edge), shown.stderr
        out = fence(edge, "reset", "--shard", "0", "--to", str(epoch), "--reason", "issue 44")
        assert out.returncode == 0, out.stderr
        (reset,) = [c for c in edge.calls() if c["method"] == "FenceReset"]
        assert reset["outcome"] == "reset" and "(issue 44)" in reset["detail"], reset
        assert f"-> {epoch}" in reset["detail"] and "@" in reset["detail"]
        assert fences(edge) == {"0": epoch}

        # Someone keeps moving the fence above the shard: it supersedes it up to MAX_REEPOCHS
        # times within the hour, then stops and says so, naming the provider and the fence.
        async def status() -> dict[str, Any]:
            return await query_retrying(lambda: shard.query("status"))

        for n in range(MAX_REEPOCHS):  # the first re-epoch was above
            ours = (await quiet(shard))["epoch"]
            kept = ours + 1000
            assert fence(edge, "reset", "--shard", "0", "--to", str(kept)).returncode == 0
            assert edge.send("a", 1 + n % 2).returncode == 0  # (a drain, a configure: calls)
            deadline = time.monotonic() + 120
            while (st := await status())["epoch"] <= kept and not st["fences_escalated"]:
                assert time.monotonic() < deadline, f"shard at {st['epoch']}\n{edge.logs()}"
                await asyncio.sleep(0.5)
        assert [(f["provider"], f["kept_epoch"]) for f in st["fences_escalated"]] == [("dc", kept)]
        assert st["epoch"] == ours  # no more new epochs: escalated instead of looping
        shown = subprocess.run(
            [*BIGFLEET, "status", "--address", temporal, "--shard", "0"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert f"FENCED OUT: provider dc refuses shard 0 as stale: it keeps epoch {kept}" in (
            shown.stdout
        ), shown
    finally:
        for proc in reversed(edge.procs):
            proc.stop()
