"""The EC2 provider (bigfleet/providers/ec2.py) against moto in server mode: a real HTTP endpoint
in its own process (`python -m moto.server`), started once for the module, that boto3 talks to
over the network. Each test uses its own provider name, so the instances of one are invisible to
the others (every listing is filtered by the `bigfleet:provider` tag).

API calls are counted with a botocore `before-call` hook on the client; EC2's refusals
(InsufficientInstanceCapacity, RequestLimitExceeded) are injected with a `before-send` hook that
answers one operation with EC2's XML error, which botocore then parses as it would EC2's.

moto's limits met here: it ignores RunInstances' ClientToken (a repeat launches again) and
answers a `client-token` filter with a 500, so the provider's idempotency rests on its own
`bigfleet:batch` tag (ClientToken is still sent, for real EC2); instances are running as soon
as they are launched, and stopped as soon as they are stopped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from bigfleet.edge import conformance
from bigfleet.edge.provider_server import ProviderService, serve_provider
from bigfleet.models import BootstrapBlob, FencingToken, ListFilter, MachineState
from bigfleet.providers.base import (
    InvalidTransition,
    QuotaExhausted,
    RateLimited,
    StaleFencingToken,
)
from bigfleet.providers.ec2 import Ec2Config, Ec2Provider
from tests.procs import free_port

S = MachineState
REGION = "us-east-1"
BLOB = BootstrapBlob(user_data=b"#!/bin/sh\necho join cluster-a\n", ttl_seconds=600)
MUTATING = {"RunInstances", "CreateTags", "DeleteTags", "TerminateInstances", "StopInstances",
            "StartInstances", "ModifyInstanceAttribute"}  # fmt: skip


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    try:
        probe = boto3.client("ec2", region_name=REGION, endpoint_url=url)
        deadline = time.monotonic() + 30
        while True:
            try:
                probe.describe_regions()
                break
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server on {url} did not answer") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Hooks:
    """Counts the EC2 calls of one client and answers chosen ones with an EC2 error."""

    def __init__(self, client: Any) -> None:
        self.calls: Counter[str] = Counter()
        self.fail: dict[str, tuple[str, Any]] = {}  # operation -> (code, predicate on params)
        self.failed: Counter[str] = Counter()
        client.meta.events.register("before-call.ec2", self._count)
        client.meta.events.register("before-send.ec2", self._send)
        self._params: dict[str, Any] = {}
        self.hide_instances = False  # DescribeInstances lists nothing (eventual consistency)

    def _count(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        self.calls[model.name] += 1
        self._params[model.name] = params.get("body", {})

    def _send(self, request: Any, **_: Any) -> AWSResponse | None:
        body = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        for op, (code, match) in self.fail.items():
            if f"Action={op}&" in body + "&" and match(body):
                self.failed[op] += 1
                xml = (
                    '<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
                    f"<Code>{code}</Code><Message>injected {code}</Message></Error></Errors>"
                    "<RequestID>injected</RequestID></Response>"
                ).encode()
                return AWSResponse(request.url, 503 if "Limit" in code else 500, {}, _Raw(xml))
        if "Action=DescribeInstances&" in body and self.hide_instances:
            xml = (
                b'<?xml version="1.0" encoding="UTF-8"?><DescribeInstancesResponse '
                b'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r</requestId>'
                b"<reservationSet/></DescribeInstancesResponse>"
            )
            return AWSResponse(request.url, 200, {}, _Raw(xml))
        return None

    def mutating(self) -> int:
        return sum(n for op, n in self.calls.items() if op in MUTATING)


class _Raw:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.data


def make_config(url: str, name: str, **overrides: Any) -> Ec2Config:
    offerings = [
        {"instance_type": "m5.large", "zone": "us-east-1a", "capacity_type": "on-demand",
         "price_per_hour": 0.096, "resources": {"cpu": 2, "memory_gib": 8}, "count": 70},
        {"instance_type": "m5.large", "zone": "us-east-1b", "capacity_type": "spot",
         "price_per_hour": 0.035, "interruption_probability": 0.05,
         "resources": {"cpu": 2, "memory_gib": 8}, "count": 3},
    ]  # fmt: skip
    raw: dict[str, Any] = {
        "name": name,
        "region": REGION,
        "endpoint_url": url,
        "offerings": offerings,
        "image_id": "ami-12c6146b",
        "tags": {"team": "platform"},
        **overrides,
    }
    return Ec2Config.model_validate(raw)


def make(url: str, name: str | None = None, **overrides: Any) -> tuple[Ec2Provider, Hooks]:
    name = name or f"t{uuid.uuid4().hex[:8]}"
    client = boto3.client(
        "ec2",
        region_name=REGION,
        endpoint_url=url,
        config=Config(retries={"mode": "standard", "max_attempts": 1}),
    )
    hooks = Hooks(client)
    return Ec2Provider(make_config(url, name, **overrides), client), hooks


def token(epoch: int = 1, shard: int = 3) -> FencingToken:
    return FencingToken(shard_id=shard, shard_epoch=epoch, seq=1)


def speculative(p: Ec2Provider, zone: str = "us-east-1a") -> list[str]:
    return [m.id for m in p.list(ListFilter(states=[S.SPECULATIVE], zone=zone))]


def test_create_64_in_one_run_instances_and_a_repeat_launches_nothing(moto_url: str) -> None:
    p, hooks = make(moto_url)
    ids = speculative(p)[:64]
    assert len(ids) == 64 and ids[0] == f"{p.name}-m5-large-us-east-1a-on-demand-00000"
    hooks.calls.clear()
    acks = p.create(ids, token(), key="wf-1/run-1/act-1")
    assert hooks.calls["RunInstances"] == 1
    assert [a.machine.id for a in acks] == ids
    assert all(a.machine.state in (S.CREATING, S.IDLE) and a.machine.host for a in acks)
    hosts = {a.machine.host.ref for a in acks if a.machine.host}
    assert len(hosts) == 64
    # The same key again: the same operations, no second launch.
    again = p.create(ids, token(), key="wf-1/run-1/act-1")
    assert hooks.calls["RunInstances"] == 1
    assert [a.operation_id for a in again] == [a.operation_id for a in acks]
    # Quota 70: 6 speculative slots left, the 64 are IDLE (moto runs them at once).
    listed = p.list(ListFilter(zone="us-east-1a"))
    assert sum(m.state is S.SPECULATIVE for m in listed) == 6
    assert sum(m.state is S.IDLE for m in listed) == 64


def test_a_batch_whose_tags_were_lost_is_named_on_retry(moto_url: str) -> None:
    """RunInstances succeeded but the per-instance CreateTags did not: the retry finds the
    instances by their batch tag and names them, launching nothing."""
    p, hooks = make(moto_url)
    ids = speculative(p)[:3]
    hooks.fail["CreateTags"] = ("RequestLimitExceeded", lambda body: True)
    with pytest.raises(RateLimited):
        p.create(ids, token(), key="k-lost-tags")
    assert hooks.calls["RunInstances"] == 1
    del hooks.fail["CreateTags"]
    acks = p.create(ids, token(), key="k-lost-tags")
    assert hooks.calls["RunInstances"] == 1
    assert [a.machine.id for a in acks] == ids
    assert {m.id for m in p.list(ListFilter(states=[S.IDLE]))} == set(ids)


def test_tags_round_trip_a_fresh_provider_rebuilds_the_same_machines(moto_url: str) -> None:
    p, _ = make(moto_url)
    ids = speculative(p)[:2]
    p.create(ids, token(epoch=5), key="k1")
    p.configure(ids[0], BLOB, "cluster-a", token(epoch=5), key="k2")
    before = p.list(ListFilter())
    fresh, hooks = make(moto_url, p.name)
    assert fresh.list(ListFilter()) == before
    by_id = {m.id: m for m in before}
    assert by_id[ids[0]].state is S.CONFIGURED and by_id[ids[0]].cluster == "cluster-a"
    assert by_id[ids[1]].state is S.IDLE and by_id[ids[1]].cluster is None
    assert by_id[ids[0]].host and by_id[ids[0]].host.ref.startswith("i-")
    # The blob reached the instance as its user data.
    attr = fresh.client.describe_instance_attribute(
        InstanceId=by_id[ids[0]].host.ref, Attribute="userData"
    )
    import base64

    assert base64.b64decode(attr["UserData"]["Value"]) == BLOB.user_data
    # The fencing epoch came back from the tags: a fresh provider refuses epoch 4.
    with pytest.raises(StaleFencingToken):
        fresh.drain(ids[0], 0, token(epoch=4))
    assert hooks.mutating() == 0


def test_drain_and_terminate_give_the_slot_back(moto_url: str) -> None:
    now = [1_900_000_000.0]
    p, _ = make(moto_url)
    p._clock = lambda: now[0]
    (mid,) = speculative(p)[:1]
    p.create([mid], token(), key="c")
    p.configure(mid, BLOB, "cluster-a", token(), key="cf")
    ack = p.drain(mid, 60, token(), key="d")
    assert ack.machine.state is S.DRAINING and ack.machine.cluster == "cluster-a"
    now[0] += 61
    assert p.get(mid).state is S.IDLE
    host = p.get(mid).host
    ack = p.delete(mid, token(), key="x")
    assert ack.machine.state in (S.DELETING, S.SPECULATIVE)
    assert p.get(mid).state is S.SPECULATIVE and p.get(mid).host is None
    assert mid in speculative(p)
    # Terminating again is harmless, and the instance is terminated at EC2.
    assert p.delete(mid, token(), key="x2").machine.state is S.SPECULATIVE
    assert host is not None
    reply = p.client.describe_instances(InstanceIds=[host.ref])
    assert reply["Reservations"][0]["Instances"][0]["State"]["Name"] == "terminated"
    with pytest.raises(InvalidTransition):
        p.drain(mid, 0, token())


def test_an_instance_terminated_outside_bigfleet_is_failed_until_deleted(moto_url: str) -> None:
    p, _ = make(moto_url)
    (mid,) = speculative(p, "us-east-1b")[:1]
    (ack,) = p.create([mid], token(), key="c")
    assert ack.machine.capacity_type == "spot"
    assert ack.machine.host is not None
    p.client.terminate_instances(InstanceIds=[ack.machine.host.ref])  # as a spot interruption
    failed = p.get(mid)
    assert failed.state is S.FAILED and "terminated outside BigFleet" in failed.last_error
    assert p.delete(mid, token(), key="d").machine.state is S.SPECULATIVE
    assert mid in speculative(p, "us-east-1b")


def test_insufficient_capacity_takes_the_offering_out_for_a_while(moto_url: str) -> None:
    now = [1_900_000_000.0]
    p, hooks = make(moto_url)
    p._clock = lambda: now[0]
    spot = speculative(p, "us-east-1b")
    hooks.fail["RunInstances"] = (
        "InsufficientInstanceCapacity",
        lambda body: "us-east-1b" in body,
    )
    with pytest.raises(QuotaExhausted) as err:
        p.create(spot[:2], token(), key="ice")
    assert err.value.pool == "m5.large/us-east-1b/spot"
    assert speculative(p, "us-east-1b") == []  # not listed: the engine picks another offering
    assert len(speculative(p, "us-east-1a")) == 70
    calls = hooks.calls["RunInstances"]
    with pytest.raises(QuotaExhausted):
        p.create(spot[:1], token(), key="ice-2")  # refused without asking EC2 again
    assert hooks.calls["RunInstances"] == calls
    (ack,) = p.create(speculative(p, "us-east-1a")[:1], token(), key="fallback")
    assert ack.machine.zone == "us-east-1a"
    now[0] += 181  # Karpenter's 3 minutes have passed
    assert speculative(p, "us-east-1b") == spot


def test_throttling_is_rate_limited_with_a_growing_hint(moto_url: str) -> None:
    p, hooks = make(moto_url)
    ids = speculative(p)[:1]
    hooks.fail["RunInstances"] = ("RequestLimitExceeded", lambda body: True)
    hints = []
    for _ in range(3):
        with pytest.raises(RateLimited) as err:
            p.create(ids, token(), key="throttled")
        hints.append(err.value.retry_after)
    assert hints == [1.0, 2.0, 4.0]
    del hooks.fail["RunInstances"]
    (ack,) = p.create(ids, token(), key="throttled")
    assert ack.machine.state in (S.CREATING, S.IDLE)
    assert hooks.calls["RunInstances"] == 4


def test_a_stale_epoch_is_refused_before_any_call(moto_url: str) -> None:
    p, hooks = make(moto_url)
    ids = speculative(p)[:1]
    p.create(ids, token(epoch=7), key="c")
    hooks.calls.clear()
    with pytest.raises(StaleFencingToken):
        p.create(speculative(p)[:1], token(epoch=6), key="c2")
    with pytest.raises(StaleFencingToken):
        p.delete(ids[0], token(epoch=6))
    assert hooks.calls == Counter({"DescribeInstances": 1})  # the speculative() listing only


def test_account_limit_caps_each_offering(moto_url: str) -> None:
    p, _ = make(moto_url, account_limit=True)  # moto's max-instances is 20
    assert len(speculative(p)) == 20
    assert len(speculative(p, "us-east-1b")) == 3


def test_conformance_over_grpc(moto_url: str) -> None:
    p, _ = make(moto_url)
    server = serve_provider(ProviderService(p), "127.0.0.1:0")
    try:
        checks = conformance.run(f"127.0.0.1:{server.port}", settle_seconds=20.0)
    finally:
        server.stop(0)
    failed = [c for c in checks if c.result == "fail"]
    assert conformance.passed(checks), conformance.render("ec2-on-moto", failed)
    assert {c.name for c in checks if c.result == "skip"} == {"delete-unsupported-is-unimplemented"}


def test_spot_prices_come_from_the_spot_price_history(moto_url: str) -> None:
    p, hooks = make(moto_url)
    found = p.refresh_spot_prices()
    assert list(found) == ["m5.large/us-east-1b/spot"]
    assert hooks.calls["DescribeSpotPriceHistory"] == 1
    (spot,) = p.list(ListFilter(states=[S.SPECULATIVE], zone="us-east-1b"))[:1]
    assert spot.price_per_hour == found["m5.large/us-east-1b/spot"]
    (od,) = p.list(ListFilter(states=[S.SPECULATIVE], zone="us-east-1a"))[:1]
    assert od.price_per_hour == 0.096  # on-demand: the configured price


def test_spot_prices_are_refreshed_on_list_when_due(moto_url: str) -> None:
    p, hooks = make(moto_url, spot_price_seconds=300)
    (spot,) = p.list(ListFilter(states=[S.SPECULATIVE], zone="us-east-1b"))[:1]
    assert hooks.calls["DescribeSpotPriceHistory"] == 1
    assert spot.price_per_hour == p.refresh_spot_prices()["m5.large/us-east-1b/spot"]
    p.list(ListFilter())  # not due again for 300 s
    assert hooks.calls["DescribeSpotPriceHistory"] == 2  # the explicit refresh above only


OPERATOR_CONFIG = """\
name: aws-us-east-1
region: us-east-1
# endpoint_url: https://ec2.us-east-1.amazonaws.com   # default; moto or a VPC endpoint here
image_id: ami-0123456789abcdef0        # an EBS-backed image whose user data joins a cluster
subnets: {us-east-1a: subnet-0aaa, us-east-1b: subnet-0bbb}
security_groups: [sg-0123456789abcdef0]
instance_profile_arn: arn:aws:iam::123456789012:instance-profile/bigfleet-node
tags: {team: platform}
ice_seconds: 180
max_batch: 64
account_limit: false
offerings:
  - {instance_type: m5.2xlarge, zone: us-east-1a, capacity_type: on-demand,
     price_per_hour: 0.384, resources: {cpu: 8, memory_gib: 32}, count: 200}
  - {instance_type: m5.2xlarge, zone: us-east-1b, capacity_type: spot,
     price_per_hour: 0.15, interruption_probability: 0.05,
     resources: {cpu: 8, memory_gib: 32}, count: 400}
  - {instance_type: p5.48xlarge, zone: us-east-1a, capacity_type: on-demand,
     price_per_hour: 98.32, resources: {cpu: 192, memory_gib: 2048, gpu: 8}, count: 16}
"""


def test_an_operator_config_file_loads(tmp_path: Any) -> None:
    from bigfleet.providers.ec2 import load_config

    path = tmp_path / "ec2.yaml"
    path.write_text(OPERATOR_CONFIG)
    config = load_config(path)
    assert len(config.offerings) == 3 and config.subnets["us-east-1b"] == "subnet-0bbb"
    path.write_text(OPERATOR_CONFIG.replace("count: 16", "count: -1"))
    with pytest.raises(ValueError, match="count"):
        load_config(path)


def test_a_blob_lost_in_a_restart_fails_the_configure_and_a_new_one_finishes_it(
    moto_url: str,
) -> None:
    p, hooks = make(moto_url)
    (mid,) = speculative(p)[:1]
    p.create([mid], token(), key="c")
    hooks.fail["ModifyInstanceAttribute"] = ("RequestLimitExceeded", lambda body: True)
    with pytest.raises(RateLimited):
        p.configure(mid, BLOB, "cluster-a", token(), key="cf")  # stopped, blob not delivered
    restarted, _ = make(moto_url, p.name)
    lost = restarted.get(mid)
    assert lost.state is S.FAILED and lost.failed_from is S.CONFIGURING
    assert "blob was lost" in lost.last_error
    ack = restarted.configure(mid, BLOB, "cluster-a", token(), key="cf-2")
    assert ack.machine.state is S.CONFIGURED and ack.machine.cluster == "cluster-a"


def test_an_instance_ec2_cannot_stop_is_not_configured(moto_url: str) -> None:
    """A one-time spot instance cannot be stopped on real EC2 (moto stops it): injected."""
    p, hooks = make(moto_url)
    (mid,) = speculative(p, "us-east-1b")[:1]
    p.create([mid], token(), key="c")
    hooks.fail["StopInstances"] = ("UnsupportedOperation", lambda body: True)
    with pytest.raises(InvalidTransition, match="cannot stop"):
        p.configure(mid, BLOB, "cluster-a", token(), key="cf")
    machine = p.get(mid)
    assert machine.state is S.IDLE and machine.cluster is None


def test_a_launch_ec2_does_not_list_yet_still_holds_its_slot(moto_url: str) -> None:
    """DescribeInstances is eventually consistent: right after RunInstances it may list nothing.
    The launch reply stands in, so the slot is not offered (and launched) twice."""
    p, hooks = make(moto_url)
    (mid,) = speculative(p)[:1]
    (ack,) = p.create([mid], token(), key="c")
    hooks.hide_instances = True
    assert p.get(mid).host == ack.machine.host
    assert mid not in speculative(p) and len(speculative(p)) == 69
    p.create([mid], token(), key="c-again")  # a create of the same slot launches nothing
    assert hooks.calls["RunInstances"] == 1
