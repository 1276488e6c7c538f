"""One pool across shards (issue 45, bigfleet/pooling/): worked examples, numbers by hand.

- A `same`-rack shortfall that lasts gets machines of one rack moved to its shard.
- Idle owned machines go to a shard paying for elastic ones that they would replace.
- Hand-overs that disrupt nothing have their own, larger bound than drains.
- A shard reports the elastic machines its consolidation would move onto owned ones."""

import pytest

from bigfleet.coordinator import Coordinator
from bigfleet.models import MachineState, Shortfall, from_wire
from bigfleet.policy import Policy
from bigfleet.reports import ElasticGroup, MoveKind, Preemptible, ShardReport
from bigfleet.shard import Shard
from tests.fleet import bare_metal, many, need, on_demand, rollup

S = MachineState
RACK = "bigfleet.io/rack"
GPU_REQ = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["gpu-8xh100"]}]


def shortfall(count: int, age: int = 3, priority: int = 1_000_000, **extra) -> Shortfall:
    raw = {"cluster": "train", "profile": "gpu", "priority": priority, "count": count, "age": age}
    return from_wire(Shortfall, {**raw, "requirements": GPU_REQ, **extra})


def elastic(
    count: int,
    cost: float,
    penalty: float = 0.0,
    cluster: str = "web",
    requirements=GPU_REQ,
    settled: bool = True,
) -> ElasticGroup:
    raw = {"cluster": cluster, "priority": 900_000, "requirements": requirements, "count": count}
    cost_fields = {"cost_per_hour": cost, "interruption_penalty": penalty, "settled": settled}
    return from_wire(ElasticGroup, {**raw, **cost_fields})


def report(shard: int, size: int = 1000, **lists) -> ShardReport:
    return ShardReport.of(shard, 0.0, machines={"CONFIGURED": size}, **lists)


def coordinator(*reports: ShardReport, pools: bool = True) -> Coordinator:
    c = Coordinator(term=1, pools=pools)
    for r in reports:
        c.receive(r, now=0.0)
    return c


def held(prefix: str, n: int, priority: int, rack: str) -> list[Preemptible]:
    return [
        Preemptible(machine=m, priority=priority, cluster="research")
        for m in many(bare_metal, n, state=S.CONFIGURED, rack=rack, cluster="research")
    ]


def idle_gpus(n: int, rack: str, start: int = 0) -> list:
    return many(bare_metal, n, start=start, rack=rack)


# ---- a `same` shortfall gets one domain --------------------------------------------------------


def test_a_lasting_same_rack_shortfall_gets_machines_of_one_rack():
    """Shard 1 needs 8 GPUs in one rack. Shard 2 has 5 idle in rack A and 10 in rack B: only B
    can hold 8, so 8 of B's move (idle: a hand-over)."""
    c = coordinator(
        report(1, shortfalls=[shortfall(8, same=RACK)]),
        report(2, idle=idle_gpus(5, "A") + idle_gpus(10, "B", start=5)),
    )
    [move] = c.plan()
    assert (move.kind, move.donor, move.receiver) == (MoveKind.IDLE, 2, 1)
    assert sorted(move.machine_ids) == [f"gpu-{i:04d}" for i in range(5, 13)]


def test_a_young_same_shortfall_waits_and_runs_begun_before_never_move_a_rack():
    young = coordinator(
        report(1, shortfalls=[shortfall(8, age=2, same=RACK)]),
        report(2, idle=idle_gpus(10, "B")),
    )
    assert young.plan() == []  # the shard first tries on its own (SAME_AFTER = 3 cycles)
    before = coordinator(
        report(1, shortfalls=[shortfall(8, same=RACK)]),
        report(2, idle=idle_gpus(10, "B")),
        pools=False,
    )
    assert before.plan() == []


def test_the_rack_the_receiver_already_holds_part_of_is_completed():
    """Shard 1 holds 3 free machines of rack A; shard 2 has 5 more of A and 10 of B: A is
    completed with 5 (8 − 3), not B started with 8."""
    c = coordinator(
        report(1, shortfalls=[shortfall(8, same=RACK)], idle=idle_gpus(3, "A", start=100)),
        report(2, idle=idle_gpus(5, "A") + idle_gpus(10, "B", start=5)),
    )
    [move] = c.plan()
    assert sorted(move.machine_ids) == [f"gpu-{i:04d}" for i in range(5)]


def test_a_rack_held_by_lower_priorities_is_preempted_free_machines_first():
    """Rack C on shard 2: 2 idle, 62 held by research at 100 000. The need (1 000 000, 8 in
    one rack) takes the 2 idle and preempts 6, with 30 s of grace (a gap of 900 000)."""
    c = coordinator(
        report(1, shortfalls=[shortfall(8, same=RACK)]),
        report(2, idle=idle_gpus(2, "C", start=200), preemptible=held("r", 62, 100_000, "C")),
    )
    moves = {m.kind: m for m in c.plan()}
    assert len(moves[MoveKind.IDLE].machine_ids) == 2
    assert len(moves[MoveKind.PREEMPT].machine_ids) == 6
    assert moves[MoveKind.PREEMPT].grace_seconds == 30.0


def test_no_rack_that_cannot_hold_the_whole_need_is_touched():
    """Racks of 5 and 6 free machines, a need of 8 in one rack: nothing moves (a partial rack
    would serve nothing)."""
    c = coordinator(
        report(1, shortfalls=[shortfall(8, same=RACK)]),
        report(2, idle=idle_gpus(5, "A")),
        report(3, idle=idle_gpus(6, "B", start=10)),
    )
    assert c.plan() == []


# ---- idle owned capacity goes where elastic capacity is paid for --------------------------------


def test_idle_owned_machines_go_where_elastic_ones_are_paid_for():
    """Shard 1 pays for 6 on-demand GPU machines at $98/h for web; shard 2 holds 10 idle owned
    GPU machines: 6 move to shard 1 (a saving of 6 × $98 = $588 an hour once shard 1's
    consolidation has moved web onto them)."""
    c = coordinator(report(1, elastic=[elastic(6, 98.0)]), report(2, idle=idle_gpus(10, "A")))
    [move] = c.plan()
    assert (move.kind, move.donor, move.receiver, move.cluster) == (MoveKind.IDLE, 2, 1, "web")
    assert len(move.machine_ids) == 6
    pending = {(1, "web", 900_000): 6}  # on their way: not asked for again
    assert c.plan(busy=move.machine_ids, pending=pending) == []
    assert (
        coordinator(
            report(1, elastic=[elastic(6, 98.0)]), report(2, idle=idle_gpus(10, "A")), pools=False
        ).plan()
        == []
    )


def test_no_cost_move_to_a_shard_that_leaves_its_own_free_machines_unused():
    c = coordinator(
        report(1, elastic=[elastic(6, 98.0)], idle=idle_gpus(1, "Z", start=50)),
        report(2, idle=idle_gpus(10, "A")),
    )
    assert c.plan() == []


def test_a_shard_keeps_free_machines_it_would_use_itself():
    """Shard 2's idle GPUs fit its own shortfall at 1 000 000, or its own elastic spend: they
    stay (else they would go back and forth between two shards, round after round)."""
    short = coordinator(
        report(1, elastic=[elastic(6, 98.0)]),
        report(2, idle=idle_gpus(10, "A"), shortfalls=[shortfall(4)]),
    )
    assert short.plan() == []
    paying = coordinator(
        report(1, elastic=[elastic(6, 98.0)]),
        report(2, idle=idle_gpus(10, "A"), elastic=[elastic(2, 31.0, cluster="batch")]),
    )
    assert paying.plan() == []


def test_a_stand_in_must_cost_less_at_its_effective_cost():
    """Speculative spot slots at $31/h with a 5 % hourly interruption: for a need with a $100
    interruption penalty they cost 31 + 0.05 × 100 = $36/h effective, less than its $98
    on-demand: they move; with a $1 500 penalty, 31 + 75 = $106 > $98: they stay."""
    from bigfleet.synthetic import OFFERS
    from bigfleet.synthetic import machine as offer_machine

    spot = next(o for o in OFFERS if o.instance_type == "p5.48xlarge" and o.price == 31.0)
    slots = [offer_machine(f"slot-{i}", spot, S.SPECULATIVE) for i in range(4)]
    p5 = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}]

    def group(penalty: float) -> ElasticGroup:
        return elastic(4, 98.0, penalty, requirements=p5)

    [move] = coordinator(report(1, elastic=[group(100.0)]), report(2, speculative=slots)).plan()
    assert move.kind is MoveKind.SPECULATIVE and len(move.machine_ids) == 4
    dear = coordinator(report(1, elastic=[group(1500.0)]), report(2, speculative=slots))
    assert dear.plan() == []


# ---- bounds -----------------------------------------------------------------------------------


def test_hand_overs_and_drains_have_their_own_bounds():
    """A donor of 50 machines: 25 idle ones a round (50 %), 5 drained ones (10 %)."""
    idle = coordinator(
        report(1, shortfalls=[shortfall(40)]), report(2, size=50, idle=idle_gpus(40, "A"))
    )
    [move] = idle.plan()
    assert len(move.machine_ids) == 25
    drains = coordinator(
        report(1, shortfalls=[shortfall(40)]),
        report(2, size=50, preemptible=held("r", 40, 100_000, "A")),
    )
    [move] = drains.plan()
    assert move.kind is MoveKind.PREEMPT and len(move.machine_ids) == 5
    before = coordinator(
        report(1, shortfalls=[shortfall(40)]),
        report(2, size=50, idle=idle_gpus(40, "A")),
        pools=False,
    )
    assert len(before.plan()[0].machine_ids) == 5  # runs begun before: one bound for both


# ---- what a shard reports ----------------------------------------------------------------------


def test_a_shard_reports_elastic_machines_its_consolidation_would_replace():
    """Cluster web holds 4 on-demand machines at $6/h: replacing one saves $6/h, over the
    $0.50 minimum, and 6 × 1 h > a reclamation penalty of $5: reported. With a $10 penalty,
    1 h of saving does not pay for leaving the machine: not reported."""

    def reported(reclamation: float) -> list[ElasticGroup]:
        shard = Shard(1, Policy(max_silence_seconds=86400))
        shard.adopt(many(on_demand, 4, state=S.CONFIGURED, cluster="web"), 0)
        shard.receive(rollup("web", 1, need(4, 900_000, reclamation_penalty=reclamation)), 0)
        shard.cycle(10)
        return shard.report(10).elastic

    [group] = reported(5.0)
    assert (group.cluster, group.priority, group.count, group.cost_per_hour) == (
        "web", 900_000, 4, 6.0,
    )  # fmt: skip
    assert reported(10.0) == []


def test_backfill_elsewhere_is_drained_for_a_settled_need_paying_for_elastic():
    """Shard 1's web (900 000) has paid $98/h for each of 2 on-demand machines long enough to be
    settled; its shard would displace holders below priority 1 (`displace_gap` 900 000). On
    shard 2, research (priority 0, reclamation penalty $50) holds owned GPUs: 98 × 1 h > 50,
    so 2 are drained for web with 30 s of grace (a gap of 900 000). A penalty of $200, a
    holder at 100 000, or a need not settled: nothing moves."""

    def plan(penalty: float = 50.0, holder: int = 0, settled: bool = True) -> list:
        group = elastic(2, 98.0, settled=settled).model_copy(update={"displace_below": 1})
        victims = [
            Preemptible(machine=m, priority=holder, cluster="research", reclamation_penalty=penalty)
            for m in many(bare_metal, 4, state=S.CONFIGURED, rack="R", cluster="research")
        ]
        return coordinator(report(1, elastic=[group]), report(2, preemptible=victims)).plan()

    [move] = plan()
    assert (move.kind, move.donor, move.receiver, move.cluster) == (MoveKind.PREEMPT, 2, 1, "web")
    assert len(move.machine_ids) == 2 and move.grace_seconds == 30.0
    assert plan(penalty=200.0) == []
    assert plan(holder=100_000) == []
    assert plan(settled=False) == []


def test_a_need_not_settled_draws_no_machine_in_runs_begun_before():
    """Coordinator runs begun before `follows_use` move machines for settled needs only
    (tests/core/test_pooling_quota.py: what they do now)."""
    c = coordinator(
        report(1, elastic=[elastic(6, 98.0, settled=False)]), report(2, idle=idle_gpus(10, "A"))
    )
    c.follows_use = False
    assert c.plan() == []


# ---- a new cluster goes where owned capacity for it is ----------------------------------------


def homed(shard: int, prefix: str = "team") -> str:
    """A cluster name whose home among 3 shards is `shard`."""
    import zlib

    names = (f"{prefix}-{i}" for i in range(100))
    return next(n for n in names if zlib.crc32(n.encode()) % 3 == shard)


def holding_reports() -> list[ShardReport]:
    """Shard 0 holds owned CPU machines, shard 1 and shard 2 owned GPU ones (shard 2 fewer)."""
    from bigfleet.inventory import Inventory
    from bigfleet.pooling.holdings import holdings

    def holds(machines: list) -> list:
        inv = Inventory()
        inv.add(machines, 0)
        return holdings(inv)

    cpu = many(bare_metal, 6, rack="C", instance_type="cpu-64")
    return [
        report(0, holds=holds(cpu)),
        report(1, holds=holds(idle_gpus(8, "G"))),
        report(2, holds=holds(idle_gpus(2, "H"))),
    ]


def test_a_new_cluster_goes_where_owned_machines_its_needs_fit_are():
    """A GPU cluster whose home (shard 0) holds only CPU machines goes to the least-loaded of
    the shards holding GPUs; one whose home holds GPUs stays home; one wanting a type nobody
    owns goes home; runs begun before the rule always go home."""
    c = coordinator(*holding_reports())
    c.shards = [0, 1, 2]
    c.clusters = {"busy-1": 1}  # shard 1 serves a cluster already: shard 2 is less loaded
    gpu = [elastic(1, 1.0).requirements]
    assert c.assign(homed(0), wants=gpu) == 2
    assert c.assign(homed(1), wants=gpu) == 1  # home holds GPUs
    m6i = [from_wire(ElasticGroup, {**elastic(1, 1.0).model_dump(mode="json"), "requirements": [
        {**GPU_REQ[0], "values": ["m6i.xlarge"]}]}).requirements]  # fmt: skip
    assert c.assign(homed(0, "svc"), wants=m6i) == 0  # nobody owns any: home
    before = coordinator(*holding_reports(), pools=False)
    before.shards = [0, 1, 2]
    assert before.assign(homed(0), wants=gpu) == 0


def test_a_shard_asking_whose_new_clusters_are_gets_the_same_answer():
    """`ClusterQuestion.wants`: the roll-ups' requirements the asking shard holds."""
    from bigfleet.cluster_questions import ClusterQuestion, wants_of
    from bigfleet.models import CapacityNeed

    needs = [from_wire(CapacityNeed, need(4, 900_000, types=("gpu-8xh100",)))]
    question = from_wire(ClusterQuestion, {
        "shard": 0, "clusters": [homed(0)],
        "wants": {homed(0): [[r.model_dump(mode="json") for r in w] for w in wants_of(needs)]},
    })  # fmt: skip
    c = coordinator(*holding_reports())
    c.shards = [0, 1, 2]
    assert c.owners(0, question.clusters, wants=question.wants) == {homed(0): 1}


def test_assign_cluster_takes_a_bare_name_or_a_name_with_wants_and_names_a_bad_field():
    from bigfleet.cluster_questions import AssignArgument, asked
    from bigfleet.inputs import Rejected, decode

    def arg(raw: str) -> object:
        return decode([("json/plain", raw.encode())], AssignArgument, "assign_cluster")

    assert asked(arg('"web"')).cluster == "web" and asked(arg('"web"')).wants == []
    ask = asked(arg('{"cluster": "web", "wants": [[{"key": "k", "operator": "Exists"}]]}'))
    assert (ask.cluster, len(ask.wants)) == ("web", 1)
    with pytest.raises(Rejected) as bad:
        arg('{"cluster": "web", "wants": [[{"key": "k", "operator": "Sideways"}]]}')
    assert "wants" in str(bad.value) and "operator" in str(bad.value)
    with pytest.raises(Rejected) as many_wants:
        arg('{"cluster": "web", "wants": [[], [], [], [], []]}')
    assert "wants" in str(many_wants.value)


def test_what_a_new_cluster_wants_is_its_highest_needs_that_ask_for_machines():
    from bigfleet.cluster_questions import wants_of
    from bigfleet.models import CapacityNeed

    def a_need(count: int, priority: int, kind: str) -> CapacityNeed:
        return from_wire(CapacityNeed, need(count, priority, types=(kind,)))

    needs = [a_need(0, 1_000_000, "idle"), *(a_need(1, p, f"t{p}") for p in range(6))]
    assert [w[0].values for w in wants_of(needs)] == [["t5"], ["t4"], ["t3"], ["t2"]]


def test_a_shard_is_told_of_owned_machines_free_elsewhere_not_of_cloud_quota():
    """The summary a shard asks against before preempting (`pooling/ask_first.py`): shard 2's 3
    idle owned GPUs are in shard 1's summary, not in its own; shard 3's free spot quota is in
    nobody's (waiting for it would only buy it at its price: the day on 8 shards cost 3.1 %
    more when quota counted)."""
    from bigfleet.pooling.ask_first import summaries
    from bigfleet.synthetic import OFFERS
    from bigfleet.synthetic import machine as offer_machine

    spot = next(o for o in OFFERS if o.instance_type == "p5.48xlarge" and o.price == 31.0)
    slots = [offer_machine(f"slot-{i}", spot, S.SPECULATIVE) for i in range(4)]
    reports = {1: report(1), 2: report(2, idle=idle_gpus(3, "A")), 3: report(3, speculative=slots)}
    told = summaries(reports, [1, 2, 3], term=1, at=0.0)
    assert [(e.labels["node.kubernetes.io/instance-type"], e.count) for e in told[1].free] == [
        ("gpu-8xh100", 3)
    ]
    assert told[2].free == [] and len(told[3].free) == 1
