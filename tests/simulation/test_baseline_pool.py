"""The per-cluster baseline's shares of fixed capacity are apportioned over the whole pool of a
kind (docs/simulation.md, "Rounding once per kind"), then laid onto its racks; no cluster gets
more of an owned pool than it could use at its peak (issue 44)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bigfleet.simulation.baseline import (
    cluster_scenario,
    lay_out,
    shares,
    split_counts,
    unallocated,
)
from bigfleet.simulation.compare import compare, render_comparison
from bigfleet.simulation.per_cluster import per_cluster_report
from bigfleet.simulation.run import Simulation
from bigfleet.simulation.scenario import Scenario

from .scenarios import bare_metal, cloud, cluster, need, quota, rack, scenario

MID = 500_000
RACKS = ("dc-ams/r1", "dc-ams/r2", "dc-ams/r3")


def parsed(raw: dict[str, Any]) -> Scenario:
    return Scenario.model_validate_json(json.dumps(raw))


def worked_example() -> Scenario:
    """Three racks of 10 cpu-64 machines; clusters a, b, c peak at 5 machines, d at 1."""
    return parsed(
        scenario(
            [bare_metal(*(rack(r.split("/")[1], 10, "cpu-64") for r in RACKS))],
            [cluster(c, (0, [need(MID, n)])) for c, n in zip("abcd", (5, 5, 5, 1), strict=True)],
            600,
        )
    )


def test_no_cluster_gets_more_owned_machines_than_its_peak() -> None:
    """Issue 44: the whole pool was handed out in proportion to the peaks, so a, b, c (peak 5)
    held 10, 9, 9 and d (peak 1) 2 of the 30 machines. Now each holds its peak and the 14 no
    cluster can use are left unallocated (the per-cluster run pays for them, idle). The
    largest remainder still rounds once over the pool: per rack, d would get one a rack."""
    assert split_counts(10, [5, 5, 5, 1]) == [3, 3, 3, 1]  # per rack: d 3 for a peak of 1
    split = shares(worked_example(), "peak")
    assert {c: sum(parts.values()) for c, parts in split.items()} == {
        "a": 5, "b": 5, "c": 5, "d": 1,
    }  # fmt: skip
    assert split["d"] == {"dc-ams/r1": 0, "dc-ams/r2": 1, "dc-ams/r3": 0}
    for r in RACKS:
        assert sum(parts[r] for parts in split.values()) <= 10
    assert [(u.key, n) for u, n, _, _ in unallocated(worked_example(), split)] == [
        ("dc-ams/r2", 4), ("dc-ams/r3", 10),
    ]  # fmt: skip


def two_gpu_sites() -> Scenario:
    """Owned GPUs in two datacenters (16 in ams, 12 in iad): research (peak 12) can use
    either; infer-a (8) only ams, infer-b (6) only iad."""
    in_zone = lambda z: [  # noqa: E731
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [z]}
    ]
    return parsed(
        scenario(
            [
                bare_metal(rack("ams-gpu", 16)),
                bare_metal(rack("iad-gpu", 12, zone="iad-1"), name="dc-iad"),
            ],
            [
                cluster("research", (0, [need(0, 12)])),
                cluster("infer-a", (0, [need(MID, 8, requirements=in_zone("ams-1"))])),
                cluster("infer-b", (0, [need(MID, 6, requirements=in_zone("iad-1"))])),
            ],
            600,
        )
    )


def test_a_need_that_fits_two_pools_is_split_not_counted_in_full_toward_both() -> None:
    """Issue 44 (the day example's research-gpu, 163 owned GPUs for a peak of 150, while the
    inference clusters bought p5 on-demand). Counted in full in each pool, research weighed 12
    against infer-a's 8 for ams's 16 (10 : 6) and 12 against infer-b's 6 for iad's 12 (8 : 4):
    18 machines for a peak of 12, the inference clusters short. Split, it weighs on each pool
    by its share of the machines and stops at its peak: the inference clusters get theirs."""
    split = shares(two_gpu_sites(), "peak")
    held = {c: sum(parts.values()) for c, parts in split.items()}
    assert held == {"research": 12, "infer-a": 8, "infer-b": 6}
    assert split["research"] == {"dc-ams/ams-gpu": 8, "dc-iad/iad-gpu": 4}
    assert [(u.key, n) for u, n, _, _ in unallocated(two_gpu_sites(), split)] == [
        ("dc-iad/iad-gpu", 2)
    ]


def test_the_report_shows_each_clusters_share_of_each_owned_pool() -> None:
    result = compare(two_gpu_sites())
    assert result["owned_pools"] == {
        "dc-ams/gpu-8xh100": {
            "machines": 16,
            "clusters": {"research": {"share": 8, "peak": 12}, "infer-a": {"share": 8, "peak": 8}},
            "unallocated": 0,
        },
        "dc-iad/gpu-8xh100": {
            "machines": 12,
            "clusters": {"research": {"share": 4, "peak": 12}, "infer-b": {"share": 6, "peak": 6}},
            "unallocated": 2,
        },
    }
    text = render_comparison(result)
    assert "dc-iad/gpu-8xh100 (12): research 4/12, infer-b 6/6; unallocated 2" in text


def test_owned_machines_no_cluster_was_given_are_still_paid_for() -> None:
    """The 2 iad GPUs nobody was given cost the per-cluster run 10 minutes each, idle."""
    sc = two_gpu_sites()
    split = shares(sc, "peak")
    report, _ = per_cluster_report(sc)
    runs = [Simulation(cluster_scenario(sc, c, split[c])).run() for c in split]
    paid = sum(r["summary"]["cost_total"] for r in runs)
    price = sc.providers[1].racks[0].price_per_hour  # type: ignore[union-attr]
    assert report["summary"]["cost_total"] == pytest.approx(paid + 2 * price * 600 / 3600, abs=0.02)


def test_a_one_rack_need_gets_its_share_on_one_rack() -> None:
    """Racks of 10 and 6; web (listed first) and train each peak at 8, train on one rack
    (`same: bigfleet.io/rack`). Shares 8 and 8. train is laid out first, on the only rack that
    holds all 8 (r1); web gets r2's 6 and r1's last 2. Laid out in the scenario's order
    instead, web would take r1 and train would be split 6 + 2, unable to run."""
    raw = scenario(
        [bare_metal(rack("r1", 10, "cpu-64"), rack("r2", 6, "cpu-64"))],
        [
            cluster("web", (0, [need(MID, 8)])),
            cluster("train", (0, [need(MID, 8, same="bigfleet.io/rack")])),
        ],
        600,
    )
    assert shares(parsed(raw), "peak") == {
        "web": {"dc-ams/r1": 2, "dc-ams/r2": 6},
        "train": {"dc-ams/r1": 8, "dc-ams/r2": 0},
    }


def test_a_zone_bound_cluster_gets_its_share_in_its_zone() -> None:
    """One kind over two zones (racks of 6 in ams-1 and ams-2). east asks for 6 machines in
    ams-2 only; any (listed first, same peak) for 6 anywhere. Shares 6 and 6: east, able to
    use one rack, is laid out first, on it."""
    in_ams2 = [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["ams-2"]}]
    raw = scenario(
        [bare_metal(rack("r1", 6, "cpu-64", "ams-1"), rack("r2", 6, "cpu-64", "ams-2"))],
        [
            cluster("any", (0, [need(MID, 6)])),
            cluster("east", (0, [need(MID, 6, requirements=in_ams2)])),
        ],
        600,
    )
    assert shares(parsed(raw), "peak") == {
        "any": {"dc-ams/r1": 6, "dc-ams/r2": 0},
        "east": {"dc-ams/r1": 0, "dc-ams/r2": 6},
    }


def test_reserved_lines_of_one_type_are_one_pool_over_their_zones() -> None:
    """Reserved m6i.xlarge: 3 in us-east-1a, 3 in us-east-1b; a peaks at 3, b at 2, c at 1.
    Per line: 3 x 3/6 = 1.5, 1, 0.5 -> 2, 1, 0 on each line: a 4, b 2, c 0. Whole pool of 6:
    3, 2, 1 exactly."""
    other_zone = {**quota("reserved", 3, 1.0), "zone": "us-east-1b"}
    raw = scenario(
        [cloud(quota("reserved", 3, 1.0), other_zone)],
        [cluster(c, (0, [need(MID, n)])) for c, n in zip("abc", (3, 2, 1), strict=True)],
        600,
    )
    split = shares(parsed(raw), "peak")
    assert {c: sum(p.values()) for c, p in split.items()} == {"a": 3, "b": 2, "c": 1}
    assert {c: p["aws/m6i.xlarge/us-east-1a"] for c, p in split.items()} == {
        "a": 3,
        "b": 0,
        "c": 0,
    }


def test_the_layout_always_adds_up_to_every_unit() -> None:
    """Shares that the units a cluster can use cannot hold spill onto other units."""
    placed = lay_out([4, 4], [(6, [0], False), (2, [0], False)])
    assert [sum(col) for col in zip(*placed, strict=True)] == [4, 4]
    assert [sum(row) for row in placed] == [6, 2]
