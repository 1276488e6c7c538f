"""The `bigfleet` command line (workers/cli.py), without a Temporal server.

Bad arguments and bad files exit 2 with a message naming what is wrong, before anything connects;
the offline verbs of bigfleet.cli stay reachable; the dev server and docker-compose register the
search attributes the workflows use; each verbs module registers its own verbs, and the command
line loads no Temporal until a verb runs; workers that started are stopped when another fails to.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import re

import pytest
import yaml

import workers.args
import workers.connect
from activities.wire import SEARCH_ATTRIBUTES
from bigfleet.simulation.scenario import load
from workers import cli
from workers.args import roles
from workers.cli import main
from workers.process import search_attribute_commands, search_attribute_type
from workers.verbs.machine import machine_query
from workers.verbs.rollup import load_rollup
from workers.verbs.status import render_cluster, render_coordinator, render_status

ROOT = pathlib.Path(__file__).resolve().parents[2]
GPU = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["gpu-8xh100"]}]


@pytest.fixture
def no_server(monkeypatch):
    """Any attempt to reach Temporal fails the test."""

    async def refuse(*args, **kwargs):
        raise AssertionError("connected to Temporal, but the input was bad")

    monkeypatch.setattr(workers.connect, "connect", refuse)


def usage_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def rollup(**changes) -> dict:
    raw = {
        "cluster": "a",
        "generation": 7,
        "needs": [{"requirements": GPU, "priority": 500000, "count": 8}],
    }
    raw.update(changes)
    return raw


# ---- arguments --------------------------------------------------------------------------------


def test_roles_are_the_workers_roles():
    from workers.worker import ROLES

    assert workers.args.ROLES == ROLES


def test_role_list_parses_in_canonical_order():
    assert roles("providers, shards,providers") == ["shards", "providers"]


def test_unknown_role_fails_clearly(capsys):
    err = usage_error(capsys, ["worker", "--fleet", "f.yaml", "--role", "shards,scheduler"])
    assert "--role" in err
    assert "'scheduler'" in err
    assert "shards, transitions, providers" in err


def test_empty_role_list_fails(capsys):
    assert "--role" in usage_error(capsys, ["worker", "--fleet", "f.yaml", "--role", ","])


def test_worker_needs_a_fleet(capsys):
    assert "--fleet" in usage_error(capsys, ["worker"])


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_drain_grace_must_be_seconds(capsys, value):
    err = usage_error(capsys, ["drain", "escalate", "m-1", "--grace", value])
    assert "--grace" in err


def test_drain_needs_a_grace(capsys):
    assert "--grace" in usage_error(capsys, ["drain", "escalate", "m-1"])


def test_machine_id_with_a_quote_is_refused(capsys):
    err = usage_error(capsys, ["machine", "history", 'm-1" OR "x'])
    assert "MACHINE_ID" in err


@pytest.mark.parametrize(
    "argv, name",
    [
        (["status", "--shard", "-1"], "--shard"),
        (["status", "--shard", "one"], "--shard"),
        (["cluster", "a", "--shards", "0"], "--shards"),
        (["dev", "--port", "70000"], "--port"),
        (["dev", "--ui-port", "http"], "--ui-port"),
        (["worker", "--fleet", "f.yaml", "--metrics-port", "-5"], "--metrics-port"),
        (["rollup", "send"], "FILE"),
        (["shard", "merge", "1"], "--into"),
        (["shard", "split", "x"], "N"),
        (["decommission", "--provider", "dc", "--count", "many"], "--count"),
    ],
)
def test_bad_numbers_and_missing_arguments_name_the_argument(capsys, argv, name):
    assert name in usage_error(capsys, argv)


def test_a_bad_decommission_names_the_field_before_connecting(capsys):
    argv = ["decommission", "--provider", "dc", "--count", "0", "--address", "127.0.0.1:1"]
    assert main(argv) == 2
    assert "count: Input should be greater than 0" in capsys.readouterr().err


def test_machine_query_names_the_machine():
    assert machine_query("m-1") == 'BigFleetMachineIds = "m-1"'
    assert machine_query("m-1", 'ExecutionStatus = "Running"') == (
        'BigFleetMachineIds = "m-1" AND ExecutionStatus = "Running"'
    )


def test_the_temporal_verbs_are_those_the_verbs_modules_register():
    import argparse

    verbs = argparse.ArgumentParser().add_subparsers()
    for register in cli.REGISTRATIONS:
        register(verbs)
    assert tuple(verbs.choices) == cli.TEMPORAL_VERBS


def test_each_verb_is_listed_as_its_module_registers_it():
    """The table's line for a verb (shown before its module is imported) is the module's own."""
    import argparse

    for table in (cli.VERBS, cli.OFFLINE_VERBS, cli.BENCH_VERBS):
        for verb, module, help in table:
            verbs = argparse.ArgumentParser().add_subparsers()
            cli.register_module(module, verbs)
            listed = {a.dest: a.help for a in verbs._choices_actions}
            assert listed.get(verb) == help, (verb, module)


def test_choosing_a_verb_imports_its_module_only():
    import subprocess
    import sys

    code = (
        "import sys, workers.cli\n"
        "workers.cli.parser().parse_args(['config', 'check', 'x.yaml'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('workers.verbs.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['workers.verbs.config']"


def test_no_import_cycle_among_the_modules_of_workers():
    import ast

    modules = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (ROOT / "workers").rglob("*.py")
    }
    graph = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps |= {node.module} & modules.keys()
                deps |= {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
        graph[name] = deps
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path, name))
        if name in done:
            return
        for dep in graph[name]:
            visit(dep, (*path, name))
        done.add(name)

    for name in graph:
        visit(name, ())


def test_the_command_line_loads_no_temporal_until_a_verb_runs():
    import subprocess
    import sys

    code = (
        "import sys, workers.cli\n"
        "workers.cli.parser()\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'temporalio', 'pydantic'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_module_imports_a_private_name_of_a_workers_module():
    import ast

    offenders = []
    for path in [*(ROOT / "workers").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and (node.module or "").split(".")[0] == "workers"
                and any(a.name.startswith("_") for a in node.names)
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.module}")
    assert offenders == []


# ---- roll-up files ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, field",
    [
        (rollup(needs=[{"requirements": GPU, "priority": 1, "count": -1}]), "needs.0.count"),
        (rollup(needs=[{"requirements": GPU, "priority": 2**31, "count": 1}]), "priority"),
        (
            rollup(
                needs=[
                    {"requirements": [{"key": "k", "operator": "Like"}], "priority": 1, "count": 1}
                ]
            ),
            "operator",
        ),
        (rollup(needs=[{"priority": 1, "count": "5"}]), "needs.0.count"),
        (rollup(generation=-1), "generation"),
        (rollup(cluster=""), "cluster"),
        (rollup(colour="blue"), "colour"),
        ({"generation": 1, "needs": []}, "cluster"),
    ],
)
def test_malformed_rollup_exits_2_naming_the_field_before_connecting(
    tmp_path, capsys, no_server, raw, field
):
    path = tmp_path / "rollup.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["rollup", "send", str(path), "--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "invalid roll-up" in err
    assert field in err


def test_json_rollup_is_read_too(tmp_path):
    path = tmp_path / "rollup.json"
    path.write_text(json.dumps(rollup()))
    assert load_rollup(str(path)).needs[0].count == 8


def test_rollup_without_generation_gets_a_rising_one(tmp_path):
    path = tmp_path / "rollup.yaml"
    raw = rollup()
    del raw["generation"]
    path.write_text(yaml.safe_dump(raw))
    first = load_rollup(str(path)).generation
    assert first > 1_600_000_000_000  # milliseconds since the epoch
    assert load_rollup(str(path)).generation >= first


@pytest.mark.parametrize(
    "text, words",
    [
        ("- just\n- a list\n", "mapping"),
        ("cluster: [unclosed\n", "not valid JSON or YAML"),
    ],
)
def test_rollup_file_that_is_not_a_rollup(tmp_path, capsys, no_server, text, words):
    path = tmp_path / "rollup.yaml"
    path.write_text(text)
    assert main(["rollup", "send", str(path)]) == 2
    assert words in capsys.readouterr().err


def test_missing_rollup_file(tmp_path, capsys, no_server):
    assert main(["rollup", "send", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_worker_with_a_bad_fleet_exits_2_before_connecting(tmp_path, capsys, no_server):
    path = tmp_path / "fleet.yaml"
    path.write_text("name: f\nduration_seconds: 10\nproviders: []\nclusters: [{name: ''}]\n")
    assert main(["worker", "--fleet", str(path), "--metrics-port", "0"]) == 2
    assert "clusters.0.name" in capsys.readouterr().err


# ---- the offline verbs still work -------------------------------------------------------------


def test_simulate_is_reachable(capsys):
    assert main(["simulate", str(ROOT / "examples/preemption-walkthrough.yaml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"] == "preemption-walkthrough"


def test_simulate_bad_scenario_exits_2(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\n")
    assert main(["simulate", str(path)]) == 2
    assert "duration_seconds" in capsys.readouterr().err


def test_bench_is_reachable(monkeypatch, capsys):
    import bigfleet.bench

    monkeypatch.setattr(bigfleet.bench, "run", lambda sizes, ref, seed, phases: {"rows": sizes})
    assert main(["bench", "engine", "--sizes", "300", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"rows": [300]}


def test_bench_bad_sizes_exit_2(capsys):
    assert "--sizes" in usage_error(capsys, ["bench", "engine", "--sizes", "lots"])


# ---- text output ------------------------------------------------------------------------------


def test_status_text():
    text = render_status(
        {
            "shard": 1,
            "epoch": 5,
            "cycles": 3,
            "last_cycle_ms": 0.4,
            "coordinator_term": 0,
            "machines": {"SPECULATIVE": 0, "CONFIGURED": 8, "DRAINING": 2},
            "clusters": ["a", "b"],
            "needs": 2,
            "shortfalls": [
                {
                    "cluster": "a",
                    "requirements": GPU,
                    "priority": 500000,
                    "count": 4,
                    "age": 6,
                    "escalated": True,
                },
                {
                    "cluster": "b",
                    "requirements": GPU,
                    "priority": 100,
                    "count": 2,
                    "age": 1,
                    "why": "no machine of this shard carries label key example.com/room "
                    "(same or spread)",
                },
            ],
            "rejections": ["roll-up from cluster c rejected: needs.0.count: bad"],
            "failures": [
                {"at": 3600.0, "error": "reconciling with the providers: machines.3.state: bad"}
            ],
        }
    )
    assert "shard-1" in text
    assert "01:00:00Z reconciling with the providers: machines.3.state: bad" in text
    assert "CONFIGURED 8, DRAINING 2" in text and "SPECULATIVE" not in text
    assert "a: 4 × instance-type In [gpu-8xh100] at priority 500000" in text
    assert "ESCALATED" in text
    assert "at priority 100, 1 cycle(s): no machine of this shard carries label key" in text
    assert "needs.0.count" in text


def test_cluster_text():
    text = render_cluster(
        {
            "shard": 0,
            "cluster": "a",
            "needs": [
                {"requirements": GPU, "priority": 9, "count": 3, "interruption_penalty": 5.0}
            ],
            "upcoming": [{"machine": "m-1", "instance_type": "gpu-8xh100"}],
            "reclaims": [{"machine": "m-2", "grace_seconds": 30.0}],
            "available": {"gpu-8xh100": 4},
        }
    )
    assert "cluster a (shard-0)" in text
    assert "3 × instance-type In [gpu-8xh100] at priority 9 (interruption penalty 5)" in text
    assert "m-2 grace 30 s" in text
    assert "gpu-8xh100 4" in text


# ---- search attributes: dev server, docker-compose, the fix-it hint ---------------------------


def test_dev_server_registers_every_search_attribute_with_its_type(tmp_path):
    from workers.dev.server import server_command

    cmd = server_command(pathlib.Path("temporal"), 7233, 8233, tmp_path / "temporal.db")
    pairs = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--search-attribute"]
    assert pairs == [f"{k.name}={search_attribute_type(k)}" for k in SEARCH_ATTRIBUTES]
    assert "BigFleetMachineIds=KeywordList" in pairs
    assert cmd[cmd.index("--db-filename") + 1] == str(tmp_path / "temporal.db")
    assert "journal_mode=wal" in cmd


def test_fix_it_commands_register_one_attribute_each():
    # Given several --name flags, the temporal CLI registers only the first.
    commands = search_attribute_commands(SEARCH_ATTRIBUTES, "prod")
    assert len(commands) == len(SEARCH_ATTRIBUTES)
    for key, command in zip(SEARCH_ATTRIBUTES, commands, strict=True):
        words = command.split()
        assert words.count("--name") == 1 and words.count("--type") == 1
        assert words[words.index("--name") + 1] == key.name
        assert words[words.index("--type") + 1] == search_attribute_type(key)
        assert words[words.index("--namespace") + 1] == "prod"


def test_docker_compose_registers_the_same_search_attributes():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    script = compose["services"]["register-search-attributes"]["command"][0]
    registered = dict(re.findall(r"\b(BigFleet\w+)=(\w+)\b", script))
    assert registered == {k.name: search_attribute_type(k) for k in SEARCH_ATTRIBUTES}
    assert '--name "$${attribute%%=*}" --type "$${attribute#*=}"' in script
    for role in ("shards", "transitions", "providers"):  # more in tests/workers/test_compose.py
        worker = compose["services"][f"worker-{role}"]
        assert worker["command"][:5] == [
            "worker", "--config", "/etc/bigfleet/deployment.yaml", "--role", role
        ]
        assert worker["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"


# ---- the dev fleet and the dev operators ------------------------------------------------------


class _Handle:
    def __init__(self, sent: list, wid: str) -> None:
        self.sent, self.wid = sent, wid

    async def signal(self, name, arg):
        self.sent.append((self.wid, name, arg))


class _Client:
    """Stands in for the Temporal client of the operators (this test is about the operators'
    timing, not Temporal): the coordinator assigns every cluster to shard 1."""

    def __init__(self) -> None:
        self.sent: list = []
        self.asked: list = []

    def get_workflow_handle(self, wid):
        return _Handle(self.sent, wid)

    async def execute_update_with_start_workflow(self, update, cluster, **kw):
        self.asked.append(cluster)
        return 1


def test_dev_operators_send_rollups_in_order_with_rising_generations(tmp_path):
    from workers.dev.operators import Operators

    path = tmp_path / "fleet.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "f",
                "cycle_seconds": 0.05,
                "duration_seconds": 1,
                "shards": 2,
                "providers": [
                    {
                        "name": "dc",
                        "kind": "bare-metal",
                        "racks": [
                            {"rack": "r1", "zone": "z-1", "instance_type": "gpu-8xh100", "count": 2}
                        ],
                    }
                ],
                "clusters": [
                    {
                        "name": "a",
                        "rollups": [
                            {"at": 0, "needs": [{"requirements": GPU, "priority": 1, "count": 2}]},
                            {"at": 0.2, "needs": []},
                        ],
                    },
                    {"name": "quiet"},
                ],
            }
        )
    )
    fleet = load(path)
    client = _Client()

    async def play() -> None:
        stop = asyncio.Event()
        ops = Operators(client, fleet)
        task = asyncio.create_task(ops.run(stop))
        while not any(not r["needs"] for _, _, batch in client.sent for r in batch):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.12)
        stop.set()
        await task

    asyncio.run(asyncio.wait_for(play(), 10))
    # Asked once, with what its needs want (issue 45), then signalled directly.
    [ask] = client.asked
    assert (ask.cluster, [[r.values for r in w] for w in ask.wants]) == ("a", [[["gpu-8xh100"]]])
    assert {wid for wid, _, _ in client.sent} == {"shard-1"}
    assert {name for _, name, _ in client.sent} == {"rollups"}  # batched per shard
    rollups = [r for _, _, batch in client.sent for r in batch]
    assert all(r["cluster"] == "a" for r in rollups)
    generations = [r["generation"] for r in rollups]
    assert generations == sorted(set(generations))  # strictly rising
    counts = [len(r["needs"]) for r in rollups]
    first_empty = counts.index(0)
    assert (
        first_empty >= 1 and set(counts[:first_empty]) == {1} and set(counts[first_empty:]) == {0}
    )
    assert len(counts) - first_empty >= 2  # the latest is re-sent every cycle


def test_dev_logs_a_failed_activity_attempt_in_one_line():
    import logging

    from workers.dev.progress import one_line

    try:
        raise RuntimeError("configure throttled")
    except RuntimeError:
        import sys

        record = logging.LogRecord(
            "temporalio.activity",
            logging.WARNING,
            __file__,
            1,
            "Completing %s as failed",
            ("activity",),
            sys.exc_info(),
        )
    assert one_line(record)
    assert record.exc_info is None
    assert record.getMessage() == (
        "Completing activity as failed: RuntimeError: configure throttled"
    )


def test_the_coordinators_status_names_escalations_and_fleet_wide_shortfalls():
    text = render_coordinator(
        {
            "term": 5,
            "shards": [0, 1],
            "sagas_running": ["saga-idle-5-1"],
            "missing_shards": [1],
            "escalations": [{"cluster": "train", "priority": 1_000_000, "count": 4}],
            "shared_shortfalls": ["dc/gpu-8xh100/ams-1/bare-metal"],
            "membership": ["merge-1-0-5-40"],
            "retiring": [1],
        }
    )
    assert "missing shards:    [1]" in text
    assert "split/merge:       merge-1-0-5-40" in text and "retiring shards:   [1]" in text
    assert "train (1000000, 4)" in text
    assert "dc/gpu-8xh100/ams-1/bare-metal (time to buy capacity)" in text
    assert "pool" not in text  # (a coordinator from before issue 45)


def test_the_coordinators_status_names_elastic_machines_beside_idle_owned_ones():
    base = {"term": 5, "shards": [0, 1], "sagas_running": [], "missing_shards": []}
    base |= {"escalations": [], "shared_shortfalls": []}
    by_profile = {f"dc/gpu-{i}/ams-1/bare-metal": i for i in range(1, 8)}
    pool = {"elastic_beside_idle_owned": 28, "by_profile": by_profile}
    text = render_coordinator({**base, "pool": {**pool, "moved_for_cost_last_hour": 30}})
    assert (
        "pool:              28 elastic machine(s) run beside idle owned ones in another shard "
        "(dc/gpu-7/ams-1/bare-metal: 7, dc/gpu-6/ams-1/bare-metal: 6, "
        "dc/gpu-5/ams-1/bare-metal: 5, dc/gpu-4/ams-1/bare-metal: 4, "
        "dc/gpu-3/ams-1/bare-metal: 3, … 2 more); moved for cost this hour: 30"
    ) in text
    none = {"elastic_beside_idle_owned": 0, "by_profile": {}, "moved_for_cost_last_hour": 0}
    quiet = "pool:              no elastic machine runs beside idle owned ones; moved for cost "
    assert quiet + "this hour: 0" in render_coordinator({**base, "pool": none})


# ---- `bigfleet worker`: starting and stopping its workers -------------------------------------


class _FakeWorker:
    """Stands in for temporalio.worker.Worker (these tests are about starting and stopping a
    set of workers, not about Temporal): it logs its start and stop, and may fail to start."""

    def __init__(self, name: str, log: list, fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    async def __aenter__(self):
        if self.fail:
            raise RuntimeError(f"{self.name}: cannot start")
        self.log.append(("started", self.name))
        return self

    async def __aexit__(self, *exc) -> None:
        self.log.append(("stopped", self.name))


def test_a_worker_that_fails_to_start_stops_those_already_started():
    from workers.worker import run_workers

    log: list = []
    workers = [
        _FakeWorker("shards", log),
        _FakeWorker("transitions", log),
        _FakeWorker("provider-dc", log, fail=True),
        _FakeWorker("provider-dc-read", log),
    ]

    async def run() -> None:
        await asyncio.wait_for(run_workers(workers, asyncio.Event()), 10)

    with pytest.raises(RuntimeError, match="provider-dc: cannot start"):
        asyncio.run(run())
    assert log == [
        ("started", "shards"),
        ("started", "transitions"),
        ("stopped", "transitions"),
        ("stopped", "shards"),
    ]


def test_workers_run_until_stop_and_stop_last_started_first():
    from workers.worker import run_workers

    log: list = []
    workers = [_FakeWorker(name, log) for name in ("shards", "transitions", "provider-dc")]

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(run_workers(workers, stop))
        await asyncio.sleep(0.05)
        assert log == [("started", w.name) for w in workers] and not task.done()
        stop.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(run())
    assert log[3:] == [("stopped", w.name) for w in reversed(workers)]


def test_status_shows_the_outbox_backlog_and_how_often_the_shard_decides():
    base = {
        "shard": 0,
        "epoch": 1,
        "cycles": 9,
        "last_cycle_ms": 1.0,
        "coordinator_term": 0,
        "machines": {"CREATING": 40},
        "clusters": ["a"],
        "needs": 1,
        "shortfalls": [],
    }
    text = render_status(
        {
            **base,
            "queued_starts": 120,
            "oldest_queued_seconds": 42.4,
            "in_flight": 1000,
            "queued_notices": 3,
            "dropped_notices": 2,
            "cycle_ends": [10.0, 11.0, 12.1, 16.1],
        }
    )
    assert (
        "  outbox:     120 start(s) queued, oldest 42 s; 1000 in flight; 3 cycle(s) of notices"
        " waiting, 2 dropped; cycles every 1.1 s (max 4.0 s)"
    ) in text
    assert "outbox" not in render_status(base)  # (a shard from before says nothing of it)
