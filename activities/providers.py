"""Provider calls as activities, thin over the `CapacityProvider` contract (design §7).

Each lifecycle call carries an idempotency key made of the calling workflow's id, its run and
the activity's id, the same on every retry of one operation. A provider that blocks on a network
(`blocking = True`: bigfleet/edge/provider_client.py) is called on a thread, so a slow call never
holds up the worker's event loop; the simulated ones are called on the loop.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import TypeVar

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.membership import (
    ID_PAGE,
    ShareRead,
    UnownedPage,
    UnownedRead,
    claimable,
    nobodys,
)
from activities.metrics import PROVIDER_CALL_SECONDS, PROVIDER_CALLS
from activities.wire import (
    CAPACITY_GONE,
    LIST_PAGE,
    CapacityDiff,
    CapacityRead,
    MachinePage,
    ProviderCall,
    ProviderRead,
    shard_workflow_id,
)
from bigfleet.assignment import machine_shard
from bigfleet.models import BootstrapBlob, ListFilter, Machine, MachineState, Transition
from bigfleet.providers.base import (
    CapacityProvider,
    InvalidTransition,
    MachineNotFound,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    StaleFencingToken,
)
from bigfleet.states import TARGET_OF

T = Transition
STALE = "StaleFencingToken"  # the ApplicationError type of a refusal as stale (issue 44)


R = TypeVar("R")


async def offloaded(p: CapacityProvider, fn: Callable[[], R]) -> R:
    """`fn()`, on a thread if `p` blocks (a network call), else right here on the loop."""
    if getattr(p, "blocking", False):
        return await asyncio.to_thread(fn)
    return fn()


class VirtualClock:
    """A simulated provider's clock, moved forward by the time its callers say it is.

    Workflows pass their own `workflow.now()` with every call, so a simulated provider lives on
    workflow time: real time in `bigfleet dev`, skipped time in a time-skipping test.
    """

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def catch_up(self, now: float) -> None:
        self.now = max(self.now, now)


@contextmanager
def provider_errors() -> Iterator[None]:
    """A provider's refusal or malformed reply fails the read at once (retrying the same read
    gets the same answer); throttling is retried after the provider's hint."""
    try:
        yield
    except RateLimited as err:
        raise ApplicationError(
            str(err), type="RateLimited", next_retry_delay=timedelta(seconds=err.retry_after)
        ) from err
    except StaleFencingToken as err:  # (the epochs: the shard supersedes the kept one)
        raise ApplicationError(
            str(err), err.presented, err.highest, type=STALE, non_retryable=True
        ) from err
    except ProviderError as err:
        raise ApplicationError(str(err), type=type(err).__name__, non_retryable=True) from err


# Listings kept per (provider, states): shards adopting at once each page through their own
# (a simulated listing of 100 000 machines is ~155 MB and ~2 s to take).
LISTINGS_KEPT = 4


class ProviderActivities:
    def __init__(
        self,
        providers: Mapping[str, CapacityProvider],
        clocks: Mapping[str, VirtualClock] | None = None,
        client: Client | None = None,
    ) -> None:
        self.providers = dict(providers)
        for name in self.providers:  # every series exported at 0, so a rate sees the first call
            for call in Transition:
                for outcome in ("ok", "error", "stale"):
                    PROVIDER_CALLS.labels(name, call.value, outcome)
        self.client = client  # for `provider_capacity`, which asks the shards
        self.clocks = dict(clocks or {})
        # The listing being paged through, per (provider, states, caller's now): the machines
        # in id order, and their ids.
        self._listings: dict[tuple, tuple[list[Machine], list[str]]] = {}

    def _provider(self, name: str, now: float) -> CapacityProvider:
        provider = self.providers.get(name)
        if provider is None:
            raise ApplicationError(f"no provider named {name!r} on this worker", non_retryable=True)
        clock = self.clocks.get(name)
        if clock is not None:
            clock.catch_up(now)
        return provider

    @activity.defn(name="provider_call")
    async def call(self, c: ProviderCall) -> list[Machine]:
        """One lifecycle call; returns the machines as the provider acknowledged them."""
        outcome = "error"
        try:
            with PROVIDER_CALL_SECONDS.labels(c.provider, c.transition.value).time():
                machines = await self._call(c)
            outcome = "ok"
            return machines
        except ApplicationError as err:
            if err.type == STALE:  # (its own outcome: an alert tells it from errors)
                outcome = "stale"
            raise
        finally:
            PROVIDER_CALLS.labels(c.provider, c.transition.value, outcome).inc()

    async def _call(self, c: ProviderCall) -> list[Machine]:
        # `now` was fixed when the workflow scheduled the call; this attempt runs later: after
        # its retries' back-off and its wait in the queue (held to the provider's API rate, a
        # burst of calls waits there for seconds). A simulated provider's clock (its token
        # bucket, its latencies) sees the call when it happens, as a real provider would.
        info = activity.info()
        late = (info.started_time - info.scheduled_time).total_seconds()
        p = self._provider(c.provider, c.now + max(0.0, late))
        # The same on every retry of this activity: a provider that keeps keys starts nothing
        # new. The run is part of it: a reset workflow numbers its activities from 1 again, and
        # its calls (a configure with a fresh blob) must not look like repeats of the old run's.
        key = f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"
        # Throttling is retried by Temporal after the provider's own hint (the queue's rate
        # limit should make it rare); any other refusal fails the call.
        with provider_errors():
            return await offloaded(p, lambda: self._lifecycle_or_done(p, c, key))

    @classmethod
    def _lifecycle_or_done(cls, p: CapacityProvider, c: ProviderCall, key: str) -> list[Machine]:
        try:
            return cls._lifecycle(p, c, key)
        except InvalidTransition:
            # A retry of a call that already went through finds the machine at its target.
            machines = [p.get(mid) for mid in c.machine_ids]
            if all(m.state is TARGET_OF[c.transition] for m in machines):
                return machines
            raise

    @staticmethod
    def _lifecycle(p: CapacityProvider, c: ProviderCall, key: str) -> list[Machine]:
        if c.transition is T.CREATE:
            return [ack.machine for ack in p.create(c.machine_ids, c.token, key=key)]
        (mid,) = c.machine_ids
        if c.transition is T.CONFIGURE:
            blob = BootstrapBlob(user_data=c.user_data, ttl_seconds=c.ttl_seconds)
            return [p.configure(mid, blob, c.cluster or "", c.token, key=key).machine]
        if c.transition is T.DRAIN:
            return [p.drain(mid, c.grace_seconds, c.token, force=c.force, key=key).machine]
        return [p.delete(mid, c.token, key=key).machine]

    @activity.defn(name="provider_get")
    async def get(self, r: ProviderRead) -> list[Machine]:
        p = self._provider(r.provider, r.now)
        with provider_errors():
            return await offloaded(p, lambda: self._get(p, r))

    @activity.defn(name="provider_noticed")
    async def noticed(self, r: ProviderRead) -> list[Machine]:
        """The provider's machines under a notice (`ListFilter.noticed`), the first `r.limit`
        in id order: a shard reads them every `notice_seconds` and acts on its own. (A
        provider from before notices ignores the filter and lists everything: only the
        machines carrying a notice are answered.)"""
        p = self._provider(r.provider, r.now)
        with provider_errors():
            found = await offloaded(p, lambda: p.list(ListFilter(noticed=True)))
        noticed = [m for m in found if m.notice is not None]
        return sorted(noticed, key=lambda m: m.id)[: r.limit]

    @staticmethod
    def _get(p: CapacityProvider, r: ProviderRead) -> list[Machine]:
        found = []
        for mid in r.machine_ids:
            try:
                found.append(p.get(mid))
            except (MachineNotFound, QuotaExhausted):
                if not r.missing_ok:
                    raise
        return found

    @activity.defn(name="provider_capacity")
    async def capacity(self, r: CapacityRead) -> CapacityDiff:
        """Speculative capacity that came or went (design §16), for shard `r.shard`: the
        provider's listing is compared here with the shard's own speculative machines, read
        from it by queries, so neither the listing nor the shard's ids enter its history —
        only what changed: its speculative machines no longer listed (quota shrank), and listed
        ones that are its by the assignment rule (`r.shares`) which no shard holds and no
        transfer saga carries (new)."""
        if self.client is None:
            raise ApplicationError("provider_capacity needs a Temporal client", non_retryable=True)
        p = self._provider(r.provider, r.now)
        speculative = ListFilter(states=[MachineState.SPECULATIVE])
        with provider_errors():
            listed = {m.id: m for m in await offloaded(p, lambda: p.list(speculative))}
        shard = self.client.get_workflow_handle(shard_workflow_id(r.shard))
        held: set[str] = set()
        start = 0
        while start >= 0:
            page, start = await shard.query(
                "speculative_ids",
                args=[r.provider, start, ID_PAGE],
                result_type=tuple[list[str], int],
            )
            held.update(page)
        gone = sorted(mid for mid in held if mid not in listed)
        shares = set(r.shares)
        maybe = sorted(
            mid
            for mid, m in listed.items()
            if mid not in held and machine_shard(m, r.shards) in shares
        )
        fresh: list[Machine] = []
        for i in range(0, len(maybe), ID_PAGE):
            if len(fresh) >= LIST_PAGE:
                break
            free = await nobodys(self.client, r.shard, maybe[i : i + ID_PAGE])
            fresh += [listed[mid] for mid in sorted(free)]
        return CapacityDiff(gone=gone[:CAPACITY_GONE], fresh=fresh[:LIST_PAGE])

    @activity.defn(name="provider_unowned")
    async def unowned(self, r: UnownedRead) -> UnownedPage:
        """After a revival, for shard `r.shard`: the provider's machines, from id `r.after` on,
        that no shard owns — this shard's `machine_states` says GONE, no other running shard
        holds it (`owned_elsewhere`), no transfer saga carries it (`in_sagas`) — and that are
        this shard's to take back (`claimable`: configured for one of its clusters, or by the
        assignment rule). The listing and the shards' answers stay here; only the machines to
        adopt (at most LIST_PAGE, as a MachinePage) and where to go on enter its history. The
        calls of one look share `r.now`, so the listing is taken once for them."""
        if self.client is None:
            raise ApplicationError("provider_unowned needs a Temporal client", non_retryable=True)
        listing, ids = await self._listed(r.provider, [], r.now)
        end = bisect.bisect_right(ids, r.after) if r.after else 0
        clusters, shares = set(r.clusters), set(r.shares)
        found: list[Machine] = []
        while end < len(listing) and len(found) < LIST_PAGE:
            chunk = listing[end : end + ID_PAGE]
            end += len(chunk)
            maybe = [m.id for m in chunk if claimable(m, clusters, shares, r.shards)]
            take = await nobodys(self.client, r.shard, maybe)
            found += [m for m in chunk if m.id in take]
            activity.heartbeat(end)
        if len(found) > LIST_PAGE:
            found = found[:LIST_PAGE]
            after = found[-1].id
        else:
            after = ids[end - 1] if end < len(listing) else ""
        return UnownedPage(page=MachinePage.of(found), after=after)

    @activity.defn(name="provider_share")
    async def share(self, r: ShareRead) -> UnownedPage:
        """One page of shard `r.shard`'s share of a listing (the assignment rule): at most
        LIST_PAGE of its machines after id `r.after`, and the id the next page goes on after
        ("": the listing is through). A shard adopting its share at start-up takes only its own
        machines into its history, not every shard's (4 shards at 100 000 machines each read
        the whole listing, page by page, and adopted a quarter of it)."""
        if r.shard >= r.shards:
            raise ApplicationError(
                f"shard: {r.shard} is not one of {r.shards} shards", non_retryable=True
            )
        listing, ids = await self._listed(r.provider, [], r.now)
        end = bisect.bisect_right(ids, r.after) if r.after else 0
        found: list[Machine] = []
        while end < len(listing) and len(found) < LIST_PAGE:
            m = listing[end]
            end += 1
            if machine_shard(m, r.shards, r.by_cluster) == r.shard:
                found.append(m)
        after = ids[end - 1] if end < len(listing) else ""
        return UnownedPage(page=MachinePage.of(found), after=after)

    async def _listed(
        self, provider: str, states: Sequence[str], now: float
    ) -> tuple[list[Machine], list[str]]:
        """A provider's machines (in `states`; all if none) in id order, and their ids: taken
        once per (provider, states, caller's now), the latest LISTINGS_KEPT kept per (provider,
        states)."""
        key = (provider, tuple(states), now)
        cached = self._listings.get(key)
        if cached is None:
            p = self._provider(provider, now)
            wanted = [MachineState(s) for s in states]
            with provider_errors():
                listed = await offloaded(p, lambda: p.list(ListFilter(states=wanted)))
            listing = sorted(listed, key=lambda m: m.id)
            cached = (listing, [m.id for m in listing])
            # (One kept made each page of each of 4 adopting shards list and sort the whole
            # provider again.)
            same = [k for k in self._listings if k[:2] == key[:2]]
            for k in same[: max(0, len(same) - LISTINGS_KEPT + 1)]:
                del self._listings[k]
            self._listings[key] = cached
        return cached

    @activity.defn(name="provider_list")
    async def list(self, r: ProviderRead) -> MachinePage:
        """One page of a listing, in id order: the machines after `r.after`, at most
        `r.limit`. The pages of one listing share the caller's `now`; the listing is taken
        once for them (a real provider pages with its own token)."""
        listing, ids = await self._listed(r.provider, r.states, r.now)
        start = bisect.bisect_right(ids, r.after) if r.after else 0
        return MachinePage.of(listing[start : start + r.limit])
