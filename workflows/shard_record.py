"""What a live shard records (issue 46; docs/adoption.md "Record, then replay"), when its config
says so (`ShardConfig.record`): roll-ups as it accepted them, its decisions (a digest of each
cycle's actions, as the simulator's recordings hold), and after each reconcile with the
providers what it held per profile — provider, type, zone, capacity type, price, machines by
state, machines under a provider's rebalance notice. Lines wait in memory, bounded in bytes (the
oldest go first, counted in `dropped`), and are handed to `record_lines`
(activities/recording.py) beside the loop, never in its way. A helper object of the shard
workflow.
"""

from __future__ import annotations

import json
from collections import deque
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    import numpy as np

    from activities.wire import RecordBatch
    from bigfleet.inventory import CODE, GONE
    from bigfleet.models import MachineState
    from bigfleet.needs import needs_state
    from bigfleet.shard import Shard
    from bigfleet.simulation.recording import digest

WAITING_BYTES = 8_000_000  # lines waiting for the activity, at most
BATCH_BYTES = 1_500_000  # lines a call carries, at most (a Temporal payload is 2 MB)


class ShardRecorder:
    """A shard's recording lines, waiting and handed over (see the module)."""

    def __init__(self, shard: Shard) -> None:
        self.shard = shard
        self.lines: deque[str] = deque()
        self.bytes = 0
        self.dropped = 0
        self.written = 0
        self.heard: dict[str, tuple[int, int]] = {}  # cluster -> generation, health reports

    def _add(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj, separators=(",", ":"))
        self.lines.append(line)
        self.bytes += len(line)
        while self.bytes > WAITING_BYTES and self.lines:
            self.bytes -= len(self.lines.popleft())
            self.dropped += 1

    def cycle(self, t: float, actions: Any) -> None:
        """A cycle: the roll-ups the shard accepted since the last one (each cluster's, as its
        needs table holds it: the last one it took; a run's first cycle records every one in
        force, so each run reads on its own), then its decision. Its lines are written before
        the run continues as new (`_continue_as_new`)."""
        needs = self.shard.needs
        changed = []
        for cluster in needs.clusters():
            mark = (needs.generation(cluster), needs.health(cluster)[0])
            if self.heard.get(cluster) != mark:
                self.heard[cluster] = mark
                changed.append(cluster)
        for c in needs_state(needs, changed):
            rollup = {k: c[k] for k in ("cluster", "generation", "needs", "health")}
            self._add({"t": t, "rollup": rollup, "accepted": True, "shard": self.shard.id})
        if len(self.heard) > 2 * len(needs) + 100:  # (clusters gone: forgotten)
            self.heard = {c: m for c, m in self.heard.items() if needs.generation(c) >= 0}
        if len(actions):
            self._add({"t": t, "decision": {"shard": self.shard.id, "digest": digest(actions),
                                            "actions": len(actions)}})  # fmt: skip

    def holdings(self, t: float) -> None:
        """What the shard holds per profile, with prices, as its last reconcile left it."""
        inv = self.shard.inventory
        n = inv.rows_used
        # (The inventory's tallies by state and profile; one pass for the rebalance notices.)
        risky = inv.profile[:n][(inv.risk[:n] > 0) & (inv.state[:n] != GONE)]
        at_risk = np.bincount(risky.astype(np.int64), minlength=len(inv.profiles.profiles))
        rows = []
        for pid, p in enumerate(inv.profiles.profiles):
            states = {s.value: int(inv.counts[CODE[s], pid]) for s in MachineState}
            states = {k: v for k, v in states.items() if v}
            if states:
                rows.append([p.provider, p.instance_type, p.zone, p.capacity_type.value,
                             p.price_per_hour, states, int(at_risk[pid])])  # fmt: skip
        self._add({"t": t, "holdings": {"shard": self.shard.id, "profiles": rows}})

    async def shadow_cycle(self, t: float, actions: Any) -> None:
        """A shard in shadow mode: its cycle, and what it holds as the providers listed it
        this cycle (it lists them every cycle), handed over at once."""
        self.cycle(t, actions)
        self.holdings(t)
        await self.flush()

    async def flush(self) -> None:
        """Hand what waits to `record_lines`, a batch at a time; on failure the lines wait for
        the next call (bounded all the same)."""
        while self.lines:
            batch: list[str] = []
            size = 0
            while self.lines and (not batch or size + len(self.lines[0]) <= BATCH_BYTES):
                size += len(self.lines[0])
                batch.append(self.lines.popleft())
            try:
                await workflow.execute_activity(
                    "record_lines",
                    RecordBatch(shard=self.shard.id, lines=batch),
                    task_queue=workflow.info().task_queue,
                    start_to_close_timeout=timedelta(seconds=30),
                    retry_policy=RetryPolicy(maximum_attempts=3),
                )
            except ActivityError as err:
                self.lines.extendleft(reversed(batch))
                workflow.logger.warning("shard %s: recording: %s", self.shard.id, err.cause)
                return
            self.bytes -= size
            self.written += len(batch)

    def status(self) -> dict[str, int]:
        return {"waiting": len(self.lines), "written": self.written, "dropped": self.dropped}
