"""`bigfleet operator serve`: a reference cluster operator (SimulatedOperators serving
GenerateBootstrap and Notify, and each cluster's roll-up timeline from a fleet file played
through the roll-up gateway).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import grpc

from bigfleet.deployment import ClientTLS
from bigfleet.edge.operator_server import serve_operators
from bigfleet.edge.rollup_client import RollupSender, read_token, refusal_text
from bigfleet.models import ClusterCapacityNeeds, from_wire
from bigfleet.simulation.fleet import operators as simulated_operators
from workers.args import http_and_log_options, need_file, server_options, server_tls
from workers.dev.operators import Operators
from workers.errors import CliError
from workers.health import Health, serve_health
from workers.plumbing import blocking
from workers.process import install_stop_handlers, load_fleet


def register(verbs: argparse._SubParsersAction) -> None:
    """`operator serve --fleet FILE ...`."""
    o = verbs.add_parser("operator", help="a reference cluster operator (simulated)")
    overbs = o.add_subparsers(dest="what", required=True)
    s = overbs.add_parser(
        "serve",
        help="serve GenerateBootstrap/Notify for a fleet file's clusters and send their "
        "roll-ups through the gateway",
        description="Serve the ClusterOperator gRPC service for CLUSTERS of the fleet file "
        "(simulated operators: cloud-init blobs, kubelet skew from each cluster's "
        "kubelet_version), and play each cluster's `rollups` through the roll-up gateway at "
        "their `at` offsets, re-sending the latest every cycle_seconds. Runs until "
        "SIGINT/SIGTERM.",
    )
    s.add_argument("--fleet", required=True, metavar="FILE", help="fleet file (scenario schema)")
    s.add_argument(
        "--cluster", metavar="NAMES",
        help="comma list of the clusters to serve (default: every cluster of the fleet file)",
    )  # fmt: skip
    s.add_argument("--listen", required=True, metavar="HOST:PORT", help="where to serve")
    s.add_argument(
        "--no-health", action="store_true",
        help="send no node health in the roll-ups (default: each cluster's nodes, the machines "
        "it bootstrapped that BigFleet has not reclaimed)",
    )  # fmt: skip
    s.add_argument(
        "--state-file", metavar="FILE",
        help="keep each cluster's nodes here across restarts (default: in memory only: after a "
        "restart the nodes joined before are missing from the health reports)",
    )  # fmt: skip
    s.add_argument(
        "--clock-file", metavar="FILE",
        help="keep how far the roll-up scripts got here, so that a restart carries on there "
        "instead of replaying them from t = 0 (default: each start begins at t = 0)",
    )  # fmt: skip
    s.add_argument(
        "--record", metavar="FILE",
        help="write each roll-up sent, with its time, as a recording that `bigfleet simulate "
        "FILE --replay` runs (docs/adoption.md)",
    )  # fmt: skip
    s.add_argument(
        "--gateway", metavar="HOST:PORT",
        help="the roll-up gateway to send roll-ups to (default: none are sent)",
    )  # fmt: skip
    c = s.add_argument_group("credentials towards the gateway (one set per cluster)")
    c.add_argument(
        "--tls-dir", metavar="DIR",
        help="client certificates DIR/NAME.pem and DIR/NAME-key.pem per cluster NAME (as "
        "bigfleet/edge/devca.py writes them); the CA from --tls-ca, else DIR/ca.pem",
    )  # fmt: skip
    c.add_argument("--tls-ca", metavar="FILE", help="CA that verifies the gateway (TLS)")
    c.add_argument(
        "--token-dir", metavar="DIR",
        help="bearer tokens: DIR/NAME.token (or DIR/NAME) per cluster NAME",
    )  # fmt: skip
    c.add_argument(
        "--tls-server-name", metavar="NAME", help="name to check the gateway's certificate for"
    )
    server_options(s, "this server's TLS")
    http_and_log_options(s)
    s.set_defaults(run=run_operator_serve)


def gateway_credentials(args: argparse.Namespace, clusters: list[str]) -> dict[str, Any]:
    """Per cluster: (ClientTLS | None, token | None) towards the gateway, every file checked
    now. A CliError (exit 2) naming a missing or bad one."""
    ca: Path | None = None
    if args.tls_ca:
        ca = need_file(Path(args.tls_ca), "--tls-ca")
    elif args.tls_dir:
        ca = need_file(Path(args.tls_dir) / "ca.pem", "--tls-dir (no --tls-ca)")
    creds: dict[str, Any] = {}
    for name in clusters:
        tls = None
        if args.tls_dir:
            d = Path(args.tls_dir)
            cert = need_file(d / f"{name}.pem", f"--tls-dir: cluster {name}'s certificate")
            key = need_file(d / f"{name}-key.pem", f"--tls-dir: cluster {name}'s key")
            tls = ClientTLS(
                ca=str(ca), cert=str(cert), key=str(key), server_name=args.tls_server_name
            )
        elif ca is not None:
            tls = ClientTLS(ca=str(ca), server_name=args.tls_server_name)
        token = None
        if args.token_dir:
            d = Path(args.token_dir)
            path = d / f"{name}.token" if (d / f"{name}.token").is_file() else d / name
            try:
                token = read_token(need_file(path, f"--token-dir: cluster {name}'s token"))
            except (OSError, ValueError) as err:
                raise CliError(f"--token-dir: {err}", code=2) from None
        creds[name] = (tls, token)
    return creds


class OperatorNodes:
    """Each simulated operator's nodes (`SimulatedOperator.nodes`), reported as its roll-up's
    node health; kept in `path` (JSON) across restarts when given, written when they change."""

    def __init__(self, ops: dict[str, Any], path: Path | None) -> None:
        self.ops, self.path = ops, path
        self.saved: dict[str, list[str]] = {}
        if path is not None and path.exists():
            try:
                kept = json.loads(path.read_text())
            except (OSError, ValueError) as err:
                print(f"bigfleet operator: {path} unreadable ({err}): starting with no nodes",
                      file=sys.stderr, flush=True)  # fmt: skip
                kept = {}
            for name, ids in (kept if isinstance(kept, dict) else {}).items():
                if name in ops and isinstance(ids, list):
                    ops[name].rejoin([str(i) for i in ids])
            self.saved = {n: op.node_ids() for n, op in ops.items()}

    def ready(self, cluster: str) -> list[str]:
        ids = self.ops[cluster].node_ids()
        if self.path is not None and self.saved.get(cluster) != ids:
            self.saved[cluster] = ids
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.saved))
            tmp.replace(self.path)
        return ids


def gateway_send(endpoint: str, creds: dict[str, Any]) -> tuple[Any, list[Any]]:
    """The `send` of workers/dev/operators.py through the gateway (one sender per cluster, each
    with its own credentials), and the senders (to close)."""
    senders = {name: RollupSender(endpoint, tls, token) for name, (tls, token) in creds.items()}

    async def send(cluster: str, rollup: dict[str, Any]) -> str:
        try:
            accepted = await senders[cluster].send(from_wire(ClusterCapacityNeeds, rollup))
        except grpc.RpcError as err:
            raise RuntimeError(f"gateway {endpoint}: {refusal_text(err)}") from None
        return f"{accepted.workflow_id} (via the gateway)"

    return send, list(senders.values())


@blocking
async def run_operator_serve(args: argparse.Namespace) -> int:
    """`bigfleet operator serve`: serve the simulated operators of the fleet file's clusters and
    play their roll-ups through the gateway, until SIGINT/SIGTERM."""
    fleet = load_fleet(args.fleet)
    known = [c.name for c in fleet.clusters]
    chosen = [n.strip() for n in (args.cluster or "").split(",") if n.strip()] or known
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise CliError(
            f"--cluster: not in {args.fleet}: {', '.join(unknown)} (it has {', '.join(known)})",
            code=2,
        )
    tls = server_tls(args)
    creds = gateway_credentials(args, chosen) if args.gateway else {}
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    ops = {n: op for n, op in simulated_operators(fleet, fleet.seed).items() if n in chosen}
    try:
        server = serve_operators(ops, args.listen, tls, client_names=args.tls_client_name)
    except OSError as err:
        raise CliError(str(err)) from None
    state = Health()
    state.check = lambda: None
    if args.health_port:
        serve_health(args.http_host, args.health_port, state)
    stop = asyncio.Event()
    install_stop_handlers(stop, signal.SIGINT, signal.SIGTERM)
    host = args.listen.rsplit(":", 1)[0]
    print(
        f"bigfleet operator: serving ClusterOperator for {', '.join(chosen)} on "
        f"{host}:{server.port} ({'TLS' if tls else 'plaintext'})",
        flush=True,
    )
    senders: list[Any] = []
    files: list[Any] = []
    player = played = None
    if args.gateway:
        send, senders = gateway_send(args.gateway, creds)
        how = "mutual TLS" if args.tls_dir else ("tokens" if args.token_dir else "no credentials")
        print(f"  roll-ups through the gateway {args.gateway} ({how})", flush=True)
        if how == "no credentials":
            print("bigfleet operator: warning: the gateway will refuse roll-ups sent without "
                  "credentials (--tls-dir or --token-dir)", file=sys.stderr, flush=True)
        nodes = OperatorNodes(ops, Path(args.state_file) if args.state_file else None)
        health = None if args.no_health else nodes.ready
        clock = Path(args.clock_file) if args.clock_file else None
        played = Operators(
            None, fleet, send=send, only=set(chosen), health=health, clock_file=clock
        )
        if args.record:
            played.send = recording_to(args.record, fleet, send, played.elapsed, files)
        player = asyncio.create_task(played.run(stop))
    try:
        await stop.wait()
    finally:
        stop.set()
        if player is not None:
            await player
        for sender in senders:
            await sender.close()
        for writer, f in files:
            writer.end(played.elapsed() if played is not None else 0.0, "stopped")
            f.close()
        server.stop()
    print("bigfleet operator: stopped", flush=True)
    return 0


def recording_to(path: str, fleet: Any, send: Any, clock: Any, files: list[Any]) -> Any:
    """`send`, recording each roll-up to `path` (bigfleet/simulation/recording.py)."""
    from bigfleet.simulation.recording import RecordingWriter, recorded_send

    try:
        out = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed when the operator stops)
    except OSError as err:
        raise CliError(f"--record {path}: {err.strerror}") from None
    writer = RecordingWriter(out, fleet, fleet.seed, source="operator")
    files.append((writer, out))
    print(f"  recording the roll-ups sent to {path}", flush=True)
    return recorded_send(send, writer, clock)
