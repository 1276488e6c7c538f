"""Slow drains under priority pressure (design §7, issue 33; bigfleet/blocked.py): a preemption
drain that runs long makes its preemptor's need a shortfall, aged and escalated like any
other, naming the drains; the coordinator escalates each of them once."""

from bigfleet.coordinator import Coordinator
from bigfleet.models import MachineState
from bigfleet.policy import Policy
from bigfleet.reports import ShardReport
from bigfleet.shard import Shard
from tests.fleet import bare_metal, need, rollup

S = MachineState
NOW = 1_000_000.0


def pressed() -> Shard:
    """Cluster a (priority 900 000) holds all 4 machines; b (1 000 000) asks for 4: a gap of
    100 000 drains a's machines with 10 minutes of grace."""
    shard = Shard(0, Policy(max_silence_seconds=86400, blocked_drain_seconds=300,
                            escalate_after_cycles=5))  # fmt: skip
    shard.adopt([bare_metal(i, S.CONFIGURED, cluster="a") for i in range(4)], NOW - 100)
    shard.receive(rollup("a", 1, need(4, 900_000)), NOW - 90)
    shard.cycle(NOW - 80)
    shard.receive(rollup("b", 1, need(4, 1_000_000)), NOW - 1)
    decision = shard.cycle(NOW)
    assert sorted(p.machine_id for p in decision.preemptions) == [f"gpu-{i:04d}" for i in range(4)]
    assert {a.grace_seconds for a in decision.actions if a.kind == "drain"} == {600.0}
    return shard


def blocked(decision):
    return [s for s in decision.shortfalls if s.blocked_drains]


def test_a_drain_running_past_the_threshold_makes_its_preemptor_short():
    shard = pressed()
    assert blocked(shard.cycle(NOW + 290)) == []  # (not yet: 290 s < 300 s)
    [sf] = blocked(shard.cycle(NOW + 300))
    assert (sf.cluster, sf.priority, sf.count) == ("b", 1_000_000, 4)
    assert (sf.age, sf.escalated) == (1, False)
    assert sf.blocked_drains == [f"gpu-{i:04d}" for i in range(4)]
    assert "waiting on 4 preemption drain(s)" in sf.profile
    # Aged like any shortfall: escalated after `escalate_after_cycles` cycles.
    [sf] = blocked(shard.cycle(NOW + 340))
    assert (sf.age, sf.escalated) == (5, True)


def test_a_drain_that_ends_or_a_preemptor_that_stops_asking_blocks_nothing():
    shard = pressed()
    shard.observe(bare_metal(0, S.IDLE), NOW + 200)  # drained: its machine goes to b
    [sf] = blocked(shard.cycle(NOW + 310))
    assert sf.blocked_drains == ["gpu-0001", "gpu-0002", "gpu-0003"]
    shard.receive(rollup("b", 2, need(0, 1_000_000)), NOW + 311)
    assert blocked(shard.cycle(NOW + 320)) == []


def test_blocked_drains_survive_a_snapshot():
    from bigfleet.snapshot import restore_shard, shard_state

    shard = pressed()
    again = restore_shard(shard_state(shard), Shard(0, shard.policy))
    [sf] = blocked(again.cycle(NOW + 300))
    assert len(sf.blocked_drains) == 4


def test_the_coordinator_escalates_each_blocked_drain_once():
    shard = pressed()
    shard.cycle(NOW + 300)
    coordinator = Coordinator(term=1, shards=[0])
    report = lambda at: ShardReport(shard=0, at=at, shortfalls=shard.last.shortfalls)  # noqa: E731
    coordinator.reports[0] = report(NOW + 300)
    assert coordinator.drains_to_escalate() == []  # (not escalated yet)
    shard.cycle(NOW + 340)
    coordinator.reports[0] = report(NOW + 340)
    assert coordinator.drains_to_escalate() == [f"gpu-{i:04d}" for i in range(4)]
    assert coordinator.drains_to_escalate() == []  # once
    shard.receive(rollup("b", 2, need(0, 1_000_000)), NOW + 341)
    shard.cycle(NOW + 350)
    coordinator.reports[0] = report(NOW + 350)
    assert coordinator.drains_to_escalate() == [] and coordinator.escalated_drains == set()


def test_the_coordinator_escalates_a_bounded_number_of_drains_a_round():
    from bigfleet.models import Shortfall

    coordinator = Coordinator(term=1, shards=[0])
    many = [
        Shortfall(cluster=f"c{i}", profile="waiting", priority=1, count=64, age=9,
                  escalated=True, blocked_drains=[f"m{i}-{k}" for k in range(64)])
        for i in range(40)
    ]  # fmt: skip
    coordinator.reports[0] = ShardReport(shard=0, at=NOW, shortfalls=many)
    rounds = [coordinator.drains_to_escalate(limit=1000) for _ in range(4)]
    assert [len(r) for r in rounds] == [1000, 1000, 40 * 64 - 2000, 0]
    assert len({m for r in rounds for m in r}) == 40 * 64  # each once
