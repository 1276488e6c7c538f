"""EC2's warnings about its instances, read from an SQS queue (issue 33; docs/providers.md).

EventBridge rules put EC2's events into one queue (`Ec2Config.interruption_queue_url`), as
Karpenter's users already have them. Four events are notices (bigfleet/models/machines.py `Notice`):

- `aws.ec2` "EC2 Spot Instance Interruption Warning" (`detail.instance-id`,
  `detail.instance-action`): INTERRUPTION at the event's `time` + 120 s (a `hibernate` action
  begins at once: at `time`);
- `aws.ec2` "EC2 Instance Rebalance Recommendation" (`detail.instance-id`): REBALANCE, no
  deadline;
- `aws.health` "AWS Health Event" with `detail.service` EC2 and `detail.eventTypeCategory`
  scheduledChange: SCHEDULED at `detail.startTime` (RFC 1123 as AWS writes it, or ISO 8601) for
  each instance of `detail.affectedEntities[].entityValue`;
- `aws.ec2` "EC2 Instance State-change Notification" whose `detail.state` is stopping, stopped,
  shutting-down or terminated: INTERRUPTION at the event's `time` (it is going now).

Anything else (another source, detail-type, state, service or category) is not a notice: deleted
and counted. A body that is not such an event (not JSON, larger than an EventBridge event can
be, a field missing or of the wrong type) is malformed: deleted too, logged with the field named
(`BadEvent`), and counted, so a poison message never comes back. Which instance a notice is for,
whether it is BigFleet's own doing, and where it is kept is the provider's part (provider.py):
it tags the instance `bigfleet:notice` = `notice_tag()`, so EC2 keeps the notice across a
restart.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import logging
import re
from collections import Counter
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ...models import NOTICE_DETAIL_MAX, Notice, NoticeKind
from ..base import ProviderError

log = logging.getLogger("bigfleet.providers.ec2_notices")

MAX_BODY = 262_144  # an EventBridge event is at most 256 KiB; anything larger is not one
SPOT_WARNING_SECONDS = 120
RECEIVES_PER_POLL = 10  # ReceiveMessage calls per poll, 10 messages each, at most
MAX_REMEMBERED = 10_000  # notices kept in memory because EC2 would not take their tag
GOING = frozenset({"stopping", "stopped", "shutting-down", "terminated"})
INSTANCE_ID = re.compile(r"i-[0-9a-f]{8,17}")
_UNSAFE = re.compile(r"[^A-Za-z0-9 +\-=._:/@]")  # kept out of a tag value


class BadEvent(ValueError):
    """A queue message that is not a well-formed event: `field` names what is wrong."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field


@dataclass(frozen=True)
class Event:
    """One notice from the queue: for these instances; `state` for a state change only."""

    instance_ids: tuple[str, ...]
    notice: Notice
    account: str = ""
    state: str = ""


def parse(body: str | bytes) -> Event | None:
    """One SQS message body: the notice it carries, None if it carries none (ignored), or
    BadEvent naming the field that is missing or wrong."""
    size = len(body if isinstance(body, bytes) else body.encode())
    if size > MAX_BODY:
        raise BadEvent("body", f"{size} bytes, more than an EventBridge event ({MAX_BODY})")
    try:
        event = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise BadEvent("body", f"not JSON ({str(err)[:80]})") from None
    if not isinstance(event, dict):
        raise BadEvent("body", "not a JSON object")
    source, kind = _text(event, "source"), _text(event, "detail-type")
    if (source, kind) not in _PARSERS:
        return None
    detail = event.get("detail")
    if not isinstance(detail, dict):
        raise BadEvent("detail", "missing" if detail is None else "not an object")
    at = _time(event.get("time"), "time")
    account = event.get("account")
    found = _PARSERS[(source, kind)](detail, at)
    if found is None:
        return None
    ids, notice, state = found
    return Event(ids, notice, account if isinstance(account, str) else "", state)


_Found = tuple[tuple[str, ...], Notice, str] | None


def _spot_warning(detail: dict[str, Any], at: int) -> _Found:
    iid = _instance(detail.get("instance-id"), "detail.instance-id")
    action = _text(detail, "instance-action", "detail.")
    deadline = at if action == "hibernate" else at + SPOT_WARNING_SECONDS
    said = f"spot interruption warning: {action} at {_iso(deadline)}"
    return (iid,), _notice(NoticeKind.INTERRUPTION, deadline, said), ""


def _rebalance(detail: dict[str, Any], at: int) -> _Found:
    iid = _instance(detail.get("instance-id"), "detail.instance-id")
    return (iid,), _notice(NoticeKind.REBALANCE, 0, f"rebalance recommendation at {_iso(at)}"), ""


def _health(detail: dict[str, Any], at: int) -> _Found:
    if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
        return None
    entities = detail.get("affectedEntities")
    if not isinstance(entities, list):
        why = "missing" if entities is None else "not a list"
        raise BadEvent("detail.affectedEntities", why)
    ids = []
    for n, entity in enumerate(entities):
        value = entity.get("entityValue") if isinstance(entity, dict) else None
        if not isinstance(value, str):
            raise BadEvent(f"detail.affectedEntities[{n}].entityValue", "missing or not a string")
        if INSTANCE_ID.fullmatch(value) and value not in ids:
            ids.append(value)  # a dedicated host's id, say, is no machine of BigFleet's
    if not ids:
        return None
    start = _time(detail.get("startTime"), "detail.startTime")
    code = detail.get("eventTypeCode")
    what = code if isinstance(code, str) and code else "scheduled change"
    return tuple(ids), _notice(NoticeKind.SCHEDULED, start, f"{what} at {_iso(start)}"), ""


def _state_change(detail: dict[str, Any], at: int) -> _Found:
    iid = _instance(detail.get("instance-id"), "detail.instance-id")
    state = _text(detail, "state", "detail.")
    if state not in GOING:
        return None
    return (iid,), _notice(NoticeKind.INTERRUPTION, at, f"instance {state} at {_iso(at)}"), state


_PARSERS: dict[tuple[str, str], Callable[[dict[str, Any], int], _Found]] = {
    ("aws.ec2", "EC2 Spot Instance Interruption Warning"): _spot_warning,
    ("aws.ec2", "EC2 Instance Rebalance Recommendation"): _rebalance,
    ("aws.health", "AWS Health Event"): _health,
    ("aws.ec2", "EC2 Instance State-change Notification"): _state_change,
}


def _text(obj: dict[str, Any], key: str, prefix: str = "") -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise BadEvent(prefix + key, "missing" if value is None else "not a string")
    return value


def _instance(value: Any, field: str) -> str:
    if value is None:
        raise BadEvent(field, "missing")
    if not isinstance(value, str) or not INSTANCE_ID.fullmatch(value):
        raise BadEvent(field, f"not an instance id ({str(value)[:40]!r})")
    return value


def _time(value: Any, field: str) -> int:
    """Unix seconds of an ISO 8601 time ("2026-12-06T14:00:00Z") or an RFC 1123 one ("Sat, 05
    Jun 2021 17:00:00 GMT", as AWS Health writes `startTime`); UTC if it names no zone."""
    if not isinstance(value, str):
        raise BadEvent(field, "missing" if value is None else "not a string")
    when: datetime.datetime | None = None
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (ValueError, TypeError, IndexError):
            when = None
    if when is None:
        raise BadEvent(field, f"not a time ({value[:40]!r})")
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    seconds = int(when.timestamp())
    if not 0 <= seconds <= 2**40:
        raise BadEvent(field, f"out of range ({value[:40]!r})")
    return seconds


def _iso(unix: int) -> str:
    return datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _notice(kind: NoticeKind, deadline: int, detail: str) -> Notice:
    """Its detail clipped, and kept to characters any EC2 tag value takes."""
    return Notice(
        kind=kind, deadline_unix=deadline, detail=_UNSAFE.sub("_", detail)[:NOTICE_DETAIL_MAX]
    )


# -- the notice as an instance's tag, and which of two notices stands ---------------------------


def notice_tag(notice: Notice) -> str:
    """`kind:deadline:detail`, at most 227 characters (an EC2 tag value takes 256)."""
    return f"{notice.kind}:{notice.deadline_unix}:{notice.detail}"


def notice_from_tag(value: str | None) -> Notice | None:
    """The notice a `bigfleet:notice` tag holds; None for none, or for a tag that is not one."""
    if not value:
        return None
    kind, _, rest = value.partition(":")
    deadline, _, detail = rest.partition(":")
    try:
        return Notice(kind=NoticeKind(kind), deadline_unix=int(deadline), detail=detail)
    except ValueError:
        return None


def _urgency(notice: Notice) -> tuple[int, int]:
    if notice.kind is NoticeKind.REBALANCE:
        return (0, 0)
    return (1, -notice.deadline_unix)


def stronger(new: Notice, old: Notice | None) -> bool:
    """Whether `new` replaces `old`: a notice with a deadline replaces a rebalance one, and
    the earlier deadline stands; a repeat (or anything later) changes nothing."""
    return old is None or _urgency(new) > _urgency(old)


def strongest(*notices: Notice | None) -> Notice | None:
    """The most urgent of these notices (None given none)."""
    found: Notice | None = None
    for notice in notices:
        if notice is not None and stronger(notice, found):
            found = notice
    return found


def remember(kept: MutableMapping[str, Notice], instance_id: str, notice: Notice) -> None:
    """Keep a notice EC2 would not take as a tag, at most MAX_REMEMBERED (the oldest go)."""
    kept.pop(instance_id, None)
    kept[instance_id] = notice
    while len(kept) > MAX_REMEMBERED:
        del kept[next(iter(kept))]


# -- the queue ----------------------------------------------------------------------------------

APPLIED, IGNORED, FOREIGN, RETRY = "applied", "ignored", "foreign", "retry"


class NoticeQueue:
    """The provider's SQS queue. `poll(take)` receives up to RECEIVES_PER_POLL batches of 10
    (WaitTimeSeconds 0: it never waits), parses each message and hands the events of a batch to
    `take`, which answers one outcome per event (APPLIED, IGNORED, FOREIGN: not this provider's
    instance, RETRY: not taken now). Every message is deleted but RETRY ones, which the queue
    shows again after its visibility timeout. `counts`: messages by outcome, MALFORMED too."""

    def __init__(self, client: Any, url: str, provider: str) -> None:
        self.client, self.url, self.provider = client, url, provider
        self.counts: Counter[str] = Counter()

    def poll(self, take: Callable[[list[Event]], list[str]]) -> None:
        """Never raises for the queue's sake: a queue EC2 or SQS will not serve now is logged,
        and the provider answers from the notices it has."""
        for _ in range(RECEIVES_PER_POLL):
            try:
                reply = self._call("ReceiveMessage", MaxNumberOfMessages=10, WaitTimeSeconds=0)
            except (ClientError, BotoCoreError) as err:
                self.counts["unreadable"] += 1
                log.warning("provider %s: queue %s not read: %s", self.provider, self.url, err)
                return
            messages = reply.get("Messages", [])
            if not messages:
                return
            events, held = [], []
            for message in messages:
                try:
                    event = parse(message.get("Body", ""))
                except BadEvent as err:
                    self.counts["malformed"] += 1
                    log.warning(
                        "provider %s: notice queue message %s is malformed, deleted: %s",
                        self.provider,
                        message.get("MessageId", "?"),
                        err,
                    )
                    self._delete(message)
                    continue
                if event is None:
                    self.counts[IGNORED] += 1
                    self._delete(message)
                else:
                    events.append(event)
                    held.append(message)
            if not events:
                continue
            try:
                outcomes = take(events)
            except (ProviderError, ClientError, BotoCoreError) as err:
                # EC2 not answering (throttled): the batch is read again after its timeout.
                log.warning("provider %s: notices not taken now: %s", self.provider, err)
                return
            for message, outcome in zip(held, outcomes, strict=True):
                self.counts[outcome] += 1
                if outcome != RETRY:
                    self._delete(message)

    def _delete(self, message: dict[str, Any]) -> None:
        try:
            self._call("DeleteMessage", ReceiptHandle=message["ReceiptHandle"])
        except (ClientError, BotoCoreError) as err:  # shown again later; taking it is idempotent
            log.warning("provider %s: notice message not deleted: %s", self.provider, err)

    def _call(self, action: str, **kwargs: Any) -> Any:
        """One SQS call on the queue (the IAM policy allows exactly these actions)."""
        method = getattr(self.client, re.sub(r"(?<!^)(?=[A-Z])", "_", action).lower())
        return method(QueueUrl=self.url, **kwargs)
