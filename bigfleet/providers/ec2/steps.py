"""The steps EC2 must finish for a transition (the stop of a drain; the stop, user data and start
of a configure), taken on the call that starts it and retried on every later Get/List, a
refusal becoming the machine's `last_error`; the cancel of a spot request before a delete; and
the listing of an offering's machines, each instance's due steps taken first."""

from __future__ import annotations

import base64
import builtins
import contextlib

from botocore.exceptions import ClientError

from ...models import Machine, MachineState
from ..base import InvalidTransition, ProviderError, RateLimited
from .api import (
    SPOT_REQUEST_GONE,
    T_CLUSTER,
    T_CONFIGURE,
    T_CONFIGURE_AT,
    T_DRAIN_UNTIL,
    T_MACHINE,
    T_NOTICE,
    NoCapacity,
    error_code,
    error_message,
)
from .machines import Ec2Machines, share_budget
from .records import Offering, Record, keep_best

S = MachineState


class Ec2Steps(Ec2Machines):
    """Takes the EC2 actions a machine's transition waits for, and lists machines with theirs
    taken."""

    def _due(self, record: Record) -> tuple[str, ...]:
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

    def _advance(self, record: Record) -> None:
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
        except (RateLimited, NoCapacity, ClientError) as err:
            code = error_code(err)
            if isinstance(err, RateLimited):
                self._held[action] = now + err.retry_after
                when = f"after {err.retry_after:g} s"
            else:
                when = "on the next Get/List"
                if isinstance(err, NoCapacity):  # no capacity to start it: none to launch either
                    self._unavailable[record.offering.key] = now + self.config.ice_seconds
                elif action == "StopInstances" and code == "UnsupportedOperation":
                    self._unstoppable.add(iid)  # never stoppable (a one-time spot instance)
                    when = "never"
            self._errors[iid] = (
                f"instance {iid}: EC2 refused {action} ({code}: {error_message(err)}); "
                f"tried again {when}"
            )
            return
        self._errors.pop(iid, None)
        with contextlib.suppress(ProviderError, ClientError):  # the next Get/List reads it
            self._refresh(record)

    def _stop(
        self, record: Record, machine_id: str, fence_tags: dict[str, str] | None = None
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

    def _cancel_spot_request(self, record: Record) -> None:
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

    def _live(self, machine_id: str, call: str) -> Record:
        record = self._find(machine_id)
        if record is None:
            raise InvalidTransition(self.name, machine_id, S.SPECULATIVE, call)
        self._advance(record)
        return record

    def _listing(self, offerings: builtins.list[Offering]) -> builtins.list[Machine]:
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
            free = share_budget(free, account_max - live)
        for offering in offerings:
            indices, left = held[offering.key], free[offering.key]
            i = 0
            while left:
                if i not in indices:
                    machines.append(self._speculative(offering, i))
                    left -= 1
                i += 1
        return machines

    def _noticed_listing(self, offerings: builtins.list[Offering]) -> builtins.list[Machine]:
        """The machines of these offerings under a notice, their due steps taken first, without
        a scan of every instance: a shard asks for them every `notice_seconds`, and listing a
        few thousand instances that often spends the account's DescribeInstances budget.
        DescribeInstances reads the instances tagged with a notice and those whose notice EC2
        would not take as a tag (kept in memory), then every instance of those machines' slots,
        so the one that speaks for a slot (`rank`: a live one over a terminated one, the
        newest) is the same one a full listing picks."""
        wanted = {o.key for o in offerings}
        slots: set[str] = set()
        remembered = sorted(self._noticed)
        queries = [[{"Name": "tag-key", "Values": [T_NOTICE]}]] + [
            [{"Name": "instance-id", "Values": remembered[at : at + 200]}]
            for at in range(0, len(remembered), 200)
        ]
        for query in queries:
            for instance in self._describe([], query):
                record = self._record(instance)
                if record is not None and record.offering.key in wanted:
                    slots.add(record.machine_id)
        records: dict[str, Record] = {}
        ids = sorted(slots)
        for at in range(0, len(ids), 200):
            query = [{"Name": f"tag:{T_MACHINE}", "Values": ids[at : at + 200]}]
            for instance in self._describe([], query):
                record = self._record(instance)
                if record is not None and record.machine_id in slots:
                    keep_best(records, record)
        machines = []
        for record in records.values():
            self._advance(record)
            machine = self._machine(record)
            if machine.notice is not None and machine.state is not S.SPECULATIVE:
                machines.append(machine)
        return machines
