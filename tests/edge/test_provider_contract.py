"""The CapacityProvider gRPC contract from both sides, each server a real process
(`bigfleet provider serve`, tests/edge/broken_provider.py) on a free port:

- the conformance suite passes against the reference cloud and bare-metal providers, and fails,
  naming the checks, against a provider that repeats a Create or answers a blank machine, and
  against one that refuses an invalid transition with the wrong status code;
- the call log shows one "started" per idempotency key, and "repeat" for every repeat;
- a refused call moves no fencing epoch, and an epoch beyond the server's clock is refused
  (issue 30), and the conformance suite fails a provider that fences as before issue 30;
- a server SIGKILLed and restarted on its state dir keeps every machine (ids, states, hosts)
  and its idempotency keys;
- GrpcProvider refuses a malformed reply with ProviderReplyError naming the field.

No Temporal. The servers run tests/edge/conformance-fleet.yaml (sub-second latencies) and are
started once per module.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bigfleet.deployment import ProviderEndpoint
from bigfleet.edge.provider_client import GrpcProvider
from bigfleet.models import BootstrapBlob, FencingToken, ListFilter, Machine, MachineState
from bigfleet.providers.base import ProviderReplyError, StaleFencingToken
from tests.procs import ROOT

S = MachineState
FLEET = Path(__file__).with_name("conformance-fleet.yaml")
BIGFLEET = [sys.executable, "-m", "workers.cli"]
BLOB = BootstrapBlob(user_data=b"#!boot", ttl_seconds=600)


class Server:
    """A provider server process that printed the port it listens on."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.argv, self.log = argv, log
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    def start(self, timeout: float = 30.0) -> Server:
        with open(self.log, "a") as err:
            self.proc = subprocess.Popen(
                self.argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise AssertionError(
                f"{self.argv}: no line in {timeout} s\n{self.log.read_text()}"
            ) from None
        if "listening on" not in line and " on 127.0.0.1:" not in line:
            raise AssertionError(f"{self.argv}: {line!r}\n{self.log.read_text()}")
        self.port = int(line.split("127.0.0.1:")[1].split()[0])
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self, name: str = "cloud") -> GrpcProvider:
        return GrpcProvider(ProviderEndpoint(name=name, endpoint=self.address))

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> int | None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode if self.proc else None


def reference(provider: str, state: Path, log: Path) -> Server:
    return Server(
        [*BIGFLEET, "provider", "serve", "--fleet", str(FLEET), "--provider", provider,
         "--listen", "127.0.0.1:0", "--state-dir", str(state)],
        log,
    )  # fmt: skip


def broken(mode: str, log: Path) -> Server:
    return Server([sys.executable, "-m", "tests.edge.broken_provider", "--mode", mode], log)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("provider-edge")


def _served(server: Server) -> Iterator[Server]:
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cloud(tmp: Path) -> Iterator[Server]:
    yield from _served(reference("cloud", tmp / "cloud", tmp / "cloud.log"))


@pytest.fixture(scope="module")
def baremetal(tmp: Path) -> Iterator[Server]:
    yield from _served(reference("dc", tmp / "dc", tmp / "dc.log"))


@pytest.fixture(scope="module")
def duplicating(tmp: Path) -> Iterator[Server]:
    yield from _served(broken("duplicate", tmp / "duplicate.log"))


@pytest.fixture(scope="module")
def wrong_code(tmp: Path) -> Iterator[Server]:
    yield from _served(broken("wrong-code", tmp / "wrong-code.log"))


@pytest.fixture(scope="module")
def malformed(tmp: Path) -> Iterator[Server]:
    yield from _served(broken("malformed", tmp / "malformed.log"))


@pytest.fixture(scope="module")
def stale_unnamed(tmp: Path) -> Iterator[Server]:
    yield from _served(broken("stale-unnamed", tmp / "stale-unnamed.log"))


@pytest.fixture(scope="module")
def fences_refused(tmp: Path) -> Iterator[Server]:
    yield from _served(broken("fences-refused", tmp / "fences-refused.log"))


def conformance(address: str) -> tuple[int, dict[str, Any], str]:
    out = subprocess.run(
        [*BIGFLEET, "provider", "conformance", address, "--json", "--settle-seconds", "20"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return out.returncode, json.loads(out.stdout), out.stderr


def results(report: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["result"] for c in report["checks"]}


def calls(state: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        [*BIGFLEET, "provider", "calls", "--state-dir", str(state), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)


def token(epoch: int = 1, seq: int = 1) -> FencingToken:
    return FencingToken(shard_id=3, shard_epoch=epoch, seq=seq)


def settle(p: GrpcProvider, machine_id: str, state: S, timeout: float = 20.0) -> Machine:
    deadline = time.monotonic() + timeout
    while True:
        m = p.get(machine_id)
        if m.state is state:
            return m
        assert m.state is not S.FAILED, m
        assert time.monotonic() < deadline, f"{machine_id} still {m.state}"
        time.sleep(0.1)


# ---- conformance ------------------------------------------------------------------------------


def test_the_reference_cloud_provider_conforms(cloud: Server) -> None:
    code, report, err = conformance(cloud.address)
    assert code == 0, (report, err)
    got = results(report)
    assert set(got.values()) == {"pass", "skip"}
    assert got["delete-settles"] == "pass"  # a cloud deletes
    assert got["refused-call-moves-no-epoch"] == got["future-epoch-is-refused"] == "pass"
    assert got["delete-unsupported-is-unimplemented"] == "skip"
    assert got["invalid-transition-is-failed-precondition"] == "pass"


def test_the_reference_bare_metal_provider_conforms(baremetal: Server) -> None:
    code, report, err = conformance(baremetal.address)
    assert code == 0, (report, err)
    got = results(report)
    assert got["delete-unsupported-is-unimplemented"] == "pass"  # bare metal stays
    assert got["drain-settles"] == "pass"
    assert got["delete-acks-at-once"] == "skip"
    assert got["refused-call-moves-no-epoch"] == got["future-epoch-is-refused"] == "pass"
    assert got["invalid-transition-is-failed-precondition"] == "pass"


def test_a_provider_that_repeats_a_create_fails_conformance(duplicating: Server) -> None:
    code, report, err = conformance(duplicating.address)
    assert code == 1
    failed = {name for name, result in results(report).items() if result == "fail"}
    assert failed == {"create-repeat-starts-nothing", "get-unknown-is-not-found"}, report
    (detail,) = [
        c["detail"] for c in report["checks"] if c["name"] == "create-repeat-starts-nothing"
    ]
    assert "same key, new operation" in detail
    assert "the repeat made 1 more machine(s)" in detail

    # The text form names the failing checks too.
    out = subprocess.run(
        [*BIGFLEET, "provider", "conformance", duplicating.address, "--settle-seconds", "20"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 1
    assert "FAIL  create-repeat-starts-nothing" in out.stdout
    assert "failed: get-unknown-is-not-found, create-repeat-starts-nothing" in out.stderr


def test_a_provider_that_answers_an_invalid_transition_wrongly_fails_conformance(
    wrong_code: Server,
) -> None:
    code, report, _ = conformance(wrong_code.address)
    assert code == 1
    failed = {name for name, result in results(report).items() if result == "fail"}
    assert failed == {"invalid-transition-is-failed-precondition"}, report
    (detail,) = [
        c["detail"]
        for c in report["checks"]
        if c["name"] == "invalid-transition-is-failed-precondition"
    ]
    assert "expected FAILED_PRECONDITION, got INVALID_ARGUMENT INVALID_TRANSITION" in detail


def test_a_provider_that_keeps_the_epochs_of_refused_calls_fails_conformance(
    fences_refused: Server,
) -> None:
    code, report, _ = conformance(fences_refused.address)
    assert code == 1
    failed = {name for name, result in results(report).items() if result == "fail"}
    assert failed == {"refused-call-moves-no-epoch", "future-epoch-is-refused"}, report
    detail = {c["name"]: c["detail"] for c in report["checks"]}
    assert "Configure of an unknown machine" in detail["refused-call-moves-no-epoch"]
    assert "is now refused" in detail["refused-call-moves-no-epoch"]
    assert "(2 min ahead): accepted" in detail["future-epoch-is-refused"]
    assert "is fenced out until" in detail["future-epoch-is-refused"]


def test_a_provider_whose_stale_refusal_names_no_epoch_fails_conformance(
    stale_unnamed: Server,
) -> None:
    """Issue 44: a shard refused as stale takes an epoch above the one the provider keeps, so
    the refusal must name it (ErrorInfo highest_epoch)."""
    code, report, _ = conformance(stale_unnamed.address)
    assert code == 1
    failed = {name for name, result in results(report).items() if result == "fail"}
    assert failed == {"stale-token-is-refused"}, report
    detail = {c["name"]: c["detail"] for c in report["checks"]}
    assert "highest_epoch" in detail["stale-token-is-refused"]


def test_conformance_over_mutual_tls(tmp_path: Path) -> None:
    from bigfleet.edge.devca import make_dev_ca

    ca = make_dev_ca(tmp_path / "tls", clients=["bigfleet-worker"])
    client = ca.clients["bigfleet-worker"]
    server = Server(
        [*BIGFLEET, "provider", "serve", "--fleet", str(FLEET), "--provider", "dc",
         "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path / "state"),
         "--tls-cert", str(ca.server.cert), "--tls-key", str(ca.server.key),
         "--tls-client-ca", str(ca.ca)],
        tmp_path / "server.log",
    ).start()  # fmt: skip
    try:
        tls = ["--tls-ca", str(ca.ca), "--server-name", "localhost"]
        check = [*BIGFLEET, "provider", "conformance", server.address, "--settle-seconds", "20"]
        mutual = [*tls, "--tls-cert", str(client.cert), "--tls-key", str(client.key)]
        ok = subprocess.run([*check, *mutual], cwd=ROOT, capture_output=True, text=True)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        # Without a client certificate the server answers nothing: every check fails.
        refused = subprocess.run([*check, *tls], cwd=ROOT, capture_output=True, text=True)
        assert refused.returncode == 1
        assert "FAIL  describe" in refused.stdout
    finally:
        server.stop()


# ---- idempotency keys and the call log --------------------------------------------------------


def test_the_call_log_has_one_start_per_key_and_repeats(cloud: Server, tmp: Path) -> None:
    p = cloud.client()
    try:
        (spare,) = [m for m in p.list(ListFilter(states=[S.SPECULATIVE]))][:1]
        first = p.create([spare.id], token(), key="wf-1/1")
        again = p.create([spare.id], token(), key="wf-1/1")
        assert [a.operation_id for a in again] == [a.operation_id for a in first]
        settle(p, spare.id, S.IDLE)
        configured = p.configure(spare.id, BLOB, "web", token(), key="wf-2/1")
        for _ in range(2):
            repeat = p.configure(spare.id, BLOB, "web", token(), key="wf-2/1")
            assert repeat.operation_id == configured.operation_id
    finally:
        p.close()
    log = calls(tmp / "cloud")
    mine = [(c["method"], c["key"], c["outcome"]) for c in log if c["key"].startswith("wf-")]
    assert mine == [
        ("Create", "wf-1/1", "started"),
        ("Create", "wf-1/1", "repeat"),
        ("Configure", "wf-2/1", "started"),
        ("Configure", "wf-2/1", "repeat"),
        ("Configure", "wf-2/1", "repeat"),
    ]
    started: dict[str, int] = {}
    for c in log:
        if c["outcome"] == "started":
            started[c["key"]] = started.get(c["key"], 0) + 1
    assert set(started.values()) == {1}  # conformance runs included


def test_a_key_reused_for_another_request_is_refused(cloud: Server) -> None:
    from bigfleet.providers.base import ProviderError

    p = cloud.client()
    try:
        a, b = [m.id for m in p.list(ListFilter(states=[S.SPECULATIVE]))][:2]
        p.create([a], token(), key="reused")
        with pytest.raises(ProviderError, match="idempotency_key: already used"):
            p.create([b], token(), key="reused")
        assert p.get(b).state is S.SPECULATIVE
    finally:
        p.close()


# ---- restarts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["cloud", "dc"])
def test_a_killed_server_restarts_with_every_machine_and_key(tmp_path: Path, provider: str) -> None:
    server = reference(provider, tmp_path / "state", tmp_path / "server.log").start()
    try:
        p = server.client(provider)
        a, b, c = [m.id for m in p.list(ListFilter(states=[S.SPECULATIVE]))][:3]
        created = p.create([a, b, c], token(), key="create-abc")
        for mid in (a, b, c):
            settle(p, mid, S.IDLE)
        p.configure(a, BLOB, "web", token(), key="configure-a")
        settle(p, a, S.CONFIGURED)
        p.configure(b, BLOB, "web", token(), key="configure-b")  # left in flight
        before = {m.id: (m.state, m.host, m.cluster) for m in p.list(ListFilter())}
        p.close()
        assert before[a] == (S.CONFIGURED, before[a][1], "web") and before[a][1] is not None

        server.kill()
        server.start()
        p = server.client(provider)
        after = {m.id: (m.state, m.host, m.cluster) for m in p.list(ListFilter())}
        assert after.keys() == before.keys()
        # b's configure went on while the server was down; everything else is as it was.
        assert {k: v for k, v in after.items() if k != b} == {
            k: v for k, v in before.items() if k != b
        }
        assert after[b][1] == before[b][1] and after[b][0] in (S.CONFIGURING, S.CONFIGURED)

        # The key survived: a repeat starts nothing, and new operations get new ids.
        again = p.create([a, b, c], token(), key="create-abc")
        assert [x.operation_id for x in again] == [x.operation_id for x in created]
        (d,) = [m.id for m in p.list(ListFilter(states=[S.SPECULATIVE]))][:1]
        (fresh,) = p.create([d], token(), key="create-d")
        assert fresh.operation_id not in {x.operation_id for x in created}
        p.close()
    finally:
        server.stop()
    log = calls(tmp_path / "state")
    assert [(x["key"], x["outcome"]) for x in log if x["key"] == "create-abc"] == [
        ("create-abc", "started"),
        ("create-abc", "repeat"),
    ]


def test_a_stale_epoch_stays_stale_after_a_restart(tmp_path: Path) -> None:
    server = reference("cloud", tmp_path / "state", tmp_path / "server.log").start()
    try:
        p = server.client()
        (a,) = [m.id for m in p.list(ListFilter(states=[S.SPECULATIVE]))][:1]
        p.create([a], token(epoch=5), key="k5")
        p.close()
        server.kill()
        server.start()
        p = server.client()
        with pytest.raises(StaleFencingToken) as stale:
            p.create([a], token(epoch=4), key="k5")  # a zombie repeating its old call
        assert (stale.value.presented, stale.value.highest) == (4, 5)
        p.close()
    finally:
        server.stop()


def test_a_refused_call_moves_no_epoch_and_an_unissued_one_is_refused(tmp_path: Path) -> None:
    """Issue 30: anyone who may call (the workers' client certificate) sent Configure of
    no-such-machine with an epoch a year ahead; the server answered NOT_FOUND but kept the
    epoch, and the real shard's next Drain was refused as stale for a year."""
    from bigfleet.providers.base import InvalidTransition, MachineNotFound, ProviderError

    now = time.time_ns() // 1_000_000  # the real shard's epoch: its start time in ms

    def shard(epoch: int) -> FencingToken:
        return FencingToken(shard_id=11, shard_epoch=epoch, seq=1)

    server = reference("cloud", tmp_path / "state", tmp_path / "server.log").start()
    try:
        p = server.client()
        a, b = [m.id for m in p.list(ListFilter(states=[S.SPECULATIVE]))][:2]
        p.create([a], shard(now), key="real/create")
        settle(p, a, S.IDLE)
        p.configure(a, BLOB, "web", shard(now), key="real/configure")
        settle(p, a, S.CONFIGURED)

        year_ahead = now + 365 * 24 * 3600 * 1000
        with pytest.raises(ProviderError) as forged:
            p.configure("no-such-machine", BLOB, "web", shard(year_ahead), key="forged/1")
        # Refused for another reason, with epochs a shard could hold: nothing is kept either.
        with pytest.raises(MachineNotFound):
            p.configure("no-such-machine", BLOB, "web", shard(now + 1000), key="forged/2")
        with pytest.raises(InvalidTransition):
            p.configure(b, BLOB, "web", shard(now + 2000), key="forged/3")  # speculative
        p.close()
        server.kill()  # nothing was kept on disk either
        server.start()
        p = server.client()
        drained = p.drain(a, 0.0, shard(now), key="real/drain")
        assert drained.machine.state in (S.DRAINING, S.IDLE)
        with pytest.raises(StaleFencingToken) as zombie:  # the real epoch was kept
            p.drain(a, 0.0, shard(now - 1), key="zombie/drain")
        assert (zombie.value.presented, zombie.value.highest) == (now - 1, now)
        p.close()
    finally:
        server.stop()
    assert not isinstance(forged.value, MachineNotFound)
    assert "token.shard_epoch" in str(forged.value) and "never issued" in str(forged.value)
    outcomes = {c["key"]: c["outcome"] for c in calls(tmp_path / "state")}
    assert outcomes == {
        "real/create": "started",
        "real/configure": "started",
        "forged/1": "INVALID_FIELD",
        "forged/2": "NOT_FOUND",
        "forged/3": "INVALID_TRANSITION",
        "real/drain": "started",
        "zombie/drain": "STALE_FENCING_TOKEN",
    }


# ---- malformed replies ------------------------------------------------------------------------


def test_grpc_provider_names_the_field_of_a_malformed_reply(malformed: Server) -> None:
    p = malformed.client()
    try:
        with pytest.raises(ProviderReplyError) as bad_list:
            p.list(ListFilter())
        assert bad_list.value.fields == ["machines.0.id"]
        with pytest.raises(ProviderReplyError) as bad_get:
            p.get("cloud-m6i-xlarge-us-east-1a-on-demand-00001")
        assert bad_get.value.fields == ["machine.price_per_hour"]
        with pytest.raises(ProviderReplyError) as bad_ack:
            p.create(["cloud-m6i-xlarge-us-east-1a-on-demand-00001"], token(), key="m")
        assert bad_ack.value.fields == ["acks.0.machine.state"]
        assert "acks.0.machine.state" in str(bad_ack.value)
    finally:
        p.close()
