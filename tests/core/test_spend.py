"""bigfleet/spend.py: a shard's $/h by (cluster, priority band, capacity type), idle owned
machines and elastic machines running where an idle owned one would do (issue 31), worked by
hand on a small inventory, then on a shard the real engine ran."""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np
import pytest

from bigfleet import labels as L
from bigfleet.engine.claims import Claim, ClusterClaims
from bigfleet.inventory import Inventory
from bigfleet.models import CapacityType, MachineState
from bigfleet.needs import Need, NeedsTable
from bigfleet.shard import Shard
from bigfleet.spend import COST_GAUGE, IDLE_OWNED_GAUGE, PAIRS_GAUGE, Spend, export, measure
from bigfleet.spend_book import BANDS, band
from bigfleet.spend_pairs import max_flow as _max_flow
from bigfleet.synthetic import fleet, rollups
from tests.fleet import bare_metal, machine, need, on_demand, rollup, spot, table

S = MachineState
BM = "dc-ams/gpu-8xh100/ams-1/bare-metal"


def test_the_bands_are_the_simulations():
    from bigfleet.simulation.measures import BANDS as SIM_BANDS
    from bigfleet.simulation.measures import band as sim_band

    assert BANDS == SIM_BANDS
    for p in (0, 99_999, 100_000, 499_999, 500_000, 899_999, 900_000, 1_000_000, -5):
        assert band(p) == sim_band(p), p


def _hand_made() -> tuple[Inventory, NeedsTable, dict[str, ClusterClaims]]:
    """Seventeen machines, two clusters, four needs, claims as the engine would have made them
    at the start of a cycle whose assignments (od-0001 configuring, spot-0001 creating)
    came after."""
    inv = Inventory()
    reserved = dict(provider="gcp", price=4.0, instance_type="a3", zone="us-1")
    inv.add(
        [
            bare_metal(0, S.CONFIGURED, price=15.0, cluster="a"),  # a#0 claims it
            bare_metal(1, S.CONFIGURED, price=15.0, cluster="a"),  # a#1 claims it
            bare_metal(2, S.IDLE, price=15.0),  # idle owned, rack r1
            bare_metal(3, S.IDLE, price=15.0, rack="r2"),  # idle owned, rack r2
            bare_metal(4, S.SPECULATIVE, price=15.0, rack="r2"),  # owned: billed anyway
            on_demand(0, S.CONFIGURED, cluster="a"),  # a#0 claims it
            on_demand(6, S.CONFIGURED, cluster="a"),  # a#0 claims it
            on_demand(1, S.IDLE),  # configured for a below, after the claims
            on_demand(2, S.DRAINING, cluster="a"),  # being reclaimed: unclaimed
            on_demand(3, S.DELETING),  # still running at the provider
            on_demand(4, S.SPECULATIVE),  # not created: free
            on_demand(5, S.FAILED),  # gone wrong: not billed
            spot(0, S.CONFIGURED, cluster="b"),  # b#0 claims it
            spot(1, S.SPECULATIVE),  # created for b below, after the claims
            spot(2, S.CONFIGURED, cluster="b"),  # excess: no need claims it
            machine("res-0", CapacityType.RESERVED, S.CONFIGURED, cluster="b", **reserved),
            machine("res-1", CapacityType.RESERVED, S.FAILED, **reserved),  # owned: billed
        ],
        0.0,
    )
    # This cycle's assignments, as `FastEngine.apply` makes them: the move and the holder.
    inv.move(inv.row("od-0001"), S.CONFIGURING, 1.0, cluster="a")
    inv.set_holder(np.array([inv.row("od-0001")]), 900_000, 0.0, 0.0)
    inv.move(inv.row("spot-0001"), S.CREATING, 1.0, cluster="b")
    inv.set_holder(np.array([inv.row("spot-0001")]), 500_000, 0.0, 0.0)
    needs = table(
        rollup("a", 1, need(3, 900_000), need(1, 50_000)),
        rollup(
            "b",
            1,
            need(1, 500_000, requirements=_spot_only()),
            {"requirements": [], "priority": 200_000, "count": 1},
        ),
    )
    a0, a1 = needs.needs_of("a")
    b0, b1 = needs.needs_of("b")
    pid = {mid: int(inv.profile[inv.row(mid)]) for mid in ("gpu-0000", "od-0000", "spot-0000")}
    pid["res"] = int(inv.profile[inv.row("res-0")])

    def claims(*cs: tuple[Need, str, int, int]) -> ClusterClaims:
        out = ClusterClaims()
        for n, p, slot, count in cs:
            out.claims.setdefault(n.key, []).append(Claim(n, pid[p], slot, count, 0))
        return out

    return (
        inv,
        needs,
        {
            "a": claims(
                (a0, "gpu-0000", 0, 1),
                (a0, "od-0000", 0, 2),
                (a1, "gpu-0000", 0, 1),
                # a#1 asks for one more on-demand machine: a#0, higher, holds both there are.
                (a1, "od-0000", 0, 1),
            ),
            "b": claims((b0, "spot-0000", 0, 1), (b1, "res", 0, 1)),
        },
    )


def _spot_only() -> list[dict[str, Any]]:
    return [
        {"key": L.INSTANCE_TYPE, "operator": "In", "values": ["gpu-8xh100"]},
        {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["spot"]},
    ]


def test_a_hand_made_shard_costs_what_its_billed_machines_cost():
    inv, needs, claims = _hand_made()
    spend = measure(inv, needs, claims, assigned_at=1.0)
    assert spend.dollars_per_hour == pytest.approx(
        {
            # a: a#0 (900 000) holds gpu-0000 and od-0000, od-0006 by its claims, and od-0001
            # (configuring since the claims, given at 900 000); a#1
            # (50 000) holds gpu-0001; od-0002 drains for nobody.
            ("a", ">=900000", "bare-metal"): 15.0,
            ("a", ">=900000", "on-demand"): 3 * 6.0,
            ("a", "<100000", "bare-metal"): 15.0,
            ("a", "unclaimed", "on-demand"): 6.0,
            # b: b#0 (500 000) holds spot-0000 and spot-0001 (creating since the claims, given
            # at 500 000);
            # b#1 (200 000) the reserved machine; spot-0002 is excess.
            ("b", "500000-899999", "spot"): 2 * 1.8,
            ("b", "100000-499999", "reserved"): 4.0,
            ("b", "unclaimed", "spot"): 1.8,
            # Nobody's: three bare-metal machines (two idle, one speculative: owned capacity
            # is paid for in every state), od-0003 still deleting, res-1 failed but reserved.
            # Not billed: od-0004 (speculative), od-0005 (failed).
            ("", "unassigned", "bare-metal"): 3 * 15.0,
            ("", "unassigned", "on-demand"): 6.0,
            ("", "unassigned", "reserved"): 4.0,
        }
    )
    assert spend.total() == pytest.approx(118.4)
    assert spend.by_capacity_type() == pytest.approx(
        {"on-demand": 30.0, "spot": 5.4, "reserved": 8.0, "bare-metal": 75.0}
    )
    # Idle owned: two bare-metal GPUs IDLE, one SPECULATIVE (never claimed yet); res-1 failed.
    assert spend.idle_owned == {BM: 3, "gcp/a3/us-1/reserved": 0}
    # a#0 runs three on-demand machines (two configured, one configuring) that a bare-metal
    # GPU would do, and three are idle: three pairs. b#0 asks for spot only: none.
    assert spend.elastic_while_owned_idle == 3


def test_what_status_and_cluster_show():
    inv, needs, claims = _hand_made()
    spend = measure(inv, needs, claims, assigned_at=1.0)
    summary = spend.summary()
    assert summary["dollars_per_hour"] == pytest.approx(118.4)
    assert summary["by_capacity_type"]["bare-metal"] == pytest.approx(75.0)
    assert list(summary["by_band"]) == [
        ">=900000", "500000-899999", "100000-499999", "<100000", "unclaimed", "unassigned",
    ]  # fmt: skip
    assert summary["idle_owned_machines"] == {BM: 3}  # (profiles with none are left out)
    assert summary["elastic_while_owned_idle_machines"] == 3
    a = spend.of_cluster("a")
    assert a["dollars_per_hour"] == pytest.approx(54.0)
    assert a["by_band"] == {
        ">=900000": {"bare-metal": 15.0, "on-demand": 18.0},
        "<100000": {"bare-metal": 15.0},
        "unclaimed": {"on-demand": 6.0},
    }
    assert spend.of_cluster("nobody") == {"dollars_per_hour": 0.0, "by_band": {}}


def test_machines_no_claim_covers_are_unclaimed_unless_the_cycle_just_moved_them():
    """Measured at another time than right after the cycle (`assigned_at` None), or before
    the engine's first cycle (no claims), nothing is known to be newer than the claims."""
    inv, needs, claims = _hand_made()
    later = measure(inv, needs, claims)
    assert later.dollars_per_hour[("a", ">=900000", "on-demand")] == pytest.approx(12.0)
    assert later.dollars_per_hour[("a", "unclaimed", "on-demand")] == pytest.approx(12.0)
    assert later.dollars_per_hour[("b", "unclaimed", "spot")] == pytest.approx(3.6)
    assert later.total() == pytest.approx(118.4)
    assert later.elastic_while_owned_idle == 2  # od-0000 and od-0006 are a#0's anyway
    first = measure(inv, needs, None, assigned_at=1.0)
    assert first.dollars_per_hour[("a", ">=900000", "on-demand")] == pytest.approx(6.0)
    assert first.dollars_per_hour[("a", "unclaimed", "on-demand")] == pytest.approx(18.0)
    assert first.dollars_per_hour[("b", "500000-899999", "spot")] == pytest.approx(1.8)
    assert first.total() == pytest.approx(118.4)
    assert first.elastic_while_owned_idle == 1  # only od-0001 is known to be a#0's


def test_a_need_that_fits_one_rack_pairs_only_with_its_idle_machines():
    """Three on-demand machines for a need that only rack r1 fits, one for a need any GPU
    fits; r1 has one idle machine, r2 two: the r1 machine goes to the first need, r2's to
    the second: 2 pairs (a greedy pairing that gave r2 to nobody would say 1)."""
    inv = Inventory()
    inv.add(
        [
            bare_metal(0, S.IDLE, price=15.0),
            bare_metal(1, S.IDLE, price=15.0, rack="r2"),
            bare_metal(2, S.IDLE, price=15.0, rack="r2"),
            *(on_demand(i, S.CONFIGURED, cluster="a") for i in range(4)),
        ],
        0.0,
    )
    rack = {"key": L.RACK, "operator": "In", "values": ["r1"]}
    gpu = {"key": L.INSTANCE_TYPE, "operator": "In", "values": ["gpu-8xh100"]}
    needs = table(
        rollup(
            "a",
            1,
            {"requirements": [gpu, rack], "priority": 900_000, "count": 3},
            {"requirements": [gpu], "priority": 100, "count": 1},
        )
    )
    first, second = needs.needs_of("a")
    od = int(inv.profile[inv.row("od-0000")])
    cc = ClusterClaims()
    cc.claims[first.key] = [Claim(first, od, 0, 3, 0)]
    cc.claims[second.key] = [Claim(second, od, 0, 1, 3)]
    spend = measure(inv, needs, {"a": cc})
    assert spend.elastic_while_owned_idle == 2
    assert spend.idle_owned == {BM: 3}


def test_max_flow_reroutes_a_greedy_choice():
    # Left 0 may use right 0 or 1, left 1 only right 0; one unit each. Greedy in input order
    # would send left 0 to right 0 and strand left 1; the answer is 2.
    assert _max_flow([1, 1], [1, 1], [[0, 1], [0]]) == 2
    assert _max_flow([5], [2, 2], [[0, 1]]) == 4
    assert _max_flow([3, 3], [1], [[0], [0]]) == 1
    assert _max_flow([2, 2, 2], [1, 1, 3], [[0], [0, 1], [1, 2]]) == 4  # L0 gets R0's one
    assert _max_flow([1, 1, 1], [1, 1, 1], [[0, 1], [0, 2], [0]]) == 3
    assert _max_flow([], [1], []) == 0


def test_shadow_columns_are_read_instead_of_the_inventorys():
    """Shadow mode measures the fleet as the last listing left it (`Baseline`): other state
    and cluster columns over the same rows."""
    inv, needs, claims = _hand_made()
    state, cluster = inv.state.copy(), inv.cluster.copy()
    inv.move(inv.row("gpu-0002"), S.CONFIGURING, 2.0, cluster="a")
    inv.set_holder(np.array([inv.row("gpu-0002")]), 900_000, 0.0, 0.0)
    moved = measure(inv, needs, claims, assigned_at=2.0)
    assert moved.idle_owned[BM] == 2
    assert moved.dollars_per_hour[("a", ">=900000", "bare-metal")] == pytest.approx(30.0)
    before = measure(
        inv, needs, claims, assigned_at=1.0, state=state[: inv.rows_used], cluster=cluster
    )
    assert before == measure(*_hand_made(), assigned_at=1.0)


def test_a_shard_the_engine_ran():
    """The real engine's claims: two bare-metal GPUs idle, a need of two at 900 000 takes
    them (configuring: newer than the claims, at the priority they were given), then,
    configured, its claims hold them; an on-demand machine created for a lower need (the
    racks are busy) counts in that need's band, and is no pair: nothing owned is idle."""
    shard = Shard(0)
    shard.adopt(
        [
            bare_metal(0, S.IDLE, price=15.0),
            bare_metal(1, S.IDLE, price=15.0),
            on_demand(0, S.SPECULATIVE),
        ],
        0.0,
    )
    assert shard.receive(rollup("a", 1, need(2, 900_000)), 0.0) is None
    assert shard.spend().dollars_per_hour == {("", "unassigned", "bare-metal"): 30.0}
    decision = shard.cycle(1.0)
    assert decision.count("configure") == 2
    spend = shard.spend(assigned_at=1.0)
    assert spend.dollars_per_hour == {("a", ">=900000", "bare-metal"): 30.0}
    assert spend.idle_owned == {BM: 0}
    for i in range(2):
        shard.observe(bare_metal(i, S.CONFIGURED, price=15.0, cluster="a"), 2.0)
    shard.cycle(3.0)
    assert shard.engine.claims["a"].claimed  # now the claims say whose they are
    assert shard.spend(assigned_at=3.0).dollars_per_hour == {("a", ">=900000", "bare-metal"): 30.0}
    assert shard.receive(rollup("a", 2, need(2, 900_000), need(1, 10)), 4.0) is None
    shard.cycle(5.0)
    spend = shard.spend(assigned_at=5.0)
    assert spend.dollars_per_hour == pytest.approx(
        {("a", ">=900000", "bare-metal"): 30.0, ("a", "<100000", "on-demand"): 6.0}
    )
    assert spend.elastic_while_owned_idle == 0


class _Gauge:
    def __init__(self, meter: _Meter, name: str) -> None:
        self.meter, self.name = meter, name

    def set(self, value: float, attributes: dict[str, str] | None = None) -> None:
        self.meter.sets.append((self.name, value, dict(attributes or {})))


class _Meter:
    """What `export` calls of the SDK's MetricMeter: create_gauge[_float](name, ...).set."""

    def __init__(self) -> None:
        self.sets: list[tuple[str, float, dict[str, str]]] = []

    def create_gauge(self, name: str, description: str | None = None) -> _Gauge:
        return _Gauge(self, name)

    create_gauge_float = create_gauge


def test_export_sets_every_gauge_and_zeroes_what_went_away():
    meter = _Meter()
    first = Spend({("a", ">=900000", "spot"): 3.6, ("", "unassigned", "bare-metal"): 15.0},
                  {BM: 1}, 1)  # fmt: skip
    keys = export(meter, first)
    a = {"cluster": "a", "priority_band": ">=900000", "capacity_type": "spot"}
    loose = {"cluster": "", "priority_band": "unassigned", "capacity_type": "bare-metal"}
    assert meter.sets == [
        (COST_GAUGE, 15.0, loose),
        (COST_GAUGE, 3.6, a),
        (IDLE_OWNED_GAUGE, 1, {"profile": BM}),
        (PAIRS_GAUGE, 1, {}),
    ]
    meter.sets.clear()
    export(meter, Spend({("", "unassigned", "bare-metal"): 30.0}, {BM: 2}, 0), keys)
    cost = {(a["cluster"], a["priority_band"]): v for n, v, a in meter.sets if n == COST_GAUGE}
    assert cost == {("a", ">=900000"): 0.0, ("", "unassigned"): 30.0}


def test_a_synthetic_shard_adds_up(capsys: pytest.CaptureFixture[str]):
    """20 000 synthetic machines after one cycle: every billed machine is counted once (the
    groups add up to the inventory's billed machines at their prices). The time is printed,
    not asserted (500 000 machines: docs/operations.md, "What the cost gauges count")."""
    rng = random.Random(3)
    shard = Shard(0)
    shard.adopt(fleet(rng, 20_000, 40), 0.0)
    for r in rollups(rng, 40, 4, 50):
        shard.receive(r, 0.0)
    shard.cycle(1.0)
    start = time.perf_counter()
    spend = shard.spend(assigned_at=1.0)
    took = time.perf_counter() - start
    inv = shard.inventory
    total = 0.0
    for row in inv.live_rows().tolist():
        m = inv.machine(row)
        owned = m.capacity_type in (CapacityType.BARE_METAL, CapacityType.RESERVED)
        if owned or m.state not in (S.SPECULATIVE, S.FAILED):
            total += m.price_per_hour
    assert spend.total() == pytest.approx(total)
    with capsys.disabled():
        print(f"\nspend at 20 000 machines: {took * 1000:.1f} ms")
