"""Machines follow use across shards (issue 45, bigfleet/pooling/quota.py and for_cost.py):
worked examples, numbers by hand.

- A need whose count still changes draws free machines of other shards too, and its shard then
  keeps them (they never go back and forth).
- A receiver holding a free machine dearer than an offer still gets the cheaper one.
- Speculative machines of a shard none of whose needs fit them go to the shards whose needs
  do, in proportion to what those ask for; a shard with use keeps its own.
- A shard reports what its needs ask for, by requirements."""

from bigfleet.models import CapacityType, MachineState, from_wire
from bigfleet.policy import Policy
from bigfleet.pooling.quota import shares
from bigfleet.reports import Demand, MoveKind, ShardReport
from bigfleet.shard import Shard
from tests.core.test_pooling import coordinator, elastic, idle_gpus, report
from tests.fleet import GPU, machine, many, need, on_demand, rollup, spot

S = MachineState
GPU_REQ = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [GPU]}]
CPU_REQ = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["cpu-64"]}]


def demand(count: int, requirements=GPU_REQ) -> Demand:
    return from_wire(Demand, {"requirements": requirements, "count": count})


def users(
    shard: int, count: int, requirements=GPU_REQ, dearer: bool = True, **lists
) -> ShardReport:
    """A shard serving one cluster whose needs ask for `count` machines; with `dearer`, it
    holds a free on-demand GPU slot ($55/h): what it would buy when short."""
    if dearer:
        lists["speculative"] = [*lists.get("speculative", []), on_demand(90 + shard, price=55.0)]
    r = report(shard, **lists)
    return r.model_copy(update={"clusters": ["c"], "demand": [demand(count, requirements)]})


def spot_slots(n: int, start: int = 0) -> list:
    return many(spot, n, start=start, price=25.0)


# ---- needs not yet settled ---------------------------------------------------------------------


def test_a_need_not_settled_draws_free_machines_and_its_shard_keeps_them():
    """Shard 1 pays $98/h for 6 on-demand GPUs of a need whose count still moves; shard 2 holds
    10 idle owned GPUs: 6 move (the need's next machines, or its consolidation once settled,
    take them). A round later shard 1 has not used them yet and shard 2 now pays for 2
    on-demand: shard 1 keeps all 6 (it would use them itself), so none goes back."""
    c = coordinator(
        report(1, elastic=[elastic(6, 98.0, settled=False)]), report(2, idle=idle_gpus(10, "A"))
    )
    [move] = c.plan()
    assert (move.kind, move.donor, move.receiver, len(move.machine_ids)) == (
        MoveKind.IDLE, 2, 1, 6,
    )  # fmt: skip
    moved = [m for m in idle_gpus(10, "A") if m.id in move.machine_ids]
    later = coordinator(
        report(1, elastic=[elastic(6, 98.0, settled=False)], idle=moved),
        report(2, elastic=[elastic(2, 98.0, cluster="batch", settled=False)]),
    )
    assert later.plan() == []


def test_a_dearer_free_machine_at_home_does_not_keep_a_cheaper_one_away():
    """Shard 1 pays $98/h for 4 on-demand GPUs and holds 2 free spot slots ($25/h): its engine
    has not put the need on them (not settled), and would not put it on owned machines either,
    but its next machines come from the cheapest free ones. Shard 2's 4 idle owned GPUs ($0 at
    the margin) are cheaper than the spot slots: they move. Runs begun before wait for the
    slots to be used."""
    reports = (
        report(1, elastic=[elastic(4, 98.0, settled=False)], speculative=spot_slots(2)),
        report(2, idle=idle_gpus(4, "A")),
    )
    [move] = coordinator(*reports).plan()
    assert (move.kind, move.donor, move.receiver, len(move.machine_ids)) == (
        MoveKind.IDLE, 2, 1, 4,
    )  # fmt: skip
    before = coordinator(*reports)
    before.follows_use = False
    assert before.plan() == []
    # Spot slots elsewhere at the same $25/h as those at home are no better: they stay.
    same = coordinator(
        report(1, elastic=[elastic(4, 98.0, settled=False)], speculative=spot_slots(2)),
        report(2, speculative=spot_slots(4, start=10)),
    )
    assert same.plan() == []


# ---- speculative quota follows demand ------------------------------------------------------------


def test_quota_nobody_in_its_shard_can_use_goes_to_the_shards_whose_needs_fit_it():
    """Shard 0 serves no cluster and holds 6 free GPU spot slots ($25/h). Shard 1's needs ask
    for 9 GPUs, shard 2's for 3, shard 3's for 5 CPU machines (the slots do not fit them);
    shards 1 and 2 would buy on-demand GPUs ($55/h) when short. The 6 are dealt 9 : 3 over
    shards 1 and 2: 4.5 and 1.5, the half to the first, so 5 and 1."""
    c = coordinator(
        report(0, speculative=spot_slots(6)),
        users(1, 9),
        users(2, 3),
        users(3, 5, CPU_REQ),
    )
    moves = c.plan()
    got = {m.receiver: len(m.machine_ids) for m in moves}
    assert got == {1: 5, 2: 1}
    assert {(m.kind, m.donor, m.reason) for m in moves} == {(MoveKind.SPECULATIVE, 0, "quota")}
    before = coordinator(report(0, speculative=spot_slots(6)), users(1, 9))
    before.follows_use = False
    assert before.plan() == []


def test_no_quota_goes_to_a_shard_with_nothing_dearer_to_buy():
    """Shard 1's needs ask for 9 GPUs, but it holds no free machine for them: short, it is
    served by design §9's order (idle owned machines of other shards first, here shard 2's),
    which a spot slot at home would forestall. Nothing moves for quota."""
    c = coordinator(
        report(0, speculative=spot_slots(6)),
        users(1, 9, dearer=False),
        report(2, idle=idle_gpus(3, "A")),
    )
    assert [m for m in c.plan() if m.reason == "quota"] == []


def test_a_shard_with_use_or_unknown_use_keeps_its_quota():
    """Shard 0's needs ask for 1 GPU: it keeps its 6 slots, though shard 1 asks for 9. A shard
    serving clusters that reports no demand (built before the field) may use them: it keeps
    them too."""
    assert coordinator(users(0, 1, speculative=spot_slots(6)), users(1, 9)).plan() == []
    unknown = report(0, speculative=spot_slots(6)).model_copy(update={"clusters": ["old"]})
    assert coordinator(unknown, users(1, 9)).plan() == []


def test_quota_is_dealt_within_the_donors_bound_for_hand_overs():
    """A donor of 8 machines hands over at most half of them a round (4 of its 6 slots)."""
    c = coordinator(report(0, size=8, speculative=spot_slots(6)), users(1, 9))
    [move] = c.plan()
    assert len(move.machine_ids) == 4


def test_shares_are_proportional_with_largest_remainders():
    assert shares(6, [9, 3]) == [5, 1]
    assert shares(7, [1, 1, 1]) == [3, 2, 2]
    assert shares(5, [0, 2]) == [0, 5]
    assert shares(3, [0, 0]) == [0, 0]
    assert sum(shares(1000, [3, 7, 11, 13])) == 1000


# ---- what a shard reports ----------------------------------------------------------------------


def test_a_shard_reports_what_its_needs_ask_for_by_requirements():
    """Two clusters asking for 3 and 4 GPUs and one for 2 CPU machines: GPU 7, CPU 2, the most
    first; a need asking for none is left out."""
    shard = Shard(1, Policy(max_silence_seconds=86400))
    shard.adopt([machine("m-0", CapacityType.BARE_METAL, provider="dc", rack="r")], 0)
    shard.receive(rollup("a", 1, need(3, 900_000)), 0)
    shard.receive(rollup("b", 1, need(4, 500_000), need(2, 100, types=["cpu-64"])), 0)
    shard.receive(rollup("c", 1, need(0, 100, types=["cpu-96"])), 0)
    shard.cycle(10)
    got = [(d.requirements[0].values, d.count) for d in shard.report(10).demand]
    assert got == [([GPU], 7), (["cpu-64"], 2)]


def test_a_shard_gets_quota_only_up_to_its_room():
    """Shard 1's needs ask for 3 GPUs and it holds 2 free GPU slots of its own: room for 1 more,
    so 1 of shard 0's 6 moves and 5 stay where they are."""
    c = coordinator(
        report(0, speculative=spot_slots(6)), users(1, 3, speculative=spot_slots(2, 10))
    )
    [move] = c.plan()
    assert (move.donor, move.receiver, len(move.machine_ids)) == (0, 1, 1)


def test_demand_is_bounded_and_a_shard_running_the_kind_keeps_its_quota():
    """A need whose requirements are over 4 000 bytes is left out of its shard's demand (a
    sender's requirements are its own choice; a report lands in the coordinator's history).
    Its shard still keeps its quota when its report shows that need running on the kind."""
    from bigfleet.needs import NeedsTable
    from bigfleet.pooling.holdings import demand

    huge = {"key": "team", "operator": "In", "values": [f"v{i:04d}" for i in range(600)]}
    table = NeedsTable()
    table.submit(rollup("big", 1, need(5, 100)), 0)
    big = need(5, 100)
    big["requirements"].append(huge)
    table.submit(rollup("huge", 1, big), 0)
    assert [d.count for d in demand(table)] == [5]

    # Shard 0's demand names only CPU machines (the GPU need was left out), but its report shows
    # a GPU need on 2 elastic machines: it keeps its GPU slots. Without that, they would go.
    def shard0(elastic_groups: list) -> ShardReport:
        return users(0, 1, CPU_REQ, speculative=spot_slots(6), elastic=elastic_groups)

    assert coordinator(shard0([elastic(2, 55.0, settled=False)]), users(1, 9)).plan() == []
    [move] = coordinator(shard0([]), users(1, 9)).plan()
    assert (move.donor, move.receiver, len(move.machine_ids)) == (0, 1, 6)


# ---- a shard the moves do not reach is proposed for a split --------------------------------------


def test_a_shard_short_beside_free_machines_elsewhere_is_counted_round_after_round():
    """Shard 1 is short of 4 GPUs at 100 000; shard 2 holds 3 idle GPUs but is short of GPUs
    itself at 1 000 000, so it keeps them and the coordinator moves none. Shard 1 is short
    beside 3 free machines; counted one more round each round, it is proposed once the count
    reaches PROPOSE_AFTER. A shard that reports no such shortfall starts again from 0; one that
    has not reported (a new coordinator run) keeps its count. A repair held for a human is not
    counted."""
    from bigfleet.fleet_shape import PROPOSE_AFTER, short_beside_free, short_rounds
    from tests.core.test_pooling import shortfall

    reports = {
        1: report(1, shortfalls=[shortfall(4, priority=100_000)]),
        2: report(2, idle=idle_gpus(3, "A"), shortfalls=[shortfall(8)]),
    }
    assert coordinator(*reports.values()).plan() == []
    assert short_beside_free(reports) == {1: 3}
    assert short_beside_free(reports, moving=["gpu-0000"]) == {1: 2}
    rounds: dict = {}
    for _ in range(PROPOSE_AFTER):
        rounds = short_rounds(rounds, short_beside_free(reports), reports)
    assert rounds == {1: (PROPOSE_AFTER, 3)}
    assert short_rounds(rounds, {}, []) == rounds  # no reports yet: kept
    assert short_rounds(rounds, {}, [1, 2]) == {}  # reported, no longer short: again from 0
    held = {**reports, 1: report(1, shortfalls=[shortfall(4, repair_held=True)])}
    assert short_beside_free(held) == {}


def test_status_names_the_shards_proposed_for_a_split():
    from workers.verbs.status import render_pool

    pool = {
        "elastic_beside_idle_owned": 0,
        "by_profile": {},
        "moved_for_cost_last_hour": 0,
        "split_proposed": [{"shard": 3, "rounds": 12, "free_elsewhere": 40}],
    }
    text = render_pool(pool)
    assert "split proposed:    shard 3 (short 12 rounds, 40 fitting machines free" in text
    del pool["split_proposed"]  # (a coordinator from before does not say)
    assert "split" not in render_pool(pool)


def test_spot_quota_goes_only_where_its_interruption_penalty_leaves_it_cheaper():
    """Shard 1's needs ask for 8 GPUs with a $800 interruption penalty: a spot slot at $25/h
    and 5 % an hour costs them 25 + 40 = $65/h, more than the $55 on-demand slot they would
    buy. None goes there; with a $100 penalty ($30/h) they all do."""

    def shard1(penalty: float) -> ShardReport:
        r = users(1, 8)
        d = r.demand[0].model_copy(update={"interruption_penalty": penalty})
        return r.model_copy(update={"demand": [d]})

    slots = many(spot, 6, price=25.0, interruption=0.05)
    assert coordinator(report(0, speculative=slots), shard1(800.0)).plan() == []
    [move] = coordinator(report(0, speculative=slots), shard1(100.0)).plan()
    assert (move.receiver, len(move.machine_ids), move.reason) == (1, 6, "quota")


def test_two_donors_fill_a_receivers_room_once():
    """Shards 0 and 2 serve no cluster and hold 6 spot slots each; shard 1 has room for 4: it
    gets 4 in all this round, not 4 from each (its report does not show the first ones yet)."""
    c = coordinator(
        report(0, speculative=spot_slots(6)),
        users(1, 4),
        report(2, speculative=spot_slots(6, start=20)),
    )
    assert sum(len(m.machine_ids) for m in c.plan() if m.reason == "quota") == 4
