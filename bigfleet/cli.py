"""`bigfleet` command line: one verb per job people run."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .simulation.scenario import Scenario


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--sizes: expected numbers like 5000,50000: {text!r}"
        ) from None
    if not sizes or any(s <= 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"--sizes: expected positive numbers: {text!r}")
    return sizes


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number: {text!r}")
    return value


def _factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number: {text!r}")
    return value


def _shards(text: str) -> int:
    from .simulation.scenario import shard_count

    try:
        return shard_count(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"expected a number of shards, 1..64: {text!r}: {err}"
        ) from None


def _bench_engine(args: argparse.Namespace) -> int:
    if args.against is not None:
        from . import bench_against

        try:
            found = bench_against.run(args.against, args.sizes, seed=args.seed, cycles=args.cycles)
        except ValueError as e:
            print(f"bigfleet bench engine: {e}", file=sys.stderr)
            return 2
        print(json.dumps(found) if args.json else bench_against.render(found))
        return 0
    from .bench import render, run

    result = run(args.sizes, args.reference_max, seed=args.seed, phases=args.phases)
    print(json.dumps(result) if args.json else render(result))
    return 0


def _bench_coordinator(args: argparse.Namespace) -> int:
    from .bench_coordinator import render, run

    result = run(args.shards, groups=args.groups, profiles=args.profiles, seed=args.seed)
    print(json.dumps(result) if args.json else render(result))
    return 0


def _bench_snapshot(args: argparse.Namespace) -> int:
    from .bench_snapshot import render, run

    result = run(args.sizes, seed=args.seed)
    print(json.dumps(result) if args.json else render(result))
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from .simulation.baseline import load_quotas
    from .simulation.compare import compare, render_comparison
    from .simulation.replay import recording_of, run_one
    from .simulation.report import render_text
    from .simulation.scenario import ScenarioError, load, on_shards
    from .simulation.trace_mapping import MappingError
    from .simulation.traces import TraceError

    try:
        recording = recording_of(args) if args.replay else None
        scenario = load(args.scenario) if recording is None else recording.demand_scenario()
        quotas = load_quotas(args.quotas) if args.quotas else None
    except ScenarioError as err:
        print(f"bigfleet simulate: {err}", file=sys.stderr)
        return 2
    if recording is not None and args.seed is None:
        args.seed = recording.seed
    if args.record and (args.compare or args.replay):
        print("bigfleet simulate: --record is for a plain run of a scenario", file=sys.stderr)
        return 2
    if args.shards is not None:
        scenario = on_shards(scenario, args.shards)
    if args.compare == "shards":
        return _compare_shards(args, scenario)
    if args.split == "quotas" and quotas is None:
        print("bigfleet simulate: --split quotas needs --quotas FILE", file=sys.stderr)
        return 2
    if args.equal_service and args.compare != "per-cluster":
        print("bigfleet simulate: --equal-service needs --compare per-cluster", file=sys.stderr)
        return 2
    if args.equal_service and args.split == "quotas":
        print(
            "bigfleet simulate: --equal-service adds racks, which given --quotas do not "
            "cover; use --split peak or mean",
            file=sys.stderr,
        )
        return 2
    try:
        if args.compare:
            try:
                result = compare(scenario, args.seed, args.split, quotas, args.cloud_quota)
            except ScenarioError as err:
                print(f"bigfleet simulate: {args.quotas}: {err}", file=sys.stderr)
                return 2
            if args.equal_service:
                from .simulation.plan import equal_service

                result["equal_service"] = equal_service(
                    scenario,
                    result,
                    seed=args.seed,
                    split=args.split,
                    max_factor=args.max_factor,
                    max_runs=args.equal_service_runs,
                )
            runs = [("BigFleet", result["bigfleet"]), ("per-cluster", result["per_cluster"])]
            said = [result["headline"]["text"], result["verdict"]["text"]]
            text = render_comparison(result)
        else:
            result = run_one(args, scenario, recording)
            runs = [("BigFleet", result)]
            said = []
            text = render_text(result, log_lines=args.log_lines)
    except (MappingError, TraceError) as err:  # a trace or its mapping the scenario names
        print(f"bigfleet simulate: {args.scenario}: {err}", file=sys.stderr)
        return 2
    if args.html:
        from .simulation.html import render_html

        with open(args.html, "w", encoding="utf-8") as page:
            page.write(render_html(runs, title=scenario.name, verdict=said))
    print(json.dumps(result) if args.json else text)
    return 0


def _compare_shards(args: argparse.Namespace, scenario: Scenario) -> int:
    """`simulate --compare shards`: the fleet on 1 shard and on --shards (or the file's) N."""
    from .simulation.compare_shards import compare_shards, render_shard_comparison
    from .simulation.trace_mapping import MappingError
    from .simulation.traces import TraceError

    shards = scenario.shards
    if shards == 1:
        print(
            "bigfleet simulate: --compare shards needs --shards N with N >= 2 (or a scenario "
            "with shards: 2 or more) to compare with one shard",
            file=sys.stderr,
        )
        return 2
    for flag, given in (
        ("--equal-service", args.equal_service),
        ("--quotas", args.quotas),
        ("--split", args.split != "peak"),
        ("--cloud-quota", args.cloud_quota != "split"),
    ):
        if given:
            print(f"bigfleet simulate: {flag} is for --compare per-cluster", file=sys.stderr)
            return 2
    try:
        result = compare_shards(scenario, args.seed, shards)
    except (MappingError, TraceError) as err:  # a trace or its mapping the scenario names
        print(f"bigfleet simulate: {args.scenario}: {err}", file=sys.stderr)
        return 2
    if args.html:
        from .simulation.html import render_html

        runs = [("1 shard", result["one_shard"]), (f"{shards} shards", result["sharded"])]
        with open(args.html, "w", encoding="utf-8") as page:
            page.write(render_html(runs, title=scenario.name, verdict=[result["headline"]["text"]]))
    print(json.dumps(result) if args.json else render_shard_comparison(result))
    return 0


def _plan(args: argparse.Namespace) -> int:
    from .simulation.objectives import ObjectiveError, parse_objective
    from .simulation.plan import plan, render_plan
    from .simulation.scenario import ScenarioError, load, on_shards
    from .simulation.trace_mapping import MappingError
    from .simulation.traces import TraceError

    try:
        scenario = load(args.scenario)
        objectives = [parse_objective(text) for text in args.slo]
    except (ScenarioError, ObjectiveError) as err:
        print(f"bigfleet plan: {err}", file=sys.stderr)
        return 2
    if args.shards is not None:
        scenario = on_shards(scenario, args.shards)
    try:
        result = plan(
            scenario,
            objectives,
            seed=args.seed,
            split=args.split,
            max_factor=args.max_factor,
            max_runs=args.max_runs,
            by=args.by,
            jobs=args.jobs,
        )
    except (MappingError, TraceError) as err:  # a trace or its mapping the scenario names
        print(f"bigfleet plan: {args.scenario}: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result) if args.json else render_plan(result))
    return 0


def parser(
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
) -> argparse.ArgumentParser:
    """The offline verbs' parser; workers/cli.py adds the rest (its own `parser_class` builds
    their parsers only when chosen)."""
    top = parser_class(prog="bigfleet", description="Fleet-level autoscaler")
    verbs = top.add_subparsers(dest="verb", required=True)
    bench = verbs.add_parser("bench", help="measure BigFleet's speed and memory")
    what = bench.add_subparsers(dest="what", required=True)
    engine = what.add_parser("engine", help="decision-cycle time: fast engine vs reference")
    engine.add_argument("--sizes", type=_sizes, default=[5000, 50000, 500000])
    engine.add_argument(
        "--reference-max",
        type=int,
        default=50000,
        help="largest fleet the (slow, O(needs × machines)) reference engine is run on",
    )
    engine.add_argument("--seed", type=int, default=7)
    engine.add_argument("--json", action="store_true", help="print one JSON object")
    engine.add_argument(
        "--phases",
        action="store_true",
        help="also time each part of the fast engine's churn and arrival cycles",
    )
    engine.add_argument(
        "--against",
        metavar="REV",
        help="instead: churn cycles of this checkout's engine beside git revision REV's, in one "
        "process, alternating (CPU time per cycle; immune to a slow hour)",
    )
    engine.add_argument(
        "--cycles",
        type=_positive,
        default=9,
        help="with --against: churn cycles of each (more: a surer verdict on a noisy machine)",
    )
    engine.set_defaults(run=_bench_engine)
    snap = what.add_parser(
        "snapshot", help="a shard's state at continue-as-new: size, encode/decode time, parts"
    )
    snap.add_argument("--sizes", type=_sizes, default=[5000, 50000, 500000])
    snap.add_argument("--seed", type=int, default=7)
    snap.add_argument("--json", action="store_true", help="print one JSON object")
    snap.set_defaults(run=_bench_snapshot)
    coord = what.add_parser(
        "coordinator", help="one coordinator planning round on synthetic shard reports"
    )
    coord.add_argument("--shards", type=_sizes, default=[10, 30, 100])
    coord.add_argument("--groups", type=_positive, default=128, help="elastic groups a shard")
    coord.add_argument("--profiles", type=_positive, default=20, help="instance types")
    coord.add_argument("--seed", type=int, default=7)
    coord.add_argument("--json", action="store_true", help="print one JSON object")
    coord.set_defaults(run=_bench_coordinator)

    sim = verbs.add_parser("simulate", help="run a scenario in virtual time and report")
    sim.add_argument("scenario", help="scenario YAML file (see examples/)")
    sim.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    sim.add_argument("--json", action="store_true", help="print the report as one JSON object")
    sim.add_argument("--log-lines", type=int, default=20, help="action-log lines in the text")
    sim.add_argument(
        "--shards",
        type=_shards,
        metavar="N",
        help="run on N shards (1..64), overriding the scenario's shards:",
    )
    sim.add_argument(
        "--compare",
        choices=["per-cluster", "shards"],
        help="also run the same demand as every cluster autoscaling alone (per-cluster), or "
        "the same fleet on one shard beside --shards N (shards), and compare",
    )
    sim.add_argument(
        "--split",
        choices=["peak", "mean", "quotas"],
        default="peak",
        help="how --compare splits racks and reserved instances between the clusters",
    )
    sim.add_argument(
        "--cloud-quota",
        choices=["split", "each"],
        default="split",
        help="--compare: split the cloud quota between the clusters like the racks (both runs "
        "can buy as much), or give each cluster the whole quota (its own account)",
    )
    sim.add_argument(
        "--quotas", help="YAML: cluster -> {PROVIDER/RACK or PROVIDER/TYPE/ZONE: machines}"
    )
    sim.add_argument(
        "--equal-service",
        action="store_true",
        help="with --compare: also find the cheapest per-cluster fleet (racks of the scenario's "
        "kinds) that serves every band >= 500000 at least as well as BigFleet did",
    )
    sim.add_argument(
        "--equal-service-runs",
        type=_positive,
        default=16,
        help="with --equal-service: at most this many baseline simulations (default 16)",
    )
    sim.add_argument(
        "--max-factor",
        type=_factor,
        default=2.0,
        help="with --equal-service: up to this many times the scenario's racks of each kind",
    )
    sim.add_argument("--html", metavar="FILE", help="also write the report as one HTML page")
    sim.add_argument(
        "--record",
        metavar="FILE",
        help="write what the run's fleet received (its roll-ups, with their times) and what it "
        "decided, for `--replay` (docs/adoption.md)",
    )
    sim.add_argument(
        "--record-bytes", type=_positive, default=256 * 1024 * 1024, metavar="N",
        help="--record: at most this many bytes (then the recording ends, marked truncated)",
    )
    sim.add_argument(
        "--replay",
        action="store_true",
        help="SCENARIO is a recording (--record): deliver its roll-ups again to its fleet; the "
        "report says whether every decision was the recorded one. With --compare, its demand "
        "is compared (re-sent as the simulator does: close to, not exactly, the recording)",
    )
    sim.add_argument(
        "--fleet",
        metavar="FILE",
        help="--replay of a live fleet's recording directory (`bigfleet dev --record-shards`, "
        "a deployment's `record: true`): the fleet file to replay it on",
    )
    sim.set_defaults(run=_simulate)

    planner = verbs.add_parser(
        "plan", help="the cheapest fixed fleet meeting service objectives, vs per-cluster"
    )
    planner.add_argument("scenario", help="scenario YAML file (its racks are the starting point)")
    planner.add_argument(
        "--slo",
        action="append",
        required=True,
        metavar="BAND:served=F,p99=S",
        help="an objective per priority band, e.g. 900000:served=0.99,p99=600 (repeatable)",
    )
    planner.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    planner.add_argument(
        "--shards",
        type=_shards,
        metavar="N",
        help="BigFleet's runs on N shards (1..64), overriding the scenario's shards:",
    )
    planner.add_argument("--split", choices=["peak", "mean"], default="peak")
    planner.add_argument(
        "--max-factor",
        type=_factor,
        default=2.0,
        help="search up to this many times the scenario's racks of each kind",
    )
    planner.add_argument(
        "--by",
        choices=["machine", "rack"],
        default="machine",
        help="count owned capacity by machine (default; the last rack trimmed) or whole racks",
    )
    planner.add_argument(
        "--max-runs",
        type=_positive,
        default=80,
        help="at most this many simulations for each of BigFleet and per-cluster (default "
        "80); a search cut short says so and what it did not search",
    )
    planner.add_argument(
        "--jobs",
        type=_positive,
        default=os.cpu_count() or 1,
        help="run BigFleet's search and the per-cluster one in parallel processes (up to 2, "
        "and no more than the CPUs; default: the CPUs); 1: one after the other. The plan is "
        "the same either way",
    )
    planner.add_argument("--json", action="store_true", help="print one JSON object")
    planner.set_defaults(run=_plan)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
