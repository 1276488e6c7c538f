"""Canary builds, live (issue 46; workflows/shard_builds.py, workers/verbs/rollout.py): a dev
fleet of 4 shards runs on the default build's shard workers; a second set of shard workers, build
`b2`, starts beside them. `bigfleet rollout start --build b2 --share 0.25` moves one shard,
which continues as new onto b2's task queue (its status names the queue it runs on, which only
b2's workers poll); `rollout status` shows both builds side by side; `promote` moves every
shard, `back` every shard back. No machine is lost, no transition is started by a move, and
`bigfleet audit` finds nothing wrong. A build no worker runs is refused, saying so."""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.testing import WorkflowEnvironment

from bigfleet.models import Transition
from tests.conftest import eventually, fleet_workers
from tests.temporal.test_audit import audit
from tests.temporal.test_temporal_coordinator import gpu_fleet, start
from workers import cli

SHARDS = range(4)


async def builds(client) -> dict[int, tuple[str, str | None, int]]:
    """Each shard's (build, next build, machines)."""
    out = {}
    for s in SHARDS:
        v = await client.get_workflow_handle(f"shard-{s}").query("status")
        out[s] = (v["build"], v["next_build"], sum(v["machines"].values()))
    return out


async def test_a_build_reaches_one_shard_then_all_then_none(
    dev_env: WorkflowEnvironment, capsys: pytest.CaptureFixture[str]
):
    client = dev_env.client
    address = client.service_client.config.target_host
    raw = gpu_fleet(4, {"r1": 8, "r2": 8}, ["web"])

    async def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = await asyncio.to_thread(cli.main, [*argv, "--address", address])
        got = capsys.readouterr()
        return code, got.out, got.err

    async with fleet_workers(client, raw) as sim:
        await start(client, raw, max_cycles_per_run=3)
        before = await eventually(
            lambda: builds(client),
            lambda b: sum(m for _, _, m in b.values()) == 16,
            timeout=60,
            what="16 machines adopted",
        )
        # No worker runs b2 yet: refused, and nothing moves.
        code, _, err = await run("rollout", "start", "--build", "b2", "--shards", "1")
        assert code != 0 and "no worker polls bigfleet-shards@b2" in err, err

        async with fleet_workers(client, sim, roles=["shards"], build="b2"):
            code, out, err = await run("rollout", "start", "--build", "b2", "--share", "0.25")
            assert code == 0, err
            [moved] = [int(line.split()[1].rstrip(":")) for line in out.splitlines()]
            await eventually(
                lambda: builds(client),
                lambda b: all(
                    b[s][:2] == (("b2", None) if s == moved else ("", None)) for s in SHARDS
                ),  # fmt: skip
                timeout=90,
                what=f"shard {moved} on b2, the others on the default build",
            )
            code, out, _ = await run("rollout", "status", "--json")
            view = json.loads(out)
            assert {b: int(v["shards"]) for b, v in view["builds"].items()} == {"": 3, "b2": 1}

            assert (await run("rollout", "promote", "--build", "b2", "--reason", "ok"))[0] == 0
            await eventually(
                lambda: builds(client),
                lambda b: all(b[s][:2] == ("b2", None) for s in SHARDS),
                timeout=90,
                what="every shard on b2",
            )
            assert (await run("rollout", "back", "--reason", "roll back"))[0] == 0
            after = await eventually(
                lambda: builds(client),
                lambda b: all(b[s][:2] == ("", None) for s in SHARDS),
                timeout=90,
                what="every shard back on the default build",
            )
        assert {s: m for s, (_, _, m) in after.items()} == {
            s: m for s, (_, _, m) in before.items()
        }  # no machine lost, none moved
        dc = sim.providers["dc"]
        for kind in (Transition.CONFIGURE, Transition.DRAIN, Transition.DELETE):
            assert dc.started[kind] == 0, kind
        log = (await client.get_workflow_handle(f"shard-{moved}").query("status"))["moves"]
        assert [(m["from"], m["to"]) for m in log] == [("", "b2"), ("b2", "b2"), ("b2", "")]
        code, report = await audit(capsys, address)
        assert code == 0, report
        assert report["report"]["counts"]["orphan"] == 0
