"""Phase 2 (design §8) directly: which configured machines a short need preempts, in what order,
and how the shard's saturation shifts that order from priority towards drain speed.

Every test runs against both engines. In each, a 1 000 000-priority need finds no free GPU and
must preempt; the assertions are what an operator would read off the decision: which cluster's
machines drain, for whom, and with what grace.
"""

from collections import Counter

import pytest

from bigfleet.models import DrainReason
from tests.fleet import (
    ENGINES,
    S,
    bare_metal,
    drained,
    ids,
    many,
    need,
    of_kind,
    on_demand,
    rollup,
    shortfall_of,
    table,
)

URGENT = 1_000_000


def configured_for(cluster: str, count: int, start: int):
    return many(bare_metal, count, start=start, state=S.CONFIGURED, cluster=cluster)


def free_cpu_slots(count: int):
    """Speculative machines no GPU need can use: they count as free supply, so they set how
    saturated the shard is without giving the preemptor anything to take instead."""
    return many(on_demand, count, instance_type="cpu-64")


def drains_by_cluster(decision) -> Counter:
    return Counter(d.cluster for d in of_kind(decision, "drain"))


# ---- the saturation-shifted weights ---------------------------------------------------------


@ENGINES
@pytest.mark.parametrize(
    ("free", "preempted"),
    [
        (4, {("slow-low", "urgent"): 2}),
        # The 400 000 need, preempted, takes the 100 000 machines in its own turn.
        (0, {("fast-mid", "urgent"): 2, ("slow-low", "fast-mid"): 2}),
    ],
    ids=["calm-priority-wins", "saturated-drain-speed-wins"],
)
def test_saturation_shifts_the_victim_from_lowest_priority_to_fastest_drain(
    make_shard, free, preempted
):
    """Two would-be victims: priority 100 000 draining in 30 minutes, priority 400 000 draining
    in 5 seconds. With half the shard free (calm weights 0.7/0.1/0.1/0.1) the urgent need takes
    the lowest priority; with nothing free (saturated, 0.2/0.6/0.1/0.1) the fast drain."""
    fleet = configured_for("slow-low", 2, 0) + configured_for("fast-mid", 2, 2)
    shard = make_shard(fleet + free_cpu_slots(free))
    needs = table(
        rollup("slow-low", 1, need(2, 100_000, drain_seconds=1800)),
        rollup("fast-mid", 1, need(2, 400_000, drain_seconds=5)),
        rollup("urgent", 1, need(2, URGENT)),
    )

    decision = shard.decide(needs, 10)

    pairs = Counter((p.victim_cluster, p.preemptor_cluster) for p in decision.preemptions)
    assert pairs == preempted
    assert drains_by_cluster(decision) == Counter({v: n for (v, _), n in preempted.items()})
    assert decision.earmarked["urgent#0"] == 2 and shortfall_of(decision, "urgent") is None


# ---- victim order at equal priority ---------------------------------------------------------


@ENGINES
@pytest.mark.parametrize("penalty", ["interruption_penalty", "reclamation_penalty"])
def test_the_victim_that_said_it_is_cheap_to_take_goes_first(make_shard, penalty):
    """Same priority, same drain: the workload that declared a low penalty is preempted, the
    one that declared interruption (or losing these machines) costly keeps its machines."""
    shard = make_shard(configured_for("dear", 2, 0) + configured_for("cheap", 2, 2))
    needs = table(
        rollup("dear", 1, need(2, 100_000, **{penalty: 10_000.0})),
        rollup("cheap", 1, need(2, 100_000, **{penalty: 0.5})),
        rollup("urgent", 1, need(2, URGENT)),
    )

    decision = shard.decide(needs, 10)

    assert drains_by_cluster(decision) == {"cheap": 2}
    assert sorted(drained(decision)) == ["gpu-0002", "gpu-0003"]


# ---- priority order, walking down the list --------------------------------------------------


@ENGINES
def test_lowest_priority_goes_first_then_the_next_with_the_grace_of_each_gap(make_shard):
    zero, half = configured_for("zero", 2, 0), configured_for("half", 2, 2)
    shard = make_shard(half + zero)
    needs = table(
        rollup("half", 1, need(2, 500_000)),
        rollup("zero", 1, need(2, 0)),
        rollup("urgent", 1, need(3, URGENT)),
    )

    decision = shard.decide(needs, 10)

    taken = drained(decision)
    assert len(taken) == 3 and set(ids(zero)) <= set(taken)
    assert len(set(taken) & set(ids(half))) == 1
    graces = Counter((p.victim_cluster, p.grace_seconds) for p in decision.preemptions)
    assert graces == {("zero", 10.0): 2, ("half", 30.0): 1}  # gaps of 1 000 000 and 500 000
    assert {d.reason for d in of_kind(decision, "drain")} == {DrainReason.PREEMPT}
    # The half-priority need lost one machine and finds nothing lower left to take.
    assert decision.satisfied["half#0"] == 1
    assert shortfall_of(decision, "half").count == 1
    assert shortfall_of(decision, "zero").count == 2


@ENGINES
def test_a_preempted_need_preempts_lower_ones_in_its_turn(make_shard):
    """Saturated: the urgent need takes the fast-draining 500 000 machines; that need, now
    short, takes the priority-0 ones. Nobody preempts an equal or higher priority."""
    mid, low = configured_for("mid", 2, 0), configured_for("low", 2, 2)
    shard = make_shard(mid + low)
    needs = table(
        rollup("mid", 1, need(2, 500_000, drain_seconds=5)),
        rollup("low", 1, need(2, 0, drain_seconds=3600)),
        rollup("urgent", 1, need(2, URGENT)),
    )

    decision = shard.decide(needs, 10)

    pairs = Counter((p.victim_cluster, p.preemptor_cluster) for p in decision.preemptions)
    assert pairs == {("mid", "urgent"): 2, ("low", "mid"): 2}
    assert sorted(drained(decision)) == sorted(ids(mid) + ids(low))
    assert shortfall_of(decision, "low").count == 2
    assert shortfall_of(decision, "urgent") is None and shortfall_of(decision, "mid") is None
