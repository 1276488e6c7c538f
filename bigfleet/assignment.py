"""Which shard owns a cluster or a machine, until a coordinator assigns them (seed §5).

Fixed machines go to shards by whole topology domain (a rack), so a `Same`-rack need stays
satisfiable; cloud slots one by one. The simulator and the shard workflows use the same rule.
"""

from __future__ import annotations

import zlib

from . import labels as L
from .models import Machine


def cluster_shard(cluster: str, shards: int) -> int:
    return zlib.crc32(cluster.encode()) % shards


def machine_shard(machine: Machine, shards: int) -> int:
    domain = machine.labels.get(L.RACK) or machine.id
    return zlib.crc32(domain.encode()) % shards
