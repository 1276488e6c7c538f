"""Day-2 trouble in the simulator (issue 33): spot interruptions announced ahead, racks that
fail, operators that report their nodes' health. The worked example is
examples/rack-failure.yaml: what its comments promise is what these check."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from bigfleet.models import from_wire
from bigfleet.simulation.run import Simulation
from bigfleet.simulation.scenario import Scenario, ScenarioError, load

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "rack-failure.yaml"


def run(**policy: object) -> tuple[Simulation, dict]:
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["policy"] = {**raw.get("policy", {}), **policy}
    sim = Simulation(from_wire(Scenario, raw))
    return sim, sim.run()


@pytest.fixture(scope="module")
def example() -> tuple[Simulation, dict]:
    return run()


def drains_of(report: dict, cluster: str, reason: str) -> list[dict]:
    return [
        a for a in report["actions"]
        if a["kind"] == "drain" and a["cluster"] == cluster and a["reason"] == reason
    ]  # fmt: skip


def test_a_rack_cut_off_from_its_cluster_replaces_nothing_and_escalates(example):
    _, report = example
    n = report["notices_and_repair"]
    assert n["repair_held"] == {"train": 8}
    assert drains_of(report, "train", "unhealthy") == []
    [held] = [s for s in report["escalations"] if s["cluster"] == "train"]
    assert "max_unhealthy allows 2" in held["profile"]
    # The partition lasted 30 min: the hold is seen through it, and ends with it.
    assert 3600 < held["first_t"] < 3600 + 180 and 5400 - 60 <= held["last_t"] < 5400 + 60
    assert report["clusters"]["train"]["needs"][0]["satisfied"] == 8


def test_without_the_short_circuit_the_same_partition_replaces_the_whole_cluster():
    _, report = run(max_unhealthy="100%")
    assert len(drains_of(report, "train", "unhealthy")) == 8
    assert report["notices_and_repair"]["repair_held"] == {}


def test_a_degraded_rack_within_max_unhealthy_is_repaired_and_its_machines_wait(example):
    sim, report = example
    repaired = drains_of(report, "web", "unhealthy")
    assert len(repaired) == 4 and {a["provider"] for a in repaired} == {"dc-ams"}
    assert all(7200 <= a["t"] < 7200 + 60 for a in repaired)
    assert report["notices_and_repair"]["repaired"] == 4
    # Their replacements came at once; web never went without for long.
    assert report["clusters"]["web"]["needs"][0]["satisfied"] == 20


def test_a_rack_that_loses_power_is_replaced_without_a_judgement_call(example):
    _, report = example
    dead = [f for f in report["failures"] if "lost power" in (f["error"] or "")]
    assert len(dead) == 16
    assert report["clusters"]["web"]["needs"][0]["satisfied"] == 20


def test_spot_warnings_drain_ahead_and_no_interruption_hits_work(example):
    _, report = example
    n = report["notices_and_repair"]
    assert n["drained_ahead"] >= 5
    assert n["interrupted_at_work"] == 0
    assert 0 < n["ahead_machine_seconds"] <= 120 * n["drained_ahead"]
    assert n["penalty_saved"] == 2.0 * n["drained_ahead"]  # (batch's penalty each)


def test_a_rack_failure_naming_no_provider_is_refused(tmp_path):
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["rack_failures"][0]["provider"] = "nowhere"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ScenarioError, match=r"rack_failures\.0\.provider"):
        load(path)


def test_the_report_counts_what_disruption_budgets_held_back():
    from tests.simulation.scenarios import cloud, cluster, need, quota, scenario, simulate

    def run(budgets: list) -> dict:
        raw = scenario(
            [cloud(quota("on-demand", 10, 1.0))],
            [cluster("web", (0, [need(900000, 6)]), (600, [need(900000, 2)]))],
            1800,
        )
        raw["policy"] = {"disruption_budgets": budgets, "excess_grace_seconds": 60}
        return simulate(raw)[1]

    free, bounded = run([]), run([{"machines": "1", "reasons": ["excess"]}])
    assert free["disruption_held_back"] == {}
    assert bounded["disruption_held_back"]["excess"] > 0
    excess = [a["t"] for a in bounded["actions"] if a["kind"] == "drain"]
    assert len(excess) == 4 and len(set(excess)) == 4  # one at a time, as the budget says
