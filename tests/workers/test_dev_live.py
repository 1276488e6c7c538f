"""`bigfleet dev`, the README's first command, run for real: it starts the Temporal dev server,
the reference providers, the workers, the gateway and the operator as separate processes over
mutual TLS, the example fleet's roll-ups go through the gateway and come back to the operator
as decisions, and Ctrl-C stops every process it started."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import TEMPORAL
from tests.procs import ROOT, bindable, free_port

pytestmark = [
    pytest.mark.temporal,
    pytest.mark.skipif(not TEMPORAL.exists(), reason=f"no Temporal CLI at {TEMPORAL}"),
]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) is not running.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_bigfleet_dev_runs_every_edge_as_its_own_process_and_stops_them_all(tmp_path):
    grpc_base = free_port()
    while any(not bindable(p) for p in range(grpc_base, grpc_base + 6)):
        grpc_base = free_port()
    metrics = free_port()  # (N, N+1: the workers' every metric, the gateway's)
    while any(not bindable(p) for p in range(metrics, metrics + 2)) or abs(metrics - grpc_base) < 8:
        metrics = free_port()
    # Run as a newcomer does: from a working directory, with a relative state directory (the
    # default `.bigfleet` is one: a relative one once stopped `bigfleet dev` at start).
    argv = [
        sys.executable, "-m", "workers.cli", "dev",
        "--fleet", str(ROOT / "examples" / "dev-fleet.yaml"),
        "--state-dir", "state",
        "--port", str(free_port()), "--ui-port", str(free_port()),
        "--metrics-port", str(metrics), "--grpc-port", str(grpc_base),
    ]  # fmt: skip
    out_path = tmp_path / "dev.out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            argv,
            cwd=tmp_path,
            # As `./bf dev` runs it: the commands it prints are `./bf ...`.
            env=dict(os.environ, PYTHONPATH=str(ROOT), BIGFLEET_COMMAND="./bf"),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        text = ""
        # The operator hears back what the shards decided for a cluster: roll-ups went in
        # through the gateway, and decisions came out to the operator, both over mutual TLS.
        while time.monotonic() < deadline and not re.search(r"operator \S+: \d+ upcoming", text):
            assert proc.poll() is None, f"bigfleet dev exited early:\n{text}"
            time.sleep(0.5)
            text = out_path.read_text(errors="replace")
        assert re.search(r"operator \S+: \d+ upcoming", text), text
        assert "(via the gateway)" in text, text
        pids = {
            name.strip(): int(pid)
            for name, pid in re.findall(r"^    (\S[\w ().-]*?)\s+pid (\d+)", text, re.M)
        }
        assert {"temporal server", "provider dc-ams", "provider aws-us-east-1", "gateway",
                "operator"} <= set(pids), text  # fmt: skip
        assert (tmp_path / "state" / "tls" / "ca.pem").exists()
        assert (tmp_path / "state" / "deployment.yaml").exists()
        # The gateway counts the roll-ups it answered in its own process, every outcome
        # exported from the start (issue 34: they were exported empty, by the wrong process).
        gateway = _scrape(metrics + 1)
        accepted = re.search(r'^bigfleet_gateway_rollups_total\{outcome="accepted"\} (\S+)$',
                             gateway, re.M)  # fmt: skip
        assert accepted and float(accepted.group(1)) > 0, gateway
        assert re.search(r'^bigfleet_gateway_rollups_total\{outcome="stale"\} 0\.0$', gateway,
                         re.M), gateway  # fmt: skip
        # The operator reports its nodes' health with its roll-ups, kept across restarts.
        assert (tmp_path / "state" / "operator-nodes.json").exists()
        # One port carries the workers' every metric (issue 48): the workflows' cost and
        # machines, and OpenCost's node costs of the fleet's machines.
        deadline = time.monotonic() + 90
        wanted = ("bigfleet_cost_dollars_per_hour{", "bigfleet_machines{",
                  "node_total_hourly_cost{")  # fmt: skip
        scraped = _scrape(metrics)
        while time.monotonic() < deadline and not all(w in scraped for w in wanted):
            time.sleep(1)
            scraped = _scrape(metrics)
        assert all(w in scraped for w in wanted), scraped
        # The printed commands run as printed from the checkout (issue 48).
        assert re.search(r"^    \./bf machine history \S+", text, re.M), text
        # The printed command sends a roll-up of your own, with the cluster's token (issue 34:
        # the README's command failed with "Socket closed", the dev gateway took no token).
        [command] = re.findall(r"^    (\./bf rollup send .*)$", text, re.M)
        argv_send = [sys.executable, "-m", "workers.cli", *command.split()[1:]]
        sent = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert "sent roll-up of cluster sandbox" in sent.stdout, sent.stdout
        # Plaintext to the TLS gateway: refused, saying why.
        gateway_at = argv_send.index("--gateway")
        plain = argv_send[: gateway_at + 2] + ["--token-file", argv_send[-1]]
        wrong = subprocess.run(plain, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert wrong.returncode == 1, wrong.stdout + wrong.stderr
        assert "do not speak the same security" in wrong.stderr, wrong.stderr
        # Every command of the README's first hour works against this fleet (issue 34).
        address = re.search(r"Temporal server\s+(\S+)", text)
        assert address, text
        ran = run_first_hour(address.group(1), tmp_path / "state", command)
        first_hour = {"machine history", "status", "cluster", "rollup send", "drain escalate"}
        assert first_hour | {"audit", "simulate"} <= ran, ran
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(90)
    text = out_path.read_text(errors="replace")
    assert code == 0, text
    assert text.rstrip().endswith("bigfleet dev: stopped"), text
    children = {n: p for n, p in pids.items() if n != "workers (all roles)"}
    assert not [n for n, p in children.items() if alive(p)], text


# The README's first-hour commands a test cannot run against a shared dev fleet: `dev` is this
# fleet; split, merge, revive and decommission change its shape (tests/temporal/
# test_temporal_membership.py runs them); `worker` would start a second set of workers, and
# `<command>` is a placeholder.
NOT_HERE = (
    "dev", "shard split", "shard merge", "shard revive", "decommission", "worker", "<command>"
)
# Verbs that need no Temporal server (no --address).
OFFLINE = ("rollup send", "simulate")


def readme_first_hour() -> list[str]:
    """The `./bf ...` commands of the README's first-hour section, as written (a command broken
    over lines joined)."""
    text = (ROOT / "README.md").read_text()
    start = text.index("## A first hour")
    section = text[start : text.index("\n## ", start + 3)]
    return [" ".join(c.split()) for c in re.findall(r"`\./bf ([^`]+)`", section)]


def run_first_hour(address: str, state: Path, rollup_command: str) -> set[str]:
    """Run each first-hour command (placeholders filled in for this fleet); the verbs run."""
    machine = "dc-ams-ams-gpu-01-00000"
    port = re.search(r"--gateway \S+:(\d+)", rollup_command)
    assert port, rollup_command
    ran: set[str] = set()
    for command in readme_first_hour():
        if command.startswith(NOT_HERE):
            continue
        filled = (
            command.replace("PORT", port.group(1))
            .replace(".bigfleet/", f"{state}/")
            .replace("NAME", "web")
        )
        argv = [sys.executable, "-m", "workers.cli", *filled.split()]
        if not filled.startswith(OFFLINE):
            argv += ["--address", address]
        # (the comparison simulates a day twice: ~25 s alone, minutes beside a busy suite)
        limit = 900 if filled.startswith("simulate") else 120
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=limit)
        said = done.stdout + done.stderr
        if filled.startswith("drain escalate"):  # (exits 1 when no drain of it is running)
            assert done.returncode == 0 or "no running drain" in said, (filled, said)
        else:
            assert done.returncode == 0, (filled, said)
        assert machine not in filled or machine in said or "no running drain" in said, said
        words = filled.split()
        ran.add(" ".join(words[:2]) if words[0] in ("machine", "rollup", "drain") else words[0])
        if words[0] == "simulate":  # the comparison's verdict, cost and service on one line
            assert re.search(r"BigFleet pooled: \$[\d,]+/h against \$[\d,]+/h", said), said
        if words[0] == "audit":
            assert "machines listed" in said, said
        if words[0] == "cluster":  # its machines listed (issue 48)
            assert "  machines:  " in said, said
    return ran


def _scrape(port: int) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return reply.read().decode()
