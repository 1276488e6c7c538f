"""The examples a fresh clone gets: every example the README names loads, every file a scenario
reads (traces, mappings, node lists) is in the repository, every owned machine has a stated
amortised price, and the Alibaba GPU replay runs from the trace shipped in examples/traces/."""

from __future__ import annotations

import gzip
import hashlib
import importlib
import pathlib
import re
import subprocess
import sys
from typing import Any

import pytest

from bigfleet.models import from_wire
from bigfleet.providers.configured import KINDS
from bigfleet.providers.redfish import RedfishConfig
from bigfleet.simulation.run import run_scenario
from bigfleet.simulation.scenario import load
from bigfleet.yamlfile import safe_load

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
GPU_EXAMPLE = EXAMPLES / "alibaba-gpu-replay.yaml"
GPU_TRACE = EXAMPLES / "traces" / "alibaba-gpu-v2023"

# The stated amortised rate of owned machines, the same in every example (purchase over 4 years
# plus power, space and network): $/h per machine.
OWNED_RATE = {"gpu-8xh100": 15.0, "cpu-64": 0.8, "cpu-96": 1.2}


def readme_examples() -> list[str]:
    names = sorted(
        set(re.findall(r"examples/([a-z0-9-]+\.yaml)", (REPO / "README.md").read_text()))
    )
    assert names, "the README names no example"
    return names


def raw(name: str) -> dict[str, Any]:
    data = safe_load((EXAMPLES / name).read_text())
    assert isinstance(data, dict), name
    return data


def is_scenario(name: str) -> bool:
    data = raw(name)
    return "kind" not in data and "providers" in data and "clusters" in data


def scenario_examples() -> list[str]:
    """The README's scenarios and every other scenario file in examples/."""
    mine = {p.name for p in EXAMPLES.glob("*.yaml") if is_scenario(p.name)}
    return sorted(mine | {n for n in readme_examples() if is_scenario(n)})


def inside_repo(path: str | pathlib.Path) -> bool:
    return pathlib.Path(path).resolve().is_relative_to(REPO)


@pytest.mark.parametrize("name", readme_examples())
def test_every_example_the_readme_names_exists_and_loads(name):
    path = EXAMPLES / name
    assert path.is_file(), f"README names {path}, which does not exist"
    data = raw(name)
    kind = data.pop("kind", None)
    if "needs" in data:  # a roll-up file (`rollup send`): read as the command reads it
        from workers.verbs.rollup import load_rollup

        assert load_rollup(str(path)).cluster == data["cluster"]
    elif kind is None:
        load(path)
    else:  # a provider config (`--provider-config`): checked as bigfleet/providers/configured.py
        assert kind in KINDS, f"{name}: unknown kind {kind!r}"
        module, model, _ = KINDS[kind]
        from_wire(getattr(importlib.import_module(module), model), data)


@pytest.mark.parametrize("name", scenario_examples())
def test_every_file_a_scenario_reads_is_inside_the_repository(name):
    scenario = load(EXAMPLES / name)
    for cluster in scenario.clusters:
        if cluster.workload is None:
            continue
        w = cluster.workload
        for field, value in (("trace", w.trace), ("mapping", w.mapping), ("nodes", w.nodes)):
            if value is None:
                continue
            where = f"{name}: cluster {cluster.name}: {field} {value}"
            assert inside_repo(value), f"{where} is outside the repository"
            assert pathlib.Path(value).is_file(), f"{where} does not exist"


@pytest.mark.parametrize("name", scenario_examples())
def test_every_owned_machine_has_the_stated_amortised_price(name):
    """Owned racks and reserved instances are paid for whether used or not: each example states
    what they cost, so a comparison makes both sides pay for what they own."""
    data = raw(name)
    for provider in data["providers"]:
        for rack in provider.get("racks", []):
            where = f"{name}: {provider['name']} rack {rack['rack']}"
            assert rack["instance_type"] in OWNED_RATE, f"{where}: no stated rate for its type"
            assert rack.get("price_per_hour") == OWNED_RATE[rack["instance_type"]], where
        for line in provider.get("quota", []):
            assert line.get("price_per_hour", 0) > 0, f"{name}: {provider['name']} {line}"
    if any(p.get("racks") for p in data["providers"]):
        header = (EXAMPLES / name).read_text().split("\nname:")[0]
        assert "amortised" in header and "4 years" in header, f"{name}: the rate is not stated"


def test_the_redfish_example_prices_its_machines_like_the_dev_fleet():
    data = raw("dev-redfish-emulator.yaml")
    assert data.pop("kind") == "redfish"
    config = from_wire(RedfishConfig, data)
    assert {(b.instance_type, b.price_per_hour) for b in config.bmcs} == {("gpu-8xh100", 15.0)}


def test_the_committed_day_is_what_the_script_generates():
    script = EXAMPLES / "make_mixed_fleet_day.py"
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True
    ).stdout
    assert out == (EXAMPLES / "mixed-fleet-day.yaml").read_text()


# ---- the shipped Alibaba GPU trace -----------------------------------------------------------


def test_the_gpu_trace_ships_with_its_licence_and_provenance():
    names = sorted(p.name for p in GPU_TRACE.iterdir())
    assert names == [
        "LICENSE",
        "README.md",
        "openb_node_list_all_node.csv.gz",
        "openb_pod_list_default.csv.gz",
    ]
    licence = (GPU_TRACE / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    readme = (GPU_TRACE / "README.md").read_text()
    for source in (
        "hkust-adsl/kubernetes-scheduler-simulator",
        "data/csv/",
        "cluster-trace-gpu-v2023",
    ):
        assert source in readme
    # The README's checksums are those of the files' contents.
    sums = dict(re.findall(r"zcat (\S+\.csv\.gz)\s*\| sha256sum\s*# ([0-9a-f]{64})", readme))
    assert sorted(sums) == names[2:]
    for file, digest in sums.items():
        assert (
            hashlib.sha256(gzip.decompress((GPU_TRACE / file).read_bytes())).hexdigest() == digest
        )


def test_the_gpu_trace_files_are_gzip_without_name_or_time_stamp():
    """`gzip -9 -n`: no file name and a zero time stamp in the header, so the bytes are the
    same wherever the files are compressed again."""
    for path in GPU_TRACE.glob("*.gz"):
        head = path.read_bytes()[:10]
        flags, mtime = head[3], int.from_bytes(head[4:8], "little")
        assert head[:3] == b"\x1f\x8b\x08" and flags & 0x08 == 0 and mtime == 0, path.name
        header = gzip.decompress(path.read_bytes()).split(b"\n", 1)[0]
        assert header.startswith((b"name,", b"sn,")), path.name  # CSV with a header row


def test_the_gpu_example_replays_the_shipped_trace_and_serves_demand():
    scenario = load(GPU_EXAMPLE)
    traces = {c.workload.trace for c in scenario.clusters if c.workload}
    assert traces == {str(GPU_TRACE / "openb_pod_list_default.csv.gz")}
    short = scenario.model_copy(update={"duration_seconds": 1200.0})
    report = run_scenario(short)
    bands = report["time_to_capacity_by_priority_band"]
    assert sum(b["asked_machine_hours"] for b in bands.values()) > 0
    assert bands[">=900000"]["served_machine_hours"] > 0
    assert sum(n["satisfied"] for c in report["clusters"].values() for n in c["needs"]) > 0
    assert report["cost"]["by_capacity_type"]["bare-metal"] > 0  # the racks are priced
