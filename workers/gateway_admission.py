"""Who is sending a roll-up to the gateway, and what a sender may hold (workers/gateway.py's
first two checks): the sender authenticated from the call's headers and TLS handshake, before
its body is read; its slot among the roll-ups in flight, per credential, per peer address (and
its connections) and in all (gateway.limits); gRPC's own bounds of a connection; and refusals
logged without a line for each of a flood."""

from __future__ import annotations

import hmac
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from bigfleet.deployment import Deployment, GatewayLimits, hash_token
from bigfleet.edge.errors import refusal
from bigfleet.edge.rollup_client import read_token
from bigfleet.v1 import machine_pb2 as mpb
from workers.errors import CliError

log = logging.getLogger("bigfleet.gateway")
MAX_ROLLUP_BYTES = 1024 * 1024

class Refused(Exception):
    """A roll-up the gateway will not take: the metric's outcome and the status to answer
    (with an ErrorInfo of `reason`, or a bare `code`)."""

    def __init__(
        self,
        outcome: str,
        reason: int | None,
        message: str,
        code: grpc.StatusCode | None = None,
        **fields: Any,
    ) -> None:
        super().__init__(message)
        self.outcome = outcome
        if reason is not None:
            self.status = refusal(reason, message, **fields)
        else:
            assert code is not None
            self.status = (code, message, ())


def shown(text: str, limit: int = 80) -> str:
    """A sender's string in a message: quoted, and cut (it may be up to 1 MB of anything)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def server_options(limits: GatewayLimits) -> list[tuple[str, Any]]:
    """gRPC's own bounds of a connection, from gateway.limits."""

    def ms(seconds: float) -> int:
        return max(1, round(seconds * 1000))

    return [
        ("grpc.max_receive_message_length", MAX_ROLLUP_BYTES),
        ("grpc.max_send_message_length", 64 * 1024),
        ("grpc.max_metadata_size", 16 * 1024),
        ("grpc.max_concurrent_streams", limits.streams_per_connection),
        ("grpc.server_handshake_timeout_ms", ms(limits.handshake_seconds)),
        ("grpc.max_connection_idle_ms", ms(limits.idle_seconds)),
        ("grpc.max_connection_age_ms", ms(limits.connection_age_seconds)),
        # A call in flight when its connection is too old may finish (it is bounded too).
        ("grpc.max_connection_age_grace_ms", ms(limits.receive_seconds + 30)),
        ("grpc.keepalive_time_ms", 30_000),  # the gateway's pings: a dead peer is let go
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.keepalive_permit_without_calls", 0),  # a client's pings with no call are bad
        ("grpc.http2.min_ping_interval_without_data_ms", ms(limits.min_ping_interval_seconds)),
        ("grpc.http2.max_ping_strikes", 2),  # bad pings before the connection is closed
    ]


# ---- who is sending ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenTable:
    """(cluster, SHA-256 of its token) for every token of the config, files read now."""

    entries: tuple[tuple[str, str], ...]

    @classmethod
    def load(cls, dep: Deployment) -> TokenTable:
        entries = []
        for t in dep.gateway.tokens:
            if t.sha256 is not None:
                entries.append((t.cluster, t.sha256))
            else:
                assert t.file is not None
                try:
                    entries.append((t.cluster, hash_token(read_token(t.file))))
                except (OSError, ValueError) as err:
                    raise CliError(f"gateway.tokens ({t.cluster}): {err}", code=2) from None
        return cls(tuple(entries))

    def clusters_of(self, token: str) -> set[str]:
        """The clusters whose token this is; every entry is compared, in constant time each."""
        presented = hash_token(token)
        found = set()
        for cluster, expected in self.entries:
            if hmac.compare_digest(expected, presented):
                found.add(cluster)
        return found

    def has(self, cluster: str) -> bool:
        return any(c == cluster for c, _ in self.entries)


def bearer_token(context: Any) -> str | None:
    """The token of `authorization: Bearer TOKEN`; None without the header. Refused if the
    header is there but is not a bearer token."""
    values = [v for k, v in context.invocation_metadata() or () if k.lower() == "authorization"]
    if not values:
        return None
    scheme, _, token = str(values[0]).strip().partition(" ")
    if len(values) > 1 or scheme.lower() != "bearer" or not token.strip():
        raise Refused(
            "unauthenticated",
            mpb.UNAUTHENTICATED,
            "authorization: expected one 'Bearer TOKEN' header",
        )
    return token.strip()


# ---- what a sender may hold -------------------------------------------------------------------


@dataclass(frozen=True)
class Sender:
    """Who a call is from, as its headers and TLS handshake say (before its body is read)."""

    by_token: frozenset[str]  # the clusters of its bearer token
    by_cert: frozenset[str]  # the names of its client certificate
    peer: str  # gRPC's peer: "ipv4:10.0.0.7:53211", "ipv6:%5B::1%5D:53211", "unix:/path"

    @property
    def credential(self) -> str:
        """What the per-cluster limit counts: the clusters the sender authenticated as."""
        return ",".join(sorted(self.by_token | self.by_cert))

    @property
    def address(self) -> str:
        """The peer's address without its port (a connection's port tells connections apart)."""
        kind, _, rest = self.peer.partition(":")
        if kind in ("ipv4", "ipv6"):
            return rest.rpartition(":")[0] or rest
        return self.peer


class Slots:
    """Roll-ups in flight, counted per credential, per peer address (and its connections),
    and in all (gateway.limits); a slot is taken once the sender is authenticated and given
    back when its call ends."""

    def __init__(self, limits: GatewayLimits) -> None:
        self.limits = limits
        self.total = 0
        self.per_credential: Counter[str] = Counter()
        self.per_address: Counter[str] = Counter()
        self.connections: dict[str, Counter[str]] = {}  # address -> peer -> roll-ups

    def take(self, sender: Sender) -> Callable[[], None]:
        """A slot for `sender` (call what it returns to give it back); Refused (over_limit,
        RESOURCE_EXHAUSTED, naming the limit) if a limit is reached: the sender's own first."""
        lim, who, address = self.limits, sender.credential, sender.address
        connections = self.connections.get(address, Counter())
        full = [
            (self.per_credential[who] >= lim.sends_per_cluster, "sends_per_cluster",
             lim.sends_per_cluster, f"roll-ups in flight for {shown(who)}"),
            (self.per_address[address] >= lim.sends_per_address, "sends_per_address",
             lim.sends_per_address, f"roll-ups in flight from {shown(address)}"),
            (sender.peer not in connections and len(connections) >= lim.connections_per_address,
             "connections_per_address", lim.connections_per_address,
             f"connections with a roll-up in flight from {shown(address)}"),
            (self.total >= lim.sends, "sends", lim.sends, "roll-ups in flight in the gateway"),
        ]  # fmt: skip
        for reached, field, limit, what in full:
            if reached:
                raise Refused(
                    "over_limit",
                    None,
                    f"{limit} {what}, the most it takes (gateway.limits.{field}): send again "
                    "when one is answered",
                    code=grpc.StatusCode.RESOURCE_EXHAUSTED,
                )
        self.total += 1
        self.per_credential[who] += 1
        self.per_address[address] += 1
        connections[sender.peer] += 1
        self.connections[address] = connections
        given = [False]

        def give_back() -> None:
            if given[0]:
                return
            given[0] = True
            self.total -= 1
            for counter, key in ((self.per_credential, who), (self.per_address, address),
                                 (connections, sender.peer)):  # fmt: skip
                counter[key] -= 1
                if counter[key] <= 0:
                    del counter[key]
            if not connections:
                self.connections.pop(address, None)

        return give_back


class RefusalLog:
    """Refusals logged as warnings; those anyone can cause by the thousand (no credentials, a
    limit reached, no roll-up sent) at most once every `every` seconds each, with how many
    were not logged since (bigfleet_gateway_rollups_total counts every one)."""

    FLOODS = frozenset({"unauthenticated", "over_limit", "no_request"})

    def __init__(self, every: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every, self.clock = every, clock
        self.last: dict[str, float] = {}
        self.unlogged: Counter[str] = Counter()

    def log(self, outcome: str, details: str) -> None:
        now = self.clock()
        if outcome in self.FLOODS:
            if outcome in self.last and now - self.last[outcome] < self.every:
                self.unlogged[outcome] += 1
                return
            self.last[outcome] = now
        more = self.unlogged.pop(outcome, 0)
        since = f" (and {more} more since the last logged)" if more else ""
        log.warning("refused a roll-up (%s): %s%s", outcome, details, since)
