"""Simulated cluster operators' roll-ups: each cluster of a fleet file sends its `rollups` at their
`at` offsets (seconds after the start, carried across restarts with a clock file), and re-sends
the latest every `cycle_seconds` with a rising generation (milliseconds since the epoch, so it
keeps rising across restarts).

How a roll-up travels is the `send` coroutine, `send(cluster, rollup_dict) -> where` (a short
description of where it went, for the log line): `bigfleet operator serve` sends through the
roll-up gateway (workers/verbs/operator.py); without one, workers/routing.py `ShardRouter` (the
gateway's own delivery) asks the coordinator for the cluster's shard and signals it directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.routing import ShardRouter

Send = Callable[[str, dict[str, Any]], Awaitable[str]]


@dataclass
class _Cluster:
    name: str
    timeline: list[tuple[float, list[Any]]]
    sent: int = -1  # index into timeline of the roll-up in force
    next_resend: float = 0.0
    generation: int = 0


@dataclass
class Operators:
    """Each cluster's operator: its roll-ups at their offsets, the latest re-sent every cycle
    (a live operator reports every cycle; a silent cluster would age out of the needs table).
    `client`: Temporal, for the default `send` (workers/routing.py ShardRouter); `only`: these
    clusters."""

    client: Any
    fleet: Any
    started: float = field(default_factory=time.monotonic)
    clusters: list[_Cluster] = field(default_factory=list)
    errors: int = 0
    send: Send | None = None
    only: Collection[str] | None = None
    # A cluster's nodes that are Ready (machine ids), sent as the roll-up's node health
    # (design §9); none: the roll-ups carry no health.
    health: Callable[[str], list[str]] | None = None
    # Where the script's clock is kept across restarts (`bigfleet dev`: STATE_DIR/
    # operator-clock.json): a restarted operator carries on at the time it had reached, the
    # roll-ups due by then standing as the latest in force, instead of replaying from t = 0.
    clock_file: Path | None = None
    offset: float = 0.0

    def __post_init__(self) -> None:
        if self.clock_file is not None:
            with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
                self.offset = max(0.0, float(json.loads(self.clock_file.read_text())["elapsed"]))
            if self.offset:
                print(f"  roll-up scripts resume at t+{self.offset:.0f}s ({self.clock_file})",
                      flush=True)  # fmt: skip
        if self.send is None:
            router = ShardRouter(self.client, self.fleet.shards)

            async def signal(cluster: str, rollup: dict[str, Any]) -> str:
                return (await router(cluster, rollup))[1]

            self.send = signal
        for c in self.fleet.clusters:
            if self.only is not None and c.name not in self.only:
                continue
            if c.workload is not None:
                print(f"  note: cluster {c.name} replays a trace; its roll-ups are not played")
                continue
            timeline = sorted(((r.at, list(r.needs)) for r in c.rollups), key=lambda t: t[0])
            if timeline:
                self.clusters.append(_Cluster(c.name, timeline))

    def elapsed(self) -> float:
        return self.offset + time.monotonic() - self.started

    def save_clock(self) -> None:
        """Keep how far the scripts got (written whole, then renamed)."""
        if self.clock_file is None:
            return
        tmp = self.clock_file.with_suffix(".tmp")
        with contextlib.suppress(OSError):
            tmp.write_text(json.dumps({"elapsed": round(self.elapsed(), 3)}))
            tmp.replace(self.clock_file)

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
            self.save_clock()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.05, wake - self.elapsed()))
        self.save_clock()

    async def _send(self, c: _Cluster, index: int, changed: bool, now: float) -> bool:
        assert self.send is not None
        at, needs = c.timeline[index]
        c.generation = max(c.generation + 1, time.time_ns() // 1_000_000)
        rollup: dict[str, Any] = {
            "cluster": c.name,
            "generation": c.generation,
            "needs": [n.model_dump(mode="json") for n in needs],
        }
        if self.health is not None:
            rollup["health"] = {"machine_ids": self.health(c.name)}
        try:
            where = await self.send(c.name, rollup)
        except Exception as err:
            self.errors += 1
            print(f"  t+{now:4.0f}s roll-up of {c.name} failed: {err}", flush=True)
            return False
        if changed:
            total = sum(n.count for n in needs)
            summary = (
                ", ".join(f"{n.count}×p{n.priority}" for n in needs) if needs else "no needs"
            )
            print(
                f"  t+{now:4.0f}s roll-up {c.name} -> {where}: {len(needs)} need(s), "
                f"{total} machine(s) [{summary}]",
                flush=True,
            )
        return True
