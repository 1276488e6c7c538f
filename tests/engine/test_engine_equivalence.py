"""The fast engine against the reference engine (the seed's pseudo-code, plainly) on random
fleets and roll-ups: same satisfied counts per need, same preemptions, same shortfalls."""

import random
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bigfleet.engine import FastEngine
from bigfleet.inventory import Inventory
from bigfleet.needs import NeedsTable
from bigfleet.policy import Policy
from bigfleet.reference import ReferenceEngine
from bigfleet.synthetic import fleet, rollups


def summary(decision):
    def action_key(a):
        if a.kind == "create":
            return ("create", a.provider, a.cluster, len(a.machine_ids))
        if a.kind == "drain":
            return ("drain", a.cluster, a.reason.value, a.grace_seconds)
        return (a.kind, getattr(a, "cluster", None))

    return {
        "satisfied": decision.satisfied,
        "earmarked": decision.earmarked,
        "preemptions": Counter(
            (p.victim_cluster, p.victim_priority, p.preemptor_cluster, p.grace_seconds)
            for p in decision.preemptions
        ),
        "shortfalls": [(s.cluster, s.priority, s.count, s.profile) for s in decision.shortfalls],
        "actions": Counter(action_key(a) for a in decision.actions),
        "timed_out": sorted(decision.timed_out),
    }


def run_both(seed, machines, clusters, needs, scale, cycles):
    rng = random.Random(seed)
    fleet_machines = fleet(rng, machines, clusters, busy=rng.random())
    inv = Inventory()
    inv.add(fleet_machines, 0)
    fast = FastEngine(inv, Policy())
    ref = ReferenceEngine(fleet_machines, Policy())
    table = NeedsTable()
    for generation in range(1, cycles + 1):
        for rollup in rollups(rng, clusters, needs, scale, generation):
            if generation == 1 or rng.random() < 0.3:
                table.apply(rollup, generation * 10)
        now = generation * 10
        a, b = fast.decide(table, now), ref.decide(table, now)
        assert summary(a) == summary(b), f"cycle {generation}"
        fast.apply(a, now)
        ref.apply(b, now)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    machines=st.integers(0, 120),
    clusters=st.integers(1, 6),
    needs=st.integers(0, 4),
    scale=st.sampled_from([1, 5, 30]),
    cycles=st.integers(1, 3),
)
def test_fast_engine_decides_like_the_reference(seed, machines, clusters, needs, scale, cycles):
    run_both(seed, machines, clusters, needs, scale, cycles)
