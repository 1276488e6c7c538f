"""A shard asks before it preempts, in the simulator (issue 45): on 2 shards, a high-priority
need whose shard would preempt its own backfill is served by the other shard's free machines,
handed over by the coordinator, and nothing is preempted; with the bound at 0 it preempts as
before."""

from __future__ import annotations

import zlib

import pytest

from .random_fleets import ITYPE
from .scenarios import GPU, bare_metal, cluster, need, need_of, rack, scenario, simulate
from .test_simulation import one_per_shard

A100 = "gpu-8xa100"


def kinds(*types: str) -> list[dict]:
    return [{"key": ITYPE, "operator": "In", "values": list(types)}]


def two_shards(ask_seconds: float) -> tuple[dict, str, str]:
    """Shard 0 holds a rack of 4 A100 servers and no need; shard 1 a rack of 4 H100s, all held
    by backfill (priority 0, H100s only); at 300 s, backfill configured, a 1 000 000 need of 2
    GPUs of either kind arrives there. (Until then no need on shard 1 fits an A100, so the
    coordinator does not spread shard 0's free ones to it ahead of demand: `headroom.py`.)"""
    racks = one_per_shard([f"r{i}" for i in range(20)])
    # Two clusters the assignment rule puts on shard 1 (`one_per_shard`'s rule).
    backfill, urgent = [n for n in (f"c{i}" for i in range(40)) if zlib.crc32(n.encode()) % 2][:2]
    raw = scenario(
        [bare_metal(rack(racks[0], 4, A100), rack(racks[1], 4))],
        [
            cluster(backfill, (0, [need(0, 4, requirements=kinds(GPU))])),
            cluster(urgent, (300, [need(1_000_000, 2, requirements=kinds(GPU, A100))])),
        ],
        900,
        shards=2,
        policy={"ask_before_preempt_seconds": ask_seconds},
    )
    return raw, backfill, urgent


@pytest.mark.parametrize("ask_seconds", [90, 0], ids=["asks-first", "preempts-at-once"])
def test_a_need_is_served_by_a_hand_over_instead_of_a_preemption(ask_seconds):
    raw, backfill, urgent = two_shards(ask_seconds)
    sim, report = simulate(raw)
    assert report["clusters"][urgent]["shard"] == report["clusters"][backfill]["shard"] == 1
    assert need_of(report, urgent)["satisfied"] == 2
    preempted = [p for p in report["preemptions"] if p["preemptor"] == urgent]
    moved = [t for t in report["transfers"] if t["receiver"] == 1 and t["cluster"] == urgent]
    if ask_seconds:
        assert preempted == []
        # (Free bare metal of shard 0 is speculative until it is configured: moved as such.)
        assert [(t["kind"], t["donor"], t["machines"]) for t in moved] == [("speculative", 0, 2)]
        assert need_of(report, backfill)["satisfied"] == 4
    else:
        assert len(preempted) == 2 and {p["victim"] for p in preempted} == {backfill}
