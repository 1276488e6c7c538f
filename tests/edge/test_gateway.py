"""The roll-up gateway (issue 11): `bigfleet gateway` in its own process, against a real Temporal
dev server with the shard workers running (in this process, simulated providers).

A roll-up with its cluster's token is accepted and reaches the cluster's shard; without
credentials, with a wrong token, for another cluster, with a bad field, or for a cluster with
no operator endpoint it is refused with the status and reason the contract names, and the shard
sees nothing of it. With mutual TLS, the client certificate names the cluster: a cluster's
certificate cannot send another cluster's roll-up. `bigfleet rollup send` goes through the
gateway and exits 2 for an invalid roll-up, 1 for any other refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from temporalio.testing import WorkflowEnvironment

from bigfleet.deployment import hash_token
from bigfleet.edge.convert import WireError, rollup_from_proto, rollup_to_proto
from bigfleet.edge.devca import DevCA, make_dev_ca
from bigfleet.edge.errors import error_info
from bigfleet.edge.rollup_client import RollupSender
from bigfleet.models import ClusterCapacityNeeds, from_wire
from bigfleet.v1 import machine_pb2 as mpb
from bigfleet.v1 import rollups_pb2 as rpb
from tests.conftest import eventually, fleet_workers, query_retrying
from tests.procs import ROOT, Proc, free_port
from tests.temporal.test_temporal_coordinator import gpu_fleet, start

BIGFLEET = [sys.executable, "-m", "workers.cli"]
GPU = "gpu-8xh100"
C = grpc.StatusCode


def need_pb(count: int, priority: int = 1000) -> rpb.CapacityNeed:
    pb = rpb.CapacityNeed(priority=priority, count=count)
    pb.requirements.add(key="node.kubernetes.io/instance-type", operator="In", values=[GPU])
    return pb


def rollup_pb(cluster: str, generation: int, count: int) -> rpb.ClusterCapacityNeeds:
    return rpb.ClusterCapacityNeeds(
        cluster=cluster, generation=generation, needs=[need_pb(count)]
    )


class Fleet:
    """A Temporal dev server, the fleet's workers and shard, and a gateway process."""

    def __init__(self, env: WorkflowEnvironment, tmp: Path, gateway: dict[str, Any]) -> None:
        self.client = env.client
        self.tmp = tmp
        self.port, self.health_port, self.metrics_port = free_port(), free_port(), free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        config = {
            "name": "gw",
            "shards": 1,
            "providers": [{"name": "dc", "endpoint": "127.0.0.1:1"}],  # the gateway calls none
            "operators": {
                "clusters": [
                    {"cluster": c, "endpoint": "127.0.0.1:1"} for c in ("web", "batch")
                ],
            },
            "gateway": {"listen": self.endpoint, **gateway},
        }
        self.config = tmp / "deployment.yaml"
        self.config.write_text(yaml.safe_dump(config))
        temporal = self.client.service_client.config.target_host
        self.proc = Proc(
            "gateway",
            [*BIGFLEET, "gateway", "--config", str(self.config), "--address", temporal,
             "--health-port", str(self.health_port), "--metrics-port", str(self.metrics_port),
             "--http-host", "127.0.0.1"],
            tmp / "gateway.log",
        )  # fmt: skip

    async def shard(self) -> dict[str, Any]:
        shard = self.client.get_workflow_handle("shard-0")
        status = await query_retrying(lambda: shard.query("status"))
        needs = {}
        for cluster in status["clusters"]:
            view = await query_retrying(lambda c=cluster: shard.query("cluster", c))
            needs[cluster] = [(n["count"], n["priority"]) for n in view["needs"]]
        return {"needs": needs, "rejections": status["rejections"]}

    async def assigned(self) -> dict[str, int]:
        coordinator = self.client.get_workflow_handle("coordinator")
        return (await query_retrying(lambda: coordinator.query("status")))["clusters"]

    def get(self, path: str, port: int | None = None) -> tuple[int, str]:
        url = f"http://127.0.0.1:{port or self.health_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except OSError as err:  # not listening yet
            return 0, str(err)

    async def rollup_send(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """`bigfleet rollup send ... --gateway`, off the event loop (the workers run on it)."""
        return await asyncio.to_thread(
            subprocess.run,
            [*BIGFLEET, "rollup", "send", *argv, "--gateway", self.endpoint],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip


@contextlib.asynccontextmanager
async def running(
    env: WorkflowEnvironment, tmp: Path, gateway: dict[str, Any]
) -> AsyncIterator[Fleet]:
    raw = gpu_fleet(1, {"r1": 2}, ["web", "batch", "ghost"])
    fleet = Fleet(env, tmp, gateway)
    async with fleet_workers(env.client, raw):
        await start(env.client, raw)
        fleet.proc.start()
        try:
            await fleet.proc.listening(fleet.port)
            await eventually(
                lambda: fleet.get("/readyz")[0], lambda code: code == 200, what="gateway ready"
            )
            yield fleet
        finally:
            fleet.proc.stop()


async def refused(sender: RollupSender, pb: rpb.ClusterCapacityNeeds) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        await sender.send_proto(pb)
    return err.value


async def test_the_gateway_lets_a_cluster_send_only_its_own_valid_rollups(
    dev_env: WorkflowEnvironment, tmp_path: Path
):
    (tmp_path / "batch.token").write_text("batch-secret\n")
    tokens = [
        {"cluster": "web", "sha256": hash_token("web-secret")},
        {"cluster": "batch", "file": "batch.token"},
        {"cluster": "ghost", "sha256": hash_token("ghost-secret")},  # no operator endpoint
    ]
    async with running(dev_env, tmp_path, {"tokens": tokens}) as fleet:
        web = RollupSender(fleet.endpoint, token="web-secret")
        accepted = await web.send_proto(rollup_pb("web", 10, 2))
        assert (accepted.shard, accepted.generation, accepted.workflow_id) == (0, 10, "shard-0")
        before = await eventually(
            fleet.shard, lambda s: s["needs"] == {"web": [(2, 1000)]}, what="web's needs"
        )
        assert before["rejections"] == []

        # Each refusal: its status, a reason naming what is wrong, and nothing signalled.
        nobody = await refused(RollupSender(fleet.endpoint), rollup_pb("web", 11, 5))
        assert nobody.code() == C.UNAUTHENTICATED and "no credentials" in nobody.details()

        wrong = await refused(RollupSender(fleet.endpoint, token="guess"), rollup_pb("web", 12, 5))
        assert wrong.code() == C.UNAUTHENTICATED
        assert error_info(wrong).reason == mpb.UNAUTHENTICATED  # type: ignore[union-attr]

        other = await refused(web, rollup_pb("batch", 13, 5))
        assert other.code() == C.PERMISSION_DENIED
        assert "cluster web (token)" in other.details() and "'batch'" in other.details()

        stranger = await refused(web, rollup_pb("nobody-knows", 13, 5))
        assert stranger.code() == C.PERMISSION_DENIED
        assert "no token of the gateway's config" in stranger.details()

        bad = rollup_pb("web", 14, 5)
        bad.needs.add(priority=1, count=-1)
        invalid = await refused(web, bad)
        assert invalid.code() == C.INVALID_ARGUMENT and "needs.1.count" in invalid.details()
        assert error_info(invalid).field == "needs.1.count"  # type: ignore[union-attr]

        # Issue 30: generation time.time_ns() (a valid int64) was accepted and froze web
        # (every later roll-up stale, until web aged out and lost its machines). Refused now,
        # naming the field; a stale generation is answered STALE with web's current one (and
        # changes nothing: web's needs stay those of generation 10, see `after`); 1 000 needs
        # (over the shard's limit of a roll-up) are refused before they reach the shard.
        nanos = await refused(web, rollup_pb("web", time.time_ns(), 5))
        assert nanos.code() == C.INVALID_ARGUMENT
        assert error_info(nanos).field == "generation"  # type: ignore[union-attr]
        stale = await refused(web, rollup_pb("web", 9, 5))
        assert stale.code() == C.FAILED_PRECONDITION, stale.details()
        assert error_info(stale).reason == mpb.STALE_GENERATION  # type: ignore[union-attr]
        assert error_info(stale).current_generation == 10  # type: ignore[union-attr]
        too_big = await refused(web, thousand_needs("web", 20))
        assert too_big.code() == C.INVALID_ARGUMENT
        assert error_info(too_big).reason == mpb.ROLLUP_TOO_LARGE  # type: ignore[union-attr]
        assert "at most 256000 bytes" in too_big.details()

        ghost = await refused(RollupSender(fleet.endpoint, token="ghost-secret"),
                              rollup_pb("ghost", 15, 5))  # fmt: skip
        assert ghost.code() == C.FAILED_PRECONDITION
        assert error_info(ghost).reason == mpb.UNKNOWN_CLUSTER  # type: ignore[union-attr]
        assert "no operator endpoint" in ghost.details() and "operators" in ghost.details()

        # Through the command line, with the token in a file: batch's own roll-up goes in.
        path = tmp_path / "batch.yaml"
        raw = {"cluster": "batch", "generation": 3, "needs": [
            {"requirements": [], "priority": 7, "count": 1}]}  # fmt: skip
        path.write_text(yaml.safe_dump(raw))
        sent = await fleet.rollup_send(str(path), "--token-file", str(tmp_path / "batch.token"))
        assert sent.returncode == 0, sent.stderr
        assert "shard 0" in sent.stdout and "through" in sent.stdout

        # ... and a refusal prints the gateway's reason: 1, or 2 for an invalid roll-up.
        path.write_text(yaml.safe_dump({**raw, "cluster": "web", "generation": 16}))
        denied = await fleet.rollup_send(str(path), "--token-file", str(tmp_path / "batch.token"))
        assert denied.returncode == 1
        assert "PERMISSION_DENIED" in denied.stderr and "'web'" in denied.stderr
        path.write_text(yaml.safe_dump({**raw, "generation": 17}))
        (tmp_path / "bad.token").write_text("nope\n")
        unknown = await fleet.rollup_send(str(path), "--token-file", str(tmp_path / "bad.token"))
        assert unknown.returncode == 1 and "UNAUTHENTICATED" in unknown.stderr

        after = await eventually(
            fleet.shard, lambda s: "batch" in s["needs"], what="batch's needs"
        )
        assert after == {"needs": {"web": [(2, 1000)], "batch": [(1, 7)]}, "rejections": []}
        assert sorted(await fleet.assigned()) == ["batch", "web"]
        # The shard refused nothing either (it once refused the 1 000 needs the gateway took).
        handle = fleet.client.get_workflow_handle("shard-0")
        shard = await query_retrying(lambda: handle.query("status"))
        assert shard["rejected_inputs"] == {}
        await web.close()

        status, metrics = fleet.get("/metrics", fleet.metrics_port)
        assert status == 200
        for outcome, count in [("accepted", 2), ("unauthenticated", 3),
                               ("permission_denied", 3), ("invalid_argument", 2),
                               ("unknown_cluster", 1), ("stale", 1), ("too_large", 1),
                               ("unavailable", 0), ("undeliverable", 0)]:  # fmt: skip
            assert f'bigfleet_gateway_rollups_total{{outcome="{outcome}"}} {count}.0' in metrics
        assert fleet.get("/healthz")[0] == 200


async def test_a_gateway_that_never_delivered_for_a_cluster_asks_its_shard(
    dev_env: WorkflowEnvironment, tmp_path: Path
):
    """Issue 30: a restarted gateway (or another replica) knows nothing of web's generation: it
    asks web's shard, and answers a stale roll-up STALE with the shard's generation."""
    tokens = [{"cluster": "web", "sha256": hash_token("web-secret")}]
    async with running(dev_env, tmp_path, {"tokens": tokens}) as fleet:
        web = RollupSender(fleet.endpoint, token="web-secret")
        assert (await web.send_proto(rollup_pb("web", 10, 2))).generation == 10
        await eventually(fleet.shard, lambda s: s["needs"] == {"web": [(2, 1000)]})
        await web.close()
        fleet.proc.stop()
        fleet.proc.start()
        await fleet.proc.listening(fleet.port)
        web = RollupSender(fleet.endpoint, token="web-secret")
        try:
            stale = await refused(web, rollup_pb("web", 9, 5))
            assert stale.code() == C.FAILED_PRECONDITION, stale.details()
            assert error_info(stale).current_generation == 10  # type: ignore[union-attr]
        finally:
            await web.close()


async def test_a_bad_rollup_file_to_the_gateway_exits_2_naming_the_field(tmp_path: Path):
    """The command line checks the file before it connects: nothing listens on the gateway."""
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({"cluster": "web", "needs": [{"priority": 1, "count": -1}]}))
    out = subprocess.run(
        [*BIGFLEET, "rollup", "send", str(path), "--gateway", f"127.0.0.1:{free_port()}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "needs.0.count" in out.stderr


async def test_with_mutual_tls_the_certificate_names_the_cluster(
    dev_env: WorkflowEnvironment, tmp_path: Path
):
    ca: DevCA = make_dev_ca(tmp_path / "tls", clients=["web", "batch"])
    tls = {"cert": str(ca.server.cert), "key": str(ca.server.key), "client_ca": str(ca.ca)}
    async with running(dev_env, tmp_path, {"tls": tls}) as fleet:
        web = RollupSender(fleet.endpoint, ca.client_tls("web"))
        accepted = await web.send_proto(rollup_pb("web", 1, 1))
        assert accepted.workflow_id == "shard-0"
        await eventually(fleet.shard, lambda s: s["needs"] == {"web": [(1, 1000)]})

        # web's certificate, batch's roll-up.
        other = await refused(web, rollup_pb("batch", 2, 4))
        assert other.code() == C.PERMISSION_DENIED
        assert "'web' (client certificate)" in other.details() and "'batch'" in other.details()

        # No client certificate: the handshake itself fails (the gateway requires one).
        anonymous = await refused(
            RollupSender(fleet.endpoint, ca.client_tls(None), deadline_seconds=5),
            rollup_pb("web", 3, 4),
        )
        assert anonymous.code() in (C.UNAVAILABLE, C.DEADLINE_EXCEEDED)

        # batch's own certificate, through the command line (generation 1: had the refused
        # generation 2 gone in, this one would be ignored as older).
        path = tmp_path / "batch.yaml"
        need = {"requirements": [], "priority": 7, "count": 1}
        path.write_text(yaml.safe_dump({"cluster": "batch", "generation": 1, "needs": [need]}))
        paths = ca.clients["batch"]
        sent = await fleet.rollup_send(str(path), "--tls-ca", str(ca.ca), "--tls-cert",
                                 str(paths.cert), "--tls-key", str(paths.key))  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        after = await eventually(fleet.shard, lambda s: "batch" in s["needs"])
        assert after == {"needs": {"web": [(1, 1000)], "batch": [(1, 7)]}, "rejections": []}
        assert sorted(await fleet.assigned()) == ["batch", "web"]
        await web.close()


@pytest.mark.parametrize("credentials", ["tokens", "mutual TLS"])
async def test_operator_serve_plays_its_clusters_rollups_through_the_gateway(
    dev_env: WorkflowEnvironment, tmp_path: Path, credentials: str
):
    """`bigfleet operator serve --gateway`: the fleet file's timeline of web, sent with web's
    token from --token-dir or web's certificate from --tls-dir (as `bigfleet dev` runs it),
    reaches web's shard."""
    scenario = gpu_fleet(1, {"r1": 2}, ["web"])
    scenario["cycle_seconds"] = 0.5
    scenario["clusters"] = [{"name": "web", "rollups": [
        {"at": 0, "needs": [{"requirements": [], "priority": 9, "count": 1}]}]}]  # fmt: skip
    (tmp_path / "ops-fleet.yaml").write_text(yaml.safe_dump(scenario))
    port = free_port()
    argv = [*BIGFLEET, "operator", "serve", "--fleet", str(tmp_path / "ops-fleet.yaml"),
            "--cluster", "web", "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    if credentials == "tokens":
        (tmp_path / "tokens").mkdir()
        (tmp_path / "tokens" / "web").write_text("web-secret\n")
        gateway: dict[str, Any] = {"tokens": [{"cluster": "web", "file": "tokens/web"}]}
        argv += ["--token-dir", str(tmp_path / "tokens")]
    else:
        ca = make_dev_ca(tmp_path / "tls", clients=["web"])
        gateway = {"tls": {"cert": str(ca.server.cert), "key": str(ca.server.key),
                           "client_ca": str(ca.ca)}}  # fmt: skip
        argv += ["--tls-dir", str(ca.directory), "--tls-cert", str(ca.server.cert),
                 "--tls-key", str(ca.server.key)]  # fmt: skip
    async with running(dev_env, tmp_path, gateway) as fleet:
        operator = Proc("operator", [*argv, "--gateway", fleet.endpoint], tmp_path / "op.log")
        operator.start()
        try:
            await operator.listening(port)
            await eventually(fleet.shard, lambda s: s["needs"] == {"web": [(1, 9)]},
                             what="web's timeline at its shard")  # fmt: skip
        finally:
            operator.stop()
        log = operator.log.read_text()
        assert "roll-up web -> shard-0 (via the gateway)" in log, log
        assert "bigfleet operator: stopped" in log, log


# ---- without a server -------------------------------------------------------------------------


class _Handle:
    def __init__(self, client: _Client, wid: str) -> None:
        self.client, self.wid = client, wid

    async def signal(self, name: str, arg: Any) -> None:
        from temporalio.service import RPCError, RPCStatusCode

        if self.wid in self.client.gone:
            raise RPCError("workflow execution already completed", RPCStatusCode.NOT_FOUND, b"")
        self.client.signalled.append((self.wid, name, arg))

    async def query(self, name: str, arg: Any, rpc_timeout: Any = None) -> Any:
        self.client.queried.append((self.wid, name, arg))
        view = self.client.views[self.wid]
        if isinstance(view, Exception):
            raise view
        return view


class _Client:
    def __init__(self, answers: list[int], gone: set[str]) -> None:
        self.answers, self.gone = answers, gone
        self.asked: list[str] = []
        self.signalled: list[tuple[str, str, Any]] = []
        self.queried: list[tuple[str, str, Any]] = []
        self.views: dict[str, Any] = {}

    def get_workflow_handle(self, wid: str) -> _Handle:
        return _Handle(self, wid)

    async def execute_update_with_start_workflow(self, update, cluster, **kw) -> int:
        self.asked.append(cluster)
        return self.answers.pop(0)


async def test_the_gateway_asks_for_a_shard_once_and_again_when_it_is_gone():
    from workers.routing import ShardRouter

    client = _Client(answers=[1, 2], gone=set())
    router = ShardRouter(client, shards=3)
    assert await router("web", {"n": 1}) == (1, "shard-1")
    assert await router("web", {"n": 2}) == (1, "shard-1")
    assert client.asked == ["web"]
    client.gone.add("shard-1")  # merged away: the coordinator names its new shard
    assert await router("web", {"n": 3}) == (2, "shard-2")
    assert client.asked == ["web", "web"]
    # Each roll-up waited alone for its batch (the router's sends are awaited in turn here).
    assert [(w, name, [r["n"] for r in a]) for w, name, a in client.signalled] == [
        ("shard-1", "rollups", [1]), ("shard-1", "rollups", [2]), ("shard-2", "rollups", [3])
    ]


async def test_the_gateway_sends_the_rollups_of_one_shard_together():
    from workers.routing import SEND_BATCH, ShardRouter

    client = _Client(answers=[0, 1, 0, 1, 0, 1], gone=set())
    router = ShardRouter(client, shards=2)
    router.batcher.linger = 0.2
    clusters = [f"c{i}" for i in range(6)]
    first = await asyncio.gather(*(router(c, {"cluster": c}) for c in clusters))
    assert [shard for shard, _ in first] == [0, 1, 0, 1, 0, 1]
    # One signal a shard, with its roll-ups in the order they came.
    assert sorted((w, [r["cluster"] for r in a]) for w, _, a in client.signalled) == [
        ("shard-0", ["c0", "c2", "c4"]), ("shard-1", ["c1", "c3", "c5"])
    ]
    # A full batch goes at once; the rest waits for the linger.
    client.signalled.clear()
    many = [{"cluster": "c0", "n": i} for i in range(SEND_BATCH + 1)]
    await asyncio.gather(*(router("c0", r) for r in many))
    assert [len(a) for _, _, a in client.signalled] == [SEND_BATCH, 1]
    # A shard gone fails its senders' batch; each asks the coordinator again and is delivered.
    client.signalled.clear()
    client.gone.add("shard-0")
    client.answers[:] = [1]
    assert await router("c0", {"cluster": "c0"}) == (1, "shard-1")


def test_rollup_send_needs_a_gateway_or_direct_and_not_both(tmp_path: Path, capsys):
    from workers.cli import main

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({"cluster": "web", "generation": 1, "needs": []}))
    assert main(["rollup", "send", str(path)]) == 2
    assert "--gateway HOST:PORT" in capsys.readouterr().err
    assert main(["rollup", "send", str(path), "--direct", "--gateway", "127.0.0.1:1"]) == 2
    assert "--gateway do not apply" in capsys.readouterr().err
    assert main(["rollup", "send", str(path), "--gateway", "127.0.0.1:1", "--shard", "1"]) == 2
    assert "--shard: only with --direct" in capsys.readouterr().err
    missing = str(tmp_path / "nope")
    assert main(["rollup", "send", str(path), "--gateway", "127.0.0.1:1",
                 "--token-file", missing]) == 2  # fmt: skip
    assert "--token-file: no such file" in capsys.readouterr().err


def test_a_rollups_disruption_crosses_the_wire_and_back_unchanged():
    """A roll-up's budgets (a scheduled one, one for some reasons) and do-not-disrupt marks
    come back from their proto form as they went; a roll-up without them has none."""
    rollup = from_wire(ClusterCapacityNeeds, {
        "cluster": "web", "generation": 42,
        "needs": [{"requirements": [], "priority": 7, "count": 1}],
        "health": {"machine_ids": ["od-0042"]},
        "disruption": {
            "budgets": [
                {"machines": "10%"},
                {"machines": "0", "schedule": "0 9 * * mon-fri", "duration_seconds": 28800},
                {"machines": "3", "reasons": ["consolidation", "excess"]},
            ],
            "do_not_disrupt": [{"machine_id": "od-0042", "until": 1796724000.5}],
        },
    })  # fmt: skip
    pb = rpb.ClusterCapacityNeeds.FromString(rollup_to_proto(rollup).SerializeToString())
    assert pb.HasField("disruption")
    assert [b.schedule for b in pb.disruption.budgets] == ["", "0 9 * * mon-fri", ""]
    assert list(pb.disruption.budgets[2].reasons) == ["consolidation", "excess"]
    assert rollup_from_proto(pb) == rollup
    plain = rollup.model_copy(update={"disruption": None})
    assert not rollup_to_proto(plain).HasField("disruption")
    assert rollup_from_proto(rollup_to_proto(plain)).disruption is None


B0 = "disruption.budgets.0"
BOTH = "schedule and duration_seconds: give both or neither"


@pytest.mark.parametrize(
    ("budget", "field", "says"),
    [
        ({"machines": "ten"}, f"{B0}.machines", "should match pattern"),
        ({"machines": "101%"}, f"{B0}.machines", "101% is over 100%"),
        ({"machines": "1", "reasons": ["whim"]}, f"{B0}.reasons.0", "'consolidation'"),
        ({"machines": "1", "schedule": "0 9 * * *"}, B0, BOTH),
        ({"machines": "1", "duration_seconds": 60}, B0, BOTH),
        ({"machines": "1", "schedule": "0 25 * * *", "duration_seconds": 60},
         f"{B0}.schedule", "hour: 25 is not in 0-23"),
        ({"machines": "1", "schedule": "@daily", "duration_seconds": -1},
         f"{B0}.duration_seconds", "greater than 0"),
    ],
)  # fmt: skip
def test_a_malformed_disruption_budget_is_refused_naming_the_field(budget, field, says):
    """The whole roll-up is refused, naming the budget's field (the gateway's INVALID_FIELD):
    an empty schedule and a zero duration are unset, so a schedule alone has no duration."""
    pb = rollup_pb("web", 1, 1)
    pb.disruption.budgets.add(**budget)
    with pytest.raises(ValueError) as err:
        rollup_from_proto(pb)
    assert isinstance(err.value, WireError) and err.value.field == field
    assert f"{field}: " in str(err.value) and says in str(err.value)


def test_a_do_not_disrupt_mark_without_a_number_is_refused_naming_the_field():
    pb = rollup_pb("web", 1, 1)
    pb.disruption.do_not_disrupt.add(machine_id="od-0042", until=float("nan"))
    with pytest.raises(WireError) as err:
        rollup_from_proto(pb)
    assert err.value.field == "disruption.do_not_disrupt.0.until"


async def test_an_oversized_rollup_is_refused_before_it_is_read_and_health_is_served():
    """In this process, with a stand-in for Temporal: a roll-up over 1 MB never reaches the
    service; grpc.health.v1 answers SERVING."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from bigfleet.deployment import Deployment
    from bigfleet.models import from_wire
    from workers.gateway import TokenTable, start_gateway

    dep = from_wire(Deployment, {
        "name": "gw", "providers": [{"name": "dc", "endpoint": "127.0.0.1:1"}],
        "operators": {"template": "op-{cluster}:50061"},
        "gateway": {"listen": "127.0.0.1:0", "tokens": [
            {"cluster": "web", "sha256": hash_token("t")}]},
    })  # fmt: skip
    delivered: list[dict[str, Any]] = []

    async def deliver(cluster: str, rollup: dict[str, Any]) -> tuple[int, str]:
        delivered.append(rollup)
        return 3, "shard-3"

    server = await start_gateway(dep, TokenTable.load(dep), deliver)
    endpoint = f"127.0.0.1:{server.port}"
    sender = RollupSender(endpoint, token="t")
    try:
        huge = rollup_pb("web", 1, 1)
        huge.needs[0].requirements[0].values.extend(["x" * 1000] * 1100)
        too_big = await refused(sender, huge)
        assert too_big.code() == C.RESOURCE_EXHAUSTED
        ok = await sender.send_proto(rollup_pb("web", 2, 1))
        assert (ok.shard, ok.workflow_id) == (3, "shard-3")
        assert [r["generation"] for r in delivered] == [2]
        async with grpc.aio.insecure_channel(endpoint) as ch:
            check = health_pb2_grpc.HealthStub(ch).Check
            for service in ("", "bigfleet.v1.Rollups"):
                answer = await check(health_pb2.HealthCheckRequest(service=service))
                assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await sender.close()
        await server.stop(0)


# ---- generations and limits, in this process (issue 30, defects 3 and 5) ----------------------


def _dep(clusters: tuple[str, ...] = ("web",)) -> Any:
    from bigfleet.deployment import Deployment
    from bigfleet.models import from_wire

    return from_wire(Deployment, {
        "name": "gw", "providers": [{"name": "dc", "endpoint": "127.0.0.1:1"}],
        "operators": {"template": "op-{cluster}:50061"},
        "gateway": {"listen": "127.0.0.1:0", "tokens": [
            {"cluster": c, "sha256": hash_token(f"{c}-secret")} for c in clusters]},
    })  # fmt: skip


def outcomes() -> dict[str, float]:
    from prometheus_client import REGISTRY

    from workers.gateway import OUTCOMES

    name = "bigfleet_gateway_rollups_total"
    return {o: REGISTRY.get_sample_value(name, {"outcome": o}) or 0.0 for o in OUTCOMES}


@contextlib.asynccontextmanager
async def gateway_here(
    deliver: Any, ask: Any = None, clusters: tuple[str, ...] = ("web",)
) -> AsyncIterator[dict[str, RollupSender]]:
    """A gateway in this process with a stand-in for Temporal: `deliver` and `ask` (the
    generation a cluster's shard holds)."""
    from workers.gateway import TokenTable, start_gateway
    from workers.generations import Generations

    dep = _dep(clusters)
    server = await start_gateway(dep, TokenTable.load(dep), deliver, None, Generations(ask))
    senders = {
        c: RollupSender(f"127.0.0.1:{server.port}", token=f"{c}-secret") for c in clusters
    }
    try:
        yield senders
    finally:
        for s in senders.values():
            await s.close()
        await server.stop(0)


def thousand_needs(cluster: str, generation: int) -> rpb.ClusterCapacityNeeds:
    """Issue 30's roll-up: 1 000 needs, 59 KB as protobuf (gRPC takes up to 1 MB), 302 KB as
    the JSON the shard judges (it takes 256 000 bytes a roll-up)."""
    return rpb.ClusterCapacityNeeds(
        cluster=cluster, generation=generation, needs=[need_pb(1, i) for i in range(1000)]
    )


async def test_the_gateway_refuses_what_the_shard_would_and_says_stale_for_stale():
    """Issue 30: an operator sends generation time.time_ns() (a valid int64), then its normal
    generations; one that restarted its counter sends generations below the last; another
    sends 1 000 needs. Before: each was ACCEPTED (the first froze its cluster, every later one
    was ignored until the cluster aged out and lost its machines; the large one the shard
    refused). Now each answer says what the shard will do."""
    from bigfleet.inputs import SIGNAL_BYTES, json_size
    from bigfleet.models import MAX_GENERATION

    delivered: list[tuple[str, int]] = []

    async def deliver(cluster: str, rollup: dict[str, Any]) -> tuple[int, str]:
        assert json_size(rollup) <= SIGNAL_BYTES
        delivered.append((cluster, rollup["generation"]))
        return 0, "shard-0"

    shard_holds = {"batch": 500, "new": -1}

    async def ask(cluster: str) -> int | None:
        return shard_holds.get(cluster)

    before = outcomes()
    async with gateway_here(deliver, ask, ("web", "batch", "new")) as send:
        web = send["web"]
        # (MAX_GENERATION itself: ahead of the clock, issue 44.)
        for generation in (time.time_ns(), 2**63 - 1, MAX_GENERATION + 1, MAX_GENERATION):
            err = await refused(web, rollup_pb("web", generation, 1))
            assert err.code() == C.INVALID_ARGUMENT, err.details()
            info = error_info(err)
            assert info is not None and info.reason == mpb.INVALID_FIELD
            assert info.field == "generation" and "9007199254740991" in err.details()
        assert delivered == []

        # Then the operator's normal generations. Its counter restarts: a repeated or older
        # generation is delivered (it keeps the cluster alive at its shard) but answered
        # STALE, naming the current one to jump above.
        assert (await web.send_proto(rollup_pb("web", 10, 1))).generation == 10
        assert (await web.send_proto(rollup_pb("web", 11, 1))).generation == 11
        stale = await refused(web, rollup_pb("web", 5, 1))
        assert stale.code() == C.FAILED_PRECONDITION
        info = error_info(stale)
        assert info is not None and info.reason == mpb.STALE_GENERATION
        assert info.current_generation == 11 and info.field == "generation"
        assert "above 11" in stale.details()
        assert (await web.send_proto(rollup_pb("web", 12, 1))).generation == 12
        assert delivered == [("web", 10), ("web", 11), ("web", 5), ("web", 12)]

        # A gateway that never delivered for a cluster asks its shard.
        batch = send["batch"]
        older = await refused(batch, rollup_pb("batch", 499, 1))
        assert error_info(older).current_generation == 500  # type: ignore[union-attr]
        assert (await batch.send_proto(rollup_pb("batch", 501, 1))).generation == 501
        again = await refused(batch, rollup_pb("batch", 501, 1))
        assert error_info(again).current_generation == 501  # type: ignore[union-attr]
        assert (await send["new"].send_proto(rollup_pb("new", 0, 1))).generation == 0

        # 1 000 needs: the shard's limit, named with the size; nothing delivered.
        delivered.clear()
        big = thousand_needs("web", 13)
        assert big.ByteSize() < 100_000
        too_big = await refused(web, big)
        assert too_big.code() == C.INVALID_ARGUMENT, too_big.details()
        info = error_info(too_big)
        assert info is not None and info.reason == mpb.ROLLUP_TOO_LARGE
        assert info.limit_bytes == SIGNAL_BYTES == 256_000 and info.size_bytes > SIGNAL_BYTES
        assert f"{info.size_bytes} bytes" in too_big.details()
        assert f"at most {SIGNAL_BYTES} bytes" in too_big.details()
        assert delivered == []

    after = outcomes()
    counted = {o: after[o] - before[o] for o in after if after[o] != before[o]}
    assert counted == {"invalid_argument": 4, "accepted": 5, "stale": 3, "too_large": 1}


async def test_only_a_delivery_that_may_succeed_later_is_unavailable():
    """Issue 30: a roll-up Temporal refused for good was answered UNAVAILABLE, 'send it
    again'. Now UNAVAILABLE means exactly that; the rest say they will fail again."""
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.exceptions import ApplicationError
    from temporalio.service import RPCError, RPCStatusCode

    S = RPCStatusCode
    failures: list[BaseException] = []

    async def deliver(cluster: str, rollup: dict[str, Any]) -> tuple[int, str]:
        raise failures.pop(0)

    cases = [
        (RPCError("connection refused", S.UNAVAILABLE, b""), C.UNAVAILABLE, "unavailable"),
        (RPCError("deadline", S.DEADLINE_EXCEEDED, b""), C.UNAVAILABLE, "unavailable"),
        (TimeoutError("slow"), C.UNAVAILABLE, "unavailable"),
        (RPCError("Blob data size exceeds limit.", S.INVALID_ARGUMENT, b""),
         C.FAILED_PRECONDITION, "undeliverable"),
        (WorkflowUpdateFailedError(ApplicationError("no room for more (split the fleet)")),
         C.FAILED_PRECONDITION, "undeliverable"),
        (RPCError("Request unauthorized.", S.PERMISSION_DENIED, b""), C.INTERNAL,
         "undeliverable"),
        (RuntimeError("a bug"), C.INTERNAL, "undeliverable"),
    ]  # fmt: skip
    before = outcomes()
    async with gateway_here(deliver) as send:
        for n, (failure, code, _) in enumerate(cases):
            failures.append(failure)
            err = await refused(send["web"], rollup_pb("web", n, 1))
            assert err.code() == code, (failure, err.details())
            assert ("send it again" in err.details()) == (code == C.UNAVAILABLE), err.details()
    after = outcomes()
    assert {o: after[o] - before[o] for o in after if after[o] != before[o]} == {
        "unavailable": 3, "undeliverable": 4
    }


async def test_generations_asks_the_shard_again_only_now_and_then():
    """What the gateway knows of a cluster's generation: the shard's answer, raised by what it
    delivered since; asked again after `every` seconds (another sender may have moved it, or
    the cluster aged out and starts from nothing); bounded."""
    from workers.generations import Generations

    now = [0.0]
    shard = {"web": 7}
    asked: list[str] = []

    async def ask(cluster: str) -> int | None:
        asked.append(cluster)
        return shard.get(cluster)

    g = Generations(ask, every=60, size=2, clock=lambda: now[0])
    assert await g.current("web") == 7
    g.delivered("web", 9)
    g.delivered("web", 8)  # (a stale one delivered: nothing learnt)
    assert await g.current("web") == 9 and asked == ["web"]
    shard["web"] = -1  # it aged out at the shard (or another sender moved it): asked anew
    now[0] = 61
    assert await g.current("web") == -1 and asked == ["web", "web"]
    # A shard that cannot say (its code has no generation, it is reading back its state):
    # what was delivered stands, and it is not asked again at once.
    assert await g.current("nobody") is None
    g.delivered("nobody", 3)
    assert await g.current("nobody") == 3 and asked.count("nobody") == 1
    # Concurrent sends ask once; a delivery made meanwhile is not forgotten.
    gate = asyncio.Event()

    async def slow(cluster: str) -> int | None:
        asked.append(cluster)
        await gate.wait()
        return 4

    h = Generations(slow)
    waiting = [asyncio.create_task(h.current("web")) for _ in range(3)]
    await asyncio.sleep(0)
    h.delivered("web", 5)
    gate.set()
    assert await asyncio.gather(*waiting) == [5, 5, 5] and asked.count("web") == 3
    # Bounded: the clusters least recently sent for are forgotten.
    g.delivered("a", 1)
    assert len(g._known) == 2 and "web" not in g._known


async def test_the_router_asks_the_shard_for_its_generation():
    from temporalio.client import WorkflowQueryFailedError

    from workers.routing import ShardRouter

    client = _Client(answers=[1, 2], gone=set())
    router = ShardRouter(client, shards=3)
    client.views["shard-1"] = {"cluster": "web", "generation": 12, "needs": []}
    assert await router.generation("web") == 12 and client.asked == ["web"]
    client.views["shard-1"] = {"cluster": "web", "needs": []}  # a shard without it
    assert await router.generation("web") is None
    client.views["shard-1"] = WorkflowQueryFailedError("the shard is reading back its state")
    assert await router.generation("web") is None
    assert client.queried == [("shard-1", "cluster", "web")] * 3
