"""The `bigfleet provider` verbs, BigFleet's gRPC edge towards capacity providers (issue 11):

    provider serve        a reference provider: one simulated provider of a fleet file served
                          over gRPC on real time, its machines, idempotency store and call log
                          in SQLite under --state-dir (bigfleet/edge/provider_server.py)
    provider calls        that call log: every mutating call, and whether it started an
                          operation or repeated one
    provider fence        show or reset the fencing epochs it keeps per shard (fence.py)
    provider conformance  the contract checked against a live provider (bigfleet/edge/
                          conformance/): a pass/fail table, exit 1 if any check fails

None of them talks to Temporal (workers/cli.py imports this module only when `provider` is
chosen).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bigfleet.deployment import ClientTLS
from bigfleet.edge.provider_store import read_calls
from bigfleet.models import ListFilter
from workers.args import bounded_int, need_file, seconds, server_options, server_tls
from workers.errors import CliError
from workers.health import Health, serve_health
from workers.verbs import fence


def register(verbs: argparse._SubParsersAction) -> None:
    """`provider serve`, `provider calls`, `provider conformance` and `provider fence`."""
    p = verbs.add_parser("provider", help="serve, inspect or check a gRPC capacity provider")
    pverbs = p.add_subparsers(dest="what", required=True)

    s = pverbs.add_parser(
        "serve",
        help="serve one simulated provider of a fleet file over gRPC (a reference provider)",
        description="Serve the CapacityProvider gRPC service (and grpc.health.v1) for provider "
        "NAME of the fleet file, on real time. Its machines, idempotency keys and call log are "
        "kept in SQLite under --state-dir: restarted on the same directory, it has every "
        "machine as it left it. Prints one line when listening; runs until SIGINT/SIGTERM.",
    )
    what = s.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--fleet", metavar="FILE", help="fleet file (scenario schema): a simulated provider"
    )
    what.add_argument(
        "--config",
        metavar="FILE",
        help="provider config (kind: ec2 | redfish): a real provider (docs/providers.md)",
    )
    s.add_argument("--provider", metavar="NAME", help="with --fleet: the provider to serve")
    s.add_argument(
        "--listen", required=True, metavar="HOST:PORT", help="where to serve (port 0: any free)"
    )
    s.add_argument("--state-dir", required=True, metavar="DIR", help="where its state is kept")
    server_options(s)
    s.add_argument(
        "--http-host", default="0.0.0.0", metavar="ADDR",
        help="bind address of the health endpoint (default 0.0.0.0)",
    )  # fmt: skip
    s.set_defaults(run=run_serve)

    c = pverbs.add_parser(
        "calls",
        help="the call log of a `provider serve` state dir",
        description="Every mutating call the server answered, oldest first: when, which call, "
        "its idempotency key, the machines, and the outcome (started, repeat, or the refusal's "
        "reason). Readable while the server runs.",
    )
    c.add_argument("--state-dir", required=True, metavar="DIR", help="the server's --state-dir")
    c.add_argument("--json", action="store_true", help="print JSON (a list of calls)")
    c.set_defaults(run=run_calls)

    k = pverbs.add_parser(
        "conformance",
        help="check a live provider against the CapacityProvider contract",
        description="Check the CapacityProvider contract against the provider at ADDRESS and "
        "print a pass/fail table (exit 0: every check passed, 1: any failed). It creates, "
        "configures, drains and deletes a real machine: run it against a test account or a "
        "fresh `bigfleet provider serve`, never production capacity. It fences with its own "
        "shard id, so a running BigFleet is never fenced out.",
    )
    k.add_argument("address", metavar="ADDRESS", help="HOST:PORT of the provider")
    g = k.add_argument_group("TLS (default: plaintext)")
    g.add_argument("--tls-ca", metavar="FILE", help="CA that verifies the provider")
    g.add_argument("--tls-cert", metavar="FILE", help="client certificate (mutual TLS)")
    g.add_argument("--tls-key", metavar="FILE", help="client key")
    g.add_argument("--server-name", metavar="NAME", help="name to check the certificate for")
    k.add_argument(
        "--ack-seconds", type=seconds, default=2.0, metavar="S",
        help="the longest a lifecycle call may take to be acknowledged (default 2)",
    )  # fmt: skip
    k.add_argument(
        "--settle-seconds", type=seconds, default=120.0, metavar="S",
        help="the longest a transition may take to finish (default 120)",
    )  # fmt: skip
    k.add_argument(
        "--shard-id", type=bounded_int("a shard id", 0, 2**63 - 1), metavar="N",
        help="the fencing shard id of the checks (default: 2^40 + 7, no real shard's)",
    )  # fmt: skip
    k.add_argument("--json", action="store_true", help="print JSON")
    k.set_defaults(run=run_conformance)
    fence.register(pverbs)


# ---- serve ------------------------------------------------------------------------------------


def run_serve(args: argparse.Namespace) -> int:
    """`bigfleet provider serve`: serve one provider over gRPC until SIGINT/SIGTERM."""
    # gRPC is imported here, by the two subcommands that use it: `provider calls` (an offline
    # look at a SQLite file) starts without it.
    from bigfleet.edge.provider_server import configured_service, serve_provider, simulated_service

    tls = server_tls(args)
    if args.fleet and not args.provider:
        raise CliError("--fleet needs --provider NAME", code=2)
    try:
        if args.config:
            service = configured_service(args.config, args.state_dir)
        else:
            service = simulated_service(args.fleet, args.provider, args.state_dir)
    except ValueError as err:  # the fleet file, or a state dir of another provider
        raise CliError(str(err), code=2) from None
    except OSError as err:
        raise CliError(f"--state-dir {args.state_dir}: {err}") from None
    machines = len(service.provider.list(ListFilter()))
    try:
        server = serve_provider(service, args.listen, tls, client_names=args.tls_client_name)
    except OSError as err:
        service.store.close()
        raise CliError(str(err)) from None
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    health = Health()
    health.check = lambda: None  # it is listening: ready
    if args.health_port:
        serve_health(args.http_host, args.health_port, health)
    host = args.listen.rsplit(":", 1)[0]
    print(
        f"bigfleet provider: serving {service.provider.name} ({machines} machines) on "
        f"{host}:{server.port} ({'TLS' if tls else 'plaintext'}), state in {args.state_dir}",
        flush=True,
    )
    while not stop.wait(1.0):  # a timeout so signals are seen promptly on every platform
        pass
    server.stop()
    print("bigfleet provider: stopped", flush=True)
    return 0


# ---- calls ------------------------------------------------------------------------------------


def run_calls(args: argparse.Namespace) -> int:
    """`bigfleet provider calls`: the call log of a reference provider's state directory."""
    try:
        calls = read_calls(args.state_dir)
    except (OSError, FileNotFoundError) as err:
        raise CliError(str(err)) from None
    if args.json:
        print(json.dumps(calls, indent=2))
        return 0
    print(render_calls(calls))
    return 0


def render_calls(calls: list[dict[str, Any]]) -> str:
    if not calls:
        return "no calls yet"
    lines = []
    for c in calls:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c["at"]))
        ids = c["machine_ids"]
        machines = (ids[0] or "-") if len(ids) == 1 else f"{len(ids)} machines"
        lines.append(
            f"{when}Z  {c['method']:<9}  {c['outcome']:<19}  {machines}  key {c['key'] or '-'}"
            + (f"  ({c['detail']})" if c["detail"] else "")
        )
    started = sum(c["outcome"] == "started" for c in calls)
    repeats = sum(c["outcome"] == "repeat" for c in calls)
    resets = sum(c["outcome"] == "reset" for c in calls)  # (`provider fence reset`)
    refused = len(calls) - started - repeats - resets
    lines.append(
        f"{len(calls)} calls: {started} started, {repeats} repeats, {refused} refused"
        + (f", {resets} fence resets" if resets else "")
    )
    return "\n".join(lines)


# ---- conformance ------------------------------------------------------------------------------


def run_conformance(args: argparse.Namespace) -> int:
    """`bigfleet provider conformance`: the contract checked against a live provider; exit 1
    if any check fails."""
    from bigfleet.edge import conformance  # (gRPC: see run_serve)

    tls = None
    if args.tls_ca or args.tls_cert or args.tls_key or args.server_name:
        if bool(args.tls_cert) != bool(args.tls_key):
            raise CliError("--tls-cert and --tls-key: give both or neither", code=2)
        for flag in ("tls_ca", "tls_cert", "tls_key"):
            if getattr(args, flag):
                need_file(Path(getattr(args, flag)), "--" + flag.replace("_", "-"))
        tls = ClientTLS(
            ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key, server_name=args.server_name
        )
    options: dict[str, Any] = {
        "ack_seconds": args.ack_seconds,
        "settle_seconds": args.settle_seconds,
    }
    if args.shard_id is not None:
        options["shard_id"] = args.shard_id
    checks = conformance.run(args.address, tls, **options)
    if args.json:
        print(json.dumps(conformance.as_json(args.address, checks), indent=2))
    else:
        print(conformance.render(args.address, checks))
    failed = [c.name for c in checks if c.result == "fail"]
    if failed and not args.json:
        print(f"bigfleet provider conformance: failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0
