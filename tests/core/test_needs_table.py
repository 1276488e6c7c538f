"""The needs table keeps a need's object across roll-ups that leave it as it was (the engine
caches work per need object), and otherwise replaces a cluster's needs in full. A stale roll-up
(a generation not above the last) changes nothing but the cluster's last-seen time; a
generation is at most 2^53 - 1."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

from bigfleet.inputs import explain
from bigfleet.models import (
    GENERATION_AHEAD_MS,
    MAX_GENERATION,
    CapacityNeed,
    ClusterCapacityNeeds,
    NodeHealth,
    from_wire,
    generation_ahead,
)
from bigfleet.needs import NeedsTable, needs_state, restore_needs
from bigfleet.policy import Policy
from bigfleet.shard import Shard


def _rollup(generation: int, *counts: int, priority: int = 5) -> ClusterCapacityNeeds:
    return ClusterCapacityNeeds(
        cluster="c",
        generation=generation,
        needs=[CapacityNeed(priority=priority + i, count=n) for i, n in enumerate(counts)],
    )


def test_a_roll_up_keeps_the_needs_it_leaves_unchanged() -> None:
    table = NeedsTable()
    table.apply(_rollup(1, 3, 4, 5), 0)
    first = table.needs_of("c")
    table.apply(_rollup(2, 3, 9, 5), 10)
    second = table.needs_of("c")
    assert second[0] is first[0] and second[2] is first[2]
    assert second[1] is not first[1]
    assert [n.count for n in second] == [3, 9, 5]
    # Same identity (all but the count): the changed need keeps its place in the queue.
    assert second[1].arrival == first[1].arrival
    assert sorted(n.count for n in table) == [3, 5, 9]
    assert [n.key for n in table] == ["c#2", "c#1", "c#0"]  # priority descending


def test_a_roll_up_with_fewer_or_moved_needs_replaces_them() -> None:
    table = NeedsTable()
    table.apply(_rollup(1, 3, 4, 5), 0)
    first = table.needs_of("c")
    # The first need dropped: the others move up an index, so they are new entries.
    table.apply(
        ClusterCapacityNeeds(cluster="c", generation=2, needs=[n.spec for n in first[1:]]), 10
    )
    second = table.needs_of("c")
    assert [n.key for n in second] == ["c#0", "c#1"]
    assert all(a is not b for a, b in zip(second, first[1:], strict=True))
    assert len(table) == 2 and {n.count for n in table} == {4, 5}
    assert [n.arrival for n in second] == [n.arrival for n in first[1:]]


# ---- generations (issue 30, defect 3) -------------------------------------------------------


def test_a_stale_roll_up_keeps_its_cluster_alive_and_changes_nothing_else() -> None:
    """An operator that restarted its counter sends generations below the last one: they
    change no need, but the cluster is not silent, so it must not age out (and lose its
    machines) while its operator keeps sending."""
    table = NeedsTable(max_silence_seconds=300)
    assert table.apply(_rollup(10, 3), 0)
    before, version = table.needs_of("c"), table.version
    stale = ClusterCapacityNeeds(
        cluster="c", generation=4, needs=[CapacityNeed(priority=1, count=99)],
        health=NodeHealth(machine_ids=["m-1"]),
    )  # fmt: skip
    for t in (200, 400, 600):
        assert not table.apply(stale, t)
        assert table.expire(t) == []
    assert table.needs_of("c") == before and table.version == version
    assert table.generation("c") == 10 and table.health("c") == (0, None)
    assert table.last_seen("c") == 600
    assert not table.apply(stale, 100)  # (a late one never moves the time back)
    assert table.last_seen("c") == 600
    assert table.expire(901) == ["c"]  # silent for good: it ages out as before
    # (A shard's run begun before this replays as it ran: stale roll-ups moved nothing.)
    before_30 = NeedsTable(max_silence_seconds=300, stale_keeps_alive=False)
    before_30.apply(_rollup(10, 3), 0)
    assert not before_30.apply(stale, 200) and before_30.last_seen("c") == 0


def test_a_generation_is_at_most_2_to_the_53_on_every_path() -> None:
    """time.time_ns() is a valid int64 but not a generation: taken, it would freeze its cluster
    for good (every later roll-up stale). Refused naming `generation`, from a file, a signal
    to the shard (the `rollup` handler judges it in Shard.receive) or the gateway."""
    ok = {"cluster": "c", "needs": []}
    assert from_wire(ClusterCapacityNeeds, {**ok, "generation": MAX_GENERATION}).generation
    assert MAX_GENERATION == 2**53 - 1
    for generation in (time.time_ns(), 2**53, 2**63 - 1, 2**63, 2**64):
        with pytest.raises(ValidationError) as err:
            from_wire(ClusterCapacityNeeds, {**ok, "generation": generation})
        assert explain(err.value).startswith("generation: ")
    shard = Shard(0, Policy())
    assert shard.receive({**ok, "generation": 7}, 0) is None
    why = shard.receive({**ok, "generation": 2**63, "needs": [{"priority": 1, "count": 5}]}, 1)
    assert why is not None and "generation: " in why and "9007199254740991" in why
    assert list(shard.rejections) == [why]
    assert shard.needs.generation("c") == 7 and shard.needs.needs_of("c") == []
    assert shard.receive({**ok, "generation": 8}, 2) is None  # the cluster goes on


def test_a_generation_taken_before_the_bound_is_read_back_as_0() -> None:
    """A shard whose state holds a generation over the bound (taken before it existed) would
    ignore its cluster's roll-ups for good: read back, the cluster starts again from 0."""
    table = NeedsTable()
    table.apply(_rollup(5, 3), 0)
    state = needs_state(table)
    state[0]["generation"] = 2**63
    restored = restore_needs(state, 300.0)
    assert restored.generation("c") == 0 and [n.count for n in restored] == [3]
    assert restored.apply(_rollup(1, 4), 10)
    assert [n.count for n in restored] == [4]


def test_a_generation_ahead_of_the_shards_clock_is_refused() -> None:
    """Issue 44: 2^53 - 1 passes the type's bound, and taken it froze its cluster. A shard
    refuses a generation above its clock in unix ms + GENERATION_AHEAD_MS, naming `generation`;
    a counter, unix seconds and ms stay valid. (Fails on 2e880d5: 2^53 - 1 was taken.)"""
    now = 1_800_000_000.0  # unix seconds
    bound = int(now * 1000) + GENERATION_AHEAD_MS
    assert generation_ahead(bound, now) is None and generation_ahead(3, now) is None
    assert generation_ahead(int(now), now) is None  # unix seconds
    assert "generation: " in (generation_ahead(bound + 1, now) or "")
    ok = {"cluster": "c", "needs": [{"priority": 1, "count": 2}]}
    shard = Shard(0, Policy())
    assert shard.receive({**ok, "generation": int(now * 1000)}, now) is None
    for ahead in (MAX_GENERATION, bound + 1, int(now * 1_000_000)):  # (the last: µs)
        why = shard.receive({**ok, "generation": ahead, "needs": []}, now)
        assert why is not None and "generation: " in why and "ahead of the shard's clock" in why
    assert shard.needs.generation("c") == int(now * 1000)
    assert [n.count for n in shard.needs] == [2]
    assert shard.receive({**ok, "generation": int(now * 1000) + 1, "needs": []}, now) is None
    assert list(shard.needs) == []  # (not locked: the clearing roll-up applied)
    # A shard's run begun before the bound takes it, as it did.
    old = Shard(0, Policy())
    old.generations_bounded = False
    assert old.receive({**ok, "generation": MAX_GENERATION}, now) is None


def test_an_operator_reset_generation_lets_the_next_roll_up_apply() -> None:
    """`reset_generation` forgets a cluster's generation (-1): its needs stay, its next roll-up
    applies whatever its generation, and a state read back keeps the -1."""
    table = NeedsTable()
    assert table.reset_generation("c") is None  # (not in the table)
    table.apply(_rollup(10**12, 3), 0)
    assert not table.apply(_rollup(6, 4), 1)  # stale
    assert table.reset_generation("c") == 10**12
    assert table.generation("c") == -1 and [n.count for n in table] == [3]
    restored = restore_needs(needs_state(table), 300.0)
    assert restored.generation("c") == -1 and [n.count for n in restored] == [3]
    assert restored.apply(_rollup(0, 4), 2) and [n.count for n in restored] == [4]
