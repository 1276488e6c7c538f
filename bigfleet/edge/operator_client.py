"""BigFleet's side of the ClusterOperator service (proto/bigfleet/v1/operator.proto): each
cluster's operator called over gRPC, as the ClusterOperator protocol of bigfleet/operators.py.

    ops = GrpcOperators(deployment.operators)
    op = ops.operator("web")          # None: no endpoint for "web" in the deployment config
    blob = op.generate_bootstrap(request)

Calls block (`GrpcOperator.blocking` is True: the activities run them in a thread) and carry the
config's `deadline_seconds`. What comes back is BigFleet's own: a BootstrapBlob, or
BootstrapRefused with the operator's reason (FAILED_PRECONDITION / BOOTSTRAP_REFUSED), or
OperatorUnreachable (UNAVAILABLE, DEADLINE_EXCEEDED), or OperatorError for any other status, or
a WireError naming the field of a malformed blob. One channel per endpoint (a template may send
many clusters to one operator), made on first use and kept until `close()`.
"""

from __future__ import annotations

import threading

import grpc

from ..deployment import ClientTLS, Operators
from ..models import BootstrapBlob, BootstrapRequest
from ..operators import BootstrapRefused, OperatorError, OperatorUnreachable, OperatorUpdate
from ..v1 import machine_pb2 as mpb
from ..v1 import operator_pb2_grpc as opg
from .convert import blob_from_proto, bootstrap_request_to_proto, update_to_proto
from .errors import error_info
from .tls import channel_options, client_credentials

__all__ = [
    "GrpcOperator",
    "GrpcOperators",
    "OperatorError",
    "OperatorUnreachable",
    "operator_channel",
]

# A down operator is retried soon (the default first back-off is 1 s, growing to 120 s): the
# activity's one quick retry, and the next cycle's call, then try to connect again.
RECONNECT_OPTIONS: list[tuple[str, object]] = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]
UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def operator_channel(endpoint: str, tls: ClientTLS | None) -> grpc.Channel:
    """A blocking channel to an operator: bigfleet/edge/tls.py's, reconnecting sooner."""
    options = channel_options(tls) + RECONNECT_OPTIONS
    if tls is None:
        return grpc.insecure_channel(endpoint, options=options)
    return grpc.secure_channel(endpoint, client_credentials(tls), options=options)


class GrpcOperator:
    """One cluster's operator over gRPC (the ClusterOperator protocol)."""

    blocking = True  # its calls wait on the network: run them off the event loop

    def __init__(
        self, cluster: str, endpoint: str, channel: grpc.Channel, deadline_seconds: float
    ) -> None:
        self.cluster = cluster
        self.endpoint = endpoint
        self.deadline = deadline_seconds
        self._stub = opg.ClusterOperatorStub(channel)

    def generate_bootstrap(self, request: BootstrapRequest) -> BootstrapBlob:
        try:
            pb = self._stub.GenerateBootstrap(
                bootstrap_request_to_proto(request), timeout=self.deadline
            )
        except grpc.RpcError as err:
            raise self._error(err, "GenerateBootstrap") from None
        return blob_from_proto(pb)

    def notify(self, update: OperatorUpdate) -> None:
        try:
            self._stub.Notify(update_to_proto(update), timeout=self.deadline)
        except grpc.RpcError as err:
            raise self._error(err, "Notify") from None

    def _error(self, err: grpc.RpcError, call: str) -> Exception:
        code = err.code() if hasattr(err, "code") else None
        details = (err.details() if hasattr(err, "details") else "") or ""
        info = error_info(err)
        if info is not None and info.reason == mpb.BOOTSTRAP_REFUSED:
            return BootstrapRefused.as_told(self.cluster, info.message or details)
        if info is None and code == grpc.StatusCode.FAILED_PRECONDITION and call != "Notify":
            # An operator that is not BigFleet's may refuse with the bare code (operator.proto).
            return BootstrapRefused.as_told(self.cluster, details)
        name = code.name if code is not None else "no status"
        if code in UNREACHABLE:
            return OperatorUnreachable(self.cluster, self.endpoint, f"{name}: {details}")
        return OperatorError(self.cluster, self.endpoint, f"{call}: {name}: {details}")


class GrpcOperators:
    """Each cluster's operator as the deployment config's `operators` section finds it."""

    def __init__(self, ops: Operators) -> None:
        self.ops = ops
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._operators: dict[str, GrpcOperator] = {}

    def operator(self, cluster: str) -> GrpcOperator | None:
        """The cluster's operator, or None if the config has no endpoint for it."""
        endpoint = self.ops.endpoint(cluster)
        if endpoint is None:
            return None
        with self._lock:
            op = self._operators.get(cluster)
            if op is not None and op.endpoint == endpoint:
                return op
            channel = self._channels.get(endpoint)
            if channel is None:
                channel = self._channels[endpoint] = operator_channel(endpoint, self.ops.tls)
            op = self._operators[cluster] = GrpcOperator(
                cluster, endpoint, channel, self.ops.deadline_seconds
            )
            return op

    def __call__(self, cluster: str) -> GrpcOperator | None:
        return self.operator(cluster)

    def close(self) -> None:
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
            self._operators.clear()
        for channel in channels:
            channel.close()
