"""Owned machines yield across cycles (engine/yielding.py; docs/decisions/0012, rule 5), worked
by hand on both engines.

The fleet: one rack machine (bare metal, $0 at the margin) configured for `train` (1 000 000,
interruption penalty $10: spot at $25 + 5 % x $10 = $25.50 an hour for it), one on-demand
machine at $98 configured for `serve` (900 000, not allowed on spot), and free spot and
on-demand slots. Both needs hold their count: Phase 1 has nothing to place, and consolidation
has no free cheaper machine for either. Swapped, the fleet pays $25.50 an hour instead of $98,
and neither need is ever without its machine."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bigfleet import labels as L
from bigfleet.engine.yielding import YIELD_HOLD_SECONDS
from bigfleet.models import DrainReason
from bigfleet.policy import Policy
from tests.engine.test_engine_equivalence import PROPERTY, summary
from tests.fleet import (
    ENGINES,
    S,
    bare_metal,
    configured,
    created,
    drained,
    fast_shard,
    many,
    need,
    of_kind,
    on_demand,
    reference_shard,
    rollup,
    spot,
    table,
)

AT_ONCE = Policy(consolidation_stable_seconds=0)
NO_SPOT = {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["bare-metal", "on-demand"]}
RACK, OD = "gpu-0000", "od-0000"


def fleet():
    return [
        bare_metal(0, S.CONFIGURED, cluster="train"),
        *many(spot, 2, state=S.IDLE, price=25.0, interruption=0.05),
        *many(spot, 2, start=2, price=25.0, interruption=0.05),
        on_demand(0, S.CONFIGURED, cluster="serve", price=98.0),
        *many(on_demand, 1, start=1, price=98.0),
    ]


def needs_of(train_penalty=10.0, train_reclamation=0.0):
    serving = need(1, 900_000)
    serving["requirements"].append(NO_SPOT)
    train = need(
        1, 1_000_000, interruption_penalty=train_penalty, reclamation_penalty=train_reclamation
    )
    return table(rollup("train", 1, train), rollup("serve", 1, serving))


def moves(decision):
    """What a decision moves (the idle spot machine left over may go back: not a move)."""
    return [a for a in decision.actions if a.kind in ("create", "configure", "drain")]


def served(decision):
    return {key.split("#")[0]: n for key, n in decision.satisfied.items()}


@ENGINES
def test_an_owned_machine_goes_to_the_need_paying_on_demand_make_before_break(make_shard):
    shard = make_shard(fleet(), AT_ONCE)
    needs = needs_of()

    # t=10: train's replacement comes up on a spot machine first; nothing drains yet.
    first = shard.cycle(needs, 10)
    assert [(a.cluster, a.machine_id[:4]) for a in of_kind(first, "configure")] == [
        ("train", "spot")
    ]
    assert drained(first) == [] and created(first) == []
    assert first.consolidations == {"train#0": 1}
    assert served(first) == {"train": 1, "serve": 1}
    replacement = configured(first)[0]

    # t=20: still coming up: nothing more.
    assert moves(shard.cycle(needs, 20)) == []

    # t=30: it is configured; the rack machine drains in its place (not the spot machine).
    shard.finish([replacement], S.CONFIGURED, 25)
    third = shard.cycle(needs, 30)
    assert drained(third) == [RACK]
    assert [(d.reason, d.grace_seconds) for d in of_kind(third, "drain")] == [
        (DrainReason.EXCESS, 600.0)
    ]
    assert served(third) == {"train": 1, "serve": 1}

    # t=40: the rack machine is idle: serve moves onto it (train does not take it back).
    shard.finish([RACK], S.IDLE, 35)
    fourth = shard.cycle(needs, 40)
    assert [(a.cluster, a.machine_id) for a in of_kind(fourth, "configure")] == [
        ("serve", RACK)
    ]
    assert fourth.consolidations == {"serve#0": 1}

    # t=50: serve's on-demand machine is excess and drains; train stays on spot.
    shard.finish([RACK], S.CONFIGURED, 45)
    fifth = shard.cycle(needs, 50)
    assert drained(fifth) == [OD]
    assert served(fifth) == {"train": 1, "serve": 1}
    shard.finish([OD], S.IDLE, 55)
    assert shard.state(replacement) is S.CONFIGURED and shard.state(RACK) is S.CONFIGURED


@ENGINES
@pytest.mark.parametrize(
    ("penalty", "reclamation"),
    [
        (2000.0, 0.0),  # spot costs train $125 an hour: more than serve's $98
        (10.0, 72.5),  # the $72.50 saved over the 1 h horizon does not beat train's penalty
    ],
)
def test_no_yield_when_the_fleet_would_not_save(make_shard, penalty, reclamation):
    shard = make_shard(fleet(), AT_ONCE)
    decision = shard.cycle(needs_of(penalty, reclamation), 10)
    assert moves(decision) == [] and decision.consolidations == {}


@ENGINES
def test_a_marked_owned_machine_does_not_yield(make_shard):
    shard = make_shard(fleet(), AT_ONCE)
    shard.mark([RACK])
    assert configured(shard.cycle(needs_of(), 10)) == []


@ENGINES
def test_needs_not_yet_stable_do_not_yield(make_shard):
    """Consolidation's wait (`consolidation_stable_seconds`, 300 s by default) holds here
    too: demand in flux would undo the move before it paid."""
    shard = make_shard(fleet())
    assert moves(shard.cycle(needs_of(), 10)) == []
    later = shard.cycle(needs_of(), 320)
    assert [(a.kind, a.cluster) for a in moves(later)] == [("create", "train")]


@ENGINES
def test_a_yielded_profile_is_not_taken_back_until_the_hold_ends(make_shard):
    """If serve does not take the rack machine (here: serve's roll-up now allows only
    on-demand), train does not move back onto it by consolidation before the hold ends."""
    shard = make_shard(fleet(), AT_ONCE)
    needs = needs_of()
    replacement = configured(shard.cycle(needs, 10))[0]
    shard.finish([replacement], S.CONFIGURED, 15)
    assert drained(shard.cycle(needs, 20)) == [RACK]
    shard.finish([RACK], S.IDLE, 25)
    only_od = need(1, 900_000)
    only_od["requirements"].append({**NO_SPOT, "values": ["on-demand"]})
    later = table(rollup("train", 1, need(1, 1_000_000, interruption_penalty=10.0)),
                  rollup("serve", 2, only_od))  # fmt: skip
    assert configured(shard.cycle(later, 30)) == []
    # Past the hold, train's consolidation takes the free rack machine again.
    back = shard.cycle(later, 30 + YIELD_HOLD_SECONDS)
    assert [(a.cluster, a.machine_id) for a in of_kind(back, "configure")] == [("train", RACK)]


def test_before_the_patch_nothing_yields():
    shard = fast_shard(fleet(), AT_ONCE)
    shard.engine.memory.owned_yields = False
    assert moves(shard.cycle(needs_of(), 10)) == []


# ---- the engines alike, over cycles ---------------------------------------------------------


def yield_fleet(rng: random.Random):
    """Rack machines configured for random needs, on-demand ones for others, free spot and
    on-demand slots: needs of random priority and penalties, some not allowed on spot."""
    machines, rollups = [], []
    racks = rng.randint(1, 4)
    for c in range(rng.randint(2, 5)):
        count = rng.randint(1, 3)
        spec = need(
            count,
            rng.choice([100_000, 500_000, 900_000, 1_000_000]),
            interruption_penalty=rng.choice([0.0, 10.0, 100.0, 2000.0]),
            reclamation_penalty=rng.choice([0.0, 0.0, 50.0]),
        )
        if rng.random() < 0.5:
            spec["requirements"].append(NO_SPOT)
        rollups.append(rollup(f"c{c}", 1, spec))
        for _ in range(count):
            at = len(machines)
            if racks and rng.random() < 0.5:
                racks -= 1
                machines.append(bare_metal(at, S.CONFIGURED, cluster=f"c{c}"))
            else:
                machines.append(on_demand(at, S.CONFIGURED, cluster=f"c{c}", price=98.0))
    machines += many(spot, rng.randint(0, 5), start=len(machines), price=25.0, interruption=0.05)
    return machines, table(*rollups)


def run_cycles(shard, needs, cycles=8):
    """Cycles 10 s apart, every transition finishing before the next."""
    out = []
    for t in range(cycles):
        decision = shard.cycle(needs, 10 + 10 * t)
        out.append(summary(decision))
        for a in decision.actions:
            target = {"create": S.IDLE, "configure": S.CONFIGURED, "drain": S.IDLE}.get(a.kind)
            if target is not None:
                mids = a.machine_ids if a.kind == "create" else [a.machine_id]
                shard.finish(mids, target, 15 + 10 * t)
    return out


@PROPERTY
@given(seed=st.integers(0, 2**32 - 1))
def test_the_engines_yield_alike(seed):
    machines, needs = yield_fleet(random.Random(seed))
    policy = Policy(consolidation_stable_seconds=0, consolidation_max_fraction=1.0)
    fast = run_cycles(fast_shard(machines, policy), needs)
    reference = run_cycles(reference_shard(machines, policy), needs)
    assert fast == reference


def test_the_yield_scenarios_do_yield():
    """The generator above is worth running: many of its fleets yield."""
    rng = random.Random(7)
    policy = Policy(consolidation_stable_seconds=0, consolidation_max_fraction=1.0)
    yielded = 0
    for _ in range(60):
        machines, needs = yield_fleet(rng)
        shard = fast_shard(machines, policy)
        run_cycles(shard, needs, cycles=1)
        yielded += bool(shard.engine.memory.yielded)
    assert yielded >= 5, yielded
