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
