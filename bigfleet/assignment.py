"""Which shard owns a machine when a fleet starts (seed §5); clusters are assigned by the
coordinator (`Coordinator.assign`).

Fixed machines go to shards by whole topology domain (a rack), so a `Same`-rack need stays
satisfiable; cloud slots one by one. Each shard applies the rule to its providers' `list` on its
own, with nobody to ask: the rule depends on nothing but the machine, so shards that list at
different moments still agree. The simulator and the shard workflows use the same rule.
"""

from __future__ import annotations

import zlib

from . import labels as L
from .models import Machine


def machine_shard(machine: Machine, shards: int) -> int:
    domain = machine.labels.get(L.RACK) or machine.id
    return zlib.crc32(domain.encode()) % shards
