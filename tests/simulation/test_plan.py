"""`bigfleet plan`: the fewest racks meeting service objectives, for BigFleet and for the
per-cluster baseline, on a scenario worked out by hand."""

from __future__ import annotations

import json
import pathlib

import pytest

from bigfleet.cli import main
from bigfleet.simulation.plan import Objective, ObjectiveError, parse_objective

from .test_compare import two_halves


def test_objectives_are_read_by_band_or_priority() -> None:
    assert parse_objective("900000:served=0.99,p99=600") == Objective(">=900000", 0.99, 600.0)
    assert parse_objective("<100000:served=0.5") == Objective("<100000", 0.5, None)
    for bad, says in [
        ("high:served=1", "neither a priority nor one of"),
        ("900000:served=2", "served is a fraction"),
        ("900000:p50=3", "unknown objective 'p50'"),
        ("900000:p99=soon", "p99 must be a number"),
        ("900000", "give served=FRACTION"),
    ]:
        with pytest.raises(ObjectiveError, match=says):
            parse_objective(bad)


def test_a_band_with_no_demand_meets_any_objective() -> None:
    assert Objective(">=900000", 1.0, 1.0).met({"bands": {}})
    summary = {"bands": {">=900000": {"served_fraction": 0.95, "p99_s": 700.0}}}
    assert not Objective(">=900000", 0.99).met(summary)
    assert not Objective(">=900000", None, 600).met(summary)
    assert Objective(">=900000", 0.9, 800).met(summary)


def test_sharing_over_time_needs_half_the_racks(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Clusters a and b each need 4 machines, a in the first half hour and b in the second;
    racks hold 4. BigFleet hands one rack from a to b and serves more than 80 %. Alone, each
    cluster needs 4 of its own: with one rack split 2 : 2 each gets about half (46 %), so the
    baseline needs two racks."""
    raw = two_halves()
    rack = raw["providers"][0]["racks"][0]
    raw["providers"][0]["racks"] = [rack, {**rack, "rack": "r2"}]
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(raw))
    assert main(["plan", str(path), "--slo", "500000:served=0.8", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["bigfleet"]["racks"] == {"dc-ams/cpu-64": 1}
    assert result["per_cluster"]["racks"] == {"dc-ams/cpu-64": 2}
    assert result["difference"]["machines_saved"] == 4
    assert result["difference"]["owned_per_hour_saved"] == 4.0
    # Every fleet the search tried says whether it met the objective; the answer's one did,
    # one rack fewer did not.
    tried = {t["racks"]["dc-ams/cpu-64"]: t["met"] for t in result["per_cluster"]["tried"]}
    assert tried[2] and not tried[1]


def test_objectives_out_of_reach_are_said_so(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(two_halves()))
    # p99 0 s: no machine is ever configured the moment it is asked for.
    assert main(["plan", str(path), "--slo", "500000:p99=0", "--max-factor", "1"]) == 0
    assert "not met even with 1 racks of dc-ams/cpu-64" in capsys.readouterr().out
    assert main(["plan", str(path), "--slo", "urgent:p99=1"]) == 2
    assert "bigfleet plan: --slo 'urgent:p99=1'" in capsys.readouterr().err
