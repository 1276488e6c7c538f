"""The payload bounds BigFleet starts its Temporal servers with (issues 30 and 44): `bigfleet
dev`'s dev server, docker-compose's and what deploy/README.md asks of a platform team agree;
they sit well below the 1.5 MB signals of issue 44's flood, and above every payload BigFleet
itself sends or accepts (a payload of its own refused by the server would fail the workflow
task that sent it). Read, not run: the server's side is in tests/temporal/test_history_flood.py.
The limit and the bounds fail on 2e880d5 (2 000 000 bytes; handlers took 1.9 MB)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from bigfleet.coordinator import ASSIGNMENT_BYTES, MAX_ASKED
from bigfleet.inputs import SIGNAL_BYTES, UPDATE_BYTES
from bigfleet.models import ListFilter, MachineState, from_wire
from bigfleet.simulation.scenario import Scenario
from bigfleet.snapshot import INLINE_BYTES
from workers.dev.server import BLOB_ERROR_BYTES, BLOB_LIMITS, BLOB_WARN_BYTES, server_command
from workers.routing import SEND_BATCH_BYTES
from workers.worker import SimulatedFleet
from workflows.coordinator import REPORT_BYTES
from workflows.instruction_steps import RECORDS_MAX
from workflows.mailbox import PENDING_BYTES, TAKE_BYTES
from workflows.outbox import START_BATCH_BYTES
from workflows.shard import EARLY_ROLLUP_BYTES, ROLLUPS_BYTES
from workflows.shard_carry import LATE_INLINE_BYTES

ROOT = Path(__file__).resolve().parents[2]
ENCODING = 100_000  # a payload's metadata and JSON framing, generously
RECORD_BYTES = 650  # a machine record as JSON, at most (with a cluster and an error)


def test_the_dev_server_starts_with_the_blob_limits(tmp_path):
    cmd = server_command(Path("temporal"), 7233, 8233, tmp_path / "temporal.db")
    values = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--dynamic-config-value"]
    assert f"limit.blobSize.error={BLOB_ERROR_BYTES}" in values
    assert f"limit.blobSize.warn={BLOB_WARN_BYTES}" in values
    assert all(a in cmd for a in BLOB_LIMITS)


def test_docker_compose_and_the_deploy_readme_set_the_same_limits():
    config = yaml.safe_load((ROOT / "deploy" / "compose" / "dynamicconfig.yaml").read_text())
    assert config["limit.blobSize.error"] == [{"value": BLOB_ERROR_BYTES, "constraints": {}}]
    assert config["limit.blobSize.warn"] == [{"value": BLOB_WARN_BYTES, "constraints": {}}]
    temporal = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["temporal"]
    path = temporal["environment"]["DYNAMIC_CONFIG_FILE_PATH"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in temporal["volumes"]}
    assert mounted["/etc/temporal/" + path] == "./deploy/compose/dynamicconfig.yaml"
    readme = (ROOT / "deploy" / "README.md").read_text()
    section = readme[readme.index("### Temporal's dynamic config") :]
    assert re.search(rf"limit\.blobSize\.error:.*\n\s+- value: {BLOB_ERROR_BYTES}\n", section)
    assert re.search(rf"limit\.blobSize\.warn:.*\n\s+- value: {BLOB_WARN_BYTES}\n", section)


def test_the_limit_is_well_below_the_floods_signals():
    """Issue 44: 36 signals of 1.5 MB ended the coordinator's run. The server now refuses any
    payload over 600 KB: a flood that ends a run at 50 MB takes 84 of the largest it takes."""
    assert BLOB_ERROR_BYTES <= 600_000 < 1_500_000
    assert 50_000_000 // BLOB_ERROR_BYTES >= 80


def test_every_payload_bigfleet_accepts_fits_under_the_error_limit():
    # The arguments BigFleet's handlers accept at most (what its own senders may send).
    for ceiling in (ROLLUPS_BYTES, UPDATE_BYTES, REPORT_BYTES, SIGNAL_BYTES):
        assert ceiling + ENCODING <= BLOB_ERROR_BYTES
    # Continue-as-new inputs: a shard's state inline with the roll-ups waiting beside it (the
    # two together at most INLINE_BYTES, else the snapshot store), or the reference with what
    # came late; a mailbox's results; the coordinator's map (its sagas beside it: ~20 KB each).
    assert INLINE_BYTES + ENCODING <= BLOB_ERROR_BYTES
    assert LATE_INLINE_BYTES + ENCODING <= BLOB_ERROR_BYTES
    assert EARLY_ROLLUP_BYTES > SIGNAL_BYTES  # (one roll-up of the largest waits, in the store)
    assert PENDING_BYTES + ENCODING <= BLOB_ERROR_BYTES
    assert ASSIGNMENT_BYTES + ENCODING + 10 * RECORDS_MAX * 30 <= BLOB_ERROR_BYTES
    assert MAX_ASKED * 253 <= UPDATE_BYTES  # (a shard's question about its new clusters)


def test_what_bigfleet_sends_in_normal_operation_stays_under_the_warning():
    sim = SimulatedFleet(from_wire(Scenario, yaml.safe_load(
        (ROOT / "examples" / "dev-fleet.yaml").read_text()
    )))
    records = [m for p in sim.providers.values() for m in p.list(ListFilter())]
    worst = max(
        len(
            m.model_copy(
                update={"state": MachineState.CONFIGURED, "cluster": "ci-runners-eu-west"}
            ).model_dump_json()
        )
        for m in records
    )
    assert worst <= RECORD_BYTES - 30  # (room for a longer cluster name or an error)
    # A saga's `release` answer of RECORDS_MAX records, the largest; then the rest.
    sent = [RECORDS_MAX * RECORD_BYTES, SEND_BATCH_BYTES, ASSIGNMENT_BYTES, INLINE_BYTES,
            START_BATCH_BYTES, TAKE_BYTES, PENDING_BYTES, LATE_INLINE_BYTES]
    assert max(sent) + ENCODING <= BLOB_WARN_BYTES < BLOB_ERROR_BYTES
