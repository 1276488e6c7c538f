"""The needs table keeps a need's object across roll-ups that leave it as it was (the engine
caches work per need object), and otherwise replaces a cluster's needs in full."""

from __future__ import annotations

from bigfleet.models import CapacityNeed, ClusterCapacityNeeds
from bigfleet.needs import NeedsTable


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
