"""Cost you can see (issue 31) as the command line prints it: `bigfleet status`, `bigfleet
cluster NAME` and `bigfleet shadow report`, and the shadow record's spend of each side."""

from __future__ import annotations

from bigfleet.models import MachineState
from bigfleet.shadow import Baseline, ShadowBook
from bigfleet.shard import Shard
from tests.fleet import bare_metal, need, on_demand, rollup
from workers.verbs import shadow as shadow_verb
from workers.verbs.status import render_cluster, render_spend, render_status

S = MachineState
BM = "dc-ams/gpu-8xh100/ams-1/bare-metal"
SPEND = {
    "dollars_per_hour": 118.4,
    "by_capacity_type": {"on-demand": 30.0, "spot": 5.4, "reserved": 8.0, "bare-metal": 75.0},
    "by_band": {">=900000": 33.0, "unassigned": 55.0},
    "idle_owned_machines": {BM: 3},
    "elastic_while_owned_idle_machines": 3,
    "at": 10.0,
}
STATUS = {
    "shard": 1, "epoch": 5, "cycles": 3, "last_cycle_ms": 0.4, "coordinator_term": 0,
    "machines": {"CONFIGURED": 8}, "clusters": ["a"], "needs": 1, "shortfalls": [],
}  # fmt: skip


def test_status_prints_the_shards_dollars_per_hour_by_capacity_type():
    text = render_status({**STATUS, "spend": SPEND})
    assert (
        "  cost:       $118.40/h (on-demand $30.00, spot $5.40, reserved $8.00, "
        "bare-metal $75.00); idle owned 3; elastic while owned idle 3 (an idle owned machine "
        "would do)"
    ) in text
    quiet = {**SPEND, "by_capacity_type": {"spot": 1.8, "on-demand": 0.0},
             "dollars_per_hour": 1.8, "idle_owned_machines": {},
             "elastic_while_owned_idle_machines": 0}  # fmt: skip
    assert "  cost:       $1.80/h (spot $1.80); idle owned 0\n" in render_status(
        {**STATUS, "spend": quiet}
    ) + "\n"
    assert "not measured yet" in render_status({**STATUS, "spend": None})
    assert "cost:" not in render_status(STATUS)  # (a shard from before: nothing said)
    assert render_spend(None).startswith("  cost:")


def test_cluster_prints_its_dollars_per_hour_by_band_and_capacity_type():
    view = {
        "shard": 0, "cluster": "a", "needs": [], "upcoming": [], "reclaims": [],
        "available": {},
        "spend": {
            "dollars_per_hour": 54.0,
            "by_band": {
                ">=900000": {"bare-metal": 15.0, "on-demand": 18.0},
                "<100000": {"bare-metal": 15.0},
                "unclaimed": {"on-demand": 6.0},
            },
        },
    }  # fmt: skip
    text = render_cluster(view)
    assert text.endswith(
        "  cost:      $54.00/h\n"
        "    >=900000: bare-metal $15.00, on-demand $18.00\n"
        "    <100000: bare-metal $15.00\n"
        "    unclaimed: on-demand $6.00"
    )
    assert "not measured yet" in render_cluster({**view, "spend": None})


def _shadow_round() -> ShadowBook:
    """One shadow cycle as workflows/shadow.py runs it: the baseline, the decision applied,
    then both sides measured."""
    shard = Shard(0)
    shard.adopt([bare_metal(0, S.IDLE, price=15.0), on_demand(0, S.CONFIGURED, cluster="a")], 0.0)
    assert shard.receive(rollup("a", 1, need(2, 900_000)), 0.0) is None
    base = Baseline.of(shard.inventory)
    shard.cycle(10.0)
    book = ShadowBook()
    book.decided(base, shard.inventory, shard.needs, [], 10.0)
    book.measured(
        shard.spend(assigned_at=10.0), shard.spend(state=base.state, cluster=base.cluster)
    )
    return book


def test_the_shadow_report_has_the_spend_of_both_sides():
    report = _shadow_round().report(0)
    would, actual = report["would_be"]["spend"], report["actual"]["spend"]
    # Would be: the idle bare-metal machine configuring for a (900 000) next to the on-demand
    # one; actually: the on-demand machine no need had claimed yet and the rack idle, a pair.
    assert would["dollars_per_hour"] == actual["dollars_per_hour"] == 21.0
    assert would["by_band"] == {">=900000": 21.0}
    assert actual["by_band"] == {">=900000": 6.0, "unassigned": 15.0}
    assert would["idle_owned_machines"] == {} and actual["idle_owned_machines"] == {BM: 1}
    assert would["elastic_while_owned_idle_machines"] == 0
    assert actual["elastic_while_owned_idle_machines"] == 1
    text = shadow_verb.render(report)
    assert "  billed $/h                   $21.00       $21.00" in text
    assert "    bare-metal                 $15.00       $15.00" in text
    assert "  idle owned machines               0            1" in text
    assert "  elastic w/ owned idle             0            1" in text


def test_the_spend_is_measured_again_each_cycle_not_carried():
    book = _shadow_round()
    assert "spend" not in book.state()
    report = ShadowBook(book.state()).report(0)  # as the next run sees it before a cycle
    assert report["would_be"]["spend"] is None and report["actual"]["spend"] is None
    assert "billed $/h" not in shadow_verb.render(report)
