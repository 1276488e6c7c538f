"""What Redfish cannot hold, kept in the provider's JSON state file (`state_path`, rewritten
atomically after every change): each claimed machine's record (state, transition, cluster,
drain), the systems each BMC listed, and the highest fencing epoch per shard."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

from ...epochs import latest_issued
from ...models import FencingToken, MachineState
from ..base import InvalidTransition
from ..fencing import OwnFences, fenced
from .bmc import BmcCalls, System
from .config import RedfishConfig

S = MachineState


class RedfishRecords(BmcCalls, OwnFences):
    """The machines' records and the fencing epochs, read from the state file at start."""

    def __init__(self, config: RedfishConfig, clock: Callable[[], float]) -> None:
        super().__init__(config)
        self._clock = clock
        self._path = pathlib.Path(config.state_path)
        self._state: dict[str, Any] = {"epochs": {}, "inventory": {}, "machines": {}, "op": 0}
        if self._path.exists():
            self._state.update(json.loads(self._path.read_text()))
        # Epochs from beyond the clock were never issued (kept by refused calls before issue
        # 30): they fence nothing, and must not start to once the clock reaches them.
        latest = latest_issued(self._clock())
        self._state["epochs"] = {k: v for k, v in self._state["epochs"].items() if v <= latest}

    def _record(self, machine_id: str) -> dict[str, Any] | None:
        record: dict[str, Any] | None = self._state["machines"].get(machine_id)
        return record

    def _record_of(self, machine_id: str) -> dict[str, Any]:
        record = self._record(machine_id)
        assert record is not None
        return record

    def _start(self, machine_id: str, transition: str, state: MachineState, **extra: Any) -> None:
        self._state["op"] += 1
        now = self._clock()
        previous = self._record(machine_id) or {}
        self._state["machines"][machine_id] = {
            "state": str(state),
            "transition": transition,
            "op": f"{self.name}-{transition}-{self._state['op']:06d}",
            "since": now,
            "started": now,
            "cluster": extra.pop("cluster", None),
            "media": previous.get("media"),
            "failed_from": None,
            "last_error": "",
        }
        self._state["machines"][machine_id].update(extra)

    def _move(self, record: dict[str, Any], state: MachineState, now: float) -> None:
        record.update(state=str(state), since=now, failed_from=None, last_error="")

    def _fail(self, record: dict[str, Any], now: float, error: str) -> None:
        record.update(failed_from=record["state"], state=str(S.FAILED), since=now, last_error=error)

    @contextlib.contextmanager
    def _fenced(self, token: FencingToken) -> Iterator[None]:
        """Around one mutating call (bigfleet/providers/fencing.py): an epoch beyond the clock
        or below the shard's is refused before any BMC is asked anything, and the epoch is kept
        (in the state file) only if the call succeeds. Behind a server that fences for it,
        nothing here."""
        if self.fenced_by_server:
            yield
            return
        epochs = self._state["epochs"]
        shard = str(token.shard_id)
        before = epochs.get(shard)
        with fenced(self.name, epochs, shard, token, self._clock()):
            yield
        if epochs.get(shard) != before:
            self._save()

    def _invalid(
        self, system: System, record: dict[str, Any] | None, call: str, why: str = ""
    ) -> InvalidTransition:
        state = S(record["state"]) if record else S.SPECULATIVE
        failed_from = S(record["failed_from"]) if record and record.get("failed_from") else None
        return InvalidTransition(self.name, system.machine_id, state, call, why, failed_from)

    def _save(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_name(self._path.name + ".tmp")
        tmp.write_text(json.dumps(self._state, indent=1, sort_keys=True))
        os.replace(tmp, self._path)
