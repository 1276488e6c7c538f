"""What EC2 says about one machine: an offering's slots (`Offering`) and the newest instance
holding a slot (`Record`), read from DescribeInstances."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config import Ec2Offering


@dataclass
class Offering:
    """A configured offering and the prefix of its slot ids."""

    spec: Ec2Offering
    prefix: str

    @property
    def key(self) -> str:
        """The offering's key: instance type, zone and capacity type."""
        s = self.spec
        return f"{s.instance_type}/{s.zone}/{s.capacity_type}"


@dataclass
class Record:
    """What EC2 says about one machine id: its newest instance and that instance's tags."""

    machine_id: str
    offering: Offering
    index: int
    instance: dict[str, Any]
    tags: dict[str, str]

    @property
    def instance_id(self) -> str:
        """The instance's EC2 id."""
        return str(self.instance["InstanceId"])

    @property
    def ec2_state(self) -> str:
        """The instance's EC2 state name (pending, running, stopped, ...)."""
        return str(self.instance["State"]["Name"])



def instance_tags(instance: dict[str, Any]) -> dict[str, str]:
    """An instance's tags (as DescribeInstances lists them) by key."""
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def rank(record: Record) -> tuple[bool, Any]:
    """Which of two instances holding one slot speaks for it: a live one over a terminated one,
    then the newest."""
    return (record.ec2_state != "terminated", record.instance.get("LaunchTime"))


def keep_best(records: dict[str, Record], record: Record) -> None:
    """Keep `record` in `records` (by machine id) if it speaks for its slot (`rank`) over the
    one kept."""
    old = records.get(record.machine_id)
    if old is None or rank(record) > rank(old):
        records[record.machine_id] = record
