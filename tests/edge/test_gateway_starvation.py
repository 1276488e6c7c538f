"""Issue 44, item 2: the roll-up gateway starved by anyone who can reach it. 2 100 Send calls
that sent their headers and never a body (no token, no deadline) held every one of gRPC's 2 000
call slots, and every legitimate roll-up was refused `RESOURCE_EXHAUSTED: Concurrent RPC limit
exceeded` for as long as they stayed open.

Now a call is authenticated from its headers before it holds anything, an authenticated one
holds a slot of its credential's few (gateway.limits.sends_per_cluster) and only until the
receive deadline (gateway.limits.receive_seconds). The gateway runs as `bigfleet gateway` in
its own process (with a Temporal dev server and the shard's workers, tests/edge/test_gateway.py),
the idle calls come from another (tests/edge/idle_streams.py), with the default limits.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from temporalio.testing import WorkflowEnvironment

from bigfleet.deployment import hash_token
from bigfleet.edge.rollup_client import RollupSender
from tests.conftest import eventually
from tests.edge.test_gateway import C, rollup_pb, running
from tests.procs import Proc

ANONYMOUS, WITH_TOKEN = 2000, 40
PER_CLUSTER = 8  # the default of gateway.limits.sends_per_cluster (the gateway runs with them)


def reported(proc: Proc, key: str) -> Any:
    """The idle-stream process's JSON line with `key`, or None (not yet)."""
    for line in proc.log.read_text(errors="replace").splitlines():
        if line.startswith("{") and key in line:
            return json.loads(line)[key]
    return None


async def test_idle_calls_without_a_body_do_not_starve_a_legitimate_cluster(
    dev_env: WorkflowEnvironment, tmp_path: Path
):
    tokens = [{"cluster": c, "sha256": hash_token(f"{c}-secret")} for c in ("web", "batch")]
    async with running(dev_env, tmp_path, {"tokens": tokens}) as fleet:
        # 2 000 calls without credentials and 40 with batch's token (stolen, say), each its
        # headers and no body, from their own process.
        idle = Proc(
            "idle streams",
            [sys.executable, "-m", "tests.edge.idle_streams", "--gateway", fleet.endpoint,
             "--streams", str(ANONYMOUS), "--token-streams", str(WITH_TOKEN),
             "--token", "batch-secret"],
            tmp_path / "idle.log",
        )  # fmt: skip
        idle.start()
        web = RollupSender(fleet.endpoint, token="web-secret")
        try:
            await eventually(lambda: reported(idle, "connected"), lambda n: n is not None,
                             timeout=120, what="the idle calls' headers sent")  # fmt: skip
            # Meanwhile web's roll-ups are taken (before: RESOURCE_EXHAUSTED, every one).
            # A call the transport dropped (CANCELLED, UNAVAILABLE: seen once on a loaded CI
            # machine, its connection closed under it) is sent again, as an operator's sender
            # does; a refusal (RESOURCE_EXHAUSTED, the starvation) fails at once.
            for generation in range(1, 6):
                for attempt in range(3):
                    try:
                        accepted = await web.send_proto(rollup_pb("web", generation, generation))
                        break
                    except grpc.aio.AioRpcError as err:
                        dropped = err.code() in (C.CANCELLED, C.UNAVAILABLE)
                        if not dropped or attempt == 2:
                            raise AssertionError(
                                f"web's roll-up {generation} refused while idle calls are open: "
                                f"{err.code().name}: {err.details()}"
                            ) from None
                assert (accepted.generation, accepted.workflow_id) == (generation, "shard-0")
            await eventually(fleet.shard, lambda s: s["needs"] == {"web": [(5, 1000)]},
                             what="web's last roll-up at its shard")  # fmt: skip

            # Every idle call ended, though none has a deadline: the anonymous ones at once, all
            # but batch's few at once, and those at the receive deadline.
            ended = await eventually(lambda: reported(idle, "ended"), lambda e: e is not None,
                                     timeout=120, what="every idle call ended")  # fmt: skip
        finally:
            idle.stop()
            await web.close()
        details = reported(idle, "details")
        assert "OK" not in ended["anonymous"] and "OK" not in ended["token"], ended
        token = ended["token"]
        assert set(token) <= {"DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "CANCELLED"}, ended
        assert token["DEADLINE_EXCEEDED"] == PER_CLUSTER, ended
        cut = details["token"]["DEADLINE_EXCEEDED"]
        assert "no roll-up received within 10 s" in cut and "receive_seconds" in cut, cut
        assert "gateway.limits.sends_per_cluster" in details["token"]["RESOURCE_EXHAUSTED"]
        assert "no credentials" in details["anonymous"]["UNAUTHENTICATED"]

        # What the gateway says it did with them. gRPC's core sheds some of a burst of calls
        # before they reach the gateway (past 1 000 waiting to be picked up, at random): those
        # the sender sees CANCELLED, and nothing counts them.
        anonymous = ended["anonymous"]
        assert set(anonymous) <= {"UNAUTHENTICATED", "CANCELLED"}, ended
        assert sum(anonymous.values()) == ANONYMOUS and sum(token.values()) == WITH_TOKEN
        status, metrics = fleet.get("/metrics", fleet.metrics_port)
        assert status == 200
        for outcome, count in [("accepted", 5), ("unauthenticated", anonymous["UNAUTHENTICATED"]),
                               ("over_limit", token["RESOURCE_EXHAUSTED"]),
                               ("no_request", PER_CLUSTER)]:  # fmt: skip
            line = f'bigfleet_gateway_rollups_total{{outcome="{outcome}"}} {count}.0'
            assert line in metrics, [m for m in metrics.splitlines() if "rollups_total{" in m]
        # ... and its log did not take a line for each (a flood of its own).
        logged = fleet.proc.log.read_text().count("refused a roll-up (unauthenticated)")
        assert 1 <= logged <= 10, logged


# ---- the limits, in this process (a stand-in for Temporal) ------------------------------------


def _limited_dep(limits: dict[str, Any]) -> Any:
    from bigfleet.deployment import Deployment
    from bigfleet.models import from_wire

    return from_wire(Deployment, {
        "name": "gw", "providers": [{"name": "dc", "endpoint": "127.0.0.1:1"}],
        "operators": {"template": "op-{cluster}:50061"},
        "gateway": {"listen": "127.0.0.1:0", **({"limits": limits} if limits else {}), "tokens": [
            {"cluster": c, "sha256": hash_token(f"{c}-secret")} for c in CLUSTERS]},
    })  # fmt: skip


CLUSTERS = ("web", "batch", "new")


async def _deliver(cluster: str, rollup: dict[str, Any]) -> tuple[int, str]:
    return 0, "shard-0"


def _connection(endpoint: str) -> grpc.aio.Channel:
    """A channel with a connection of its own."""
    return grpc.aio.insecure_channel(endpoint, options=[("grpc.use_local_subchannel_pool", 1)])


async def _send(channel: grpc.aio.Channel, cluster: str, generation: int) -> Any:
    from bigfleet.v1 import rollups_pb2_grpc as rpg

    return await rpg.RollupsStub(channel).Send(
        rollup_pb(cluster, generation, 1), timeout=30,
        metadata=(("authorization", f"Bearer {cluster}-secret"),),
    )  # fmt: skip


async def _refused(channel: grpc.aio.Channel, cluster: str, generation: int) -> Any:
    try:
        await _send(channel, cluster, generation)
    except grpc.aio.AioRpcError as err:
        return err
    raise AssertionError(f"{cluster}'s roll-up {generation} was accepted")


async def test_an_authenticated_sender_holds_only_its_share_of_the_gateway():
    """Per credential, per peer address, connections per address, in all; a slot is given back
    when its call ends; an idle call is cut at the receive deadline, an anonymous one at once
    (it holds nothing)."""
    from tests.edge.idle_streams import hold
    from workers.gateway import TokenTable, start_gateway

    dep = _limited_dep({"sends_per_cluster": 2, "sends_per_address": 4,
                        "connections_per_address": 2, "sends": 5})  # fmt: skip
    server = await start_gateway(dep, TokenTable.load(dep), _deliver)
    assert server.service is not None
    slots = server.service.slots
    endpoint = f"127.0.0.1:{server.port}"
    a, b, c = _connection(endpoint), _connection(endpoint), _connection(endpoint)
    held: list[Any] = []

    async def idle(channel: grpc.aio.Channel, token: str | None, total: int) -> None:
        held.append(hold(channel, token))
        await eventually(lambda: slots.total, lambda n: n == total, what=f"{total} held")

    try:
        anonymous = [hold(a, None) for _ in range(20)]
        for call in anonymous:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            assert err.value.code() == C.UNAUTHENTICATED
        assert slots.total == 0
        await idle(a, "web-secret", 1)
        await idle(a, "web-secret", 2)
        web = await _refused(a, "web", 1)
        assert web.code() == C.RESOURCE_EXHAUSTED
        assert "gateway.limits.sends_per_cluster" in web.details() and "'web'" in web.details()
        await idle(b, "batch-secret", 3)  # a second connection
        third = await _refused(c, "batch", 1)  # a third
        assert "gateway.limits.connections_per_address" in third.details(), third.details()
        assert (await _send(b, "batch", 2)).generation == 2  # 4 in flight: at the limit
        await idle(b, "batch-secret", 4)
        address = await _refused(b, "new", 1)
        assert "gateway.limits.sends_per_address" in address.details(), address.details()
        assert "'127.0.0.1'" in address.details()
        # Ending web's calls gives their slots back.
        for call in held[:2]:
            call.cancel()
        await eventually(lambda: slots.total, lambda n: n == 2, what="web's slots back")
        assert (await _send(a, "web", 3)).generation == 3
        assert (slots.per_credential, slots.per_address) == ({"batch": 2}, {"127.0.0.1": 2})
    finally:
        for call in held:
            call.cancel()
        for ch in (a, b, c):
            await ch.close()
        await server.stop(0)

    # In all: `sends` (here 1), whoever asks; and the receive deadline ends an idle call.
    dep = _limited_dep({"sends": 1, "receive_seconds": 0.5})
    server = await start_gateway(dep, TokenTable.load(dep), _deliver)
    endpoint = f"127.0.0.1:{server.port}"
    a, b = _connection(endpoint), _connection(endpoint)
    try:
        call = hold(a, "web-secret")
        assert server.service is not None
        await eventually(lambda: server.service.slots.total, lambda n: n == 1)  # type: ignore[union-attr]
        full = await _refused(b, "batch", 1)
        assert full.code() == C.RESOURCE_EXHAUSTED
        assert "gateway.limits.sends" in full.details(), full.details()
        with pytest.raises(grpc.aio.AioRpcError) as cut:
            await call  # (no deadline of its own)
        assert cut.value.code() == C.DEADLINE_EXCEEDED
        assert "no roll-up received within 0.5 s" in (cut.value.details() or "")
        assert (await _send(b, "batch", 2)).generation == 2
    finally:
        for ch in (a, b):
            await ch.close()
        await server.stop(0)


async def test_a_body_that_is_no_rollup_is_refused_naming_what_was_expected():
    from workers.gateway import TokenTable, start_gateway

    dep = _limited_dep({})
    server = await start_gateway(dep, TokenTable.load(dep), _deliver)
    channel = _connection(f"127.0.0.1:{server.port}")
    try:
        send = channel.unary_unary("/bigfleet.v1.Rollups/Send")  # bytes as they are
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await send(b"\xff\xff\xff", timeout=30,
                       metadata=(("authorization", "Bearer web-secret"),))  # fmt: skip
        assert err.value.code() == C.INVALID_ARGUMENT
        assert "not a bigfleet.v1.ClusterCapacityNeeds" in (err.value.details() or "")
        # The slot is given back when the handler returns, which can be just after the client
        # has its answer (seen once on a loaded machine: 1 still held at the assert).
        service = server.service
        assert service is not None
        await eventually(lambda: service.slots.total, lambda n: n == 0, what="the slot back")
    finally:
        await channel.close()
        await server.stop(0)


async def test_the_gateway_closes_a_connection_with_no_call_after_idle_seconds():
    from workers.gateway import TokenTable, start_gateway

    dep = _limited_dep({"idle_seconds": 0.2})
    server = await start_gateway(dep, TokenTable.load(dep), _deliver)
    channel = _connection(f"127.0.0.1:{server.port}")
    try:
        await asyncio.wait_for(channel.channel_ready(), 30)
        # The gateway sends GOAWAY: the client's connection is gone (not a timing bound: the
        # wait fails only if it never happens).
        state = grpc.ChannelConnectivity.READY
        await asyncio.wait_for(channel.wait_for_state_change(state), 60)
        assert channel.get_state() != grpc.ChannelConnectivity.READY
    finally:
        await channel.close()
        await server.stop(0)


def test_a_bad_gateway_limit_is_refused_naming_the_field(tmp_path: Path):
    import yaml

    from bigfleet.deployment import DeploymentError, load

    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump({
        "name": "gw", "providers": [{"name": "dc", "endpoint": "127.0.0.1:1"}],
        "gateway": {"limits": {"receive_seconds": 0, "sends_per_cluster": "many",
                               "streams": 3}},
    }))  # fmt: skip
    with pytest.raises(DeploymentError) as err:
        load(path)
    text = str(err.value)
    for field in ("gateway.limits.receive_seconds", "gateway.limits.sends_per_cluster",
                  "gateway.limits.streams"):  # fmt: skip
        assert f"  {field}: " in text, text


def test_refusals_anyone_can_cause_are_logged_now_and_then_with_a_count(caplog):
    from workers.gateway import RefusalLog

    now = [0.0]
    refusals = RefusalLog(every=10, clock=lambda: now[0])
    with caplog.at_level("WARNING", logger="bigfleet.gateway"):
        for _ in range(1000):
            refusals.log("unauthenticated", "no credentials")
        refusals.log("permission_denied", "web may not send batch's")  # (always logged)
        refusals.log("permission_denied", "web may not send batch's")
        now[0] = 10
        refusals.log("unauthenticated", "no credentials")
    assert [r.getMessage() for r in caplog.records] == [
        "refused a roll-up (unauthenticated): no credentials",
        "refused a roll-up (permission_denied): web may not send batch's",
        "refused a roll-up (permission_denied): web may not send batch's",
        "refused a roll-up (unauthenticated): no credentials (and 999 more since the last "
        "logged)",
    ]
