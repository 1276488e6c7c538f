"""Shard epochs and coordinator terms are start times in milliseconds (docs/decisions/0002): a
shard's epoch (a coordinator's term) is its `workflow.now()` in ms when it started from scratch.
So one beyond a clock that agrees with the issuer's was never issued, and whoever sees it must
not take it: taking it would fence out the real shard (coordinator) until that time comes.

This is the one tolerance for that rule, in the pure core so that everyone who needs it can
import it: the providers' fencing (bigfleet/providers/fencing.py, the reference server's store)
and the shards' check of coordinator terms (workflows/fencing.py).
"""

from __future__ import annotations

FUTURE_MS = 300_000
"""How far an epoch or term may be beyond the clock that checks it: clocks of workers, Temporal
server and providers may differ a little (decision 0002's cost: they agree within minutes)."""


def latest_issued(now_seconds: float) -> int:
    """The highest epoch (or term) a clock reading `now_seconds` (seconds: Unix time, or a
    simulator's virtual time) can have seen issued: its own time in ms plus FUTURE_MS."""
    return int(now_seconds * 1000) + FUTURE_MS
