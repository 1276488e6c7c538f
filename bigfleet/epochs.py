"""Shard epochs and coordinator terms are start times in milliseconds (docs/decisions/0002): a
shard's epoch (a coordinator's term) is its `workflow.now()` in ms when it started from scratch.
So one beyond a clock that agrees with the issuer's was never issued, and whoever sees it must
not take it: taking it would fence out the real shard (coordinator) until that time comes.

Two tolerances for that rule, in the pure core so that everyone who needs it can import it: the
shards' check of coordinator terms (workflows/fencing.py, FUTURE_MS) and the providers' fencing
(bigfleet/providers/fencing.py, the reference server's store: PROVIDER_FUTURE_MS, smaller).
"""

from __future__ import annotations

FUTURE_MS = 300_000
"""How far an epoch or term may be beyond the clock that checks it: clocks of workers, Temporal
server and providers may differ a little (decision 0002's cost: they agree within minutes)."""


PROVIDER_FUTURE_MS = 30_000
"""How far a shard epoch may be beyond a provider's clock (issue 44). Smaller than FUTURE_MS
because whatever a provider takes fences the real shard until the shard supersedes it: a shard
refused as stale takes max(its clock, kept + 1) as its new epoch, but only once that is within
this skew of its own clock (workflows/shard_fences.py), so a forged epoch costs the real shard at
most this long. Five minutes let one forged Drain hold a shard out for five minutes a call; tens
of seconds is still far above what NTP-synced hosts differ by (milliseconds)."""


def latest_issued(now_seconds: float) -> int:
    """The highest shard epoch a provider whose clock reads `now_seconds` (seconds: Unix time,
    or a simulator's virtual time) can have seen issued: its own time in ms plus
    PROVIDER_FUTURE_MS."""
    return int(now_seconds * 1000) + PROVIDER_FUTURE_MS
