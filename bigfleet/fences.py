"""A shard's answer to providers that refuse it as stale (issue 44): `FenceBook`.

A provider keeps the highest epoch it has taken per shard and refuses anything below
(bigfleet/providers/fencing.py). A shard is the only running owner of its id (Temporal runs one
open run per workflow id), so an epoch above its own that a provider keeps was not issued to a
newer owner: it was forged (a call with a near-future epoch, from anyone holding a worker's
client certificate), or taken from a shard whose clock ran ahead. Left alone, it fences the
real shard out of that provider for good, silently.

So a refusal of the shard's *current* epoch (a refusal of an older one is in-flight work of
before the last re-epoch, and says nothing new) makes the shard take a new epoch that
supersedes the kept one: max(its clock in ms, kept + 1), and only once that is within
PROVIDER_FUTURE_MS of its clock, as the provider would refuse anything beyond (a forged epoch
the provider took is at most its clock plus that skew, so the real shard supersedes it within
one skew). Epochs are start times (docs/decisions/0002): a later one is still larger than any
the shard had before.

Bounded: at most MAX_REEPOCHS a provider in REEPOCH_WINDOW seconds. Past that (someone keeps
forging, or two shards run with one id) the shard stops and escalates instead of looping: the
provider, the kept epoch and since when are in `status`, a metric and an alert
(workflows/shard_fences.py), until the window frees or a call to that provider succeeds again.
"""

from __future__ import annotations

from typing import Any

from .epochs import PROVIDER_FUTURE_MS

MAX_REEPOCHS = 3  # new epochs a provider's refusals may cause per window
REEPOCH_WINDOW = 3600.0  # seconds
MAX_PROVIDERS = 64  # providers tracked at once (a refusal names its provider: bounded)


class FenceBook:
    """Refusals as stale per provider, the re-epochs they caused, and escalations."""

    def __init__(self) -> None:
        self.pending: dict[str, int] = {}  # provider -> the highest epoch it keeps above ours
        self.reepochs: dict[str, list[float]] = {}  # provider -> when we re-epoched for it
        self.escalated: dict[str, tuple[int, float]] = {}  # provider -> (kept, since)

    def __bool__(self) -> bool:
        return bool(self.pending or self.reepochs or self.escalated)

    def refused(self, provider: str, presented: int, kept: int, epoch: int) -> bool:
        """A call with epoch `presented` was refused by `provider`, which keeps `kept`; the
        shard's epoch is `epoch`. True if it counts (a refusal of the current epoch)."""
        if presented != epoch or kept <= presented:
            return False  # in flight from before a re-epoch, or not a refusal as stale
        if provider not in self.pending and len(self.pending) >= MAX_PROVIDERS:
            return False
        self.pending[provider] = max(self.pending.get(provider, kept), kept)
        return True

    def served(self, provider: str) -> None:
        """A call to `provider` succeeded: it no longer fences the shard out."""
        self.pending.pop(provider, None)
        self.escalated.pop(provider, None)

    def reepoch(self, epoch: int, now: float) -> int | None:
        """The shard's new epoch if a refusal calls for one now (`now`: its clock, seconds),
        else None. Records the re-epoch, or the escalation of a provider past its bound."""
        now_ms = int(now * 1000)
        new: int | None = None
        for provider, kept in sorted(self.pending.items()):
            if kept <= epoch:  # superseded already (a re-epoch for another provider)
                del self.pending[provider]
                continue
            times = [t for t in self.reepochs.get(provider, []) if t > now - REEPOCH_WINDOW]
            self.reepochs[provider] = times
            if len(times) >= MAX_REEPOCHS:
                since = self.escalated.get(provider, (kept, now))[1]
                self.escalated[provider] = (kept, since)
                continue
            if kept + 1 > now_ms + PROVIDER_FUTURE_MS:
                continue  # (the provider's clock is ahead of ours: wait until it is not)
            new = max(new or 0, now_ms, kept + 1)
            times.append(now)
            del self.pending[provider]
            self.escalated.pop(provider, None)
        self.reepochs = {p: t for p, t in self.reepochs.items() if t}
        return None if new is None else max(new, epoch + 1)

    def view(self) -> list[dict[str, Any]]:
        """The escalated providers, for `status`."""
        return [
            {"provider": p, "kept_epoch": kept, "since": since}
            for p, (kept, since) in sorted(self.escalated.items())
        ]

    def state(self) -> dict[str, Any]:
        """As carried across continue-as-new (`restore` takes it back)."""
        return {
            "pending": dict(self.pending),
            "reepochs": {p: list(t) for p, t in self.reepochs.items()},
            "escalated": {p: [kept, since] for p, (kept, since) in self.escalated.items()},
        }

    @classmethod
    def restore(cls, state: Any) -> FenceBook:
        """A book from `state()`; anything malformed is dropped (anyone may start a shard
        with any input)."""
        book = cls()
        if not isinstance(state, dict):
            return book
        for p, kept in _items(state.get("pending")):
            if type(kept) is int:
                book.pending[p] = kept
        for p, times in _items(state.get("reepochs")):
            if isinstance(times, list):
                book.reepochs[p] = [float(t) for t in times[:MAX_REEPOCHS * 2] if _num(t)]
        for p, pair in _items(state.get("escalated")):
            if isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is int and _num(pair[1]):
                book.escalated[p] = (pair[0], float(pair[1]))
        return book


def _items(d: Any) -> list[tuple[str, Any]]:
    if not isinstance(d, dict):
        return []
    return [(str(k)[:200], v) for k, v in list(d.items())[:MAX_PROVIDERS]]


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)
