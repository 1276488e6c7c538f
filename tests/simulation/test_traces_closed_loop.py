"""The closed loop (bigfleet/simulation/closed_loop.py): jobs that cannot get machines wait, first
in first out per need, and start later; expectations computed by hand."""

import math
import pathlib

import pytest

from bigfleet import labels
from bigfleet.models import CapacityNeed, NodeSelectorRequirement, Operator
from bigfleet.simulation.closed_loop import ClosedLoop, QueuedJob
from bigfleet.simulation.scenario import WorkloadSpec, load
from bigfleet.simulation.workload import rollups_from_trace

from .test_traces import SERIES, mixed_pods, write
from .test_workload import pod, trace

REPO = pathlib.Path(__file__).resolve().parents[2]


def need(priority: int = 100) -> CapacityNeed:
    requirement = NodeSelectorRequirement(
        key=labels.INSTANCE_TYPE, operator=Operator.IN, values=["cpu-8"]
    )
    return CapacityNeed(requirements=[requirement], priority=priority, count=0)


def job(name, arrival, run, units=1.0, need=0):
    return QueuedJob(name=name, need=need, arrival=arrival, until=arrival + run, units=units)


def sent(loop, t, served):
    """The counts sent at t, or None when nothing changed."""
    needs = loop.needs_at(t, served)
    return None if needs is None else [n.count for n in needs]


def test_a_job_without_capacity_waits_and_its_end_moves_later():
    # One machine fits one unit. a and b arrive at 0, c at 20.
    loop = ClosedLoop([need()], [1.0], [job("a", 0, 100), job("b", 0, 50), job("c", 20, 30)])
    assert sent(loop, 0, [0]) == [2]  # nothing served yet: a and b both wait
    assert sent(loop, 10, [1]) is None  # one machine since t=0: a runs, b waits; still 2
    assert sent(loop, 20, [1]) == [3]  # c queues behind b
    assert sent(loop, 30, [3]) is None  # three since t=20: b starts at 20 (waited 20), c at 20
    assert sent(loop, 60, [3]) == [2]  # c (20..50) is done; b runs 20..70, not 0..50
    assert sent(loop, 70, [3]) == [1]  # b ends at 70, 20 s later than in the trace
    assert sent(loop, 100, [3]) == [0]
    (band,) = loop.waits().values()
    assert band.started == [("a", 0.0), ("b", 20.0), ("c", 0.0)]
    assert band.waiting == []


def test_the_queue_is_first_in_first_out_without_backfilling():
    # Two units per machine, one machine: x needs 3 units and never fits; y (1 unit) would fit
    # but waits behind x.
    loop = ClosedLoop([need()], [2.0], [job("x", 0, 10, units=3), job("y", 5, 10)])
    assert sent(loop, 0, [1]) == [2]  # 3 units on 2-unit machines
    assert sent(loop, 10, [1]) is None  # 4 units: still 2 machines
    (band,) = loop.waits().values()
    assert band.started == []
    assert band.waiting == [("x", 10.0), ("y", 5.0)]
    # 4 units fit on 2 machines from t=10: both start at 10, run their 10 s and end at 20.
    assert sent(loop, 20, [2]) == [0]
    assert loop.waits()[100].started == [("x", 10.0), ("y", 5.0)]


def test_an_end_frees_room_for_an_arrival_at_the_same_second():
    loop = ClosedLoop([need()], [1.0], [job("a", 0, 10), job("b", 10, 10)])
    assert sent(loop, 0, [0]) == [1]
    assert sent(loop, 10, [1]) is None  # a ran 0..10; b arrives at 10 into the freed machine
    assert loop.waits()[100].started == [("a", 0.0), ("b", 0.0)]


def test_a_job_starts_mid_interval_when_a_running_one_ends():
    loop = ClosedLoop([need()], [1.0], [job("a", 0, 15), job("b", 3, 10)])
    assert sent(loop, 0, [1]) == [1]
    assert sent(loop, 10, [1]) == [2]  # b arrived at 3 and waits for a
    assert sent(loop, 20, [1]) == [1]  # a ended at 15, b started then (waited 12), ends 25
    assert sent(loop, 30, [1]) == [0]
    assert loop.waits()[100].started == [("a", 0.0), ("b", 12.0)]


def test_waits_are_reported_per_priority_band_and_queues_are_per_need():
    needs = [need(1000), need(10), need(10)]
    jobs = [job("hi", 0, 100, need=0), job("lo", 0, 100, need=1), job("lo2", 0, 100, need=2)]
    loop = ClosedLoop(needs, [1.0, 1.0, 1.0], jobs)
    assert sent(loop, 0, [0, 0, 0]) == [1, 1, 1]
    loop.needs_at(30, [1, 0, 1])
    waits = loop.waits()
    assert sorted(waits) == [10, 1000]
    assert waits[1000].started == [("hi", 0.0)] and waits[1000].waiting == []
    assert waits[10].started == [("lo2", 0.0)] and waits[10].waiting == [("lo", 30.0)]


def test_a_job_outliving_the_trace_runs_to_the_end():
    loop = ClosedLoop([need()], [1.0], [job("forever", 0, math.inf)])
    assert sent(loop, 0, [0]) == [1]
    assert sent(loop, 50, [1]) is None
    assert sent(loop, 10**6, [1]) is None


def test_bad_calls_are_refused():
    loop = ClosedLoop([need()], [1.0], [job("a", 0, 10)])
    with pytest.raises(ValueError, match="served has 2 entries, there are 1 needs"):
        loop.needs_at(0, [1, 1])
    loop.needs_at(10, [1])
    with pytest.raises(ValueError, match=r"needs_at\(5\) is before the previous call \(10"):
        loop.needs_at(5, [1])
    with pytest.raises(ValueError, match="job z: need 3 is not one of 1"):
        ClosedLoop([need()], [1.0], [job("z", 0, 10, need=3)])


# ---- from a trace ---------------------------------------------------------------------------


def _counts_per_cycle(loop, cycles, cycle, served):
    out, last = [], None
    for k in range(cycles):
        needs = loop.needs_at(k * cycle, served(len(loop.needs)))
        last = needs if needs is not None else last
        out.append({(n.priority, n.requirements[0].values[0]): n.count for n in last if n.count})
    return out


def _open_loop_per_cycle(rollups, cycles, cycle):
    out, i, current = [], 0, []
    for k in range(cycles):
        while i < len(rollups) and rollups[i][0] <= k * cycle:
            current = rollups[i][1]
            i += 1
        out.append({(n.priority, n.requirements[0].values[0]): n.count for n in current if n.count})
    return out


def test_with_capacity_to_spare_the_closed_loop_asks_what_the_open_loop_asks(tmp_path):
    path = mixed_pods(tmp_path)
    spec = WorkloadSpec(trace=path, start=0.0, time_scale=2.0)
    loop = ClosedLoop.from_spec(spec)
    assert [n.priority for n in loop.needs] == [1_000_000, 900_000, 500_000, 0]
    closed = _counts_per_cycle(loop, 31, 10, lambda n: [10**6] * n)
    assert closed == _open_loop_per_cycle(rollups_from_trace(spec, 10, 300), 31, 10)
    assert all(w == 0 for band in loop.waits().values() for _, w in band.started)


def test_from_a_trace_a_starved_job_waits_in_simulated_seconds(tmp_path):
    # Two 8-GPU pods at trace second 0 for 100 s, one 8-GPU machine, time_scale 10: the second
    # pod starts when the first ends, at simulated second 10.
    path = trace(
        tmp_path,
        pod("first", gpus=8, gpu_milli=1000, created=0, deleted=100),
        pod("second", gpus=8, gpu_milli=1000, created=0, deleted=100),
    )
    loop = ClosedLoop.from_spec(WorkloadSpec(trace=path, start=0.0, time_scale=10.0))
    assert _counts_per_cycle(loop, 4, 5, lambda n: [1]) == [
        {(900_000, "gpu-8xh100"): 2},
        {(900_000, "gpu-8xh100"): 2},
        {(900_000, "gpu-8xh100"): 1},
        {(900_000, "gpu-8xh100"): 1},
    ]
    assert loop.waits()[900_000].started == [("first", 0.0), ("second", 10.0)]


def test_a_time_series_cannot_be_replayed_closed_loop(tmp_path):
    mapping = write(tmp_path, "s.yaml", SERIES.replace("COUNTS", "machines"))
    data = write(tmp_path, "s.csv", "minute,vc,tier,running,pending\n1,a,prod,1,0\n")
    with pytest.raises(ValueError, match="closed_loop: needs a job log"):
        ClosedLoop.from_spec(WorkloadSpec(trace=data, mapping=mapping))


def test_on_the_alibaba_trace_spare_capacity_reproduces_the_open_loop():
    scenario = load(REPO / "examples" / "alibaba-gpu-replay.yaml")
    cluster = scenario.clusters[0].workload
    if not pathlib.Path(cluster.trace).exists():
        pytest.skip(f"shared Alibaba trace not checked out beside the repo: {cluster.trace}")
    cycles = int(scenario.duration_seconds / scenario.cycle_seconds) + 1
    loop = ClosedLoop.from_spec(cluster)
    closed = _counts_per_cycle(loop, cycles, scenario.cycle_seconds, lambda n: [10**6] * n)
    rollups = rollups_from_trace(cluster, scenario.cycle_seconds, scenario.duration_seconds)
    assert closed == _open_loop_per_cycle(rollups, cycles, scenario.cycle_seconds)
