"""`./bf` says what it does before it takes minutes or touches the system (issue 48): its first
call says it is installing, and `./bf test` installs no system package unless asked, saying
that the tests needing a missing tool skip. Run on a copy of `bf` whose Python is a stub: no
real install, nothing downloaded."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

from tests.procs import ROOT

FAKE_PYTHON = """#!/bin/sh
# `python -m venv DIR`: a venv whose python, ruff, mypy and bigfleet do nothing.
if [ "$1" = -m ] && [ "$2" = venv ]; then
  mkdir -p "$3/bin"
  for tool in python ruff mypy bigfleet; do
    printf '#!/bin/sh\\necho "%s $*" >> "%s/calls"\\n' "$tool" "$3" > "$3/bin/$tool"
    chmod +x "$3/bin/$tool"
  done
fi
"""


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def _checkout(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    here = tmp_path / "checkout"
    here.mkdir()
    shutil.copy(ROOT / "bf", here / "bf")
    (here / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    bin_dir = tmp_path / "bin"  # what PATH holds: the basics, an apt-get that records calls
    bin_dir.mkdir()
    for tool in ("sh", "bash", "sha1sum", "cut", "dirname", "rm", "touch", "id", "mkdir",
                 "chmod", "printf", "cat"):  # fmt: skip
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    _executable(bin_dir / "apt-get", f'#!/bin/sh\necho "apt-get $*" >> {tmp_path}/apt-calls\n')
    python = _executable(tmp_path / "python", FAKE_PYTHON)
    return here, {"PATH": str(bin_dir), "PYTHON": str(python), "HOME": str(tmp_path)}


def test_the_first_call_says_it_is_installing_and_the_second_is_quiet(tmp_path):
    here, env = _checkout(tmp_path)
    first = subprocess.run([str(here / "bf"), "--help"], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "first run: installing BigFleet" in first.stderr, first.stderr
    second = subprocess.run([str(here / "bf"), "--help"], env=env, capture_output=True, text=True)
    assert second.returncode == 0 and "installing" not in second.stderr, second.stderr
    assert "bigfleet --help" in (here / ".venv" / "calls").read_text()


def test_bf_test_installs_no_system_package_and_says_which_tests_skip(tmp_path):
    here, env = _checkout(tmp_path)
    done = subprocess.run([str(here / "bf"), "test", "-k", "x"], env=env, capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "no chromium docker-compose on this machine: the tests that need them skip" in (
        done.stderr
    ), done.stderr
    assert not (tmp_path / "apt-calls").exists()
    # Asked to (as CI does), as root, it says so before it installs.
    if os.getuid() == 0:
        env["BF_INSTALL_SYSTEM"] = "1"
        done = subprocess.run([str(here / "bf"), "test", "-k", "x"], env=env,
                              capture_output=True, text=True)  # fmt: skip
        assert "== installing chromium docker-compose from Debian" in done.stderr, done.stderr
        assert "apt-get install" in (tmp_path / "apt-calls").read_text()
