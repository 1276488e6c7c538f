"""A shard's state in a compact form that crosses continue-as-new (docs/temporal.md).

Columns travel as raw numpy bytes, not as a JSON list of machines: ~45 bytes a machine. Counts,
per-cluster indexes and the id lookup table are rebuilt from the columns on restore.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from .cluster_modes import ClusterModes
from .engine import EngineMemory, FastEngine
from .fences import FenceBook
from .inventory import _COLUMNS, GONE, Inventory
from .models import (
    CapacityType,
    Machine,
    Resources,
    from_wire,
)
from .needs import NeedsTable, needs_state, restore_needs
from .profiles import Profile
from .shard import Shard
from .shard_state import ShardState

# A state larger than this crosses continue-as-new through the snapshot store, in parts of this
# size (under the 600 KB payload limit BigFleet sets its Temporal server to; workers/dev/server.py).
INLINE_BYTES = 400_000


def _pack(array: np.ndarray) -> str:
    return base64.b64encode(zlib.compress(array.tobytes(), 1)).decode()


def _unpack(text: str, dtype: Any) -> np.ndarray:
    return np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype=dtype).copy()


# Columns the shard derives again each cycle (`risk` from its notices, `kept` from do-not-disrupt
# marks): not in the snapshot, whose size decides how many parts it is written in (a replayed
# run must write as many).
DERIVED = frozenset({"risk", "kept"})


def inventory_state(inv: Inventory) -> dict[str, Any]:
    """The inventory's columns, packed, with the tables that name their codes."""
    n = inv.rows_used
    return {
        "rows": n,
        "columns": {
            name: _pack(getattr(inv, name)[:n]) for name in _COLUMNS if name not in DERIVED
        },
        "id_prefix": _pack(inv.ids.prefix[:n]),
        "id_number": _pack(inv.ids.number[:n]),
        "id_prefixes": [list(p) for p in inv.ids._prefixes],
        "profiles": [
            {
                "provider": p.provider,
                "instance_type": p.instance_type,
                "zone": p.zone,
                "capacity_type": p.capacity_type.value,
                "price_per_hour": p.price_per_hour,
                "interruption_probability": p.interruption_probability,
                "resources": p.resources.model_dump(),
                "labels": [list(kv) for kv in p.labels],
            }
            for p in inv.profiles.profiles
        ],
        "clusters": inv.clusters.names,
        "providers": inv.providers.names,
        "domains": inv.domains.names,
        "last_error": {str(r): e for r, e in inv.last_error.items()},
    }


def restore_inventory(state: dict[str, Any]) -> Inventory:
    """An inventory from `inventory_state`'s form: counts, indexes and ids rebuilt."""
    n = state["rows"]
    inv = Inventory(capacity=max(n, 16))
    for name, (dtype, _) in _COLUMNS.items():
        if name in state["columns"]:  # (a column added since the snapshot keeps its fill)
            getattr(inv, name)[:n] = _unpack(state["columns"][name], dtype)
    inv.ids.prefix[:n] = _unpack(state["id_prefix"], np.uint16)
    inv.ids.number[:n] = _unpack(state["id_number"], np.uint32)
    for text, width in state["id_prefixes"]:
        inv.ids._prefix_ids[(text, width)] = len(inv.ids._prefixes)
        inv.ids._prefixes.append((text, width))
    for p in state["profiles"]:
        inv.profiles.intern(
            Profile(
                provider=p["provider"],
                instance_type=p["instance_type"],
                zone=p["zone"],
                capacity_type=CapacityType(p["capacity_type"]),
                price_per_hour=p["price_per_hour"],
                interruption_probability=p["interruption_probability"],
                resources=Resources(**p["resources"]),
                labels=tuple((k, v) for k, v in p["labels"]),
            )
        )
    for name in state["clusters"]:
        inv.clusters.intern(name)
    for name in state["providers"]:
        inv.providers.intern(name)
    for name in state["domains"]:
        inv.domains.intern(name)
    inv.last_error = {int(r): e for r, e in state["last_error"].items()}
    inv.rows_used = n
    live = np.flatnonzero(inv.state[:n] != GONE)
    inv._free = np.flatnonzero(inv.state[:n] == GONE).tolist()
    inv.ids._insert(live)
    inv.counts = np.zeros((inv.counts.shape[0], max(len(inv.profiles), 1)), dtype=np.int64)
    inv.recount(live)
    return inv


def shard_state(shard: Shard) -> dict[str, Any]:
    """The shard's part of its `ShardState`, as that state's dict (JSON-ready)."""
    state = {
        "id": shard.id,
        "epoch": shard.epoch,
        "seq": shard.seq,
        "cycles": shard.cycles,
        "inventory": inventory_state(shard.inventory),
        "needs": needs_state(shard.needs),
        "memory": {
            "shortfall_age": shard.engine.memory.shortfall_age,
            "forecast": shard.engine.memory.forecast,
        },
        "refusals": [[c, p, until, why] for (c, p), (until, why) in shard.refusals.items()],
        **(
            {"refused": [[c, p, first, n] for (c, p), (first, n) in shard.refused.items()]}
            if shard.refused
            else {}
        ),
        "rejections": list(shard.rejections),
        "transfer_out": sorted(shard.transfer_out),
        "handoff": [m.model_dump(mode="json") for m in shard.handoff.values()],
        "leaving": [m.model_dump(mode="json") for m in shard.leaving.values()],
        "moved": shard.moved,
        "decommissioned": sorted(shard.decommissioned),
    }
    if shard.unheard:  # (only then: a state's size decides its snapshot's parts)
        state["unheard"] = shard.unheard
    if shard.disruption.clusters:  # (likewise)
        state["disruption"] = shard.disruption.state()
    if shard.modes.changed:  # (likewise)
        state["unmanaged"] = sorted(shard.modes.unmanaged)
    if shard.modes.shadow or shard.shadows.records:  # (likewise)
        state["shadow_clusters"] = shard.shadows.state(shard.modes.shadow)
    if shard.notices:  # (likewise)
        state["notices"] = shard.notices.state()
    if shard.blocked.drains:  # (likewise)
        state["blocked"] = shard.blocked.state()
    if shard.fences:  # (likewise; only runs that re-epoch have any: workflows/shard_fences.py)
        state["fences"] = shard.fences.state()
    return state


def restore_shard(state: Mapping[str, Any] | ShardState, shard: Shard) -> Shard:
    """Fill a freshly made `shard` (its policy already set) from `state`: its part of a
    `ShardState`, or that state's dict (`shard_state`)."""
    s = state if isinstance(state, ShardState) else ShardState.model_validate(state)
    shard.id = s.id
    shard.epoch = s.epoch
    shard.seq = s.seq
    shard.cycles = s.cycles
    shard.inventory = restore_inventory(s.inventory)
    # (The table as the run set it up: how it reads a need's spread, for one.)
    table = NeedsTable(shard.policy.max_silence_seconds)
    table.host_spread_holds = shard.needs.host_spread_holds
    shard.needs = restore_needs(s.needs, shard.policy.max_silence_seconds, table)
    shard.engine = FastEngine(shard.inventory, shard.policy)
    shard.engine.memory = EngineMemory(
        shortfall_age=dict(s.memory["shortfall_age"]),
        forecast=dict(s.memory["forecast"]),
    )
    shard.refusals = {(c, p): (until, why) for c, p, until, why in s.refusals}
    shard.refused = {(c, p): (first, n) for c, p, first, n in s.refused or []}
    shard.rejections.extend(s.rejections)
    shard.transfer_out = set(s.transfer_out)
    shard.handoff = {m["id"]: from_wire(Machine, m) for m in s.handoff}
    shard.leaving = {m["id"]: from_wire(Machine, m) for m in s.leaving}
    shard.moved = dict(s.moved)
    shard.decommissioned = set(s.decommissioned)
    shard.unheard = dict(s.unheard or {})
    if s.unmanaged is not None:
        shard.modes = ClusterModes(s.unmanaged)
        shard.modes.changed = True
    if s.shadow_clusters:
        shard.shadows.restore(s.shadow_clusters)
        names = s.shadow_clusters.get("names")
        if s.unmanaged is not None and isinstance(names, list):  # (changed at run time)
            shard.modes.shadow = frozenset(n for n in names if n in shard.modes.unmanaged)
    shard.disruption.restore(s.disruption)
    shard.notices.restore(s.notices)
    shard.blocked.restore(s.blocked)
    shard.fences = FenceBook.restore(s.fences)
    return shard
