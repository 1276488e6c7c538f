"""EC2's notices through an SQS queue (bigfleet/providers/ec2/notices.py, issue 33), against
moto in server mode (tests/edge/moto_server.py) serving EC2 and SQS: the queue is created with
boto3, the events are sent as EventBridge delivers them (AWS's documented samples, with this
test's instance ids and times), and the machines are read back as a shard reads them:
`list(ListFilter(noticed=True))`, then a fresh provider object.

The samples below are AWS's (the EC2 user guide's spot interruption, rebalance and state-change
events; AWS Health's EventBridge scheduled change), with `INSTANCE`, the account and times
substituted."""

from __future__ import annotations

import copy
import json
import logging
import uuid
from typing import Any

import boto3
import pytest

from bigfleet.models import ListFilter, MachineState, NoticeKind
from bigfleet.providers.ec2 import Ec2Provider
from bigfleet.providers.ec2.notices import BadEvent, notice_from_tag, notice_tag, parse
from tests.edge import moto_server
from tests.edge.test_ec2_provider import BLOB, make, speculative, token

S = MachineState
moto_url = moto_server.moto_url  # the fixture: moto in server mode, once for the module
INSTANCE = "i-1234567890abcdef0"
ACCOUNT = "123456789012"  # moto's account

SPOT_WARNING = {
    "version": "0",
    "id": "12345678-1234-1234-1234-123456789012",
    "detail-type": "EC2 Spot Instance Interruption Warning",
    "source": "aws.ec2",
    "account": ACCOUNT,
    "time": "2026-12-06T14:00:00Z",
    "region": "us-east-1",
    "resources": [f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/{INSTANCE}"],
    "detail": {"instance-id": INSTANCE, "instance-action": "terminate"},
}
REBALANCE = {
    "version": "0",
    "id": "12345678-1234-1234-1234-123456789012",
    "detail-type": "EC2 Instance Rebalance Recommendation",
    "source": "aws.ec2",
    "account": ACCOUNT,
    "time": "2026-12-06T13:55:00Z",
    "region": "us-east-1",
    "resources": [f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/{INSTANCE}"],
    "detail": {"instance-id": INSTANCE},
}
SCHEDULED = {
    "version": "0",
    "id": "7fb65329-1628-4cf3-a740-95fg457h1402",
    "detail-type": "AWS Health Event",
    "source": "aws.health",
    "account": ACCOUNT,
    "time": "2026-12-06T06:27:57Z",
    "region": "us-east-1",
    "resources": [INSTANCE],
    "detail": {
        "eventArn": "arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/"
        "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED_ABC123-DEF456",
        "service": "EC2",
        "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
        "eventTypeCategory": "scheduledChange",
        "startTime": "Sat, 19 Dec 2026 17:00:00 GMT",
        "eventDescription": [
            {"language": "en_US", "latestDescription": "A description of the event"}
        ],
        "affectedEntities": [{"entityValue": INSTANCE, "tags": {"stage": "prod"}}],
    },
}
STATE_CHANGE = {
    "id": "7bf73129-1428-4cd3-a780-95db273d1602",
    "detail-type": "EC2 Instance State-change Notification",
    "source": "aws.ec2",
    "account": ACCOUNT,
    "time": "2026-12-06T14:10:00Z",
    "region": "us-east-1",
    "resources": [f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/{INSTANCE}"],
    "detail": {"instance-id": INSTANCE, "state": "stopped"},
}
T_1400 = 1796565600  # 2026-12-06T14:00:00Z


def event(sample: dict[str, Any], instance: str = INSTANCE, **top: Any) -> dict[str, Any]:
    """A copy of an AWS sample about `instance`, with top-level fields replaced."""
    body = json.loads(json.dumps(sample).replace(INSTANCE, instance))
    body.update(top)
    return body


# -- parsing one message body -------------------------------------------------------------------


def test_each_documented_event_becomes_its_notice() -> None:
    found = parse(json.dumps(SPOT_WARNING))
    assert found is not None and found.instance_ids == (INSTANCE,)
    assert found.notice.kind is NoticeKind.INTERRUPTION
    assert found.notice.deadline_unix == T_1400 + 120
    assert found.notice.detail == "spot interruption warning: terminate at 2026-12-06T14:02:00Z"
    rebalance = parse(json.dumps(REBALANCE))
    assert rebalance is not None and rebalance.notice.kind is NoticeKind.REBALANCE
    assert rebalance.notice.deadline_unix == 0
    scheduled = parse(json.dumps(SCHEDULED))
    assert scheduled is not None and scheduled.notice.kind is NoticeKind.SCHEDULED
    assert scheduled.notice.deadline_unix == 1797699600  # 2026-12-19T17:00:00Z
    assert scheduled.notice.detail.startswith("AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED at")
    stopped = parse(json.dumps(STATE_CHANGE))
    assert stopped is not None and stopped.notice.kind is NoticeKind.INTERRUPTION
    assert stopped.instance_ids == (INSTANCE,) and stopped.account == ACCOUNT
    assert stopped.state == "stopped"
    assert stopped.notice.deadline_unix == T_1400 + 600


def test_a_hibernating_spot_instance_and_an_iso_start_time() -> None:
    hibernate = event(SPOT_WARNING)
    hibernate["detail"]["instance-action"] = "hibernate"  # no two minutes: it begins at once
    found = parse(json.dumps(hibernate))
    assert found is not None and found.notice.deadline_unix == T_1400
    iso = event(SCHEDULED)
    iso["detail"]["startTime"] = "2026-12-06T14:00:00Z"
    found = parse(json.dumps(iso).encode())
    assert found is not None and found.notice.deadline_unix == T_1400


@pytest.mark.parametrize(
    "change",
    [
        lambda e: e.update(source="aws.s3"),
        lambda e: e.update({"detail-type": "EC2 Instance Launch Successful"}),
        lambda e: e["detail"].update(state="running"),
        lambda e: e["detail"].update(state="pending"),
    ],
    ids=["other-source", "other-detail-type", "running", "pending"],
)
def test_what_is_no_notice_is_ignored(change: Any) -> None:
    body = event(STATE_CHANGE)
    change(body)
    assert parse(json.dumps(body)) is None


def test_health_events_other_than_ec2_scheduled_changes_are_ignored() -> None:
    for key, value in (("service", "RDS"), ("eventTypeCategory", "issue")):
        body = copy.deepcopy(SCHEDULED)
        body["detail"][key] = value
        assert parse(json.dumps(body)) is None
    hosts = copy.deepcopy(SCHEDULED)
    hosts["detail"]["affectedEntities"] = [{"entityValue": "h-0123456789abcdef0"}]
    assert parse(json.dumps(hosts)) is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("not json {", "body"),
        ("[1, 2]", "body"),
        ("x" * 3_000_000, "body"),
        (json.dumps({"detail-type": "EC2 Instance Rebalance Recommendation"}), "source"),
        (json.dumps({k: v for k, v in SPOT_WARNING.items() if k != "detail"}), "detail"),
        (json.dumps({k: v for k, v in SPOT_WARNING.items() if k != "time"}), "time"),
        (json.dumps(event(SPOT_WARNING, time="yesterday")), "time"),
        (json.dumps({**SPOT_WARNING, "detail": {"instance-action": "stop"}}), "detail.instance-id"),
        (json.dumps({**SPOT_WARNING, "detail": {"instance-id": "vol-1"}}), "detail.instance-id"),
        (json.dumps({**SPOT_WARNING, "detail": {"instance-id": INSTANCE}}),
         "detail.instance-action"),
        (json.dumps({**STATE_CHANGE, "detail": {"instance-id": INSTANCE, "state": 3}}),
         "detail.state"),
        (json.dumps({**SCHEDULED, "detail": {**SCHEDULED["detail"], "affectedEntities": None}}),
         "detail.affectedEntities"),
        (json.dumps({**SCHEDULED, "detail": {**SCHEDULED["detail"], "affectedEntities": [{}]}}),
         "detail.affectedEntities[0].entityValue"),
        (json.dumps({**SCHEDULED, "detail": {**SCHEDULED["detail"], "startTime": "soon"}}),
         "detail.startTime"),
    ],  # fmt: skip
)
def test_a_malformed_body_names_its_field(body: str, field: str) -> None:
    with pytest.raises(BadEvent) as err:
        parse(body)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")
    assert len(str(err.value)) < 200


def test_a_notice_round_trips_through_its_tag_and_fits_one() -> None:
    long = event(SCHEDULED)
    long["detail"]["eventTypeCode"] = "X" * 500 + "<é>"
    for sample in (SPOT_WARNING, REBALANCE, long, STATE_CHANGE):
        found = parse(json.dumps(sample))
        assert found is not None
        assert len(found.notice.detail) <= 200 and len(notice_tag(found.notice)) <= 256
        assert notice_from_tag(notice_tag(found.notice)) == found.notice
    assert notice_from_tag("") is None and notice_from_tag("tomorrow:soon:x") is None


# -- the queue, against moto --------------------------------------------------------------------


def make_queue(url: str, **attributes: str) -> tuple[Any, str]:
    sqs = boto3.client("sqs", region_name=moto_server.REGION, endpoint_url=url)
    name = f"notices-{uuid.uuid4().hex[:8]}"
    queue = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    return sqs, queue


def send(sqs: Any, queue: str, *bodies: dict[str, Any] | str) -> None:
    for body in bodies:
        sqs.send_message(
            QueueUrl=queue, MessageBody=body if isinstance(body, str) else json.dumps(body)
        )


def left(sqs: Any, queue: str) -> int:
    attrs = sqs.get_queue_attributes(
        QueueUrl=queue,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(v) for v in attrs.values())


def fleet(
    url: str, n: int = 1, zone: str = "us-east-1a", **attributes: str
) -> tuple[Ec2Provider, Any, str, list[tuple[str, str]]]:
    """A provider with a queue and `n` IDLE machines: (provider, sqs, queue, [(id, instance)]);
    the provider's EC2 hooks (tests/edge/test_ec2_provider.py) as `p.hooks`."""
    sqs, queue = make_queue(url, **attributes)
    p, hooks = make(url, interruption_queue_url=queue)
    p.hooks = hooks  # type: ignore[attr-defined]
    ids = speculative(p, zone)[:n]
    acks = p.create(ids, token(), key="c")
    return p, sqs, queue, [(a.machine.id, a.machine.host.ref) for a in acks if a.machine.host]


def noticed(p: Ec2Provider) -> dict[str, Any]:
    return {m.id: m.notice for m in p.list(ListFilter(noticed=True))}


def test_a_spot_warning_is_listed_with_its_deadline_and_survives_a_restart(moto_url: str) -> None:
    p, sqs, queue, [(mid, iid), (other, _)] = fleet(moto_url, 2, "us-east-1b")
    assert noticed(p) == {}
    send(sqs, queue, event(SPOT_WARNING, iid))
    found = noticed(p)
    assert list(found) == [mid]  # only the noticed machine is listed
    assert found[mid].kind is NoticeKind.INTERRUPTION
    assert found[mid].deadline_unix == T_1400 + 120
    assert "terminate at 2026-12-06T14:02:00Z" in found[mid].detail
    assert left(sqs, queue) == 0
    assert p.notice_counts()["applied"] == 1
    # Every Get and List reports it; the other machine has none.
    assert p.get(mid).notice == found[mid] and p.get(other).notice is None
    by_id = {m.id: m for m in p.list(ListFilter())}
    assert by_id[mid].notice == found[mid] and by_id[other].notice is None
    # A fresh provider object (a restart) reads it back from EC2.
    fresh, _ = make(moto_url, p.name, interruption_queue_url=queue)
    assert noticed(fresh) == found
    assert fresh.get(mid).notice == found[mid]
    # The same event again (SQS delivers at least once) changes nothing.
    send(sqs, queue, event(SPOT_WARNING, iid))
    assert noticed(fresh) == found and left(sqs, queue) == 0


def test_each_kind_and_the_earliest_deadline_stands(moto_url: str) -> None:
    p, sqs, queue, machines = fleet(moto_url, 4)
    (a, ia), (b, ib), (c, ic), (d, id_) = machines
    ec2 = boto3.client("ec2", region_name=moto_server.REGION, endpoint_url=moto_url)
    ec2.stop_instances(InstanceIds=[id_])  # stopped outside BigFleet
    send(sqs, queue, event(SPOT_WARNING, ia), event(REBALANCE, ib), event(SCHEDULED, ic))
    send(sqs, queue, event(STATE_CHANGE, id_))
    found = noticed(p)
    assert {m: n.kind for m, n in found.items()} == {
        a: NoticeKind.INTERRUPTION,
        b: NoticeKind.REBALANCE,
        c: NoticeKind.SCHEDULED,
        d: NoticeKind.INTERRUPTION,
    }
    assert found[b].deadline_unix == 0 and found[c].deadline_unix == 1797699600
    assert found[d].deadline_unix == T_1400 + 600
    assert p.get(d).state is S.FAILED  # what the state says anyway
    # A warning replaces the rebalance (it has a deadline); a later one does not replace it.
    send(sqs, queue, event(SPOT_WARNING, ib), event(SCHEDULED, ia))
    again = noticed(p)
    assert again[b].kind is NoticeKind.INTERRUPTION and again[a] == found[a]
    fresh, _ = make(moto_url, p.name)  # no queue configured: the tags still speak
    assert noticed(fresh) == again


def test_malformed_messages_are_deleted_and_named_in_the_log(
    moto_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    p, sqs, queue, [(mid, iid)] = fleet(moto_url)
    no_id = event(SPOT_WARNING, iid)
    del no_id["detail"]["instance-id"]
    huge = json.dumps(event(REBALANCE, iid, padding="x" * 1_000_000))  # a megabyte
    assert len(huge) > 1_000_000
    send(sqs, queue, no_id, "not json at all", huge, event(REBALANCE, iid))
    with caplog.at_level(logging.WARNING, "bigfleet.providers.ec2_notices"):
        found = noticed(p)
    assert found[mid].kind is NoticeKind.REBALANCE  # the good one among them still counts
    assert left(sqs, queue) == 0  # no poison message comes back
    assert p.notice_counts()["malformed"] == 3
    logged = [r.getMessage() for r in caplog.records]
    assert sum("malformed" in m for m in logged) == 3
    assert any("detail.instance-id: missing" in m for m in logged)
    assert any("body: not JSON" in m for m in logged)
    assert any("more than an EventBridge event" in m for m in logged)
    assert [m.id for m in p.list(ListFilter(noticed=True))] == [mid]


def test_other_accounts_providers_and_events_are_deleted_and_ignored(moto_url: str) -> None:
    p, sqs, queue, [(mid, iid)] = fleet(moto_url)
    stranger, _ = make(moto_url)  # another provider in the same account
    (sid,) = [a.machine.host.ref for a in stranger.create(speculative(stranger)[:1], token())
              if a.machine.host]  # fmt: skip
    elsewhere = event(SPOT_WARNING, "i-0fedcba9876543210", account="210987654321")
    send(sqs, queue, elsewhere, event(SPOT_WARNING, sid), event(REBALANCE, iid, source="aws.s3"))
    send(sqs, queue, event(STATE_CHANGE, iid, **{"detail-type": "EC2 Instance Launch Successful"}))
    assert noticed(p) == {} and left(sqs, queue) == 0
    assert p.notice_counts() == {"foreign": 2, "ignored": 2}
    assert noticed(stranger) == {}  # nothing was tagged on the stranger's instance
    assert p.get(mid).notice is None


def test_bigfleets_own_stops_and_deletes_are_no_notice(moto_url: str) -> None:
    """A drain stops the instance, a configure stops and starts it, a delete terminates it: the
    state changes EC2 reports for those are BigFleet's own doing, not an interruption."""
    p, sqs, queue, [(mid, iid), (gone, gid)] = fleet(moto_url, 2)
    p.configure(mid, BLOB, "cluster-a", token(), key="cf")  # stopped and started again
    send(sqs, queue, event(STATE_CHANGE, iid))
    assert noticed(p) == {}
    p.drain(mid, 0, token(), force=True, key="d")  # stopped by the drain
    assert p.get(mid).state is S.IDLE
    send(sqs, queue, event(STATE_CHANGE, iid))
    p.delete(gone, token(), key="x")
    terminated = event(STATE_CHANGE, gid)
    terminated["detail"]["state"] = "terminated"
    send(sqs, queue, terminated, event(SPOT_WARNING, gid))  # its slot is speculative again
    assert noticed(p) == {} and left(sqs, queue) == 0
    assert p.notice_counts() == {"ignored": 4}


def test_a_notice_ends_when_the_machine_is_deleted(moto_url: str) -> None:
    p, sqs, queue, [(mid, iid)] = fleet(moto_url, 1, "us-east-1b")
    send(sqs, queue, event(REBALANCE, iid))
    assert list(noticed(p)) == [mid]
    p.delete(mid, token(), key="x")
    assert noticed(p) == {}
    assert p.get(mid).state is S.SPECULATIVE and p.get(mid).notice is None
    p.create([mid], token(), key="again")  # a new instance in the slot has no notice
    assert p.get(mid).notice is None and noticed(p) == {}


def test_a_notice_ec2_will_not_tag_now_stays_in_the_queue(moto_url: str) -> None:
    """CreateTags throttled: the notice is reported from memory meanwhile, and its message is
    left for the queue to show again (here at once: visibility timeout 0) and tagged then."""
    p, sqs, queue, [(mid, iid)] = fleet(moto_url, VisibilityTimeout="0")
    hooks = p.hooks  # type: ignore[attr-defined]
    hooks.fail["CreateTags"] = ("RequestLimitExceeded", lambda body: True)
    send(sqs, queue, event(SPOT_WARNING, iid))
    assert noticed(p)[mid].deadline_unix == T_1400 + 120
    assert p.notice_counts()["retry"] >= 1 and left(sqs, queue) == 1
    del hooks.fail["CreateTags"]
    assert noticed(p)[mid].deadline_unix == T_1400 + 120
    assert left(sqs, queue) == 0
    fresh, _ = make(moto_url, p.name)
    assert noticed(fresh)[mid].deadline_unix == T_1400 + 120


def test_the_noticed_listing_reads_only_the_noticed_machines_slots(moto_url: str) -> None:
    """A shard asks for the noticed machines every `notice_seconds`: the provider reads the
    instances tagged with a notice and those of their slots, not every instance it has, and
    lists what a full listing would list with a notice."""
    p, sqs, queue, machines = fleet(moto_url, 12)
    (a, ia), (b, ib), (c, ic) = machines[:3]
    send(sqs, queue, event(REBALANCE, ia), event(SCHEDULED, ib), event(SPOT_WARNING, ic))
    assert set(noticed(p)) == {a, b, c}  # (the queue read: the events' instances described)
    p.delete(c, token(), key="x")  # its old instance keeps its notice tag; the new one has none
    p.create([c], token(), key="again")
    read: list[str] = []

    def count(parsed: dict[str, Any], **_: Any) -> None:
        read.extend(i["InstanceId"] for r in parsed.get("Reservations", []) for i in r["Instances"])

    p.client.meta.events.register("after-call.ec2.DescribeInstances", count)
    found = noticed(p)
    narrow = sorted(read)
    full = {m.id: m.notice for m in p.list(ListFilter()) if m.notice}
    assert found == full and set(found) == {a, b}
    # The tagged instances (a, b and c's old one), then every instance of their slots (c's new
    # one too); a full listing reads every instance: the twelve and c's old one.
    (new_c,) = {m.host.ref for m in p.list(ListFilter()) if m.id == c and m.host}
    assert narrow == sorted([ia, ib, ic, ia, ib, ic, new_c]), narrow
    assert len(read) - len(narrow) >= 13
