"""`bigfleet bench snapshot`: how large a shard's state is when it continues as new, how long
encoding and decoding take, and whether it fits in one Temporal payload or goes through the
snapshot store (and in how many parts). Numbers, not assertions."""

from __future__ import annotations

import json
import math
import random
import time
from typing import Any

from .shard import Shard
from .snapshot import INLINE_BYTES, restore_shard, shard_state
from .synthetic import fleet, rollups

CLUSTERS = 100
NEEDS_PER_CLUSTER = 3


def synthetic_shard(size: int, seed: int) -> Shard:
    shard = Shard(0, capacity=size)
    shard.adopt(fleet(random.Random(seed), size, CLUSTERS), 0)
    for r in rollups(random.Random(seed + 1), CLUSTERS, NEEDS_PER_CLUSTER, size):
        shard.receive(r, 0)
    shard.cycle(10)
    return shard


def run(sizes: list[int], seed: int = 7, part_bytes: int = INLINE_BYTES) -> dict[str, Any]:
    rows = []
    for size in sizes:
        shard = synthetic_shard(size, seed)
        start = time.perf_counter()
        blob = json.dumps(shard_state(shard), separators=(",", ":"))
        encode = time.perf_counter() - start
        start = time.perf_counter()
        back = restore_shard(json.loads(blob), Shard(0))
        decode = time.perf_counter() - start
        if back.machines_by_state() != shard.machines_by_state():
            raise RuntimeError(f"{size} machines: the snapshot did not restore the same shard")
        inline = len(blob) <= INLINE_BYTES
        rows.append(
            {
                "machines": size,
                "bytes": len(blob),
                "bytes_per_machine": round(len(blob) / size, 1),
                "encode_ms": round(encode * 1000, 1),
                "decode_ms": round(decode * 1000, 1),
                "travels": "inline" if inline else "snapshot store",
                "parts": 0 if inline else math.ceil(len(blob) / part_bytes),
            }
        )
    return {"inline_bytes": INLINE_BYTES, "rows": rows}


def render(result: dict[str, Any]) -> str:
    head = (
        f"{'machines':>9} {'bytes':>10} {'B/machine':>10} {'encode ms':>10} {'decode ms':>10} "
        f"{'travels':>15} {'parts':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in result["rows"]:
        lines.append(
            f"{r['machines']:>9} {r['bytes']:>10} {r['bytes_per_machine']:>10} "
            f"{r['encode_ms']:>10} {r['decode_ms']:>10} {r['travels']:>15} {r['parts']:>6}"
        )
    lines.append(
        f"state over {result['inline_bytes']} bytes goes through the snapshot store in parts of "
        "that size (under the payload limit BigFleet sets its Temporal server to: 600 KB)"
    )
    return "\n".join(lines)
