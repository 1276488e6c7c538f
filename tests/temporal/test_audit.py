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

from activities.audit_wire import AuditFinding, AuditHolder, AuditReport
from activities.wire import Instruction, MachinePage
from bigfleet.audit import classify, holdings_page, persisting
from bigfleet.coordinator import Coordinator
from bigfleet.models import FencingToken, MachineState
from bigfleet.shard import Shard
from tests.conftest import eventually, fleet_workers, query_retrying
from tests.fleet import DC, bare_metal, many, on_demand
from tests.temporal.test_shard_restart import one_rack
from tests.temporal.test_temporal_coordinator import ask, machines_of, start, start_coordinator
from workers import cli
from workflows.audit import check_repair, plan_repair
from workflows.sagas import COORDINATOR_ID

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

        # 4. A shard restarted from its last snapshot (none: from scratch) adopts the
        # machines configured for its cluster again (the cluster's home). Orphans: it then
        # gives them up (a disown, as a repair sends one): nobody owns them.
        dead = (await shard1.describe()).run_id
        await shard1.terminate("test: the shard workflow vanished")
        revive = ["shard", "revive", "1", "--from-snapshot", "--address", address]
        assert await asyncio.to_thread(cli.main, revive) == 0
        await eventually(
            shard1.describe,
            lambda d: d.run_id != dead and d.status == WorkflowExecutionStatus.RUNNING,
            timeout=20,
        )
        status = await eventually(
            lambda: shard1.query("status"), lambda s: s["cycles"] >= 2, timeout=20
        )
        assert status["machines"].get("CONFIGURED") == 4, status["machines"]
        code, out = await audit(capsys, address)
        assert code == 0 and kinds(out["report"]) == NONE, out["report"]
        states1 = await query_retrying(lambda: shard1.query("machine_states", ids))
        serving = [m for m, s in states1.items() if s == S.CONFIGURED.value]
        term = (await client.get_workflow_handle(COORDINATOR_ID).query("status"))["term"]
        for seq, machine in enumerate(serving, start=10**9 + 1):  # (one a time: its share)
            let_go = Instruction(term=term, seq=seq, machine_ids=[machine])
            assert await shard1.execute_update("disown", let_go) == [machine]
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


# ---- the pure parts, without a server ---------------------------------------------------------


def test_holdings_pages_cover_the_inventory_and_the_hand_offs_once():
    shard = Shard(0)
    rack = many(bare_metal, 7)
    shard.adopt(rack + many(on_demand, 3), 0)
    shard.handoff["gpu-0100"] = bare_metal(100)  # drained for a transfer, out of the inventory
    seen, cursor, pages = [], 0, 0
    while cursor >= 0:
        rows, cursor = holdings_page(shard, DC, cursor, 3)
        assert len(rows) <= 3
        seen += rows
        pages += 1
    assert sorted(r[0] for r in seen) == sorted([m.id for m in rack] + ["gpu-0100"])
    assert pages == 3  # 3 + 3 + (1 row, then the hand-off)
    assert holdings_page(shard, "nobody", 0, 10) == ([], -1)


def test_classify_tells_discrepancies_from_transitions_in_flight():
    now = 10_000.0
    listed = {
        m.id: m
        for m in [
            bare_metal(1),  # nobody holds it
            bare_metal(2),  # two shards do
            bare_metal(3, S.CONFIGURED, cluster="a"),  # its shard has it for "b"
            bare_metal(4, S.CONFIGURED, cluster="a"),  # configuring at its shard: in flight
            bare_metal(5, S.CONFIGURED, cluster="a"),  # configuring for two hours: stuck
            bare_metal(6),  # the same on both sides
        ]
    }
    held = {
        "gpu-0002": [(0, "IDLE", None, 0), (1, "IDLE", None, 0)],
        "gpu-0003": [(1, "CONFIGURED", "b", 0)],
        "gpu-0004": [(1, "CONFIGURING", "a", int(now) - 60)],
        "gpu-0005": [(1, "CONFIGURING", "a", int(now) - 7200)],
        "gpu-0006": [(0, "IDLE", None, 0)],
        "gpu-0007": [(0, "IDLE", None, 0)],  # no provider lists it
        "od-0001": [(0, "SPECULATIVE", None, 0)],  # a slot the quota dropped: given up soon
    }
    found = classify(listed, held, now)
    assert {k: sorted(v) for k, v in found.items()} == {
        "orphan": ["gpu-0001"],
        "double": ["gpu-0002"],
        "mismatch": ["gpu-0003", "gpu-0005"],
        "unlisted": ["gpu-0007"],
        "in_flight": ["gpu-0004", "od-0001"],
    }
    # A second look that saw the double differently (it moved between pages) drops it.
    again = classify(listed, {**held, "gpu-0002": [(0, "IDLE", None, 0)]}, now + 2)
    assert sorted(persisting(found, again)["double"]) == []
    assert sorted(persisting(found, again)["orphan"]) == ["gpu-0001"]


def test_repair_plan_follows_the_cluster_assignment_then_the_rule():
    c = Coordinator(term=5, shards=[0, 1, 2], clusters={"a": 2})
    configured = bare_metal(1, S.CONFIGURED, cluster="a")
    idle, busy, double = bare_metal(2), bare_metal(3, S.DRAINING, cluster="a"), bare_metal(4)
    shared = bare_metal(5, S.CONFIGURED, cluster="a")
    findings = [
        AuditFinding(kind="orphan", machine_id=configured.id, provider=DC, rule_shard=0),
        AuditFinding(kind="orphan", machine_id=idle.id, provider=DC, rule_shard=1),
        AuditFinding(kind="orphan", machine_id=busy.id, provider=DC, rule_shard=0),
        AuditFinding(
            kind="double", machine_id=double.id, provider=DC, rule_shard=1,
            holders=[AuditHolder(shard=0, state="IDLE"), AuditHolder(shard=1, state="IDLE")],
        ),
        AuditFinding(
            kind="double", machine_id=shared.id, provider=DC, rule_shard=0,
            holders=[AuditHolder(shard=0, state="CONFIGURED", cluster="a"),
                     AuditHolder(shard=2, state="IDLE")],
        ),
        AuditFinding(
            kind="unlisted", machine_id="gpu-0099", provider=DC,
            holders=[AuditHolder(shard=1, state="IDLE")],
        ),
    ]
    report = AuditReport(
        findings=findings,
        machines=MachinePage.of([configured, idle, busy, double, shared]),
    )
    work, skipped = plan_repair(c, report)
    assert {k: [getattr(m, "id", m) for m in v] for k, v in work.items()} == {
        (2, "adopt"): [configured.id],  # the cluster's shard
        (1, "adopt"): [idle.id],  # the rule's shard
        (0, "disown"): [double.id, shared.id],  # the rule's shard keeps it / the cluster's shard
        (2, "observe_records"): [shared.id],  # the keeper had it IDLE
        (1, "disown"): ["gpu-0099"],
    }
    assert skipped == [[busy.id, "DRAINING at its provider: audit again later"]]
    # A machine a saga is moving is the saga's: nobody's between its release and adopt.
    work, skipped = plan_repair(c, report, busy={idle.id})
    assert (1, "adopt") not in work
    assert [idle.id, "in a running saga: audit again once it ended"] in skipped
    check_repair(report)
    with pytest.raises(ValueError, match="split or merge"):
        check_repair(report, {"split-0-2-5-7": {}})
    with pytest.raises(ValueError, match="not running"):
        check_repair(report.model_copy(update={"not_running": [1]}))
