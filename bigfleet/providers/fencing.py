"""Seed §11's fencing on the provider's side: one rule for every provider BigFleet has (the
simulated ones, EC2, Redfish, and the reference server's store, bigfleet/edge/provider_store.py).

Every mutating call carries a token (shard_id, shard_epoch, seq); a provider keeps the highest
epoch it has seen per shard, and

1. refuses an epoch beyond its own clock plus PROVIDER_FUTURE_MS (bigfleet/epochs.py, tens of
   seconds): epochs are shard start times in ms (docs/decisions/0002), so that one was never
   issued (UnissuedEpoch: INVALID_FIELD `token.shard_epoch` on the wire);
2. refuses an epoch below the one it keeps for the shard (StaleFencingToken);
3. keeps the epoch only once the call has succeeded (`fenced`, `advanced`): a refused call (not
   found, invalid transition, no quota, throttled, any error) moves no fencing state. Otherwise
   anyone allowed to call could fence a shard out with a call bound to fail (issue 30).

A kept epoch beyond the clock plus PROVIDER_FUTURE_MS was never issued either (a provider before
issue 30 kept the epochs of refused calls, and one before issue 44 took epochs up to five minutes
ahead): it fences nothing, and the next call that succeeds replaces it.

Served behind the reference server (bigfleet/edge/provider_server.py), a provider's own fences
step aside (`OwnFences.fenced_by_server`): the server's store is the one source of truth, so an
operator's `bigfleet provider fence reset` is the whole story (issue 44: a reset of the store's
table did not recover a shard, because the pickled provider kept the epoch too and refused).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import TypeVar

from ..epochs import latest_issued
from ..models import FencingToken
from .base import StaleFencingToken, UnissuedEpoch

log = logging.getLogger("bigfleet.providers.fencing")
K = TypeVar("K", bound=Hashable)


class OwnFences:
    """A provider that keeps fencing epochs of its own (simulated, EC2, Redfish): they apply
    unless a server fences for it (`fenced_by_server`, set by ProviderService)."""

    fenced_by_server = False


def check(provider: str, token: FencingToken, kept: int | None, now: float) -> None:
    """Refuse `token` (raise) if its epoch was never issued by `now` (seconds) or is below
    `kept`, the epoch the provider keeps for its shard (None: none yet). Records nothing."""
    latest = latest_issued(now)
    if token.shard_epoch > latest:
        raise UnissuedEpoch(provider, token.shard_id, token.shard_epoch, latest)
    if kept is not None and kept <= latest and token.shard_epoch < kept:
        raise StaleFencingToken(provider, token.shard_id, token.shard_epoch, kept)


def advanced(provider: str, token: FencingToken, kept: int | None, now: float) -> int | None:
    """The epoch to keep for the token's shard once a call with `token` has succeeded (it
    passed `check`), or None if `kept` stays."""
    if kept is None or token.shard_epoch > kept:
        return token.shard_epoch
    if token.shard_epoch < kept:  # passed `check`, so `kept` was never issued: replace it
        log.warning(
            "provider %s: shard %d's kept epoch %d was never issued (beyond the clock); "
            "replaced by %d",
            provider,
            token.shard_id,
            kept,
            token.shard_epoch,
        )
        return token.shard_epoch
    return None


@contextmanager
def fenced(
    provider: str, epochs: MutableMapping[K, int], key: K, token: FencingToken, now: float
) -> Iterator[None]:
    """Around one mutating call: `check` before it, and the epoch kept in `epochs[key]` only if
    the call returns (an exception leaves `epochs` as it was)."""
    check(provider, token, epochs.get(key), now)
    yield
    keep = advanced(provider, token, epochs.get(key), now)
    if keep is not None:
        epochs[key] = keep
