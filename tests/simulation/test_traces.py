"""Real traces through mapping files (bigfleet/simulation/trace_mapping.py, traces.py): job logs
of other shapes, per-group time series, and the mapping's own errors."""

import pathlib
import textwrap

import pytest
from pydantic import ValidationError

from bigfleet.simulation.scenario import ScenarioError, WorkloadSpec, load
from bigfleet.simulation.trace_mapping import MappingError, load_mapping
from bigfleet.simulation.workload import openb_mapping, rollups_from_trace

from .test_workload import counts, pod, trace

REPO = pathlib.Path(__file__).resolve().parents[2]
OPENB_MAPPING = REPO / "examples" / "traces" / "alibaba-openb.mapping.yaml"
BATCH_MAPPING = REPO / "examples" / "traces" / "alibaba-batch-v2018.mapping.yaml"
BATCH_EXAMPLE = REPO / "examples" / "alibaba-batch-replay.yaml"

CPU8 = "{key: node.kubernetes.io/instance-type, operator: In, values: [cpu-8]}"


def write(tmp_path: pathlib.Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return str(path)


def series(rollups, key=None):
    """[(t, count of the one need)] of a replay with one need."""
    return [(t, needs[0].count if needs else 0) for t, needs in rollups]


# ---- the openb mapping file -----------------------------------------------------------------


def test_the_openb_mapping_file_is_the_built_in_mapping():
    assert load_mapping(OPENB_MAPPING) == openb_mapping()


def mixed_pods(tmp_path: pathlib.Path) -> str:
    """A small openb trace with every qos, GPU and CPU pods, shares and a pod without end."""
    return trace(
        tmp_path,
        pod("a", qos="Guaranteed", gpus=4, gpu_milli=1000, created=0, deleted=300),
        pod("b", qos="BE", cpu=40000, created=50, deleted=250),
        pod("c", qos="BE", cpu=40000, created=60, deleted=""),
        pod("d", qos="Burstable", gpus=1, gpu_milli=500, created=100, deleted=120),
        *(
            pod(f"p{i}", qos="LS", gpus=1, gpu_milli=400, created=i * 7, deleted=i * 7 + 90)
            for i in range(30)
        ),
    )


def test_the_openb_mapping_file_gives_the_same_rollups_as_the_workload_fields(tmp_path):
    path = mixed_pods(tmp_path)
    for clusters, index in ((1, 0), (2, 0), (2, 1)):
        kw = {"start": 0.0, "time_scale": 1.0, "clusters": clusters, "index": index}
        built_in = rollups_from_trace(WorkloadSpec(trace=path, **kw), 10, 400)
        from_file = rollups_from_trace(
            WorkloadSpec(trace=path, mapping=str(OPENB_MAPPING), **kw), 10, 400
        )
        assert from_file == built_in and len(built_in) > 3


# ---- job logs of other shapes ---------------------------------------------------------------


SWF_LIKE = f"""
    mapping:
      format: jobs
      file: {{header: false, delimiter: whitespace, comment: ";", missing: ["-1"]}}
      time: {{unit: minutes, origin: 100}}
      columns: {{id: 0, start: 1, duration: 3, class: 14, group: 15}}
      resources:
        cpu: {{columns: [4]}}
      default_class: normal
      classes:
        normal: {{priority: 100}}
        urgent: {{priority: 900, interruption_penalty: 20}}
      kinds:
        - {{name: cpu, resource: cpu, per_machine: 8, requirements: [{CPU8}]}}
"""


def swf_row(job, submit, run, procs, queue="-1", partition="1"):
    fields = [job, submit, 0, run, procs, -1, -1, procs, -1, -1, 1, 1, 1, 1, queue, partition]
    return " ".join(str(f) for f in fields)


def test_a_headerless_whitespace_log_with_durations_classes_and_groups(tmp_path):
    mapping = write(tmp_path, "swf.mapping.yaml", SWF_LIKE)
    rows = [
        "; a comment line, as in an SWF header",
        swf_row(1, 100, 10, 12),  # minute 0 for 10 minutes: 12 cores -> 2 machines
        swf_row(2, 105, 5, 8, queue="urgent"),  # minutes 5-10, urgent: 1 machine
        swf_row(3, 105, -1, 8),  # no run time: outlives the trace
        swf_row(4, 100, 10, 64, partition="2"),  # another group
    ]
    log = write(tmp_path, "log.swf", "\n".join(rows) + "\n")
    spec = WorkloadSpec(trace=log, mapping=mapping, group="1", start=0.0, time_scale=60.0)
    rollups = rollups_from_trace(spec, 1, 20)  # one simulated second = one trace minute
    assert [(t, counts(n)) for t, n in rollups] == [
        (0.0, {(900, "cpu-8"): 0, (100, "cpu-8"): 2}),
        (5.0, {(900, "cpu-8"): 1, (100, "cpu-8"): 3}),  # job 3's 8 cores join job 1's 12
        (10.0, {(900, "cpu-8"): 0, (100, "cpu-8"): 1}),
    ]
    (_, needs), *_ = rollups
    assert [n.interruption_penalty for n in needs] == [20.0, 0.0]
    other = rollups_from_trace(spec.model_copy(update={"group": "2"}), 1, 20)
    assert series(other) == [(0.0, 8), (10.0, 0)]


def test_a_job_no_kind_takes_is_left_out_and_the_first_matching_kind_wins(tmp_path):
    mapping = write(
        tmp_path,
        "m.yaml",
        f"""
        mapping:
          format: jobs
          columns: {{id: id, start: t0, end: t1}}
          resources:
            gpu: {{columns: [gpus]}}
            mem: {{columns: [mem_mib], scale: 0.0009765625}}
          default_class: all
          classes: {{all: {{priority: 5}}}}
          kinds:
            - {{name: gpu, when: gpu, resource: gpu, per_machine: 4, requirements: [{CPU8}]}}
            - {{name: big, when: mem, resource: mem, per_machine: 256, requirements: [{CPU8}]}}
        """,
    )
    log = write(
        tmp_path,
        "jobs.csv",
        "id,t0,t1,gpus,mem_mib\na,0,10,4,999999\nb,0,10,0,524288\nc,0,10,0,0\n",
    )
    ((_, needs),) = rollups_from_trace(WorkloadSpec(trace=log, mapping=mapping, start=0.0), 10, 5)
    assert [n.count for n in needs] == [1, 2]  # a on a GPU machine; b's 512 GiB on two; c nowhere


# ---- time series ----------------------------------------------------------------------------


SERIES = f"""
    mapping:
      format: series
      columns: {{time: minute, group: vc, running: running, pending: pending, class: tier}}
      time: {{unit: minutes}}
      counts: COUNTS
      classes:
        prod: {{priority: 1000}}
        dev: {{priority: 10}}
      kinds:
        - {{name: cpu, resource: cpu, per_machine: 8, requirements: [{CPU8}]}}
"""


def test_a_time_series_counts_running_and_pending_of_the_latest_row(tmp_path):
    mapping = write(tmp_path, "s.yaml", SERIES.replace("COUNTS", "machines"))
    rows = "minute,vc,tier,running,pending\n2,a,prod,3,1\n4,a,prod,2,0\n3,b,prod,5,0\n3,a,dev,1,0\n"
    data = write(tmp_path, "s.csv", rows)
    spec = WorkloadSpec(trace=data, mapping=mapping, group="a", start=0.0, time_scale=60.0)
    rollups = rollups_from_trace(spec, 1, 6)
    assert [(t, [n.count for n in needs]) for t, needs in rollups] == [
        (0.0, [0, 0]),  # before a group's first row it asks for nothing
        (2.0, [4, 0]),
        (3.0, [4, 1]),
        (4.0, [2, 1]),
    ]
    both = rollups_from_trace(spec.model_copy(update={"group": None}), 1, 6)
    assert [(t, needs[0].count) for t, needs in both] == [(0.0, 0), (2.0, 4), (3.0, 9), (4.0, 7)]


def test_series_in_units_are_packed_and_start_defaults_to_the_first_row(tmp_path):
    mapping = write(tmp_path, "s.yaml", SERIES.replace("COUNTS", "units"))
    data = write(
        tmp_path, "s.csv", "minute,vc,tier,running,pending\n10,a,prod,12,5\n11,a,prod,4,0\n"
    )
    spec = WorkloadSpec(trace=data, mapping=mapping, time_scale=60.0)
    assert series(rollups_from_trace(spec, 1, 3)) == [(0.0, 3), (1.0, 1)]  # 17 and 4 cores on 8s


def test_a_bad_series_value_names_file_line_and_column(tmp_path):
    mapping = write(tmp_path, "s.yaml", SERIES.replace("COUNTS", "machines"))
    data = write(tmp_path, "s.csv", "minute,vc,tier,running,pending\n1,a,prod,3,0\n2,a,gold,1,0\n")
    with pytest.raises(ValueError, match=r"s\.csv: line 3, column tier: unknown class 'gold'"):
        rollups_from_trace(WorkloadSpec(trace=data, mapping=mapping), 1, 5)


# ---- mapping errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("start: 1, duration: 3", "start: 1, duration: 3, end: 2"), "columns: .*exactly one of"),
        (("resource: cpu,", "resource: disk,"), r"kinds\.0\.resource: 'disk' is not one of"),
        (("default_class: normal", "default_class: gold"), "default_class 'gold' is not one"),
        (("per_machine: 8", "per_machine: 0"), r"kinds\.0\.per_machine"),
        (("  default_class", "  colour: red\n  default_class"), "colour"),
        (("id: 0,", "id: job,"), "file.header is false, so columns must be positions"),
        (("unit: minutes", "unit: fortnights"), r"time\.unit"),
    ],
    ids=[
        "end and duration",
        "unknown resource",
        "unknown default",
        "zero size",
        "unknown field",
        "names without header",
        "bad unit",
    ],
)
def test_a_bad_mapping_names_the_field(tmp_path, change, message):
    old, new = change
    text = textwrap.dedent(SWF_LIKE)
    assert old in text
    path = write(tmp_path, "bad.mapping.yaml", text.replace(old, new))
    with pytest.raises(
        MappingError, match=rf"bad\.mapping\.yaml: invalid trace mapping:\n(.|\n)*{message}"
    ):
        load_mapping(path)


def test_a_mapping_replaces_the_openb_packing_fields_and_group_replaces_hash_groups():
    with pytest.raises(ValidationError, match="gpus_per_node: with a mapping file, set machines"):
        WorkloadSpec(trace="x.csv", mapping="m.yaml", gpus_per_node=4)
    with pytest.raises(ValidationError, match="give either group"):
        WorkloadSpec(trace="x.csv", group="a", clusters=2)


def test_the_mapping_path_resolves_relative_to_the_scenario(tmp_path):
    (tmp_path / "sub").mkdir()
    write(tmp_path, "m.yaml", SWF_LIKE)
    scenario = write(
        tmp_path / "sub",
        "s.yaml",
        """
        name: t
        duration_seconds: 10
        providers: []
        clusters:
          - {name: c, workload: {trace: ../log.swf, mapping: ../m.yaml}}
        """,
    )
    (cluster,) = load(scenario).clusters
    assert cluster.workload.mapping == str(tmp_path / "m.yaml")
    with pytest.raises(ScenarioError, match=r"clusters\.0\.workload: .*cpus_per_node"):
        pathlib.Path(scenario).write_text(
            pathlib.Path(scenario).read_text().replace("m.yaml}", "m.yaml, cpus_per_node: 8}")
        )
        load(scenario)


# ---- the second example ---------------------------------------------------------------------


def test_the_batch_example_and_its_mapping_load():
    mapping = load_mapping(BATCH_MAPPING)
    assert mapping.format == "jobs" and mapping.kinds[0].per_machine == 96
    scenario = load(BATCH_EXAMPLE)
    assert [c.workload.mapping for c in scenario.clusters] == [str(BATCH_MAPPING)] * 2


def test_the_batch_example_replays_the_spar_sample():
    scenario = load(BATCH_EXAMPLE)
    peaks = []
    for cluster in scenario.clusters:
        rollups = rollups_from_trace(cluster.workload, scenario.cycle_seconds, 3600)
        peaks.append(max(n.count for _, needs in rollups for n in needs))
    assert peaks == [18, 19]


@pytest.mark.parametrize("verb", [["simulate"], ["simulate", "--compare", "per-cluster"], ["plan"]])
def test_a_scenario_whose_trace_is_missing_is_refused_in_one_line(tmp_path, capsys, verb):
    """A trace (or its mapping) the scenario names but the machine does not have: the command
    says which file, in one line, and exits 2 — no traceback (issue 31)."""
    from bigfleet.cli import main

    example = pathlib.Path(__file__).parents[2] / "examples" / "alibaba-gpu-replay.yaml"
    text = example.read_text().replace("traces/alibaba-gpu-v2023/", f"{tmp_path}/nowhere/")
    assert f"trace: {tmp_path}/nowhere/" in text
    text = text.replace("mapping: traces/", f"mapping: {example.parent}/traces/")
    scenario = tmp_path / "replay.yaml"
    scenario.write_text(text)
    slo = ["--slo", "500000:served=0.8"] if verb == ["plan"] else []
    assert main([verb[0], str(scenario), *verb[1:], *slo]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert "openb_pod_list_default.csv.gz: cannot read trace: No such file" in err, err
