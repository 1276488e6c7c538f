"""docker-compose.yml is a valid Compose file (checked by Compose itself, no daemon needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"


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
