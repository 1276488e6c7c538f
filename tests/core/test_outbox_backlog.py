"""The background outbox's queue (workflows/outbox.py, issue 32): starts go highest band first,
a preemption drain with its preemptor's band, housekeeping last, equal bands in the order they
came; and creates queued for demand that has gone are found (`Shard.unwanted_creates`)."""

from __future__ import annotations

from activities.wire import ShardConfig
from bigfleet.models import MachineState, Transition
from bigfleet.shard import Shard
from tests.core.test_transition_batches import start
from tests.fleet import created, need, on_demand, rollup
from workflows.outbox import LAST, Outbox, rank

S = MachineState
T = Transition


def outbox() -> Outbox:
    return Outbox(ShardConfig(shard=0, providers=["dc"]), lambda what, err: None)


def test_the_queue_goes_by_band_then_by_arrival():
    box = outbox()
    low = start(T.CREATE, "m1", priority=1)
    excess = start(T.DRAIN, "m2", reason="excess")
    preempt = start(T.DRAIN, "m3", reason="preempt", priority=900_000)
    low_later = start(T.CONFIGURE, "m4", priority=1)
    high = start(T.CREATE, "m5", priority=500_000)
    delete = start(T.DELETE, "m6", reason="idle-timeout")
    box.push([low, excess, preempt], now=10.0)
    box.push([low_later, high, delete], now=12.0)
    assert box.queued() == [preempt, high, low, low_later, excess, delete]
    assert [rank(s) for s in (excess, delete)] == [LAST, LAST]
    assert box.oldest(now=15.0) == 5.0


def test_kept_starts_keep_their_place_and_age():
    box = outbox()
    a, b, c = (start(T.CREATE, f"m{i}", priority=5) for i in range(3))
    box.push([a, b], now=0.0)
    box.push([c], now=4.0)
    shrunk = a.model_copy(update={"machine_ids": []})
    box.keep(lambda s: None if s is b else shrunk if s is a else s)
    assert box.queued() == [shrunk, c]
    assert box.oldest(now=10.0) == 10.0  # (`a` was queued at 0)
    box.clear()
    assert box.queued() == [] and box.oldest(now=10.0) == 0.0


def test_creates_queued_for_demand_that_went_away_are_unwanted_newest_first():
    shard = Shard(0)
    shard.adopt([on_demand(i, price=1.0) for i in range(10)], 0)
    assert shard.receive(rollup("a", 1, need(3, 100)), 0) is None
    assert shard.receive(rollup("b", 1, need(2, 100)), 0) is None
    made = created(shard.cycle(1))
    assert len(made) == 5
    a_ids = [m for m in made if shard.inventory.cluster_of(shard.inventory.row(m)) == "a"]
    b_ids = [m for m in made if m not in a_ids]
    queued = [("a", a_ids[:2]), ("a", a_ids[2:]), ("b", b_ids)]
    # Nothing changed: every queued machine is wanted.
    assert shard.unwanted_creates(queued) == []
    # `a` now asks for one: its two newest queued machines are surplus; `b` asks for none.
    assert shard.receive(rollup("a", 2, need(1, 100)), 2) is None
    assert shard.receive({"cluster": "b", "generation": 2, "needs": []}, 2) is None
    unwanted = shard.unwanted_creates(queued)
    assert sorted(unwanted) == sorted([a_ids[2], a_ids[1], *b_ids])
    assert shard.withdraw(unwanted) == 4
    assert shard.machines_by_state()["CREATING"] == 1


def test_machines_already_serving_count_against_the_demand():
    shard = Shard(0)
    shard.adopt([on_demand(i, S.CONFIGURED, cluster="a") for i in range(2)], 0)
    shard.adopt([on_demand(i, price=1.0) for i in range(2, 6)], 0)
    assert shard.receive(rollup("a", 1, need(4, 100)), 0) is None
    made = created(shard.cycle(1))
    assert len(made) == 2
    queued = [("a", [m]) for m in made]
    assert shard.unwanted_creates(queued) == []
    # Two serve, two on their way, three asked for now: the newest queued create is surplus.
    assert shard.receive(rollup("a", 2, need(3, 100)), 2) is None
    assert shard.unwanted_creates(queued) == [made[1]]
