"""What a long-running BigFleet process sets up, shared by `bigfleet worker`, `bigfleet dev`,
the gateway and the reference operator: the fleet file and the deployment config read with a
one-line error, the metrics server (BigFleet's and the Temporal SDK's metrics on one port), the
stop handlers, the readiness of running workers and the check that the namespace has BigFleet's
search attributes.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import prometheus_client
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

import activities.metrics  # noqa: F401  (registers BigFleet's metrics)
from activities.wire import SEARCH_ATTRIBUTES
from bigfleet.deployment import DeploymentError
from bigfleet.deployment import load as load_deployment_config
from bigfleet.simulation.scenario import ScenarioError
from bigfleet.simulation.scenario import load as load_scenario
from workers.errors import CliError


def load_fleet(path: str) -> Any:
    """A scenario (fleet) file; a CliError (exit 2) saying what is wrong with it."""
    try:
        return load_scenario(path)
    except ScenarioError as err:
        raise CliError(str(err), code=2) from None


def load_deployment(path: str, uses: tuple[str, ...] = ("providers", "operators")) -> Any:
    """The deployment config, with the files of the sections this process `uses` checked
    (workers: providers and operators; the gateway: its own section)."""
    try:
        return load_deployment_config(path, uses)
    except DeploymentError as err:
        raise CliError(str(err), code=2) from None


def workers_running(workers: Sequence[Any], task: asyncio.Task[None]) -> Callable[[], str | None]:
    """The worker's readiness: `run_workers` still running and every worker it started polling
    (a worker the SDK shut down after a fatal error is not)."""

    def check() -> str | None:
        if task.done():
            return "the workers stopped"
        waiting = [w.task_queue for w in workers if not getattr(w, "is_running", True)]
        return f"starting workers for {', '.join(sorted(set(waiting)))}" if waiting else None

    return check


def serve_metrics(host: str, metrics_port: int, registry: Any = None) -> int:
    """prometheus_client's registry over HTTP: BigFleet's metrics (activities/metrics.py), the
    Temporal SDK's once `workers/connect.py` `runtime` made the runtime, and the machines'
    costs where a process exports them (workers/node_costs.py). Returns the port (0: any free
    one)."""
    try:
        server, _ = prometheus_client.start_http_server(
            metrics_port, addr=host, registry=registry or prometheus_client.REGISTRY
        )
        return int(server.server_port)
    except OSError as err:
        raise CliError(
            f"cannot serve metrics on {host}:{metrics_port}: {err.strerror} "
            "(use --metrics-port)"
        ) from None


def install_stop_handlers(stop: asyncio.Event, *signals: int) -> None:
    """First signal: stop cleanly. Second: leave at once."""
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            print("bigfleet: stopping now", file=sys.stderr, flush=True)
            os._exit(130)
        print("bigfleet: stopping (again to force)", file=sys.stderr, flush=True)
        stop.set()

    for sig in signals:
        loop.add_signal_handler(sig, on_signal)


def search_attribute_type(key: Any) -> str:
    """`KEYWORD_LIST` -> `KeywordList`: the spelling of the temporal CLI and the dev server."""
    return "".join(part.title() for part in key.indexed_value_type.name.split("_"))


async def check_search_attributes(client: Any, who: str, wait: float = 30.0) -> None:
    """Transition workflows cannot start without BigFleet's search attributes: say how to fix
    that now rather than fail in every start later. Just-registered attributes can take a few
    seconds to show, so a missing one is waited for (`wait` seconds). If the server will not
    tell (no permission to list), carry on."""
    deadline = time.monotonic() + wait
    said = False
    while True:
        try:
            resp = await client.operator_service.list_search_attributes(
                ListSearchAttributesRequest(namespace=client.namespace)
            )
        except Exception as err:
            print(f"{who}: could not list search attributes ({err}); carrying on", file=sys.stderr)
            return
        known = set(resp.custom_attributes) | set(resp.system_attributes)
        missing = [k for k in SEARCH_ATTRIBUTES if k.name not in known]
        if not missing:
            return
        if time.monotonic() >= deadline:
            break
        if not said:
            print(
                f"{who}: waiting for search attributes {', '.join(k.name for k in missing)}",
                file=sys.stderr,
            )
            said = True
        await asyncio.sleep(2.0)
    raise CliError(
        f"namespace {client.namespace} lacks BigFleet's search attributes "
        f"{', '.join(k.name for k in missing)}; register them with:\n"
        + "\n".join("  " + cmd for cmd in search_attribute_commands(missing, client.namespace))
    )


def search_attribute_commands(keys: Sequence[Any], namespace: str = "default") -> list[str]:
    """One `temporal operator search-attribute create` per attribute: given several `--name`s,
    the temporal CLI (1.9.1) registers only the first yet reports success."""
    return [
        f"temporal operator search-attribute create --namespace {namespace} "
        f"--name {k.name} --type {search_attribute_type(k)}"
        for k in keys
    ]
