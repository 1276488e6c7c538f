"""Liveness and readiness over HTTP, for every BigFleet process (`--health-port`).

    GET /healthz   200 while the process runs (a liveness probe restarts it otherwise)
    GET /readyz    200 once it does its job (workers polling, a server listening and its
                   backends reachable), else 503 with the reason

Kubernetes probes and docker-compose healthchecks call these (deploy/). gRPC servers also serve
the standard grpc.health.v1 service on their own port.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from workers.errors import CliError


class Health:
    """What /readyz answers: `ready()` is called on every probe and returns None when ready,
    else why not. Until `ready` is set, the process is not ready ("starting")."""

    def __init__(self) -> None:
        self.check: Callable[[], str | None] = lambda: "starting"

    def ready(self) -> str | None:
        try:
            return self.check()
        except Exception as err:  # a probe must answer, whatever the check does
            return f"readiness check failed: {err}"


def serve_health(host: str, port: int, health: Health) -> ThreadingHTTPServer:
    """Serve /healthz and /readyz on a daemon thread; the server (its port: server_port)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/healthz":
                code, body = 200, "ok\n"
            elif self.path == "/readyz":
                why = health.ready()
                code, body = (200, "ready\n") if why is None else (503, f"not ready: {why}\n")
            else:
                code, body = 404, "try /healthz or /readyz\n"
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:  # probes every few seconds: no log
            pass

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as err:
        raise CliError(f"cannot serve health on {host}:{port}: {err.strerror}") from None
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
