"""`bigfleet bench coordinator` (bigfleet/bench_coordinator.py): one planning round on synthetic
reports, timed. What it prints must come from a round that did plan moves."""

from bigfleet.bench_coordinator import render, run


def test_the_bench_times_a_round_that_moves_machines():
    result = run([3], groups=16, profiles=4)
    [row] = result["rows"]
    assert row["shards"] == 3 and row["elastic_groups"] == 48
    assert row["machines_moved"] > 0  # the shortfalls and the elastic spend were answered
    for key in ("plan_ms", "stranded_ms", "summaries_ms", "short_beside_free_ms"):
        assert row[key] >= 0
    text = render(result)
    assert "short ms" in text and "quota moved" in text
