"""Bounding disruption (issue 33): a cluster's operator bounds what BigFleet takes from it
voluntarily, with budgets (a count or a percentage of its machines, by reason, optionally in a
cron window) and do-not-disrupt marks with an expiry, in its roll-up; the deployment's policy
holds the budgets of a cluster that sets none. Worked examples on one shard."""

from calendar import timegm

import pytest

from bigfleet.models import ClusterCapacityNeeds, MachineState, from_wire
from bigfleet.policy import Policy
from bigfleet.shard import Shard
from bigfleet.snapshot import restore_shard, shard_state
from tests.fleet import bare_metal, need, on_demand, rollup

S = MachineState
TUESDAY_10 = timegm((2026, 12, 8, 10, 0, 0))  # a Tuesday, 10:00 UTC
TUESDAY_18 = timegm((2026, 12, 8, 18, 0, 0))
BUSINESS_HOURS = {"schedule": "0 9 * * mon-fri", "duration_seconds": 8 * 3600}


def drained(decision, reason: str | None = None) -> list[str]:
    return sorted(
        a.machine_id
        for a in decision.actions
        if a.kind == "drain" and (reason is None or a.reason == reason)
    )


def serving(shard: Shard, cluster: str, count: int, now: float, start: int = 0) -> None:
    shard.adopt([bare_metal(i, S.CONFIGURED, cluster=cluster) for i in range(start, start + count)],
                now)  # fmt: skip


def shrinking(disruption: dict | None, policy: Policy | None = None, now: float = TUESDAY_10):
    """Cluster web served by 10 machines asks for 4: 6 are excess."""
    shard = Shard(0, policy or Policy(max_silence_seconds=86400))
    serving(shard, "web", 10, now - 60)
    raw = rollup("web", 1, need(10, 100))
    assert shard.receive(raw, now - 50) is None
    shard.cycle(now - 40)
    smaller = {**rollup("web", 2, need(4, 100))}
    if disruption is not None:
        smaller["disruption"] = disruption
    assert shard.receive(smaller, now - 1) is None
    return shard


def test_without_a_budget_every_excess_machine_drains_at_once():
    shard = shrinking(None)
    assert len(drained(shard.cycle(TUESDAY_10))) == 6


@pytest.mark.parametrize(("machines", "at_once"), [("2", 2), ("25%", 3), ("0", 0), ("100%", 6)])
def test_a_budget_bounds_the_machines_draining_at_once(machines: str, at_once: int):
    shard = shrinking({"budgets": [{"machines": machines}]})
    first = drained(shard.cycle(TUESDAY_10))
    assert len(first) == at_once  # (25 % of 10 is 2.5: rounded up)
    view = shard.disruption.view("web", shard.inventory, TUESDAY_10 + 1)
    assert view["held_back"] == ({"excess": 6 - at_once} if at_once < 6 else {})
    assert view["draining"] == at_once and view["machines"] == 10
    # While those drain, no more go: the draining ones count against the budget.
    assert drained(shard.cycle(TUESDAY_10 + 10)) == []


def test_a_budget_in_its_window_holds_and_outside_it_nothing_does():
    closed = {"budgets": [{"machines": "0", **BUSINESS_HOURS}]}
    assert drained(shrinking(closed, now=TUESDAY_10).cycle(TUESDAY_10)) == []
    assert len(drained(shrinking(closed, now=TUESDAY_18).cycle(TUESDAY_18))) == 6


def test_the_most_restrictive_budget_that_holds_for_the_reason_wins():
    budgets = [
        {"machines": "50%"},
        {"machines": "1", "reasons": ["excess"]},
        {"machines": "0", "reasons": ["preempt"]},  # (another reason: not this one's)
    ]
    assert len(drained(shrinking({"budgets": budgets}).cycle(TUESDAY_10))) == 1


def test_the_policy_holds_the_budgets_of_a_cluster_that_sets_none():
    policy = Policy(disruption_budgets=[{"machines": "1"}])
    shard = shrinking(None, policy)
    assert len(drained(shard.cycle(TUESDAY_10))) == 1
    assert shard.disruption.view("web", shard.inventory, TUESDAY_10)["source"] == "policy"
    # A roll-up's own budgets replace the policy's for its cluster.
    own = shrinking({"budgets": [{"machines": "3"}]}, policy)
    assert len(drained(own.cycle(TUESDAY_10))) == 3


def test_a_machine_marked_do_not_disrupt_is_not_drained_until_its_mark_expires():
    marks = [{"machine_id": f"gpu-{i:04d}", "until": TUESDAY_10 + 600} for i in range(10)]
    # (A mark for a machine that is not the cluster's is not kept: marks stay bounded.)
    marks.append({"machine_id": "gpu-9999", "until": TUESDAY_10 + 600})
    shard = shrinking({"do_not_disrupt": marks})
    assert drained(shard.cycle(TUESDAY_10)) == []
    assert shard.disruption.view("web", shard.inventory, TUESDAY_10)["do_not_disrupt"] == 10
    assert len(drained(shard.cycle(TUESDAY_10 + 601))) == 6


def test_a_mark_holds_no_longer_than_the_policy_allows():
    marks = [{"machine_id": f"gpu-{i:04d}", "until": TUESDAY_10 + 10**8} for i in range(10)]
    policy = Policy(max_do_not_disrupt_seconds=300, max_silence_seconds=86400)
    shard = shrinking({"do_not_disrupt": marks}, policy)
    assert drained(shard.cycle(TUESDAY_10)) == []
    assert len(drained(shard.cycle(TUESDAY_10 + 300))) == 6


def test_excess_falls_on_unmarked_machines_where_there_are_any():
    """The engine gives up a cluster's marked machines last: marking the six it would drain
    moves the excess onto the four it would have kept (two marked ones are still excess, and
    held back), instead of holding all six back while unmarked machines stay."""
    would = drained(shrinking(None).cycle(TUESDAY_10))
    assert len(would) == 6
    marks = [{"machine_id": mid, "until": TUESDAY_10 + 600} for mid in would]
    shard = shrinking({"do_not_disrupt": marks})
    now_drained = drained(shard.cycle(TUESDAY_10))
    unmarked = sorted({f"gpu-{i:04d}" for i in range(10)} - set(would))
    assert now_drained == unmarked
    assert shard.disruption.view("web", shard.inventory, TUESDAY_10)["held_back"] == {
        "excess": 2
    }
    # The flags are the marks of now: once they expire, the rest of the excess drains.
    assert len(drained(shard.cycle(TUESDAY_10 + 601))) == 2
    assert not shard.inventory.kept.any()


def preempting(gap: int, budget: str = "1") -> Shard:
    """Cluster low (priority 100) holds 4 machines, all there are; high asks for 2."""
    shard = Shard(0, Policy(disruption_override_gap=1_000_000))
    serving(shard, "low", 4, TUESDAY_10 - 60)
    low = rollup("low", 1, need(4, 100))
    low["disruption"] = {"budgets": [{"machines": budget, "reasons": ["preempt"]}]}
    assert shard.receive(low, TUESDAY_10 - 50) is None
    shard.cycle(TUESDAY_10 - 40)
    assert shard.receive(rollup("high", 1, need(2, 100 + gap)), TUESDAY_10 - 1) is None
    return shard


def test_a_preemption_respects_the_victims_budget_below_the_override_gap():
    shard = preempting(gap=500_000)
    assert len(drained(shard.cycle(TUESDAY_10), "preempt")) == 1
    assert shard.disruption.view("low", shard.inventory, TUESDAY_10)["held_back"] == {
        "preempt": 1
    }


def test_above_the_override_gap_priority_is_the_only_throttle():
    shard = preempting(gap=1_000_000, budget="0")
    assert len(drained(shard.cycle(TUESDAY_10), "preempt")) == 2


def test_a_preemption_takes_unmarked_victims_first():
    """High needs 2 of low's 4 machines: the two it would take are marked, so it takes the
    other two, and nothing is held back."""
    would = drained(preempting(gap=500_000, budget="100%").cycle(TUESDAY_10), "preempt")
    assert len(would) == 2
    shard = preempting(gap=500_000, budget="100%")
    low = rollup("low", 2, need(4, 100))
    low["disruption"] = {
        "budgets": [{"machines": "100%"}],
        "do_not_disrupt": [{"machine_id": mid, "until": TUESDAY_10 + 600} for mid in would],
    }
    assert shard.receive(low, TUESDAY_10 - 1) is None
    taken = drained(shard.cycle(TUESDAY_10), "preempt")
    assert len(taken) == 2 and not set(taken) & set(would)
    assert shard.disruption.view("low", shard.inventory, TUESDAY_10)["held_back"] == {}


@pytest.mark.parametrize(("budget", "moves"), [(None, 4), ("0", 0), ("2", 4)])
def test_a_consolidation_budget_of_none_starts_no_consolidation_move(budget, moves):
    """Work on four on-demand machines ($6/h) would move to four idle bare-metal ones ($0/h);
    a consolidation budget that allows none holds every move back (one that allows some lets
    consolidation run at its own pace)."""
    policy = Policy(consolidation_max_fraction=1.0, consolidation_stable_seconds=0)
    shard = Shard(0, policy)
    shard.adopt([on_demand(i, S.CONFIGURED, cluster="a") for i in range(4)]
                + [bare_metal(i) for i in range(4)], TUESDAY_10)  # fmt: skip
    raw = rollup("a", 1, need(4, 1000))
    if budget is not None:
        raw["disruption"] = {"budgets": [{"machines": budget, "reasons": ["consolidation"]}]}
    assert shard.receive(raw, TUESDAY_10) is None
    decision = shard.cycle(TUESDAY_10 + 1)
    assert sum(decision.consolidations.values()) == moves
    assert len([a for a in decision.actions if a.kind == "configure"]) == moves


@pytest.mark.parametrize("steer", [True, False], ids=["marks-steer-moves", "run-begun-before"])
def test_consolidation_moves_no_machine_that_could_not_leave(steer: bool):
    """Work on four on-demand machines would move to four idle bare-metal ones, but the
    cluster marked three of the on-demand ones do-not-disrupt: once their replacements were
    up they could not drain, and the fleet would pay for both. One moves. (A shard's run begun
    before, patch `marks-steer-moves`, moved all four and held three drains back.)"""
    policy = Policy(consolidation_max_fraction=1.0, consolidation_stable_seconds=0)
    shard = Shard(0, policy)
    shard.marks_steer_moves = steer
    shard.adopt([on_demand(i, S.CONFIGURED, cluster="a") for i in range(4)]
                + [bare_metal(i) for i in range(4)], TUESDAY_10)  # fmt: skip
    raw = rollup("a", 1, need(4, 1000))
    marks = [{"machine_id": f"od-{i:04d}", "until": TUESDAY_10 + 3600} for i in range(3)]
    raw["disruption"] = {"do_not_disrupt": marks}
    assert shard.receive(raw, TUESDAY_10) is None
    decision = shard.cycle(TUESDAY_10 + 1)
    moved = 1 if steer else 4
    assert sum(decision.consolidations.values()) == moved
    assert len([a for a in decision.actions if a.kind == "configure"]) == moved


def test_bounds_survive_a_snapshot_and_go_with_a_roll_up_that_sets_none():
    shard = shrinking({"budgets": [{"machines": "2"}], "do_not_disrupt": [
        {"machine_id": "gpu-0000", "until": TUESDAY_10 + 600}]})  # fmt: skip
    again = restore_shard(shard_state(shard), Shard(0, Policy()))
    assert len(drained(again.cycle(TUESDAY_10))) == 2
    assert again.disruption.marked("web", "gpu-0000", TUESDAY_10)
    assert again.receive(rollup("web", 3, need(4, 100)), TUESDAY_10 + 1) is None
    assert not again.disruption.clusters  # (the policy's again: none)


@pytest.mark.parametrize(
    ("disruption", "field"),
    [
        ({"budgets": [{"machines": "ten"}]}, "machines"),
        ({"budgets": [{"machines": "150%"}]}, "machines"),
        ({"budgets": [{"machines": "1", "reasons": ["drift"]}]}, "reasons"),
        ({"budgets": [{"machines": "1", "schedule": "0 25 * * *", "duration_seconds": 60}]},
         "hour"),
        ({"budgets": [{"machines": "1", "schedule": "@daily"}]}, "duration_seconds"),
        ({"do_not_disrupt": [{"machine_id": "gpu-0000", "until": "tomorrow"}]}, "until"),
        ({"budgets": [{"machines": "1"}] * 33}, "budgets"),
    ],
)
def test_a_malformed_disruption_is_refused_naming_its_field_and_the_last_stays(
    disruption: dict, field: str
):
    shard = shrinking({"budgets": [{"machines": "2"}]})
    raw = {**rollup("web", 3, need(4, 100)), "disruption": disruption}
    why = shard.receive(raw, TUESDAY_10)
    assert why is not None and field in why, why
    with pytest.raises(ValueError):
        from_wire(ClusterCapacityNeeds, raw)
    assert len(drained(shard.cycle(TUESDAY_10))) == 2  # (the last good budget holds)


def test_bigfleet_cluster_shows_each_budget_and_what_it_held_back():
    from workers.verbs.status import render_cluster

    budgets = [{"machines": "25%", "reasons": ["excess"]}, {"machines": "0", **BUSINESS_HOURS}]
    shard = shrinking({
        "budgets": budgets,
        "do_not_disrupt": [{"machine_id": "gpu-0009", "until": TUESDAY_18 + 600}],
    }, now=TUESDAY_18)  # fmt: skip
    shard.cycle(TUESDAY_18)  # (outside business hours: the 25 % budget alone holds)
    view = {
        "shard": 0,
        **shard.cluster_view("web"),
        "disruption": shard.disruption.view("web", shard.inventory, TUESDAY_18),
    }
    text = render_cluster(view)
    assert "disruption: 3 of 10 machines draining; 2 budget(s) from the roll-up" in text
    assert "25% (= 3) for excess: holds excess" in text
    assert "0 (= 0) for every reason for 28800 s from each '0 9 * * mon-fri': holds nothing" in text
    room = "room now: consolidation unbounded, excess 0, transfer unbounded, preempt unbounded"
    assert room in text
    assert "held back last cycle: excess 3" in text
    assert "do-not-disrupt: 1 machine(s) marked" in text


def test_a_transfer_to_another_shard_is_refused_past_the_budget_or_for_a_marked_machine():
    """The coordinator's cross-shard preemption asks the shard to drain configured machines
    for transfer; the shard refuses the instruction (the saga compensates) when that breaks
    the cluster's bounds."""
    shard = shrinking({
        "budgets": [{"machines": "2", "reasons": ["transfer"]}],
        "do_not_disrupt": [{"machine_id": "gpu-0005", "until": TUESDAY_10 + 600}],
    })  # fmt: skip
    book, inv = shard.disruption, shard.inventory
    assert book.refuse_transfer(["gpu-0000", "gpu-0001"], inv, TUESDAY_10) == ""
    assert "allows 2 more machine(s) drained for transfer now, not 3" in book.refuse_transfer(
        ["gpu-0000", "gpu-0001", "gpu-0002"], inv, TUESDAY_10
    )
    assert "gpu-0005 is marked do-not-disrupt" in book.refuse_transfer(["gpu-0005"], inv,
                                                                       TUESDAY_10)  # fmt: skip
    shard.drain_for_transfer(["gpu-0000"], TUESDAY_10)  # (one drains: one more may)
    assert "allows 1 more" in book.refuse_transfer(["gpu-0001", "gpu-0002"], inv, TUESDAY_10)


def test_the_policys_budgets_come_through_a_deployment_file_and_the_shards_config():
    """A deployment's `policy.disruption_budgets` names reasons as strings (YAML), and the
    shard workflow rebuilds its policy from the config's JSON: both read them."""
    import json

    from bigfleet.simulation.scenario import PolicyOverrides

    raw = {"disruption_budgets": [{"machines": "10%", "reasons": ["excess", "preempt"],
                                   "schedule": "@daily", "duration_seconds": 3600}]}  # fmt: skip
    overrides = PolicyOverrides.model_validate(raw)
    sent = json.loads(json.dumps(overrides.model_dump(mode="json", exclude_unset=True)))
    policy = Policy(cycle_seconds=1, **sent)
    assert [r.value for r in policy.disruption_budgets[0].reasons] == ["excess", "preempt"]
    with pytest.raises(ValueError, match="machines"):
        PolicyOverrides.model_validate({"disruption_budgets": [{"machines": "all"}]})


# ---- moves for the fleet's cost keep to the bounds (issue 44, item 5) -----------------------

P5 = "p5.48xlarge"
BARE = {"key": "bigfleet.io/capacity-type", "operator": "In", "values": ["bare-metal"]}


def backfilled(
    priority: int, disruption: dict, *, od: bool = True, count: int = 2, bounded: bool = True
) -> Shard:
    """Research (priority 0, bare metal only) runs on the 4 GPU racks with `disruption`;
    inference asks for `count` at `priority`, which may run on the racks or on on-demand p5
    at $98/h (`od`: for sale). (A cycle may drain 2 of the 4 for cost.)"""
    shard = Shard(0, Policy(consolidation_max_fraction=0.5))
    shard.cost_moves_bounded = bounded
    serving(shard, "research", 4, TUESDAY_10 - 60)
    if od:
        shard.adopt([on_demand(i, price=98.0, instance_type=P5) for i in range(4)], TUESDAY_10)
    research = rollup("research", 1, {**need(4, 0), "requirements": [BARE]})
    research["disruption"] = disruption
    assert shard.receive(research, TUESDAY_10 - 50) is None
    shard.cycle(TUESDAY_10 - 40)
    infer = rollup("infer", 1, need(count, priority, types=("gpu-8xh100", P5)))
    assert shard.receive(infer, TUESDAY_10 - 1) is None
    return shard


ALL_MARKED = {
    "do_not_disrupt": [{"machine_id": f"gpu-{i:04d}", "until": TUESDAY_10 + 86400}
                       for i in range(4)]  # fmt: skip
}
NONE_AT_ONCE = {"budgets": [{"machines": "0"}]}


def created(decision) -> int:
    return sum(len(a.machine_ids) for a in decision.actions if a.kind == "create")


@pytest.mark.parametrize("priority", [900_000, 1_000_000])
@pytest.mark.parametrize("disruption", [ALL_MARKED, NONE_AT_ONCE], ids=["marks", "budget-0"])
def test_a_move_for_cost_keeps_to_marks_and_budgets_and_the_need_buys(priority, disruption):
    """The issue's two scenarios. At 900 000 the engine displaced research for cost, the
    bounds held every drain back, nothing was bought and inference waited (for the mark's
    life, up to 24 h), reported nowhere; at 1 000 000 the drains overrode the marks and a
    budget of "0" with 10 s of grace, though on-demand was for sale. Now inference buys 2
    p5, nothing drains, nothing is held back, and nobody is short."""
    shard = backfilled(priority, disruption)
    decision = shard.cycle(TUESDAY_10)

    assert created(decision) == 2
    assert drained(decision) == [] and decision.cost_moves == {}
    assert decision.shortfalls == []
    assert shard.disruption.view("research", shard.inventory, TUESDAY_10)["held_back"] == {}


@pytest.mark.parametrize("priority", [900_000, 1_000_000])
def test_a_run_begun_before_displaced_bounded_backfill_for_cost(priority):
    """Patch `cost-moves-bounded`: a shard's run begun before decides, on replay, as it did
    (held back and nothing bought at 900 000; the marks overridden at 1 000 000)."""
    decision = backfilled(priority, ALL_MARKED, bounded=False).cycle(TUESDAY_10)
    assert created(decision) == 0
    assert len(drained(decision, "preempt")) == (2 if priority == 1_000_000 else 0)


def test_a_need_waiting_on_machines_held_back_is_a_shortfall_that_says_why():
    """Nothing for sale: inference (900 000, under the override gap) can only preempt
    research's marked machines. The drains are held back, and inference's wait shows as a
    shortfall, cycle after cycle, escalated like any other (before: nothing at all)."""
    shard = backfilled(900_000, ALL_MARKED, od=False)
    decision = shard.cycle(TUESDAY_10)
    assert drained(decision) == []
    [short] = [s for s in decision.shortfalls if s.cluster == "infer"]
    assert (short.count, short.held_back, short.age) == (2, 2, 1)
    # Research keeps what is held back: it is not short (before: short 2, escalated).
    assert [s for s in decision.shortfalls if s.cluster == "research"] == []
    assert short.why == (
        "waiting on 2 machine(s) it preempts that their clusters hold back "
        "(cluster research: 2 marked do-not-disrupt)"
    )
    for cycle in range(1, 6):
        decision = shard.cycle(TUESDAY_10 + 10 * cycle)
    [short] = [s for s in decision.shortfalls if s.cluster == "infer"]
    assert short.age == 6 and short.escalated
    # Once research lifts its marks the preemption drains, and nobody waits on anything held.
    unmarked = rollup("research", 2, {**need(4, 0), "requirements": [BARE]})
    assert shard.receive(unmarked, TUESDAY_10 + 55) is None
    late = shard.cycle(TUESDAY_10 + 60)
    assert len(drained(late, "preempt")) == 2
    assert [s for s in late.shortfalls if s.cluster == "infer"] == []
