"""`bigfleet gateway`: the roll-up gateway (issue 11). Cluster operators send their roll-ups here
over gRPC (the Rollups service, proto/bigfleet/v1/rollups.proto) instead of writing to the
Temporal namespace; the gateway authenticates each one as its cluster's, validates it, and
signals it to the cluster's shard.

For each Send, in this order (the first that fails answers; nothing is signalled then):

1. Authenticate, from the call's headers and its connection's TLS handshake, before the request
   is read or the call holds anything: a TLS client certificate whose common name or a DNS
   name names clusters (needs `gateway.tls.client_ca`; without one the handshake itself
   fails), or `authorization: Bearer TOKEN` matching a token of `gateway.tokens` (compared in
   constant time; token files are read at start). Neither: UNAUTHENTICATED; a token that is
   no cluster's: UNAUTHENTICATED.
2. Take a slot (`Slots`, gateway.limits): at most `sends_per_cluster` roll-ups in flight per
   credential, `sends_per_address` and `connections_per_address` per peer address, `sends` in
   all; past one, RESOURCE_EXHAUSTED naming it (send again shortly).
3. Receive the roll-up within `receive_seconds` of the call's start, else DEADLINE_EXCEEDED
   (a call that never sends its body holds its slot that long, no longer); a body that is no
   ClusterCapacityNeeds: INVALID_ARGUMENT.
4. Authorise: the roll-up's `cluster` must be one the sender authenticated as, else
   PERMISSION_DENIED naming both.
5. Validate (bigfleet/edge/convert.py): INVALID_ARGUMENT naming the field (a generation over
   2^53 - 1 names `generation`), then the shard's own limit of a roll-up (SIGNAL_BYTES of
   JSON, bigfleet/inputs.py): INVALID_ARGUMENT (ROLLUP_TOO_LARGE) with the size and the limit.
6. The cluster must have an operator endpoint in the deployment config, else
   FAILED_PRECONDITION (UNKNOWN_CLUSTER): nothing could ever be configured for it.
7. Deliver: the coordinator assigns the cluster's shard (asked once per cluster, then cached;
   asked again if the shard is gone), and the roll-up is signalled to it. Only a failure that
   may pass (Temporal unreachable or busy, the shard moving) is UNAVAILABLE (send it again);
   the coordinator refusing the cluster, or Temporal refusing the signal, is
   FAILED_PRECONDITION, and the gateway's own access refused INTERNAL.
8. A roll-up whose generation is not above the cluster's current one (Generations: what the
   gateway delivered, and what the shard said when last asked) was delivered all the same (it
   keeps the cluster from ageing out) but changes nothing: FAILED_PRECONDITION
   (STALE_GENERATION), with the current generation.

Answer: RollupAccepted(shard, generation, workflow_id). Messages are at most 1 MB (a roll-up is
~2 KB). Counted in bigfleet_gateway_rollups_total{outcome}.

Send is served as a client-streaming method (the same on the wire as the unary one clients
call): a unary handler's request is read before the handler runs, so a call that never sent
its body would hold the server before any check. Connections are bounded by gRPC itself
(`server_options`): streams per connection, the handshake's time, idle and old connections
closed, keep-alive pings enforced. There is no gRPC-wide limit of calls: an unauthenticated
call is answered at once and holds nothing. Refusals anyone can cause by the thousand are
logged now and then, with a count (`RefusalLog`).

gRPC's Python server cannot ask for a client certificate without requiring one: with
`tls.client_ca` every sender must present a certificate signed by it (a token may come too);
without it, senders use tokens (over TLS, or plaintext on loopback only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from temporalio.client import RPCTimeoutOrCancelledError, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from activities.metrics import GATEWAY_ROLLUPS, GATEWAY_SEND_SECONDS
from bigfleet.deployment import Deployment
from bigfleet.edge.convert import WireError, rollup_from_proto
from bigfleet.edge.tls import add_port, certificate_names
from bigfleet.inputs import SIGNAL_BYTES, json_size
from bigfleet.models import generation_ahead
from bigfleet.v1 import machine_pb2 as mpb
from bigfleet.v1 import rollups_pb2 as rpb
from workers.gateway_admission import (
    RefusalLog,
    Refused,
    Sender,
    Slots,
    TokenTable,
    bearer_token,
    server_options,
    shown,
)
from workers.generations import Generations

log = logging.getLogger("bigfleet.gateway")
SERVICE = rpb.DESCRIPTOR.services_by_name["Rollups"].full_name
READY_EVERY_SECONDS = 5.0
OUTCOMES = (
    "accepted",
    "stale",  # delivered, but its generation is not above the cluster's current one
    "unauthenticated",
    "over_limit",  # a limit of gateway.limits reached: send again shortly
    "no_request",  # no roll-up within gateway.limits.receive_seconds of the call's start
    "permission_denied",
    "invalid_argument",
    "too_large",
    "unknown_cluster",
    "undeliverable",  # refused for good on the way (the coordinator, Temporal)
    "unavailable",  # could not be delivered now: send it again
)
# (cluster, roll-up as JSON) -> (shard, its workflow id)
Deliver = Callable[[str, dict[str, Any]], Awaitable[tuple[int, str]]]


# Reads abandoned at the receive deadline, kept until gRPC ends them (the call's status sent);
# a read is never cancelled while gRPC's core may still write its message.
_ABANDONED: set[asyncio.Future[Any]] = set()


def _abandon(read: asyncio.Future[Any]) -> None:
    _ABANDONED.add(read)

    def done(f: asyncio.Future[Any]) -> None:
        _ABANDONED.discard(f)
        if not f.cancelled():
            f.exception()  # (retrieved: the call was answered already)

    read.add_done_callback(done)


# ---- the service ------------------------------------------------------------------------------


class RollupGateway:
    """The Rollups service: authenticate, take a slot, receive, authorise, validate, deliver
    (see the module's doc)."""

    def __init__(
        self,
        deployment: Deployment,
        tokens: TokenTable,
        deliver: Deliver,
        generations: Generations | None = None,
    ) -> None:
        self.deployment = deployment
        self.tokens = tokens
        self.deliver = deliver
        self.generations = generations if generations is not None else Generations(None)
        self.limits = deployment.gateway.limits
        self.slots = Slots(self.limits)
        self.refusals = RefusalLog()
        for outcome in OUTCOMES:  # exported at 0
            GATEWAY_ROLLUPS.labels(outcome)

    def handler(self) -> grpc.GenericRpcHandler:
        """Send, served as client-streaming: the handler runs on the call's headers, before
        its body is read (see the module's doc)."""
        send = grpc.stream_unary_rpc_method_handler(
            self.Send,
            request_deserializer=rpb.ClusterCapacityNeeds.FromString,
            response_serializer=rpb.RollupAccepted.SerializeToString,
        )
        return grpc.method_handlers_generic_handler(SERVICE, {"Send": send})

    async def Send(  # noqa: N802 (the service's name)
        self, requests: Any, context: grpc.aio.ServicerContext
    ) -> rpb.RollupAccepted:
        started = time.monotonic()
        give_back: Callable[[], None] | None = None
        try:
            sender = self.authenticate(context)
            give_back = self.slots.take(sender)
            request = await self.receive(context)
            answer = await self._accept(request, sender)
        except Refused as refused:
            GATEWAY_ROLLUPS.labels(refused.outcome).inc()
            code, details, trailers = refused.status
            if refused.outcome == "stale":  # (an operator's routine mistake, not an attack)
                log.info("stale roll-up: %s", details)
            else:
                self.refusals.log(refused.outcome, details)
            await context.abort(code, details, trailing_metadata=trailers)
            raise  # abort raises; for the type checker
        finally:
            if give_back is not None:
                give_back()
        GATEWAY_ROLLUPS.labels("accepted").inc()
        GATEWAY_SEND_SECONDS.observe(time.monotonic() - started)
        log.debug(
            "roll-up of %s (generation %d) -> %s",
            request.cluster, answer.generation, answer.workflow_id,
        )  # fmt: skip
        return answer

    def authenticate(self, context: Any) -> Sender:
        """Who the call is from, by its headers and TLS handshake; Refused if nobody."""
        token = bearer_token(context)
        by_token = self.tokens.clusters_of(token) if token is not None else set()
        if token is not None and not by_token:
            raise Refused(
                "unauthenticated", mpb.UNAUTHENTICATED, "the bearer token is no cluster's"
            )
        sender = Sender(frozenset(by_token), frozenset(certificate_names(context)),
                        context.peer() or "")  # fmt: skip
        if not sender.by_token and not sender.by_cert:
            raise Refused(
                "unauthenticated",
                mpb.UNAUTHENTICATED,
                "no credentials: send an 'authorization: Bearer TOKEN' header or a TLS client "
                "certificate naming the cluster",
            )
        return sender

    async def receive(self, context: Any) -> rpb.ClusterCapacityNeeds:
        """The call's one roll-up, within gateway.limits.receive_seconds."""
        read = asyncio.ensure_future(context.read())
        try:
            done, _ = await asyncio.wait({read}, timeout=self.limits.receive_seconds)
        finally:
            if not read.done():
                _abandon(read)
        if not done:
            raise Refused(
                "no_request",
                None,
                f"no roll-up received within {self.limits.receive_seconds:g} s of the call's "
                "start (gateway.limits.receive_seconds)",
                code=grpc.StatusCode.DEADLINE_EXCEEDED,
            )
        try:
            message = read.result()
        except Exception as err:  # (its body is no ClusterCapacityNeeds)
            raise Refused(
                "invalid_argument", None,
                f"the request is not a bigfleet.v1.ClusterCapacityNeeds: {err}",
                code=grpc.StatusCode.INVALID_ARGUMENT,
            ) from None  # fmt: skip
        if not isinstance(message, rpb.ClusterCapacityNeeds):  # (the call ended without one)
            raise Refused(
                "invalid_argument", None, "the call ended without a roll-up",
                code=grpc.StatusCode.INVALID_ARGUMENT,
            )  # fmt: skip
        return message

    async def _accept(
        self, request: rpb.ClusterCapacityNeeds, sender: Sender
    ) -> rpb.RollupAccepted:
        self.authorize(request.cluster, sender)
        try:
            rollup = rollup_from_proto(request)
        except WireError as err:
            raise Refused(
                "invalid_argument", mpb.INVALID_FIELD, str(err), field=err.field
            ) from None
        ahead = generation_ahead(rollup.generation, time.time())  # (as the shard judges it)
        if ahead:
            raise Refused("invalid_argument", mpb.INVALID_FIELD, ahead, field="generation")
        raw = rollup.model_dump(mode="json")
        size = json_size(raw)  # as the shard counts it (one definition: bigfleet/inputs.py)
        if size > SIGNAL_BYTES:
            raise Refused(
                "too_large",
                mpb.ROLLUP_TOO_LARGE,
                f"the roll-up of {rollup.cluster} is {size} bytes as JSON; a shard takes at "
                f"most {SIGNAL_BYTES} bytes a roll-up (SIGNAL_BYTES): send fewer needs or "
                "health ids (merge needs that differ only in count)",
                size_bytes=size,
                limit_bytes=SIGNAL_BYTES,
            )
        if self.deployment.operators.endpoint(rollup.cluster) is None:
            raise Refused(
                "unknown_cluster",
                mpb.UNKNOWN_CLUSTER,
                f"cluster {rollup.cluster} has no operator endpoint in the deployment config: "
                "add it to `operators` (clusters or template) so BigFleet can configure "
                "machines for it, then send again",
            )
        current = await self.generations.current(rollup.cluster)
        try:
            shard, wid = await self.deliver(rollup.cluster, raw)
        except Exception as err:
            raise undeliverable(rollup.cluster, err) from None
        self.generations.delivered(rollup.cluster, rollup.generation)
        if current is not None and rollup.generation <= current:
            # Delivered all the same: the shard counts it as a sign of life (bigfleet/needs.py).
            raise Refused(
                "stale",
                mpb.STALE_GENERATION,
                f"generation {rollup.generation} of cluster {rollup.cluster} is not above "
                f"{current}, the generation its shard holds (as far as the gateway knows): the "
                f"roll-up keeps the cluster alive but changes nothing; send a generation above "
                f"{current}",
                field="generation",
                current_generation=current,
            )
        return rpb.RollupAccepted(shard=shard, generation=rollup.generation, workflow_id=wid)

    def authorize(self, cluster: str, sender: Sender) -> None:
        """Refused unless the sender authenticated as `cluster`."""
        by_token, by_cert = sender.by_token, sender.by_cert
        if cluster in by_token or cluster in by_cert:
            return
        who = []
        if by_token:
            who.append(f"cluster {', '.join(sorted(by_token))} (token)")
        if by_cert:
            who.append(f"{', '.join(map(shown, sorted(by_cert)))} (client certificate)")
        unknown = (
            "; no token of the gateway's config is that cluster's"
            if not self.tokens.has(cluster) and not by_cert
            else ""
        )
        raise Refused(
            "permission_denied",
            mpb.PERMISSION_DENIED,
            f"authenticated as {' and '.join(who)}, which may not send the roll-up of cluster "
            f"{shown(cluster)}{unknown}",
        )


# ---- delivery ---------------------------------------------------------------------------------


def undeliverable(cluster: str, err: Exception) -> Refused:
    """How to answer a roll-up that could not be delivered: UNAVAILABLE (send it again) only
    if the failure may pass; what will fail again the same way is answered as such."""
    s = RPCStatusCode
    what = f"the roll-up was valid but could not be delivered to the shard of {cluster}"
    if isinstance(err, WorkflowUpdateFailedError):  # the coordinator's validator refused it
        cause = err.__cause__ or err
        log.error("the coordinator refused cluster %s: %s", cluster, cause)
        return Refused(
            "undeliverable",
            None,
            f"{what}: the coordinator refused to place the cluster: {cause}",
            code=grpc.StatusCode.FAILED_PRECONDITION,
        )
    transient = (
        isinstance(err, (RPCTimeoutOrCancelledError, TimeoutError, ConnectionError))
        or isinstance(err, RPCError) and err.status in (
            s.UNAVAILABLE, s.DEADLINE_EXCEEDED, s.RESOURCE_EXHAUSTED, s.ABORTED, s.CANCELLED,
            s.UNKNOWN, s.INTERNAL,
            s.NOT_FOUND,  # the shard was gone even after asking the coordinator again: moving
        )
    )  # fmt: skip
    if transient:
        log.error("delivering the roll-up of %s: %s", cluster, err)
        return Refused(
            "unavailable", None, f"{what}: {err}; send it again", code=grpc.StatusCode.UNAVAILABLE
        )
    if isinstance(err, RPCError) and err.status in (
        s.INVALID_ARGUMENT, s.FAILED_PRECONDITION, s.OUT_OF_RANGE, s.ALREADY_EXISTS
    ):  # fmt: skip
        log.error("Temporal refused the roll-up of %s: %s", cluster, err)
        return Refused(
            "undeliverable",
            None,
            f"{what}: Temporal refused the signal ({err.status.name}: {err}); sending the same "
            "again will not help",
            code=grpc.StatusCode.FAILED_PRECONDITION,
        )
    # The gateway's own access refused (PERMISSION_DENIED, UNAUTHENTICATED), an RPC Temporal
    # does not serve, or a bug: nothing the sender can do about it.
    log.exception("delivering the roll-up of %s", cluster, exc_info=err)
    return Refused(
        "undeliverable",
        None,
        f"{what}: the gateway cannot deliver roll-ups ({type(err).__name__}: {err}); "
        "its operators must fix this",
        code=grpc.StatusCode.INTERNAL,
    )


# ---- the server -------------------------------------------------------------------------------


@dataclass
class GatewayServer:
    """A running roll-up gateway: its gRPC server, the port bound, its health service, its
    Rollups service (the slots it holds)."""
    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer
    token_port: int = 0  # `token_listen`'s (0: none)
    service: RollupGateway | None = None

    async def stop(self, grace: float = 5.0) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)


async def start_gateway(
    deployment: Deployment,
    tokens: TokenTable,
    deliver: Deliver,
    listen: str | None = None,
    generations: Generations | None = None,
) -> GatewayServer:
    """Serve Rollups and grpc.health.v1 on `listen` (default: the config's). `generations`:
    how the gateway learns a cluster's generation (default: only from what it delivers)."""
    server = grpc.aio.server(options=server_options(deployment.gateway.limits))
    gateway = RollupGateway(deployment, tokens, deliver, generations)
    server.add_generic_rpc_handlers((gateway.handler(),))
    checker = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    gw = deployment.gateway
    bound = add_port(server, listen or gw.listen, gw.tls)
    token_port = 0
    if gw.token_listen is not None:  # (tokens over TLS, no client certificate asked for)
        plain_tls = gw.tls.model_copy(update={"client_ca": None}) if gw.tls else None
        token_port = add_port(server, gw.token_listen, plain_tls)
    await server.start()
    for name in ("", SERVICE):
        await checker.set(name, health_pb2.HealthCheckResponse.SERVING)
    return GatewayServer(server, bound, checker, token_port, gateway)


async def watch_temporal(
    client: Any, gateway: GatewayServer, ready: Callable[[str | None], None], stop: asyncio.Event
) -> None:
    """Readiness: Temporal answers its health check (every few seconds)."""
    while not stop.is_set():
        try:
            ok = await client.service_client.check_health(timeout=timedelta(seconds=3))
            why = None if ok else "Temporal says it is not serving"
        except Exception as err:
            why = f"Temporal not reachable: {err}"
        ready(why)
        status = health_pb2.HealthCheckResponse.SERVING if why is None else (
            health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", SERVICE):
            await gateway.health.set(name, status)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), READY_EVERY_SECONDS)
