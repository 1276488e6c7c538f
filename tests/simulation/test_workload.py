"""The trace workload model (bigfleet/simulation/workload.py): pods of a CSV trace -> roll-ups."""

import pathlib

import numpy as np
import pytest
from pydantic import ValidationError

from bigfleet import labels
from bigfleet.simulation.scenario import WorkloadSpec, load
from bigfleet.simulation.workload import (
    QOS_INTERRUPTION_PENALTY,
    QOS_PRIORITY,
    default_start,
    group_of,
    read_trace,
    rollups_from_trace,
)

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "alibaba-gpu-replay.yaml"
HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)


def pod(
    name: str,
    *,
    qos: str = "LS",
    cpu: int = 1000,
    gpus: int = 0,
    gpu_milli: int = 0,
    created: float = 0,
    deleted: float | str = 1000,
    scheduled: str = "0",
) -> str:
    return f"{name},{cpu},1024,{gpus},{gpu_milli},,{qos},Running,{created},{deleted},{scheduled}"


def trace(tmp_path: pathlib.Path, *rows: str, header: str = HEADER) -> str:
    path = tmp_path / "pods.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return str(path)


def spec(path: str, **kw) -> WorkloadSpec:
    kw.setdefault("start", 0.0)
    return WorkloadSpec(trace=path, **kw)


def counts(needs) -> dict[tuple[int, str], int]:
    """{(priority, instance type): count} of one roll-up."""
    out = {}
    for n in needs:
        (req,) = n.requirements
        assert req.key == labels.INSTANCE_TYPE and req.operator == "In"
        out[(n.priority, req.values[0])] = n.count
    return out


def at(rollups, t: float):
    """The roll-up in force at simulated second t."""
    current = None
    for when, needs in rollups:
        if when <= t:
            current = needs
    return current


# ---- qos -> priority bands ------------------------------------------------------------------


def test_qos_maps_to_priority_bands_and_penalties(tmp_path):
    path = trace(
        tmp_path,
        pod("g", qos="Guaranteed", gpus=8, gpu_milli=1000),
        pod("ls", qos="LS", gpus=8, gpu_milli=1000),
        pod("b", qos="Burstable", gpus=8, gpu_milli=1000),
        pod("be", qos="BE", gpus=8, gpu_milli=1000),
    )
    ((t, needs),) = rollups_from_trace(spec(path), 10, 100)
    assert t == 0.0
    assert [n.priority for n in needs] == [1_000_000, 900_000, 500_000, 0]
    assert [n.interruption_penalty for n in needs] == [1000.0, 50.0, 5.0, 0.5]
    assert all(n.reclamation_penalty == 0.0 and n.count == 1 for n in needs)
    assert QOS_PRIORITY == {"Guaranteed": 1_000_000, "LS": 900_000, "Burstable": 500_000, "BE": 0}
    assert QOS_INTERRUPTION_PENALTY["BE"] < QOS_INTERRUPTION_PENALTY["Guaranteed"]


# ---- live pods ------------------------------------------------------------------------------


def test_a_pod_is_live_from_creation_up_to_but_not_at_deletion(tmp_path):
    path = trace(tmp_path, pod("p", cpu=64000, created=100, deleted=200))
    rollups = rollups_from_trace(spec(path, time_scale=1.0), 50, 300)
    assert [(t, counts(n)[(900_000, "cpu-64")]) for t, n in rollups] == [
        (0.0, 0),
        (100.0, 1),
        (200.0, 0),
    ]


def test_time_scale_and_start_shift_the_trace(tmp_path):
    # Trace seconds 5000..8000, 100 trace seconds per simulated second, starting at 4000:
    # live in simulated seconds [10, 40).
    path = trace(tmp_path, pod("p", cpu=64000, created=5000, deleted=8000))
    rollups = rollups_from_trace(spec(path, start=4000.0, time_scale=100.0), 10, 60)
    assert [(t, counts(n)[(900_000, "cpu-64")]) for t, n in rollups] == [
        (0.0, 0),
        (10.0, 1),
        (40.0, 0),
    ]


def test_pods_never_scheduled_still_ask_for_capacity(tmp_path):
    path = trace(tmp_path, pod("pending", cpu=64000, scheduled=""))
    ((_, needs),) = rollups_from_trace(spec(path), 10, 100)
    assert counts(needs) == {(900_000, "cpu-64"): 1}


def test_a_pod_without_deletion_time_lives_to_the_end(tmp_path):
    path = trace(tmp_path, pod("p", cpu=64000, created=50, deleted=""))
    rollups = rollups_from_trace(spec(path, time_scale=1.0), 10, 1000)
    assert [(t, counts(n)[(900_000, "cpu-64")]) for t, n in rollups] == [(0.0, 0), (50.0, 1)]


def test_pods_alive_at_the_start_count_from_t0(tmp_path):
    path = trace(tmp_path, pod("old", cpu=64000, created=0, deleted=10_000))
    ((t, needs),) = rollups_from_trace(spec(path, start=5000.0), 10, 100)
    assert t == 0.0 and counts(needs) == {(900_000, "cpu-64"): 1}


# ---- packing --------------------------------------------------------------------------------


def test_three_4_gpu_pods_need_two_8_gpu_machines(tmp_path):
    path = trace(tmp_path, *(pod(f"p{i}", gpus=4, gpu_milli=1000) for i in range(3)))
    ((_, needs),) = rollups_from_trace(spec(path), 10, 100)
    assert counts(needs) == {(900_000, "gpu-8xh100"): 2}


def test_gpu_shares_are_summed_before_rounding_up(tmp_path):
    # 20 pods x 0.4 GPU = 8 GPUs exactly: one machine (no float dust pushes it to two).
    path = trace(tmp_path, *(pod(f"p{i}", gpus=1, gpu_milli=400) for i in range(20)))
    ((_, needs),) = rollups_from_trace(spec(path), 10, 100)
    assert counts(needs) == {(900_000, "gpu-8xh100"): 1}
    path = trace(tmp_path, *(pod(f"p{i}", gpus=1, gpu_milli=400) for i in range(21)))
    ((_, needs),) = rollups_from_trace(spec(path), 10, 100)
    assert counts(needs) == {(900_000, "gpu-8xh100"): 2}


def test_cpu_only_pods_pack_onto_cpu_machines_and_gpu_pods_do_not(tmp_path):
    path = trace(
        tmp_path,
        pod("c1", cpu=40000),
        pod("c2", cpu=40000),  # 80 cores: 2 x cpu-64
        pod("g", cpu=90000, gpus=1, gpu_milli=1000),  # its CPUs ride on the GPU machine
    )
    ((_, needs),) = rollups_from_trace(spec(path), 10, 100)
    assert counts(needs) == {(900_000, "gpu-8xh100"): 1, (900_000, "cpu-64"): 2}


def test_instance_types_sizes_and_demand_scale_come_from_the_spec(tmp_path):
    path = trace(tmp_path, pod("g", gpus=2, gpu_milli=1000), pod("c", cpu=16000))
    s = spec(
        path,
        gpu_instance_type="gpu-4xa100",
        gpus_per_node=4,
        cpu_instance_type="cpu-16",
        cpus_per_node=16,
        demand_scale=3.0,
    )
    ((_, needs),) = rollups_from_trace(s, 10, 100)
    assert counts(needs) == {(900_000, "gpu-4xa100"): 2, (900_000, "cpu-16"): 3}


# ---- roll-ups -------------------------------------------------------------------------------


def test_rollups_are_emitted_only_when_a_count_changes(tmp_path):
    path = trace(
        tmp_path,
        pod("a", qos="BE", cpu=64000, created=0, deleted=300),
        pod("b", qos="BE", cpu=64000, created=100, deleted=300),
        pod("c", qos="BE", cpu=1000, created=150, deleted=250),  # 129 cores: a 3rd machine
        pod("d", qos="LS", gpus=8, gpu_milli=1000, created=500, deleted=600),
    )
    rollups = rollups_from_trace(spec(path, time_scale=1.0), 10, 1000)
    times = [t for t, _ in rollups]
    assert times == [0.0, 100.0, 150.0, 250.0, 300.0, 500.0, 600.0]
    seen = [tuple(n.count for n in needs) for _, needs in rollups]
    assert all(a != b for a, b in zip(seen, seen[1:], strict=False))
    # One need per (band, kind) ever used, at a fixed index for the whole replay.
    layouts = {tuple((n.priority, n.requirements[0].values[0]) for n in ns) for _, ns in rollups}
    assert layouts == {((900_000, "gpu-8xh100"), (0, "cpu-64"))}
    assert counts(at(rollups, 160)) == {(900_000, "gpu-8xh100"): 0, (0, "cpu-64"): 3}
    assert counts(at(rollups, 999)) == {(900_000, "gpu-8xh100"): 0, (0, "cpu-64"): 0}


def test_rollups_stay_within_the_duration_on_cycle_boundaries(tmp_path):
    path = trace(
        tmp_path,
        *(pod(f"p{i}", cpu=64000, created=i * 7, deleted=i * 7 + 30) for i in range(50)),
    )
    rollups = rollups_from_trace(spec(path, time_scale=1.0), 10, 200)
    assert rollups[0][0] == 0.0
    assert all(0 <= t <= 200 and t % 10 == 0 for t, _ in rollups)


def test_an_empty_group_sends_one_empty_rollup(tmp_path):
    path = trace(tmp_path, pod("a"))  # crc32("a") % 4 == 3
    assert rollups_from_trace(spec(path, clusters=4, index=0), 10, 100) == [(0.0, [])]
    assert len(rollups_from_trace(spec(path, clusters=4, index=3), 10, 100)[0][1]) == 1


# ---- grouping -------------------------------------------------------------------------------


def test_grouping_is_a_stable_hash_of_the_pod_name():
    assert [group_of(n, 4) for n in ("openb-pod-0000", "a", "b", "d")] == [0, 3, 1, 0]
    assert all(group_of(n, 1) == 0 for n in ("x", "y", "z"))


def test_every_pod_lands_in_exactly_one_group_and_replays_are_identical(tmp_path):
    rows = [pod(f"openb-pod-{i:04d}", cpu=64000) for i in range(40)]
    path = trace(tmp_path, *rows)
    per_group = []
    for index in range(4):
        s = spec(path, clusters=4, index=index)
        first = rollups_from_trace(s, 10, 100)
        assert first == rollups_from_trace(s, 10, 100)
        per_group.append(sum(n.count for n in first[0][1]))
    assert sum(per_group) == 40
    assert all(n > 0 for n in per_group)


def test_index_must_name_one_of_the_groups():
    with pytest.raises(ValidationError, match="index 4 is not a group of 4"):
        WorkloadSpec(trace="x.csv", clusters=4, index=4)
    with pytest.raises(ValidationError, match="demand_scale"):
        WorkloadSpec(trace="x.csv", demand_scale=0)


# ---- default start --------------------------------------------------------------------------


def test_default_start_is_the_first_creation_of_the_busiest_34_days():
    day = 86400.0
    creation = np.array([0.0, 5 * day] + [100 * day + i * 3600 for i in range(10)])
    assert default_start(creation) == 100 * day
    assert default_start(np.array([3.0, 1.0, 2.0])) == 1.0  # a tie: the earliest window
    assert default_start(np.array([])) == 0.0


def test_start_defaults_to_the_busy_window(tmp_path):
    day = 86400
    path = trace(
        tmp_path,
        pod("early", cpu=64000, created=0, deleted=10),
        *(pod(f"p{i}", cpu=64000, created=200 * day + i, deleted=200 * day + 99) for i in range(3)),
    )
    s = WorkloadSpec(trace=path, time_scale=1.0)  # no start given
    ((t, needs),) = rollups_from_trace(s, 10, 5)
    assert t == 0.0 and counts(needs) == {(900_000, "cpu-64"): 1}


# ---- bad files ------------------------------------------------------------------------------


def test_a_missing_column_is_named(tmp_path):
    header = HEADER.replace(",gpu_milli", "")
    path = trace(tmp_path, "p,1000,1024,0,,LS,Running,0,10,0", header=header)
    with pytest.raises(ValueError, match=r"pods\.csv: line 1: missing column\(s\) gpu_milli"):
        rollups_from_trace(spec(path), 10, 100)


@pytest.mark.parametrize(
    ("row", "column"),
    [
        (pod("p", cpu="lots"), "cpu_milli"),
        (pod("p", created="soon"), "creation_time"),
        (pod("p", created=10, deleted="-5"), "deletion_time"),
        (pod("p", gpus="nan"), "num_gpu"),
        (pod("p", qos="Platinum"), "qos"),
        (pod("p", created=10, deleted=5), "deletion_time"),
    ],
    ids=["word", "creation word", "negative", "nan", "unknown qos", "deleted before created"],
)
def test_an_unreadable_value_names_file_line_and_column(tmp_path, row, column):
    path = trace(tmp_path, pod("ok"), row)
    with pytest.raises(ValueError, match=rf"pods\.csv: line 3, column {column}:"):
        read_trace(path)


def test_a_short_row_and_a_missing_file_are_reported(tmp_path):
    path = trace(tmp_path, "p,1000,1024")
    with pytest.raises(ValueError, match=r"pods\.csv: line 2: 3 fields, the header has 11"):
        read_trace(path)
    with pytest.raises(ValueError, match=r"nope\.csv: cannot read trace"):
        read_trace(tmp_path / "nope.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match=r"empty\.csv: line 1: empty file"):
        read_trace(tmp_path / "empty.csv")


def test_scenario_paths_resolve_relative_to_the_scenario_file(tmp_path):
    trace(tmp_path, pod("p", cpu=64000))
    (tmp_path / "sub").mkdir()
    scenario = tmp_path / "sub" / "replay.yaml"
    scenario.write_text(
        "name: t\nduration_seconds: 100\nproviders: []\nclusters:\n"
        "  - {name: c, workload: {trace: ../pods.csv, start: 0}}\n"
    )
    (cluster,) = load(scenario).clusters
    assert cluster.workload.trace == str(tmp_path / "pods.csv")
    ((_, needs),) = rollups_from_trace(cluster.workload, 10, 100)
    assert counts(needs) == {(900_000, "cpu-64"): 1}


# ---- the example replay ---------------------------------------------------------------------


def test_the_alibaba_example_yields_all_four_priority_bands():
    scenario = load(EXAMPLE)
    traces = {c.workload.trace for c in scenario.clusters if c.workload}
    missing = [t for t in traces if not pathlib.Path(t).exists()]
    if missing:
        pytest.skip(f"shared Alibaba trace not checked out beside the repo: {missing[0]}")
    assert [c.workload.index for c in scenario.clusters] == [0, 1, 2, 3]
    bands: set[int] = set()
    for cluster in scenario.clusters:
        rollups = rollups_from_trace(
            cluster.workload, scenario.cycle_seconds, scenario.duration_seconds
        )
        assert rollups and all(0 <= t <= scenario.duration_seconds for t, _ in rollups)
        bands |= {n.priority for _, needs in rollups for n in needs if n.count > 0}
    assert bands == {1_000_000, 900_000, 500_000, 0}


# Per cluster of the example: the number of roll-ups and, per need, the sum of its counts over
# them, as the hard-coded openb reader (before mapping files) computed them.
BEFORE_MAPPINGS = {
    "openb-0": (760, [1230, 11333, 8147, 550, 767, 324]),
    "openb-1": (794, [4, 9589, 427, 5927, 1126, 446]),
    "openb-2": (764, [1240, 9806, 260, 3152, 779, 370]),
    "openb-3": (803, [58, 8955, 4312, 2117, 783, 448]),
}


def test_the_example_mapping_file_gives_the_rollups_of_the_hard_coded_reader():
    scenario = load(EXAMPLE)
    workloads = {c.name: c.workload for c in scenario.clusters}
    if not pathlib.Path(workloads["openb-0"].trace).exists():
        pytest.skip("shared Alibaba trace not checked out beside the repo")
    assert all(
        w.mapping and w.mapping.endswith("alibaba-openb.mapping.yaml") for w in workloads.values()
    )
    for name, workload in workloads.items():
        rollups = rollups_from_trace(workload, scenario.cycle_seconds, scenario.duration_seconds)
        sums = [sum(needs[i].count for _, needs in rollups) for i in range(len(rollups[0][1]))]
        assert (len(rollups), sums) == BEFORE_MAPPINGS[name]
        built_in = workload.model_copy(update={"mapping": None})
        assert rollups == rollups_from_trace(
            built_in, scenario.cycle_seconds, scenario.duration_seconds
        )
