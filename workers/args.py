"""The argument types and option groups the `bigfleet` verbs share: each verbs module builds its
own parsers (its `register`) from these. Nothing here loads Temporal.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from activities.wire.shard import BUILD_PATTERN
from bigfleet.deployment import ServerTLS
from workers.errors import CliError

# Kept in step with workers.worker.ROLES (a test checks); not imported so that the offline verbs
# start without loading Temporal.
ROLES = ("shards", "transitions", "providers")
DEFAULT_METRICS_PORT = 9464


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


def build_name(text: str) -> str:
    """A build of the shard workers (workflows/shard_builds.py): it names a task queue."""
    if text and not re.match(BUILD_PATTERN, text):  # ("": the default build)
        raise argparse.ArgumentTypeError(
            f"not a build name: {text!r} (1-63 letters, digits, '.', '_' or '-', starting with "
            "a letter or digit)"
        )
    return text


# ---- option groups ----------------------------------------------------------------------------


def connection_options(p: argparse.ArgumentParser) -> None:
    """`--address` and `--namespace`, in a "Temporal connection" group."""
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


def shard_options(p: argparse.ArgumentParser) -> None:
    """`--shard` and `--shards`: which shard serves a cluster, if the coordinator cannot say."""
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


def server_options(p: argparse.ArgumentParser, tls_title: str = "TLS") -> None:
    """What every gRPC server of ours takes: its TLS (certificates by path) and its health
    endpoint (workers/health.py)."""
    t = p.add_argument_group(tls_title)
    t.add_argument("--tls-cert", metavar="FILE", help="server certificate (with --tls-key)")
    t.add_argument("--tls-key", metavar="FILE", help="server key")
    t.add_argument(
        "--tls-client-ca", metavar="FILE", help="require client certificates signed by it"
    )
    t.add_argument(
        "--tls-client-name", metavar="NAMES", type=lambda s: [n for n in s.split(",") if n],
        default=[],
        help="with --tls-client-ca: only clients whose certificate names one of NAMES (comma "
        "list; its common name or a DNS name) may call, e.g. bigfleet-worker",
    )  # fmt: skip
    p.add_argument(
        "--health-port", type=port, default=0, metavar="N",
        help="/healthz and /readyz on N (default 0: none)",
    )  # fmt: skip


def need_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise CliError(f"{what}: no such file {path}", code=2)
    return path


def server_tls(args: argparse.Namespace) -> Any:
    """The ServerTLS of `server_options`' flags, checked; None for plaintext."""
    if bool(args.tls_cert) != bool(args.tls_key):
        raise CliError("--tls-cert and --tls-key: give both or neither", code=2)
    if not args.tls_cert:
        if args.tls_client_ca:
            raise CliError("--tls-client-ca needs --tls-cert and --tls-key", code=2)
        return None
    if args.tls_client_name and not args.tls_client_ca:
        raise CliError("--tls-client-name needs --tls-client-ca", code=2)
    for flag in ("tls_cert", "tls_key", "tls_client_ca"):
        value = getattr(args, flag)
        if value:
            need_file(Path(value), "--" + flag.replace("_", "-"))
    return ServerTLS(cert=args.tls_cert, key=args.tls_key, client_ca=args.tls_client_ca)


def http_and_log_options(p: argparse.ArgumentParser) -> None:
    """`--http-host` and `--log-level`, of the servers that log and serve health/metrics."""
    p.add_argument(
        "--http-host", default="0.0.0.0", metavar="ADDR",
        help="bind address of the health and metrics endpoints (default 0.0.0.0)",
    )  # fmt: skip
    p.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )  # fmt: skip


def describe_tls(tls: Any) -> str:
    """How a connection is secured, in a word or two: plaintext, TLS or mutual TLS."""
    if tls is None:
        return "plaintext"
    return "mutual TLS" if tls.cert else "TLS"
