"""BigFleet started over a running fleet: a fresh shard adopts machines already configured for
clusters, and its first cycle comes before those clusters' first roll-ups. A configured machine
of a cluster the shard has not heard from yet is not reclaimed as excess until the cluster
reports (then its roll-up decides), or until it has been silent for `max_silence_seconds`, as
long as a cluster that stops reporting is allowed. Without this, the first cycle drained every
adopted machine of every cluster whose roll-up had not arrived yet."""

from bigfleet.cluster_modes import drop_rollups
from bigfleet.models import MachineState
from bigfleet.policy import Policy
from bigfleet.shard import Shard
from bigfleet.snapshot import restore_shard, shard_state
from tests.fleet import need, on_demand, rollup

S = MachineState


def drained(decision) -> list[str]:
    return sorted(a.machine_id for a in decision.actions if a.kind == "drain")


def running_fleet(shard: Shard, now: float = 0) -> None:
    """Three machines serving cluster a, two serving b, one spare."""
    serving = [on_demand(i, S.CONFIGURED, cluster="a") for i in range(3)]
    serving += [on_demand(i, S.CONFIGURED, cluster="b") for i in range(3, 5)]
    shard.adopt([*serving, on_demand(5, S.IDLE)], now)


def test_machines_of_clusters_not_heard_from_yet_stay_until_their_roll_up():
    shard = Shard(0, Policy(max_silence_seconds=300))
    running_fleet(shard)
    assert drained(shard.cycle(1)) == []  # nobody has reported: nothing is taken
    # a reports that it needs 2 of its 3: its roll-up decides for it; b is still unheard.
    assert shard.receive(rollup("a", 1, need(2, 100)), 2) is None
    first = drained(shard.cycle(3))
    assert len(first) == 1 and first[0] in {"od-0000", "od-0001", "od-0002"}
    assert shard.unheard.keys() == {"b"}


def test_a_cluster_that_never_reports_loses_its_machines_after_the_allowed_silence():
    shard = Shard(0, Policy(max_silence_seconds=300))
    running_fleet(shard)
    assert drained(shard.cycle(299)) == []
    assert drained(shard.cycle(301)) == ["od-0000", "od-0001", "od-0002", "od-0003", "od-0004"]
    assert shard.unheard == {}


def test_what_is_unheard_survives_a_snapshot_and_a_shard_of_before_drains_at_once():
    shard = Shard(0, Policy(max_silence_seconds=300))
    running_fleet(shard, now=10)
    again = restore_shard(shard_state(shard), Shard(0, Policy(max_silence_seconds=300)))
    assert again.unheard == {"a": 10, "b": 10}
    assert drained(again.cycle(20)) == []

    before = Shard(0, Policy(max_silence_seconds=300))
    before.keep_unheard = False  # a workflow run begun before this rule replays as it ran
    running_fleet(before)
    assert len(drained(before.cycle(1))) == 5
    assert "unheard" not in shard_state(before)  # (nor does its snapshot change size)


def test_a_shard_revived_without_its_roll_ups_hears_every_serving_cluster_anew():
    """The recovery ladder's last rung (activities/shards.py `revive`): the roll-ups are
    forgotten, the machines are not. Without the unheard mark, the first cycle would drain
    every machine of every cluster, as excess."""
    shard = Shard(0, Policy(max_silence_seconds=300))
    running_fleet(shard)
    shard.receive(rollup("a", 1, need(3, 100)), 1)
    shard.receive(rollup("b", 1, need(2, 100)), 1)
    shard.receive(rollup("c", 1, need(0, 100)), 1)  # heard, but holds nothing
    assert drained(shard.cycle(2)) == [] and shard.unheard == {}
    assert sorted(drop_rollups(shard, 100)) == ["a", "b", "c"]
    assert shard.needs.clusters() == [] and shard.unheard == {"a": 100, "b": 100}
    assert drained(shard.cycle(110)) == []  # kept while they may be silent
    shard.receive(rollup("a", 2, need(1, 100)), 120)  # a sends again: its roll-up decides
    assert len(drained(shard.cycle(130))) == 2 and shard.unheard.keys() == {"b"}
    assert drained(shard.cycle(401)) == ["od-0003", "od-0004"]  # b stayed silent too long
