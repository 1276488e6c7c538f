"""Elastic machines running where an idle owned one would do (bigfleet/spend.py's last gauge):
the most (elastic machine, idle owned machine) pairs in which each idle owned machine replaces
one elastic machine of a need it fits, a bipartite matching solved as a small max flow."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .needs import Need

if TYPE_CHECKING:
    from .engine.supply import SupplyIndex


def elastic_pairs(
    needs: list[Need], running: list[int], spare: np.ndarray, supply: SupplyIndex
) -> int:
    """The most (elastic machine, idle owned machine) pairs: `running[i]` elastic machines of
    `needs[i]`, `spare[p]` idle owned machines of profile p, an edge where need i fits p.
    Needs with the same fitting profiles, and profiles fitting the same needs, are merged
    first (it changes no maximum), so the flow runs on a small graph."""
    idle_pids = np.flatnonzero(spare)
    if not needs or not len(idle_pids):
        return 0
    fits = np.zeros((len(needs), len(idle_pids)), dtype=bool)
    idle_set = set(idle_pids.tolist())
    mask = np.zeros(len(spare), dtype=bool)
    for i, need in enumerate(needs):
        matching = supply.matching(need)
        if matching.isdisjoint(idle_set):
            continue
        mask[:] = False
        mask[list(matching)] = True
        fits[i] = mask[idle_pids]
    rows = fits.any(axis=1)
    if not rows.any():
        return 0
    fits, want = fits[rows], np.asarray(running, dtype=np.int64)[rows]
    cols, col_of = np.unique(fits.T, axis=0, return_inverse=True)
    have = np.bincount(col_of.ravel(), weights=spare[idle_pids], minlength=len(cols))
    left, row_of = np.unique(cols.T, axis=0, return_inverse=True)
    want = np.bincount(row_of.ravel(), weights=want, minlength=len(left))
    edges = [np.flatnonzero(r).tolist() for r in left]
    return max_flow(want.astype(np.int64).tolist(), have.astype(np.int64).tolist(), edges)


def max_flow(a: list[int], b: list[int], edges: list[list[int]]) -> int:
    """The most units from left nodes (a[i] each) to right nodes (b[j] each) along `edges`
    (i -> the js it may send to, without limit): augmenting paths, shortest first."""
    flow: dict[tuple[int, int], int] = {}
    users: list[set[int]] = [set() for _ in b]  # per right node, the lefts sending to it
    a, b = list(a), list(b)
    total = 0
    # A greedy start (scarcest right nodes first), then augmenting paths fix what it missed.
    for i in sorted(range(len(a)), key=lambda i: len(edges[i])):
        for j in edges[i]:
            n = min(a[i], b[j])
            if n > 0:
                flow[(i, j)] = flow.get((i, j), 0) + n
                users[j].add(i)
                a[i] -= n
                b[j] -= n
                total += n
    while True:
        # BFS over left nodes with units left, to a right node with room.
        parent: dict[tuple[str, int], tuple[str, int] | None] = {}
        queue = [("L", i) for i in range(len(a)) if a[i] > 0]
        for node in queue:
            parent[node] = None
        end = None
        for node in queue:
            side, k = node
            if side == "L":
                for j in edges[k]:
                    if ("R", j) not in parent:
                        parent[("R", j)] = node
                        if b[j] > 0:
                            end = ("R", j)
                            break
                        queue.append(("R", j))
            else:
                for i in sorted(users[k]):
                    if ("L", i) not in parent:
                        parent[("L", i)] = node
                        queue.append(("L", i))
            if end is not None:
                break
        if end is None:
            return total
        path = [end]
        while parent[path[-1]] is not None:
            path.append(parent[path[-1]])  # type: ignore[arg-type]
        path.reverse()
        n = min(a[path[0][1]], b[end[1]])
        for u, v in zip(path, path[1:], strict=False):
            if u[0] == "R":  # undo some of v's flow into u
                n = min(n, flow[(v[1], u[1])])
        for u, v in zip(path, path[1:], strict=False):
            if u[0] == "L":
                key = (u[1], v[1])
                flow[key] = flow.get(key, 0) + n
                users[v[1]].add(u[1])
            else:
                key = (v[1], u[1])
                flow[key] -= n
                if not flow[key]:
                    users[u[1]].discard(v[1])
        a[path[0][1]] -= n
        b[end[1]] -= n
        total += n
