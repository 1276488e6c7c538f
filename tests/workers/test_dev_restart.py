"""A restarted `bigfleet dev` (issue 48): its operator's roll-up scripts carry on where they had
got to rather than replay from t = 0, and a second `bigfleet dev` on the same state directory
is refused whatever its ports (it would open the same SQLite files)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from types import SimpleNamespace

from tests.procs import ROOT
from workers.dev.launcher import hold_state_dir
from workers.dev.operators import Operators


def _fleet():
    def rollup(at: float, count: int) -> SimpleNamespace:
        need = SimpleNamespace(count=count, priority=1, model_dump=lambda **_: {"count": count})
        return SimpleNamespace(at=at, needs=[need])

    web = SimpleNamespace(name="web", workload=None,
                          rollups=[rollup(0, 1), rollup(60, 2), rollup(600, 3)])  # fmt: skip
    return SimpleNamespace(clusters=[web], cycle_seconds=30, shards=1)


async def _first_send(clock_file) -> dict:
    sent: list[dict] = []
    stop = asyncio.Event()

    async def send(cluster, rollup):
        sent.append(rollup)
        stop.set()
        return "test"

    ops = Operators(None, _fleet(), send=send, clock_file=clock_file)
    await asyncio.wait_for(ops.run(stop), 30)
    return sent[0]


def test_a_restarted_operator_resumes_its_script_instead_of_replaying_it(tmp_path):
    clock = tmp_path / "operator-clock.json"
    first = asyncio.run(_first_send(clock))
    assert first["needs"] == [{"count": 1}]  # a fresh start begins at t = 0
    assert json.loads(clock.read_text())["elapsed"] < 60
    clock.write_text(json.dumps({"elapsed": 120.0}))  # as a run stopped at t+120s leaves it
    again = asyncio.run(_first_send(clock))
    assert again["needs"] == [{"count": 2}]  # the roll-up in force at t+120s, not t = 0's
    assert json.loads(clock.read_text())["elapsed"] >= 120


def test_a_second_dev_on_the_same_state_directory_is_refused(tmp_path):
    held = hold_state_dir(tmp_path / "state")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "workers.cli", "dev", "--state-dir", str(tmp_path / "state"),
             "--port", "0", "--ui-port", "0", "--metrics-port", "0"],  # fmt: skip
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )
    finally:
        held.close()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "is in use by another `bigfleet dev`" in done.stderr, done.stderr
    assert "--state-dir" in done.stderr
    # Released with its holder: the next one may take it.
    hold_state_dir(tmp_path / "state").close()
