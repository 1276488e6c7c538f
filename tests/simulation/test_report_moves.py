"""The report counts the machines the engine moved for cost: toward cheaper capacity
(consolidations) and for the fleet's bill (cost moves), in one run and summed over the
per-cluster baseline's runs."""

from __future__ import annotations

import json
from typing import Any

from bigfleet.simulation.compare import compare
from bigfleet.simulation.report import render_text
from bigfleet.simulation.scenario import Scenario

from .scenarios import bare_metal, cloud, cluster, need, quota, rack, scenario, simulate

CPU_ONLY = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["cpu-64"]}]


def moves_to_bare_metal() -> dict[str, Any]:
    """b (900000) holds the rack of 4 free bare-metal machines until t=600; a (500000) needs 4
    machines of any kind from t=0, so gets on-demand ones at $6/h. Once b lets go, a's work
    moves onto the rack ($0/h): 4 consolidations (one a cycle, the policy's 2 % budget)."""
    return scenario(
        [bare_metal(rack("r1", 4, "cpu-64")), cloud(quota("on-demand", 8, 6.0))],
        [
            cluster(
                "b",
                (0, [need(900_000, 4, requirements=CPU_ONLY)]),
                (600, [need(900_000, 0, requirements=CPU_ONLY)]),
            ),
            cluster("a", (0, [need(500_000, 4)])),
        ],
        1800,
    )


def test_a_consolidation_is_counted_in_the_summary_and_the_text() -> None:
    _, report = simulate(moves_to_bare_metal())
    assert report["summary"]["consolidations"] == 4
    assert report["summary"]["cost_moves"] == 0  # this engine moves nothing else for cost
    # The on-demand machines the moves replaced were drained as excess and deleted.
    assert report["actions_by_reason"]["delete/idle-timeout"] == 4
    assert "machines moved for cost: 4 toward cheaper capacity" in render_text(report)


def test_the_baseline_sums_its_clusters_moves() -> None:
    """Clusters a and c each need 4 machines from t=0. The cloud account has on-demand at $6/h
    and spot at $1/h (never interrupted) with a quota of 0 until t=300, then 8. Every cluster's
    own account gets the same quota change: alone, each moves its 4 on-demand machines to spot
    once the quota comes; the baseline's report sums them, 8, as BigFleet's run counts 8."""
    spot = quota("spot", 0, 1.0)
    raw = scenario(
        [
            cloud(
                quota("on-demand", 8, 6.0),
                spot,
                quota_changes=[
                    {"at": 300, "instance_type": spot["instance_type"], "zone": spot["zone"],
                     "capacity_type": "spot", "count": 8}
                ],
            )
        ],
        [cluster("a", (0, [need(500_000, 4)])), cluster("c", (0, [need(500_000, 4)]))],
        1800,
    )
    result = compare(Scenario.model_validate_json(json.dumps(raw)))
    assert result["bigfleet"]["summary"]["consolidations"] == 8
    assert result["per_cluster"]["summary"]["consolidations"] == 8
    assert result["per_cluster"]["cost"]["by_capacity_type"]["spot"] > 0
