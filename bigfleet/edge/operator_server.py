"""The ClusterOperator service (proto/bigfleet/v1/operator.proto) served from Python operators
(bigfleet/operators.py): `bigfleet operator serve` serves SimulatedOperators this way, and an
operator written in Python can be served by it too.

    server = serve_operators({"web": op_web, "batch": op_batch}, "127.0.0.1:50061", tls)
    ...
    server.stop()

One server may serve several clusters; a request for a cluster it does not serve is refused
with PERMISSION_DENIED naming the ones it does (a deployment config that sends a cluster to the
wrong operator). A malformed request is INVALID_ARGUMENT naming the field; an operator's
BootstrapRefused is FAILED_PRECONDITION with ErrorInfo reason BOOTSTRAP_REFUSED. Notify records
the update (the last `keep` per cluster) and prints one line. grpc.health.v1 is served beside
it. The operators' calls are serialised (a SimulatedOperator is not thread-safe).
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ..deployment import ServerTLS
from ..models import BootstrapBlob
from ..operators import BootstrapRefused, ClusterOperator, OperatorUpdate
from ..v1 import machine_pb2 as mpb
from ..v1 import operator_pb2 as opb
from ..v1 import operator_pb2_grpc as opg
from ..v1 import provider_pb2 as ppb
from .convert import WireError, blob_to_proto, bootstrap_request_from_proto, update_from_proto
from .errors import refusal, status_of
from .tls import OPTIONS, add_port, interceptors

SERVICE = opb.DESCRIPTOR.services_by_name["ClusterOperator"].full_name
KEEP_UPDATES = 50


def _abort(context: grpc.ServicerContext, status: tuple[grpc.StatusCode, str, Any]) -> NoReturn:
    code, details, trailers = status
    context.set_trailing_metadata(trailers)
    context.abort(code, details)
    raise RuntimeError("grpc's abort returned")  # it raises; for the type checker


_SAYING = threading.Lock()


def say_line(text: str) -> None:
    """One line to stdout, whole: the server's threads would interleave print's two writes."""
    with _SAYING:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def summary(update: OperatorUpdate) -> str:
    """One line: what BigFleet decided for the cluster in a cycle."""
    parts = []
    if update.upcoming:
        kinds: dict[str, int] = {}
        for n in update.upcoming:
            kinds[n.instance_type] = kinds.get(n.instance_type, 0) + 1
        each = ", ".join(f"{k} ×{v}" for k, v in sorted(kinds.items()))
        parts.append(f"{len(update.upcoming)} upcoming ({each})")
    if update.reclaims:
        graces = sorted({r.grace_seconds for r in update.reclaims})
        grace = f"{graces[0]:g} s" if len(graces) == 1 else f"{graces[0]:g}-{graces[-1]:g} s"
        parts.append(f"{len(update.reclaims)} reclaim(s), grace {grace}")
    if update.available:
        avail = ", ".join(f"{k} {v}" for k, v in sorted(update.available.items()))
        parts.append(f"available {avail}")
    return f"operator {update.cluster}: " + ("; ".join(parts) or "nothing upcoming or reclaimed")


class OperatorService(opg.ClusterOperatorServicer):
    """ClusterOperator for the clusters in `operators` (cluster name -> its Python operator)."""

    def __init__(
        self,
        operators: Mapping[str, ClusterOperator],
        keep: int = KEEP_UPDATES,
        say: Callable[[str], None] | None = say_line,
    ) -> None:
        self.operators = dict(operators)
        self.updates: dict[str, deque[OperatorUpdate]] = {
            c: deque(maxlen=keep) for c in self.operators
        }
        self.say = say
        self._lock = threading.Lock()

    def _operator(self, cluster: str, context: grpc.ServicerContext) -> ClusterOperator:
        operator = self.operators.get(cluster)
        if operator is None:
            served = ", ".join(sorted(self.operators)) or "none"
            _abort(
                context,
                refusal(
                    mpb.PERMISSION_DENIED,
                    f"this operator does not serve cluster {cluster} (it serves: {served}); "
                    "check the operators section of the deployment config",
                ),
            )
        return operator

    def GenerateBootstrap(  # noqa: N802 (the service's name)
        self, request: opb.BootstrapRequest, context: grpc.ServicerContext
    ) -> ppb.BootstrapBlob:
        try:
            req = bootstrap_request_from_proto(request)
        except WireError as err:
            _abort(context, status_of(err))
        operator = self._operator(req.cluster, context)
        try:
            with self._lock:
                blob: BootstrapBlob = operator.generate_bootstrap(req)
        except BootstrapRefused as err:
            _abort(context, status_of(err))
        return blob_to_proto(blob)

    def Notify(  # noqa: N802 (the service's name)
        self, request: opb.OperatorUpdate, context: grpc.ServicerContext
    ) -> opb.NotifyAck:
        try:
            update = update_from_proto(request)
        except WireError as err:
            _abort(context, status_of(err))
        operator = self._operator(update.cluster, context)
        with self._lock:
            operator.notify(update)
            self.updates[update.cluster].append(update)
        if self.say is not None:
            self.say(summary(update))
        return opb.NotifyAck()


@dataclass
class OperatorServer:
    """A running ClusterOperator server: its port, its service (`service.updates`), its health."""

    server: grpc.Server
    port: int
    service: OperatorService
    health: health.HealthServicer

    def stop(self, grace: float = 2.0) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()


def serve_operators(
    operators: Mapping[str, ClusterOperator],
    listen: str,
    tls: ServerTLS | None = None,
    keep: int = KEEP_UPDATES,
    say: Callable[[str], None] | None = say_line,
    max_workers: int = 8,
    client_names: Iterable[str] = (),
) -> OperatorServer:
    """Start serving `operators` on `listen` (port 0: any free one); with `client_names`, only
    clients whose certificate names one may call (BigFleet's workers, not the clusters). Raises
    OSError if it cannot listen."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers),
        options=OPTIONS,
        interceptors=interceptors(client_names),
    )
    service = OperatorService(operators, keep=keep, say=say)
    opg.add_ClusterOperatorServicer_to_server(service, server)
    checker = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    port = add_port(server, listen, tls)
    server.start()
    for name in ("", SERVICE):
        checker.set(name, health_pb2.HealthCheckResponse.SERVING)
    return OperatorServer(server, port, service, checker)
