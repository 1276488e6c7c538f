"""The EC2 calls one provider makes and what their errors mean: throttling becomes RateLimited
(a hint doubling per throttle of that action in a row), no capacity `NoCapacity`; the
paged DescribeInstances by the provider's tag, tagging, and the fencing epochs noted from every
instance described (bigfleet/providers/fencing.py). The `bigfleet:*` tag names live here."""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Callable, Iterator
from typing import Any

from botocore.exceptions import ClientError

from ...epochs import latest_issued
from ...models import FencingToken
from ..base import RateLimited
from ..fencing import OwnFences
from .config import Ec2Config
from .records import Offering, Record, instance_tags

TAG = "bigfleet:"
T_PROVIDER, T_MACHINE, T_SHARD, T_EPOCH = (
    TAG + k for k in ("provider", "machine-id", "shard", "epoch")
)
T_BATCH, T_CLUSTER, T_CONFIGURE = TAG + "batch", TAG + "cluster", TAG + "configure"
T_CONFIGURE_AT, T_DRAIN_UNTIL, T_DELETING = (
    TAG + "configure-at",
    TAG + "drain-until",
    TAG + "deleting",
)
T_NOTICE = TAG + "notice"
ICE_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "UnfulfillableCapacity",
        "MaxSpotInstanceCountExceeded",
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
    }
)
THROTTLE_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})
RECENT_SECONDS = 120.0  # how long a launch reply stands in for an instance EC2 does not list yet
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")
# A spot request already gone (cancelled, closed) is what the cancel wanted.
SPOT_REQUEST_GONE = frozenset(
    {"InvalidSpotInstanceRequestID.NotFound", "InvalidSpotInstanceRequestID.Malformed"}
)


class NoCapacity(Exception):
    """EC2 has no capacity (or no quota) for an offering right now."""


def error_code(err: BaseException) -> str:
    """EC2's error code behind a ClientError, or the RateLimited / NoCapacity made of one."""
    cause = err if isinstance(err, ClientError) else err.__cause__
    if isinstance(cause, ClientError):
        return str(cause.response.get("Error", {}).get("Code", ""))
    return type(err).__name__


def error_message(err: BaseException) -> str:
    """EC2's message behind a ClientError, or the error's own text."""
    cause = err if isinstance(err, ClientError) else err.__cause__
    if isinstance(cause, ClientError):
        return str(cause.response.get("Error", {}).get("Message", ""))
    return str(err)


def client_token(*parts: str) -> str:
    """EC2's ClientToken (at most 64 ASCII characters) for an operation: a hash of its parts."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:64]


def make_client(config: Ec2Config, service: str, session: Any) -> Any:
    """A boto3 client of the config's region and endpoint (EC2's, and SQS's for notices)."""
    import boto3
    from botocore.config import Config

    return (session or boto3.session.Session()).client(
        service,
        region_name=config.region,
        endpoint_url=config.endpoint_url,
        config=Config(retries={"mode": "standard", "max_attempts": config.sdk_max_attempts}),
    )


class Ec2Calls(OwnFences):
    """One provider's EC2 client and its calls: throttle counters per action, and the fencing
    epochs (shard -> highest epoch) noted from the `bigfleet:epoch` tags of every instance
    described."""

    def __init__(self, config: Ec2Config, client: Any, clock: Callable[[], float]) -> None:
        self.config = config
        self.name = config.name
        self.client = client
        self._clock = clock
        self._epochs: dict[int, int] = {}
        self._throttles: dict[str, int] = {}  # EC2 throttles each action on its own bucket

    def _tag(
        self,
        record: Record,
        token: FencingToken | None,
        tags: dict[str, str],
        remove: builtins.list[str] | None = None,
    ) -> None:
        if token is not None:
            tags = {**tags, T_SHARD: str(token.shard_id), T_EPOCH: str(token.shard_epoch)}
        self._call(
            "CreateTags",
            self.client.create_tags,
            Resources=[record.instance_id],
            Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
        )
        self._untag(record, remove or [])
        record.tags = {**record.tags, **tags}

    def _untag(self, record: Record, keys: builtins.list[str]) -> None:
        gone = [k for k in keys if k in record.tags]
        if gone:
            self._call(
                "DeleteTags",
                self.client.delete_tags,
                Resources=[record.instance_id],
                Tags=[{"Key": k} for k in gone],
            )
        record.tags = {k: v for k, v in record.tags.items() if k not in gone}

    def _call(self, name: str, method: Callable[..., Any], **kwargs: Any) -> Any:
        """One EC2 call: throttling becomes RateLimited (exponential hint), capacity NoCapacity."""
        try:
            reply = method(**kwargs)
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", ""))
            if code in THROTTLE_CODES:
                n = self._throttles[name] = self._throttles.get(name, 0) + 1
                cfg = self.config
                hint = min(cfg.backoff_cap_seconds, cfg.backoff_seconds * 2 ** (n - 1))
                raise RateLimited(self.name, name, hint) from err
            if code in ICE_CODES:
                raise NoCapacity(code) from err
            raise
        self._throttles.pop(name, None)
        if name == "DescribeInstances":
            for reservation in reply.get("Reservations", []):
                for instance in reservation.get("Instances", []):
                    self._note_epoch(instance_tags(instance))
        return reply

    def _note_epoch(self, tags: dict[str, str]) -> None:
        try:
            shard, epoch = int(tags[T_SHARD]), int(tags[T_EPOCH])
        except (KeyError, ValueError):
            return
        if epoch > latest_issued(self._clock()):
            return  # never issued (a tag written before issue 30): it fences nothing
        if epoch > self._epochs.get(shard, -1):
            self._epochs[shard] = epoch

    def _describe(
        self,
        offerings: builtins.list[Offering],
        extra: builtins.list[dict[str, Any]] | None = None,
    ) -> Iterator[dict[str, Any]]:
        filters = [{"Name": f"tag:{T_PROVIDER}", "Values": [self.name]}, *(extra or [])]
        if len(offerings) == 1:
            spec = offerings[0].spec
            filters.append({"Name": "instance-type", "Values": [spec.instance_type]})
            filters.append({"Name": "availability-zone", "Values": [spec.zone]})
        kwargs: dict[str, Any] = {"Filters": filters, "MaxResults": 1000}
        while True:
            page = self._call("DescribeInstances", self.client.describe_instances, **kwargs)
            for reservation in page.get("Reservations", []):
                yield from reservation.get("Instances", [])
            if not page.get("NextToken"):
                return
            kwargs["NextToken"] = page["NextToken"]

    def _refresh(self, record: Record) -> Record:
        page = self._call(
            "DescribeInstances", self.client.describe_instances, InstanceIds=[record.instance_id]
        )
        for reservation in page.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                record.instance, record.tags = instance, instance_tags(instance)
        return record
