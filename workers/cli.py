"""The `bigfleet` console entry point.

It is `bigfleet.cli`'s parser (the offline verbs `bench` and `simulate`) plus the verbs that talk
to Temporal. Those go through the Temporal client only, so they work against any server: the
`bigfleet dev` server, a docker-compose one, a production cluster or Temporal Cloud. The address
and namespace come from `--address` / `--namespace`, else from `TEMPORAL_ADDRESS` /
`TEMPORAL_NAMESPACE` (and the TLS / API-key variables and profiles every Temporal tool reads).

Exit status: 0 done, 1 the server said no (cannot connect, nothing running to signal), 2 bad
input (arguments, a fleet or roll-up file), found before anything is sent.

This module is the list of verbs and main(). Each verbs module registers its own subcommands
and handlers (`register`): `bigfleet worker` in workers/serve.py, `bigfleet dev` in
workers/dev.py, `rollup send`, `status` and `cluster` in workers/verbs.py, `machine history` and
`drain escalate` in workers/machine_verbs.py, `shard ...` and `decommission` in
workers/membership_verbs.py, `audit` in workers/audit_verb.py; `provider serve|calls|conformance`
(which need no Temporal) in workers/provider_verbs.py; `gateway` and `operator serve` in
workers/operator_verbs.py (the gateway itself in workers/gateway.py). The argument types they
share are in workers/args.py, what the verbs share at run time in workers/plumbing.py.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable, Sequence

from bigfleet import cli as core
from workers import (
    audit_verb,
    bench_fleet,
    bench_temporal,
    config_verb,
    dev,
    machine_verbs,
    membership_verbs,
    operator_verbs,
    provider_verbs,
    serve,
    shadow_verb,
    verbs,
)
from workers.plumbing import CliError

# In the order `bigfleet --help` lists them, after the offline verbs.
REGISTRATIONS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    serve.register,  # worker
    dev.register,  # dev
    verbs.register,  # rollup send, status, cluster
    machine_verbs.register,  # machine history, drain escalate
    membership_verbs.register,  # shard add|split|merge|revive, decommission
    audit_verb.register,  # audit
    shadow_verb.register,  # shadow report
    config_verb.register,  # config check
    operator_verbs.register,  # gateway, operator serve
)
# The verbs registered above (a test checks): they leave through os._exit, see main().
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
    "shadow",
    "config",
    "gateway",
    "operator",
)

# Verbs of workers/ that never talk to Temporal: they return from main() like the offline verbs
# of bigfleet.cli.
OFFLINE_REGISTRATIONS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    provider_verbs.register,  # provider serve|calls|conformance
)


def _subparsers(top: argparse.ArgumentParser) -> argparse._SubParsersAction:
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise RuntimeError("bigfleet.cli.parser() has no verbs")


def parser() -> argparse.ArgumentParser:
    top = core.parser()
    subparsers = _subparsers(top)
    for register in (*REGISTRATIONS, *OFFLINE_REGISTRATIONS):
        register(subparsers)
    # `bench temporal` (workers/bench_temporal.py) beside the offline `bench engine|snapshot`.
    bench_temporal.register(_subparsers(subparsers.choices["bench"]))
    bench_fleet.register(_subparsers(subparsers.choices["bench"]))
    return top


# ---- running ----------------------------------------------------------------------------------


# Allocations between young-generation collections (CPython's default is 700).
GC_YOUNG_THRESHOLD = 20_000


def tune_gc() -> None:
    """How BigFleet's processes run Python's cyclic garbage collector (docs/engine.md, "Where
    a moving cycle's time goes"). A decision cycle that moves the fleet allocates ~100 000
    short-lived objects (actions, claims), nearly all freed by reference counting: at the
    default threshold the collector ran ~550 times in one such cycle at 500 000 machines and a
    full collection every few cycles, up to ~100 ms each. Everything alive at start (modules,
    functions, classes) is frozen out of the collector's scans, and young collections run
    every GC_YOUNG_THRESHOLD allocations."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 10, 10)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if argv is None:  # (a process of its own, not a call from a test)
        tune_gc()
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
    if argv is None and (args.verb in TEMPORAL_VERBS or getattr(args, "exits", False)):
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


if __name__ == "__main__":
    sys.exit(main())
