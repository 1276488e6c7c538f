"""The comparison's verdict states cost and service together (bands >= 500000), on hand-made
summaries: no simulation needed."""

from __future__ import annotations

from typing import Any

import pytest

from bigfleet.simulation.compare import comparison, headline, render_comparison, verdict

TOP, MID, LOW = ">=900000", "500000-899999", "100000-499999"


def summary(cost: float, **served: float | None) -> dict[str, Any]:
    bands = {
        {"top": TOP, "mid": MID, "low": LOW}[k]: {"served_fraction": v} for k, v in served.items()
    }
    return {"cost_total": cost, "bands": bands}


def test_bigfleet_cheaper_and_at_least_as_good() -> None:
    v = verdict(summary(800.0, top=0.99, mid=0.95), summary(1000.0, top=0.99, mid=0.90))
    assert v["cheaper"] == "bigfleet"
    assert v["cost_difference"] == 200.0 and v["cost_difference_fraction"] == 0.2
    assert v["bands_served_worse_by_bigfleet"] == {}
    assert v["bands_served_worse_by_per_cluster"] == {MID: {"served": 0.90, "against": 0.95}}
    assert v["text"] == (
        "BigFleet costs $200.00 less (20.0 % of per-cluster's $1,000.00) and serves every band "
        ">= 500000 at least as well; per-cluster serves 500000-899999 90.00 % of its demand "
        "against 95.00 %"
    )


def test_per_cluster_cheaper_but_serves_the_top_band_worse() -> None:
    """The mixed-fleet day's shape: alone is $5,429.19 cheaper but serves the top band less."""
    v = verdict(
        summary(22449.19, top=0.997, mid=0.986), summary(17020.0, top=0.894, mid=0.986)
    )
    assert v["cheaper"] == "per_cluster" and v["cost_difference"] == 5429.19
    assert v["bands_served_worse_by_per_cluster"] == {TOP: {"served": 0.894, "against": 0.997}}
    assert v["bands_served_worse_by_bigfleet"] == {}
    assert v["text"] == (
        "per-cluster costs $5,429.19 less (24.2 % of BigFleet's $22,449.19) but serves >=900000 "
        "89.40 % of its demand against 99.70 %"
    )
    assert "saves" not in v["text"] and "$-" not in v["text"]


def test_bigfleet_dearer_and_worse() -> None:
    v = verdict(summary(120.0, top=0.90, mid=0.80, low=0.1), summary(100.0, top=0.95, mid=0.80))
    assert v["cheaper"] == "per_cluster" and v["cost_difference"] == 20.0
    assert v["bands_served_worse_by_bigfleet"] == {TOP: {"served": 0.90, "against": 0.95}}
    assert v["text"] == (
        "per-cluster costs $20.00 less (16.7 % of BigFleet's $120.00) and serves every band "
        ">= 500000 at least as well; BigFleet serves >=900000 90.00 % of its demand against "
        "95.00 %"
    )


def test_equal_cost_and_bands_below_500000_do_not_count() -> None:
    v = verdict(summary(62.4, top=0.9726, low=0.2), summary(62.4, top=0.9729, low=0.9))
    assert v["cheaper"] == "equal" and v["cost_difference"] == 0.0
    assert v["bands_served_worse_by_bigfleet"] == {TOP: {"served": 0.9726, "against": 0.9729}}
    assert v["text"] == (
        "BigFleet and per-cluster cost the same ($62.40), but BigFleet serves >=900000 97.26 % "
        "of its demand against 97.29 %"
    )
    both_good = verdict(summary(5.0, mid=1.0), summary(5.0, mid=1.0))
    assert both_good["text"] == (
        "BigFleet and per-cluster cost the same ($5.00), and BigFleet serves every band >= "
        "500000 at least as well"
    )


def test_no_demand_at_500000_or_above_is_said_so() -> None:
    v = verdict(summary(10.0, low=0.5), summary(12.0, low=0.9))
    assert v["cheaper"] == "bigfleet"
    assert v["text"].endswith("(nobody asked for capacity at priority >= 500000)")


@pytest.mark.parametrize("fleet_cost, alone_cost", [(100.0, 90.0), (90.0, 100.0)])
def test_the_printed_comparison_carries_the_verdict_and_no_negative_saving(
    fleet_cost: float, alone_cost: float
) -> None:
    def run(cost: float) -> dict[str, Any]:
        s = {
            **summary(cost, top=0.9),
            "cost_per_useful_machine_hour": 1.0,
            "useful_machine_hours": 10.0,
            "idle_machine_hours": 0.0,
            "preemptions": 0,
            "consolidations": 3,
            "cost_moves": 0,
        }
        s["bands"][TOP].update(p50_s=1.0, p99_s=2.0, waiting=0)
        return {"summary": s, "duration_seconds": 60.0, "shards": 1}

    result = comparison(run(fleet_cost), run(alone_cost), "s")
    text = render_comparison(result)
    assert text.splitlines()[0] == result["headline"]["text"]
    assert ("cheaper" if fleet_cost < alone_cost else "dearer") in text.splitlines()[0]
    assert result["verdict"]["text"] in text
    assert "saves" not in text and "$-" not in text
    row = next(line for line in text.splitlines() if line.startswith("machines moved to cheap"))
    assert row.split()[-2:] == ["3", "3"]


# ---- the headline: the first line of the comparison -------------------------------------------


def report(
    cost: float, hours: float, **bands: tuple[float, float, float | None]
) -> dict[str, Any]:
    """A run's report as `headline` reads it: band -> (machine-hours asked, served, p99 s)."""
    names = {"top": TOP, "mid": MID, "low": LOW}
    return {
        "duration_seconds": hours * 3600,
        "summary": {
            "cost_total": cost,
            "bands": {names[k]: {"p99_s": p99} for k, (_, _, p99) in bands.items()},
        },
        "time_to_capacity_by_priority_band": {
            names[k]: {"asked_machine_hours": asked, "served_machine_hours": got}
            for k, (asked, got, _) in bands.items()
        },
    }


def test_the_headline_of_a_cheaper_pool_that_serves_more() -> None:
    """10 hours, $800 against $1,000. Asked at >= 500000: 100 + 900 machine-hours; the pool
    serves 99 + 892 (99.1 %), alone 97 + 877 (97.4 %). The band below 500000, served less by
    the pool, is not in the service figure. The top band's p99: 2 min against 14 min."""
    fleet = report(800.0, 10, top=(100, 99, 120.0), mid=(900, 892, 30.0), low=(50, 10, 9.0))
    alone = report(1000.0, 10, top=(100, 97, 840.0), mid=(900, 877, 31.0), low=(50, 40, 9.0))
    h = headline(fleet, alone)
    assert h["text"] == (
        "BigFleet pooled: $80.00/h against $100/h for every cluster alone (20.0 % cheaper); "
        "served more of the machine-hours asked at priority >= 500000: 99.1 % against 97.4 %; "
        "the highest band (>=900000) waited less: p99 2 min against 14 min."
    )
    assert h["cost_per_hour"] == {"bigfleet": 80.0, "per_cluster": 100.0}
    assert h["served_fraction_at_500000_and_up"] == {"bigfleet": 0.991, "per_cluster": 0.974}
    assert h["highest_band"] == TOP
    assert h["highest_band_p99_s"] == {"bigfleet": 120.0, "per_cluster": 840.0}


@pytest.mark.parametrize(
    "fleet, alone, text",
    [
        # $104 against $100 over 2 hours: 4 % dearer. Served 0.9990 against 0.9994 of the
        # 500000 band's machine-hours: both 99.9 % at one decimal, so two. p99 38 090 s
        # against 3 h.
        (
            report(104.0, 2, mid=(1000, 999.0, 38090.0)),
            report(100.0, 2, mid=(1000, 999.4, 10800.0)),
            "BigFleet pooled: $52.00/h against $50.00/h for every cluster alone (4.0 % dearer); "
            "served less of the machine-hours asked at priority >= 500000: 99.90 % against "
            "99.94 %; the highest band (500000-899999) waited longer: p99 10 h 35 min against "
            "3 h.",
        ),
        # Only a band below 500000 asked: no service figure, and its p99 as the highest
        # band's. Two waits that print alike wait "as long" (121 s and 120.6 s: 2 min 1 s).
        (
            report(30.0, 1, low=(5, 4, 121.0)),
            report(30.0, 1, low=(5, 5, 120.6)),
            "BigFleet pooled: $30.00/h against $30.00/h for every cluster alone (the same "
            "cost); nobody asked for capacity at priority >= 500000; the highest band "
            "(100000-499999) waited as long: p99 2 min 1 s against 2 min 1 s.",
        ),
    ],
)
def test_the_headline_says_a_dearer_or_an_even_pool_so(
    fleet: dict[str, Any], alone: dict[str, Any], text: str
) -> None:
    assert headline(fleet, alone)["text"] == text
