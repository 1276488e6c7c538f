"""Child processes for tests that run BigFleet as it runs in production: each part its own
process (a Temporal server, workers, provider and operator servers, the gateway), killed and
started again by the test."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> int:
    """The first of `n` consecutive ports free now (never a default one a running
    `./bf dev` may hold: the kernel picks)."""
    while True:
        base = free_port()
        if base + n <= 65535 and all(bindable(p) for p in range(base, base + n)):
            return base


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class Proc:
    """A child process this test started (and only such are killed), logging to a file."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name, self.argv, self.log = name, argv, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0
        self.env: dict[str, str] | None = None  # None: this process's environment

    def start(self) -> None:
        with open(self.log, "ab") as out:
            out.write(f"\n==== start {self.started + 1}: {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                self.argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, env=self.env,
            )
        self.started += 1

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, as an orchestrator stops a process; SIGKILL if it lingers."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    async def listening(self, port: int, timeout: float = 60.0) -> None:
        """Wait until the process accepts connections on `port` (it may not die meanwhile)."""
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket() as s:
                s.settimeout(0.2)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            if not self.alive():
                raise AssertionError(f"{self.name} exited before listening\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} not listening on {port}\n{self.tail()}")
            await asyncio.sleep(0.1)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return f"---- {self.name} ({self.log}):\n" + "\n".join(text[-lines:])


async def retrying(what: str, call: Callable[[], Any], timeout: float = 60.0) -> Any:
    """`call()` until it works (the server may be down for a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except Exception as err:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still failing after {timeout} s: {err}") from err
            await asyncio.sleep(0.5)
