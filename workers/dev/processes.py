"""The separate processes of `bigfleet dev`: the reference provider servers (one per provider of
the fleet file, state in STATE_DIR/providers/NAME), the reference cluster operator server (every
cluster of the fleet file) and the roll-up gateway, each a `bigfleet ...` child process talking
mutual TLS over loopback with certificates from a throwaway CA in STATE_DIR/tls. The workers
run in `bigfleet dev`'s own process and reach them through STATE_DIR/deployment.yaml, the same
deployment config a production worker reads. The orchestration is in workers/dev/launcher.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bigfleet.edge.devca import make_dev_ca
from workers.dev.progress import command
from workers.dev.server import dying_with_parent
from workers.errors import CliError

READY_SECONDS = 60.0
STOP_SECONDS = 10.0
WORKER_CLIENT = "bigfleet-worker"  # the name on the workers' own client certificate


@dataclass
class Child:
    """One child process: what it is, where it listens, its log."""

    name: str
    argv: list[str]
    port: int
    log_path: Path
    echo: bool = False  # its output is printed too, not only logged
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            dying_with_parent(self.argv),
            stdout=subprocess.PIPE if self.echo else log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # Ctrl-C reaches `bigfleet dev`, which stops them in order
        )
        if self.echo:
            threading.Thread(target=self._echo, args=(log,), daemon=True).start()
        else:
            log.close()

    def _echo(self, log: Any) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                sys.stdout.write(line.decode(errors="replace"))
                sys.stdout.flush()

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def bigfleet_argv(*args: str) -> list[str]:
    """`bigfleet ARGS` run by this Python (works from a virtualenv that is not activated)."""
    return [sys.executable, "-m", "workers.cli", *args]


def listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class DevProcesses:
    """The children of `bigfleet dev`, the CA they share and the deployment config for the
    workers. `base_port`: the first provider's; the gateway and operator follow the providers."""

    fleet_path: Path
    fleet: Any
    state_dir: Path
    temporal_address: str
    base_port: int = 50051
    # The gateway's own metrics (its roll-ups by outcome) on this port; 0: none.
    gateway_metrics_port: int = 0
    shadow: bool = False  # every shard in shadow mode (docs/shadow.md)
    record_shards: bool = False  # the shards record (workflows/shard_record.py)
    record: Path | None = None  # the operator records the roll-ups it sends (docs/adoption.md)
    # Provider name -> a provider config (kind: ec2 | redfish): that provider is a real one
    # (`provider serve --config`) instead of the fleet file's simulated one.
    real: dict[str, Path] = field(default_factory=dict)
    children: list[Child] = field(default_factory=list)
    config_path: Path = field(init=False)
    gateway_address: str = field(init=False, default="")

    def __post_init__(self) -> None:
        # Absolute: the deployment config's paths are read relative to the config's own
        # directory, so `.bigfleet/tls/ca.pem` there was `.bigfleet/.bigfleet/tls/ca.pem` (the
        # default `--state-dir .bigfleet` stopped `bigfleet dev` at start).
        self.state_dir = Path(self.state_dir).resolve()
        self.fleet_path = Path(self.fleet_path).resolve()
        self.config_path = self.state_dir / "deployment.yaml"

    # ---- set-up ---------------------------------------------------------------------------

    def plan(self) -> None:
        """Certificates, ports, the deployment config and the command lines (nothing runs)."""
        clusters = [c.name for c in self.fleet.clusters if c.workload is None]
        tls = self.state_dir / "tls"
        self.ca = make_dev_ca(tls, server_names=["localhost"], clients=[*clusters, WORKER_CLIENT])
        ports = iter(range(self.base_port, self.base_port + 100))
        pki = {"ca": str(tls / "ca.pem")}
        server_tls = [
            "--tls-cert", str(tls / "server.pem"),
            "--tls-key", str(tls / "server-key.pem"),
            "--tls-client-ca", str(tls / "ca.pem"),
            # Only the workers: a cluster's certificate (good for the gateway) is refused.
            "--tls-client-name", WORKER_CLIENT,
        ]  # fmt: skip
        worker_tls = {
            **pki,
            "cert": str(tls / f"{WORKER_CLIENT}.pem"),
            "key": str(tls / f"{WORKER_CLIENT}-key.pem"),
            "server_name": "localhost",
        }
        providers = []
        for spec in self.fleet.providers:
            port = next(ports)
            providers.append(
                {
                    "name": spec.name,
                    "endpoint": f"127.0.0.1:{port}",
                    "tls": worker_tls,
                    **(
                        {"calls_per_second": spec.api_calls_per_second}
                        if hasattr(spec, "api_calls_per_second")
                        else {}
                    ),
                }
            )
            source = (
                ["--config", str(self.real[spec.name])]
                if spec.name in self.real
                else ["--fleet", str(self.fleet_path), "--provider", spec.name]
            )
            self._child(
                f"provider {spec.name}",
                port,
                "provider", "serve",
                *source,
                "--listen", f"127.0.0.1:{port}",
                "--state-dir", str(self.state_dir / "providers" / spec.name),
                *server_tls,
            )  # fmt: skip
        operator_port = next(ports)
        gateway_port = next(ports)
        token_port = next(ports)
        self.gateway_address = f"127.0.0.1:{token_port}"  # (where a token is shown)
        config = {
            "name": self.fleet.name,
            "shards": self.fleet.shards,
            "cycle_seconds": self.fleet.cycle_seconds,
            **({"shadow": True} if self.shadow else {}),
            **({"record": True} if self.record_shards else {}),
            "policy": self.fleet.policy_overrides(),
            "providers": providers,
            "operators": {
                "clusters": [
                    {"cluster": c, "endpoint": f"127.0.0.1:{operator_port}"} for c in clusters
                ],
                "tls": worker_tls,
            },
            "gateway": {
                "listen": f"127.0.0.1:{gateway_port}",
                "tls": {
                    "cert": str(tls / "server.pem"),
                    "key": str(tls / "server-key.pem"),
                    "client_ca": str(tls / "ca.pem"),
                },
                # A token per cluster too, shown on a port of its own over TLS (mutual TLS
                # asks every client for a certificate).
                "tokens": [{"cluster": c, "file": str(self._token(c))} for c in clusters],
                "token_listen": f"127.0.0.1:{token_port}",
            },
        }
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            "# Written by `bigfleet dev` for its own processes (rewritten on every start).\n"
            + yaml.safe_dump(config, sort_keys=False)
        )
        self._child(
            "gateway",
            gateway_port,
            "gateway",
            "--config", str(self.config_path),
            "--address", self.temporal_address,
            *(
                ["--metrics-port", str(self.gateway_metrics_port), "--http-host", "127.0.0.1"]
                if self.gateway_metrics_port
                else []
            ),
        )  # fmt: skip
        if clusters:  # its roll-up lines are echoed: what the clusters ask for, as it happens
            self._child(
                "operator",
                operator_port,
                "operator", "serve",
                "--fleet", str(self.fleet_path),
                "--cluster", ",".join(clusters),
                "--listen", f"127.0.0.1:{operator_port}",
                "--gateway", f"127.0.0.1:{gateway_port}",
                "--state-file", str(self.state_dir / "operator-nodes.json"),
                "--clock-file", str(self.state_dir / "operator-clock.json"),
                *(["--record", str(self.record)] if self.record else []),
                "--tls-dir", str(tls),
                *server_tls,
                echo=True,
            )  # fmt: skip
        for child in self.children:
            if listening(child.port):
                raise CliError(
                    f"port {child.port} ({child.name}) is in use: another `bigfleet dev`? "
                    "(--grpc-port moves BigFleet's own servers)"
                )

    def _child(self, name: str, port: int, *args: str, echo: bool = False) -> None:
        log = self.state_dir / "logs" / (name.replace(" ", "-") + ".log")
        self.children.append(Child(name, bigfleet_argv(*args), port, log, echo=echo))

    # ---- running --------------------------------------------------------------------------

    async def start(self, stop: asyncio.Event, only: tuple[str, ...] = ()) -> None:
        """Start the children (those named `only`, else all) and wait until each listens."""
        chosen = [c for c in self.children if not only or c.name.split()[0] in only]
        for child in chosen:
            child.start()
        deadline = time.monotonic() + READY_SECONDS
        for child in chosen:
            while not listening(child.port):
                if child.exited() is not None:
                    raise CliError(
                        f"{child.name} exited (status {child.exited()}); the end of "
                        f"{child.log_path}:\n{child.log_tail()}"
                    )
                if stop.is_set() or time.monotonic() > deadline:
                    raise CliError(f"{child.name} did not listen on {child.port}; see "
                                   f"{child.log_path}")
                await asyncio.sleep(0.2)

    def died(self) -> Child | None:
        return next((c for c in self.children if c.exited() is not None), None)

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()

    def _token(self, cluster: str) -> Path:
        """The cluster's roll-up token file (made once: kept across restarts)."""
        path = self.state_dir / "tokens" / cluster
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(24) + "\n")
            path.chmod(0o600)
        return path

    def rollup_command(self, file: str, cluster: str) -> str:
        """A `rollup send` of `file` as `cluster`, through this gateway, with its token."""
        return (
            f"{command()} rollup send {file} --gateway {self.gateway_address} "
            f"--tls-ca {self.state_dir / 'tls' / 'ca.pem'} --tls-server-name localhost "
            f"--token-file {self.state_dir / 'tokens' / cluster}"
        )

    def describe(self) -> list[str]:
        return [
            f"    {c.name:<24} pid {c.proc.pid if c.proc else '-':<7} 127.0.0.1:{c.port:<6} "
            f"log {c.log_path}"
            for c in self.children
        ]


async def watch_children(procs: DevProcesses, stop: asyncio.Event) -> None:
    """A child that exits on its own stops `bigfleet dev` (with its log's end)."""
    while not stop.is_set():
        dead = procs.died()
        if dead is not None:
            print(
                f"bigfleet dev: {dead.name} exited (status {dead.exited()}); the end of "
                f"{dead.log_path}:\n{dead.log_tail()}",
                file=sys.stderr,
                flush=True,
            )
            stop.set()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)
