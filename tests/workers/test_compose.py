"""docker-compose.yml is a valid Compose file (checked by Compose itself, no daemon needed), and
its BigFleet services agree with one another, with deploy/compose/deployment.yaml, the dev
fleet and the image (checked here by reading it: no Docker needed).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bigfleet.deployment import Deployment, load
from bigfleet.models import from_wire
from bigfleet.simulation.scenario import load as load_fleet

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
CONFIG = ROOT / "deploy" / "compose" / "deployment.yaml"
DEV_FLEET = ROOT / "examples" / "dev-fleet.yaml"
IMAGE = "bigfleet:latest"


def compose_command() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_file_is_valid():
    command = compose_command()
    if command is None:
        pytest.skip("no docker-compose command on this machine")
    assert COMPOSE_FILE.exists(), f"{COMPOSE_FILE} is missing"
    done = subprocess.run(
        [*command, "-f", str(COMPOSE_FILE), "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"docker-compose config -q failed:\n{done.stderr}{done.stdout}"


# ---- read, not run ----------------------------------------------------------------------------


def services() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(COMPOSE_FILE.read_text())["services"]


def bigfleet_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services().items() if s.get("image") == IMAGE}


def arg(service: dict[str, Any], flag: str) -> str | None:
    args = service.get("command", [])
    return args[args.index(flag) + 1] if flag in args else None


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Mount point -> source (a named volume or a path relative to the compose file)."""
    out = {}
    for v in service.get("volumes", []):
        source, target = v.split(":")[:2]
        out[target] = source
    return out


def config() -> Deployment:
    return from_wire(Deployment, yaml.safe_load(CONFIG.read_text()))


def test_every_bigfleet_server_has_a_readiness_healthcheck_on_its_health_port():
    checked = 0
    for name, s in bigfleet_services().items():
        if s["entrypoint" if "entrypoint" in s else "command"][0] == "python":
            assert s.get("restart") == "no", f"{name}: a one-shot job that restarts"
            continue
        port = arg(s, "--health-port")
        assert port and port != "0", f"{name}: no --health-port"
        test = s["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python", "-c"], name  # the image has no curl
        assert f"http://127.0.0.1:{port}/readyz" in test[3], name
        checked += 1
    assert checked == 7  # two providers, three workers, the gateway, the operator


def test_every_command_line_is_one_bigfleet_accepts(capsys):
    from workers.cli import parser

    for name, s in bigfleet_services().items():
        if "entrypoint" in s:  # the certs job runs Python itself
            continue
        try:
            parsed = parser().parse_args(s["command"])
        except SystemExit:
            pytest.fail(f"{name}: bigfleet {' '.join(s['command'])}: {capsys.readouterr().err}")
        assert parsed.verb == s["command"][0], name


def test_workers_by_role_read_the_compose_deployment_config():
    roles = {}
    for name, s in bigfleet_services().items():
        if s["command"][0] != "worker":
            continue
        roles[arg(s, "--role")] = name
        path = arg(s, "--config")
        assert path is not None and arg(s, "--fleet") is None, name
        assert mounts(s)[path] == "./" + CONFIG.relative_to(ROOT).as_posix(), name
        assert s["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233", name
        assert s["depends_on"]["register-search-attributes"]["condition"] == (
            "service_completed_successfully"
        )
    assert sorted(roles) == ["providers", "shards", "transitions"]
    shards = services()[roles["shards"]]
    assert mounts(shards)[arg(shards, "--snapshot-dir") or ""] == "bigfleet-snapshots"


def test_the_compose_config_reaches_the_services_that_serve_the_dev_fleet():
    fleet = load_fleet(str(DEV_FLEET))
    dep = config()
    assert (dep.name, dep.shards, dep.cycle_seconds) == (
        fleet.name,
        fleet.shards,
        fleet.cycle_seconds,
    )
    all_services = services()
    providers = {}
    for name, s in bigfleet_services().items():
        if s["command"][:2] == ["provider", "serve"]:
            providers[arg(s, "--provider")] = name
            assert mounts(s)[arg(s, "--fleet") or ""] == "./examples/dev-fleet.yaml"
            assert mounts(s)[arg(s, "--state-dir") or ""] == f"{name}-state"
    assert sorted(providers) == sorted(p.name for p in fleet.providers)
    for p in dep.providers:
        host, port = p.endpoint.rsplit(":", 1)
        assert host == providers[p.name]
        assert arg(all_services[host], "--listen") == f"0.0.0.0:{port}"
    (operator,) = [
        s for s in all_services.values() if s.get("command", [])[:2] == ["operator", "serve"]
    ]
    clusters = (arg(operator, "--cluster") or "").split(",")
    assert (
        clusters == [c.name for c in fleet.clusters] == [o.cluster for o in dep.operators.clusters]
    )
    for o in dep.operators.clusters:
        host, port = o.endpoint.rsplit(":", 1)
        assert all_services[host] is operator and arg(operator, "--listen") == f"0.0.0.0:{port}"
    host, port = (arg(operator, "--gateway") or "").rsplit(":", 1)
    assert all_services[host]["command"][0] == "gateway"
    assert dep.gateway.listen == f"0.0.0.0:{port}"


def test_volumes_are_mounted_where_the_image_made_them_its_users():
    """Docker gives a new named volume the owner of its mount point in the image."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    made = re.search(r"mkdir -p ([^\n&\\]+)", dockerfile)
    assert made is not None
    owned = set(made.group(1).split())
    for name, s in bigfleet_services().items():
        for target, source in mounts(s).items():
            if not source.startswith("."):  # a named volume, not a file of this repository
                assert target in owned, f"{name}: {source} on {target}, not made by the image"
    assert re.search(r"^USER 10001:10001$", dockerfile, re.MULTILINE)


def certs_script() -> tuple[str, list[str]]:
    certs = services()["certs"]
    python, flag, code = certs["entrypoint"]
    assert (python, flag) == ("python", "-c")
    return code, certs["command"]


def test_the_certs_job_makes_every_file_the_config_names_and_names_every_host(tmp_path):
    """Run the `certs` service's own script into a copy of the config's directory, then load the
    config as the workers and the gateway do (every file it names must exist)."""
    pytest.importorskip("bigfleet.edge.devca", reason="bigfleet/edge/devca.py not written yet")
    from cryptography import x509

    code, (target,) = certs_script()
    assert target == "/etc/bigfleet/tls"
    assert mounts(services()["gateway"])["/etc/bigfleet/deployment.yaml"]
    shutil.copy(CONFIG, tmp_path / "deployment.yaml")
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "tls")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    dep = load(tmp_path / "deployment.yaml")
    # The names the servers are dialled by are on the one server certificate.
    cert = x509.load_pem_x509_certificate((tmp_path / "tls" / "server.pem").read_bytes())
    names = set(
        cert.extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        ).value.get_values_for_type(x509.DNSName)
    )
    operator = next(s for s in services().values() if s.get("command", [""])[0] == "operator")
    dialled = {p.endpoint.rsplit(":", 1)[0] for p in dep.providers}
    dialled |= {o.endpoint.rsplit(":", 1)[0] for o in dep.operators.clusters}
    dialled.add((arg(operator, "--gateway") or "").rsplit(":", 1)[0])
    assert dialled <= names, dialled - names
    # The operator's TLS directory has each cluster's client certificate.
    for cluster in (arg(operator, "--cluster") or "").split(","):
        assert (tmp_path / "tls" / f"{cluster}.pem").is_file(), cluster
        assert (tmp_path / "tls" / f"{cluster}-key.pem").is_file(), cluster
    # A second run (the next `up`) keeps what the first made while it is valid.
    before = (tmp_path / "tls" / "ca.pem").read_bytes()
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "tls")], check=True, timeout=120)
    assert (tmp_path / "tls" / "ca.pem").read_bytes() == before
