"""The Redfish bare-metal provider against the sushy-tools Redfish emulator (fake driver), each
emulated BMC its own process on its own port, talked to over HTTP exactly as a real BMC is.

Two emulated BMCs are two racks (the second asks for HTTP basic auth, as a real BMC does); a
third BMC address is a closed port (a BMC that does not answer), and one test starts a BMC of
its own and kills it (a BMC that stops answering). The seeds (cidata ISOs) are served to the
emulator by a small HTTP media server in this process, as an operator's media server would serve
`media_dir`; they are read back with pycdlib, an ISO9660 reader independent of the writer
(bigfleet/providers/nocloud.py), and with blkid (how cloud-init finds the disk) where present.

Emulator limits met: its system template fixes Status at State Enabled, Health OK (and spells
the rollup "HealthRollUp", which no Redfish client reads), and no request changes it; the fake
driver never reports PoweringOff. So the launcher below, in the emulator's own process, renders
each system's Status from fields of the fake driver's own record of it (`state`, `health`,
`health_rollup`, kept in the emulator's state directory like its power state) and adds one route
outside the Redfish tree, PATCH /lab/Systems/{id}, through which a test sets them (and the power
state), as a failing DIMM or a pulled cable would on a real BMC. Everything else the provider
reads is the emulator's own. It ignores BootSourceOverrideEnabled=Once (it reports Continuous).
Its fake driver applies a power change 1 to 11 s after the request; the launcher pins that to
the low end (1 s) so the module runs in seconds.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import io
import json
import shutil
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pycdlib
import pytest
import yaml

from bigfleet.edge import conformance
from bigfleet.edge.provider_server import ProviderService, serve_provider
from bigfleet.models import BootstrapBlob, FencingToken, ListFilter, MachineState, NoticeKind
from bigfleet.providers import nocloud
from bigfleet.providers.base import (
    InvalidTransition,
    MachineNotFound,
    NotSupported,
    StaleFencingToken,
    UnissuedEpoch,
)
from bigfleet.providers.redfish import BMCUnreachable, RedfishConfig, RedfishProvider
from tests.procs import Proc, free_port

S = MachineState
LAUNCHER = """\
import json
import sys

import flask
from sushy_tools.emulator.resources.systems import fakedriver

class _PromptHardware:  # the fake driver applies a power change randint(1, 11) s later: take 1
    @staticmethod
    def randint(low, high):
        return low

fakedriver.random = _PromptHardware()
from sushy_tools.emulator import main as emulator

app = emulator.app
_render = app.render_template


def render(name, /, **params):  # a system's Status from the fake driver's record of it
    text = _render(name, **params)
    if name != "system.json" or app.feature_set != "full":
        return text
    system = app.systems._get(params["uuid"])
    body = json.loads(text)
    body["Status"] = {
        "State": system.get("state", "Enabled"),
        "Health": system.get("health", "OK"),
        "HealthRollup": system.get("health_rollup", "OK"),
    }
    return json.dumps(body)


app.render_template = render
FIELDS = {"State": "state", "Health": "health", "HealthRollup": "health_rollup"}


@app.route("/lab/Systems/<identity>", methods=["PATCH"])
def lab_system(identity):  # what the hardware does on its own; not part of Redfish
    body = flask.request.json
    changes = {FIELDS[k]: v for k, v in body.get("Status", {}).items()}
    if "PowerState" in body:
        changes.update(power_state=body["PowerState"], pending_power=None)
    app.systems._update(app.systems.uuid(identity), **changes)
    return "", 204


sys.exit(emulator.main())
"""
BLOB = BootstrapBlob(
    user_data=b"#cloud-config\nruncmd: [kubeadm join --token t0k3n]\n", ttl_seconds=900
)


DIGEST = hashlib.sha256(BLOB.user_data).hexdigest()


def read_cidata(image: bytes) -> tuple[str, dict[str, bytes]]:
    """The volume label and the root's files (by their Joliet names) of an ISO image, as pycdlib
    reads it; the label is also checked in the primary volume descriptor's raw bytes."""
    pvd = image[16 * 2048 : 17 * 2048]
    assert pvd[:7] == b"\x01CD001\x01", "no ISO9660 primary volume descriptor at 32768"
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(image))
    try:
        label = iso.pvd.volume_identifier.decode("ascii").rstrip()
        assert pvd[40:72].decode("ascii").rstrip() == label
        files = {}
        for child in iso.list_children(joliet_path="/"):
            if child.is_dir():
                continue
            name = child.file_identifier().decode("utf-16-be")
            out = io.BytesIO()
            iso.get_file_from_iso_fp(out, joliet_path=f"/{name}")
            files[name] = out.getvalue()
        return label, files
    finally:
        iso.close()


def token(epoch: int = 1, shard: int = 1) -> FencingToken:
    return FencingToken(shard_id=shard, shard_epoch=epoch, seq=1)


def systems(prefix: str, n: int) -> list[dict[str, Any]]:
    return [
        {
            "uuid": f"{prefix}-0000-0000-0000-{i:012d}",
            "name": f"{prefix}-node-{i}",
            "power_state": "Off",
            "nics": [{"mac": f"00:5c:52:31:3a:{i:02x}", "ip": f"10.0.0.{i}"}],
        }
        for i in range(1, n + 1)
    ]


class Emulator:
    def __init__(
        self, tmp: Path, name: str, fake_systems: list[dict[str, Any]], password: str = ""
    ) -> None:
        self.port = free_port()
        self.address = f"http://127.0.0.1:{self.port}"
        self.ids = [s["uuid"] for s in fake_systems]
        conf = tmp / f"{name}.conf"
        settings = {
            "SUSHY_EMULATOR_FAKE_DRIVER": True,
            "SUSHY_EMULATOR_FAKE_SYSTEMS": fake_systems,
            "SUSHY_EMULATOR_STATE_DIR": str(tmp / name),  # default: one /tmp dir for all
        }
        self.headers = {"Content-Type": "application/json"}
        if password:  # HTTP basic auth, as a real BMC asks (an htpasswd file of bcrypt hashes)
            users = tmp / f"{name}.htpasswd"
            users.write_text(
                f"bigfleet:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n"
            )
            settings["SUSHY_EMULATOR_AUTH_FILE"] = str(users)
            basic = base64.b64encode(f"bigfleet:{password}".encode()).decode()
            self.headers["Authorization"] = f"Basic {basic}"
        conf.write_text("".join(f"{k} = {v!r}\n" for k, v in settings.items()))
        launcher = tmp / "launch_emulator.py"
        launcher.write_text(LAUNCHER)
        argv = [sys.executable, str(launcher), "--config", str(conf)]
        argv += ["-i", "127.0.0.1", "-p", str(self.port)]
        self.proc = Proc(name, argv, tmp / f"{name}.log")
        self.proc.start()
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.address}/redfish/v1/", timeout=1).read()
                return
            except OSError as err:
                if not self.proc.alive() or time.monotonic() > deadline:
                    raise AssertionError(f"{name} did not answer\n{self.proc.tail()}") from err
                time.sleep(0.1)

    def get(self, path: str) -> Any:
        request = urllib.request.Request(f"{self.address}{path}", headers=self.headers)
        with urllib.request.urlopen(request, timeout=5) as reply:
            return json.loads(reply.read())

    def post(self, path: str, body: dict[str, Any], method: str = "POST") -> None:
        request = urllib.request.Request(
            f"{self.address}{path}",
            data=json.dumps(body).encode(),
            headers=self.headers,
            method=method,
        )
        urllib.request.urlopen(request, timeout=5).read()

    def hardware(self, system_id: str, **status: str) -> None:
        """The system's own doing (the launcher's lab route): Status fields (State, Health,
        HealthRollup) and PowerState, as the BMC will then report them."""
        body: dict[str, Any] = {"Status": {k: v for k, v in status.items() if k != "PowerState"}}
        if "PowerState" in status:
            body["PowerState"] = status["PowerState"]
        self.post(f"/lab/Systems/{system_id}", body, method="PATCH")

    def system(self, system_id: str) -> Any:
        return self.get(f"/redfish/v1/Systems/{system_id}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("redfish")
    media = tmp / "media"
    media.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(media))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    emulators = [Emulator(tmp, "rack-a", systems("aaaaaaaa", 5))]
    emulators.append(Emulator(tmp, "rack-b", systems("bbbbbbbb", 2), password="s3cret"))
    (tmp / "bmc-password").write_text("s3cret\n")
    try:
        yield {
            "tmp": tmp,
            "media_dir": str(media),
            "media_url": f"http://127.0.0.1:{server.server_address[1]}",
            "a": emulators[0],
            "b": emulators[1],
            "b_auth": {"username": "bigfleet", "password_file": str(tmp / "bmc-password")},
            "closed": f"http://127.0.0.1:{free_port()}",
        }
    finally:
        for emulator in emulators:
            emulator.proc.kill()
        server.shutdown()


def config(lab: dict[str, Any], state: str, *bmcs: dict[str, Any], **more: Any) -> RedfishConfig:
    return RedfishConfig.model_validate(
        {
            "name": "dc-lab",
            "bmcs": list(bmcs),
            "state_path": str(lab["tmp"] / state),
            "media_dir": lab["media_dir"],
            "media_url": lab["media_url"],
            **more,
        }
    )


def bmc(address: str, rack: str, **more: Any) -> dict[str, Any]:
    return {"address": address, "rack": rack, "zone": "lab-1", "instance_type": "r650", **more}


def wait_for(provider: RedfishProvider, machine_id: str, state: MachineState) -> Any:
    deadline = time.monotonic() + 20
    while True:
        machine = provider.get(machine_id)
        if machine.state is state:
            return machine
        assert machine.state is not S.FAILED, machine.last_error
        assert time.monotonic() < deadline, f"{machine_id} still {machine.state}"
        time.sleep(0.2)


def serve(provider: RedfishProvider, machine_id: str) -> None:
    """Claim the system and configure it into cluster-a, until the BMC reports it on."""
    provider.create([machine_id], token())
    provider.configure(machine_id, BLOB, "cluster-a", token())
    wait_for(provider, machine_id, S.CONFIGURED)


def test_two_racks_and_a_bmc_that_does_not_answer(lab: dict[str, Any]) -> None:
    a, b = lab["a"], lab["b"]
    provider = RedfishProvider(
        config(
            lab,
            "inventory.json",
            bmc(a.address, "r1"),
            bmc(b.address, "r2", **lab["b_auth"]),
            bmc(lab["closed"], "r3", systems=["node-9"]),
        )
    )
    machines = provider.list(ListFilter())
    by_rack: dict[str, list[str]] = {}
    for m in machines:
        by_rack.setdefault(m.labels["bigfleet.io/rack"], []).append(m.id)
    assert by_rack == {
        "r1": [f"dc-lab-r1-{i}" for i in a.ids],
        "r2": [f"dc-lab-r2-{i}" for i in b.ids],
        "r3": ["dc-lab-r3-node-9"],
    }
    assert all(m.state is S.SPECULATIVE and m.host is None for m in machines)
    assert all(m.capacity_type == "bare-metal" and m.zone == "lab-1" for m in machines)
    dead = provider.get("dc-lab-r3-node-9")
    assert "unreachable" in dead.last_error and lab["closed"] in dead.last_error
    assert all(not m.last_error for m in machines if m.id != dead.id)
    # The other racks keep working; the dead one refuses to start anything, retryably.
    (ack,) = provider.create([f"dc-lab-r2-{b.ids[0]}"], token())
    assert ack.machine.state is S.IDLE
    with pytest.raises(BMCUnreachable):
        provider.create(["dc-lab-r3-node-9"], token())
    assert len(provider.list(ListFilter())) == len(a.ids) + len(b.ids) + 1


def test_claim_configure_drain_through_the_bmc(lab: dict[str, Any]) -> None:
    a = lab["a"]
    system_id = a.ids[0]
    mid = f"dc-lab-r1-{system_id}"
    cfg = config(lab, "lifecycle.json", bmc(a.address, "r1"))
    provider = RedfishProvider(cfg)

    media = Path(lab["media_dir"])
    # A raw blob an older version published, and a seed of another machine whose id starts
    # with this one's: the first is removed with this machine's seeds, the second is not.
    legacy = media / f"{mid}-{'0' * 16}.img"
    legacy.write_bytes(BLOB.user_data)
    other = media / f"{mid}-7-{'0' * 16}.iso"
    other.write_bytes(b"another machine's seed")
    (ack,) = provider.create([mid], token())
    assert ack.machine.state is S.IDLE
    assert ack.machine.host is not None
    assert ack.machine.host.ref == f"{a.address}/redfish/v1/Systems/{system_id}"
    assert provider.create([mid], token()) == [ack]  # a repeated claim is the same claim
    with pytest.raises(InvalidTransition):
        provider.drain(mid, 0.0, token())  # idle: nothing to drain

    ack = provider.configure(mid, BLOB, "cluster-a", token())
    assert ack.machine.state is S.CONFIGURING and ack.machine.cluster == "cluster-a"
    assert provider.configure(mid, BLOB, "cluster-a", token()).operation_id == ack.operation_id
    # The blob reached the emulated system: its CD holds the URL of a NoCloud seed (a cidata
    # ISO with the blob as user-data), it boots from the CD.
    cd = a.get(f"/redfish/v1/Systems/{system_id}/VirtualMedia/Cd")
    assert cd["Inserted"] is True
    iso_name = f"{mid}-{DIGEST[:16]}.iso"
    assert cd["Image"] == f"{lab['media_url']}/{iso_name}"
    published = media / iso_name
    assert stat.S_IMODE(published.stat().st_mode) == 0o640  # it holds a join credential
    with urllib.request.urlopen(cd["Image"], timeout=5) as reply:
        assert reply.read() == published.read_bytes()
    label, files = read_cidata(published.read_bytes())
    assert label == "cidata" and sorted(files) == ["meta-data", "user-data"]
    assert files["user-data"] == BLOB.user_data
    assert yaml.safe_load(files["meta-data"]) == {
        "instance-id": f"{mid}-{DIGEST[:16]}",
        "local-hostname": mid,
    }
    assert not legacy.exists()
    assert a.system(system_id)["Boot"]["BootSourceOverrideTarget"] == "Hdd"
    machine = wait_for(provider, mid, S.CONFIGURED)
    assert machine.cluster == "cluster-a"
    assert a.system(system_id)["PowerState"] == "On"

    # The claim survives a restart of the provider: it lives in the state file.
    provider = RedfishProvider(cfg)
    assert provider.get(mid).state is S.CONFIGURED

    ack = provider.drain(mid, 1.0, token())
    assert ack.machine.state is S.DRAINING
    assert a.system(system_id)["PowerState"] == "On"  # the grace is the operator's drain
    machine = wait_for(provider, mid, S.IDLE)
    assert machine.cluster is None and machine.host is not None
    assert a.system(system_id)["PowerState"] == "Off"
    assert a.get(f"/redfish/v1/Systems/{system_id}/VirtualMedia/Cd")["Inserted"] is False
    assert [p.name for p in media.glob(f"{mid}-*")] == [other.name]
    other.unlink()

    with pytest.raises(NotSupported):
        provider.delete(mid, token())
    assert provider.get(mid).state is S.IDLE  # bare metal stays


def test_a_configured_system_powered_off_is_failed(lab: dict[str, Any]) -> None:
    a = lab["a"]
    system_id = a.ids[1]
    mid = f"dc-lab-r1-{system_id}"
    provider = RedfishProvider(config(lab, "outage.json", bmc(a.address, "r1")))
    provider.create([mid], token())
    provider.configure(mid, BLOB, "cluster-a", token())
    wait_for(provider, mid, S.CONFIGURED)

    # Someone pulls the plug (through the BMC, as the emulator allows).
    a.post(
        f"/redfish/v1/Systems/{system_id}/Actions/ComputerSystem.Reset", {"ResetType": "ForceOff"}
    )
    deadline = time.monotonic() + 20
    while (machine := provider.get(mid)).state is not S.FAILED:
        assert time.monotonic() < deadline, machine
        time.sleep(0.2)
    assert machine.failed_from is S.CONFIGURED
    assert "powered off unexpectedly (the BMC reports PowerState Off)" in machine.last_error
    assert machine.cluster == "cluster-a"

    with pytest.raises(InvalidTransition):
        provider.drain(mid, 0.0, token())  # a failed machine is drained only with force
    provider.drain(mid, 0.0, token(), force=True)
    assert wait_for(provider, mid, S.IDLE).cluster is None


def test_a_stale_epoch_is_refused_before_any_bmc_call(lab: dict[str, Any]) -> None:
    """The epoch of a call that succeeded is kept in the state file; a stale one is refused
    before any BMC is asked (the dead BMC's machine answers stale, not unreachable). A refused
    call keeps nothing (issue 30): not a dead BMC's, not an invalid transition's, not an
    unknown machine's, and an epoch beyond the clock was never issued."""
    b = lab["b"]
    cfg = config(
        lab,
        "fencing.json",
        bmc(b.address, "r2", systems=[b.ids[0]], **lab["b_auth"]),
        bmc(lab["closed"], "r3", systems=["node-9"]),
    )
    live, dead = f"dc-lab-r2-{b.ids[0]}", "dc-lab-r3-node-9"
    provider = RedfishProvider(cfg)
    provider.create([live], token(epoch=7, shard=4))  # a claim: nothing is powered
    with pytest.raises(BMCUnreachable):
        provider.create([dead], token(epoch=8, shard=4))
    with pytest.raises(InvalidTransition):
        provider.drain(live, 0.0, token(epoch=9, shard=4))  # IDLE: nothing to drain
    with pytest.raises(MachineNotFound):
        provider.configure("dc-lab-r2-no-such-system", BLOB, "c", token(epoch=10, shard=4))
    year_ahead = int(time.time() * 1000) + 365 * 86_400_000
    with pytest.raises(UnissuedEpoch, match="token.shard_epoch"):
        provider.configure(dead, BLOB, "c", token(epoch=year_ahead, shard=4))
    assert json.loads(Path(cfg.state_path).read_text())["epochs"] == {"4": 7}
    for restarted in (provider, RedfishProvider(cfg)):  # the epoch is kept in the state file
        with pytest.raises(StaleFencingToken):
            restarted.create([dead], token(epoch=6, shard=4))
        with pytest.raises(StaleFencingToken):
            restarted.drain(dead, 0.0, token(epoch=6, shard=4))
        (again,) = restarted.create([live], token(epoch=7, shard=4))  # 7 is still current
        assert again.machine.state is S.IDLE
    # A state file from before issue 30 that kept an epoch a year ahead: dropped on load.
    state = json.loads(Path(cfg.state_path).read_text())
    Path(cfg.state_path).write_text(json.dumps({**state, "epochs": {"4": 7, "5": year_ahead}}))
    assert RedfishProvider(cfg)._state["epochs"] == {"4": 7}


def test_a_bmc_that_stops_answering_keeps_its_machines(lab: dict[str, Any]) -> None:
    emulator = Emulator(lab["tmp"], "rack-c", systems("cccccccc", 1))
    try:
        mid = f"dc-lab-r9-{emulator.ids[0]}"
        cfg = config(lab, "gone.json", bmc(emulator.address, "r9"))
        provider = RedfishProvider(cfg)
        provider.create([mid], token())
        provider.configure(mid, BLOB, "cluster-c", token())
        wait_for(provider, mid, S.CONFIGURED)
    finally:
        emulator.proc.kill()
    for p in (provider, RedfishProvider(cfg)):  # a restart lists it too (inventory cached)
        (machine,) = p.list(ListFilter())
        assert machine.id == mid and machine.state is S.CONFIGURED
        assert machine.cluster == "cluster-c"
        assert f"BMC {emulator.address} unreachable" in machine.last_error
    # A drain is accepted (the grace is bookkeeping) and waits for the BMC to power it off.
    assert provider.drain(mid, 0.0, token()).machine.state is S.DRAINING
    assert provider.get(mid).state is S.DRAINING


def test_a_degraded_system_carries_an_unhealthy_notice(lab: dict[str, Any]) -> None:
    a = lab["a"]
    system_id = a.ids[3]
    mid = f"dc-lab-r1-{system_id}"
    provider = RedfishProvider(config(lab, "health.json", bmc(a.address, "r1")))
    noticed = ListFilter(noticed=True)
    try:
        # A system known degraded is not handed out: not claimed while its BMC says Warning.
        a.hardware(system_id, Health="Warning")
        (listed,) = [m for m in provider.list(ListFilter()) if m.id == mid]
        assert listed.state is S.SPECULATIVE and "health Warning" in listed.last_error
        assert listed.notice is None  # not BigFleet's yet: nothing to repair
        with pytest.raises(InvalidTransition, match="health Warning"):
            provider.create([mid], token())
        a.hardware(system_id, Health="OK")
        serve(provider, mid)
        assert provider.list(noticed) == []

        # Degraded while serving: still CONFIGURED, with a notice for the shard to repair it.
        a.hardware(system_id, Health="Warning")
        (machine,) = provider.list(noticed)
        assert machine.id == mid and machine.state is S.CONFIGURED
        assert machine.cluster == "cluster-a" and not machine.last_error
        assert machine.notice is not None
        assert machine.notice.kind is NoticeKind.UNHEALTHY and machine.notice.deadline_unix == 0
        assert "health Warning" in machine.notice.detail
        assert provider.get(mid).notice == machine.notice

        # The BMC says OK again: the notice is gone.
        a.hardware(system_id, Health="OK")
        assert provider.list(noticed) == []
        assert provider.get(mid).notice is None

        # A component's Warning (the rollup) counts as well: the worse of the two is the health.
        a.hardware(system_id, HealthRollup="Warning")
        (machine,) = provider.list(noticed)
        assert machine.notice is not None and "HealthRollup" in machine.notice.detail
        # The shard drains it: noticed while DRAINING and once IDLE, and not configured again.
        draining = provider.drain(mid, 0.0, token()).machine
        assert draining.state is S.DRAINING and draining.notice == machine.notice
        idle = wait_for(provider, mid, S.IDLE)
        assert idle.notice == machine.notice
        with pytest.raises(InvalidTransition, match="HealthRollup"):
            provider.configure(mid, BLOB, "cluster-a", token())
        a.hardware(system_id, HealthRollup="OK")
        assert provider.get(mid).notice is None
        assert provider.configure(mid, BLOB, "cluster-a", token()).machine.notice is None
        wait_for(provider, mid, S.CONFIGURED)
    finally:
        a.hardware(system_id, Health="OK", HealthRollup="OK")


def test_critical_or_powered_off_while_configured_is_failed(lab: dict[str, Any]) -> None:
    a = lab["a"]
    system_id = a.ids[4]
    mid = f"dc-lab-r1-{system_id}"
    provider = RedfishProvider(config(lab, "critical.json", bmc(a.address, "r1")))
    try:
        a.hardware(system_id, Health="Critical")
        with pytest.raises(InvalidTransition, match="health Critical"):
            provider.create([mid], token())
        a.hardware(system_id, Health="OK", State="Disabled")
        with pytest.raises(InvalidTransition, match="not Enabled"):
            provider.create([mid], token())
        a.hardware(system_id, State="Enabled")
        serve(provider, mid)

        # Critical: FAILED (replaced as any failed machine), not a notice.
        a.hardware(system_id, Health="Critical")
        machine = provider.get(mid)
        assert machine.state is S.FAILED and machine.failed_from is S.CONFIGURED
        assert "health Critical" in machine.last_error and machine.notice is None
        assert provider.list(ListFilter(noticed=True)) == []
        assert [m.id for m in provider.list(ListFilter(states=[S.FAILED]))] == [mid]

        # Repaired, drained back to IDLE, configured again.
        a.hardware(system_id, Health="OK")
        provider.drain(mid, 0.0, token(), force=True)
        wait_for(provider, mid, S.IDLE)
        provider.configure(mid, BLOB, "cluster-a", token())
        wait_for(provider, mid, S.CONFIGURED)

        # Shutting down with no drain asked (the OS halting, a button pressed): FAILED at once.
        a.hardware(system_id, PowerState="PoweringOff")
        machine = provider.get(mid)
        assert machine.state is S.FAILED and machine.failed_from is S.CONFIGURED
        assert "powered off unexpectedly (the BMC reports PowerState PoweringOff)" in (
            machine.last_error
        )
    finally:
        a.hardware(system_id, Health="OK", State="Enabled", PowerState="Off")


def test_conformance_over_grpc(lab: dict[str, Any]) -> None:
    b = lab["b"]
    provider = RedfishProvider(
        config(
            lab,
            "conformance.json",
            bmc(b.address, "r2", systems=[b.ids[1]], **lab["b_auth"]),
            bmc(lab["closed"], "r3", systems=["node-9"]),
        )
    )
    server = serve_provider(ProviderService(provider), "127.0.0.1:0")
    try:
        checks = conformance.run(f"127.0.0.1:{server.port}", settle_seconds=20.0)
    finally:
        server.stop(0)
    report = conformance.render("redfish", checks)
    print(report)
    assert conformance.passed(checks), report
    results = {c.name: c.result for c in checks}
    assert results["delete-unsupported-is-unimplemented"] == "pass", report
    assert results["drain-settles"] == "pass", report


def test_configuring_a_running_system_power_cycles_it(lab: dict[str, Any]) -> None:
    a = lab["a"]
    system_id = a.ids[2]
    mid = f"dc-lab-r1-{system_id}"
    reset = f"/redfish/v1/Systems/{system_id}/Actions/ComputerSystem.Reset"
    a.post(reset, {"ResetType": "On"})  # left running by whoever commissioned it
    deadline = time.monotonic() + 20
    while a.system(system_id)["PowerState"] != "On":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    provider = RedfishProvider(config(lab, "cycle.json", bmc(a.address, "r1")))
    provider.create([mid], token())
    assert provider.configure(mid, BLOB, "cluster-a", token()).machine.state is S.CONFIGURING
    # Off first (a power-on seen before that is not the boot from the blob), then on again.
    assert provider.get(mid).state is S.CONFIGURING
    assert wait_for(provider, mid, S.CONFIGURED).cluster == "cluster-a"
    assert a.system(system_id)["PowerState"] == "On"
    assert a.system(system_id)["Boot"]["BootSourceOverrideTarget"] == "Hdd"


def test_the_operator_config_file(tmp_path: Path) -> None:
    path = tmp_path / "redfish.yaml"
    path.write_text(
        """\
name: dc-ams
state_path: /var/lib/bigfleet/redfish/dc-ams.json
media_dir: /srv/bigfleet-media
media_url: https://media.ams.example.net/bigfleet
bmcs:
  - address: https://10.20.1.11
    username: bigfleet
    password_file: /etc/bigfleet/bmc-password
    ca_path: /etc/bigfleet/bmc-ca.pem
    rack: ams-r01
    zone: ams-1
    instance_type: r650-gpu
    price_per_hour: 1.85
    resources: {cpu: 64, memory_gib: 512, gpu: 4}
  - address: https://10.20.2.11
    username: bigfleet
    password_file: /etc/bigfleet/bmc-password
    systems: [System.Embedded.1]
    rack: ams-r02
    zone: ams-2
    instance_type: r650
"""
    )
    cfg = RedfishConfig.load(path)
    assert [b.rack for b in cfg.bmcs] == ["ams-r01", "ams-r02"]
    assert cfg.bmcs[0].resources.gpu == 4 and cfg.boot_method == "virtual-media"
    text = path.read_text()
    path.write_text(text.replace("media_dir: /srv/bigfleet-media\n", ""))
    with pytest.raises(ValueError, match="virtual-media needs media_dir"):
        RedfishConfig.load(path)
    # PXE: the PXE/HTTP boot server serves the nocloud-net seeds from media_dir, so it is
    # needed too (without it a configure's blob would be stored nowhere); media_url is not.
    pxe = text.replace("media_url: https://media.ams.example.net/bigfleet\n", "")
    path.write_text(pxe + "boot_method: pxe\n")
    assert RedfishConfig.load(path).boot_method == "pxe"
    path.write_text(pxe.replace("media_dir: /srv/bigfleet-media\n", "") + "boot_method: pxe\n")
    with pytest.raises(ValueError, match="pxe needs media_dir"):
        RedfishConfig.load(path)


def test_a_bmc_that_refuses_the_credentials(lab: dict[str, Any]) -> None:
    b = lab["b"]
    wrong = bmc(b.address, "r2", systems=b.ids, username="bigfleet", password="wrong")
    provider = RedfishProvider(config(lab, "denied.json", wrong))
    machines = provider.list(ListFilter())
    assert [m.id for m in machines] == [f"dc-lab-r2-{i}" for i in b.ids]
    assert all("refused the credentials" in m.last_error for m in machines)
    with pytest.raises(BMCUnreachable):
        provider.create([machines[0].id], token())


def test_the_seed_is_a_cidata_iso_with_the_blob_as_user_data() -> None:
    mid = "dc-ams-ams-r02-System-Embedded-1"
    blob = b"#cloud-config\n" + bytes(range(256)) * 40  # several sectors, every byte value
    digest = hashlib.sha256(blob).hexdigest()
    image = nocloud.cidata_iso(nocloud.seed_files(mid, blob, digest))
    assert len(image) % 2048 == 0
    assert image[17 * 2048 : 17 * 2048 + 7] == b"\x02CD001\x01"  # the Joliet descriptor
    assert image[17 * 2048 + 88 : 17 * 2048 + 91] == b"%/E"  # UCS-2 level 3
    label, files = read_cidata(image)
    assert label == "cidata"
    assert files["user-data"] == blob
    meta = yaml.safe_load(files["meta-data"])
    assert meta == {"instance-id": f"{mid}-{digest[:16]}", "local-hostname": mid.lower()}
    # Another blob for the same machine is another instance: cloud-init runs it anew.
    again = read_cidata(nocloud.cidata_iso(nocloud.seed_files(mid, b"x", "f" * 64)))[1]
    assert yaml.safe_load(again["meta-data"])["instance-id"] == f"{mid}-{'f' * 16}"


@pytest.mark.skipif(shutil.which("blkid") is None, reason="no blkid on this machine")
def test_blkid_finds_the_seed_by_its_cidata_label(tmp_path: Path) -> None:
    # cloud-init looks the NoCloud disk up by label through blkid (LABEL=cidata).
    path = tmp_path / "seed.iso"
    path.write_bytes(nocloud.cidata_iso(nocloud.seed_files("m-1", BLOB.user_data, DIGEST)))
    found = subprocess.run(
        ["blkid", "-p", "-o", "export", str(path)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert "LABEL=cidata" in found and "TYPE=iso9660" in found


def test_pxe_publishes_a_nocloud_net_seed(lab: dict[str, Any]) -> None:
    b = lab["b"]
    system_id = b.ids[0]  # only claimed (each in its own state file) by other tests
    mid = f"dc-lab-r2-{system_id}"
    rack = bmc(b.address, "r2", systems=[system_id], **lab["b_auth"])
    with pytest.raises(ValueError, match="media_dir"):
        config(lab, "pxe.json", rack, boot_method="pxe", media_dir=None, media_url=None)
    media = Path(lab["media_dir"]) / "pxe"
    cfg = config(
        lab,
        "pxe.json",
        rack,
        boot_method="pxe",
        media_dir=str(media),
        media_url=f"{lab['media_url']}/pxe",
    )
    provider = RedfishProvider(cfg)
    provider.create([mid], token())
    provider.configure(mid, BLOB, "cluster-b", token())
    # The seed an iPXE `ds=nocloud-net;s={media_url}/{machine id}/` kernel argument points at.
    seed = f"{lab['media_url']}/pxe/{mid}/"
    assert json.loads(Path(cfg.state_path).read_text())["machines"][mid]["media"] == seed
    for name in ("user-data", "meta-data"):
        assert stat.S_IMODE((media / mid / name).stat().st_mode) == 0o640
    with urllib.request.urlopen(seed + "user-data", timeout=5) as reply:
        assert reply.read() == BLOB.user_data
    with urllib.request.urlopen(seed + "meta-data", timeout=5) as reply:
        assert yaml.safe_load(reply.read())["instance-id"] == f"{mid}-{DIGEST[:16]}"
    assert b.system(system_id)["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    assert b.get(f"/redfish/v1/Systems/{system_id}/VirtualMedia/Cd")["Inserted"] is False
    wait_for(provider, mid, S.CONFIGURED)

    provider.drain(mid, 0.0, token())
    assert wait_for(provider, mid, S.IDLE).cluster is None
    assert not (media / mid).exists()  # the seed (a join credential) is gone with the node
