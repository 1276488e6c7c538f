"""A shortfall takes the cheapest machine first, and a free machine serves a shortfall before it
saves cost elsewhere (issue 45, decision 0015 rule 10; `Coordinator.cheapest_first`): worked
examples, numbers by hand.

One shard puts a short need on its cheapest free machine (owned racks rank at $0 at the margin,
decision 0012), and serves every short need (Phases 1 and 2) before it moves a served one onto
cheaper machines (consolidation takes what they left). Across shards the coordinator did
neither: a shortfall took free machines in shard order, so cloud slots of low-numbered shards
went before an idle rack of a higher-numbered one; and a donor kept a free machine from a short
need to save cost on a need of its own that was served already."""

from bigfleet.models import MachineState
from bigfleet.pooling.ask_first import summaries
from bigfleet.reports import MoveKind
from tests.core.test_pooling import coordinator, elastic, idle_gpus, report, shortfall
from tests.core.test_pooling_quota import CPU_REQ, users
from tests.fleet import bare_metal, many, spot

S = MachineState


def moved(c) -> list[tuple[MoveKind, int, int, int]]:
    return sorted((m.kind, m.donor, m.receiver, len(m.machine_ids)) for m in c.plan())


def test_a_shortfall_takes_an_owned_rack_before_another_shards_cloud_slots():
    """Shard 1 is short of 3 GPUs at 1 000 000. Shard 2 holds 4 free spot slots ($25/h), shard
    3 4 owned GPUs not yet made ready ($15/h list, $0 at the margin). Both are speculative (free,
    not made ready): the owned ones go ($0 against $25/h). Runs begun before took shard 2's
    slots, the first shard's."""
    reports = (
        report(1, shortfalls=[shortfall(3)]),
        report(2, speculative=many(spot, 4, price=25.0)),
        report(3, speculative=many(bare_metal, 4, state=S.SPECULATIVE, price=15.0)),
    )
    assert moved(coordinator(*reports)) == [(MoveKind.SPECULATIVE, 3, 1, 3)]
    before = coordinator(*reports)
    before.cheapest_first = False
    assert moved(before) == [(MoveKind.SPECULATIVE, 2, 1, 3)]


def test_idle_machines_still_go_before_speculative_ones_however_cheap():
    """Design §9's order stays: shard 2's 2 idle spot machines (ready in one configure) go
    before shard 3's owned rack machines not made ready, then 1 of those for the third."""
    reports = (
        report(1, shortfalls=[shortfall(3)]),
        report(2, idle=many(spot, 2, state=S.IDLE, price=25.0)),
        report(3, speculative=many(bare_metal, 4, state=S.SPECULATIVE, price=15.0)),
    )
    assert moved(coordinator(*reports)) == [
        (MoveKind.IDLE, 2, 1, 2),
        (MoveKind.SPECULATIVE, 3, 1, 1),
    ]


def test_a_free_machine_serves_a_short_need_before_it_saves_cost_on_a_served_one():
    """Shard 1 is short of 2 GPUs at 500 000 (no machine at all). Shard 2 holds 3 idle owned
    GPUs and pays $98/h for 3 on-demand ones of a settled need of its own at 900 000: the idle
    ones would replace those (a saving). The short need is served first (2 move); the third
    stays for shard 2's consolidation. Runs begun before kept all 3 (the donor's own need is
    the higher) and shard 1 stayed short."""
    reports = (
        report(1, shortfalls=[shortfall(2, priority=500_000)]),
        report(2, idle=idle_gpus(3, "A"), elastic=[elastic(3, 98.0)]),
    )
    assert moved(coordinator(*reports)) == [(MoveKind.IDLE, 2, 1, 2)]
    before = coordinator(*reports)
    before.cheapest_first = False
    assert moved(before) == []


def test_a_donor_short_of_the_machines_itself_still_keeps_them():
    """Shard 2 holds 2 idle GPUs while short of 2 at 900 000 itself (its engine has not used them
    yet): shard 1's shortfall at 500 000 gets none."""
    c = coordinator(
        report(1, shortfalls=[shortfall(2, priority=500_000)]),
        report(2, idle=idle_gpus(2, "A"), shortfalls=[shortfall(2, priority=900_000)]),
    )
    assert moved(c) == []


def test_a_shard_about_to_preempt_is_told_of_machines_a_donor_would_only_save_cost_with():
    """The summary a shard asks against before preempting follows the same rule: shard 2's 3
    idle GPUs, which would replace its own on-demand ones, are in shard 1's summary (the
    coordinator would give them to its shortfall); runs begun before left them out."""
    reports = {1: report(1), 2: report(2, idle=idle_gpus(3, "A"), elastic=[elastic(3, 98.0)])}
    told = summaries(reports, [1], term=1, at=0.0, service_first=True)
    assert [e.count for e in told[1].free] == [3]
    assert summaries(reports, [1], term=1, at=0.0)[1].free == []


# ---- free owned machines follow demand (`pooling/headroom.py`) ----------------------------------


def owned_slots(n: int, start: int = 0, rack: str = "r9") -> list:
    """`n` owned GPUs not made ready ($15/h list, $0 at the margin)."""
    return many(bare_metal, n, start=start, state=S.SPECULATIVE, rack=rack, price=15.0)


def test_free_owned_machines_are_spread_over_the_shards_by_demand():
    """Shard 1's needs ask for 6 GPUs, shard 2's for 2, shard 3 serves nobody and holds the only
    free owned GPUs, 8 of one rack. Shares of the 8: 8 × 6/8 = 6, 8 × 2/8 = 2, 0: shard 3 gives
    6 to shard 1 and 2 to shard 2, before either has a burst. Runs begun before leave them."""
    reports = (
        users(1, 6, dearer=True),
        users(2, 2, dearer=True),
        report(3, speculative=owned_slots(8)),
    )
    c = coordinator(*reports)
    moves = c.plan()
    assert sorted((m.donor, m.receiver, len(m.machine_ids), m.reason) for m in moves) == [
        (3, 1, 6, "headroom"),
        (3, 2, 2, "headroom"),
    ]
    before = coordinator(*reports)
    before.cheapest_first = False
    assert before.plan() == []


def test_a_shard_close_to_its_share_moves_nothing():
    """Shards 1 and 2 each ask for 3 GPUs and hold 4 and 3 free: shares of 7 are 3.5 each,
    capped at the 3 each asks for. Shard 2 is not under its share: nothing moves (shares
    follow demand, which moves all day: a shard moves only when a machine and a quarter of
    its share away from it). With 5 and 2 free, shard 2 is 1 under and shard 1 2 over (1
    beyond its band of 0.75): 1 moves."""
    even = coordinator(
        users(1, 3, dearer=True, speculative=owned_slots(4)),
        users(2, 3, dearer=True, speculative=owned_slots(3, start=10)),
    )
    assert even.plan() == []
    uneven = coordinator(
        users(1, 3, dearer=True, speculative=owned_slots(5)),
        users(2, 3, dearer=True, speculative=owned_slots(2, start=10)),
    )
    assert moved(uneven) == [(MoveKind.SPECULATIVE, 1, 2, 1)]


def test_a_shard_short_of_the_kind_keeps_its_free_ones_and_cpu_demand_draws_no_gpus():
    """Shard 2 holds 4 free GPUs and asks for 1, but is short of GPUs itself (its engine has not
    used them yet): it keeps them, though its share is 4 × 1/5 = 0.8. Shard 3's needs ask for
    CPU machines only: no share of the GPUs."""
    buying = [elastic(2, 55.0)]  # (cloud machines running: a shard that would buy)
    c = coordinator(
        users(1, 4, dearer=False, elastic=buying),
        users(2, 1, dearer=False, speculative=owned_slots(4), shortfalls=[shortfall(1)]),
        users(3, 50, CPU_REQ, dearer=False, elastic=buying),
    )
    assert c.plan() == []
    assert moved(
        coordinator(users(1, 4, dearer=True), users(2, 1, dearer=True, speculative=owned_slots(4)))
    ) == [(MoveKind.SPECULATIVE, 2, 1, 3)]


def test_a_shard_with_nothing_to_buy_gets_no_free_machines_ahead_of_need():
    """Shard 1's needs ask for 4 GPUs, all served from owned machines: no cloud slot to buy
    from, no cloud machine running, not short. Shard 3's 40 free owned GPUs stay: at shard 1
    they would only wait there as they wait at shard 3 (its next burst is a shortfall, which
    takes them first, design §9)."""
    c = coordinator(users(1, 4, dearer=False), report(3, speculative=owned_slots(40)))
    assert c.plan() == []


def test_cloud_slots_are_not_spread_by_this_rule():
    """Shard 3 holds 4 free spot slots and serves nobody; shard 1's needs ask for 4 GPUs and it
    runs 4 cloud machines at $20/h (a buyer), but holds no free slot dearer than spot: the
    quota rule gives it none (`quota.py`), nor does this one (owned machines only)."""
    runs = [elastic(4, 20.0)]
    c = coordinator(
        users(1, 4, dearer=False, elastic=runs), report(3, speculative=many(spot, 4, price=25.0))
    )
    assert c.plan() == []


def test_no_shard_gets_more_free_machines_than_its_needs_ask_for():
    """Shard 3 holds 40 free owned GPUs and serves nobody; shard 1's needs ask for 4: its share
    is 4 (not all 40: a fleet with more free machines than demand does not pile them onto the
    few shards with demand)."""
    c = coordinator(users(1, 4, dearer=True), report(3, speculative=owned_slots(40)))
    assert moved(c) == [(MoveKind.SPECULATIVE, 3, 1, 4)]


def test_a_shard_with_machines_on_their_way_gets_none_until_it_reports_them():
    """The same fleet, with 4 machines already on their way to shard 1 (an earlier round's move:
    its report does not show them yet): nothing more moves, or it would get 8."""
    c = coordinator(users(1, 4, dearer=True), report(3, speculative=owned_slots(40)))
    assert c.plan(pending={(1, "", 0): 4}) == []


def test_a_free_machine_stays_for_a_need_that_would_displace_the_short_one():
    """Shard 2 holds 3 idle GPUs and pays $98/h for 3 on-demand ones of a need at 900 000 whose
    displacement floor is 100 000 (backfill below it is drained for its cost, rule 2). A
    shortfall of backfill at 0 on shard 1 gets none of them: given, the cost rule would drain
    it again for the need at 900 000 and the machine would go back and forth (measured: the
    day on 4 shards moved 8 780 machines back and forth so). A shortfall at 500 000, above the
    floor, gets 2."""
    group = elastic(3, 98.0).model_copy(update={"displace_below": 100_000})
    donor = report(2, idle=idle_gpus(3, "A"), elastic=[group])
    assert moved(coordinator(report(1, shortfalls=[shortfall(2, priority=0)]), donor)) == []
    above = coordinator(report(1, shortfalls=[shortfall(2, priority=500_000)]), donor)
    assert moved(above) == [(MoveKind.IDLE, 2, 1, 2)]
