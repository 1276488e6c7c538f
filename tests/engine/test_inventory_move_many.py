"""`Inventory.move_many` (the engine's batched apply) leaves the inventory exactly as moving
the same machines one by one does: columns, counts, per-cluster tallies and their order."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bigfleet.inventory import Inventory
from bigfleet.models import MachineState
from bigfleet.states import IllegalTransition
from bigfleet.synthetic import fleet

S = MachineState


def _inventory() -> Inventory:
    inv = Inventory(capacity=400)
    inv.add(fleet(random.Random(3), 400, 5), 0)
    return inv


def _snapshot(inv: Inventory) -> tuple:
    n = inv.rows_used
    columns = dict(
        state=inv.state[:n].copy(),
        cluster=inv.cluster[:n].copy(),
        since=inv.since[:n].copy(),
        missed=inv.missed[:n].copy(),
        failed_from=inv.failed_from[:n].copy(),
    )
    held = [(c, [(p, list(t)) for p, t in per.items()]) for c, per in inv.held.items()]
    return columns, inv.counts.copy(), held, dict(inv.cluster_version), inv.version


def _same(a: tuple, b: tuple) -> None:
    for name in a[0]:
        assert np.array_equal(a[0][name], b[0][name]), name
    assert np.array_equal(a[1], b[1])
    assert a[2:] == b[2:]


@pytest.mark.parametrize(
    ("source", "target", "cluster"),
    [
        (S.IDLE, S.CONFIGURING, "c001"),
        (S.SPECULATIVE, S.CREATING, "c002"),
        (S.CONFIGURED, S.DRAINING, None),
        (S.IDLE, S.DELETING, None),
    ],
)
def test_batch_equals_one_by_one(source: S, target: S, cluster: str | None) -> None:
    one, batch = _inventory(), _inventory()
    rows = np.flatnonzero(one.state[: one.rows_used] == list(S).index(source))[:40].tolist()
    assert rows, f"the synthetic fleet has no {source} machine"
    for row in rows:
        one.move(row, target, 50.0, cluster=cluster)
    batch.move_many(rows, target, 50.0, cluster=cluster)
    _same(_snapshot(one), _snapshot(batch))


def test_illegal_move_in_a_batch_is_refused_as_one_by_one() -> None:
    one, batch = _inventory(), _inventory()
    idle = np.flatnonzero(one.state[: one.rows_used] == list(S).index(S.IDLE))[:3].tolist()
    configured = np.flatnonzero(one.state[: one.rows_used] == list(S).index(S.CONFIGURED))[0]
    rows = [*idle, int(configured)]
    for inv, move in ((one, None), (batch, "many")):
        with pytest.raises(IllegalTransition):
            if move:
                inv.move_many(rows, S.DELETING, 50.0)
            else:
                for row in rows:
                    inv.move(row, S.DELETING, 50.0)
    _same(_snapshot(one), _snapshot(batch))


def test_draining_whole_tallies_keeps_their_order_as_one_by_one() -> None:
    """A drain leaves a machine with its cluster: a tally holding only that machine empties
    and is re-created last (its profile moves to the end of its cluster's order), one with
    more keeps its place. Both must come out of a batch as they do one by one."""
    one, batch = _inventory(), _inventory()
    rows = np.flatnonzero(one.state[: one.rows_used] == list(S).index(S.CONFIGURED)).tolist()
    sizes = [sum(t) for per in one.held.values() for t in per.values()]
    assert 1 in sizes and max(sizes) > 1, "the fleet needs lone and shared tallies"
    before = [list(per) for per in one.held.values()]
    for row in rows:
        one.move(row, S.DRAINING, 50.0)
    batch.move_many(rows, S.DRAINING, 50.0)
    _same(_snapshot(one), _snapshot(batch))
    assert [list(per) for per in batch.held.values()] != before  # (some profile moved)


@pytest.mark.parametrize(
    ("source", "target"), [(S.IDLE, S.CONFIGURING), (S.SPECULATIVE, S.CREATING)]
)
def test_rows_to_several_clusters_in_one_batch_equal_one_by_one(source: S, target: S) -> None:
    """The engine moves a cycle's configures (or creates) to many clusters in one call, each
    row with its cluster's code: tallies are created in each cluster in row order, as one by
    one, including a cluster the inventory has not seen before."""
    one, batch = _inventory(), _inventory()
    rows = np.flatnonzero(one.state[: one.rows_used] == list(S).index(source))[:50].tolist()
    assert len(rows) == 50, f"the synthetic fleet has too few {source} machines"
    names = ["c003", "c001", "new-cluster", "c003", "c000"]
    per_row = [names[(i * 7 // 5) % len(names)] for i in range(len(rows))]
    for row, name in zip(rows, per_row, strict=True):
        one.move(row, target, 50.0, cluster=name)
    codes = np.array([batch.clusters.intern(name) for name in per_row])
    batch.move_many(rows, target, 50.0, cluster_codes=codes)
    _same(_snapshot(one), _snapshot(batch))
    assert one.clusters.names == batch.clusters.names


def test_cluster_codes_must_name_known_clusters_one_per_row() -> None:
    inv = _inventory()
    before = _snapshot(inv)
    rows = np.flatnonzero(inv.state[: inv.rows_used] == list(S).index(S.IDLE))[:3].tolist()
    for codes in ([0, 1], [0, 1, len(inv.clusters.names)], [0, -1, 1]):
        with pytest.raises(ValueError, match="cluster_codes"):
            inv.move_many(rows, S.CONFIGURING, 50.0, cluster_codes=np.array(codes))
    _same(before, _snapshot(inv))
