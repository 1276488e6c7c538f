"""The ClusterOperator edge (issue 11): `bigfleet operator serve` in its own process answers
GenerateBootstrap over mutual TLS with a blob, or a refusal BigFleet reads back as
BootstrapRefused with the operator's reason; the client maps an unreachable operator, a cluster
the server does not serve and a malformed blob to typed errors; and OperatorActivities turns a
missing or unreachable operator into a refused answer (the machine goes back to idle) instead
of an error Temporal would retry, and drops a notification it cannot deliver.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import grpc
import pytest
import yaml
from prometheus_client import REGISTRY

from activities.operators import OperatorActivities
from activities.wire import BootstrapCall
from bigfleet.deployment import OperatorEndpoint, Operators
from bigfleet.edge.convert import WireError
from bigfleet.edge.devca import make_dev_ca
from bigfleet.edge.operator_client import GrpcOperators, OperatorError, OperatorUnreachable
from bigfleet.edge.operator_server import serve_operators
from bigfleet.models import BootstrapBlob, BootstrapRequest, NodeSelectorRequirement, Operator
from bigfleet.operators import KUBELET_VERSION, BootstrapRefused, OperatorUpdate, SimulatedOperator
from bigfleet.v1 import operator_pb2 as opb
from bigfleet.v1 import operator_pb2_grpc as opg
from bigfleet.v1 import provider_pb2 as ppb
from tests.procs import Proc, free_port

BIGFLEET = [sys.executable, "-m", "workers.cli"]
KUBELET = KUBELET_VERSION
FLEET = {
    "name": "ops",
    "duration_seconds": 1,
    "providers": [
        {
            "name": "dc",
            "kind": "bare-metal",
            "racks": [{"rack": "r1", "zone": "z-1", "instance_type": "gpu-8xh100", "count": 1}],
        }
    ],
    "clusters": [{"name": "web", "kubelet_version": "1.33"}, {"name": "old"}],
}


def request(cluster: str, *requirements: NodeSelectorRequirement) -> BootstrapRequest:
    return BootstrapRequest(cluster=cluster, machine_id="m-1", requirements=list(requirements))


def kubelet(*versions: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=KUBELET, operator=Operator.IN, values=list(versions))


def operators(endpoints: dict[str, str], **fields) -> GrpcOperators:
    return GrpcOperators(
        Operators(
            clusters=[OperatorEndpoint(cluster=c, endpoint=e) for c, e in endpoints.items()],
            **fields,
        )
    )


@pytest.fixture
def operator_proc(tmp_path: Path):
    """`bigfleet operator serve` for cluster web over mutual TLS; (port, CA) once it listens."""
    ca = make_dev_ca(tmp_path / "tls", clients=["bigfleet-worker", "web"])
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    port = free_port()
    proc = Proc(
        "operator",
        [*BIGFLEET, "operator", "serve", "--fleet", str(tmp_path / "fleet.yaml"),
         "--cluster", "web", "--listen", f"127.0.0.1:{port}",
         "--tls-cert", str(ca.server.cert), "--tls-key", str(ca.server.key),
         "--tls-client-ca", str(ca.ca), "--tls-client-name", "bigfleet-worker"],
        tmp_path / "operator.log",
    )  # fmt: skip
    proc.start()
    try:
        yield proc, port, ca
    finally:
        proc.stop()


async def test_an_operator_server_in_its_own_process_answers_blobs_and_refusals(operator_proc):
    proc, port, ca = operator_proc
    await proc.listening(port)
    ops = GrpcOperators(
        Operators(
            clusters=[
                OperatorEndpoint(cluster=c, endpoint=f"127.0.0.1:{port}") for c in ("web", "old")
            ],
            tls=ca.client_tls("bigfleet-worker", server_name="localhost"),
        )
    )
    try:
        web = ops.operator("web")
        assert web is not None and web.blocking
        blob = web.generate_bootstrap(request("web", kubelet("1.32")))
        assert blob.user_data.startswith(b"#cloud-config") and blob.ttl_seconds > 0
        assert b"kubelet=1.32" in blob.user_data
        assert ops.operator("web") is web  # cached, one channel per endpoint
        assert ops.operator("nowhere") is None

        # Outside the skew window: BootstrapRefused, with the operator's reason as it said it.
        with pytest.raises(BootstrapRefused) as refused:
            web.generate_bootstrap(request("web", kubelet("1.20")))
        assert str(refused.value).startswith("cluster web refused to bootstrap")
        assert "outside the supported kubelet versions 1.30-1.33" in str(refused.value)
        assert str(refused.value).count("refused to bootstrap") == 1

        # A cluster the server does not serve (a config pointing at the wrong operator).
        old = ops.operator("old")
        assert old is not None
        with pytest.raises(OperatorError) as wrong:
            old.generate_bootstrap(request("old"))
        assert "PERMISSION_DENIED" in str(wrong.value) and "serves: web" in str(wrong.value)
        assert not isinstance(wrong.value, OperatorUnreachable)

        web.notify(OperatorUpdate(cluster="web", available={"gpu-8xh100": 2}))
    finally:
        ops.close()
    proc.stop()
    assert "operator web: available gpu-8xh100 2" in proc.log.read_text()


def test_a_clusters_certificate_may_not_ask_the_operator_for_blobs(operator_proc):
    """The CA signs the clusters' certificates too (for the gateway): with --tls-client-name,
    only BigFleet's workers get bootstrap blobs (join tokens) from an operator."""
    import asyncio

    proc, port, ca = operator_proc
    asyncio.run(proc.listening(port))
    ops = operators({"web": f"127.0.0.1:{port}"}, tls=ca.client_tls("web", "localhost"))
    try:
        with pytest.raises(OperatorError) as denied:
            ops.operator("web").generate_bootstrap(request("web"))  # type: ignore[union-attr]
        assert "PERMISSION_DENIED" in str(denied.value) and "bigfleet-worker" in str(denied.value)
    finally:
        ops.close()


def test_without_a_client_certificate_the_operator_server_is_unreachable(operator_proc):
    """Mutual TLS: a client without BigFleet's certificate never gets an answer."""
    import asyncio

    proc, port, ca = operator_proc
    asyncio.run(proc.listening(port))
    ops = operators({"web": f"127.0.0.1:{port}"}, tls=ca.client_tls(None, "localhost"))
    try:
        with pytest.raises(OperatorUnreachable):
            ops.operator("web").generate_bootstrap(request("web"))  # type: ignore[union-attr]
    finally:
        ops.close()


def test_bad_requests_are_invalid_arguments_naming_the_field():
    server = serve_operators({"web": SimulatedOperator("web", "https://web")}, "127.0.0.1:0")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
            stub = opg.ClusterOperatorStub(ch)
            with pytest.raises(grpc.RpcError) as bad:
                stub.GenerateBootstrap(opb.BootstrapRequest(cluster="web"), timeout=5)
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "machine_id" in bad.value.details()
            with pytest.raises(grpc.RpcError) as bad:
                stub.Notify(
                    opb.OperatorUpdate(cluster="web", reclaims=[opb.Reclaim(grace_seconds=-1)]),
                    timeout=5,
                )
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "reclaims.0" in bad.value.details()
    finally:
        server.stop(0)


def test_notify_keeps_the_last_updates_per_cluster():
    said: list[str] = []
    server = serve_operators(
        {"web": SimulatedOperator("web", "https://web")}, "127.0.0.1:0", keep=3, say=said.append
    )
    ops = operators({"web": f"127.0.0.1:{server.port}"})
    try:
        for n in range(5):
            ops.operator("web").notify(  # type: ignore[union-attr]
                OperatorUpdate(cluster="web", available={"m": n})
            )
        kept = server.service.updates["web"]
        assert [u.available["m"] for u in kept] == [2, 3, 4]
        assert said[-1] == "operator web: available m 4"
    finally:
        ops.close()
        server.stop(0)


class _BadBlobs(opg.ClusterOperatorServicer):
    def GenerateBootstrap(self, request, context):  # noqa: N802
        return ppb.BootstrapBlob(user_data=b"x", ttl_seconds=0)


def test_a_malformed_blob_is_a_wire_error_naming_the_field():
    from concurrent import futures

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    opg.add_ClusterOperatorServicer_to_server(_BadBlobs(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    ops = operators({"web": f"127.0.0.1:{port}"})
    try:
        with pytest.raises(WireError) as bad:
            ops.operator("web").generate_bootstrap(request("web"))  # type: ignore[union-attr]
        assert bad.value.field == "blob.ttl_seconds"
    finally:
        ops.close()
        server.stop(0)


# ---- the activities ---------------------------------------------------------------------------


def call(cluster: str) -> BootstrapCall:
    return BootstrapCall(cluster=cluster, machine_id="m-1", requirements=[])


async def test_an_unreachable_or_missing_operator_is_a_refused_answer_not_an_error():
    dead = free_port()  # nothing listens there
    ops = operators({"web": f"127.0.0.1:{dead}"}, deadline_seconds=2)
    acts = OperatorActivities(ops.operator, retry_pause=0.05)

    def counted(cluster: str, outcome: str) -> float:
        labels = {"cluster": cluster, "outcome": outcome}
        return REGISTRY.get_sample_value("bigfleet_bootstraps_total", labels) or 0.0

    before = counted("web", "unreachable"), counted("unknown", "no_operator")
    try:
        answer = await acts.generate_bootstrap(call("web"))
        assert answer.refused is not None and not answer.user_data
        assert answer.refused.startswith(f"operator of cluster web unreachable at 127.0.0.1:{dead}")

        missing = await acts.generate_bootstrap(call("batch"))
        assert missing.refused == (
            "no operator endpoint for cluster batch in the deployment config"
        )
        assert (counted("web", "unreachable"), counted("unknown", "no_operator")) == (
            before[0] + 1, before[1] + 1
        )

        # Notifications are advisory: dropped, not raised (the shard would retry them).
        assert await acts.notify(OperatorUpdate(cluster="web")) is None
        assert await acts.notify(OperatorUpdate(cluster="batch")) is None
    finally:
        ops.close()


async def test_a_refusal_comes_back_as_the_operators_reason():
    server = serve_operators(
        {"web": SimulatedOperator("web", "https://web", kubelet_version="1.33")}, "127.0.0.1:0",
        say=None,
    )
    ops = operators({"web": f"127.0.0.1:{server.port}"})
    acts = OperatorActivities(ops)
    try:
        no = await acts.generate_bootstrap(
            BootstrapCall(cluster="web", machine_id="m-1", requirements=[kubelet("1.20")])
        )
        assert no.refused is not None and "outside the supported kubelet versions" in no.refused
        yes = await acts.generate_bootstrap(call("web"))
        assert yes.refused is None and yes.user_data.startswith(b"#cloud-config")
    finally:
        ops.close()
        server.stop(0)


class _Blocking:
    blocking = True

    def __init__(self) -> None:
        self.threads: list[str] = []

    def generate_bootstrap(self, request: BootstrapRequest) -> BootstrapBlob:
        self.threads.append(threading.current_thread().name)
        return BootstrapBlob(user_data=b"ok", ttl_seconds=60)

    def notify(self, update: OperatorUpdate) -> None:
        self.threads.append(threading.current_thread().name)


async def test_a_mapping_of_operators_still_works_and_blocking_ones_run_off_the_loop():
    op = _Blocking()
    acts = OperatorActivities({"web": op})
    answer = await acts.generate_bootstrap(call("web"))
    assert answer.user_data == b"ok"
    await acts.notify(OperatorUpdate(cluster="web"))
    main = threading.current_thread().name
    assert len(op.threads) == 2 and main not in op.threads
    missing = await acts.generate_bootstrap(call("batch"))
    assert missing.refused == "no operator for cluster batch in the fleet file"


# ---- in a running fleet -----------------------------------------------------------------------


async def test_a_cluster_whose_operator_is_down_gets_a_shortfall_not_a_stuck_machine(dev_env):
    """The transition of a machine configured for a cluster whose operator does not answer ends
    at once with the machine idle again; the shard shows a shortfall saying why."""
    from bigfleet.models import from_wire
    from bigfleet.simulation.scenario import Scenario
    from tests.conftest import eventually, fleet_workers, query_retrying
    from tests.temporal.test_temporal_coordinator import gpu_fleet, start
    from workers.worker import SimulatedFleet

    client = dev_env.client
    raw = gpu_fleet(1, {"r1": 2}, ["web", "ghost"])
    sim = SimulatedFleet(from_wire(Scenario, raw))
    dead = free_port()
    remote = operators({"ghost": f"127.0.0.1:{dead}"}, deadline_seconds=2)
    simulated = dict(sim.operators)
    # web's operator in this process; ghost's over gRPC, where nothing listens.
    sim.operators = lambda c: simulated[c] if c == "web" else remote.operator(c)  # type: ignore
    need = {"requirements": [], "priority": 5, "count": 1}
    try:
        async with fleet_workers(client, sim):
            await start(client, raw)
            shard = client.get_workflow_handle("shard-0")
            for cluster in ("ghost", "web"):
                await shard.signal("rollup", {"cluster": cluster, "generation": 1, "needs": [need]})

            def short(st):
                return [s["profile"] for s in st["shortfalls"] if s["cluster"] == "ghost"]

            st = await eventually(
                lambda: shard.query("status"),
                lambda st: short(st) and st["machines"]["CONFIGURED"] == 1
                and st["machines"]["CONFIGURING"] == 0,
                timeout=60,
                what="ghost's shortfall, web's machine configured",
            )
            (profile,) = short(st)
            assert profile.startswith("refused by operator: operator of cluster ghost unreachable")
            assert f"127.0.0.1:{dead}" in profile
            assert (await query_retrying(lambda: shard.query("cluster", "ghost")))["upcoming"] == []
    finally:
        remote.close()
