"""A need its cluster's operator refuses to bootstrap (design §13, issue 34): each refusal in a
row doubles the wait before BigFleet tries again, the shortfall ages from the first and is
escalated, and a machine configured for the cluster ends the streak."""

from bigfleet.models import MachineState
from bigfleet.policy import Policy
from bigfleet.shard import MAX_REFUSAL_BACKOFF_SECONDS, REFUSAL_BACKOFF_SECONDS, Shard
from bigfleet.snapshot import restore_shard, shard_state
from tests.fleet import bare_metal, need, rollup

S = MachineState
NOW = 1_000_000.0


def refused_shard() -> Shard:
    shard = Shard(0, Policy(max_silence_seconds=86400))
    shard.adopt([bare_metal(i, S.IDLE) for i in range(4)], NOW - 100)
    shard.receive(rollup("old", 1, need(2, 500_000)), NOW - 90)
    return shard


def wait_after(shard: Shard) -> float:
    return shard.refusals[("old", 500_000)][0]


def test_each_refusal_in_a_row_doubles_the_wait_up_to_an_hour():
    shard = refused_shard()
    t, waits = NOW, []
    for _ in range(6):
        shard.refuse_again("old", 500_000, "kubelet 1.20 is outside 1.30-1.33", t)
        shard.refuse_again("old", 500_000, "kubelet 1.20 is outside 1.30-1.33", t + 1)  # (same try)
        waits.append(wait_after(shard) - (t + 1))
        t = wait_after(shard) + 1
        shard.cycle(t)  # (the refusal has expired: the need is tried again)
    assert waits == [REFUSAL_BACKOFF_SECONDS * 2**i for i in range(4)] + [
        MAX_REFUSAL_BACKOFF_SECONDS
    ] * 2


def test_the_shortfall_ages_from_the_first_refusal_and_is_escalated():
    shard = refused_shard()
    shard.refuse_again("old", 500_000, "refused", NOW)
    [sf] = [s for s in shard.cycle(NOW + 10).shortfalls if s.cluster == "old"]
    assert (sf.age, sf.escalated) == (2, False)
    [sf] = [s for s in shard.cycle(NOW + 60).shortfalls if s.cluster == "old"]
    assert (sf.age, sf.escalated) == (7, True)
    assert sf.profile == "refused by operator: refused"
    again = restore_shard(shard_state(shard), Shard(0, shard.policy))
    assert again.refused == shard.refused


def test_a_machine_configured_for_the_cluster_ends_the_streak():
    shard = refused_shard()
    shard.refuse_again("old", 500_000, "refused", NOW)
    shard.observe(bare_metal(0, S.CONFIGURING, cluster="old"), NOW + 1)
    assert shard.refused
    shard.observe(bare_metal(0, S.CONFIGURED, cluster="old"), NOW + 2)
    assert shard.refused == {}
