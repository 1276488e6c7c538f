"""The per-cluster baseline's shares of fixed capacity are apportioned over the whole pool of a
kind (docs/simulation.md, "Rounding once per kind"), then laid onto its racks."""

from __future__ import annotations

import json
from typing import Any

from bigfleet.simulation.baseline import lay_out, shares, split_counts
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


def test_the_worked_example_rounds_once_over_the_pool_not_once_per_rack() -> None:
    """Per rack (the old split): 10 x 5/16 = 3.125 for a, b, c and 10 x 1/16 = 0.625 for d;
    floors 3, 3, 3, 0 leave one machine, and d's remainder (0.625) is the largest: every rack
    gives d one, so d holds 3 machines for a peak of 1 (its fair part of 30 is 1.875).
    Whole pool: 30 x 5/16 = 9.375 and 30 x 1/16 = 1.875; floors 9, 9, 9, 1 leave two: d
    (0.875) and then a (0.375, the tie going to the first) -> 10, 9, 9, 2. Laid out, largest
    share first, each on the rack with the least room that holds all of it: a r1, b r2, c r3;
    d's 2 fit on no single rack, so one goes on r2 and one on r3."""
    per_rack = split_counts(10, [5, 5, 5, 1])
    assert per_rack == [3, 3, 3, 1]
    old_totals = {c: 3 * n for c, n in zip("abcd", per_rack, strict=True)}
    assert old_totals == {"a": 9, "b": 9, "c": 9, "d": 3}

    split = shares(worked_example(), "peak")
    assert split == {
        "a": {"dc-ams/r1": 10, "dc-ams/r2": 0, "dc-ams/r3": 0},
        "b": {"dc-ams/r1": 0, "dc-ams/r2": 9, "dc-ams/r3": 0},
        "c": {"dc-ams/r1": 0, "dc-ams/r2": 0, "dc-ams/r3": 9},
        "d": {"dc-ams/r1": 0, "dc-ams/r2": 1, "dc-ams/r3": 1},
    }
    totals = {c: sum(parts.values()) for c, parts in split.items()}
    assert totals == {"a": 10, "b": 9, "c": 9, "d": 2} != old_totals
    for r in RACKS:  # both runs own the same hardware
        assert sum(parts[r] for parts in split.values()) == 10


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
        "a": 3, "b": 0, "c": 0,
    }


def test_the_layout_always_adds_up_to_every_unit() -> None:
    """Shares that the units a cluster can use cannot hold spill onto other units."""
    placed = lay_out([4, 4], [(6, [0], False), (2, [0], False)])
    assert [sum(col) for col in zip(*placed, strict=True)] == [4, 4]
    assert [sum(row) for row in placed] == [6, 2]
