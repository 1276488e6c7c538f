"""GrpcProvider and ProviderService in one process (a server on a free port of this test), and the
provider activities' use of them: each refusal comes back as the typed error the activities
branch on, a network failure stays a retryable grpc error, a listing that loops is cut short,
requests are checked field by field before the provider sees them, and the activities pass an
idempotency key and keep a blocking provider off the event loop.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from bigfleet.deployment import ProviderEndpoint
from bigfleet.edge import provider_server
from bigfleet.edge.provider_client import GrpcProvider
from bigfleet.edge.provider_server import ProviderService, WallClock, serve_provider
from bigfleet.models import (
    BootstrapBlob,
    CapacityType,
    FencingToken,
    ListFilter,
    MachineState,
    TransitionAck,
)
from bigfleet.providers import (
    InvalidTransition,
    NotSupported,
    ProviderError,
    ProviderReplyError,
    QuotaExhausted,
    QuotaSpec,
    RackSpec,
    RateLimited,
    SimulatedBareMetalProvider,
    SimulatedCloudProvider,
)
from bigfleet.v1 import provider_pb2 as ppb
from bigfleet.v1 import provider_pb2_grpc
from tests.procs import free_port

S = MachineState
TOKEN = FencingToken(shard_id=1, shard_epoch=1, seq=1)
BLOB = BootstrapBlob(user_data=b"#!boot", ttl_seconds=600)
QUOTA = [
    QuotaSpec(
        instance_type="m6i.xlarge",
        zone="us-east-1a",
        capacity_type=CapacityType.ON_DEMAND,
        count=7,
        price_per_hour=6.0,
    )
]


def endpoint(port: int, name: str = "cloud", deadline: float = 5.0) -> ProviderEndpoint:
    return ProviderEndpoint(name=name, endpoint=f"127.0.0.1:{port}", deadline_seconds=deadline)


@pytest.fixture
def served() -> Iterator[Any]:
    """serve(provider) -> a GrpcProvider talking to it through a real server."""
    running: list[Any] = []

    def serve(provider: Any) -> GrpcProvider:
        server = serve_provider(ProviderService(provider), "127.0.0.1:0")
        client = GrpcProvider(endpoint(server.port, provider.name))
        running.append((server, client))
        return client

    yield serve
    for server, client in running:
        client.close()
        server.stop(0)


def cloud(rate: float = 100.0, burst: float = 50.0) -> SimulatedCloudProvider:
    return SimulatedCloudProvider(
        "cloud", "us-east-1", QUOTA, WallClock(), 1, api_calls_per_second=rate, api_burst=burst
    )


def test_list_pages_through_everything_in_id_order(served, monkeypatch):
    monkeypatch.setattr(provider_server, "DEFAULT_LIST_PAGE", 2)
    p = served(cloud())
    machines = p.list(ListFilter())
    assert [m.id for m in machines] == sorted(m.id for m in machines)
    assert len(machines) == 7
    assert len(p.list(ListFilter(max_results=3))) == 3


def test_refusals_are_the_typed_errors_the_activities_branch_on(served):
    p = served(cloud(rate=0.001, burst=1))
    (m,) = p.list(ListFilter(max_results=1))
    p.create([m.id], TOKEN, key="a")
    with pytest.raises(RateLimited) as throttled:
        p.create([m.id], TOKEN, key="b")  # a new key: the provider is asked, and throttles
    assert throttled.value.retry_after > 100
    assert p.create([m.id], TOKEN, key="a")[0].machine.id == m.id  # a repeat costs no budget

    dc = served(
        SimulatedBareMetalProvider(
            "dc", [RackSpec(rack="r", zone="z-1", instance_type="gpu", count=2)], WallClock(), 1
        )
    )
    (m,) = dc.list(ListFilter(max_results=1))
    with pytest.raises(NotSupported):
        dc.delete(m.id, TOKEN, key="d")
    with pytest.raises(InvalidTransition) as wrong:
        dc.configure(m.id, BLOB, "web", TOKEN, key="c")
    assert wrong.value.state is S.SPECULATIVE
    with pytest.raises(ProviderError, match="grace_seconds"):
        dc.drain(m.id, -1.0, TOKEN, key="e")


def test_a_withdrawn_slot_is_quota_exhausted_with_its_pool_over_the_wire(served):
    provider = cloud()
    p = served(provider)
    before = [m.id for m in p.list(ListFilter())]
    # The quota shrinks behind the server's back: all but one speculative slot go away.
    provider.set_quota("m6i.xlarge", "us-east-1a", CapacityType.ON_DEMAND, 1)
    kept = {m.id for m in p.list(ListFilter())}
    (withdrawn, *_) = [mid for mid in before if mid not in kept]
    with pytest.raises(QuotaExhausted) as gone:
        p.create([withdrawn], TOKEN, key="q")
    assert gone.value.machine_id == withdrawn
    assert gone.value.pool  # the pool the slot belonged to survives the trip
    assert "m6i.xlarge" in gone.value.pool and "us-east-1a" in gone.value.pool
    assert gone.value.provider == "cloud"


def test_an_unreachable_provider_is_a_retryable_grpc_error():
    p = GrpcProvider(endpoint(free_port(), deadline=1.0))
    try:
        with pytest.raises(grpc.RpcError) as err:
            p.get("m-1")
        assert not isinstance(err.value, ProviderError)
        assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    finally:
        p.close()


class Looping(provider_pb2_grpc.CapacityProviderServicer):
    """A List whose page token never changes; a Create that acks the wrong machine."""

    def List(self, request, context):  # noqa: N802
        return ppb.MachineList(next_page_token="again")

    def Create(self, request, context):  # noqa: N802
        acks = ppb.TransitionAcks()
        acks.acks.add().CopyFrom(ppb.TransitionAck(operation_id="op"))
        return acks


def test_a_listing_that_loops_or_an_ack_that_is_missing_is_refused():
    from concurrent import futures

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    provider_pb2_grpc.add_CapacityProviderServicer_to_server(Looping(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    p = GrpcProvider(endpoint(port))
    try:
        with pytest.raises(ProviderReplyError) as loop:
            p.list(ListFilter())
        assert loop.value.fields == ["next_page_token"]
        with pytest.raises(ProviderReplyError) as ack:
            p.create(["a", "b"], TOKEN, key="k")
        assert ack.value.fields == ["acks"]
        with pytest.raises(ProviderReplyError) as no_machine:
            p.create(["a"], TOKEN, key="k")
        assert no_machine.value.fields == ["acks.0.machine"]
    finally:
        p.close()
        server.stop(0)


@pytest.mark.parametrize(
    "request_, field",
    [
        (ppb.CreateRequest(machine_ids=["a"]), "token"),
        (ppb.CreateRequest(token={}), "machine_ids"),
        (ppb.CreateRequest(machine_ids=["a", ""], token={}), "machine_ids.1"),
        (ppb.CreateRequest(machine_ids=["a", "a"], token={}), "machine_ids"),
        (ppb.CreateRequest(machine_ids=["a"], token={"shard_id": -1}), "token.shard_id"),
        (ppb.CreateRequest(machine_ids=["a"], token={}, idempotency_key="k" * 513),
         "idempotency_key"),
        (ppb.ConfigureRequest(machine_id="a", cluster="c", token={}), "blob"),
        (ppb.ConfigureRequest(machine_id="a", cluster="c", token={}, blob={}), "blob.ttl_seconds"),
        (ppb.ConfigureRequest(machine_id="a", token={}, blob={"ttl_seconds": 5}), "cluster"),
        (ppb.DrainRequest(machine_id="a", grace_seconds=float("nan"), token={}), "grace_seconds"),
        (ppb.DeleteRequest(token={}), "machine_id"),
    ],
)  # fmt: skip
def test_a_bad_request_is_invalid_argument_naming_the_field(request_, field):
    from bigfleet.edge.errors import error_info

    server = serve_provider(ProviderService(cloud()), "127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        stub = provider_pb2_grpc.CapacityProviderStub(channel)
        method = getattr(stub, type(request_).__name__.removesuffix("Request"))
        with pytest.raises(grpc.RpcError) as err:
            method(request_, timeout=5)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        info = error_info(err.value)
        assert info is not None and info.field == field, err.value.details()
        log = server.service.store.calls()
        assert log[-1]["outcome"] == "INVALID_FIELD"
    finally:
        channel.close()
        server.stop(0)


def test_the_server_bounds_an_epoch_by_its_clock_and_keeps_only_calls_that_succeed():
    """Issue 30 at the edges of the rule: an epoch up to the server's clock plus the clocks'
    tolerance is taken, one beyond it is INVALID_FIELD token.shard_epoch and kept nowhere; a
    refused call keeps nothing; an epoch a store kept before issue 30 from beyond the clock
    fences nothing and is replaced by the next call that succeeds."""
    from bigfleet.edge.errors import error_info
    from bigfleet.edge.provider_store import ProviderStore
    from bigfleet.epochs import PROVIDER_FUTURE_MS, latest_issued
    from bigfleet.providers import MachineNotFound, StaleFencingToken

    now = time.time()
    latest, real = latest_issued(now), int(now * 1000)
    assert latest == real + PROVIDER_FUTURE_MS
    store = ProviderStore()
    with store.transaction():  # kept by refused calls before issue 30: a year ahead
        for shard in (5, 12):
            store.db.execute("INSERT INTO fences VALUES (?, ?)", (shard, real + 365 * 86_400_000))
    server = serve_provider(ProviderService(cloud(), store, clock=lambda: now), "127.0.0.1:0")
    p = GrpcProvider(endpoint(server.port))
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        a, b, c = [m.id for m in p.list(ListFilter())][:3]

        def token(shard: int, epoch: int) -> FencingToken:
            return FencingToken(shard_id=shard, shard_epoch=epoch, seq=1)

        stub = provider_pb2_grpc.CapacityProviderStub(channel)
        beyond = ppb.CreateRequest(
            machine_ids=[a], token={"shard_id": 6, "shard_epoch": latest + 1}, idempotency_key="k0"
        )
        with pytest.raises(grpc.RpcError) as err:
            stub.Create(beyond, timeout=5)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        info = error_info(err.value)
        assert info is not None and info.field == "token.shard_epoch", err.value.details()
        assert "never issued" in err.value.details()
        with pytest.raises(MachineNotFound):
            p.configure("no-such-machine", BLOB, "web", token(6, latest), key="k1")
        assert store.epoch(6) is None  # neither refusal kept anything
        p.create([a], token(6, latest), key="k2")  # at the bound: taken
        assert store.epoch(6) == latest

        # Shard 5's kept epoch was never issued: its real epoch is taken and replaces it.
        p.create([b], token(5, real), key="k3")
        assert store.epoch(5) == real
        with pytest.raises(StaleFencingToken):
            p.create([c], token(5, real - 1), key="k4")
        outcomes = [(x["key"], x["outcome"]) for x in store.calls()]
        assert outcomes == [
            ("k0", "INVALID_FIELD"),
            ("k1", "NOT_FOUND"),
            ("k2", "started"),
            ("k3", "started"),
            ("k4", "STALE_FENCING_TOKEN"),
        ]
        # A pruning (at start, and every PRUNE_EVERY calls) drops what was never issued, so it
        # cannot start to fence once the clock reaches it.
        store.prune()
        assert (store.epoch(12), store.epoch(5), store.epoch(6)) == (None, real, latest)
    finally:
        channel.close()
        p.close()
        server.stop(0)


# ---- the provider activities ------------------------------------------------------------------


class Recording:
    """A provider that blocks (as GrpcProvider does): which thread ran it, with which key."""

    name = "remote"
    blocking = True

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []
        self.inner = cloud()

    def create(self, machine_ids, token, *, key=""):
        self.seen.append((key, threading.get_ident()))
        return self.inner.create(machine_ids, token, key=key)

    def get(self, machine_id):
        self.seen.append(("get", threading.get_ident()))
        return self.inner.get(machine_id)

    def list(self, filter):
        return self.inner.list(filter)


async def test_the_activities_pass_the_key_and_keep_a_blocking_provider_off_the_loop():
    from temporalio.testing import ActivityEnvironment

    from activities.providers import ProviderActivities
    from activities.wire import ProviderCall, ProviderRead
    from bigfleet.models import Transition

    provider = Recording()
    acts = ProviderActivities({"remote": provider})
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        ActivityEnvironment.default_info(),
        workflow_id="machine-x-create-1-1",
        workflow_run_id="run-1",
        activity_id="3",
    )
    (m,) = provider.inner.list(ListFilter(max_results=1))
    call = ProviderCall(
        provider="remote", transition=Transition.CREATE, machine_ids=[m.id], token=TOKEN, now=0.0
    )
    loop_thread = threading.get_ident()
    for _ in range(2):  # a retry of the same activity: the same key
        machines = await env.run(acts.call, call)
        assert [x.id for x in machines] == [m.id]
    await env.run(acts.get, ProviderRead(provider="remote", machine_ids=[m.id], now=0.0))
    assert [k for k, _ in provider.seen] == ["machine-x-create-1-1/run-1/3"] * 2 + ["get"]
    assert loop_thread not in {t for _, t in provider.seen}


def test_simulated_providers_take_and_ignore_a_key():
    p = cloud()
    (m,) = p.list(ListFilter(max_results=1))
    (first,) = p.create([m.id], TOKEN, key="x")
    (again,) = p.create([m.id], TOKEN, key="y")  # idempotent by (machine, target) anyway
    assert isinstance(first, TransitionAck) and first.operation_id == again.operation_id
    assert p.blocking is False


def test_conformance_reports_whether_throttling_is_resource_exhausted():
    from bigfleet.edge import conformance
    from bigfleet.edge.provider_requests import describe_of

    # A fast cloud that allows one call in 0.2 s: the suite is throttled, waits out each hint,
    # and reports the RATE_LIMITED refusals it saw as a check of their status code.
    p = SimulatedCloudProvider(
        "cloud", "us-east-1", QUOTA, WallClock(), 1, api_calls_per_second=5.0, api_burst=1.0,
        create_latency=(0.1, 0.2), configure_latency=0.1, delete_latency=0.1, drain_latency=0.1,
    )  # fmt: skip
    server = serve_provider(ProviderService(p, info=describe_of(p)), "127.0.0.1:0")
    try:
        checks = conformance.run(f"127.0.0.1:{server.port}", settle_seconds=10.0)
    finally:
        server.stop(0)
    report = conformance.render("throttled", checks)
    assert conformance.passed(checks), report
    (throttled,) = [c for c in checks if c.name == "rate-limited-is-resource-exhausted"]
    assert throttled.result == "pass", report
    assert "RESOURCE_EXHAUSTED" in throttled.detail
