"""Issue 44's rules, without Temporal: what a provider takes (an epoch at most PROVIDER_FUTURE_MS
beyond its clock), what a shard does when refused as stale (bigfleet/fences.py `FenceBook`),
and the reference server's store as the one source of its fences."""

from __future__ import annotations

import pytest

from bigfleet.edge.provider_server import ProviderService, WallClock
from bigfleet.edge.provider_store import ProviderStore
from bigfleet.epochs import PROVIDER_FUTURE_MS
from bigfleet.fences import MAX_REEPOCHS, REEPOCH_WINDOW, FenceBook
from bigfleet.models import FencingToken, MachineState
from bigfleet.providers import StaleFencingToken, UnissuedEpoch
from bigfleet.shard import Shard
from bigfleet.snapshot import restore_shard, shard_state
from tests.simulation.test_providers import Clock, cloud, slots

S = MachineState
NOW = 1_900_000_000.0  # seconds
NOW_MS = int(NOW * 1000)


def token(epoch: int, shard: int = 7) -> FencingToken:
    return FencingToken(shard_id=shard, shard_epoch=epoch, seq=1)


def test_a_provider_refuses_an_epoch_a_minute_ahead_and_keeps_nothing():
    """The forged Drain of issue 44 was 5 minutes ahead, inside the tolerance: refused now."""
    clock = Clock()
    clock.now = NOW
    provider = cloud(clock)
    a, b = slots(provider)[:2]
    with pytest.raises(UnissuedEpoch):
        provider.create([a], token(NOW_MS + 60_000))
    assert provider._epochs == {} and provider.get(a).state is S.SPECULATIVE
    provider.create([b], token(NOW_MS + PROVIDER_FUTURE_MS))  # within the skew: taken
    assert provider._epochs == {7: NOW_MS + PROVIDER_FUTURE_MS}


def test_a_refusal_of_the_current_epoch_makes_a_new_epoch_above_the_kept_one():
    book = FenceBook()
    forged = NOW_MS + 20_000  # what a provider took: within its skew
    assert book.refused("dc", presented=NOW_MS - 5_000, kept=forged, epoch=NOW_MS - 5_000)
    new = book.reepoch(NOW_MS - 5_000, NOW)
    assert new == forged + 1  # max(now, kept + 1): above the forged one, at once
    assert book.reepoch(new, NOW + 1) is None  # once
    # A refusal of the epoch before the re-epoch (a transition in flight) says nothing new.
    assert not book.refused("dc", presented=NOW_MS - 5_000, kept=forged, epoch=new)
    assert book.reepoch(new, NOW + 2) is None


def test_a_kept_epoch_beyond_the_skew_of_our_clock_waits_until_it_is_not():
    book = FenceBook()
    kept = NOW_MS + PROVIDER_FUTURE_MS + 10_000  # a provider whose clock runs ahead of ours
    book.refused("dc", presented=NOW_MS, kept=kept, epoch=NOW_MS)
    assert book.reepoch(NOW_MS, NOW) is None
    assert book.reepoch(NOW_MS, NOW + 11) == kept + 1


def test_re_epochs_are_bounded_then_escalated_naming_provider_and_fence():
    book = FenceBook()
    epoch, t = NOW_MS, NOW
    for _ in range(MAX_REEPOCHS):  # someone keeps forging
        book.refused("dc", presented=epoch, kept=epoch + 10_000, epoch=epoch)
        epoch = book.reepoch(epoch, t) or epoch
        t += 60
    book.refused("dc", presented=epoch, kept=epoch + 10_000, epoch=epoch)
    assert book.reepoch(epoch, t) is None  # not a loop: escalated
    assert book.view() == [{"provider": "dc", "kept_epoch": epoch + 10_000, "since": t}]
    # Carried across continue-as-new with the shard's state.
    shard = Shard(0, epoch=epoch)
    shard.fences = book
    again = restore_shard(shard_state(shard), Shard(0))
    assert again.fences.state() == book.state()
    # The window frees: one more try, and the escalation is over.
    assert book.reepoch(epoch, t + REEPOCH_WINDOW) == int((t + REEPOCH_WINDOW) * 1000)
    assert book.view() == []


def test_a_call_that_succeeds_ends_an_escalation():
    book = FenceBook()
    book.escalated["dc"] = (NOW_MS, NOW)
    book.served("dc")
    assert book.view() == [] and not book


def test_a_malformed_book_in_a_shards_input_is_dropped():
    book = FenceBook.restore({"pending": {"dc": "x", "ec2": 5}, "escalated": {"dc": [1]}})
    assert book.state() == {"pending": {"ec2": 5}, "reepochs": {}, "escalated": {}}
    assert not FenceBook.restore(["anything"])


def test_the_servers_store_is_the_one_source_of_a_served_providers_fences():
    """Issue 44: resetting the store's `fences` table did not recover the shard, because the
    pickled provider kept the forged epoch too and refused on its own."""
    provider = cloud(Clock())
    provider._clock = WallClock()
    a, b = slots(provider)[:2]
    now_ms = int(provider._clock() * 1000)
    provider._epochs[7] = now_ms + 20_000  # a forged epoch the pickled provider took
    store = ProviderStore()
    store.db.execute("INSERT INTO fences VALUES (7, ?)", (now_ms + 20_000,))
    service = ProviderService(provider, store, persist_provider=True)
    with pytest.raises(StaleFencingToken):
        store.check_fence("cloud", token(now_ms), now_ms / 1000)
    before = store.reset_fence(7, None, "ops@host", "forged drain")
    assert before == now_ms + 20_000 and store.fences() == {}
    with service.store.transaction():
        service.store.check_fence("cloud", token(now_ms), now_ms / 1000)
    provider.create([a], token(now_ms))  # the provider's own fence steps aside
    (log,) = store.calls()
    assert (log["method"], log["outcome"]) == ("FenceReset", "reset")
    assert log["detail"] == f"by ops@host: shard 7 epoch {now_ms + 20_000} -> None (forged drain)"
    with pytest.raises(ValueError, match="--to"):
        store.reset_fence(7, now_ms + 10 * PROVIDER_FUTURE_MS, "ops@host", "")
    assert b
