"""The coordinator's pure planning (design §6, §9): assignment, and shortfalls resolved idle
first, then speculative quota, then cross-shard preemption only when neither exists."""

from bigfleet.assignment import cluster_shard
from bigfleet.coordinator import Coordinator
from bigfleet.models import MachineState, Shortfall, from_wire
from bigfleet.reports import MoveKind, Preemptible, ShardReport
from bigfleet.synthetic import OFFERS, machine

S = MachineState
GPU = next(o for o in OFFERS if o.instance_type == "gpu-8xh100")
REQ = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["gpu-8xh100"]}]


def gpus(prefix: str, n: int, state: MachineState, cluster: str | None = None) -> list:
    return [machine(f"{prefix}-{i:03d}", GPU, state, cluster, rack=f"{prefix}-r") for i in range(n)]


def shortfall(priority: int, count: int, same: str | None = None) -> Shortfall:
    raw = {"cluster": "train", "profile": "gpu", "priority": priority, "count": count}
    return from_wire(Shortfall, {**raw, "age": 1, "requirements": REQ, "same": same})


def report(shard: int, size: int = 1000, **lists) -> ShardReport:
    return ShardReport.of(shard, 0.0, machines={"CONFIGURED": size}, **lists)


def coordinator(*reports: ShardReport) -> Coordinator:
    c = Coordinator(term=1)
    for r in reports:
        c.receive(r, now=0.0)
    return c


def test_a_cluster_goes_home_and_stays_there():
    """A new cluster goes to its home (`cluster_shard`: where a fresh fleet's shards adopt
    the machines already configured for it), for good."""
    c = Coordinator(shards=[0, 1, 2])
    names = [f"cluster-{i}" for i in range(30)]
    assert [c.assign(n) for n in names] == [cluster_shard(n, 3) for n in names]
    first = c.clusters["cluster-0"]
    c.shards.append(3)  # a split later: assignments stand
    assert c.assign("cluster-0") == first


def test_once_the_shards_change_new_clusters_go_to_the_least_loaded():
    """Home is where a fresh fleet's shards adopt a cluster's machines; once a shard merges
    away or one is added (by hand or a split), new clusters fill the least-loaded."""
    home = cluster_shard("new", 3)
    merging = Coordinator(shards=[0, 1, 2], founding=3, retiring={home})
    assert merging.assign("new") != home
    added = Coordinator(shards=[0, 1, 2, 3], founding=3, clusters={"a": 0, "b": 1, "c": 2})
    assert added.assign("new") == 3  # the shard added by hand first
    merged = Coordinator(shards=[0, 2], founding=3, retired={1}, clusters={"a": 0})
    assert merged.assign("new") == 2
    assert merged.assign("new") == 2  # permanent

    plain = Coordinator(shards=[0, 1, 2], clusters={"a": 0, "b": 0, "c": 1}, by_home=False)
    assert plain.assign("new") == 2  # runs begun before the rule: least-loaded
    assert plain.assign("newer") == 1


def test_a_thousand_clusters_all_go_home_and_stay_balanced():
    c = Coordinator(shards=[0, 1, 2, 3])
    names = [f"team-{i:04d}" for i in range(1000)]
    assert all(c.assign(n) == cluster_shard(n, 4) for n in names)
    load = [list(c.clusters.values()).count(s) for s in range(4)]
    assert max(load) - min(load) <= 50, load  # within 10 % of the mean


def test_idle_machines_move_before_speculative_quota():
    c = coordinator(
        report(1, shortfalls=[shortfall(1_000_000, 4)]),
        report(2, idle=gpus("idle", 3, MachineState.IDLE)),
        report(3, speculative=gpus("spec", 8, MachineState.SPECULATIVE)),
    )
    moves = {m.kind: m for m in c.plan()}
    assert moves[MoveKind.IDLE].donor == 2 and len(moves[MoveKind.IDLE].machine_ids) == 3
    assert moves[MoveKind.SPECULATIVE].donor == 3
    assert len(moves[MoveKind.SPECULATIVE].machine_ids) == 1
    assert MoveKind.PREEMPT not in moves


def test_cross_shard_preemption_only_when_nothing_is_free_anywhere():
    research = [
        Preemptible(machine=m, priority=100_000, cluster="research")
        for m in gpus("res", 64, MachineState.CONFIGURED, "research")
    ]
    c = coordinator(
        report(1, shortfalls=[shortfall(1_000_000, 64)]), report(2, preemptible=research)
    )
    (move,) = c.plan()
    assert move.kind is MoveKind.PREEMPT and (move.donor, move.receiver) == (2, 1)
    assert len(move.machine_ids) == 64
    assert move.grace_seconds == 30.0  # a gap of 900 000: design §8

    c.receive(report(3, idle=gpus("idle", 1, MachineState.IDLE)), now=0.0)
    assert {m.kind for m in c.plan()} == {MoveKind.IDLE}


def test_equal_priority_never_preempts_across_shards():
    same_priority = [
        Preemptible(machine=m, priority=500_000, cluster="batch")
        for m in gpus("b", 8, MachineState.CONFIGURED, "batch")
    ]
    c = coordinator(
        report(1, shortfalls=[shortfall(500_000, 8)]), report(2, preemptible=same_priority)
    )
    assert c.plan() == []


def test_no_donor_gives_more_than_its_share_in_a_round():
    c = coordinator(
        report(1, size=1000, shortfalls=[shortfall(1_000_000, 40)]),
        report(2, size=50, idle=gpus("idle", 40, MachineState.IDLE)),
    )
    (move,) = c.plan()
    assert len(move.machine_ids) == 25  # idle: 50 % of the donor's 50 machines (drains: 10 %)
    assert c.plan(busy=move.machine_ids)[0].machine_ids[0] not in move.machine_ids


def test_a_same_rack_shortfall_is_not_resolved_across_shards_at_once():
    """Its shard tries first; once it lasts, a rack moves (tests/core/test_pooling.py)."""
    c = coordinator(
        report(1, shortfalls=[shortfall(1_000_000, 8, same="bigfleet.io/rack")]),
        report(2, idle=gpus("idle", 64, MachineState.IDLE)),
    )
    assert c.plan() == []


def test_a_shortfall_no_machine_could_serve_is_not_served_from_another_shard():
    """The shard says no machine of it carries the need's spread key: machines of the same
    profile from another shard would sit idle there."""
    never = shortfall(1_000_000, 8).model_copy(
        update={"why": "no machine of this shard carries label key example.com/room"}
    )
    idle = gpus("idle", 64, MachineState.IDLE)
    c = coordinator(report(1, shortfalls=[never]), report(2, idle=idle))
    assert c.plan() == []


def test_a_shortfall_waiting_on_machines_held_back_is_served_from_another_shard():
    """The shard's need preempted machines their cluster marked do-not-disrupt (issue 44): it
    waits on them, says why, and idle machines of another shard serve it meanwhile."""
    held = from_wire(
        Shortfall,
        {
            **shortfall(900_000, 2).model_dump(mode="json"),
            "why": "waiting on 2 machine(s) it preempts that their clusters hold back "
            "(cluster research: 2 marked do-not-disrupt)",
            "held_back": 2,
        },
    )
    c = coordinator(report(1, shortfalls=[held]), report(2, idle=gpus("idle", 4, S.IDLE)))
    [move] = c.plan()
    assert (move.kind, move.donor, move.receiver, len(move.machine_ids)) == (
        MoveKind.IDLE, 2, 1, 2,
    )  # fmt: skip


def test_missing_reports_and_fleet_wide_shortfalls_are_surfaced():
    c = coordinator(
        report(1, shortfalls=[shortfall(1_000_000, 4)]),
        report(2, shortfalls=[shortfall(900_000, 2)]),
    )
    c.add_shard(3)
    assert c.missing(now=10.0) == [3]
    assert c.missing(now=31.0) == [1, 2, 3]
    assert c.shared_shortfalls() == ["gpu"]


def test_a_shard_reports_its_configured_machines_at_the_priority_that_claims_them_now():
    import random

    from bigfleet.shard import Shard
    from bigfleet.synthetic import fleet, rollups

    shard = Shard(1)
    shard.adopt(fleet(random.Random(1), 300, 3), 0)
    for r in rollups(random.Random(2), 3, 3, 30):
        shard.receive(r, 0)
    shard.cycle(10)
    report = shard.report(10, sample=300)
    claimed = {n.key: n.priority for n in shard.needs}
    priorities = [g.priority for g in report.preemptible for _ in g.ids]
    assert priorities == sorted(priorities)  # lowest first: the coordinator's first victims
    assert set(priorities) <= set(claimed.values())
    assert len(priorities) == sum(shard.engine.ready(n) for n in shard.needs)


def test_a_report_names_each_profile_once_and_offers_every_profile():
    """Offers are grouped by profile (one record each, then ids), and a profile with few free
    machines is offered even when another has many: a shortfall for it can be resolved."""
    from bigfleet.shard import Shard

    cpu = next(o for o in OFFERS if o.instance_type == "cpu-64")
    shard = Shard(2)
    shard.adopt([machine(f"cpu-{i}", cpu, MachineState.SPECULATIVE) for i in range(500)], 0)
    shard.adopt(gpus("gpu", 3, MachineState.SPECULATIVE), 0)
    shard.cycle(10)
    r = shard.report(10, sample=32)
    assert len(r.profiles) == 2
    offered = {r.profiles[g.profile].instance_type: len(g.ids) for g in r.speculative}
    assert offered == {"cpu-64": 32, "gpu-8xh100": 3}
    c = coordinator(report(1, shortfalls=[shortfall(1, 3)]), r)
    (move,) = c.plan()
    assert move.kind is MoveKind.SPECULATIVE and sorted(move.machine_ids) == [
        "gpu-000", "gpu-001", "gpu-002"
    ]
    wire = len(r.model_dump_json())
    flat = sum(len(m.model_dump_json()) for m in r.profiles) * (32 + 3) // 2
    assert wire < flat / 4  # far smaller than a record per machine


def test_a_shard_never_heard_from_is_missing_only_once_it_had_the_time_to_report():
    """Issue 34: `missing shards: [0]` 35 s after start, while shard 0 was reporting."""
    from bigfleet.coordinator import Coordinator

    c = Coordinator(term=1, shards=[0, 1])
    started = 1000.0
    assert c.missing(started + 20, after=30, since=started) == []
    assert c.missing(started + 31, after=30, since=started) == [0, 1]
    c.received[0] = started + 25
    assert c.missing(started + 40, after=30, since=started) == [1]
    assert c.missing(started + 40, after=30) == [1]  # (no start given: never heard is missing)
