"""From EC2 to machines: which instance holds each slot (a scan of an offering, or one lookup
by the machine's tag, with fresh launch replies standing in for instances EC2 does not list
yet), and the machine state an instance's EC2 state and `bigfleet:*` tags mean, with what the
provider keeps in memory (module docstring of bigfleet/providers/ec2/__init__.py)."""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable, Mapping
from typing import Any

from ... import labels
from ...models import CapacityType, HostRef, Machine, MachineState, Notice
from ..base import MachineNotFound, slot_id
from . import notices
from .api import (
    RECENT_SECONDS,
    T_CLUSTER,
    T_CONFIGURE,
    T_CONFIGURE_AT,
    T_DELETING,
    T_DRAIN_UNTIL,
    T_MACHINE,
    T_NOTICE,
    Ec2Calls,
)
from .config import Ec2Config, Ec2Offering
from .records import Offering, Record, instance_tags, keep_best, rank

S = MachineState


class Ec2Machines(Ec2Calls):
    """Reads a provider's instances into records and records into machines. Holds the memory
    the states depend on (blobs of configures on their way, refusals of due steps, instances
    EC2 will not stop, terminations acknowledged by a delete, notices EC2 would not tag), the
    offerings out after an insufficient-capacity answer, and the spot prices."""

    def __init__(self, config: Ec2Config, client: Any, clock: Callable[[], float]) -> None:
        super().__init__(config, client, clock)
        self._offerings = [
            Offering(
                o,
                slot_id(config.name, o.instance_type, o.zone, o.capacity_type),
            )
            for o in config.offerings
        ]
        self._unavailable: dict[str, float] = {}  # offering key -> until
        self._blobs: dict[str, bytes] = {}  # instance id -> user data awaiting its stop
        self._started: set[str] = set()  # blob delivered and started, `starting` not tagged yet
        self._errors: dict[str, str] = {}  # instance id -> why its due step did not happen
        self._held: dict[str, float] = {}  # action -> until: throttled, steps wait its hint
        self._unstoppable: set[str] = set()  # drained instances EC2 refuses to stop at all
        self._external_deletes: set[str] = set()  # instances terminated elsewhere, then deleted
        self._account_max: int | None = None
        self._prices: dict[str, float] = {}  # offering key -> spot price from EC2's history
        self._recent: dict[str, tuple[float, Record]] = {}  # machine id -> its fresh launch
        self._noticed: dict[str, Notice] = {}  # instance id -> a notice EC2 would not tag

    def unavailable(self) -> dict[str, float]:
        """Offerings out after an insufficient-capacity answer, and until when."""
        now = self._clock()
        return {k: until for k, until in self._unavailable.items() if until > now}

    def _out(self, offering: Offering) -> bool:
        return self._unavailable.get(offering.key, 0.0) > self._clock()

    def _parse(self, machine_id: str) -> tuple[Offering, int]:
        for offering in self._offerings:
            m = re.fullmatch(re.escape(offering.prefix) + r"-(\d{5,})", machine_id)
            if m:
                return offering, int(m.group(1))
        raise MachineNotFound(self.name, machine_id)

    def _price(self, offering: Offering) -> float:
        return self._prices.get(offering.key, offering.spec.price_per_hour)

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

    def _scan(self, offerings: builtins.list[Offering]) -> dict[str, Record]:
        """Every instance of these offerings by machine id (the newest one wins, a live one over
        a terminated one); also refreshes the fencing epochs from the tags."""
        records: dict[str, Record] = {}
        for instance in self._describe(offerings):
            record = self._record(instance)
            if record is not None and record.offering in offerings:
                keep_best(records, record)
        # DescribeInstances is eventually consistent: an instance launched a moment ago may not
        # be listed yet. Its launch reply stands in for it, so its slot is not offered again.
        for machine_id in builtins.list(self._recent):
            fresh = self._fresh(machine_id, records.get(machine_id))
            if fresh is not None and fresh.offering in offerings:
                records[machine_id] = fresh
        return records

    def _find(self, machine_id: str) -> Record | None:
        """The instance holding one slot: one DescribeInstances filtered by its machine-id tag
        (not a scan of its offering, which may run to thousands of instances), or its launch
        reply while EC2 does not list it yet."""
        self._parse(machine_id)  # not one of ours: MachineNotFound
        best: Record | None = None
        for instance in self._describe([], [{"Name": f"tag:{T_MACHINE}", "Values": [machine_id]}]):
            record = self._record(instance)
            if record is not None and record.machine_id == machine_id:
                if best is None or rank(record) > rank(best):
                    best = record
        return self._fresh(machine_id, best)

    def _record(self, instance: dict[str, Any]) -> Record | None:
        tags = instance_tags(instance)
        self._note_epoch(tags)
        machine_id = tags.get(T_MACHINE)
        if not machine_id:
            return None
        try:
            offering, index = self._parse(machine_id)
        except MachineNotFound:
            return None
        return Record(machine_id, offering, index, instance, tags)

    def _fresh(self, machine_id: str, seen: Record | None) -> Record | None:
        """What EC2 listed for a machine, or its launch reply if EC2 does not list that
        instance yet (for RECENT_SECONDS; forgotten once listed)."""
        entry = self._recent.get(machine_id)
        if entry is None:
            return seen
        at, record = entry
        if self._clock() - at > RECENT_SECONDS or (seen and seen.instance_id == record.instance_id):
            del self._recent[machine_id]
            return seen
        return record if seen is None or rank(seen) < rank(record) else seen

    def _machine(self, record: Record) -> Machine:
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
            labels=self._labels(spec, tags),
            transition_started_unix=max(0, started),
            last_error=error,
            cluster=cluster,
            failed_from=failed_from,
            notice=self._notice_of(record),
        )

    def _state_of(self, record: Record) -> tuple[MachineState, str]:
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

    def _drain_over(self, record: Record) -> bool:
        return float(record.tags[T_DRAIN_UNTIL]) <= self._clock()

    def _notice_of(self, record: Record) -> Notice | None:
        tagged = notices.notice_from_tag(record.tags.get(T_NOTICE))
        return notices.strongest(tagged, self._noticed.get(record.instance_id))

    def _speculative(self, offering: Offering, index: int) -> Machine:
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

    def _labels(self, spec: Ec2Offering, tags: Mapping[str, str] | None = None) -> dict[str, str]:
        out = labels.machine_labels(
            self.name,
            spec.instance_type,
            spec.zone,
            self.config.region,
            spec.arch,
            str(spec.capacity_type),
        )
        # An instance tagged `bigfleet.io/unmanaged=true` is another autoscaler's for now:
        # BigFleet leaves it alone (bigfleet/cluster_modes.py).
        if tags and tags.get(labels.UNMANAGED) == "true":
            out[labels.UNMANAGED] = "true"
        return out


def share_budget(free: dict[str, int], budget: int) -> dict[str, int]:
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
