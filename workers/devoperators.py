"""The simulated cluster operators of `bigfleet dev`: each cluster of the fleet file sends its
`rollups` to its shard at their `at` offsets (seconds after `bigfleet dev` started), and re-sends
the latest every `cycle_seconds` with a rising generation (milliseconds since the epoch, so it
keeps rising across restarts). The orchestration is in workers/dev.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Cluster:
    name: str
    shard: int | None  # asked of the coordinator on the first roll-up
    timeline: list[tuple[float, list[Any]]]
    sent: int = -1  # index into timeline of the roll-up in force
    next_resend: float = 0.0
    generation: int = 0


@dataclass
class Operators:
    """Each cluster's operator: its roll-ups at their offsets, the latest re-sent every cycle
    (a live operator reports every cycle; a silent cluster would age out of the needs table)."""

    client: Any
    fleet: Any
    started: float = field(default_factory=time.monotonic)
    clusters: list[_Cluster] = field(default_factory=list)
    errors: int = 0

    def __post_init__(self) -> None:
        for c in self.fleet.clusters:
            if c.workload is not None:
                print(f"  note: cluster {c.name} replays a trace; `bigfleet dev` skips it")
                continue
            timeline = sorted(((r.at, list(r.needs)) for r in c.rollups), key=lambda t: t[0])
            if timeline:
                self.clusters.append(
                    _Cluster(c.name, None, timeline)
                )

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    async def run(self, stop: asyncio.Event) -> None:
        cycle = self.fleet.cycle_seconds
        while not stop.is_set():
            now = self.elapsed()
            wake = now + cycle
            for c in self.clusters:
                due = [i for i, (at, _) in enumerate(c.timeline) if at <= now]
                current = due[-1] if due else -1
                if current >= 0 and (current != c.sent or now >= c.next_resend):
                    changed = current != c.sent
                    if await self._send(c, current, changed, now):
                        c.sent = current
                        c.next_resend = now + cycle
                    else:
                        c.next_resend = now + min(cycle, 5.0)
                if current >= 0:
                    wake = min(wake, c.next_resend)
                later = [at for at, _ in c.timeline if at > now]
                if later:
                    wake = min(wake, later[0])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.05, wake - self.elapsed()))

    async def _send(self, c: _Cluster, index: int, changed: bool, now: float) -> bool:
        from activities.wire import shard_workflow_id
        from workers.worker import assign_cluster

        at, needs = c.timeline[index]
        c.generation = max(c.generation + 1, time.time_ns() // 1_000_000)
        rollup = {
            "cluster": c.name,
            "generation": c.generation,
            "needs": [n.model_dump(mode="json") for n in needs],
        }
        wid = f"the shard of {c.name}"
        try:
            if c.shard is None:
                c.shard = await assign_cluster(self.client, c.name, self.fleet.shards)
            wid = shard_workflow_id(c.shard)
            await self.client.get_workflow_handle(wid).signal("rollup", rollup)
        except Exception as err:
            self.errors += 1
            c.shard = None  # ask the coordinator again: a split or merge may have moved it
            print(f"  t+{now:4.0f}s roll-up of {c.name} to {wid} failed: {err}", flush=True)
            return False
        if changed:
            total = sum(n.count for n in needs)
            summary = (
                ", ".join(f"{n.count}×p{n.priority}" for n in needs) if needs else "no needs"
            )
            print(
                f"  t+{now:4.0f}s roll-up {c.name} -> {wid}: {len(needs)} need(s), "
                f"{total} machine(s) [{summary}]",
                flush=True,
            )
        return True
