"""`bench fleet --serving` (workers/bench/fleet.py): the run starts from a fleet that already
serves its clusters. No server needed: the simulated provider alone."""

from __future__ import annotations


def test_serving_starts_from_a_fleet_that_serves_the_first_round():
    """`--serving`: before any shard starts, each cluster's first count is created and
    configured through the simulated provider's own calls (its rate limit included), and
    the provider's counters start again from zero."""
    import argparse
    from collections import Counter

    from bigfleet.models import ListFilter, MachineState, from_wire
    from bigfleet.simulation.scenario import Scenario
    from workers.bench.fleet_load import first_counts, fleet, serve
    from workers.bench.temporal import PROVIDER, cluster_name
    from workers.worker import SimulatedFleet

    args = argparse.Namespace(machines=500, calls_per_second=50, shards=1, clusters=20)
    sim = SimulatedFleet(from_wire(Scenario, fleet(args)))
    provider = sim.providers[PROVIDER]
    serve(provider, sim.clocks[PROVIDER], first_counts(args))
    assert sum(provider.calls.values()) == 0 and provider.rate_limited == 0
    serving = provider.list(ListFilter(states=[MachineState.CONFIGURED]))
    counts = Counter(m.cluster for m in serving)
    assert counts == {cluster_name(i): n for i, n in enumerate(first_counts(args)) if n}
    assert sum(counts.values()) == int(0.7 * args.machines)


def test_a_shard_summary_names_its_longest_intervals_and_the_continues_as_new_in_them():
    from workers.bench.fleet_report import longest

    def sample(t: float, began: float) -> dict:
        return {"t": t, "shards": [{"run_began": began}]}

    samples = [sample(0, -50), sample(10, -50), sample(20, 13), sample(30, 13)]
    ends = {1.0, 2.0, 3.0, 12.0, 19.5, 20.5, 21.0, 29.0, 40.0}  # (40: after the last sample)
    assert longest(ends, samples, 0) == [
        [9.0, 3.0, False],  # 3 → 12: within the first run
        [8.0, 21.0, False],
        [7.5, 12.0, True],  # 12 → 19.5: the second run began at 13
    ]
