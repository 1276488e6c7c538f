"""A real cloud provider: one AWS account in one region, driven through boto3 (issue 12).

Quota is shown as speculative machines (seed §10): each configured offering (instance type, zone,
on-demand or spot) with a `count` is a pool of slot ids `{name}-{type}-{zone}-{capacity}-NNNNN`;
an instance tagged `bigfleet:machine-id` holds its slot, the lowest free indices are listed as
SPECULATIVE. EC2 is the only state: every state is derived from an instance's EC2 state and its
`bigfleet:*` tags, so a fresh provider object rebuilds the same machines (List is paged
DescribeInstances by the `bigfleet:provider` tag; Get, and the lookup before Configure, Drain and
Delete, is one DescribeInstances by the machine's `bigfleet:machine-id` tag, and lists the
offering only when no instance holds the slot, to answer SPECULATIVE or not found as List
would). What is kept in memory is a cache: fencing epochs (kept for calls that succeed, and
rebuilt from the highest `bigfleet:epoch` tag of a shard's instances that is not beyond the
clock; bigfleet/providers/fencing.py), the throttle counters, offerings out after an
insufficient-capacity answer, blobs on their way, the last refusal of a step EC2 must finish
(below), and launch replies for 2 minutes (DescribeInstances may not list a new instance at once).

- Create: one RunInstances per offering of the batch (MinCount = MaxCount), tagged at launch
  with the provider, shard, epoch and a batch tag (`bigfleet:batch`, also EC2's ClientToken, a
  hash of the idempotency key); then one CreateTags per instance names its machine. A retry finds
  the batch by its tag and names the instances that are still unnamed, launching nothing.
- Configure (seed §7 for cloud): the bootstrap blob must become the instance's user data, which
  EC2 only changes on a stopped instance. So: tag `bigfleet:cluster` and `bigfleet:configure =
  stopping`, StopInstances (not needed for an IDLE instance a drain stopped already); once
  stopped (on this call or a later Get/List), ModifyInstanceAttribute UserData, StartInstances,
  tag `configure = starting`. Running again = CONFIGURED. The instance boots again with the new
  user data and its old instance id, and cloud-init runs user data once per instance id: the
  image must run it on every boot (`cloud_final_modules: [[scripts-user, always]]` in its
  cloud.cfg, a `#cloud-boothook` blob, or `cloud-init clean` on shutdown, which alone re-runs a
  `#cloud-config` blob's per-instance modules); otherwise the blob is delivered and never runs
  (docs/providers.md). Limits: EBS-backed instances only; a one-time spot instance (launched
  before spot became persistent) cannot be stopped (EC2 refuses: the configure is refused with
  InvalidTransition, its tags rolled back); the blob waits in memory between the stop and the
  start, so a provider restarted in that window reports the machine FAILED (from CONFIGURING)
  until a configure brings a blob again.
- Steps EC2 must finish (the start of a configure, the stop of a drain) are taken on the
  Configure or Drain call and retried on every later Get/List that finds them due. A step EC2
  refuses (InsufficientInstanceCapacity on the start of an instance whose capacity went
  elsewhere while it was stopped, throttling, anything else) never fails that Get or List, nor
  the call that started the transition: the machine stays CONFIGURING (or DRAINING) with the
  refusal as its `last_error`, the blob stays in memory, and the step is tried again on the next
  Get/List (after the throttle's hint, when throttled; an insufficient-capacity answer also takes
  the offering out, as on RunInstances). A start that never succeeds ends in the transition's
  timeout, which is the workflow's to turn into FAILED.
- Drain: the operator drains the node for the grace; the provider tags `bigfleet:drain-until`
  (now + grace, now if forced) and reports DRAINING until then. When the grace is over (at
  once if forced) it stops the instance: DRAINING while it stops, IDLE once stopped. A drained
  instance must not keep running the old cluster's workloads nor stay joined to it while BigFleet
  counts it IDLE, and the next configure replaces its user data anyway, which needs it stopped:
  so a graceful drain stops it too, once its grace is over (a stopped instance also bills only
  its volumes while it waits). An instance EC2 refuses to stop at all (UnsupportedOperation: a
  legacy one-time spot instance) is reported IDLE still running, its `last_error` saying so:
  delete it rather than configure it.
- Delete: tag `bigfleet:deleting`, cancel the instance's spot request if it has one
  (CancelSpotInstanceRequests: a persistent request would launch a replacement), then
  TerminateInstances (a repeat is harmless; a stopped IDLE instance is terminated as well).
  Terminated and tagged: the slot is SPECULATIVE again. Terminated without the tag (someone
  else): FAILED with `last_error`, until the shard deletes it (the delete tags it if EC2 still
  lets it, and is remembered in memory otherwise).
- Spot: launched through RunInstances as a `persistent` request with interruption behaviour
  `stop`, the only kind EC2 lets BigFleet stop (for Configure and Drain). An interruption stops
  the instance (StateReason `Server.SpotInstanceShutdown`, or it is terminated with
  `Server.SpotInstanceTermination`): FAILED with `last_error` naming the spot interruption, until
  the shard deletes it (EC2 alone may restart an interrupted instance, which it does when
  capacity returns; the delete cancels the request first, so it does not). The request is tagged
  with the provider at launch, so the IAM policy can scope its cancel. moto cannot prove the
  spot part: it accepts the persistent/stop options but ignores them, gives the instance no
  SpotInstanceRequestId, stops spot instances like any other and never interrupts; the tests
  check the request BigFleet sends and inject the rest (a request id, an interruption reason).
- InsufficientInstanceCapacity (and its kin, VcpuLimitExceeded included: an account's vCPU
  quota is spent): the offering is out for `ice_seconds` (Karpenter's 3 minutes), its slots are
  not listed, and the batch raises QuotaExhausted.
- `account_limit`: the account's `max-instances` (DescribeAccountAttributes) caps the provider
  as a whole: the speculative slots listed across all offerings never exceed it minus the
  provider's instances (every offering, stopped ones too: they may start again), shared out
  round-robin in the config's order. Instances outside BigFleet count against the account too
  and are not seen. Most accounts today are limited by vCPU quotas instead (Service Quotas, e.g.
  L-1216C47A "Running On-Demand Standard instances", in vCPUs across the instance families of
  its group); the provider does not read them (servicequotas:GetServiceQuota per quota code, a
  family-to-quota table and the account's other instances; moto does not serve EC2's), so set
  each offering's `count` to what the quota allows. A launch beyond the quota answers
  VcpuLimitExceeded, treated as insufficient capacity.
- Notices (issue 33): with `interruption_queue_url`, a List with `noticed` first reads the SQS
  queue EventBridge puts EC2's warnings in (spot interruption, rebalance recommendation, AWS
  Health scheduled change, state change; bigfleet/providers/ec2_notices.py) and tags each of the
  provider's instances it names `bigfleet:notice` (kind, deadline, detail), so every Get and List
  reports it as `Machine.notice`, a fresh provider object too, until the machine is deleted (its
  slot SPECULATIVE again). A stop or termination BigFleet made itself (a configure, a drain, a
  delete) is not a notice, nor is a stop of an instance that runs again. A notice EC2 will not
  take as a tag (a terminated instance) is kept in memory (bounded); an earlier deadline
  replaces a later one, and any deadline a rebalance notice.
- Prices: from the config; spot ones are refreshed from the spot price history every
  `spot_price_seconds` (on List), or when `refresh_spot_prices()` is called.

- RequestLimitExceeded / Throttling: RateLimited with a hint doubling per throttle of that action
  in a row (EC2 keeps a token bucket per action), capped; the SDK's own retries are few.

IAM: exactly the EC2 actions called here: ec2:RunInstances, CreateTags, DeleteTags,
DescribeInstances, StopInstances, StartInstances, ModifyInstanceAttribute, TerminateInstances,
CancelSpotInstanceRequests, DescribeSpotPriceHistory, DescribeAccountAttributes (and
iam:PassRole for an instance profile), the mutating ones scoped to instances tagged
`bigfleet:provider`; with a queue, sqs:ReceiveMessage and sqs:DeleteMessage on it;
examples/ec2-iam-policy.json is that policy (a test keeps its actions equal to the calls made
here and in ec2_notices.py).
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import hashlib
import pathlib
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import labels
from ..epochs import latest_issued
from ..models import (
    BootstrapBlob,
    CapacityType,
    Dollars,
    FencingToken,
    HostRef,
    ListFilter,
    Machine,
    MachineState,
    Name,
    Notice,
    Probability,
    Resources,
    TransitionAck,
)
from ..yamlfile import load_model
from . import ec2_notices as notices
from .base import (
    MAX_CREATE_BATCH,
    InvalidTransition,
    MachineNotFound,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    check_grace,
)
from .fencing import fenced
from .slots import slot_id

S = MachineState
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


def load_config(path: str | pathlib.Path) -> Ec2Config:
    """An EC2 provider's YAML config file; ValueError naming the file and every bad field."""
    return load_model(pathlib.Path(path), Ec2Config, "EC2 provider config", ValueError)


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Ec2Offering(_Spec):
    """One quota line: `count` instances of a type in a zone, on-demand or spot."""

    instance_type: Name
    zone: Name
    capacity_type: Literal["on-demand", "spot"]
    price_per_hour: Dollars
    interruption_probability: Probability = 0.0
    resources: Resources = Resources()
    arch: Name = "amd64"
    count: Annotated[int, Field(ge=0, le=100_000)]


class Ec2Config(_Spec):
    """An EC2 provider: an account-region, its offerings, and how its instances are launched."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$")]
    region: Name
    endpoint_url: str | None = None  # moto, or a VPC endpoint
    offerings: list[Ec2Offering] = Field(min_length=1)
    image_id: Name
    subnets: dict[str, str] = Field(default_factory=dict)  # zone -> subnet id
    security_groups: list[str] = Field(default_factory=list)
    key_name: str | None = None
    instance_profile_arn: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)  # added to every instance
    ice_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 180.0
    max_batch: Annotated[int, Field(ge=1, le=MAX_CREATE_BATCH)] = MAX_CREATE_BATCH
    account_limit: bool = False  # cap the provider's slots by the account's max-instances
    # Refresh spot prices from the spot price history this often (on List); none: the config's.
    spot_price_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    sdk_max_attempts: Annotated[int, Field(ge=1, le=10)] = 2
    backoff_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    backoff_cap_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 60.0
    # The SQS queue EventBridge puts EC2's interruption and maintenance events in (issue 33).
    interruption_queue_url: Annotated[str, Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _distinct(self) -> Ec2Config:
        keys = [(o.instance_type, o.zone, o.capacity_type) for o in self.offerings]
        if len(set(keys)) != len(keys):
            raise ValueError("offerings: two lines for the same instance type, zone and capacity")
        return self


@dataclass
class _Offering:
    spec: Ec2Offering
    prefix: str

    @property
    def key(self) -> str:
        s = self.spec
        return f"{s.instance_type}/{s.zone}/{s.capacity_type}"


@dataclass
class _Record:
    """What EC2 says about one machine id: its newest instance and that instance's tags."""

    machine_id: str
    offering: _Offering
    index: int
    instance: dict[str, Any]
    tags: dict[str, str]

    @property
    def instance_id(self) -> str:
        return str(self.instance["InstanceId"])

    @property
    def ec2_state(self) -> str:
        return str(self.instance["State"]["Name"])


def client_token(*parts: str) -> str:
    """EC2's ClientToken (at most 64 ASCII characters) for an operation: a hash of its parts."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:64]


class Ec2Provider:
    """The CapacityProvider protocol over EC2 (module docstring). Thread-safe: one lock."""

    blocking = True
    supports_delete = True

    def __init__(
        self,
        config: Ec2Config,
        session_or_client: Any = None,
        *,
        clock: Callable[[], float] = time.time,
        sqs_client: Any = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self._clock = clock
        self._lock = threading.RLock()
        given = session_or_client is not None and hasattr(session_or_client, "meta")
        session = None if given else session_or_client
        self.client = session_or_client if given else self._client("ec2", session)
        self._queue: notices.NoticeQueue | None = None
        if config.interruption_queue_url:
            sqs = sqs_client or self._client("sqs", session)
            self._queue = notices.NoticeQueue(sqs, config.interruption_queue_url, self.name)
        self._offerings = [
            _Offering(
                o,
                slot_id(config.name, o.instance_type, o.zone, o.capacity_type),
            )
            for o in config.offerings
        ]
        self._epochs: dict[int, int] = {}
        self._epochs_loaded = False
        self._unavailable: dict[str, float] = {}  # offering key -> until
        self._throttles: dict[str, int] = {}  # EC2 throttles each action on its own bucket
        self._blobs: dict[str, bytes] = {}  # instance id -> user data awaiting its stop
        self._started: set[str] = set()  # blob delivered and started, `starting` not tagged yet
        self._errors: dict[str, str] = {}  # instance id -> why its due step did not happen
        self._held: dict[str, float] = {}  # action -> until: throttled, steps wait its hint
        self._unstoppable: set[str] = set()  # drained instances EC2 refuses to stop at all
        self._external_deletes: set[str] = set()  # instances terminated elsewhere, then deleted
        self._account_max: int | None = None
        self._prices: dict[str, float] = {}  # offering key -> spot price from EC2's history
        self._prices_due = 0.0  # when `spot_price_seconds` asks for the next refresh
        self._recent: dict[str, tuple[float, _Record]] = {}  # machine id -> its fresh launch
        self._noticed: dict[str, Notice] = {}  # instance id -> a notice EC2 would not tag

    def _client(self, service: str, session: Any) -> Any:
        """A boto3 client of the config's region and endpoint (EC2's, and SQS's for notices)."""
        import boto3
        from botocore.config import Config

        cfg = self.config
        return (session or boto3.session.Session()).client(
            service,
            region_name=cfg.region,
            endpoint_url=cfg.endpoint_url,
            config=Config(retries={"mode": "standard", "max_attempts": cfg.sdk_max_attempts}),
        )

    # -- the CapacityProvider calls ---------------------------------------------------------

    def create(
        self, machine_ids: builtins.list[str], token: FencingToken, *, key: str = ""
    ) -> builtins.list[TransitionAck]:
        if len(machine_ids) > self.config.max_batch:
            raise ValueError(
                f"create takes at most {self.config.max_batch} machine ids per call, "
                f"got {len(machine_ids)}"
            )
        if len(set(machine_ids)) != len(machine_ids):
            raise ValueError("create: a machine id is listed twice")
        with self._lock, self._fenced(token):
            groups: dict[str, tuple[_Offering, list[str]]] = {}
            for machine_id in machine_ids:
                offering, _ = self._parse(machine_id)
                if self._out(offering):
                    raise QuotaExhausted(self.name, machine_id, offering.key)
                groups.setdefault(offering.key, (offering, []))[1].append(machine_id)
            offerings = [o for o, _ in groups.values()]
            records = self._scan(offerings)
            missing = {k: self._missing(ids, records) for k, (_, ids) in groups.items()}
            if any(missing.values()):
                # The slots must be listed: one beyond the quota, or out of capacity, is not.
                # Read once for the batch: launching one offering shifts an account-wide cap.
                listed = {m.id for m in self._listing(offerings) if m.state is S.SPECULATIVE}
                for offering, _ in groups.values():
                    for machine_id in missing[offering.key]:
                        if machine_id not in listed:
                            raise QuotaExhausted(self.name, machine_id, offering.key)
            for offering, ids in groups.values():
                if missing[offering.key]:
                    self._create_group(offering, ids, missing[offering.key], records, token, key)
            acks = []
            for machine_id in machine_ids:
                record = records[machine_id]
                acks.append(self._ack(f"{self.name}:create:{record.instance_id}", record))
            return acks

    def configure(
        self,
        machine_id: str,
        blob: BootstrapBlob,
        cluster: str,
        token: FencingToken,
        *,
        key: str = "",
    ) -> TransitionAck:
        with self._lock, self._fenced(token):
            record = self._live(machine_id, "configure")
            machine = self._machine(record)
            op = f"{self.name}:configure:{record.instance_id}:{record.tags.get(T_CONFIGURE_AT, '')}"
            if machine.state in (S.CONFIGURING, S.CONFIGURED) and machine.cluster == cluster:
                if machine.state is S.CONFIGURING and record.tags.get(T_CONFIGURE) == "stopping":
                    # The repeat may carry the blob a restart lost, or find the stop never
                    # reached EC2 (throttled): hand the blob over and stop again.
                    self._blobs[record.instance_id] = blob.user_data
                    started = record.instance_id in self._started
                    if record.ec2_state in ("running", "pending") and not started:
                        self._stop(record, machine_id)
                    self._advance(record)
                    machine = self._machine(record)
                return TransitionAck(operation_id=op, machine=machine)
            failed_configure = machine.state is S.FAILED and machine.failed_from is S.CONFIGURING
            if machine.state is not S.IDLE and not failed_configure:
                raise InvalidTransition(
                    self.name, machine_id, machine.state, "configure", "", machine.failed_from
                )
            now = int(self._clock())
            self._blobs[record.instance_id] = blob.user_data
            self._errors.pop(record.instance_id, None)
            self._started.discard(record.instance_id)
            fence_tags = {k: record.tags.get(k, "") for k in (T_SHARD, T_EPOCH)}
            self._tag(
                record,
                token,
                {T_CLUSTER: cluster, T_CONFIGURE: "stopping", T_CONFIGURE_AT: str(now)},
                remove=[T_DRAIN_UNTIL],
            )
            if record.ec2_state != "stopped":  # an IDLE instance a drain stopped needs no stop
                self._stop(record, machine_id, fence_tags)
            self._advance(record)  # a refused start leaves it CONFIGURING with the refusal
            op = f"{self.name}:configure:{record.instance_id}:{now}"
            return TransitionAck(operation_id=op, machine=self._machine(record))

    def _stop(
        self, record: _Record, machine_id: str, fence_tags: dict[str, str] | None = None
    ) -> None:
        """The stop a configure begins with. `fence_tags`: the shard and epoch tags the
        instance had before this configure tagged it, put back if EC2 refuses the stop (a
        refused configure moves no fencing epoch, not even after a restart)."""
        try:
            self._call(
                "StopInstances", self.client.stop_instances, InstanceIds=[record.instance_id]
            )
        except ClientError as err:  # e.g. a one-time spot instance: EC2 cannot stop it
            self._blobs.pop(record.instance_id, None)
            self._untag(record, [T_CLUSTER, T_CONFIGURE, T_CONFIGURE_AT])
            if fence_tags is not None:
                with contextlib.suppress(ProviderError, ClientError):  # best effort
                    kept = {k: v for k, v in fence_tags.items() if v}
                    gone = [k for k, v in fence_tags.items() if not v]
                    if kept:
                        self._tag(record, None, kept, remove=gone)
                    else:
                        self._untag(record, gone)
            raise InvalidTransition(
                self.name, machine_id, S.IDLE, "configure", f"EC2 cannot stop it: {err}"
            ) from None
        self._refresh(record)

    def drain(
        self,
        machine_id: str,
        grace_seconds: float,
        token: FencingToken,
        force: bool = False,
        *,
        key: str = "",
    ) -> TransitionAck:
        check_grace(machine_id, grace_seconds)
        with self._lock, self._fenced(token):
            record = self._live(machine_id, "drain")
            machine = self._machine(record)
            until = self._clock() + (0.0 if force else grace_seconds)
            if machine.state is S.DRAINING:
                if until < float(record.tags[T_DRAIN_UNTIL]):  # a shorter grace pulls it forward
                    self._tag(record, token, {T_DRAIN_UNTIL: f"{until:.3f}"})
            elif machine.state is S.IDLE and T_DRAIN_UNTIL in record.tags:
                pass  # drained already: the repeat of a finished drain
            elif machine.state is S.CONFIGURED or (
                machine.state is S.FAILED and force and machine.failed_from is S.CONFIGURING
            ):
                # A configure that failed is given up: its blob is not delivered any more.
                self._blobs.pop(record.instance_id, None)
                self._started.discard(record.instance_id)
                self._tag(record, token, {T_DRAIN_UNTIL: f"{until:.3f}"})
            else:
                why = (
                    "a failed machine is only drained with force=True"
                    if machine.failed_from
                    else ""
                )
                raise InvalidTransition(
                    self.name, machine_id, machine.state, "drain", why, machine.failed_from
                )
            # A grace already over (forced): the stop is taken now; refused, it is retried on
            # every Get/List and the machine stays DRAINING with the refusal.
            self._advance(record)
            op = f"{self.name}:drain:{record.instance_id}:{record.tags.get(T_CONFIGURE_AT, '')}"
            return TransitionAck(operation_id=op, machine=self._machine(record))

    def delete(self, machine_id: str, token: FencingToken, *, key: str = "") -> TransitionAck:
        with self._lock, self._fenced(token):
            record = self._find(machine_id)
            if record is None:
                raise InvalidTransition(self.name, machine_id, S.SPECULATIVE, "delete")
            op = f"{self.name}:delete:{record.instance_id}"
            machine = self._machine(record)
            if machine.state in (S.DELETING, S.SPECULATIVE):
                return TransitionAck(operation_id=op, machine=machine)
            # A drain whose grace is over only waits for its stop: terminating ends it as well.
            drained = machine.state is S.DRAINING and self._drain_over(record)
            if machine.state is not S.IDLE and machine.state is not S.FAILED and not drained:
                raise InvalidTransition(self.name, machine_id, machine.state, "delete")
            if record.ec2_state == "terminated":  # gone already (interrupted): acknowledge it
                self._external_deletes.add(record.instance_id)
                try:  # remembered across a restart too, where EC2 still tags it
                    self._tag(record, token, {T_DELETING: str(int(self._clock()))})
                except ClientError:
                    pass
                self._cancel_spot_request(record)
            else:
                self._tag(record, token, {T_DELETING: str(int(self._clock()))})
                self._cancel_spot_request(record)
                self._call(
                    "TerminateInstances",
                    self.client.terminate_instances,
                    InstanceIds=[record.instance_id],
                )
                record = self._refresh(record)
            for memo in (self._blobs, self._errors, self._noticed):
                memo.pop(record.instance_id, None)
            return TransitionAck(operation_id=op, machine=self._machine(record))

    def _cancel_spot_request(self, record: _Record) -> None:
        """A persistent spot request outlives its instance: terminated alone, EC2 launches a
        replacement (untagged, unseen by BigFleet, billed). So the request is cancelled first;
        one already gone is fine."""
        request = record.instance.get("SpotInstanceRequestId")
        if not request:
            return
        try:
            self._call(
                "CancelSpotInstanceRequests",
                self.client.cancel_spot_instance_requests,
                SpotInstanceRequestIds=[request],
            )
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") not in SPOT_REQUEST_GONE:
                raise

    def get(self, machine_id: str) -> Machine:
        """One DescribeInstances by the machine's tag; the offering is listed (a scan of its
        instances) only for a slot no instance holds: SPECULATIVE or not found, as in List."""
        with self._lock:
            record = self._find(machine_id)
            if record is not None:
                self._advance(record)
                machine = self._machine(record)
                if machine.state is not S.SPECULATIVE:
                    return machine
            offering, _ = self._parse(machine_id)
            for machine in self._listing([offering]):
                if machine.id == machine_id:
                    return machine
            raise MachineNotFound(self.name, machine_id)

    def list(self, filter: ListFilter) -> builtins.list[Machine]:
        with self._lock:
            self._refresh_prices_if_due()
            if filter.noticed and self._queue is not None:
                self._queue.poll(self._take_notices)
            offerings = [
                o
                for o in self._offerings
                if (not filter.zone or o.spec.zone == filter.zone)
                and (not filter.instance_type or o.spec.instance_type == filter.instance_type)
            ]
            states = set(filter.states)
            found = [
                m
                for m in self._listing(offerings)
                if (not states or m.state in states) and (m.notice or not filter.noticed)
            ]
            found.sort(key=lambda m: m.id)
            return found[: filter.max_results] if filter.max_results else found

    # -- notices (ec2_notices.py) -----------------------------------------------------------

    def notice_counts(self) -> dict[str, int]:
        """Queue messages so far by outcome: applied, ignored, foreign, malformed, retry."""
        return dict(self._queue.counts) if self._queue is not None else {}

    def _take_notices(self, events: builtins.list[notices.Event]) -> builtins.list[str]:
        """Tag the provider's instances the events name (one DescribeInstances per 200 ids);
        an instance not this provider's (another provider, another account) is FOREIGN."""
        ids = sorted({i for event in events for i in event.instance_ids})
        records: dict[str, _Record] = {}
        for at in range(0, len(ids), 200):
            chunk = [{"Name": "instance-id", "Values": ids[at : at + 200]}]
            for instance in self._describe([], chunk):
                record = self._record(instance)
                if record is not None:
                    records[record.instance_id] = record
        outcomes = []
        for event in events:
            mine = [records[i] for i in event.instance_ids if i in records]
            found = {self._take_notice(record, event) for record in mine}
            order = (notices.RETRY, notices.APPLIED, notices.IGNORED)
            outcomes.append(next((o for o in order if o in found), notices.FOREIGN))
        return outcomes

    def _take_notice(self, record: _Record, event: notices.Event) -> str:
        iid = record.instance_id
        if not self._notice_stands(record, event):
            return notices.IGNORED
        tagged = notices.notice_from_tag(record.tags.get(T_NOTICE))
        if notices.stronger(event.notice, tagged):  # not a repeat, nor weaker
            notice = notices.strongest(event.notice, self._noticed.get(iid)) or event.notice
            try:
                self._tag(record, None, {T_NOTICE: notices.notice_tag(notice)})
                self._noticed.pop(iid, None)
            except RateLimited:  # the message stays in the queue, the notice in memory
                notices.remember(self._noticed, iid, notice)
                return notices.RETRY
            except ClientError:  # EC2 will not tag it (terminated): memory keeps it
                notices.remember(self._noticed, iid, notice)
        return notices.APPLIED

    def _notice_stands(self, record: _Record, event: notices.Event) -> bool:
        """Not for a deleted machine; a stop or termination is no notice when BigFleet made it
        (a drain, a configure, a delete) or when the instance runs again (a stale event)."""
        if self._state_of(record)[0] is S.SPECULATIVE:
            return False
        if not event.state:
            return True
        tags, iid = record.tags, record.instance_id
        if record.ec2_state in ("pending", "running"):
            return False
        if T_DELETING in tags or iid in self._external_deletes:
            return False
        ours = T_DRAIN_UNTIL in tags or tags.get(T_CONFIGURE) == "stopping"
        return not (event.state in ("stopping", "stopped") and ours)

    def _notice_of(self, record: _Record) -> Notice | None:
        tagged = notices.notice_from_tag(record.tags.get(T_NOTICE))
        return notices.strongest(tagged, self._noticed.get(record.instance_id))

    # -- offerings, slots and records -------------------------------------------------------

    def refresh_spot_prices(self) -> dict[str, float]:
        """Each spot offering's latest price from DescribeSpotPriceHistory (Linux/UNIX), used in
        place of the configured one from now on; returns what it found, by offering."""
        found: dict[str, float] = {}
        with self._lock:
            for offering in self._offerings:
                spec = offering.spec
                if spec.capacity_type != "spot":
                    continue
                reply = self._call(
                    "DescribeSpotPriceHistory",
                    self.client.describe_spot_price_history,
                    InstanceTypes=[spec.instance_type],
                    AvailabilityZone=spec.zone,
                    ProductDescriptions=["Linux/UNIX"],
                    MaxResults=10,
                )
                history = sorted(
                    reply.get("SpotPriceHistory", []), key=lambda h: h.get("Timestamp")
                )
                if history:
                    found[offering.key] = float(history[-1]["SpotPrice"])
            self._prices.update(found)
        return found

    def _refresh_prices_if_due(self) -> None:
        """With `spot_price_seconds`, the spot prices are refreshed that often; a refresh EC2
        refuses (throttled, no permission) keeps the last prices until the next one is due."""
        every = self.config.spot_price_seconds
        now = self._clock()
        if every is None or now < self._prices_due:
            return
        self._prices_due = now + every
        with contextlib.suppress(ProviderError, ClientError):
            self.refresh_spot_prices()

    def _price(self, offering: _Offering) -> float:
        return self._prices.get(offering.key, offering.spec.price_per_hour)

    def unavailable(self) -> dict[str, float]:
        """Offerings out after an insufficient-capacity answer, and until when."""
        now = self._clock()
        return {k: until for k, until in self._unavailable.items() if until > now}

    def _out(self, offering: _Offering) -> bool:
        return self._unavailable.get(offering.key, 0.0) > self._clock()

    def _parse(self, machine_id: str) -> tuple[_Offering, int]:
        for offering in self._offerings:
            m = re.fullmatch(re.escape(offering.prefix) + r"-(\d{5,})", machine_id)
            if m:
                return offering, int(m.group(1))
        raise MachineNotFound(self.name, machine_id)

    def _listing(self, offerings: builtins.list[_Offering]) -> builtins.list[Machine]:
        """The machines of these offerings: every instance holding a slot, then the lowest free
        slots as SPECULATIVE. With `account_limit` every offering's instances are read, since
        the account's cap is shared by all of them."""
        account_max = self._max_instances()
        scanned = self._offerings if account_max is not None else offerings
        wanted = {o.key for o in offerings}
        records = self._scan(scanned)
        machines = []
        held: dict[str, set[int]] = {o.key: set() for o in scanned}
        live = 0
        for record in records.values():
            if record.offering.key in wanted:
                self._advance(record)
            machine = self._machine(record)
            if machine.state is S.SPECULATIVE:
                continue
            held[record.offering.key].add(record.index)
            live += record.ec2_state != "terminated"
            if record.offering.key in wanted:
                machines.append(machine)
        free = {
            o.key: 0 if self._out(o) else max(0, o.spec.count - len(held[o.key])) for o in scanned
        }
        if account_max is not None:
            free = _share(free, account_max - live)
        for offering in offerings:
            indices, left = held[offering.key], free[offering.key]
            i = 0
            while left:
                if i not in indices:
                    machines.append(self._speculative(offering, i))
                    left -= 1
                i += 1
        return machines

    def _max_instances(self) -> int | None:
        """The account's `max-instances` with `account_limit` (read once), else None."""
        if not self.config.account_limit:
            return None
        if self._account_max is None:
            reply = self._call(
                "DescribeAccountAttributes",
                self.client.describe_account_attributes,
                AttributeNames=["max-instances"],
            )
            values = [
                int(v["AttributeValue"])
                for a in reply.get("AccountAttributes", [])
                if a.get("AttributeName") == "max-instances"
                for v in a.get("AttributeValues", [])
            ]
            # No such attribute: no cap beyond the counts (-1 remembers that it was asked).
            self._account_max = min(values) if values else -1
        return None if self._account_max < 0 else self._account_max

    def _scan(self, offerings: builtins.list[_Offering]) -> dict[str, _Record]:
        """Every instance of these offerings by machine id (the newest one wins, a live one over
        a terminated one); also refreshes the fencing epochs from the tags."""
        records: dict[str, _Record] = {}
        for instance in self._describe(offerings):
            record = self._record(instance)
            if record is None or record.offering not in offerings:
                continue
            old = records.get(record.machine_id)
            if old is None or _rank(record) > _rank(old):
                records[record.machine_id] = record
        # DescribeInstances is eventually consistent: an instance launched a moment ago may not
        # be listed yet. Its launch reply stands in for it, so its slot is not offered again.
        for machine_id in builtins.list(self._recent):
            fresh = self._fresh(machine_id, records.get(machine_id))
            if fresh is not None and fresh.offering in offerings:
                records[machine_id] = fresh
        return records

    def _find(self, machine_id: str) -> _Record | None:
        """The instance holding one slot: one DescribeInstances filtered by its machine-id tag
        (not a scan of its offering, which may run to thousands of instances), or its launch
        reply while EC2 does not list it yet."""
        self._parse(machine_id)  # not one of ours: MachineNotFound
        best: _Record | None = None
        for instance in self._describe([], [{"Name": f"tag:{T_MACHINE}", "Values": [machine_id]}]):
            record = self._record(instance)
            if record is not None and record.machine_id == machine_id:
                if best is None or _rank(record) > _rank(best):
                    best = record
        return self._fresh(machine_id, best)

    def _record(self, instance: dict[str, Any]) -> _Record | None:
        tags = _tags(instance)
        self._note_epoch(tags)
        machine_id = tags.get(T_MACHINE)
        if not machine_id:
            return None
        try:
            offering, index = self._parse(machine_id)
        except MachineNotFound:
            return None
        return _Record(machine_id, offering, index, instance, tags)

    def _fresh(self, machine_id: str, seen: _Record | None) -> _Record | None:
        """What EC2 listed for a machine, or its launch reply if EC2 does not list that
        instance yet (for RECENT_SECONDS; forgotten once listed)."""
        entry = self._recent.get(machine_id)
        if entry is None:
            return seen
        at, record = entry
        if self._clock() - at > RECENT_SECONDS or (seen and seen.instance_id == record.instance_id):
            del self._recent[machine_id]
            return seen
        return record if seen is None or _rank(seen) < _rank(record) else seen

    def _describe(
        self,
        offerings: builtins.list[_Offering],
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

    def _refresh(self, record: _Record) -> _Record:
        page = self._call(
            "DescribeInstances", self.client.describe_instances, InstanceIds=[record.instance_id]
        )
        for reservation in page.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                record.instance, record.tags = instance, _tags(instance)
        return record

    def _live(self, machine_id: str, call: str) -> _Record:
        record = self._find(machine_id)
        if record is None:
            raise InvalidTransition(self.name, machine_id, S.SPECULATIVE, call)
        self._advance(record)
        return record

    # -- mapping EC2 to machines -----------------------------------------------------------

    def _machine(self, record: _Record) -> Machine:
        state, error = self._state_of(record)
        if state is S.SPECULATIVE:
            return self._speculative(record.offering, record.index)
        tags, spec = record.tags, record.offering.spec
        failed_from = None
        if state is S.FAILED:
            failed_from = S.CONFIGURING if tags.get(T_CONFIGURE) == "stopping" else S.IDLE
            if T_CLUSTER in tags and tags.get(T_CONFIGURE) != "stopping":
                failed_from = S.CONFIGURED
        cluster = (
            tags.get(T_CLUSTER) if state in (S.CONFIGURING, S.CONFIGURED, S.DRAINING) else None
        )
        started = 0
        if state is S.CREATING:
            started = int(record.instance["LaunchTime"].timestamp())
        elif state is S.CONFIGURING:
            started = int(tags.get(T_CONFIGURE_AT, "0") or 0)
        elif state is S.DELETING:
            started = int(tags.get(T_DELETING, "0") or 0)
        elif state is S.DRAINING:
            started = int(float(tags[T_DRAIN_UNTIL]))
        return Machine(
            id=record.machine_id,
            state=state,
            host=HostRef(provider=self.name, ref=record.instance_id),
            instance_type=spec.instance_type,
            zone=spec.zone,
            capacity_type=CapacityType(spec.capacity_type),
            price_per_hour=self._price(record.offering),
            interruption_probability=spec.interruption_probability,
            resources=spec.resources,
            labels=self._labels(spec),
            transition_started_unix=max(0, started),
            last_error=error,
            cluster=cluster,
            failed_from=failed_from,
            notice=self._notice_of(record),
        )

    def _state_of(self, record: _Record) -> tuple[MachineState, str]:
        """A machine's state from its instance's EC2 state and tags, and what memory adds: the
        blob of a configure, the refusal of a due step. The drain tag wins over the configure
        ones (a configure removes it: with it, the drain was the last call)."""
        ec2, tags, iid = record.ec2_state, record.tags, record.instance_id
        reason = str(record.instance.get("StateReason", {}).get("Code", ""))
        spot = "spot interruption" if "Spot" in reason else ""
        if ec2 == "terminated":
            if T_DELETING in tags or iid in self._external_deletes:
                return S.SPECULATIVE, ""
            what = spot or "terminated outside BigFleet"
            return S.FAILED, f"instance {iid}: {what} ({reason or 'no reason'})"
        if ec2 == "shutting-down":
            return S.DELETING, ""
        error = self._errors.get(iid, "")
        if spot and ec2 in ("stopping", "stopped"):  # only EC2 may start it again
            return S.FAILED, f"instance {iid} is {ec2}: spot interruption ({reason})"
        phase = tags.get(T_CONFIGURE)
        if T_DRAIN_UNTIL in tags:
            if ec2 == "stopped":
                return S.IDLE, ""
            if iid in self._unstoppable:  # left running, as drains were before they stopped
                return S.IDLE, f"instance {iid}: EC2 cannot stop it, so it still runs; delete it"
            if ec2 == "stopping" or self._drain_over(record):
                return S.DRAINING, error  # on its way out of the cluster: stopping
            return S.DRAINING, ""
        if ec2 in ("stopping", "stopped"):
            if phase == "stopping":
                if ec2 == "stopped" and iid not in self._blobs:
                    return S.FAILED, (
                        f"instance {iid}: the bootstrap blob was lost before it "
                        "was delivered (provider restarted); configure again"
                    )
                return S.CONFIGURING, error
            return S.FAILED, f"instance {iid} is {ec2} (stopped outside BigFleet)"
        if ec2 == "pending":
            if phase in ("stopping", "starting"):
                return S.CONFIGURING, error
            return S.CREATING, ""
        # running
        if phase == "stopping":  # its stop not taken yet, or started and `starting` not tagged
            return S.CONFIGURING, error
        if phase in ("starting", "done") and T_CLUSTER in tags:
            return S.CONFIGURED, ""
        return S.IDLE, ""

    def _drain_over(self, record: _Record) -> bool:
        return float(record.tags[T_DRAIN_UNTIL]) <= self._clock()

    def _due(self, record: _Record) -> tuple[str, ...]:
        """The EC2 actions a transition of this instance waits for: a drain whose grace is over
        stops it; a configure whose stop is done delivers its blob and starts it (then tags it
        `starting`: alone, if the start went through and the tag did not)."""
        tags, iid = record.tags, record.instance_id
        if T_DRAIN_UNTIL in tags:
            if (
                record.ec2_state in ("pending", "running")
                and self._drain_over(record)
                and iid not in self._unstoppable
            ):
                return ("StopInstances",)
            return ()
        if tags.get(T_CONFIGURE) != "stopping" or iid not in self._blobs:
            return ()
        if iid in self._started:
            return ("CreateTags",)
        if record.ec2_state == "stopped":
            return ("ModifyInstanceAttribute", "StartInstances", "CreateTags")
        return ()

    def _advance(self, record: _Record) -> None:
        """Take the steps a transition waits for (`_due`). A refusal never escapes: not from a
        Get or List, which must keep answering for every other machine, nor from the Configure
        or Drain that started the transition (acknowledged all the same). It becomes the
        machine's `last_error`, the blob stays in memory, and the steps are tried again on the
        next Get/List; a throttled action waits for its hint, so a throttled EC2 is not asked
        again by every instance on every List."""
        iid = record.instance_id
        steps = self._due(record)
        if not steps:
            self._errors.pop(iid, None)
            return
        now = self._clock()
        if any(self._held.get(action, 0.0) > now for action in steps):
            return
        action = steps[0]
        try:
            for action in steps:
                if action == "StopInstances":
                    self._call("StopInstances", self.client.stop_instances, InstanceIds=[iid])
                elif action == "ModifyInstanceAttribute":
                    self._call(
                        "ModifyInstanceAttribute",
                        self.client.modify_instance_attribute,
                        InstanceId=iid,
                        UserData={"Value": base64.b64encode(self._blobs[iid])},
                    )
                elif action == "StartInstances":
                    self._call("StartInstances", self.client.start_instances, InstanceIds=[iid])
                    self._started.add(iid)
                else:
                    self._tag(record, None, {T_CONFIGURE: "starting"})
                    self._started.discard(iid)
                    del self._blobs[iid]
        except (RateLimited, _Ice, ClientError) as err:
            code = _code(err)
            if isinstance(err, RateLimited):
                self._held[action] = now + err.retry_after
                when = f"after {err.retry_after:g} s"
            else:
                when = "on the next Get/List"
                if isinstance(err, _Ice):  # no capacity to start it: none to launch either
                    self._unavailable[record.offering.key] = now + self.config.ice_seconds
                elif action == "StopInstances" and code == "UnsupportedOperation":
                    self._unstoppable.add(iid)  # never stoppable (a one-time spot instance)
                    when = "never"
            self._errors[iid] = (
                f"instance {iid}: EC2 refused {action} ({code}: {_message(err)}); "
                f"tried again {when}"
            )
            return
        self._errors.pop(iid, None)
        with contextlib.suppress(ProviderError, ClientError):  # the next Get/List reads it
            self._refresh(record)

    def _speculative(self, offering: _Offering, index: int) -> Machine:
        spec = offering.spec
        return Machine(
            id=f"{offering.prefix}-{index:05d}",
            state=S.SPECULATIVE,
            instance_type=spec.instance_type,
            zone=spec.zone,
            capacity_type=CapacityType(spec.capacity_type),
            price_per_hour=self._price(offering),
            interruption_probability=spec.interruption_probability,
            resources=spec.resources,
            labels=self._labels(spec),
        )

    def _labels(self, spec: Ec2Offering) -> dict[str, str]:
        return labels.machine_labels(
            self.name,
            spec.instance_type,
            spec.zone,
            self.config.region,
            spec.arch,
            str(spec.capacity_type),
        )

    def _ack(self, op: str, record: _Record) -> TransitionAck:
        return TransitionAck(operation_id=op, machine=self._machine(record))

    # -- create ----------------------------------------------------------------------------

    def _missing(self, ids: builtins.list[str], records: dict[str, _Record]) -> builtins.list[str]:
        """The machines of a create still to launch. Already made (a repeat, or made by an
        earlier attempt of this batch): nothing to do, unless the machine is in a state create
        cannot come from."""
        missing = []
        for machine_id in ids:
            record = records.get(machine_id)
            if record is None:
                missing.append(machine_id)
                continue
            state, _ = self._state_of(record)
            if state is S.SPECULATIVE:
                missing.append(machine_id)
            elif state is not S.CREATING and state is not S.IDLE:
                raise InvalidTransition(self.name, machine_id, state, "create")
        return missing

    def _create_group(
        self,
        offering: _Offering,
        ids: builtins.list[str],
        missing: builtins.list[str],
        records: dict[str, _Record],
        token: FencingToken,
        key: str,
    ) -> None:
        batch = client_token(self.name, key, offering.key, *ids) if key else uuid.uuid4().hex
        # An earlier attempt with this key may have launched instances and not named them all.
        launched = [
            i
            for i in self._describe([offering], [{"Name": f"tag:{T_BATCH}", "Values": [batch]}])
            if i["State"]["Name"] in LIVE_STATES
        ]
        unnamed = [i for i in launched if T_MACHINE not in _tags(i)]
        if not launched:
            unnamed = self._run_instances(offering, missing, batch, token)
        unnamed.sort(key=lambda i: (i.get("AmiLaunchIndex", 0), i["InstanceId"]))
        for machine_id, instance in zip(missing, unnamed, strict=False):
            tags = {T_MACHINE: machine_id}
            self._call(
                "CreateTags",
                self.client.create_tags,
                Resources=[instance["InstanceId"]],
                Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
            )
            instance = {
                **instance,
                "Tags": [*instance.get("Tags", []), {"Key": T_MACHINE, "Value": machine_id}],
            }
            _, index = self._parse(machine_id)
            record = _Record(machine_id, offering, index, instance, _tags(instance))
            records[machine_id] = record
            self._recent[machine_id] = (self._clock(), record)
        left = [
            m for m in missing if m not in records or self._state_of(records[m])[0] is S.SPECULATIVE
        ]
        if left:
            raise ProviderError(
                self.name,
                f"provider {self.name}: batch {batch} launched too few instances for "
                f"{', '.join(left)}; retry the create",
            )

    def _run_instances(
        self, offering: _Offering, ids: builtins.list[str], batch: str, token: FencingToken
    ) -> builtins.list[dict[str, Any]]:
        spec, cfg, n = offering.spec, self.config, len(ids)
        tags = {
            **cfg.tags,
            T_PROVIDER: self.name,
            T_SHARD: str(token.shard_id),
            T_EPOCH: str(token.shard_epoch),
            T_BATCH: batch,
        }
        kwargs: dict[str, Any] = {
            "ImageId": cfg.image_id,
            "InstanceType": spec.instance_type,
            "MinCount": n,
            "MaxCount": n,
            "ClientToken": batch,
            "TagSpecifications": [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        }
        subnet = cfg.subnets.get(spec.zone)
        if subnet:
            kwargs["SubnetId"] = subnet
        else:
            kwargs["Placement"] = {"AvailabilityZone": spec.zone}
        if cfg.security_groups:
            kwargs["SecurityGroupIds"] = list(cfg.security_groups)
        if cfg.key_name:
            kwargs["KeyName"] = cfg.key_name
        if cfg.instance_profile_arn:
            kwargs["IamInstanceProfile"] = {"Arn": cfg.instance_profile_arn}
        if spec.capacity_type == "spot":
            # Persistent, stopped when interrupted: the only spot instances EC2 lets BigFleet
            # stop (Configure, Drain). The request is tagged too, so IAM can scope its cancel.
            kwargs["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {
                    "SpotInstanceType": "persistent",
                    "InstanceInterruptionBehavior": "stop",
                },
            }
            kwargs["TagSpecifications"].append(
                {
                    "ResourceType": "spot-instances-request",
                    "Tags": [{"Key": T_PROVIDER, "Value": self.name}],
                }
            )
        try:
            reply = self._call("RunInstances", self.client.run_instances, **kwargs)
        except _Ice as err:
            self._unavailable[offering.key] = self._clock() + cfg.ice_seconds
            raise QuotaExhausted(self.name, ids[0], offering.key) from err
        return list(reply.get("Instances", []))

    # -- fencing, tags, calls --------------------------------------------------------------

    @contextlib.contextmanager
    def _fenced(self, token: FencingToken) -> Iterator[None]:
        """Around one mutating call (bigfleet/providers/fencing.py): an epoch beyond the clock
        or below the shard's is refused before any mutating EC2 call, and the epoch is kept only
        if the call succeeds. After a restart the epochs come back from the instances'
        `bigfleet:epoch` tags (one DescribeInstances, once), which only calls that start
        something write."""
        if token.shard_id not in self._epochs and not self._epochs_loaded:
            for _ in self._describe(self._offerings):
                pass  # _call notes the epochs of every instance it describes
            self._epochs_loaded = True
        with fenced(self.name, self._epochs, token.shard_id, token, self._clock()):
            yield

    def _note_epoch(self, tags: dict[str, str]) -> None:
        try:
            shard, epoch = int(tags[T_SHARD]), int(tags[T_EPOCH])
        except (KeyError, ValueError):
            return
        if epoch > latest_issued(self._clock()):
            return  # never issued (a tag written before issue 30): it fences nothing
        if epoch > self._epochs.get(shard, -1):
            self._epochs[shard] = epoch

    def _tag(
        self,
        record: _Record,
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

    def _untag(self, record: _Record, keys: builtins.list[str]) -> None:
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
        """One EC2 call: throttling becomes RateLimited (exponential hint), capacity _Ice."""
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
                raise _Ice(code) from err
            raise
        self._throttles.pop(name, None)
        if name == "DescribeInstances":
            for reservation in reply.get("Reservations", []):
                for instance in reservation.get("Instances", []):
                    self._note_epoch(_tags(instance))
        return reply


class _Ice(Exception):
    """EC2 has no capacity (or no quota) for an offering right now."""


def _code(err: BaseException) -> str:
    """EC2's error code behind a ClientError, or the RateLimited / _Ice made of one."""
    cause = err if isinstance(err, ClientError) else err.__cause__
    if isinstance(cause, ClientError):
        return str(cause.response.get("Error", {}).get("Code", ""))
    return type(err).__name__


def _message(err: BaseException) -> str:
    cause = err if isinstance(err, ClientError) else err.__cause__
    if isinstance(cause, ClientError):
        return str(cause.response.get("Error", {}).get("Message", ""))
    return str(err)


def _share(free: dict[str, int], budget: int) -> dict[str, int]:
    """Split an account-wide budget of slots between offerings, round-robin in order (each
    offering its fair part, what one cannot use going to the others), none above its free."""
    budget = max(0, budget)
    given = dict.fromkeys(free, 0)
    while budget:
        open_ = [k for k in free if given[k] < free[k]]
        if not open_:
            break
        part = max(1, budget // len(open_))
        for k in open_:
            n = min(part, free[k] - given[k], budget)
            given[k] += n
            budget -= n
            if not budget:
                break
    return given


def _tags(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def _rank(record: _Record) -> tuple[bool, Any]:
    return (record.ec2_state != "terminated", record.instance.get("LaunchTime"))
