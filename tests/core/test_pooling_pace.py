"""A coordinator round's plan in steps (issue 45; bigfleet/pooling/pace.py): a workflow task
must end within the SDK's 2 s deadlock bound, and a round of 100 shards plans for longer than
that on a busy core, so `Coordinator.plan_steps` stops after each step of work. The steps give
the moves the plan gives at once; a small fleet's round is one step."""

from bigfleet.bench_coordinator import _reports
from bigfleet.coordinator import Coordinator
from bigfleet.pooling.pace import STEP_WORK, Pace


def coordinator(shards: int, groups: int) -> Coordinator:
    c = Coordinator(term=1)
    for r in _reports(shards, groups, 5, 7):
        c.receive(r, 0.0)
    return c


def moves(found: list) -> list[tuple]:
    return [
        (m.kind, m.donor, m.receiver, tuple(m.machine_ids), m.priority, m.reason)
        for m in found
    ]


def test_a_step_is_a_share_of_the_work_by_the_shards_reporting() -> None:
    """100 shards: a step every 50 shortfalls, elastic groups or machines moved; 3 shards:
    every 1 666; a fleet larger than the work of a step still moves on after each one.
    Machines moved (`add`) end a step at the next place the plan may stop (`tick`)."""
    assert Pace(100).every == STEP_WORK // 100 == 50
    assert Pace(3).every == 1_666
    assert Pace(10 * STEP_WORK).every == 1
    pace = Pace(2, work=4)  # (every 2nd)
    assert [pace.tick() for _ in range(5)] == [False, True, False, True, False]
    pace.add(5)
    assert pace.tick() and not pace.tick()
    assert pace.steps == 4


def test_the_plan_in_steps_gives_the_moves_of_the_plan_at_once() -> None:
    """40 shards of 16 elastic groups each (a shortfall every tenth): stepping every 20 looks
    at the reports (one shortfall or group a step) takes many steps and ends with the moves,
    machine for machine, that one call plans."""
    at_once = coordinator(40, 16).plan()
    c = coordinator(40, 16)
    pace = Pace(40, work=40)
    steps = c.plan_steps(pace=pace)
    yielded = 0
    while True:
        try:
            next(steps)
            yielded += 1
        except StopIteration as done:
            in_steps = done.value
            break
    assert at_once and moves(in_steps) == moves(at_once)
    assert yielded == pace.steps - 1 and yielded > 100, yielded


def test_a_small_fleets_round_is_one_step() -> None:
    """4 shards at the default step: the whole round in one step, as before steps."""
    c = coordinator(4, 16)
    pace = Pace(len(c.reports))
    steps = c.plan_steps(pace=pace)
    try:
        next(steps)
        raise AssertionError("a small fleet's plan stopped for a step")
    except StopIteration as done:
        assert done.value
    assert pace.steps == 1
