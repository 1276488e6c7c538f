"""`bigfleet bench engine --phases`: each part of the fast engine's cycle, by name, beside the
cycle times (numbers printed, never asserted against a time)."""

import json

from bigfleet.cli import main
from bigfleet.engine import FastEngine
from bigfleet.inventory import Inventory
from bigfleet.policy import Policy

PARTS = [
    "claims",
    "phase 1",
    "phase 2",
    "consolidation",
    "shortfalls and forecast",
    "row picking",
    "assignments' actions",
    "preemptions' actions",
    "phase 3",
    "upkeep",
    "apply",
]


def test_phases_name_every_part_of_the_churn_and_arrival_cycles(capsys):
    assert main(["bench", "engine", "--sizes", "3000", "--reference-max", "0", "--phases",
                 "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    phases = row["fast"]["phases"]
    assert list(phases) == PARTS
    assert all(t["churn_ms"] >= 0 and t["arrival_ms"] >= 0 for t in phases.values())
    assert phases["claims"]["arrival_ms"] > 0 and phases["apply"]["churn_ms"] > 0


def test_phases_table_follows_the_cycle_table(capsys):
    assert main(["bench", "engine", "--sizes", "3000", "--reference-max", "0", "--phases"]) == 0
    text = capsys.readouterr().out
    table = text[text.index("part of the cycle at 3,000 machines") :].splitlines()
    assert [line[:42].strip() for line in table[2:-1]] == PARTS
    assert table[-1].startswith("sum (churn: of the medians)")


def test_without_phases_the_clock_stays_off(capsys):
    engine = FastEngine(Inventory(capacity=8), Policy())
    engine.decide([], 0.0)
    engine.apply(engine.decide([], 10.0), 10.0)
    assert engine.clock.on is False and engine.clock.take() == {}
    assert main(["bench", "engine", "--sizes", "3000", "--reference-max", "0", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert "phases" not in row["fast"]
