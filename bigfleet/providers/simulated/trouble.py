"""What happens to a simulated provider's machines from outside its calls, for scenarios and
tests: a provider's warning, a rack losing power, another autoscaler sharing the provider."""

from __future__ import annotations

from ...models import MachineState, Notice
from ..base import InvalidTransition, MachineNotFound
from .slots import Slot, SlotTable

S = MachineState
# Machines a power loss fails (a hosted machine in any state but in a create or delete).
DOOMABLE = frozenset({S.IDLE, S.CONFIGURED, S.CONFIGURING, S.DRAINING})


class Trouble:
    """Mixed into `SimulatedProvider` (provider.py), whose slots and change log it touches."""

    name: str
    _slots: SlotTable
    _changed: set[str]

    def _fail(self, slot: Slot, at: float, error: str) -> None:
        raise NotImplementedError  # (SimulatedProvider's)

    def _new_host_ref(self, slot: Slot) -> str:
        raise NotImplementedError  # (SimulatedProvider's)

    def warn(self, machine_id: str, notice: Notice | None) -> None:
        """Put a notice on a machine (none: take it off), as a provider's health check would."""
        slot = self._slots.find(machine_id)
        if slot is None:
            raise MachineNotFound(self.name, machine_id)
        slot.notice = notice
        self._changed.add(slot.id)

    def power_off(self, machine_id: str, at: float, why: str) -> None:
        """The machine dies (a rack loses power): a hosted one is FAILED with `why`."""
        slot = self._slots.find(machine_id)
        if slot is None:
            raise MachineNotFound(self.name, machine_id)
        if slot.state in DOOMABLE:
            self._fail(slot, at, why)

    def hand_to(self, machine_id: str, cluster: str) -> None:
        """Another autoscaler sharing the provider created (if need be) and configured a free
        machine for `cluster` (BigFleet beside the autoscalers it replaces:
        bigfleet/cluster_modes.py, issue 46)."""
        slot = self._slots.find(machine_id)
        if slot is None:
            raise MachineNotFound(self.name, machine_id)
        if slot.state not in (S.SPECULATIVE, S.IDLE) or slot.op is not None:
            raise InvalidTransition(self.name, machine_id, slot.state, "configure elsewhere")
        if slot.host is None:
            slot.host = self._new_host_ref(slot)
        slot.state, slot.cluster = S.CONFIGURED, cluster
        self._changed.add(machine_id)
