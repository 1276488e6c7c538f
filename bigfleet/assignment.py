"""Which shard owns a machine when a fleet starts, and which shard a cluster's first roll-up
goes to (design §5, §16).

Fixed machines go to shards by whole topology domain (a rack), so a `Same`-rack need stays
satisfiable; cloud slots one by one. Each shard applies the rule to its providers' `list` on its
own, with nobody to ask: the rule depends on nothing but the machine, so shards that list at
different moments still agree. The simulator and the shard workflows use the same rule.

A machine already configured (or draining) for a cluster goes, at adoption, to that cluster's
home: `cluster_shard`, the shard the coordinator gives the cluster on first contact
(`Coordinator.assign`). So a fleet of shards started over machines that already serve
clusters keeps every cluster's machines on the shard its roll-ups go to (docs/operations.md,
"Starting over a running fleet").
"""

from __future__ import annotations

import zlib

from . import labels as L
from .models import Machine


def cluster_shard(cluster: str, shards: int) -> int:
    """A cluster's home among shards 0 … `shards` − 1 (a hash of its name: the seed's "at
    random", the same answer wherever it is asked)."""
    return zlib.crc32(cluster.encode()) % shards


def machine_shard(machine: Machine, shards: int, by_cluster: bool = False) -> int:
    """The shard a machine is adopted by: `by_cluster`, a machine bound to a cluster goes to
    the cluster's home; otherwise (and every other machine) by rack, else by id."""
    if by_cluster and machine.cluster:
        return cluster_shard(machine.cluster, shards)
    domain = machine.labels.get(L.RACK) or machine.id
    return zlib.crc32(domain.encode()) % shards
