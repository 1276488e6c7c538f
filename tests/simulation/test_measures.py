"""The report's measures, each checked against a small scenario worked out by hand.

Bare metal here: a commissioned machine is claimed in 1 s and configured in 120 s (the defaults
of `kind: bare-metal`), so a machine asked for at a cycle is configured 121 s later.
"""

from __future__ import annotations

import pytest

from bigfleet.simulation.measures import Asks, WaitBook, moved_within_cluster

from .scenarios import bare_metal, cloud, cluster, need, quota, rack, scenario, simulate

LOW, MID, HIGH = 100_000, 500_000, 900_000


def test_an_ask_is_answered_oldest_first_and_a_withdrawn_one_is_no_wait() -> None:
    book = WaitBook()
    asks = Asks(MID)
    asks.want(2, 0.0, book)  # two machines asked for at t=0
    asks.want(3, 50.0, book)  # one more at t=50
    asks.answer_one(100.0, book)  # the first machine: answers the ask of t=0
    asks.withdraw(1, book)  # the need drops to one short: the newest ask (t=50) is withdrawn
    assert book.waits["500000-899999"] == [100.0]
    assert book.withdrawn["500000-899999"] == 1
    assert list(asks.open) == [0.0]
    asks.want(0, 400.0, book)  # the cycle finds it satisfied: the last ask answered at 400
    assert book.waits["500000-899999"] == [100.0, 400.0]


def test_still_open_asks_count_with_their_wait_so_far() -> None:
    book = WaitBook()
    asks = Asks(HIGH)
    asks.want(1, 0.0, book)
    asks.answer_one(10.0, book)
    asks.want(1, 100.0, book)
    summary = book.by_band({">=900000": [900.0]})[">=900000"]
    assert (summary["answered"], summary["waiting"], summary["longest_wait"]) == (1, 1, 900.0)
    assert summary["p99"] == pytest.approx(10 + 0.99 * 890)


def test_a_higher_band_taking_machines_of_a_lower_one_is_a_move() -> None:
    # (priority, count, satisfied) before; (count, satisfied) now.
    moved, lost, gained = moved_within_cluster(
        [(LOW, 4, 4), (HIGH, 0, 0)], [(4, 2), (2, 2)]
    )
    assert (moved, lost, gained) == (2, {LOW: 2}, {HIGH: 2})
    # A need that shrinks gives machines up; nobody took them.
    assert moved_within_cluster([(LOW, 4, 4)], [(2, 2)])[0] == 0
    # A lower band gaining while a higher one loses is no move to a higher band.
    assert moved_within_cluster([(LOW, 0, 0), (HIGH, 2, 2)], [(2, 2), (2, 0)])[0] == 0


def test_time_to_capacity_counts_each_machine_from_when_it_was_asked_for() -> None:
    """2 machines at t=0, 2 more at t=1000: each configured 121 s after it was asked for
    (the old measure counted all four from the growth at 1000)."""
    raw = scenario(
        [bare_metal(rack("r1", 4, "cpu-64"))],
        [cluster("c", (0, [need(MID, 2)]), (1000, [need(MID, 4)]))],
        2000,
    )
    _, report = simulate(raw)
    band = report["time_to_capacity_by_priority_band"]["500000-899999"]
    assert (band["p50"], band["p99"], band["answered"], band["waiting"]) == (121.0, 121.0, 4, 0)
    # Asked: 2 machines for 2000 s + 2 for 1000 s = 6000 machine-seconds. Served, counted from
    # the first cycle after each was configured (t=130 and t=1130): 2 x 1870 + 2 x 870 = 5480.
    assert band["served_fraction"] == pytest.approx(5480 / 6000, abs=1e-4)
    assert report["summary"]["useful_machine_hours"] == pytest.approx(5480 / 3600, abs=0.01)


def test_a_higher_band_of_the_same_cluster_taking_machines_is_counted_and_the_loser_waits():
    """c runs 4 machines at priority 100000; at t=1000 its 900000 need asks for 2 and the rack
    is full: the 900000 need takes 2 of the cluster's own machines at once (its pods preempt
    the lower ones inside the cluster). Two moves away from work; the 100000 need is short 2
    from t=1000 to the end, still waiting 1000 s."""
    raw = scenario(
        [bare_metal(rack("r1", 4, "cpu-64"))],
        [
            cluster(
                "c",
                (0, [need(LOW, 4), need(HIGH, 0)]),
                (1000, [need(LOW, 4), need(HIGH, 2)]),
            )
        ],
        2000,
    )
    _, report = simulate(raw)
    assert report["moves_away_from_work"]["in_cluster"] == 2
    assert report["in_cluster_moves"] == [
        {"t": 1000.0, "cluster": "c", "machines": 2, "lost": {LOW: 2}, "gained": {HIGH: 2}}
    ]
    assert report["summary"]["preemptions"] == 2
    low = report["time_to_capacity_by_priority_band"]["100000-499999"]
    assert (low["answered"], low["waiting"], low["longest_wait"]) == (4, 2, 1000.0)
    high = report["time_to_capacity_by_priority_band"][">=900000"]
    assert (high["answered"], high["p99"]) == (2, 0.0)


def test_owned_capacity_is_billed_for_the_whole_time_it_is_owned() -> None:
    """An hour in which nothing is asked for: 4 bare-metal machines at $2/h and 3 reserved
    instances at $1/h are paid for anyway ($11); on-demand quota costs nothing unused."""
    raw = scenario(
        [
            bare_metal({**rack("r1", 4, "cpu-64"), "price_per_hour": 2.0}),
            cloud(quota("reserved", 3, 1.0), quota("on-demand", 3, 5.0)),
        ],
        [cluster("c", (0, [need(LOW, 0)]))],
        3600,
    )
    _, report = simulate(raw)
    assert report["cost"]["by_capacity_type"] == {
        "on-demand": 0.0,
        "spot": 0.0,
        "reserved": 3.0,
        "bare-metal": 8.0,
    }
    assert report["summary"]["cost_per_useful_machine_hour"] is None  # nothing useful was done


def test_cost_per_useful_machine_hour_divides_the_bill_by_the_work_served() -> None:
    """2 on-demand machines at $4/h asked for at t=0 for an hour: each created and configured
    (cloud defaults: create 30-90 s, configure 30 s), then billed until the end."""
    raw = scenario(
        [cloud(quota("on-demand", 2, 4.0), create_latency=[60, 60])],
        [cluster("c", (0, [need(HIGH, 2)]))],
        3600,
    )
    _, report = simulate(raw)
    # Billed from the create at t=0: 2 x $4 x 1 h. Served from the first cycle after the
    # configure finished at t=90: 2 x (3600 - 90) machine-seconds.
    assert report["cost"]["total"] == pytest.approx(8.0)
    useful = 2 * (3600 - 90) / 3600
    per_hour = report["summary"]["cost_per_useful_machine_hour"]
    assert per_hour == pytest.approx(8.0 / useful, rel=1e-3)
    band = report["time_to_capacity_by_priority_band"][">=900000"]
    assert (band["p50"], band["answered"]) == (90.0, 2)
