"""gRPC channels and server ports, plaintext or TLS, from the deployment config's TLS blocks.

Certificates and keys are read from their paths when a channel or port is made, so a rotated
secret is picked up by the next connection. `bigfleet dev` makes a throwaway CA for its
loopback edges (bigfleet/edge/devca.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import grpc

from ..deployment import ClientTLS, ServerTLS

# Bounded messages on every edge: a roll-up is ~2 KB, a page of List ~1 MB at most.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
]


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def client_credentials(tls: ClientTLS) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca),
        private_key=_read(tls.key),
        certificate_chain=_read(tls.cert),
    )


def channel_options(tls: ClientTLS | None) -> list[tuple[str, object]]:
    options: list[tuple[str, object]] = list(OPTIONS)
    if tls is not None and tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    return options


def channel(endpoint: str, tls: ClientTLS | None) -> grpc.Channel:
    """A blocking channel to `endpoint` (connects lazily, reconnects by itself)."""
    if tls is None:
        return grpc.insecure_channel(endpoint, options=channel_options(tls))
    return grpc.secure_channel(endpoint, client_credentials(tls), options=channel_options(tls))


def aio_channel(endpoint: str, tls: ClientTLS | None) -> grpc.aio.Channel:
    if tls is None:
        return grpc.aio.insecure_channel(endpoint, options=channel_options(tls))
    return grpc.aio.secure_channel(
        endpoint, client_credentials(tls), options=channel_options(tls)
    )


def server_credentials(tls: ServerTLS) -> grpc.ServerCredentials:
    key, cert = Path(tls.key).read_bytes(), Path(tls.cert).read_bytes()
    client_ca = _read(tls.client_ca)
    return grpc.ssl_server_credentials(
        [(key, cert)],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )


def add_port(server: grpc.Server | grpc.aio.Server, listen: str, tls: ServerTLS | None) -> int:
    """Bind `listen` (port 0: any free one); the port bound. Raises OSError if it cannot."""
    try:
        if tls is None:
            bound = server.add_insecure_port(listen)
        else:
            bound = server.add_secure_port(listen, server_credentials(tls))
    except RuntimeError as err:
        raise OSError(f"cannot listen on {listen}: {err}") from None
    if bound == 0 and not listen.startswith("unix:"):
        raise OSError(f"cannot listen on {listen} (in use?)")
    return bound


def certificate_names(context: Any) -> set[str]:
    """The common name and DNS names of the caller's verified client certificate (none without
    mutual TLS)."""
    auth = context.auth_context() or {}
    names: set[str] = set()
    dns = auth.get("peer_dns")
    if dns is None:  # an older gRPC core: every subjectAltName
        dns = auth.get("x509_subject_alternative_name", [])
    for value in [*auth.get("x509_common_name", []), *dns]:
        names.add(value.decode(errors="replace") if isinstance(value, bytes) else str(value))
    return names


class OnlyClients(grpc.ServerInterceptor):
    """Mutual TLS says a client's certificate is the CA's; this says which of the CA's clients
    may call: those whose certificate names one of `names` (a cluster's certificate, good for
    sending its roll-ups, must not get another cluster's bootstrap blobs from an operator, nor
    create machines at a provider). Health checks stay open."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        handler = continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        if details.method.startswith("/grpc.health."):
            return handler
        inner = handler.unary_unary

        def checked(request: Any, context: Any) -> Any:
            got = certificate_names(context)
            if not got & self.names:
                context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"client {', '.join(sorted(got)) or 'without a certificate'} may not call "
                    f"{details.method}: only {', '.join(sorted(self.names))}",
                )
            return inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            checked,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def interceptors(client_names: Iterable[str]) -> list[grpc.ServerInterceptor]:
    names = list(client_names)
    return [OnlyClients(names)] if names else []
