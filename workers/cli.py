"""The `bigfleet` console entry point.

It is `bigfleet.cli`'s parser (the offline verbs `bench`, `simulate` and `plan`) plus the verbs
of workers/, most of which talk to Temporal. Those go through the Temporal client only, so they
work against any server: the `bigfleet dev` server, a docker-compose one, a production cluster
or Temporal Cloud. The address and namespace come from `--address` / `--namespace`, else from
`TEMPORAL_ADDRESS` / `TEMPORAL_NAMESPACE` (and the TLS / API-key variables and profiles every
Temporal tool reads).

Exit status: 0 done, 1 the server said no (cannot connect, nothing running to signal), 2 bad
input (arguments, a fleet or roll-up file), found before anything is sent.

This module is the table of verbs and main(). Each verb names the module of workers/verbs/ (or
workers/bench/) that registers its subcommands and handlers (`register`); a module is imported
only when one of its verbs is chosen (`LazyVerbs`), so `bigfleet --help` and the offline verbs
load no Temporal, gRPC or pydantic. The argument types the verbs share are in workers/args.py,
what they share at run time in workers/plumbing.py.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from bigfleet import cli as core
from workers.errors import CliError

# (verb, the module that registers it, its line in `bigfleet --help`), in the order `bigfleet
# --help` lists them after the offline verbs. A test checks each line is the module's own.
VERBS: tuple[tuple[str, str, str], ...] = (
    ("worker", "workers.verbs.worker", "run BigFleet's workers against a Temporal server"),
    (
        "dev",
        "workers.verbs.dev",
        "BigFleet on a local Temporal dev server, with reference providers and operators",
    ),
    ("rollup", "workers.verbs.rollup", "send a cluster's roll-up to its shard"),
    ("status", "workers.verbs.status", "what each shard holds: machines, needs, shortfalls"),
    ("cluster", "workers.verbs.status", "one cluster as its shard sees it"),
    ("machine", "workers.verbs.machine", "one machine's life"),
    ("drain", "workers.verbs.machine", "act on a running drain"),
    ("shard", "workers.verbs.membership", "fleet membership: add, split, merge or revive shards"),
    (
        "decommission",
        "workers.verbs.membership",
        "take machines out of the fleet, proportionally across shards",
    ),
    (
        "audit",
        "workers.verbs.audit",
        "compare every provider's machines with every shard's (after an incident)",
    ),
    ("shadow", "workers.verbs.shadow", "shards in shadow mode: would-be against actual"),
    ("rollout", "workers.verbs.rollout", "a new build of the shard workers, shard by shard"),
    ("config", "workers.verbs.config", "check a deployment config"),
    (
        "gateway",
        "workers.verbs.gateway",
        "serve the roll-up gateway: cluster operators send roll-ups here over gRPC",
    ),
    ("operator", "workers.verbs.operator", "a reference cluster operator (simulated)"),
)
# The verbs above (a test checks): they leave through os._exit, see main().
TEMPORAL_VERBS = tuple(verb for verb, _, _ in VERBS)

# Verbs of workers/ that never talk to Temporal: they return from main() like the offline verbs
# of bigfleet.cli.
OFFLINE_VERBS: tuple[tuple[str, str, str], ...] = (
    ("provider", "workers.verbs.provider", "serve, inspect or check a gRPC capacity provider"),
)

# `bench temporal` and `bench fleet`, beside the offline `bench engine|snapshot`.
BENCH_VERBS: tuple[tuple[str, str, str], ...] = (
    (
        "temporal",
        "workers.bench.temporal",
        "machine transitions per second through Temporal vs the server's ceiling",
    ),
    (
        "fleet",
        "workers.bench.fleet",
        "a realistic large run: many clusters' roll-ups to a fleet's shards, for minutes",
    ),
)


def register_module(module: str, verbs: argparse._SubParsersAction) -> None:
    """Import `module` and let it register its verbs on `verbs`."""
    importlib.import_module(module).register(verbs)


# Each verbs module's registration, in the order of VERBS (what `bigfleet --help` would list).
REGISTRATIONS: tuple[Callable[[argparse._SubParsersAction], None], ...] = tuple(
    functools.partial(register_module, module)
    for module in dict.fromkeys(module for _, module, _ in VERBS)
)


class LazyVerbs(argparse._SubParsersAction):
    """Subcommands of which some are built only when chosen: until then a placeholder stands
    for each in `--help` and in the choices (`add_lazy`). Choosing one imports the module that
    registers it (`register(verbs)`), which replaces the placeholders of all its verbs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.modules: dict[str, str] = {}  # verb -> its module, while a placeholder stands

    def add_lazy(self, verb: str, module: str, help: str) -> None:
        self.add_parser(verb, help=help)
        self.modules[verb] = module

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if name in self.modules:  # its module registers it: the placeholder goes
            del self._name_parser_map[name]
            kwargs.pop("help", None)  # (listed already, by the placeholder)
        return super().add_parser(name, **kwargs)

    def build(self, verb: str) -> None:
        """Register `verb` for real, if a placeholder stands for it."""
        module = self.modules.get(verb)
        if module is None:
            return
        register_module(module, self)
        self.modules = {v: m for v, m in self.modules.items() if m != module}

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        self.build(values[0])
        super().__call__(parser, namespace, values, option_string)


class VerbParser(argparse.ArgumentParser):
    """An ArgumentParser whose subcommands are LazyVerbs (and so are its subcommands')."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", LazyVerbs)


def _subparsers(top: argparse.ArgumentParser) -> LazyVerbs:
    for action in top._actions:
        if isinstance(action, LazyVerbs):
            return action
    raise RuntimeError("bigfleet.cli.parser() has no verbs")


def parser() -> argparse.ArgumentParser:
    """`bigfleet`'s parser: the offline verbs of bigfleet.cli, then those of VERBS,
    OFFLINE_VERBS and (under `bench`) BENCH_VERBS, each module imported when its verb is
    parsed."""
    top = core.parser(VerbParser)
    subparsers = _subparsers(top)
    for verb, module, help in (*VERBS, *OFFLINE_VERBS):
        subparsers.add_lazy(verb, module, help)
    bench = _subparsers(subparsers.choices["bench"])
    for verb, module, help in BENCH_VERBS:
        bench.add_lazy(verb, module, help)
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
    """`bigfleet ARGS`: parse, run the verb's handler, and say what failed in one line; the
    exit status."""
    top = parser()
    args, extra = top.parse_known_args(argv)
    if extra:  # an unknown flag: the sub-command's usage, not the top level's
        leaf(top, args).error(f"unrecognized arguments: {' '.join(extra)}")
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


def leaf(top: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub-)sub-command parser that `args` were parsed by: `rollup send`'s, say."""
    at = top
    while True:
        subs = [a for a in at._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return at
        chosen = getattr(args, subs[0].dest or "", None)
        if chosen not in subs[0].choices:
            return at
        at = subs[0].choices[chosen]


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's own last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
