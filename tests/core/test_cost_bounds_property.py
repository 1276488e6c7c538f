"""What the engine asks for cost, the shard's bounds never hold back (issue 44, item 5): on
random shards whose clusters mark machines do-not-disrupt and set budgets, every drain the
engine asks for the fleet's cost survives `DisruptionBook.hold`, whatever the gap; so a need
that gave up a purchase for it is never left waiting on nothing."""

import random

from hypothesis import given
from hypothesis import strategies as st

from bigfleet.inventory import CODE
from bigfleet.models import MachineState
from bigfleet.policy import Policy
from bigfleet.shard import Shard
from bigfleet.synthetic import fleet
from tests.engine.test_engine_equivalence import PROPERTY, gpu_rollups

S = MachineState


def bounds(rng: random.Random, shard: Shard, cluster: str, now: float) -> dict:
    """A random `disruption` for `cluster`: marks on some of its configured machines, and
    a budget (a count or a share, for every reason or for preemption only) or none."""
    inv = shard.inventory
    code = inv.clusters.get(cluster)
    rows = [
        r
        for r in range(inv.rows_used)
        if code is not None and inv.cluster[r] == code and inv.state[r] == CODE[S.CONFIGURED]
    ]
    marked = [inv.machine_id(r) for r in rows if rng.random() < 0.3]
    out: dict = {"do_not_disrupt": [{"machine_id": m, "until": now + 3600} for m in marked]}
    if rng.random() < 0.6:
        budget = {"machines": rng.choice(["0", "1", "2", "10%"])}
        if rng.random() < 0.5:
            budget["reasons"] = ["preempt"]
        out["budgets"] = [budget]
    return out


@PROPERTY
@given(
    seed=st.integers(0, 2**32 - 1),
    machines=st.integers(20, 150),
    clusters=st.integers(2, 4),
    override=st.sampled_from([300_000, 1_000_000]),
)
def test_no_drain_asked_for_cost_is_held_back(seed, machines, clusters, override):
    rng = random.Random(seed)
    policy = Policy(
        displace_gap=100_000,
        disruption_override_gap=override,
        consolidation_max_fraction=0.5,
        max_silence_seconds=86400,
    )
    shard = Shard(0, policy)
    shard.adopt(fleet(rng, machines, clusters, busy=rng.uniform(0.4, 0.9)), 0)
    for generation in range(1, 5):
        now = generation * 10.0
        for rollup in gpu_rollups(rng, clusters, 3, 6, generation):
            raw = rollup.model_dump(mode="json")
            raw["disruption"] = bounds(rng, shard, rollup.cluster, now)
            assert shard.receive(raw, now - 1) is None
        decision = shard.cycle(now)
        drains = {a.machine_id for a in decision.actions if a.kind == "drain"}
        for_cost = {p.machine_id for p in decision.preemptions if p.for_cost}
        assert for_cost <= drains, f"cycle {generation}: held back {for_cost - drains}"


def test_the_property_scenarios_move_for_cost_and_hold_something_back():
    """The generator above is worth running: its shards move machines for cost, and their
    bounds hold other drains back."""
    moved = held = 0
    original = Shard.cycle

    def counting(self, now):
        nonlocal moved, held
        decision = original(self, now)
        moved += sum(1 for p in decision.preemptions if p.for_cost)
        held += sum(sum(b.held.values()) for b in self.disruption.clusters.values())
        return decision

    Shard.cycle = counting  # type: ignore[method-assign]
    try:
        rng = random.Random(3)
        for _ in range(20):
            args = (rng.getrandbits(32), rng.randint(20, 150), rng.randint(2, 4), 1_000_000)
            test_no_drain_asked_for_cost_is_held_back.hypothesis.inner_test(*args)
    finally:
        Shard.cycle = original  # type: ignore[method-assign]
    assert moved >= 5 and held >= 5, (moved, held)
