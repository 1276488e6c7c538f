"""`bigfleet bench engine --against REV`: another revision's engine beside this checkout's, in
one process, on the same roll-ups."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bigfleet import bench_against

ROOT = Path(__file__).resolve().parents[2]


def _head() -> str:
    found = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        pytest.skip("not a git checkout: --against reads revisions from git")
    return found.stdout.strip()


def test_both_engines_run_the_same_churn_cycles():
    head = _head()
    result = bench_against.run("HEAD", [2000], cycles=3)
    assert result["against"] == head
    (row,) = result["rows"]
    assert row["machines"] == 2000 and row["cycles"] == 3
    for side in ("base", "this"):
        assert len(row[side]["cycles_cpu_ms"]) == 3
        assert row[side]["churn_cpu_ms"] > 0 and row[side]["churn_wall_ms"] > 0
    assert 0 <= row["this_faster_cycles"] <= 3
    assert head[:12] in bench_against.render(result)
    # The revision's package is its own copy from git, imported beside this one.
    base = sys.modules[f"bigfleet_at_{head[:12]}"]
    assert ROOT not in Path(base.__file__).resolve().parents

def test_an_unknown_revision_is_named_in_the_error():
    _head()
    with pytest.raises(ValueError, match="no-such-revision"):
        bench_against.run("no-such-revision", [2000])


def test_cycles_sets_how_many_churn_cycles_each_engine_runs(capsys):
    _head()
    from bigfleet.cli import main

    assert main(["bench", "engine", "--against", "HEAD", "--sizes", "2000", "--cycles", "4",
                 "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["cycles"] == 4 and len(row["this"]["cycles_cpu_ms"]) == 4


@pytest.mark.parametrize("bad", ["0", "-3", "many"])
def test_cycles_must_be_a_positive_number(capsys, bad):
    from bigfleet.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "engine", "--against", "HEAD", "--cycles", bad])
    assert f"--cycles: expected a positive whole number: {bad!r}" in capsys.readouterr().err
