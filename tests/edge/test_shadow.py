"""Shadow mode (design §13 phase 1, docs/shadow.md): a fleet that decides and records, and calls
no mutating method of any provider.

The reference cloud provider in its own process (`bigfleet provider serve`), a Temporal dev
server, and `bigfleet worker --config` of a deployment config that puts the fleet in shadow
mode. The test plays the existing autoscaler: it creates, configures and deletes machines at the
provider over its gRPC API. What a user checks: the provider's own call log holds the test's
calls and nothing else, no transition workflow ever started, and `bigfleet shadow report`
lists the shadow fleet's decisions next to the changes the test made.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from bigfleet.deployment import ProviderEndpoint
from bigfleet.models import BootstrapBlob, FencingToken, ListFilter, Machine, MachineState
from bigfleet.shadow import change_kinds
from tests.conftest import eventually
from tests.procs import ROOT, Proc, free_port, retrying

S = MachineState
TYPE = "m6i.xlarge"
BIGFLEET = [sys.executable, "-m", "workers.cli"]
FLEET = {
    "name": "shadowed",
    "cycle_seconds": 1,
    "duration_seconds": 1,
    "providers": [
        {
            "name": "cloud",
            "kind": "cloud",
            "region": "us-east-1",
            "api_calls_per_second": 50,
            "create_latency": [1, 1],
            "configure_latency": 1,
            "delete_latency": 1,
            "drain_latency": 1,
            "quota": [
                {
                    "instance_type": TYPE,
                    "zone": "us-east-1a",
                    "capacity_type": "on-demand",
                    "count": 6,
                    "price_per_hour": 0.5,
                }
            ],
        }
    ],
    "clusters": [{"name": "a"}],
}
ROLLUP = {
    "cluster": "a",
    "generation": 1,
    "needs": [
        {
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [TYPE]}
            ],
            "priority": 1000,
            "count": 2,
        }
    ],
}


def test_what_counts_as_a_change_at_the_providers() -> None:
    assert change_kinds(S.SPECULATIVE, None, S.CREATING, None) == ["created"]
    assert change_kinds(S.CREATING, None, S.IDLE, None) == []  # the same create, seen later
    assert change_kinds(S.IDLE, None, S.CONFIGURED, "a") == ["configured"]
    assert change_kinds(S.CONFIGURED, "a", S.CONFIGURED, "b") == ["configured"]
    assert change_kinds(S.CONFIGURED, "a", S.IDLE, None) == ["drained"]
    assert change_kinds(S.IDLE, None, S.DELETING, None) == ["deleted"]
    assert change_kinds(S.DELETING, None, S.SPECULATIVE, None) == []
    # Created, then deleted before a look saw it idle (a loaded shard looks late).
    assert change_kinds(S.CREATING, None, S.SPECULATIVE, None) == ["deleted"]
    assert change_kinds(S.IDLE, None, None, None) == ["deleted"]
    assert change_kinds(S.SPECULATIVE, None, None, None) == ["removed"]
    assert change_kinds(None, None, S.CONFIGURED, "a") == ["appeared", "created", "configured"]


def test_the_record_follows_a_short_cluster_and_crosses_continue_as_new() -> None:
    from bigfleet.inventory import Inventory
    from bigfleet.models import CapacityType, ClusterCapacityNeeds
    from bigfleet.needs import NeedsTable
    from bigfleet.shadow import Baseline, ShadowBook, observed_changes, per_cluster
    from tests.fleet import machine

    od = CapacityType.ON_DEMAND
    inv = Inventory()
    inv.add([machine(f"m{i}", od, S.IDLE, provider="p", price=0.5) for i in range(3)], 0.0)
    needs = NeedsTable(3600.0)
    needs.apply(ClusterCapacityNeeds.model_validate({**ROLLUP, "needs": [
        {**ROLLUP["needs"][0], "requirements": []}]}), 0.0)  # fmt: skip
    book = ShadowBook()
    base = Baseline.of(inv)
    configure = {"kind": "configure", "cluster": "a", "machines": 2, "price_delta": 0.0}
    book.decided(base, inv, needs, [configure], 10.0)  # short, and the shadow covers it at once
    assert book.open == {"a": [10.0, 10.0]}
    assert book.cost == {"actual": 1.5, "would_be": 1.5}
    listed = [("p", machine(f"m{i}", od, S.CONFIGURED, provider="p", cluster="a", price=0.5))
              for i in range(2)]  # fmt: skip
    changes = observed_changes(base, inv, listed, {"p"}, 40.0)
    assert [(c["machine"], c["kinds"]) for c in changes] == [
        ("m0", ["configured"]), ("m1", ["configured"]), ("m2", ["deleted"])]  # fmt: skip
    book.listed(changes, per_cluster(m for _, m in listed)[0], needs, 40.0)
    report = ShadowBook(book.state()).report(0)  # as the next run sees it
    assert report["actual"]["time_to_capacity"] == {"count": 1, "p50": 30.0, "p99": 30.0}
    assert report["would_be"]["time_to_capacity"] == {"count": 1, "p50": 0.0, "p99": 0.0}
    assert report["actual"]["changes"] == {"configured": 2, "deleted": 1}
    assert report["would_be"]["actions"] == {"configure": 1}
    assert report["short_now"] == 0


def test_the_deployment_config_names_the_shards_in_shadow(tmp_path: Path) -> None:
    from bigfleet.deployment import DeploymentError, load

    base = {"name": "f", "shards": 3, "providers": [{"name": "p", "endpoint": "127.0.0.1:1"}]}
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump({**base, "shadow": [0, 2]}))
    dep = load(path)
    assert [dep.shadow_shard(s) for s in range(3)] == [True, False, True]
    path.write_text(yaml.safe_dump({**base, "shadow": True}))
    assert all(load(path).shadow_shard(s) for s in range(3))
    path.write_text(yaml.safe_dump(base))
    assert not any(load(path).shadow_shard(s) for s in range(3))
    path.write_text(yaml.safe_dump({**base, "shadow": [1, 3]}))
    with pytest.raises(DeploymentError, match="shadow.*shard.* 3 do not exist"):
        load(path)


async def test_the_worker_warns_of_a_running_shard_in_the_other_mode(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from workers.verbs.worker import warn_mode_mismatch

    class Handle:
        def __init__(self, shadow: bool) -> None:
            self.shadow = shadow

        async def query(self, name: str) -> dict[str, Any]:
            return {"shard": 0, "shadow": self.shadow}

    class Client:  # shard 1 was started in shadow mode
        def get_workflow_handle(self, wid: str) -> Handle:
            return Handle(wid == "shard-1")

    fleet = SimpleNamespace(shards=2, shadow_shard=lambda shard: False)
    await warn_mode_mismatch(Client(), fleet, shadow=False)
    err = capsys.readouterr().err
    assert "shard 1 runs in shadow mode" in err and "shard 0" not in err, err
    # Clusters left alone (docs/adoption.md): the shards were started with none.
    fleet.unmanaged_clusters = ["legacy"]
    await warn_mode_mismatch(Client(), fleet, shadow=False)
    err = capsys.readouterr().err
    assert "shard 0 leaves 0 cluster(s) alone" in err and "names 1 (unmanaged_clusters)" in err


class Autoscaler:
    """The existing autoscaler: calls the provider directly, with its own keys and token."""

    def __init__(self, port: int) -> None:
        from bigfleet.edge.provider_client import GrpcProvider

        self.provider = GrpcProvider(ProviderEndpoint(name="cloud", endpoint=f"127.0.0.1:{port}"))
        self.seq = 0

    def token(self) -> FencingToken:
        self.seq += 1
        return FencingToken(shard_id=99, shard_epoch=1, seq=self.seq)

    def machines(self) -> dict[str, Machine]:
        return {m.id: m for m in self.provider.list(ListFilter())}


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BIGFLEET, *argv], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )


@pytest.mark.temporal
async def test_a_shadow_fleet_calls_no_mutating_method_and_reports_its_decisions(
    dev_env: Any, tmp_path: Path
) -> None:
    temporal = dev_env.client.service_client.config.target_host
    port = free_port()
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    config = tmp_path / "deployment.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "shadowed",
                "cycle_seconds": 1,
                "shadow": [0],
                "providers": [{"name": "cloud", "endpoint": f"127.0.0.1:{port}"}],
            }
        )
    )
    state = tmp_path / "provider-state"
    provider = Proc(
        "provider",
        [*BIGFLEET, "provider", "serve", "--fleet", str(tmp_path / "fleet.yaml"),
         "--provider", "cloud", "--listen", f"127.0.0.1:{port}", "--state-dir", str(state)],
        tmp_path / "provider.log",
    )  # fmt: skip
    worker = Proc(
        "worker",
        [*BIGFLEET, "worker", "--config", str(config), "--address", temporal,
         "--metrics-port", "0", "--log-level", "warning",
         "--snapshot-dir", str(tmp_path / "snapshots")],
        tmp_path / "worker.log",
    )  # fmt: skip
    client = dev_env.client
    shard = client.get_workflow_handle("shard-0")
    try:
        provider.start()
        await provider.listening(port)
        worker.start()
        await retrying("a's roll-up to shard-0", lambda: shard.signal("rollup", ROLLUP), 90)

        # The shadow decides to serve a's need: creates, recorded, not made.
        report = await eventually(
            lambda: shard.query("shadow_report"),
            lambda r: r["would_be"]["actions"].get("create", 0) >= 1,
            timeout=60,
            what="a would-be create",
        )
        assert {a["cluster"] for a in report["recent_actions"] if a["kind"] == "create"} == {"a"}
        assert report["actual"]["changes"] == {}

        # The existing autoscaler serves it instead: creates three, configures two for a,
        # deletes the third.
        auto = Autoscaler(port)
        slots = sorted(m.id for m in auto.machines().values() if m.state is S.SPECULATIVE)[:3]
        auto.provider.create(slots, auto.token(), key="autoscaler-create")
        await eventually(
            auto.machines,
            lambda ms: all(ms[mid].state is S.IDLE for mid in slots),
            timeout=30,
            what="the autoscaler's machines idle",
        )
        # (Seen by the shadow before the third goes: a machine created and deleted between two
        # of its looks would never have been created, as far as it can tell.)
        await eventually(
            lambda: shard.query("shadow_report"),
            lambda r: r["actual"]["changes"].get("created", 0) >= 3,
            timeout=60,
            what="the three creates in the shadow report",
        )
        blob = BootstrapBlob(user_data=b"#!/bin/sh\necho join a\n", ttl_seconds=600)
        for mid in slots[:2]:
            auto.provider.configure(mid, blob, "a", auto.token(), key=f"autoscaler-cfg-{mid}")
        auto.provider.delete(slots[2], auto.token(), key="autoscaler-delete")
        await eventually(
            auto.machines,
            lambda ms: (
                [ms[m].state for m in slots[:2]] == [S.CONFIGURED] * 2
                and (slots[2] not in ms or ms[slots[2]].state is S.SPECULATIVE)
            ),
            timeout=30,
            what="two configured for a, the third deleted",
        )

        # The shadow saw what happened at the provider, and a's need covered there.
        report = await eventually(
            lambda: shard.query("shadow_report"),
            lambda r: (
                r["actual"]["time_to_capacity"]["count"] >= 1
                and r["actual"]["changes"].get("deleted", 0) >= 1
                # Two machines at $0.50 an hour once the third is gone (deleting, it still costs).
                and r["actual"]["cost_per_hour"] == pytest.approx(1.0)
            ),
            timeout=60,
            what="the autoscaler's changes in the shadow report",
        )
        changes = report["actual"]["changes"]
        assert changes["created"] == 3 and changes["configured"] == 2, report["recent_changes"]
        seen = {c["machine"]: c["kinds"] for c in report["recent_changes"]}
        assert set(slots) <= set(seen), seen
        assert report["would_be"]["time_to_capacity"]["count"] >= 1

        # What a user runs: the provider's call log holds the autoscaler's calls, nothing of
        # the shadow fleet's.
        calls = json.loads(run("provider", "calls", "--state-dir", str(state), "--json").stdout)
        assert calls, "the provider logged no calls"
        assert all(c["key"].startswith("autoscaler-") for c in calls), calls
        assert sorted({c["method"] for c in calls}) == ["Configure", "Create", "Delete"]
        started = client.list_workflows('WorkflowType = "MachineTransition"')
        assert [wf.id async for wf in started] == []

        cli = json.loads(run("shadow", "report", "--address", temporal, "--json").stdout)
        assert [r["shard"] for r in cli] == [0]
        assert cli[0]["would_be"]["actions"]["create"] >= 1
        assert set(slots) <= {c["machine"] for c in cli[0]["recent_changes"]}
        text = run("shadow", "report", "--address", temporal, "--shard", "0").stdout
        assert "WOULD-BE" in text and "time to capacity p50" in text, text
        print(text)  # (shown with -s)
    finally:
        worker.stop()
        provider.stop()
