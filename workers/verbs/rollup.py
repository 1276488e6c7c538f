"""`bigfleet rollup send`: validate a roll-up file and send it through the roll-up gateway, or
`--direct` to its shard through Temporal.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import sys
import time
from typing import Any

import grpc
import yaml
from pydantic import ValidationError

from activities.wire import shard_workflow_id
from bigfleet.deployment import ClientTLS
from bigfleet.edge.rollup_client import RollupSender, read_token, refusal_text
from bigfleet.inputs import explain
from bigfleet.models import ClusterCapacityNeeds, from_wire
from workers.args import connection_options, shard_options
from workers.errors import CliError
from workers.plumbing import connect, rpc_error, running_shards
from workers.routing import assign_cluster


def register(verbs: argparse._SubParsersAction) -> None:
    """`rollup send FILE`."""
    r = verbs.add_parser("rollup", help="send a cluster's roll-up to its shard")
    rverbs = r.add_subparsers(dest="what", required=True)
    send = rverbs.add_parser(
        "send",
        help="validate a roll-up file and send it through the roll-up gateway",
        description="Validate a ClusterCapacityNeeds roll-up (JSON or YAML) and send it to "
        "the roll-up gateway (`bigfleet gateway`), which authenticates it as its cluster's "
        "and signals it to the cluster's shard. Without `generation` in the file, the current "
        "time in milliseconds is used, so a re-sent file is never ignored as stale. "
        "Administrators with write access to the Temporal namespace may bypass the gateway "
        "with --direct. Exit 2: the file, or the gateway found the roll-up invalid; 1: any "
        "other refusal.",
    )
    send.add_argument("file", metavar="FILE", help="roll-up file, JSON or YAML")
    gw = send.add_argument_group("the gateway")
    gw.add_argument("--gateway", metavar="HOST:PORT", help="the roll-up gateway")
    gw.add_argument(
        "--token-file", metavar="FILE", help="the cluster's bearer token (one word in a file)"
    )
    gw.add_argument("--tls-ca", metavar="FILE", help="CA that verifies the gateway (TLS)")
    gw.add_argument("--tls-cert", metavar="FILE", help="the cluster's client certificate")
    gw.add_argument("--tls-key", metavar="FILE", help="its key")
    gw.add_argument(
        "--tls-server-name", metavar="NAME", help="name to check the gateway's certificate for"
    )
    send.add_argument(
        "--direct",
        action="store_true",
        help="signal the shard through Temporal instead (needs write access to the namespace; "
        "nothing authenticates the cluster): --address, --namespace, --shard, --shards apply",
    )
    send.add_argument(
        "--every",
        type=_seconds,
        metavar="SECONDS",
        help="keep the roll-up alive: send it again every SECONDS, with a newer generation each "
        "time, until Ctrl-C (a shard ages out a roll-up it has not heard again within its "
        "max_silence_seconds, 300 s by default, and reclaims its machines; an operator re-sends "
        "every cycle)",
    )
    send.add_argument(
        "--count", type=int, metavar="N", help="with --every: stop after N sends"
    )
    connection_options(send)
    shard_options(send)
    send.set_defaults(run=run_rollup_send)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be above 0 s, got {text}")
    return value


# ---- roll-ups ---------------------------------------------------------------------------------


def load_rollup(path: str) -> Any:
    """Read and validate a roll-up file; a CliError (exit 2) naming the field if it is bad."""


    try:
        raw = yaml.safe_load(pathlib.Path(path).read_text())
    except OSError as err:
        raise CliError(f"{path}: cannot read: {err.strerror}", code=2) from None
    except yaml.YAMLError as err:
        raise CliError(f"{path}: not valid JSON or YAML: {err}", code=2) from None
    if not isinstance(raw, dict):
        raise CliError(
            f"{path}: a roll-up is a mapping with cluster, generation and needs; "
            f"got {type(raw).__name__}",
            code=2,
        )
    if "generation" not in raw:
        raw = {**raw, "generation": time.time_ns() // 1_000_000}
    try:
        return from_wire(ClusterCapacityNeeds, raw)
    except ValidationError as err:
        raise CliError(f"{path}: invalid roll-up: {explain(err)}", code=2) from None
    except ValueError as err:
        raise CliError(f"{path}: invalid roll-up: {err}", code=2) from None


async def _shard_for(client: Any, args: argparse.Namespace, cluster: str) -> int:
    """`--shard` if given, else the coordinator's assignment (it is started if need be, for
    `--shards` or as many shards as are running)."""

    if args.shard is not None:
        return args.shard
    shards = args.shards or len(await running_shards(client)) or 1
    try:
        return await assign_cluster(client, cluster, shards)
    except Exception as err:
        raise rpc_error(err, f"assigning cluster {cluster} (coordinator)") from None


def run_rollup_send(args: argparse.Namespace) -> int:
    """`bigfleet rollup send FILE`: the file checked first, then sent through the gateway or
    (`--direct`) signalled to the cluster's shard."""
    rollup = load_rollup(args.file)  # before connecting: a bad file never reaches a shard
    if args.direct:
        gateway_only = [f for f in ("gateway", "token_file", "tls_ca", "tls_cert", "tls_key")
                        if getattr(args, f)]
        if gateway_only:
            flags = ", ".join("--" + f.replace("_", "-") for f in gateway_only)
            raise CliError(f"--direct signals through Temporal: {flags} do not apply", code=2)
        return _run(args, rollup, _send_direct)
    if not args.gateway:
        raise CliError(
            "--gateway HOST:PORT: where to send the roll-up (or --direct, with access to the "
            "Temporal namespace)",
            code=2,
        )
    temporal_only = [f for f in ("address", "namespace", "shard", "shards")
                     if getattr(args, f) is not None]
    if temporal_only:
        flags = ", ".join("--" + f for f in temporal_only)
        raise CliError(f"{flags}: only with --direct (the gateway finds the shard)", code=2)
    return _run(args, rollup, _send_via_gateway)


def _run(args: argparse.Namespace, rollup: Any, send: Any) -> int:
    """Send once, or with `--every` again and again until Ctrl-C (or `--count` sends)."""
    if args.count is not None and (args.every is None or args.count < 1):
        raise CliError("--count: a number of sends of at least 1, with --every", code=2)
    if args.every is None:
        return int(asyncio.run(send(args, rollup)))
    if args.every >= KEEP_ALIVE_LIMIT:
        print(
            f"bigfleet rollup send: --every {args.every:g}: at or above max_silence_seconds' "
            f"default ({KEEP_ALIVE_LIMIT:g} s), the roll-up may age out between two sends",
            file=sys.stderr,
        )
    try:
        sent = asyncio.run(keep_sending(args, rollup, send))
    except KeyboardInterrupt:
        return 0
    return 0 if sent else 1


KEEP_ALIVE_LIMIT = 300.0  # a shard's max_silence_seconds by default (bigfleet/needs.py)


async def keep_sending(args: argparse.Namespace, rollup: Any, send: Any) -> int:
    """`send(args, rollup)` every `args.every` seconds, each time with a generation above the
    last (and at least the time in ms, as a file without one gets), `args.count` times or
    until interrupted; the number of sends."""
    sent = 0
    generation = rollup.generation
    while args.count is None or sent < args.count:
        if sent:
            await asyncio.sleep(args.every)
            generation = max(generation + 1, time.time_ns() // 1_000_000)
            rollup = rollup.model_copy(update={"generation": generation})
        await send(args, rollup)
        sent += 1
    return sent


def _gateway_sender(args: argparse.Namespace) -> Any:

    for flag, value in (
        ("--token-file", args.token_file),
        ("--tls-ca", args.tls_ca),
        ("--tls-cert", args.tls_cert),
        ("--tls-key", args.tls_key),
    ):
        if value and not pathlib.Path(value).is_file():
            raise CliError(f"{flag}: no such file {value}", code=2)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise CliError("--tls-cert and --tls-key: give both or neither", code=2)
    tls = None
    if args.tls_ca or args.tls_cert or args.tls_server_name:
        tls = ClientTLS(
            ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key,
            server_name=args.tls_server_name,
        )  # fmt: skip
    token = None
    if args.token_file:
        try:
            token = read_token(args.token_file)
        except (OSError, ValueError) as err:
            raise CliError(f"--token-file: {err}", code=2) from None
    return RollupSender(args.gateway, tls, token)


async def _send_via_gateway(args: argparse.Namespace, rollup: Any) -> int:


    sender = _gateway_sender(args)
    try:
        accepted = await sender.send(rollup)
    except grpc.RpcError as err:
        code = 2 if err.code() == grpc.StatusCode.INVALID_ARGUMENT else 1
        raise CliError(
            f"gateway {args.gateway} refused the roll-up of cluster {rollup.cluster}: "
            f"{refusal_text(err)}",
            code=code,
        ) from None
    finally:
        await sender.close()
    total = sum(n.count for n in rollup.needs)
    print(
        f"sent roll-up of cluster {rollup.cluster} (generation {accepted.generation}, "
        f"{len(rollup.needs)} need(s), {total} machine(s)) through {args.gateway} to shard "
        f"{accepted.shard} ({accepted.workflow_id})"
    )
    return 0


async def _send_direct(args: argparse.Namespace, rollup: Any) -> int:

    client = await connect(args)
    shard = await _shard_for(client, args, rollup.cluster)
    wid = shard_workflow_id(shard)
    try:
        await client.get_workflow_handle(wid).signal("rollup", rollup.model_dump(mode="json"))
    except Exception as err:
        raise rpc_error(err, wid) from None
    total = sum(n.count for n in rollup.needs)
    print(
        f"sent roll-up of cluster {rollup.cluster} (generation {rollup.generation}, "
        f"{len(rollup.needs)} need(s), {total} machine(s)) to {wid} (direct)"
    )
    return 0
