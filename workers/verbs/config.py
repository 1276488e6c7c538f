"""`bigfleet config check FILE`: read a deployment config as the worker and the gateway will,
and say what it sets up, or every bad field (exit 2). Offline: it talks to nothing."""

from __future__ import annotations

import argparse
from pathlib import Path

from bigfleet.deployment import Deployment, DeploymentError, load, load_yaml
from workers.args import describe_tls
from workers.errors import CliError


def register(verbs: argparse._SubParsersAction) -> None:
    """`config check FILE`."""
    c = verbs.add_parser("config", help="check a deployment config")
    sub = c.add_subparsers(dest="config_verb", required=True, metavar="check")
    check = sub.add_parser(
        "check",
        help="validate a deployment config",
        description="Validate a deployment config (bigfleet/deployment.py; docs/operations.md, "
        "'Your own providers and operators') and print what it sets up.",
    )
    check.add_argument("file", metavar="FILE")
    check.add_argument(
        "--skip-files",
        action="store_true",
        help="do not require the certificate, key and token files it names to exist here",
    )
    check.set_defaults(run=run_check)


def run_check(args: argparse.Namespace) -> int:
    """`bigfleet config check FILE`: what the config sets up, or every bad field (exit 2)."""
    try:
        if args.skip_files:
            dep = load_yaml(Path(args.file), Deployment, "deployment config")
        else:
            dep = load(args.file)
    except DeploymentError as err:
        raise CliError(str(err), code=2) from None
    print(
        f"{args.file}: deployment {dep.name}: {dep.shards} shard(s), "
        f"cycle {dep.cycle_seconds:g} s"
    )
    for p in dep.providers:
        rate = f", {p.calls_per_second:g} calls/s" if p.calls_per_second else ""
        print(f"  provider {p.name}: {p.endpoint} ({describe_tls(p.tls)}, deadline "
              f"{p.deadline_seconds:g} s{rate})")
    ops = dep.operators
    for c in ops.clusters:
        print(f"  operator of {c.cluster}: {c.endpoint} ({describe_tls(ops.tls)})")
    if ops.template:
        print(f"  operators of other clusters: {ops.template} ({describe_tls(ops.tls)})")
    if not ops.clusters and not ops.template:
        print("  no operators: the gateway will refuse every roll-up")
    gw = dep.gateway
    auth = []
    if gw.tls is not None and gw.tls.client_ca:
        auth.append("client certificates")
    if gw.tokens:
        auth.append(f"tokens of {len(gw.tokens)} cluster(s)")
    print(f"  gateway: {gw.listen} ({'TLS' if gw.tls else 'plaintext'}; authenticates by "
          f"{' and '.join(auth) or 'nothing: every roll-up will be refused'})")
    return 0
