"""A real cloud provider: one AWS account in one region, driven through boto3 (issue 12).

Quota is shown as speculative machines (seed §10): each configured offering (instance type, zone,
on-demand or spot) with a `count` is a pool of slot ids `{name}-{type}-{zone}-{capacity}-NNNNN`;
an instance tagged `bigfleet:machine-id` holds its slot, the lowest free indices are listed as
SPECULATIVE. EC2 is the only state: every state is derived from an instance's EC2 state and its
`bigfleet:*` tags, so a fresh provider object rebuilds the same machines (List and Get are
paged DescribeInstances by the `bigfleet:provider` tag). What is kept in memory is a cache:
fencing epochs (rebuilt from the highest `bigfleet:epoch` tag of a shard's instances), the
throttle counters, offerings out after an insufficient-capacity answer, blobs on their way, and
launch replies for 2 minutes (DescribeInstances may not list a new instance at once).

- Create: one RunInstances per offering of the batch (MinCount = MaxCount), tagged at launch
  with the provider, shard, epoch and a batch tag (`bigfleet:batch`, also EC2's ClientToken, a
  hash of the idempotency key); then one CreateTags per instance names its machine. A retry finds
  the batch by its tag and names the instances that are still unnamed, launching nothing.
- Configure (seed §7 for cloud): the bootstrap blob must become the instance's user data, which
  EC2 only changes on a stopped instance. So: tag `bigfleet:cluster` and `bigfleet:configure =
  stopping`, StopInstances; once stopped (on this call or a later Get/List),
  ModifyInstanceAttribute UserData, StartInstances, tag `configure = starting`. Running again =
  CONFIGURED. Limits: EBS-backed instances only; a one-time spot instance cannot be stopped (EC2
  refuses: the configure is refused with InvalidTransition, its tags rolled back); the blob waits
  in memory between the stop and the start, so a provider restarted in that window reports the
  machine FAILED (from CONFIGURING) until a configure brings a blob again.
- Drain: bookkeeping on tags. The operator drains the node; the provider tags
  `bigfleet:drain-until` (now + grace, now if forced) and reports DRAINING until then, IDLE after.
- Delete: tag `bigfleet:deleting`, TerminateInstances (a repeat is harmless). Terminated and
  tagged: the slot is SPECULATIVE again. Terminated without the tag (a spot interruption, someone
  else): FAILED with `last_error`, until the shard deletes it (the delete tags it if EC2 still
  lets it, and is remembered in memory otherwise).
- InsufficientInstanceCapacity (and its kin): the offering is out for `ice_seconds` (Karpenter's
  3 minutes), its slots are not listed, and the batch raises QuotaExhausted.
- Prices: from the config; spot ones are refreshed from the spot price history every
  `spot_price_seconds` (on List), or when `refresh_spot_prices()` is called.

- RequestLimitExceeded / Throttling: RateLimited with a hint doubling per throttle of that action
  in a row (EC2 keeps a token bucket per action), capped; the SDK's own retries are few.

IAM: ec2:RunInstances, CreateTags, DeleteTags, DescribeInstances, DescribeInstanceAttribute,
StopInstances, StartInstances, ModifyInstanceAttribute, TerminateInstances,
DescribeSpotPriceHistory, DescribeAccountAttributes (and iam:PassRole for an instance profile);
scope the mutating ones with a condition on the `bigfleet:provider` tag.
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
    Probability,
    Resources,
    TransitionAck,
)
from ..yamlfile import load_model
from .base import (
    MAX_CREATE_BATCH,
    InvalidTransition,
    MachineNotFound,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    StaleFencingToken,
    check_grace,
)
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
    account_limit: bool = False  # also cap each offering by the account's max-instances
    # Refresh spot prices from the spot price history this often (on List); none: the config's.
    spot_price_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    sdk_max_attempts: Annotated[int, Field(ge=1, le=10)] = 2
    backoff_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    backoff_cap_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 60.0

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
    ) -> None:
        self.config = config
        self.name = config.name
        self._clock = clock
        self._lock = threading.RLock()
        if session_or_client is not None and hasattr(session_or_client, "meta"):
            self.client = session_or_client
        else:
            import boto3
            from botocore.config import Config

            session = session_or_client or boto3.session.Session()
            self.client = session.client(
                "ec2",
                region_name=config.region,
                endpoint_url=config.endpoint_url,
                config=Config(
                    retries={"mode": "standard", "max_attempts": config.sdk_max_attempts}
                ),
            )
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
        self._external_deletes: set[str] = set()  # instances terminated elsewhere, then deleted
        self._account_max: int | None = None
        self._prices: dict[str, float] = {}  # offering key -> spot price from EC2's history
        self._prices_due = 0.0  # when `spot_price_seconds` asks for the next refresh
        self._recent: dict[str, tuple[float, _Record]] = {}  # machine id -> its fresh launch

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
        with self._lock:
            self._fence(token)
            groups: dict[str, tuple[_Offering, list[str]]] = {}
            for machine_id in machine_ids:
                offering, _ = self._parse(machine_id)
                if self._out(offering):
                    raise QuotaExhausted(self.name, machine_id, offering.key)
                groups.setdefault(offering.key, (offering, []))[1].append(machine_id)
            records = self._scan([o for o, _ in groups.values()])
            for offering, ids in groups.values():
                self._create_group(offering, ids, records, token, key)
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
        with self._lock:
            self._fence(token)
            record = self._live(machine_id, "configure")
            machine = self._machine(record)
            op = f"{self.name}:configure:{record.instance_id}:{record.tags.get(T_CONFIGURE_AT, '')}"
            if machine.state in (S.CONFIGURING, S.CONFIGURED) and machine.cluster == cluster:
                if machine.state is S.CONFIGURING and record.tags.get(T_CONFIGURE) == "stopping":
                    # The repeat may carry the blob a restart lost, or find the stop never
                    # reached EC2 (throttled): hand the blob over and stop again.
                    self._blobs[record.instance_id] = blob.user_data
                    if record.ec2_state in ("running", "pending"):
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
            self._tag(
                record,
                token,
                {T_CLUSTER: cluster, T_CONFIGURE: "stopping", T_CONFIGURE_AT: str(now)},
                remove=[T_DRAIN_UNTIL],
            )
            self._stop(record, machine_id)
            self._advance(record)
            op = f"{self.name}:configure:{record.instance_id}:{now}"
            return TransitionAck(operation_id=op, machine=self._machine(record))

    def _stop(self, record: _Record, machine_id: str) -> None:
        try:
            self._call(
                "StopInstances", self.client.stop_instances, InstanceIds=[record.instance_id]
            )
        except ClientError as err:  # e.g. a one-time spot instance: EC2 cannot stop it
            self._blobs.pop(record.instance_id, None)
            self._untag(record, [T_CLUSTER, T_CONFIGURE, T_CONFIGURE_AT])
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
        with self._lock:
            self._fence(token)
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
            record = self._refresh(record)
            op = f"{self.name}:drain:{record.instance_id}:{record.tags.get(T_CONFIGURE_AT, '')}"
            return TransitionAck(operation_id=op, machine=self._machine(record))

    def delete(self, machine_id: str, token: FencingToken, *, key: str = "") -> TransitionAck:
        with self._lock:
            self._fence(token)
            offering, index = self._parse(machine_id)
            record = self._scan([offering]).get(machine_id)
            if record is None:
                raise InvalidTransition(self.name, machine_id, S.SPECULATIVE, "delete")
            op = f"{self.name}:delete:{record.instance_id}"
            machine = self._machine(record)
            if machine.state in (S.DELETING, S.SPECULATIVE):
                return TransitionAck(operation_id=op, machine=machine)
            if machine.state is not S.IDLE and machine.state is not S.FAILED:
                raise InvalidTransition(self.name, machine_id, machine.state, "delete")
            if record.ec2_state == "terminated":  # gone already (interrupted): acknowledge it
                self._external_deletes.add(record.instance_id)
                try:  # remembered across a restart too, where EC2 still tags it
                    self._tag(record, token, {T_DELETING: str(int(self._clock()))})
                except ClientError:
                    pass
            else:
                self._tag(record, token, {T_DELETING: str(int(self._clock()))})
                self._call(
                    "TerminateInstances",
                    self.client.terminate_instances,
                    InstanceIds=[record.instance_id],
                )
                record = self._refresh(record)
            return TransitionAck(operation_id=op, machine=self._machine(record))

    def get(self, machine_id: str) -> Machine:
        with self._lock:
            offering, _ = self._parse(machine_id)
            for machine in self._listing([offering]):
                if machine.id == machine_id:
                    return machine
            raise MachineNotFound(self.name, machine_id)

    def list(self, filter: ListFilter) -> builtins.list[Machine]:
        with self._lock:
            self._refresh_prices_if_due()
            offerings = [
                o
                for o in self._offerings
                if (not filter.zone or o.spec.zone == filter.zone)
                and (not filter.instance_type or o.spec.instance_type == filter.instance_type)
            ]
            states = set(filter.states)
            found = [m for m in self._listing(offerings) if not states or m.state in states]
            found.sort(key=lambda m: m.id)
            return found[: filter.max_results] if filter.max_results else found

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
        records = self._scan(offerings)
        machines = []
        held: dict[str, set[int]] = {o.key: set() for o in offerings}
        for record in records.values():
            self._advance(record)
            machine = self._machine(record)
            if machine.state is S.SPECULATIVE:
                continue
            held[record.offering.key].add(record.index)
            machines.append(machine)
        for offering in offerings:
            if self._out(offering):
                continue
            indices = held[offering.key]
            free = max(0, self._quota(offering) - len(indices))
            i = 0
            while free:
                if i not in indices:
                    machines.append(self._speculative(offering, i))
                    free -= 1
                i += 1
        return machines

    def _quota(self, offering: _Offering) -> int:
        count = offering.spec.count
        if not self.config.account_limit:
            return count
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
            self._account_max = min(values) if values else count
        return min(count, self._account_max)

    def _scan(self, offerings: builtins.list[_Offering]) -> dict[str, _Record]:
        """Every instance of these offerings by machine id (the newest one wins, a live one over
        a terminated one); also refreshes the fencing epochs from the tags."""
        records: dict[str, _Record] = {}
        for instance in self._describe(offerings):
            tags = _tags(instance)
            machine_id = tags.get(T_MACHINE)
            self._note_epoch(tags)
            if not machine_id:
                continue
            try:
                offering, index = self._parse(machine_id)
            except MachineNotFound:
                continue
            if offering not in offerings:
                continue
            record = _Record(machine_id, offering, index, instance, tags)
            old = records.get(machine_id)
            if old is None or _rank(record) > _rank(old):
                records[machine_id] = record
        # DescribeInstances is eventually consistent: an instance launched a moment ago may not
        # be listed yet. Its launch reply stands in for it, so its slot is not offered again.
        now = self._clock()
        for machine_id, (at, record) in builtins.list(self._recent.items()):
            seen = records.get(machine_id)
            if now - at > RECENT_SECONDS or (seen and seen.instance_id == record.instance_id):
                del self._recent[machine_id]
            elif record.offering in offerings and (seen is None or _rank(seen) < _rank(record)):
                records[machine_id] = record
        return records

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
        offering, _ = self._parse(machine_id)
        record = self._scan([offering]).get(machine_id)
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
        )

    def _state_of(self, record: _Record) -> tuple[MachineState, str]:
        ec2, tags = record.ec2_state, record.tags
        if ec2 == "terminated":
            if T_DELETING in tags or record.instance_id in self._external_deletes:
                return S.SPECULATIVE, ""
            reason = record.instance.get("StateReason", {}).get("Code", "")
            what = "spot interruption" if "Spot" in reason else "terminated outside BigFleet"
            return S.FAILED, f"instance {record.instance_id}: {what} ({reason or 'no reason'})"
        if ec2 == "shutting-down":
            return S.DELETING, ""
        phase = tags.get(T_CONFIGURE)
        if ec2 in ("stopping", "stopped"):
            if phase == "stopping":
                if ec2 == "stopped" and record.instance_id not in self._blobs:
                    return S.FAILED, (
                        f"instance {record.instance_id}: the bootstrap blob was lost before it "
                        "was delivered (provider restarted); configure again"
                    )
                return S.CONFIGURING, ""
            return S.FAILED, f"instance {record.instance_id} is {ec2} (stopped outside BigFleet)"
        if ec2 == "pending":
            return (S.CONFIGURING, "") if phase in ("stopping", "starting") else (S.CREATING, "")
        # running
        if phase == "stopping":
            return S.CONFIGURING, ""
        drain_until = tags.get(T_DRAIN_UNTIL)
        if drain_until is not None:
            return (S.DRAINING, "") if float(drain_until) > self._clock() else (S.IDLE, "")
        if phase in ("starting", "done") and T_CLUSTER in tags:
            return S.CONFIGURED, ""
        return S.IDLE, ""

    def _advance(self, record: _Record) -> None:
        """A configure whose stop has finished: hand the blob to the instance and start it."""
        if record.ec2_state != "stopped" or record.tags.get(T_CONFIGURE) != "stopping":
            return
        blob = self._blobs.get(record.instance_id)
        if blob is None:
            return
        self._call(
            "ModifyInstanceAttribute",
            self.client.modify_instance_attribute,
            InstanceId=record.instance_id,
            UserData={"Value": base64.b64encode(blob)},
        )
        self._call("StartInstances", self.client.start_instances, InstanceIds=[record.instance_id])
        self._tag(record, None, {T_CONFIGURE: "starting"})
        del self._blobs[record.instance_id]
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

    def _create_group(
        self,
        offering: _Offering,
        ids: builtins.list[str],
        records: dict[str, _Record],
        token: FencingToken,
        key: str,
    ) -> None:
        # Already made (a repeat, or made by an earlier attempt of this batch): nothing to do,
        # unless the machine is in a state create cannot come from.
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
        if not missing:
            return
        # The slots must be listed: one beyond the quota, or out of capacity, is not.
        speculative = {m.id for m in self._listing([offering]) if m.state is S.SPECULATIVE}
        for machine_id in missing:
            if machine_id not in speculative:
                raise QuotaExhausted(self.name, machine_id, offering.key)
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
            kwargs["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {
                    "SpotInstanceType": "one-time",
                    "InstanceInterruptionBehavior": "terminate",
                },
            }
        try:
            reply = self._call("RunInstances", self.client.run_instances, **kwargs)
        except _Ice as err:
            self._unavailable[offering.key] = self._clock() + cfg.ice_seconds
            raise QuotaExhausted(self.name, ids[0], offering.key) from err
        return list(reply.get("Instances", []))

    # -- fencing, tags, calls --------------------------------------------------------------

    def _fence(self, token: FencingToken) -> None:
        """Refuse a stale epoch before any mutating call. After a restart the epochs come back
        from the instances' `bigfleet:epoch` tags (one DescribeInstances, once)."""
        if token.shard_id not in self._epochs and not self._epochs_loaded:
            for _ in self._describe(self._offerings):
                pass  # _call notes the epochs of every instance it describes
            self._epochs_loaded = True
        highest = self._epochs.get(token.shard_id, token.shard_epoch)
        if token.shard_epoch < highest:
            raise StaleFencingToken(self.name, token.shard_id, token.shard_epoch, highest)
        self._epochs[token.shard_id] = token.shard_epoch

    def _note_epoch(self, tags: dict[str, str]) -> None:
        try:
            shard, epoch = int(tags[T_SHARD]), int(tags[T_EPOCH])
        except (KeyError, ValueError):
            return
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


def _tags(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def _rank(record: _Record) -> tuple[bool, Any]:
    return (record.ec2_state != "terminated", record.instance.get("LaunchTime"))
