"""`bigfleet audit` on a real Temporal dev server (issue 9): a fleet that agrees with its
providers audits clean (exit 0); a machine two shards own, one drained behind BigFleet's back
and machines a shard restarted from scratch no longer owns are found (exit 3), and `--repair`
resolves them through the coordinator's fenced instructions (the audit after it is clean), with
every machine owned by exactly one shard at the end."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.testing import WorkflowEnvironment

from bigfleet.models import FencingToken, MachineState
from tests.conftest import eventually, fleet_workers, query_retrying
from tests.test_shard_restart import one_rack
from tests.test_temporal_coordinator import ask, machines_of, start, start_coordinator
from workers import cli
from workflows.sagas import COORDINATOR_ID
from workflows.types import Instruction

S = MachineState


async def audit(capsys: pytest.CaptureFixture[str], address: str, *extra: str) -> tuple[int, dict]:
    """`bigfleet audit --json ...`: its exit status and what it printed."""
    capsys.readouterr()
    argv = ["audit", "--json", "--settle", "1", "--address", address, *extra]
    code = await asyncio.to_thread(cli.main, argv)
    return code, json.loads(capsys.readouterr().out)


def kinds(report: dict) -> dict[str, int]:
    return {k: report["counts"][k] for k in ("orphan", "double", "mismatch", "unlisted")}


NONE = {"orphan": 0, "double": 0, "mismatch": 0, "unlisted": 0}


async def test_audit_finds_and_repairs_double_owned_drifted_and_orphaned_machines(
    dev_env: WorkflowEnvironment, capsys: pytest.CaptureFixture[str]
):
    client = dev_env.client
    address = client.service_client.config.target_host
    raw, ids = one_rack()  # 40 machines of one rack, all shard 0's by the assignment rule
    cluster = raw["clusters"][0]["name"]  # on shard 1
    shard0, shard1 = (client.get_workflow_handle(f"shard-{n}") for n in (0, 1))
    async with fleet_workers(client, raw) as sim:
        dc = sim.providers["dc"]
        # The coordinator revives a silent shard only after 30 s: this test revives by hand.
        await start_coordinator(client)
        await start(client, raw)
        await ask(client, 1, cluster, 1_000_000, 4)
        await eventually(
            lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 4, timeout=60
        )

        # 1. Clean: every machine listed once, held once, in the same state.
        code, out = await audit(capsys, address)
        report = out["report"]
        assert code == 0, report
        assert kinds(report) == NONE
        assert report["listed"] == 40 and report["held"] == 40
        assert report["configured"] == {cluster: 4}
        assert out["repair"] is None

        # The shard query behind it refuses unbounded or malformed pages.
        for args, what in ((["dc", 0, 0], "limit"), (["dc", -1, 10], "cursor"),
                           (["", 0, 10], "provider"), (["dc", 0, 10_001], "limit")):
            with pytest.raises(WorkflowQueryFailedError, match=what):
                await shard0.query("holdings", args=args)

        # 2. Drift: one of shard 1's configured machines drained behind BigFleet's back, and
        # one of shard 0's adopted by shard 1 too (a fenced adopt with the coordinator's term).
        states1 = await query_retrying(lambda: shard1.query("machine_states", ids))
        drifted = next(m for m, s in states1.items() if s == S.CONFIGURED.value)
        doubled = next(m for m, s in states1.items() if s == "GONE")
        dc.drain(drifted, 0.0, FencingToken(shard_id=99, shard_epoch=1, seq=1), force=True)
        await eventually(
            lambda: (sim.clocks["dc"].catch_up(time.time()), dc.get(drifted).state)[1],
            lambda s: s is S.IDLE,
            what="the hand drain done",
        )
        term = (await client.get_workflow_handle(COORDINATOR_ID).query("status"))["term"]
        fenced = Instruction(term=term, seq=10**9, machines=[dc.get(doubled)])
        assert await shard1.execute_update("adopt", fenced) == 1

        code, out = await audit(capsys, address)
        report = out["report"]
        assert code == 3, report
        assert kinds(report) == {"orphan": 0, "double": 1, "mismatch": 1, "unlisted": 0}
        found = {f["machine_id"]: f for f in report["findings"]}
        assert sorted(h["shard"] for h in found[doubled]["holders"]) == [0, 1]
        assert found[drifted]["provider_state"] == "IDLE"
        assert found[drifted]["holders"] == [
            {"shard": 1, "state": "CONFIGURED", "cluster": cluster}
        ]

        # 3. Repair: shard 0 keeps the double (the rule's shard; no cluster claims it), shard 1
        # takes the drained machine's record (and configures it again for its cluster).
        code, out = await audit(capsys, address, "--repair")
        assert code == 0, out
        assert out["repair"]["disowned"] == {"1": 1}
        assert out["repair"]["observed"] == {"1": 1}
        assert out["repair"]["refused"] == []
        assert kinds(out["after"]) == NONE
        states0 = await query_retrying(lambda: shard0.query("machine_states", [doubled]))
        states1 = await query_retrying(lambda: shard1.query("machine_states", [doubled]))
        assert states0[doubled] != "GONE" and states1[doubled] == "GONE"
        await eventually(
            lambda: machines_of(client, 1),
            lambda m: m["CONFIGURED"] == 4 and sum(m.values()) == 4,
            timeout=30,
            what="shard 1 configuring the drifted machine again",
        )

        # 4. Orphans: shard 1 restarted from its last snapshot (none: from scratch) owns none
        # of its 4 configured machines: nobody does.
        dead = (await shard1.describe()).run_id
        await shard1.terminate("test: the shard workflow vanished")
        revive = ["shard", "revive", "1", "--from-snapshot", "--address", address]
        assert await asyncio.to_thread(cli.main, revive) == 0
        await eventually(
            shard1.describe,
            lambda d: d.run_id != dead and d.status == WorkflowExecutionStatus.RUNNING,
            timeout=20,
        )
        await eventually(lambda: shard1.query("status"), lambda s: s["cycles"] >= 2, timeout=20)
        code, out = await audit(capsys, address)
        report = out["report"]
        assert code == 3, report
        assert kinds(report) == {"orphan": 4, "double": 0, "mismatch": 0, "unlisted": 0}
        orphans = report["findings"]
        assert {(f["provider_state"], f["provider_cluster"]) for f in orphans} == {
            ("CONFIGURED", cluster)
        }
        assert all(f["holders"] == [] for f in orphans)

        # 5. Repair: the cluster's shard (1, by the coordinator's assignment) adopts them.
        code, out = await audit(capsys, address, "--repair")
        assert code == 0, out
        assert out["repair"]["adopted"] == {"1": 4}
        assert kinds(out["after"]) == NONE
        held0 = await query_retrying(lambda: shard0.query("machine_states", ids))
        held1 = await query_retrying(lambda: shard1.query("machine_states", ids))
        owners = [(held0[m] != "GONE") + (held1[m] != "GONE") for m in ids]
        assert owners == [1] * 40  # every machine owned by exactly one shard

        # The text form, for a person: clean.
        capsys.readouterr()
        assert await asyncio.to_thread(cli.main, ["audit", "--address", address]) == 0
        text = capsys.readouterr().out
        assert "owned by no shard:" in text and "40 machines listed" in text
