"""`bigfleet simulate` end to end: the real shard and engine against simulated providers and
operators, in virtual time (design §4, §7, §8, §10, §13).

Scenarios are small dicts built here (or the examples/ files); each test reads the report a user
would read, plus, where the report cannot say it, the machines the run left behind.
"""

from __future__ import annotations

import json
import pathlib
import zlib
from collections import Counter
from typing import Any

import pytest
import yaml

from bigfleet.cli import main
from bigfleet.models import ListFilter, MachineState
from bigfleet.simulation.run import Simulation
from bigfleet.simulation.scenario import load

from .scenarios import (
    EXAMPLES,
    KUBELET,
    RACK,
    VM,
    S,
    bare_metal,
    cloud,
    cluster,
    created_for,
    example,
    need,
    need_of,
    provider_machines,
    quota,
    rack,
    scenario,
    shard_states,
    simulate,
)

# ---- design §8: the preemption walkthrough -----------------------------------------------------


@pytest.fixture(scope="module")
def walkthrough() -> dict[str, Any]:
    return Simulation(load(EXAMPLES / "preemption-walkthrough.yaml")).run()


def test_walkthrough_b_ends_with_all_64_and_a_with_none(walkthrough):
    b, a = need_of(walkthrough, "b"), need_of(walkthrough, "a")
    assert (b["satisfied"], b["count"]) == (64, 64)
    assert (a["satisfied"], a["count"]) == (0, 64)


def test_walkthrough_preempts_64_machines_of_a_for_b_with_30s_grace(walkthrough):
    pre = walkthrough["preemptions"]
    assert len(pre) == 64
    assert len({p["machine"] for p in pre}) == 64
    assert {(p["victim"], p["preemptor"], p["grace_seconds"]) for p in pre} == {("a", "b", 30.0)}
    drains = [a for a in walkthrough["actions"] if a["kind"] == "drain"]
    assert len(drains) == 64
    assert {(d["cluster"], d["grace_seconds"], d["reason"]) for d in drains} == {
        ("a", 30.0, "preempt")
    }


def test_walkthrough_drains_each_machine_of_a_before_configuring_it_for_b(walkthrough):
    log = walkthrough["actions"]
    drained = {a["machine"]: i for i, a in enumerate(log) if a["kind"] == "drain"}
    configured = {
        a["machine"]: i
        for i, a in enumerate(log)
        if a["kind"] == "configure" and a["cluster"] == "b"
    }
    assert set(configured) == set(drained) == {p["machine"] for p in walkthrough["preemptions"]}
    for machine, at in configured.items():
        assert drained[machine] < at, machine
        assert log[drained[machine]]["t"] < log[at]["t"]


def test_walkthrough_with_64_more_free_machines_preempts_nothing():
    raw = example("preemption-walkthrough.yaml")
    raw["providers"][0]["racks"].append(rack("ams-r02", 64))
    sim, report = simulate(raw)
    assert report["preemptions"] == []
    assert not [a for a in report["actions"] if a["kind"] == "drain"]
    for name in ("a", "b"):
        assert (need_of(report, name)["satisfied"], need_of(report, name)["count"]) == (64, 64)
    assert shard_states(sim) == {"CONFIGURED": 128}


# ---- design §4: effective cost picks spot or on-demand -----------------------------------------


def test_spot_vs_on_demand_example_puts_web_on_spot_and_training_on_demand():
    report = Simulation(load(EXAMPLES / "spot-vs-on-demand.yaml")).run()
    web, training = created_for(report, "web"), created_for(report, "training")
    assert len(web) >= 8 and len(training) == 8
    assert {a["capacity_type"] for a in web} == {"spot"}  # 1.80 + 0.10 × 5 = 2.30 < 6.00
    assert {a["capacity_type"] for a in training} == {"on-demand"}  # 1.80 + 0.10 × 50 = 6.80
    for name in ("web", "training"):
        assert need_of(report, name)["satisfied"] == 8
    # Eight on-demand machines for (a little under) the hour at $6.00.
    assert 44.0 < report["cost"]["by_capacity_type"]["on-demand"] <= 48.0


# ---- determinism -----------------------------------------------------------------------------


def random_scenario(tmp_path: pathlib.Path) -> pathlib.Path:
    raw = scenario(
        [
            cloud(
                quota("spot", 30, 0.3, interruption=0.6),
                quota("on-demand", 30, 1.0),
                failure_rates={"create": 0.2},
            )
        ],
        [
            cluster("web", (0, [need(900000, 6, interruption_penalty=0.5)])),
            cluster("db", (30, [need(900000, 4, interruption_penalty=50.0)])),
        ],
        7200,
        seed=5,
    )
    path = tmp_path / "random.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def simulate_json(capsys, *argv: str) -> str:
    assert main(["simulate", *argv, "--json"]) == 0
    return capsys.readouterr().out


def test_the_same_scenario_and_seed_give_byte_identical_reports(tmp_path, capsys):
    path = str(random_scenario(tmp_path))
    first = simulate_json(capsys, path)
    assert first == simulate_json(capsys, path)
    report = json.loads(first)
    assert report["seed"] == 5
    assert any(f["error"] == "spot interruption" for f in report["failures"])  # randomness ran


def test_unchanged_roll_ups_delivered_once_a_minute_give_the_same_report(
    tmp_path, capsys, monkeypatch
):
    """The simulator delivers an operator's unchanged roll-up once a minute, not every cycle
    (`Simulation._resend_due`, for `bigfleet plan`'s speed): the shard does nothing with one
    but note the cluster is alive, so the report is the one of a delivery every cycle."""
    import bigfleet.simulation.run as run

    path = str(random_scenario(tmp_path))
    sparse = simulate_json(capsys, path)
    monkeypatch.setattr(run, "RESEND_SECONDS", 0.0)
    assert simulate_json(capsys, path) == sparse


def test_another_seed_gives_another_report(tmp_path, capsys):
    path = str(random_scenario(tmp_path))
    five, six = simulate_json(capsys, path), simulate_json(capsys, path, "--seed", "6")
    assert json.loads(six)["seed"] == 6
    assert [f["t"] for f in json.loads(five)["failures"]] != [
        f["t"] for f in json.loads(six)["failures"]
    ]


# ---- design §13: the operator refuses what its cluster cannot run ------------------------------


def refused_scenario(requirement: dict[str, Any], provider: dict[str, Any]) -> dict[str, Any]:
    return scenario(
        [provider],
        [
            cluster(
                "old",
                (0, [need(500000, 2, requirements=[requirement])]),
                kubelet_version="1.33",
            )
        ],
        1800,
    )


def assert_refused_and_not_leaked(sim: Simulation, report: dict[str, Any]) -> None:
    assert need_of(report, "old")["satisfied"] == 0
    assert any(s["profile"].startswith("refused by operator") for s in report["shortfalls"])
    assert any("refused to bootstrap" in e["message"] for e in report["errors"])
    states = shard_states(sim)
    assert not {"CONFIGURING", "CONFIGURED", "FAILED"} & set(states), states
    for provider in sim.providers:
        for m in provider_machines(sim, provider):
            assert m.state in (S.SPECULATIVE, S.IDLE) and m.cluster is None, m


def test_a_kubelet_outside_the_skew_window_is_refused_and_the_machine_stays_idle():
    """The brief's case: a 1.33 control plane cannot run a 1.20 kubelet (skew 3 minors)."""
    raw = refused_scenario(
        {"key": KUBELET, "operator": "In", "values": ["1.20"]},
        bare_metal(rack("r1", 4, instance_type="cpu-64")),
    )
    sim, report = simulate(raw)
    assert_refused_and_not_leaked(sim, report)


def test_a_kubelet_inside_the_skew_window_is_configured():
    """The operator makes nodes with any kubelet 1.30-1.33 (design §13): asking for one works."""
    raw = refused_scenario(
        {"key": KUBELET, "operator": "In", "values": ["1.32"]},
        bare_metal(rack("r1", 4, instance_type="cpu-64")),
    )
    _, report = simulate(raw)
    assert need_of(report, "old")["satisfied"] == 2


def test_a_need_refused_again_and_again_waits_longer_each_time_and_is_escalated():
    """Issue 34: every retry of a need its operator refuses buys machines that are then let
    go. The wait doubles with each refusal in a row (5, 10, 20, 40 min …), and the shortfall
    ages from the first refusal, so it is escalated for a human."""
    requirement = {"key": KUBELET, "operator": "NotIn", "values": ["1.30", "1.31", "1.32", "1.33"]}
    raw = refused_scenario(requirement, cloud(quota("on-demand", 4, 1.0)))
    raw["duration_seconds"] = 2 * 3600
    _, report = simulate(raw)
    tries = sorted({round(a["t"]) for a in report["actions"] if a["kind"] == "create"})
    gaps = [b - a for a, b in zip(tries, tries[1:], strict=False)]
    assert len(tries) <= 5, tries  # (every 5 min would be 24)
    assert all(later > earlier for earlier, later in zip(gaps, gaps[1:], strict=False)), gaps
    [refused] = [s for s in report["shortfalls"] if s["profile"].startswith("refused")]
    assert refused["escalated"] and refused["max_age"] > 100


@pytest.mark.parametrize("kind", ["bare-metal", "cloud"])
def test_a_refused_bootstrap_returns_the_machine_to_idle(kind):
    """NotIn every supported version reaches the operator (no machine carries the label)."""
    provider = (
        bare_metal(rack("r1", 4, instance_type="cpu-64"))
        if kind == "bare-metal"
        else cloud(quota("on-demand", 4, 1.0))
    )
    requirement = {"key": KUBELET, "operator": "NotIn", "values": ["1.30", "1.31", "1.32", "1.33"]}
    sim, report = simulate(refused_scenario(requirement, provider))
    assert_refused_and_not_leaked(sim, report)
    if kind == "cloud":
        # An idle cloud machine nobody can use goes back to speculative after its timeout.
        assert any(a["reason"] == "idle-timeout" for a in report["actions"])


# ---- design §7: FAILED transitions take their corrective path ----------------------------------


def failing_creates(duration: float) -> dict[str, Any]:
    return scenario(
        [cloud(quota("on-demand", 10, 1.0), failure_rates={"create": 1.0})],
        [cluster("web", (0, [need(900000, 3)]), (1200, [need(900000, 0)]))],
        duration,
    )


def test_creates_that_never_finish_are_cleaned_up_back_to_speculative():
    sim, report = simulate(failing_creates(3600))
    failures = report["failures"]
    assert failures and {f["corrective"] for f in failures} == {"cleanup"}
    assert all("create timed out" in f["error"] for f in failures)
    assert report["providers"]["aws"]["calls"]["delete"] == len(failures)
    assert need_of(report, "web")["satisfied"] == 0
    assert shard_states(sim) == {"SPECULATIVE": 10}
    assert all(m.state is S.SPECULATIVE and m.host is None for m in provider_machines(sim, "aws"))
    # Nothing stays billed: a run twice as long costs exactly the same.
    _, longer = simulate(failing_creates(7200))
    assert longer["cost"]["total"] == report["cost"]["total"] > 0


def test_failures_report_the_state_they_failed_in():
    """`failures[].failed_from` is the transitional state the machine failed in (design §7)."""
    _, report = simulate(failing_creates(3600))
    assert {f["failed_from"] for f in report["failures"]} == {"CREATING"}


def test_configure_failures_are_retried_and_leave_no_machine_failed():
    """Seed §7: a failed configure is retried with a fresh blob, then given up (forced drain back
    to idle); either way the machine does not stay FAILED."""
    raw = scenario(
        [cloud(quota("on-demand", 20, 1.0), failure_rates={"configure": 0.5})],
        [cluster("web", (0, [need(900000, 6)]))],
        3600,
        seed=3,
    )
    sim, report = simulate(raw)
    assert need_of(report, "web")["satisfied"] == 6
    assert "retry-configure" in {f["corrective"] for f in report["failures"]}
    assert "FAILED" not in shard_states(sim)
    assert not [m for m in provider_machines(sim, "aws") if m.state is S.FAILED]


def test_spot_interruptions_are_replaced_and_the_need_is_satisfied_again():
    """Without warning (`notice_seconds: 0`): the machine fails at work, and is replaced."""
    raw = scenario(
        [cloud(quota("spot", 40, 0.3, interruption=0.5), notice_seconds=0)],
        [cluster("web", (0, [need(900000, 6, interruption_penalty=0.5)]))],
        4 * 3600,
        seed=2,
        sample_seconds=60,
    )
    sim, report = simulate(raw)
    interrupted = [f for f in report["failures"] if f["error"] == "spot interruption"]
    assert len(interrupted) >= 3
    assert {f["corrective"] for f in interrupted} == {"cleanup"}
    web = created_for(report, "web")
    assert len(web) > 6 and {a["capacity_type"] for a in web} == {"spot"}
    samples = need_of(report, "web")["satisfied_over_time"]
    for f in interrupted:
        if f["t"] < raw["duration_seconds"] - 600:
            after = [n for t, n in samples if f["t"] < t <= f["t"] + 600]
            assert 6 in after, (f, after)
    assert need_of(report, "web")["satisfied"] == 6
    assert "FAILED" not in shard_states(sim)
    assert report["notices_and_repair"]["drained_ahead"] == 0


def test_spot_interruption_warnings_drain_the_machine_and_start_its_replacement_first():
    """EC2's two minutes' warning (the simulated cloud's default): the shard drains the doomed
    machine within the time left and replaces it before it goes; the same run without warnings
    loses every interrupted machine at work."""
    def run(notice: float) -> dict:
        raw = scenario(
            [cloud(quota("spot", 40, 0.3, interruption=0.5), notice_seconds=notice)],
            [cluster("web", (0, [need(900000, 6, interruption_penalty=4.0)]))],
            4 * 3600,
            seed=2,
            sample_seconds=60,
        )
        return simulate(raw)[1]

    warned, blind = run(120), run(0)
    n = warned["notices_and_repair"]
    assert n["drained_ahead"] >= 3
    assert n["interrupted_at_work"] < blind["notices_and_repair"]["interrupted_at_work"]
    drains = [a for a in warned["actions"] if a["kind"] == "drain" and a["reason"] == "notice"]
    assert all(0 < a["grace_seconds"] <= 120 for a in drains)
    assert 0 < n["ahead_machine_seconds"] <= 120 * n["drained_ahead"]
    assert n["penalty_saved"] == 4.0 * n["drained_ahead"]
    assert need_of(warned, "web")["satisfied"] == 6


# ---- design §10: quota shrinks never remove running machines -----------------------------------


def test_a_quota_shrink_keeps_every_running_machine():
    shrink = {
        "at": 600,
        "instance_type": VM,
        "zone": "us-east-1a",
        "capacity_type": "on-demand",
        "count": 2,
    }
    raw = scenario(
        [cloud(quota("on-demand", 20, 1.0), quota_changes=[shrink])],
        [cluster("web", (0, [need(900000, 10)]), (900, [need(900000, 15)]))],
        1800,
    )
    sim, report = simulate(raw)
    before = {a["machine"] for a in created_for(report, "web") if a["t"] < 600}
    assert len(before) == 10
    assert [s for t, s in need_of(report, "web")["satisfied_over_time"] if 300 <= t < 600][-1] == 10
    touched = [
        a
        for a in report["actions"]
        if a["machine"] in before and a["kind"] not in ("create", "configure")
    ]
    assert touched == []
    # All ten still run; no speculative slot is left under a quota of 2; the growth is a shortfall.
    assert need_of(report, "web")["satisfied"] == 10
    assert shard_states(sim) == {"CONFIGURED": 10}
    assert {m.id for m in provider_machines(sim, "aws")} == before
    assert not [a for a in created_for(report, "web") if a["t"] >= 600]
    assert [s["max_count"] for s in report["shortfalls"] if s["cluster"] == "web"] == [5]


# ---- design §10, §13: rate-limited provider APIs -----------------------------------------------


def test_rate_limited_creates_still_satisfy_the_need():
    """Every call is throttled alike, the configure that follows each create included; each is
    retried, and the need is met, only later."""
    raw = scenario(
        [cloud(quota("on-demand", 40, 0.2), api_calls_per_second=0.2, create_latency=[30, 30])],
        [cluster("web", (0, [need(900000, 30)]))],
        1800,
        policy={"create_batch": 2},
    )
    sim, report = simulate(raw)
    assert report["providers"]["aws"]["rate_limited"] > 0
    assert need_of(report, "web")["satisfied"] == 30
    assert shard_states(sim) == {"CONFIGURED": 30, "SPECULATIVE": 10}


def test_rate_limited_drains_and_configures_are_retried():
    raw = scenario(
        [cloud(quota("on-demand", 20, 0.2), api_calls_per_second=1)],
        [
            cluster("a", (0, [need(500000, 20)]), (600, [need(500000, 0)])),
            cluster("b", (900, [need(500000, 20)])),
        ],
        2400,
    )
    sim, report = simulate(raw)
    assert report["providers"]["aws"]["rate_limited"] > 0
    assert report["errors"] == []
    assert need_of(report, "b")["satisfied"] == 20
    kinds = Counter(a["kind"] for a in report["actions"] if a["t"] >= 600)
    # a's machines, idle with no forecast wanting them, go at once (docs/decisions/0012); b,
    # 300 s later, buys its own: every call rate-limited and retried.
    assert kinds == {"drain": 20, "delete": 20, "create": 20, "configure": 20}
    assert shard_states(sim) == {"CONFIGURED": 20}


# ---- bad scenario files ----------------------------------------------------------------------


def good_file() -> dict[str, Any]:
    return scenario([bare_metal(rack("r1", 4))], [cluster("c", (0, [need(1, 2)]))], 600)


def _negative_count(raw: dict[str, Any]) -> None:
    raw["clusters"][0]["rollups"][0]["needs"][0]["count"] = -3


def _unknown_kind(raw: dict[str, Any]) -> None:
    raw["providers"][0]["kind"] = "gcp"


def _unknown_field(raw: dict[str, Any]) -> None:
    raw["providers"][0]["bogus"] = 1


def _unknown_policy_knob(raw: dict[str, Any]) -> None:
    raw["policy"] = {"bogus": 1}


def _cycle_seconds_in_policy(raw: dict[str, Any]) -> None:
    raw["policy"] = {"cycle_seconds": 5}  # belongs at the top level of the scenario


@pytest.mark.parametrize(
    ("spoil", "named"),
    [
        (_negative_count, "clusters.0.rollups.0.needs.0.count"),
        (_unknown_kind, "providers.0"),
        (_unknown_field, "providers.0.bare-metal.bogus"),
        (_unknown_policy_knob, "policy.bogus"),
        (_cycle_seconds_in_policy, "policy.cycle_seconds"),
    ],
)
def test_a_bad_scenario_file_exits_2_naming_the_field(tmp_path, capsys, spoil, named):
    raw = good_file()
    spoil(raw)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bigfleet simulate: {path}: invalid scenario")
    assert f"  {named}:" in err
    if spoil is _unknown_kind:
        assert "'gcp'" in err and "kind" in err


def test_a_missing_scenario_file_exits_2(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


# ---- several shards --------------------------------------------------------------------------


def one_per_shard(candidates: list[str]) -> list[str]:
    """A name that the assignment rule puts on shard 0, then one for shard 1."""
    return [next(n for n in candidates if zlib.crc32(n.encode()) % 2 == i) for i in (0, 1)]


def test_two_shards_each_take_a_cluster_and_a_rack():
    names = one_per_shard([f"c{i}" for i in range(20)])
    racks_by_shard = one_per_shard([f"r{i}" for i in range(20)])
    raw = scenario(
        [bare_metal(*(rack(r, 8, "cpu-64") for r in racks_by_shard))],
        [cluster(name, (0, [need(500000, 6)])) for name in names],
        900,
        shards=2,
    )
    sim, report = simulate(raw)
    assert report["shards"] == 2
    shards = {name: report["clusters"][name]["shard"] for name in names}
    assert sorted(shards.values()) == [0, 1]
    racks = {}
    for name in names:
        assert need_of(report, name)["satisfied"] == 6
        made = created_for(report, name)
        assert {a["shard"] for a in made} == {shards[name]}
        (racks[name],) = {a["machine"].rsplit("-", 1)[0] for a in made}
    assert racks[names[0]] != racks[names[1]]  # one whole rack per shard, both used
    for shard in sim.shards:
        assert shard.machines_by_state()["CONFIGURED"] == 6


# ---- what a user reads in the report ---------------------------------------------------------


def test_time_to_ready_of_a_need_that_grew_counts_from_the_growth():
    """A need of 4 that grows to 8 after an hour is ready ~2 minutes after each step."""
    raw = scenario(
        [bare_metal(rack("r1", 8, "cpu-64"))],
        [cluster("c", (0, [need(1, 4)]), (3600, [need(1, 8)]))],
        5400,
    )
    _, report = simulate(raw)
    assert need_of(report, "c")["satisfied"] == 8
    assert need_of(report, "c")["time_to_ready_seconds"] < 600


def test_a_same_rack_preemption_frees_one_rack_once():
    """Seed §8 steps 5-6: the machines drained for the preemptor are assigned to it. Here one of
    the 64 victims (infer, priority 900000) drains slower than the other 63 (research, 0)."""
    raw = scenario(
        [bare_metal(rack("r01", 64, "gpu"), rack("r02", 64, "gpu"))],
        [
            cluster("infer", (0, [need(900000, 1)])),
            cluster("research", (0, [need(0, 127)])),
            cluster("train", (300, [need(1000000, 64, same=RACK)])),
        ],
        900,
    )
    _, report = simulate(raw)
    assert need_of(report, "train")["satisfied"] == 64
    pre = report["preemptions"]
    # Each machine is preempted once. Besides train's 64, infer (900000) lost its machine in the
    # rack and in turn takes one from research (0): the cascade of design §8.
    assert len({p["machine"] for p in pre}) == len(pre)
    for_train = [p for p in pre if p["preemptor"] == "train"]
    assert len(for_train) == 64
    assert [p["victim"] for p in pre if p["preemptor"] != "train"] in ([], ["research"])
    freed = {p["machine"] for p in for_train}
    back = [
        a
        for a in report["actions"]
        if a["kind"] == "configure"
        and a["t"] >= 300
        and a["machine"] in freed
        and a["cluster"] == "research"
    ]
    assert back == []


def test_operators_hear_of_upcoming_nodes_and_reclaims():
    """Seed §6 step 7 and §13 step 6: the victim's operator is told which nodes are reclaimed
    and with what grace; the preemptor's operator which nodes are on their way."""
    sim = Simulation(load(EXAMPLES / "preemption-walkthrough.yaml"))
    sim.run()
    heard_a = sim.operators["a"].updates
    heard_b = sim.operators["b"].updates
    reclaims = [r for u in heard_a for r in u.reclaims]
    assert len(reclaims) == 64 and {r.grace_seconds for r in reclaims} == {30.0}
    upcoming_b = {n.machine_id for u in heard_b for n in u.upcoming}
    assert upcoming_b == {r.machine_id for r in reclaims}


# ---- design §6, §9: the coordinator between shards, in virtual time --------------------------


def test_the_simulated_coordinator_moves_free_capacity_then_preempts_across_shards():
    """Same planning as the Coordinator workflow: a shard short of GPUs gets another shard's
    free rack first; once nothing is free anywhere, a strictly higher priority preempts across
    shards with the grace of the gap, and every machine stays owned by exactly one shard."""
    racks = one_per_shard([f"r{i}" for i in range(20)])
    low, high = one_per_shard([f"c{i}" for i in range(20)])
    raw = scenario(
        [bare_metal(rack(racks[0], 40), rack(racks[1], 0))],
        [
            cluster(low, (0, [need(100_000, 36)])),
            # (Its first roll-up asks for nothing: it goes home, not to the rack's shard, as
            # a cluster does whose demand for the rack's machines comes later.)
            cluster(high, (0, []), (60, [need(1_000_000, 2)]), (200, [need(1_000_000, 6)])),
        ],
        900,
        shards=2,
    )
    sim, report = simulate(raw)
    assert report["clusters"][high]["shard"] != report["clusters"][low]["shard"]
    assert need_of(report, high)["satisfied"] == 6
    kinds = [(m["kind"], m["machines"]) for m in report["transfers"]]
    assert kinds[0] == ("speculative", 2)  # the free part of the rack moves first
    preempt = [m for m in report["transfers"] if m["kind"] == "preempt"]
    assert preempt and all(m["grace_seconds"] == 30.0 for m in preempt)
    assert sum(sum(s.machines_by_state().values()) for s in sim.shards) == 40
    assert len(sim.owner) == 40


# ---- design §16: splits, merges and decommissions, in virtual time ----------------------------


def owned_once(sim: Simulation) -> dict[str, int]:
    """Each machine's one owner, checked against the simulator's ownership map."""
    owners: dict[str, list[int]] = {}
    for i, shard in enumerate(sim.shards):
        inv = shard.inventory
        for r in inv.live_rows().tolist():
            owners.setdefault(inv.machine_id(r), []).append(i)
        for mid in [*shard.handoff, *shard.leaving]:
            owners.setdefault(mid, []).append(i)
    assert all(len(s) == 1 for s in owners.values()), owners
    assert {m: s[0] for m, s in owners.items()} == sim.owner
    return sim.owner


def test_a_shard_over_its_cluster_threshold_splits_and_keeps_serving():
    names = ["a", "b", "c", "d"]
    raw = scenario(
        [bare_metal(rack("r1", 12), rack("r2", 12), configure_latency=5)],
        [cluster(n, (0, [need(500_000, 4)])) for n in names],
        600,
        membership={"split_clusters": 3},
    )
    sim, report = simulate(raw)
    assert report["shards"] == 2
    (split,) = [t for t in report["transfers"] if t["kind"] == "split"]
    assert split["donor"] == 0 and split["receiver"] == 1 and len(split["clusters"]) == 2
    owned = owned_once(sim)
    # The moved clusters' 8 machines, and free machines by whole rack up to half or just past
    # it: the 8 free ones all sit on r2 (r1 is full), so they go together.
    assert Counter(owned.values()) == {0: 8, 1: 16}
    for name in names:
        shard = 1 if name in split["clusters"] else 0
        assert report["clusters"][name]["shard"] == shard
        assert need_of(report, name)["satisfied"] == 4
    assert [s.machines_by_state()["CONFIGURED"] for s in sim.shards] == [8, 8]


def test_two_under_used_shards_merge_into_one():
    racks = one_per_shard([f"r{i}" for i in range(20)])
    raw = scenario(
        [bare_metal(*(rack(r, 6) for r in racks))],
        [cluster("a", (0, [need(1, 3)])), cluster("b", (0, [need(1, 2)]))],
        600,
        shards=2,
        membership={"merge_machines": 10, "merge_clusters": 5},
    )
    sim, report = simulate(raw)
    # Machines mid-transition at the first round follow in later ones, then the donor retires.
    merges = [t for t in report["transfers"] if t["kind"] == "merge"]
    assert len({(t["donor"], t["receiver"]) for t in merges}) == 1
    donor, into = merges[0]["donor"], merges[0]["receiver"]
    assert sorted(c for t in merges for c in t["clusters"]) == sorted(
        next(s for s in sim.shards if s.id == donor).moved
    )
    assert set(owned_once(sim).values()) == {into}
    assert sum(sim.shards[donor].machines_by_state().values()) == 0
    assert sim.coordinator.shards == [into]
    assert need_of(report, "a")["satisfied"] == 3 and need_of(report, "b")["satisfied"] == 2


def test_a_decommission_takes_each_shards_proportional_share():
    racks = one_per_shard([f"r{i}" for i in range(20)])
    raw = scenario(
        [bare_metal(rack(racks[0], 20), rack(racks[1], 10), drain_latency=30)],
        [cluster("busy", (0, [need(100_000, 16)]))],
        900,
        shards=2,
        decommissions=[{"at": 300, "provider": "dc-ams", "count": 12, "grace_seconds": 60}],
    )
    sim, report = simulate(raw)
    (dec,) = [t for t in report["transfers"] if t["kind"] == "decommission"]
    assert dec["shares"] == {"0": 8, "1": 4}
    owned = owned_once(sim)
    assert len(owned) == 18
    gone = [m for m in sim.providers["dc-ams"].list(ListFilter()) if m.id not in owned]
    assert len(gone) == 12 and all(m.cluster is None for m in gone)
    assert all(m.state in (MachineState.IDLE, MachineState.SPECULATIVE) for m in gone)


def test_moved_machines_are_not_sent_back_before_the_receiver_uses_them():
    """A machine handed to a shard for its shortfall is idle there until the receiver's next
    cycle; the coordinator must not see it as spare and send it back. (It did: every round
    preempted training's machines for inference and sent the arrivals back as idle, until a
    finished move counted as on its way until the receiver reported again.)"""
    sim = Simulation(load(EXAMPLES / "dev-fleet.yaml"))
    report = sim.run()
    directions: dict[float, set[tuple[int, int]]] = {}
    for t in report["transfers"]:
        directions.setdefault(t["t"], set()).add((t["donor"], t["receiver"]))
    for t, pairs in directions.items():
        assert not any((b, a) in pairs for a, b in pairs), (t, pairs)  # never both ways
    assert len(report["transfers"]) < 10
    assert need_of(report, "inference")["satisfied"] == 3  # after scaling down to 3
    owned_once(sim)
