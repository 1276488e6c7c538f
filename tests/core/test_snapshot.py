"""A shard's state survives continue-as-new: restored from its compact snapshot, the shard
decides exactly what the original would have."""

import json
import random

from bigfleet.shard import Shard
from bigfleet.snapshot import restore_shard, shard_state
from bigfleet.synthetic import fleet, rollups


def busy_shard(seed: int) -> Shard:
    rng = random.Random(seed)
    shard = Shard(3, epoch=2)
    shard.adopt(fleet(rng, 400, 5, busy=0.5), 0)
    for rollup in rollups(rng, 5, 4, 40):
        shard.receive(rollup, 5)
    for t in (10, 20):
        shard.cycle(t)
    return shard


def summary(decision):
    def named(a):
        return getattr(a, "machine_id", None) or tuple(a.machine_ids)

    return (
        sorted((a.kind, named(a)) for a in decision.actions),
        [(s.cluster, s.priority, s.count, s.age) for s in decision.shortfalls],
        decision.satisfied,
    )


def test_restored_shard_decides_like_the_original():
    original = busy_shard(1)
    state = json.loads(json.dumps(shard_state(original)))  # it must survive a JSON payload
    copy = restore_shard(state, Shard(0))
    assert (copy.id, copy.epoch, copy.seq) == (original.id, original.epoch, original.seq)
    assert copy.machines_by_state() == original.machines_by_state()
    assert [n.key for n in copy.needs] == [n.key for n in original.needs]
    assert summary(copy.cycle(30)) == summary(original.cycle(30))


def test_snapshot_is_compact():
    shard = busy_shard(2)
    size = len(json.dumps(shard_state(shard)))
    assert size < 100 * len(shard.inventory)  # well under a JSON record per machine


def test_a_restored_inventory_counts_what_the_live_one_counted():
    """Restoring counts every row at once (`Inventory.recount`); the tallies the engine reads
    must equal those the live inventory kept row by row."""
    import json

    import numpy as np

    from bigfleet.bench_snapshot import synthetic_shard
    from bigfleet.snapshot import restore_inventory, shard_state

    shard = synthetic_shard(4000, 3)
    live = shard.inventory
    back = restore_inventory(json.loads(json.dumps(shard_state(shard)))["inventory"])
    width = len(live.profiles)  # both may keep spare columns beyond the profiles in use
    assert np.array_equal(back.counts[:, :width], live.counts[:, :width])
    assert back.counts.sum() == live.counts.sum() == len(live)
    assert back.held == live.held and back.held


def test_bench_snapshot_prints_sizes_and_how_the_state_travels(capsys):
    import json

    from bigfleet.cli import main

    assert main(["bench", "snapshot", "--sizes", "2000", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["machines"] == 2000 and row["bytes"] > 0
    assert row["travels"] == "inline" and row["parts"] == 0
