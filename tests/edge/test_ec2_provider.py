"""The EC2 provider (bigfleet/providers/ec2/) against moto in server mode: a real HTTP endpoint
in its own process (`python -m moto.server`, tests/edge/moto_server.py), started once for the
module, that boto3 talks to over the network. Each test uses its own provider name, so the
instances of one are invisible to the others (every listing is filtered by the
`bigfleet:provider` tag).

API calls are counted (and their parameters kept) with a botocore `before-call` hook on the
client; EC2's refusals (InsufficientInstanceCapacity, RequestLimitExceeded) are injected with a
`before-send` hook that answers one operation with EC2's XML error, which botocore then parses as
it would EC2's; a whole reply the same way (an account's max-instances). What moto cannot show of
an instance (a spot request id, an interruption's reason, a stop in progress) is written into
DescribeInstances' parsed reply by an `after-call` hook.

moto's limits met here: it ignores RunInstances' ClientToken (a repeat launches again) and
answers a `client-token` filter with a 500, so the provider's idempotency rests on its own
`bigfleet:batch` tag (ClientToken is still sent, for real EC2); instances are running as soon
as they are launched, and stopped as soon as they are stopped; spot instances launched by
RunInstances get no SpotInstanceRequestId and are never interrupted, and the persistent/stop
spot options are accepted and ignored (so the tests check the request BigFleet sends).
"""

from __future__ import annotations

import base64
import datetime
import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
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
    MachineNotFound,
    QuotaExhausted,
    RateLimited,
    StaleFencingToken,
    UnissuedEpoch,
)
from bigfleet.providers.ec2 import Ec2Config, Ec2Provider
from bigfleet.providers.ec2.records import Record
from tests.edge import moto_server
from tests.procs import ROOT

S = MachineState
REGION = moto_server.REGION
moto_url = moto_server.moto_url  # the fixture: moto in server mode, once for the module
BLOB = BootstrapBlob(user_data=b"#!/bin/sh\necho join cluster-a\n", ttl_seconds=600)
MUTATING = {"RunInstances", "CreateTags", "DeleteTags", "TerminateInstances", "StopInstances",
            "StartInstances", "ModifyInstanceAttribute", "CancelSpotInstanceRequests"}  # fmt: skip


class Hooks:
    """Counts the EC2 calls of one client and answers chosen ones with an EC2 error."""

    def __init__(self, client: Any) -> None:
        self.calls: Counter[str] = Counter()
        self.sent: list[tuple[str, dict[str, Any]]] = []  # every call in order, with its params
        self.fail: dict[str, tuple[str, Any]] = {}  # operation -> (code, predicate on params)
        self.failed: Counter[str] = Counter()
        self.replies: dict[str, bytes] = {}  # operation -> the XML EC2 answers with
        # instance id -> what DescribeInstances says of it beyond moto's reply
        self.overlay: dict[str, Callable[[dict[str, Any]], None]] = {}
        client.meta.events.register("before-call.ec2", self._count)
        client.meta.events.register("before-send.ec2", self._send)
        client.meta.events.register("after-call.ec2.DescribeInstances", self._overlay)
        self.hide_instances = False  # DescribeInstances lists nothing (eventual consistency)

    def _count(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        self.calls[model.name] += 1
        self.sent.append((model.name, dict(params.get("body", {}))))

    def params(self, op: str) -> list[dict[str, Any]]:
        return [body for name, body in self.sent if name == op]

    def _overlay(self, parsed: dict[str, Any], **_: Any) -> None:
        for reservation in parsed.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                if instance["InstanceId"] in self.overlay:
                    self.overlay[instance["InstanceId"]](instance)

    def _send(self, request: Any, **_: Any) -> AWSResponse | None:
        body = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        for op, xml in self.replies.items():
            if f"Action={op}&" in body + "&":
                return AWSResponse(request.url, 200, {}, _Raw(xml))
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
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}),  # no SDK retry
    )
    hooks = Hooks(client)
    return Ec2Provider(make_config(url, name, **overrides), client), hooks


def token(epoch: int = 1, shard: int = 3) -> FencingToken:
    return FencingToken(shard_id=shard, shard_epoch=epoch, seq=1)


def speculative(p: Ec2Provider, zone: str = "us-east-1a") -> list[str]:
    return [m.id for m in p.list(ListFilter(states=[S.SPECULATIVE], zone=zone))]


def configured_on_a_clock(url: str) -> tuple[Ec2Provider, Hooks, list[float], str]:
    """A provider on a clock the test moves (`now[0]`), with one machine CONFIGURED."""
    now = [1_900_000_000.0]
    p, hooks = make(url)
    p._clock = lambda: now[0]
    (mid,) = speculative(p)[:1]
    p.create([mid], token(), key="c")
    p.configure(mid, BLOB, "cluster-a", token(), key="cf")
    return p, hooks, now, mid


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
    assert base64.b64decode(attr["UserData"]["Value"]) == BLOB.user_data
    # The fencing epoch came back from the tags: a fresh provider refuses epoch 4.
    with pytest.raises(StaleFencingToken):
        fresh.drain(ids[0], 0, token(epoch=4))
    assert hooks.mutating() == 0


def test_drain_and_terminate_give_the_slot_back(moto_url: str) -> None:
    p, _, now, mid = configured_on_a_clock(moto_url)
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


def test_a_refused_call_moves_no_epoch_and_an_unissued_one_is_refused(moto_url: str) -> None:
    """Issue 30 on EC2: only a call that succeeds moves a shard's epoch (in memory, and in
    the tags a fresh provider rebuilds it from); an epoch beyond the clock was never issued: it
    is refused before any mutating EC2 call, and a tag that holds one fences nothing."""
    p, hooks = make(moto_url)
    a, b = speculative(p)[:2]
    p.create([a], token(epoch=7), key="c")
    with pytest.raises(MachineNotFound):
        p.configure(f"{p.name}-no-such-machine", BLOB, "cluster-a", token(epoch=8))
    with pytest.raises(InvalidTransition):
        p.configure(b, BLOB, "cluster-a", token(epoch=9))  # speculative
    hooks.fail["RunInstances"] = ("InsufficientInstanceCapacity", lambda body: True)
    with pytest.raises(QuotaExhausted):
        p.create([b], token(epoch=10), key="ice")
    del hooks.fail["RunInstances"]
    year_ahead = int(time.time() * 1000) + 365 * 86_400_000
    hooks.calls.clear()
    with pytest.raises(UnissuedEpoch, match="token.shard_epoch"):
        p.drain(a, 0, token(epoch=year_ahead))
    assert hooks.mutating() == 0
    # Epoch 7 is still the shard's, here and in a fresh provider (from the tags).
    fresh, _ = make(moto_url, p.name)
    for q in (p, fresh):
        with pytest.raises(StaleFencingToken):
            q.drain(a, 0, token(epoch=6))
        assert q.configure(a, BLOB, "cluster-a", token(epoch=7), key="cf").machine.cluster
    # A tag from before issue 30 holding an epoch a year ahead (kept from a create that should
    # have been refused) fences nothing: a fresh provider takes shard 3's real epoch.
    host = p.get(a).host
    assert host is not None
    p.client.create_tags(
        Resources=[host.ref], Tags=[{"Key": "bigfleet:epoch", "Value": str(year_ahead)}]
    )
    fresh, _ = make(moto_url, p.name)
    assert fresh.drain(a, 0, token(epoch=7), key="d").machine.state in (S.DRAINING, S.IDLE)
    assert fresh._epochs[3] == 7


def test_account_limit_reads_max_instances_once(moto_url: str) -> None:
    p, hooks = make(moto_url, account_limit=True)  # moto's max-instances is 20
    assert len(p.list(ListFilter(states=[S.SPECULATIVE]))) == 20  # 70 + 3 configured
    assert len(speculative(p, "us-east-1b")) == 3  # its whole count: its share is more
    assert len(speculative(p)) == 17
    assert hooks.calls["DescribeAccountAttributes"] == 1


def account_attributes(max_instances: int) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?><DescribeAccountAttributesResponse '
        'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r</requestId>'
        "<accountAttributeSet><item><attributeName>max-instances</attributeName>"
        f"<attributeValueSet><item><attributeValue>{max_instances}</attributeValue></item>"
        "</attributeValueSet></item></accountAttributeSet></DescribeAccountAttributesResponse>"
    ).encode()


def test_account_limit_is_shared_by_all_offerings(moto_url: str) -> None:
    """max-instances is the account's, not each offering's: two offerings of 10 under a cap of
    12 show 12 slots in all, less every live instance of the provider."""
    offerings = [
        {"instance_type": "m5.large", "zone": zone, "capacity_type": "on-demand",
         "price_per_hour": 0.096, "resources": {"cpu": 2, "memory_gib": 8}, "count": 10}
        for zone in ("us-east-1a", "us-east-1b")
    ]  # fmt: skip
    p, hooks = make(moto_url, account_limit=True, offerings=offerings)
    hooks.replies["DescribeAccountAttributes"] = account_attributes(12)

    def slots(zone: str = "") -> list[str]:
        return [m.id for m in p.list(ListFilter(states=[S.SPECULATIVE], zone=zone))]

    assert len(slots()) == 12
    assert sorted(slots("us-east-1a") + slots("us-east-1b")) == slots()
    p.create(slots("us-east-1a")[:3], token(), key="c1")
    assert len(slots()) == 12 - 3
    assert sorted(slots("us-east-1a") + slots("us-east-1b")) == slots()
    assert slots("us-east-1b")  # the other offering keeps its share
    # A slot the cap keeps out of the listing is refused, not launched.
    listed = set(slots("us-east-1b"))
    beyond = next(
        f"{p.name}-m5-large-us-east-1b-on-demand-{i:05d}" for i in range(10)
        if f"{p.name}-m5-large-us-east-1b-on-demand-{i:05d}" not in listed
    )  # fmt: skip
    with pytest.raises(QuotaExhausted):
        p.create([beyond], token(), key="c2")
    # Creating what is listed, both offerings at once, fills the account: nothing beyond.
    p.create(slots(), token(), key="c3")
    assert slots() == []
    live = p.list(ListFilter())
    assert len(live) == 12 and all(m.state is S.IDLE for m in live)


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
    ack = p.configure(mid, BLOB, "cluster-a", token(), key="cf")  # stopped, blob not delivered
    assert ack.machine.state is S.CONFIGURING
    assert "ModifyInstanceAttribute (RequestLimitExceeded" in ack.machine.last_error
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
        p.configure(mid, BLOB, "cluster-a", token(epoch=2), key="cf")
    machine = p.get(mid)
    assert machine.state is S.IDLE and machine.cluster is None
    # The refused configure moved no epoch: its tags are put back, so a restart rebuilds 1.
    assert machine.host is not None
    reply = p.client.describe_instances(InstanceIds=[machine.host.ref])
    tags = {t["Key"]: t["Value"] for t in reply["Reservations"][0]["Instances"][0]["Tags"]}
    assert (tags["bigfleet:shard"], tags["bigfleet:epoch"]) == ("3", "1")
    fresh, _ = make(moto_url, p.name)
    fresh.list(ListFilter())
    assert fresh._epochs == {3: 1}


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


def instance_state(p: Ec2Provider, instance_id: str) -> str:
    reply = p.client.describe_instances(InstanceIds=[instance_id])
    return str(reply["Reservations"][0]["Instances"][0]["State"]["Name"])


def user_data(p: Ec2Provider, instance_id: str) -> bytes:
    attr = p.client.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    return base64.b64decode(attr["UserData"]["Value"])


def filters(body: dict[str, Any]) -> dict[str, list[str]]:
    """DescribeInstances' filters as sent (`Filter.N.Name`, `Filter.N.Value.M`)."""
    found: dict[str, list[str]] = {}
    for key, name in body.items():
        m = re.fullmatch(r"Filter\.(\d+)\.Name", key)
        if m:
            prefix = f"Filter.{m.group(1)}.Value."
            found[name] = [v for k, v in sorted(body.items()) if k.startswith(prefix)]
    return found


@pytest.mark.parametrize("code", ["InsufficientInstanceCapacity", "RequestLimitExceeded"])
def test_a_start_ec2_refuses_keeps_the_machine_configuring_and_the_provider_answering(
    moto_url: str, code: str
) -> None:
    """The start of a configure is taken on later Gets and Lists too: refused, it must neither
    fail them (every other machine would be unreadable) nor the configure. The machine stays
    CONFIGURING with the refusal, and starts once EC2 lets it."""
    now = [1_900_000_000.0]
    p, hooks = make(moto_url)
    p._clock = lambda: now[0]
    mid, other = speculative(p)[:2]
    p.create([mid, other], token(), key="c")
    hooks.fail["StartInstances"] = (code, lambda body: True)
    ack = p.configure(mid, BLOB, "cluster-a", token(), key="cf")
    assert ack.machine.state is S.CONFIGURING and code in ack.machine.last_error
    listed = {m.id: m for m in p.list(ListFilter())}
    assert listed[mid].state is S.CONFIGURING and listed[mid].cluster == "cluster-a"
    assert f"StartInstances ({code}" in listed[mid].last_error
    assert listed[other].state is S.IDLE and listed[other].last_error == ""
    got = p.get(mid)
    assert got.state is S.CONFIGURING and code in got.last_error
    assert p.get(other).state is S.IDLE
    host = got.host.ref if got.host else ""
    assert instance_state(p, host) == "stopped"
    if code == "RequestLimitExceeded":  # throttled: EC2 is not asked again before the hint
        assert hooks.calls["StartInstances"] == 1
    else:  # no capacity to start it: none to launch more of the offering either
        assert hooks.calls["StartInstances"] == 3  # the configure, the List, the Get
        assert "m5.large/us-east-1a/on-demand" in p.unavailable()
    del hooks.fail["StartInstances"]
    now[0] += 2.0  # past the throttle's first hint (1 s)
    machine = {m.id: m for m in p.list(ListFilter())}[mid]
    assert machine.state is S.CONFIGURED and machine.cluster == "cluster-a"
    assert machine.last_error == ""
    assert instance_state(p, host) == "running" and user_data(p, host) == BLOB.user_data


def test_get_reads_one_machine_by_its_tag_not_its_offering(moto_url: str) -> None:
    p, hooks = make(moto_url)
    ids = speculative(p)[:3]
    p.create(ids, token(), key="c")
    hooks.sent.clear()
    got = p.get(ids[1])
    assert got.id == ids[1] and got.state is S.IDLE
    (body,) = hooks.params("DescribeInstances")
    sent = filters(body)
    assert sent["tag:bigfleet:machine-id"] == [ids[1]]
    assert sent["tag:bigfleet:provider"] == [p.name]
    # Configure, drain and delete look their machine up the same way: no scan of the offering.
    hooks.sent.clear()
    p.configure(ids[1], BLOB, "cluster-a", token(), key="cf")
    p.drain(ids[1], 0, token(), key="d")
    assert p.delete(ids[1], token(), key="x").machine.state in (S.DELETING, S.SPECULATIVE)
    for body in hooks.params("DescribeInstances"):
        by_tag = filters(body).get("tag:bigfleet:machine-id") == [ids[1]]
        assert by_tag or "InstanceId.1" in body, body
    # A slot no instance holds (any more) is answered as List answers it.
    assert p.get(ids[1]).state is S.SPECULATIVE
    assert p.get(speculative(p)[-1]).state is S.SPECULATIVE
    with pytest.raises(MachineNotFound):
        p.get(f"{p.name}-m5-large-us-east-1a-on-demand-00070")  # beyond the count of 70
    # A launch EC2 does not list yet is still found.
    (fresh,) = speculative(p)[:1]
    (ack,) = p.create([fresh], token(), key="c-fresh")
    hooks.hide_instances = True
    assert p.get(fresh).host == ack.machine.host


def test_a_forced_drain_stops_the_instance_and_a_configure_starts_it_again(
    moto_url: str,
) -> None:
    """Forced (or at the end of its grace), a drain stops the instance: it no longer runs the
    cluster's workloads nor stays joined to it while BigFleet counts it IDLE. The next configure
    needs no stop: the new blob is delivered and the instance started."""
    p, hooks, now, mid = configured_on_a_clock(moto_url)
    host = p.get(mid).host.ref  # type: ignore[union-attr]
    # The stop refused (throttled): DRAINING with the refusal, every List still answers.
    hooks.fail["StopInstances"] = ("RequestLimitExceeded", lambda body: True)
    ack = p.drain(mid, 600, token(), force=True, key="d")
    assert ack.machine.state is S.DRAINING and "StopInstances" in ack.machine.last_error
    assert [m.state for m in p.list(ListFilter(states=[S.DRAINING]))] == [S.DRAINING]
    assert instance_state(p, host) == "running"
    del hooks.fail["StopInstances"]
    now[0] += 2.0
    drained = p.get(mid)
    assert drained.state is S.IDLE and drained.cluster is None and drained.last_error == ""
    assert instance_state(p, host) == "stopped"
    # While EC2 is still stopping it, it is DRAINING (moto stops at once: shown by an overlay).
    hooks.overlay[host] = lambda i: i.update(State={"Code": 64, "Name": "stopping"})
    assert p.get(mid).state is S.DRAINING
    del hooks.overlay[host]
    # Configure from the stopped IDLE instance: the blob delivered and started, no stop.
    hooks.calls.clear()
    blob_b = BootstrapBlob(user_data=b"#!/bin/sh\necho join cluster-b\n", ttl_seconds=600)
    ack = p.configure(mid, blob_b, "cluster-b", token(), key="cf-b")
    assert ack.machine.state is S.CONFIGURED and ack.machine.cluster == "cluster-b"
    assert hooks.calls["StopInstances"] == 0
    assert hooks.calls["ModifyInstanceAttribute"] == hooks.calls["StartInstances"] == 1
    assert instance_state(p, host) == "running" and user_data(p, host) == blob_b.user_data


def test_a_stopped_idle_instance_is_deleted(moto_url: str) -> None:
    p, _ = make(moto_url)
    (mid,) = speculative(p)[:1]
    p.create([mid], token(), key="c")
    p.configure(mid, BLOB, "cluster-a", token(), key="cf")
    assert p.drain(mid, 0, token(), force=True, key="d").machine.state is S.IDLE
    host = p.get(mid).host.ref  # type: ignore[union-attr]
    assert instance_state(p, host) == "stopped"
    assert p.delete(mid, token(), key="x").machine.state in (S.DELETING, S.SPECULATIVE)
    assert instance_state(p, host) == "terminated"
    assert p.get(mid).state is S.SPECULATIVE


def test_a_drained_instance_ec2_cannot_stop_is_left_idle_and_running(moto_url: str) -> None:
    """A legacy one-time spot instance cannot be stopped (moto stops it: injected): the drain
    still ends, IDLE with the reason, and the instance is deleted instead of reconfigured."""
    p, hooks = make(moto_url)
    (mid,) = speculative(p, "us-east-1b")[:1]
    p.create([mid], token(), key="c")
    p.configure(mid, BLOB, "cluster-a", token(), key="cf")
    hooks.fail["StopInstances"] = ("UnsupportedOperation", lambda body: True)
    ack = p.drain(mid, 0, token(), force=True, key="d")
    assert ack.machine.state is S.IDLE and "cannot stop" in ack.machine.last_error
    calls = hooks.calls["StopInstances"]
    again = p.get(mid)
    assert again.state is S.IDLE and "cannot stop" in again.last_error
    assert hooks.calls["StopInstances"] == calls  # not asked again
    assert instance_state(p, again.host.ref) == "running"  # type: ignore[union-attr]
    assert p.delete(mid, token(), key="x").machine.state in (S.DELETING, S.SPECULATIVE)


def test_spot_is_launched_persistent_and_stopped_when_interrupted(moto_url: str) -> None:
    """EC2 only stops (so only configures) spot instances of a persistent request that stops on
    interruption. moto ignores both options: the request BigFleet sends is checked; and it never
    interrupts: the interruption's reason is overlaid on a stopped instance."""
    p, hooks = make(moto_url)
    (mid,) = speculative(p, "us-east-1b")[:1]
    p.create([mid], token(), key="c")
    (body,) = hooks.params("RunInstances")
    assert body["InstanceMarketOptions.MarketType"] == "spot"
    assert body["InstanceMarketOptions.SpotOptions.SpotInstanceType"] == "persistent"
    assert body["InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"] == "stop"
    assert "spot-instances-request" in {
        v for k, v in body.items() if re.fullmatch(r"TagSpecification\.\d+\.ResourceType", k)
    }
    ack = p.configure(mid, BLOB, "cluster-a", token(), key="cf")
    assert ack.machine.state is S.CONFIGURED
    host = ack.machine.host.ref  # type: ignore[union-attr]
    p.client.stop_instances(InstanceIds=[host])  # EC2 interrupts it: stopped, as asked
    hooks.overlay[host] = lambda i: i.update(
        StateReason={"Code": "Server.SpotInstanceShutdown", "Message": "interrupted"}
    )
    failed = p.get(mid)
    assert failed.state is S.FAILED and failed.failed_from is S.CONFIGURED
    assert "spot interruption" in failed.last_error
    assert "Server.SpotInstanceShutdown" in failed.last_error


def test_delete_of_a_spot_instance_cancels_its_request_first(moto_url: str) -> None:
    """A persistent request relaunches its instance once terminated: the delete cancels it
    first. moto gives RunInstances' spot instances no request id: a real moto request stands
    in, overlaid on the instance."""
    p, hooks = make(moto_url)
    a, b = speculative(p, "us-east-1b")[:2]
    hosts = [ack.machine.host.ref for ack in p.create([a, b], token(), key="c")]  # type: ignore[union-attr]
    (request,) = p.client.request_spot_instances(
        InstanceCount=1,
        Type="persistent",
        LaunchSpecification={"ImageId": "ami-12c6146b", "InstanceType": "m5.large"},
    )["SpotInstanceRequests"]
    rid = request["SpotInstanceRequestId"]
    hooks.overlay[hosts[0]] = lambda i: i.update(SpotInstanceRequestId=rid)
    hooks.sent.clear()
    assert p.delete(a, token(), key="x").machine.state in (S.DELETING, S.SPECULATIVE)
    ends = ("CancelSpotInstanceRequests", "TerminateInstances")
    order = [op for op, _ in hooks.sent if op in ends]
    assert order == ["CancelSpotInstanceRequests", "TerminateInstances"]
    assert hooks.params("CancelSpotInstanceRequests")[0]["SpotInstanceRequestId.1"] == rid
    left = p.client.describe_spot_instance_requests()["SpotInstanceRequests"]
    assert rid not in {r["SpotInstanceRequestId"] for r in left}
    assert instance_state(p, hosts[0]) == "terminated"
    # A request already gone (EC2 answers NotFound): the instance is terminated all the same.
    hooks.overlay[hosts[1]] = lambda i: i.update(SpotInstanceRequestId="sir-0123abcd")
    hooks.fail["CancelSpotInstanceRequests"] = (
        "InvalidSpotInstanceRequestID.NotFound",
        lambda body: True,
    )
    assert p.delete(b, token(), key="y").machine.state in (S.DELETING, S.SPECULATIVE)
    assert instance_state(p, hosts[1]) == "terminated"
    assert p.get(b).state is S.SPECULATIVE


FUTURE, PAST = 1_900_000_600.0, 1_899_999_000.0  # drain-until around the clock of 1.9e9 s
STATES = [  # (EC2 state, tags, blob in memory, StateReason) -> state, failed_from, last_error
    ("pending", {}, False, "", S.CREATING, None, ""),
    ("running", {}, False, "", S.IDLE, None, ""),
    ("running", {"configure": "stopping"}, True, "", S.CONFIGURING, None, ""),
    ("stopping", {"configure": "stopping"}, True, "", S.CONFIGURING, None, ""),
    ("stopped", {"configure": "stopping"}, True, "", S.CONFIGURING, None, ""),
    ("stopped", {"configure": "stopping"}, False, "", S.FAILED, S.CONFIGURING, "blob was lost"),
    ("pending", {"configure": "starting"}, False, "", S.CONFIGURING, None, ""),
    ("running", {"configure": "starting"}, False, "", S.CONFIGURED, None, ""),
    ("stopped", {"configure": "starting"}, False, "Client.UserInitiatedShutdown",
     S.FAILED, S.CONFIGURED, "stopped outside BigFleet"),
    ("stopped", {"configure": "starting"}, False, "Server.SpotInstanceShutdown",
     S.FAILED, S.CONFIGURED, "spot interruption"),
    ("stopped", {}, False, "", S.FAILED, S.IDLE, "stopped outside BigFleet"),
    ("running", {"configure": "starting", "drain-until": FUTURE}, False, "",
     S.DRAINING, None, ""),
    ("running", {"configure": "starting", "drain-until": PAST}, False, "",
     S.DRAINING, None, ""),  # its stop is due
    ("stopping", {"configure": "starting", "drain-until": PAST}, False, "",
     S.DRAINING, None, ""),
    ("stopped", {"configure": "starting", "drain-until": PAST}, False,
     "Client.UserInitiatedShutdown", S.IDLE, None, ""),
    ("stopped", {"configure": "stopping", "drain-until": PAST}, False, "", S.IDLE, None, ""),
    ("stopped", {"configure": "starting", "drain-until": FUTURE}, False, "", S.IDLE, None, ""),
    ("shutting-down", {"deleting": "1"}, False, "", S.DELETING, None, ""),
    ("terminated", {"deleting": "1"}, False, "", S.SPECULATIVE, None, ""),
    ("terminated", {}, False, "", S.FAILED, S.IDLE, "terminated outside BigFleet"),
    ("terminated", {"configure": "starting"}, False, "Server.SpotInstanceTermination",
     S.FAILED, S.CONFIGURED, "spot interruption"),
]  # fmt: skip


@pytest.mark.parametrize(("ec2", "tags", "blob", "reason", "state", "failed_from", "error"), STATES)
def test_every_ec2_state_and_tags_map_to_one_machine_state(
    moto_url: str,
    ec2: str,
    tags: dict[str, Any],
    blob: bool,
    reason: str,
    state: MachineState,
    failed_from: MachineState | None,
    error: str,
) -> None:
    """What List reports from an instance's EC2 state and `bigfleet:*` tags (no EC2 call: the
    instance is written here). A configured instance carries its cluster."""
    p, _ = make(moto_url)
    p._clock = lambda: 1_900_000_000.0
    offering = p._offerings[0]
    all_tags = {f"bigfleet:{k}": str(v) for k, v in tags.items()}
    if "configure" in tags:
        all_tags["bigfleet:cluster"] = "cluster-a"
    instance = {
        "InstanceId": "i-0123456789abcdef0",
        "State": {"Name": ec2},
        "LaunchTime": datetime.datetime(2030, 1, 1),
        "StateReason": {"Code": reason} if reason else {},
        "Tags": [{"Key": k, "Value": v} for k, v in all_tags.items()],
    }
    if blob:
        p._blobs[instance["InstanceId"]] = BLOB.user_data
    machine = p._machine(Record(f"{offering.prefix}-00000", offering, 0, instance, all_tags))
    assert (machine.state, machine.failed_from) == (state, failed_from)
    assert error in machine.last_error and bool(error) == bool(machine.last_error)


def test_the_iam_policy_allows_exactly_the_calls_the_provider_makes() -> None:
    policy = json.loads((ROOT / "examples" / "ec2-iam-policy.json").read_text())
    called = set()
    for path in sorted((ROOT / "bigfleet" / "providers" / "ec2").glob("*.py")):
        service = "sqs" if path.name == "notices.py" else "ec2"  # EC2, and the notice queue
        source = path.read_text()
        called |= {f"{service}:{name}" for name in re.findall(r'self\._call\(\s*"(\w+)"', source)}
    assert "ec2:RunInstances" in called and "ec2:CancelSpotInstanceRequests" in called
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage"} <= called
    allowed: set[str] = set()
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"]
        actions = [actions] if isinstance(actions, str) else actions
        allowed |= set(actions)
        resources = statement["Resource"]
        resources = [resources] if isinstance(resources, str) else resources
        if any(a.startswith("sqs:") for a in actions):  # the one queue, never every queue
            assert all(r.startswith("arn:aws:sqs:") and "*" not in r for r in resources), statement
        mutating = [a for a in actions if a.startswith("ec2:") and not a.startswith("ec2:Describe")]
        if not mutating:
            continue
        # Nothing mutating on every resource; on instances and spot requests, only on the
        # provider's own (the tag they carry, or are launched with).
        assert "*" not in resources, statement
        if any(r.endswith((":instance/*", ":spot-instances-request/*")) for r in resources):
            assert "bigfleet:provider" in json.dumps(statement.get("Condition", {})), statement
    assert {a for a in allowed if a.startswith(("ec2:", "sqs:"))} == called
    assert "iam:PassRole" in allowed


def test_an_instance_tagged_unmanaged_is_listed_for_bigfleet_to_leave_alone(moto_url: str) -> None:
    """An instance another autoscaler uses for now is tagged `bigfleet.io/unmanaged=true`: it
    is listed with that label, which a shard reads as "leave it alone"
    (bigfleet/cluster_modes.py); the tag taken off, it is an ordinary machine again."""
    from bigfleet import labels as L
    from bigfleet.cluster_modes import ClusterModes

    p, _ = make(moto_url)
    ids = speculative(p)[:2]
    p.create(ids, token(), key="k1")
    host = p.get(ids[0]).host
    assert host is not None
    p.client.create_tags(Resources=[host.ref], Tags=[{"Key": L.UNMANAGED, "Value": "true"}])
    by_id = {m.id: m for m in p.list(ListFilter())}
    assert by_id[ids[0]].labels.get(L.UNMANAGED) == "true"
    assert L.UNMANAGED not in by_id[ids[1]].labels
    assert [m.id for m in ClusterModes().keep(by_id.values()) if m.id in ids] == [ids[1]]
    p.client.delete_tags(Resources=[host.ref], Tags=[{"Key": L.UNMANAGED}])
    assert L.UNMANAGED not in p.get(ids[0]).labels
