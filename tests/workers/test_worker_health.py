"""`bigfleet worker --health-port N`: /healthz while the process runs, /readyz once it is
connected to Temporal and every worker polls (what the Kubernetes probes and the compose
healthchecks of deploy/ ask)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from workers.cli import parser
from workers.health import Health, serve_health
from workers.process import workers_running

ROOT = Path(__file__).resolve().parents[2]


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_health_port_is_off_unless_asked():
    assert parser().parse_args(["worker", "--config", "d.yaml"]).health_port == 0
    args = parser().parse_args(["worker", "--config", "d.yaml", "--health-port", "8080"])
    assert args.health_port == 8080


def test_a_bad_health_port_is_named(capsys):
    with pytest.raises(SystemExit):
        parser().parse_args(["worker", "--fleet", "f.yaml", "--health-port", "70000"])
    assert "--health-port" in capsys.readouterr().err


class FakeWorker:
    def __init__(self, task_queue: str) -> None:
        self.task_queue = task_queue
        self.is_running = False


async def test_ready_once_every_worker_polls_and_not_after_they_stop():
    workers = [FakeWorker("bigfleet-shards"), FakeWorker("bigfleet-transitions")]
    stop = asyncio.Event()
    task = asyncio.create_task(stop.wait())
    health = Health()
    server = serve_health("127.0.0.1", 0, health)
    port = server.server_port
    try:
        assert await asyncio.to_thread(get, port, "/readyz") == (503, "not ready: starting\n")
        health.check = workers_running(workers, task)
        workers[0].is_running = True
        code, body = await asyncio.to_thread(get, port, "/readyz")
        assert code == 503 and "bigfleet-transitions" in body and "shards" not in body
        workers[1].is_running = True
        assert await asyncio.to_thread(get, port, "/readyz") == (200, "ready\n")
        stop.set()
        await task
        assert await asyncio.to_thread(get, port, "/readyz") == (
            503,
            "not ready: the workers stopped\n",
        )
        assert await asyncio.to_thread(get, port, "/healthz") == (200, "ok\n")
    finally:
        server.shutdown()


async def test_a_worker_process_turns_ready_against_a_real_server(dev_env, tmp_path):
    """The real thing: `bigfleet worker --health-port` against a Temporal dev server answers
    /healthz, then /readyz once its workers poll; SIGTERM still stops it cleanly."""
    target = dev_env.client.service_client.config.target_host
    port = free_port()
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "workers.cli", "worker", "--fleet", "examples/dev-fleet.yaml",
         "--address", target, "--role", "transitions,providers", "--metrics-port", "0",
         "--health-port", str(port), "--log-level", "warning"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        ready = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                ready = await asyncio.to_thread(get, port, "/readyz")
            except OSError:  # not listening yet
                ready = None
            if ready and ready[0] == 200:
                break
            await asyncio.sleep(0.3)
        assert ready == (200, "ready\n"), (tmp_path / "worker.log").read_text()
        assert await asyncio.to_thread(get, port, "/healthz") == (200, "ok\n")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, (tmp_path / "worker.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def test_a_worker_waiting_for_temporal_is_alive_but_not_ready(tmp_path):
    """While it retries its first connection (up to five minutes), the liveness probe must not
    restart it; readiness says it is still starting."""
    port = free_port()
    with (tmp_path / "worker.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "workers.cli", "worker", "--fleet", "examples/dev-fleet.yaml",
             "--address", f"127.0.0.1:{free_port()}", "--metrics-port", "0",
             "--health-port", str(port)],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    alive = get(port, "/healthz")
                    break
                except OSError:
                    assert proc.poll() is None and time.monotonic() < deadline, (
                        tmp_path / "worker.log"
                    ).read_text()
                    time.sleep(0.2)
            assert alive == (200, "ok\n")
            assert get(port, "/readyz") == (503, "not ready: starting\n")
        finally:
            proc.kill()
            proc.wait()
