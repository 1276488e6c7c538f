"""examples/week-16-clusters.yaml: a simulated week of 16 clusters on ~350 machines, generated
by examples/make_week_16_clusters.py. The file is what the script prints, it describes the fleet
its header promises, and a run of it is deterministic for its seed."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from bigfleet.simulation.run import run_scenario
from bigfleet.simulation.scenario import load

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
WEEK = EXAMPLES / "week-16-clusters.yaml"


def test_the_committed_week_is_what_the_script_generates():
    script = EXAMPLES / "make_week_16_clusters.py"
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True
    ).stdout
    assert out == WEEK.read_text()


def test_the_week_is_16_clusters_on_about_350_machines_of_every_kind():
    sc = load(WEEK)
    assert (sc.duration_seconds, sc.cycle_seconds) == (604800, 10)
    assert len(sc.clusters) == 16
    raw = sc.model_dump(mode="json")["providers"]
    metal = sum(r["count"] for p in raw if p["kind"] == "bare-metal" for r in p["racks"])
    cloud = sum(q["count"] for p in raw if p["kind"] == "cloud" for q in p["quota"])
    assert (metal, cloud) == (144, 208)
    kinds = {q["capacity_type"] for p in raw if p["kind"] == "cloud" for q in p["quota"]}
    assert kinds == {"reserved", "spot", "on-demand"}
    priorities = {n.priority for c in sc.clusters for r in c.rollups for n in r.needs}
    assert {0, 100_000, 500_000, 900_000, 1_000_000} <= priorities
    last = {c.name: c.rollups[-1].at for c in sc.clusters}
    assert max(last.values()) > 6 * 86400  # demand keeps moving into the last day


def test_the_first_hours_of_the_week_run_the_same_twice():
    sc = load(WEEK).model_copy(update={"duration_seconds": 4 * 3600.0})
    first, second = run_scenario(sc), run_scenario(sc)
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    assert first["actions"]  # the fleet was put to work
