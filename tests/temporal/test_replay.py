"""Today's workflow code replays the histories recorded from earlier code (tests/temporal/histories/).

Shards and the coordinator run for days and continue as new with their history since; a worker
on new code replays that history, and code that issues different commands in a different order
fails it with a non-determinism error — the shard is stuck until someone steps in. This test
finds such a change before it is deployed: a change to a workflow that fails here needs a
`workflow.patched` branch (so old histories still replay), or the histories re-recorded and the
deploy done the way docs/temporal.md "Deploying a new version" says.

Recorded by the Temporal tests themselves, per workflow type the longest history each test
left (`record_histories` in conftest.py):

    rm -rf tests/temporal/histories && BIGFLEET_RECORD_HISTORIES=tests/temporal/histories .venv/bin/pytest \
      "tests/temporal/test_temporal_shard.py::test_preemption_walkthrough" \
      "tests/temporal/test_temporal_shard.py::test_continue_as_new_keeps_needs_inventory_and_transitions[snapshot-store]" \
      "tests/temporal/test_temporal_coordinator.py::test_a_refused_adopt_hands_the_machines_back_to_the_donor" \
      "tests/temporal/test_temporal_coordinator.py::test_cross_shard_preemption_drains_on_the_donor_and_configures_on_the_receiver" \
      "tests/temporal/test_temporal_membership.py::test_a_split_keeps_everything_once_and_a_merge_puts_it_back" \
      "tests/temporal/test_shard_restart.py::test_a_reset_shard_keeps_machines_it_adopted_after_its_snapshot" \
      tests/temporal/test_audit.py

The `-mailbox` histories were recorded on 2026-12-06 from test_preemption_walkthrough alone,
when transition results began to travel through the shard's mailbox (workflows/mailbox.py).
"""  # noqa: E501

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workers.worker import RUNNER, SHARD_WORKFLOWS
from workflows.transition import MachineTransitionWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json.gz"))


def test_every_workflow_type_has_a_recorded_history():
    recorded = {p.name.split("--")[-1].removesuffix(".json.gz") for p in HISTORIES}
    types = {w.__temporal_workflow_definition.name for w in SHARD_WORKFLOWS}  # type: ignore[attr-defined]
    assert types | {"MachineTransition"} <= recorded


@pytest.mark.parametrize(
    "path", HISTORIES, ids=[p.name.removesuffix(".json.gz") for p in HISTORIES]
)
async def test_history_replays_on_todays_code(path: Path):
    text = gzip.decompress(path.read_bytes()).decode()
    events = json.loads(text)["events"]
    history = WorkflowHistory.from_json(path.name, text)
    replayer = Replayer(
        workflows=[*SHARD_WORKFLOWS, MachineTransitionWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=RUNNER,
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    failure = result.replay_failure
    assert failure is None, f"{path.name} ({len(events)} events): {failure}"
