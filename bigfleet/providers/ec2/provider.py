"""`Ec2Provider`: the CapacityProvider contract over one AWS account-region (the design is in
bigfleet/providers/ec2/__init__.py). The calls of the contract, the fencing around the
mutating ones, the notices taken from the queue, and the spot prices."""

from __future__ import annotations

import builtins
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from botocore.exceptions import ClientError

from ...models import BootstrapBlob, FencingToken, ListFilter, Machine, MachineState, TransitionAck
from ..base import (
    InvalidTransition,
    MachineNotFound,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    check_grace,
)
from ..fencing import fenced
from . import notices
from .api import (
    T_CLUSTER,
    T_CONFIGURE,
    T_CONFIGURE_AT,
    T_DELETING,
    T_DRAIN_UNTIL,
    T_EPOCH,
    T_NOTICE,
    T_SHARD,
    make_client,
)
from .config import Ec2Config
from .launch import Ec2Launch
from .records import Offering, Record

S = MachineState


class Ec2Provider(Ec2Launch):
    """The CapacityProvider protocol over EC2 (bigfleet/providers/ec2/__init__.py). Thread-safe:
    one lock. `session_or_client`: a boto3 session, or an EC2 client (tests, moto);
    `sqs_client`: the notice queue's client, made from the session when not given."""

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
        given = session_or_client is not None and hasattr(session_or_client, "meta")
        session = None if given else session_or_client
        client = session_or_client if given else make_client(config, "ec2", session)
        super().__init__(config, client, clock)
        self._lock = threading.RLock()
        self._queue: notices.NoticeQueue | None = None
        if config.interruption_queue_url:
            sqs = sqs_client or make_client(config, "sqs", session)
            self._queue = notices.NoticeQueue(sqs, config.interruption_queue_url, self.name)
        self._epochs_loaded = False
        self._prices_due = 0.0  # when `spot_price_seconds` asks for the next refresh

    # -- the CapacityProvider calls ---------------------------------------------------------

    def create(
        self, machine_ids: builtins.list[str], token: FencingToken, *, key: str = ""
    ) -> builtins.list[TransitionAck]:
        """Launch the batch's missing machines (one RunInstances per offering) and name them; a
        slot not listed (quota, capacity) raises QuotaExhausted before anything is launched."""
        if len(machine_ids) > self.config.max_batch:
            raise ValueError(
                f"create takes at most {self.config.max_batch} machine ids per call, "
                f"got {len(machine_ids)}"
            )
        if len(set(machine_ids)) != len(machine_ids):
            raise ValueError("create: a machine id is listed twice")
        with self._lock, self._fenced(token):
            groups: dict[str, tuple[Offering, list[str]]] = {}
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
        """Tag the cluster, stop the instance, then (now or on a later Get/List) put the blob in
        its user data and start it: CONFIGURING, CONFIGURED once it runs."""
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

    def drain(
        self,
        machine_id: str,
        grace_seconds: float,
        token: FencingToken,
        force: bool = False,
        *,
        key: str = "",
    ) -> TransitionAck:
        """Tag the drain's end: DRAINING until then, then the instance is stopped: IDLE once
        stopped."""
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
        """Cancel the instance's spot request, if any, and terminate it: DELETING, its slot
        SPECULATIVE once terminated."""
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
        """The offerings' machines matching the filter, their due steps taken first; with
        `noticed`, the notice queue is read first."""
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
            listing = self._noticed_listing if filter.noticed else self._listing
            found = [
                m
                for m in listing(offerings)
                if (not states or m.state in states) and (m.notice or not filter.noticed)
            ]
            found.sort(key=lambda m: m.id)
            return found[: filter.max_results] if filter.max_results else found

    def _ack(self, op: str, record: Record) -> TransitionAck:
        return TransitionAck(operation_id=op, machine=self._machine(record))

    # -- notices (notices.py) ---------------------------------------------------------------

    def notice_counts(self) -> dict[str, int]:
        """Queue messages so far by outcome: applied, ignored, foreign, malformed, retry."""
        return dict(self._queue.counts) if self._queue is not None else {}

    def _take_notices(self, events: builtins.list[notices.Event]) -> builtins.list[str]:
        """Tag the provider's instances the events name (one DescribeInstances per 200 ids);
        an instance not this provider's (another provider, another account) is FOREIGN."""
        ids = sorted({i for event in events for i in event.instance_ids})
        records: dict[str, Record] = {}
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

    def _take_notice(self, record: Record, event: notices.Event) -> str:
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

    def _notice_stands(self, record: Record, event: notices.Event) -> bool:
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

    # -- spot prices ------------------------------------------------------------------------

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

    # -- fencing ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _fenced(self, token: FencingToken) -> Iterator[None]:
        """Around one mutating call (bigfleet/providers/fencing.py): an epoch beyond the clock
        or below the shard's is refused before any mutating EC2 call, and the epoch is kept only
        if the call succeeds. After a restart the epochs come back from the instances'
        `bigfleet:epoch` tags (one DescribeInstances, once), which only calls that start
        something write. Behind a server that fences for it, nothing here."""
        if self.fenced_by_server:
            yield
            return
        if token.shard_id not in self._epochs and not self._epochs_loaded:
            for _ in self._describe(self._offerings):
                pass  # _call notes the epochs of every instance it describes
            self._epochs_loaded = True
        with fenced(self.name, self._epochs, token.shard_id, token, self._clock()):
            yield
