"""Bare metal through Redfish BMCs (seed §7 "Bare-metal providers"), over the `sushy` client.

Every system of every configured BMC is a machine, SPECULATIVE until claimed. Redfish holds
power, health and boot settings; what it cannot hold (which machine is claimed, for which
cluster, a drain's grace, the highest fencing epoch per shard: kept only for calls that succeed,
bigfleet/providers/fencing.py) is a small JSON file, `state_path`, rewritten atomically after
every change (one provider process per file).

- Create claims a commissioned system (enabled, health OK): SPECULATIVE → IDLE at once. A
  system whose BMC reports health Warning is not claimed (nor configured): a machine known to
  be degraded is not handed out; it is claimable again once its BMC says OK.
- Configure publishes the bootstrap blob (cloud-init user data) as a cloud-init NoCloud seed
  (nocloud.py): with `boot_method: virtual-media`, an ISO9660 image labelled `cidata` holding
  `user-data` (the blob) and `meta-data` (`instance-id: {machine id}-{digest[:16]}`, so a new
  blob is a new instance to cloud-init), `{media_dir}/{machine id}-{digest[:16]}.iso`, served to
  the BMCs at `media_url`; it is inserted as the Cd virtual media, the one-time boot override is
  Hdd (the system's own disk: the seed is not bootable), and the system is powered on (one that
  is running is switched off first): CONFIGURING, then CONFIGURED once the BMC reports it on.
  The OS on that disk must run cloud-init with the NoCloud datasource, which finds the `cidata`
  disk. With `boot_method: pxe`
  the seed is the files `{media_dir}/{machine id}/user-data` and `meta-data`, for the operator's
  PXE/HTTP boot server to serve and hand to cloud-init as `ds=nocloud-net;s={url}/{machine id}/`;
  the override is Pxe. A BMC that refuses any of it fails the configure (FAILED from
  CONFIGURING, its answer in `last_error`).
- Drain: the cluster's operator drains the node during the grace; then the system is shut down
  (ForceOff when forced, or when a graceful shutdown outlasts `power_off_seconds`), its media
  ejected and its seed removed: IDLE once the BMC reports it off. Delete is NotSupported.
- Progress is observed: `get` and `list` read each system from its BMC and move it on (BigFleet
  polls them while a transition runs). A CONFIGURED system found powered Off or PoweringOff
  (BigFleet powers systems off only while DRAINING), or a CONFIGURING or CONFIGURED one whose
  BMC reports health Critical, is FAILED with `last_error` naming the power state or health.
- Health: a system's health is the worse of the BMC's `Status.Health` (the system itself) and
  `Status.HealthRollup` (with its components: a DIMM, a fan, a power supply). A machine with a
  host that is not FAILED (IDLE, CONFIGURING, CONFIGURED, DRAINING) whose health is Warning or
  worse carries `notice` kind `unhealthy` (deadline 0, the BMC's words in `detail`): the shard
  drains and replaces it within the cluster's `max_unhealthy`. It is read anew on every `get`
  and `list` (kept as last known while the BMC does not answer): when the BMC says OK again the
  notice is gone. `list` with `noticed` returns only machines that carry one.
- A BMC that does not answer (or refuses the credentials): its machines stay listed in their
  last known state with `last_error` naming the BMC (the hosts may well still be serving: a BMC
  is out of band); it is not asked again for `bmc_retry_seconds`, and lifecycle calls on its
  machines raise BMCUnreachable (untyped on the wire, so BigFleet retries them).
"""

from __future__ import annotations

import builtins
import contextlib
import glob
import hashlib
import json
import os
import pathlib
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import sushy
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sushy import exceptions as sushy_exc

from .. import labels
from ..epochs import latest_issued
from ..models import (
    NOTICE_DETAIL_MAX,
    BootstrapBlob,
    CapacityType,
    Dollars,
    FencingToken,
    HostRef,
    ListFilter,
    Machine,
    MachineState,
    Name,
    Notice,
    NoticeKind,
    Resources,
    TransitionAck,
)
from ..yamlfile import load_model
from . import nocloud
from .base import (
    MAX_CREATE_BATCH,
    InvalidTransition,
    MachineNotFound,
    NotSupported,
    ProviderError,
    check_grace,
)
from .fencing import fenced
from .slots import slot_id

S = MachineState
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Url = Annotated[str, Field(pattern=r"^https?://[^\s/]+(/\S*)?$")]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class BMCSpec(_Spec):
    """One BMC (or one Redfish aggregator) and the systems of it that belong to BigFleet."""

    address: Url  # the Redfish service's root, e.g. https://10.1.2.3 (…/redfish/v1 is added)
    username: str | None = None
    password: str | None = None
    password_file: str | None = None  # read at start; wins over `password`
    verify_tls: bool = True
    ca_path: str | None = None  # a CA bundle to verify the BMC with (implies verify_tls)
    systems: list[Name] = Field(default_factory=list)  # system ids; empty: every system listed
    rack: Name
    zone: Name
    region: Name | None = None  # default: the zone without its last part (ams-1 -> ams)
    instance_type: Name
    price_per_hour: Dollars = 0.0  # owned hardware: 0, or an amortised cost
    resources: Resources = Resources()
    arch: Name = "amd64"

    @model_validator(mode="after")
    def _one_password(self) -> BMCSpec:
        if self.password is not None and self.password_file is not None:
            raise ValueError("password and password_file: give one or neither")
        return self


class RedfishConfig(_Spec):
    name: Name
    bmcs: Annotated[list[BMCSpec], Field(min_length=1)]
    state_path: str  # JSON file: claims, clusters, drains, fencing epochs, seen systems
    boot_method: Literal["virtual-media", "pxe"] = "virtual-media"
    media_dir: str | None = None  # where the NoCloud seeds are written (required: _media)
    media_url: Url | None = None  # how the BMCs (or the PXE server's clients) reach media_dir
    configure_timeout_seconds: Seconds = 900.0  # power-on must be seen within this
    power_off_seconds: Seconds = 300.0  # graceful shutdown, then ForceOff
    connect_timeout_seconds: Seconds = 3.0
    read_timeout_seconds: Seconds = 15.0
    bmc_retry_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 10.0

    @model_validator(mode="after")
    def _media(self) -> RedfishConfig:
        # Every configure publishes a seed; without media_dir the blob would go nowhere.
        if self.boot_method == "virtual-media" and not (self.media_dir and self.media_url):
            raise ValueError(
                "boot_method virtual-media needs media_dir and media_url "
                "(the cidata ISO the BMCs insert is written to media_dir, fetched from media_url)"
            )
        if self.boot_method == "pxe" and not self.media_dir:
            raise ValueError(
                "boot_method pxe needs media_dir (the nocloud-net seed, "
                "{media_dir}/{machine id}/user-data and meta-data, is written there for the "
                "PXE/HTTP boot server to serve)"
            )
        return self

    @classmethod
    def load(cls, path: str | pathlib.Path) -> RedfishConfig:
        return load_model(pathlib.Path(path), cls, "Redfish provider config", ValueError)


class BMCUnreachable(ProviderError):
    """The machine's BMC did not answer; the call changed nothing and may be retried."""


@dataclass
class Observed:
    """What a BMC said of one system just now."""

    power: str  # sushy.PowerState value: "On", "Off", "PoweringOn", "PoweringOff", "Paused"
    health: str  # Status.Health: "OK", "Warning", "Critical" or "" when the BMC does not say
    enabled: bool
    health_rollup: str = ""  # Status.HealthRollup (the system with its components), as health


@dataclass
class _System:
    machine_id: str
    bmc: _BMC
    system_id: str

    @property
    def path(self) -> str:
        return f"/redfish/v1/Systems/{self.system_id}"


@dataclass
class _BMC:
    spec: BMCSpec
    root: Any = None  # sushy.Sushy, connected lazily
    down_until: float = 0.0
    error: str = ""
    last_seen: dict[str, Observed] = field(default_factory=dict)


class _Down(Exception):
    pass


class RedfishProvider:
    """The provider (module docstring). Thread-safe: one lock around every call."""

    blocking = True  # every call goes over the network to a BMC
    supports_delete = False

    def __init__(self, config: RedfishConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.name = config.name
        self._clock = clock
        self._lock = threading.RLock()
        self._path = pathlib.Path(config.state_path)
        self._state: dict[str, Any] = {"epochs": {}, "inventory": {}, "machines": {}, "op": 0}
        if self._path.exists():
            self._state.update(json.loads(self._path.read_text()))
        # Epochs from beyond the clock were never issued (kept by refused calls before issue
        # 30): they fence nothing, and must not start to once the clock reaches them.
        latest = latest_issued(self._clock())
        self._state["epochs"] = {k: v for k, v in self._state["epochs"].items() if v <= latest}
        addresses = [b.address for b in config.bmcs]
        if len(set(addresses)) != len(addresses):
            raise ValueError(f"provider {self.name}: a BMC address is listed twice")
        self._bmcs = [_BMC(spec) for spec in config.bmcs]

    # -- the CapacityProvider calls ---------------------------------------------------------

    def create(
        self, machine_ids: builtins.list[str], token: FencingToken, *, key: str = ""
    ) -> builtins.list[TransitionAck]:
        if len(machine_ids) > MAX_CREATE_BATCH:
            raise ValueError(
                f"create takes at most {MAX_CREATE_BATCH} machine ids per call, "
                f"got {len(machine_ids)}"
            )
        with self._lock, self._fenced(token):
            systems = [self._system(mid) for mid in machine_ids]
            # All or nothing: every system is checked before any is claimed.
            for system in systems:
                record = self._record(system.machine_id)
                if record is not None and record.get("transition") == "create":
                    if record["state"] == S.IDLE:
                        continue  # the repeat of a claim that is still in place
                if record is not None:
                    raise self._invalid(system, record, "create")
                seen = self._observe(system)
                why = _unfit(seen)
                if why:
                    raise InvalidTransition(
                        self.name, system.machine_id, S.SPECULATIVE, "create", why
                    )
            for system in systems:
                if self._record(system.machine_id) is None:
                    self._start(system.machine_id, "create", S.IDLE)
            self._save()
            return [self._ack(system) for system in systems]

    def configure(
        self,
        machine_id: str,
        blob: BootstrapBlob,
        cluster: str,
        token: FencingToken,
        *,
        key: str = "",
    ) -> TransitionAck:
        with self._lock, self._fenced(token):
            system = self._system(machine_id)
            record = self._record(machine_id)
            digest = hashlib.sha256(blob.user_data).hexdigest()
            if (
                record is not None
                and record.get("transition") == "configure"
                and record.get("cluster") == cluster
                and record["state"] in (S.CONFIGURING, S.CONFIGURED)
            ):
                return self._ack(system)  # the repeat (by machine and cluster, as simulated)
            retry = record is not None and record.get("failed_from") == S.CONFIGURING
            if record is None or not (record["state"] == S.IDLE or retry):
                raise self._invalid(system, record, "configure")
            seen = self._observe(system)
            why = _unfit(seen)
            if why:
                raise InvalidTransition(self.name, machine_id, S(record["state"]), "configure", why)
            media = self._publish(machine_id, blob.user_data, digest)
            cycling, refused = self._boot(system, seen, media)
            self._start(
                machine_id,
                "configure",
                S.CONFIGURING,
                cluster=cluster,
                blob_sha256=digest,
                media=media,
                power_on_pending=cycling,
            )
            if refused:  # started and failed at once: the shard retries with a fresh blob
                self._fail(self._record_of(machine_id), self._clock(), refused)
            self._save()
            return self._ack(system)

    def drain(
        self,
        machine_id: str,
        grace_seconds: float,
        token: FencingToken,
        force: bool = False,
        *,
        key: str = "",
    ) -> TransitionAck:
        check_grace(machine_id, grace_seconds)
        with self._lock, self._fenced(token):
            system = self._system(machine_id)
            record = self._record(machine_id)
            now = self._clock()
            grace_end = now + (0.0 if force else grace_seconds)
            if record is not None and record["state"] == S.DRAINING:
                # A repeat, or an escalation: a shorter grace (or force) pulls the end forward.
                record["grace_end"] = min(record["grace_end"], grace_end)
                record["force"] = record.get("force", False) or force
            else:
                corrects = (
                    record is not None
                    and record["state"] == S.FAILED
                    and record.get("failed_from") in (S.CONFIGURING, S.CONFIGURED, S.DRAINING)
                )
                if record is None or not (record["state"] == S.CONFIGURED or (corrects and force)):
                    why = "a failed machine is only drained with force=True" if corrects else ""
                    raise self._invalid(system, record, "drain", why)
                cluster = record.get("cluster")
                self._start(machine_id, "drain", S.DRAINING, cluster=cluster)
                record = self._record_of(machine_id)
                record.update(grace_end=grace_end, force=force, shutdown_at=None)
            self._save()
            self._settle(system, self._observe_or_none(system))
            return self._ack(system)

    def delete(self, machine_id: str, token: FencingToken, *, key: str = "") -> TransitionAck:
        raise NotSupported(
            self.name,
            "delete",
            f"bare metal stays in inventory; idle machine {machine_id} is reused, not released",
        )

    def get(self, machine_id: str) -> Machine:
        with self._lock:
            system = self._system(machine_id)
            self._settle(system, self._observe_or_none(system))
            return self._snapshot(system)

    def list(self, filter: ListFilter) -> builtins.list[Machine]:
        with self._lock:
            found = []
            for system in self._systems():
                if filter.zone and system.bmc.spec.zone != filter.zone:
                    continue
                if filter.instance_type and system.bmc.spec.instance_type != filter.instance_type:
                    continue
                self._settle(system, self._observe_or_none(system))
                machine = self._snapshot(system)
                if filter.states and machine.state not in filter.states:
                    continue
                if filter.noticed and machine.notice is None:
                    continue
                found.append(machine)
            found.sort(key=lambda m: m.id)
            return found[: filter.max_results] if filter.max_results else found

    # -- inventory -------------------------------------------------------------------------

    def _systems(self) -> builtins.list[_System]:
        """Every system of every BMC: the configured ids, else the BMC's listing (cached in the
        state file, so a BMC that stops answering keeps the machines it had)."""
        systems = []
        for bmc in self._bmcs:
            ids = list(bmc.spec.systems)
            if not ids:
                cached = self._state["inventory"].get(bmc.spec.address, [])
                try:
                    with self._talk(bmc) as root:
                        listed = root.get_system_collection().members_identities
                    ids = sorted(path.rstrip("/").rsplit("/", 1)[-1] for path in listed)
                    if ids != cached:
                        self._state["inventory"][bmc.spec.address] = ids
                        self._save()
                except _Down:
                    ids = cached
                except Exception as err:  # a reply sushy cannot read: as good as no reply
                    self._mark_down(bmc, err)
                    ids = cached
            systems += [self._make_system(bmc, i) for i in ids]
        seen: dict[str, _System] = {}
        for system in systems:
            if system.machine_id in seen:
                raise ValueError(
                    f"provider {self.name}: two systems would be machine {system.machine_id} "
                    f"({seen[system.machine_id].bmc.spec.address} and {system.bmc.spec.address})"
                )
            seen[system.machine_id] = system
        return systems

    def _make_system(self, bmc: _BMC, system_id: str) -> _System:
        return _System(slot_id(self.name, bmc.spec.rack, system_id), bmc, system_id)

    def _system(self, machine_id: str) -> _System:
        for system in self._systems():
            if system.machine_id == machine_id:
                return system
        raise MachineNotFound(self.name, machine_id)

    # -- the BMCs --------------------------------------------------------------------------

    def _root(self, bmc: _BMC) -> Any:
        """The BMC's Redfish root, connecting if needed; _Down while it is not answering."""
        now = time.monotonic()
        if bmc.root is not None:
            return bmc.root
        if now < bmc.down_until:
            raise _Down(bmc.error)
        spec = bmc.spec
        verify: bool | str = spec.ca_path or spec.verify_tls
        try:
            password = spec.password
            if spec.password_file:
                password = pathlib.Path(spec.password_file).read_text().strip()
            bmc.root = sushy.Sushy(
                spec.address,
                username=spec.username or "",  # "" not None: requests warns on None
                password=password or "",
                verify=verify,
                server_side_retries=1,  # one attempt: a BMC that is down is reported at once
                connect_timeout=self.config.connect_timeout_seconds,
                read_timeout=self.config.read_timeout_seconds,
            )
        except Exception as err:
            self._mark_down(bmc, err)
            raise _Down(bmc.error) from None
        bmc.error = ""
        return bmc.root

    def _mark_down(self, bmc: _BMC, err: Exception) -> None:
        bmc.root = None
        bmc.down_until = time.monotonic() + self.config.bmc_retry_seconds
        what = (
            "refused the credentials" if isinstance(err, sushy_exc.AccessError) else "unreachable"
        )
        bmc.error = f"BMC {bmc.spec.address} {what}: {type(err).__name__}: {err}"[:500]

    @contextlib.contextmanager
    def _talk(self, bmc: _BMC) -> Iterator[Any]:
        """The BMC's root for one exchange; a connection failure marks the BMC down."""
        root = self._root(bmc)
        try:
            yield root
        except (
            sushy_exc.ConnectionError,
            sushy_exc.ServerSideError,
            sushy_exc.AccessError,
            OSError,
        ) as err:
            self._mark_down(bmc, err)
            raise _Down(bmc.error) from None

    def _observe(self, system: _System) -> Observed:
        """Read the system now; BMCUnreachable if its BMC does not answer."""
        seen = self._observe_or_none(system)
        if seen is None:
            raise BMCUnreachable(self.name, f"provider {self.name}: {system.bmc.error}")
        return seen

    def _observe_or_none(self, system: _System) -> Observed | None:
        try:
            with self._talk(system.bmc) as root:
                sys_ = root.get_system(system.path)
                status = sys_.status
                seen = Observed(
                    power=str(sys_.power_state.value) if sys_.power_state else "",
                    health=str(status.health.value) if status and status.health else "",
                    enabled=not (status and status.state and status.state.value != "Enabled"),
                    health_rollup=(
                        str(status.health_rollup.value) if status and status.health_rollup else ""
                    ),
                )
        except _Down:
            return None
        except sushy_exc.ResourceNotFoundError:
            system.bmc.last_seen.pop(system.system_id, None)
            return Observed(power="", health="", enabled=False)
        except Exception as err:  # a reply sushy cannot read: as good as no reply
            self._mark_down(system.bmc, err)
            return None
        system.bmc.last_seen[system.system_id] = seen
        return seen

    def _boot(self, system: _System, seen: Observed, media: str) -> tuple[bool, str]:
        """Point the next boot at the seed and power the system on: (True if it was on and is
        being switched off first, the BMC's refusal or "")."""
        try:
            with self._talk(system.bmc) as root:
                sys_ = root.get_system(system.path)
                if self.config.boot_method == "virtual-media":
                    cd = _cd_drive(sys_)
                    if cd.inserted:
                        cd.eject_media()
                    cd.insert_media(media, inserted=True, write_protected=True)
                    # The seed is not bootable: the system boots its own disk, where cloud-init
                    # finds the `cidata` CD (a Cd override would rest on the firmware falling
                    # through to the disk; some stop at a non-bootable CD instead).
                    target = sushy.BootSource.HDD
                else:
                    target = sushy.BootSource.PXE
                sys_.set_system_boot_options(
                    target=target, enabled=sushy.BootSourceOverrideEnabled.ONCE
                )
                # A system that is on is switched off first and on again once the BMC reports
                # it off (_settle): a power-on seen after that is the boot from the blob.
                on = seen.power != sushy.PowerState.OFF.value
                sys_.reset_system(sushy.ResetType.FORCE_OFF if on else sushy.ResetType.ON)
                return on, ""
        except _Down:
            raise BMCUnreachable(self.name, f"provider {self.name}: {system.bmc.error}") from None
        except (sushy_exc.SushyError, ProviderError) as err:
            return False, f"the BMC refused to boot the blob: {err}"[:500]

    def _power_off(self, system: _System, force: bool) -> None:
        with self._talk(system.bmc) as root:
            reset = sushy.ResetType.FORCE_OFF if force else sushy.ResetType.GRACEFUL_SHUTDOWN
            root.get_system(system.path).reset_system(reset)

    def _clean_boot(self, system: _System) -> None:
        """Eject the blob's media so the next boot is the system's own disk."""
        if self.config.boot_method != "virtual-media":
            return
        try:
            with self._talk(system.bmc) as root:
                cd = _cd_drive(root.get_system(system.path))
                if cd.inserted:
                    cd.eject_media()
        except (sushy_exc.SushyError, ProviderError):
            pass  # the override was for one boot only; the next configure replaces the media

    # -- moving machines on ----------------------------------------------------------------

    def _settle(self, system: _System, seen: Observed | None) -> None:
        """Apply what the BMC reports to the machine's record; nothing when it did not answer."""
        record = self._record(system.machine_id)
        if record is None or seen is None:
            return
        now = self._clock()
        state = S(record["state"])
        on = seen.power == sushy.PowerState.ON.value
        off = seen.power == sushy.PowerState.OFF.value
        critical = _health(seen)[0] == "Critical"
        changed = True
        if state is S.CONFIGURING:
            if critical:
                self._fail(record, now, _health_words(seen))
            elif record.get("power_on_pending") and off:
                try:
                    with self._talk(system.bmc) as root:
                        root.get_system(system.path).reset_system(sushy.ResetType.ON)
                    record["power_on_pending"] = False
                except _Down:
                    changed = False
            elif on and not record.get("power_on_pending"):
                self._move(record, S.CONFIGURED, now)
            elif now - record["since"] > self.config.configure_timeout_seconds:
                waited = self.config.configure_timeout_seconds
                self._fail(record, now, f"not powered on within {waited:g} s of configure")
            else:
                changed = False
        elif state is S.CONFIGURED:
            if critical:
                self._fail(record, now, _health_words(seen))
            elif off or seen.power == sushy.PowerState.POWERING_OFF.value:
                why = f"powered off unexpectedly (the BMC reports PowerState {seen.power})"
                self._fail(record, now, why)
            else:
                changed = False
        elif state is S.DRAINING:
            changed = self._drain_step(system, record, now, off)
        else:
            changed = False
        if changed:
            self._save()

    def _drain_step(self, system: _System, record: dict[str, Any], now: float, off: bool) -> bool:
        if now < record["grace_end"]:
            return False
        try:
            if off:
                self._clean_boot(system)
                self._unpublish(system.machine_id)
                record["cluster"] = None
                self._move(record, S.IDLE, now)
                return True
            shutdown_at = record.get("shutdown_at")
            force = bool(record.get("force"))
            if shutdown_at is None:
                self._power_off(system, force)
                record["shutdown_at"] = now
                return True
            limit = self.config.power_off_seconds
            if not force and now - shutdown_at > limit:
                self._power_off(system, True)  # the graceful shutdown outlasted its bound
                record["force"] = True
                record["shutdown_at"] = now
                return True
            if force and now - shutdown_at > limit:
                self._fail(record, now, f"still powered on {limit:g} s after ForceOff")
                return True
        except _Down:
            pass  # tried again on the next get or list
        except sushy_exc.SushyError as err:
            self._fail(record, now, f"the BMC refused to power the system off: {err}"[:500])
            return True
        return False

    # -- records ---------------------------------------------------------------------------

    def _record(self, machine_id: str) -> dict[str, Any] | None:
        record: dict[str, Any] | None = self._state["machines"].get(machine_id)
        return record

    def _record_of(self, machine_id: str) -> dict[str, Any]:
        record = self._record(machine_id)
        assert record is not None
        return record

    def _start(self, machine_id: str, transition: str, state: MachineState, **extra: Any) -> None:
        self._state["op"] += 1
        now = self._clock()
        previous = self._record(machine_id) or {}
        self._state["machines"][machine_id] = {
            "state": str(state),
            "transition": transition,
            "op": f"{self.name}-{transition}-{self._state['op']:06d}",
            "since": now,
            "started": now,
            "cluster": extra.pop("cluster", None),
            "media": previous.get("media"),
            "failed_from": None,
            "last_error": "",
        }
        self._state["machines"][machine_id].update(extra)

    def _move(self, record: dict[str, Any], state: MachineState, now: float) -> None:
        record.update(state=str(state), since=now, failed_from=None, last_error="")

    def _fail(self, record: dict[str, Any], now: float, error: str) -> None:
        record.update(failed_from=record["state"], state=str(S.FAILED), since=now, last_error=error)

    @contextlib.contextmanager
    def _fenced(self, token: FencingToken) -> Iterator[None]:
        """Around one mutating call (bigfleet/providers/fencing.py): an epoch beyond the clock
        or below the shard's is refused before any BMC is asked anything, and the epoch is kept
        (in the state file) only if the call succeeds."""
        epochs = self._state["epochs"]
        shard = str(token.shard_id)
        before = epochs.get(shard)
        with fenced(self.name, epochs, shard, token, self._clock()):
            yield
        if epochs.get(shard) != before:
            self._save()

    def _invalid(
        self, system: _System, record: dict[str, Any] | None, call: str, why: str = ""
    ) -> InvalidTransition:
        state = S(record["state"]) if record else S.SPECULATIVE
        failed_from = S(record["failed_from"]) if record and record.get("failed_from") else None
        return InvalidTransition(self.name, system.machine_id, state, call, why, failed_from)

    def _save(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_name(self._path.name + ".tmp")
        tmp.write_text(json.dumps(self._state, indent=1, sort_keys=True))
        os.replace(tmp, self._path)

    def _publish(self, machine_id: str, user_data: bytes, digest: str) -> str:
        """Write the machine's NoCloud seed where the BMCs (or the PXE server) fetch it: the
        `cidata` ISO's URL (virtual media), or the nocloud-net seed URL (pxe; its directory
        when there is no media_url)."""
        assert self.config.media_dir  # RedfishConfig._media
        directory = pathlib.Path(self.config.media_dir)
        directory.mkdir(parents=True, exist_ok=True)
        self._unpublish(machine_id)
        files = nocloud.seed_files(machine_id, user_data, digest)
        base = (self.config.media_url or "").rstrip("/")
        if self.config.boot_method == "pxe":
            seed = directory / machine_id
            seed.mkdir(mode=0o750)
            for name in ("user-data", "meta-data"):  # meta-data last: its instance-id is new
                _write_private(seed / name, files[name])
            return f"{base}/{machine_id}/" if base else str(seed)
        name = f"{nocloud.instance_id(machine_id, digest)}.iso"
        _write_private(directory / name, nocloud.cidata_iso(files))
        return f"{base}/{name}"

    def _unpublish(self, machine_id: str) -> None:
        """Remove the machine's seeds: its ISOs (and raw blobs of older versions, `.img`) and
        its nocloud-net directory; not those of a machine whose id merely starts with its id."""
        assert self.config.media_dir
        directory = pathlib.Path(self.config.media_dir)
        own = re.compile(re.escape(machine_id) + r"-[0-9a-f]{16}\.(iso|img)")
        for old in directory.glob(f"{glob.escape(machine_id)}-*"):
            if own.fullmatch(old.name):
                old.unlink(missing_ok=True)
        seed = directory / machine_id
        if seed.is_dir() and not seed.is_symlink():
            shutil.rmtree(seed)
        else:
            seed.unlink(missing_ok=True)  # not ours to follow: a link (or a file) in its place

    # -- replies ---------------------------------------------------------------------------

    def _ack(self, system: _System) -> TransitionAck:
        record = self._record_of(system.machine_id)
        return TransitionAck(operation_id=record["op"], machine=self._snapshot(system))

    def _snapshot(self, system: _System) -> Machine:
        spec = system.bmc.spec
        record = self._record(system.machine_id)
        seen = system.bmc.last_seen.get(system.system_id)
        state = S(record["state"]) if record else S.SPECULATIVE
        errors = []
        if record and record.get("last_error"):
            errors.append(record["last_error"])
        if system.bmc.error:
            errors.append(f"{system.bmc.error} (state as last known)")
        elif seen is not None and state in (S.SPECULATIVE, S.IDLE):
            why = _unfit(seen)
            if why:
                errors.append(why)
        moving = state in (S.CONFIGURING, S.DRAINING, S.FAILED)
        notice = None
        if seen is not None and state in _NOTICED and _HEALTH_RANK.get(_health(seen)[0], 0):
            detail = _health_words(seen)[:NOTICE_DETAIL_MAX]
            notice = Notice(kind=NoticeKind.UNHEALTHY, detail=detail)
        return Machine(
            id=system.machine_id,
            state=state,
            host=(
                HostRef(provider=self.name, ref=spec.address.rstrip("/") + system.path)
                if record
                else None
            ),
            instance_type=spec.instance_type,
            zone=spec.zone,
            capacity_type=CapacityType.BARE_METAL,
            price_per_hour=spec.price_per_hour,
            interruption_probability=0.0,
            resources=spec.resources,
            labels=labels.rack_labels(self.name, spec),
            transition_started_unix=int(record["since"]) if record and moving else 0,
            last_error="; ".join(errors),
            cluster=record.get("cluster") if record else None,
            failed_from=S(record["failed_from"]) if record and record.get("failed_from") else None,
            notice=notice,
        )


def _write_private(path: pathlib.Path, data: bytes) -> None:
    """Write a file atomically, mode 0o640 from its creation: a seed holds a join credential,
    readable by the media server's group and no one else."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o640)
        with os.fdopen(fd, "wb") as out:
            fd = -1
            out.write(data)
    finally:
        if fd >= 0:
            os.close(fd)
    os.replace(tmp, path)


def _unfit(seen: Observed) -> str:
    """Why a system cannot be claimed or configured now; "" when it can."""
    if not seen.power and not seen.enabled:
        return "the BMC no longer lists this system"
    if not seen.enabled:
        return "the BMC reports the system not Enabled"
    if _HEALTH_RANK.get(_health(seen)[0], 0):  # Warning or Critical
        return _health_words(seen)
    return ""


_HEALTH_RANK = {"OK": 0, "Warning": 1, "Critical": 2}  # Redfish's Health, worst last
_NOTICED = (S.IDLE, S.CONFIGURING, S.CONFIGURED, S.DRAINING)  # hosted and not FAILED


def _health(seen: Observed) -> tuple[str, str]:
    """The worse of the system's Health and HealthRollup, and which property said it ("" and
    "Health" when the BMC reports neither)."""
    rollup = _HEALTH_RANK.get(seen.health_rollup, -1) > _HEALTH_RANK.get(seen.health, -1)
    return (seen.health_rollup, "HealthRollup") if rollup else (seen.health, "Health")


def _health_words(seen: Observed) -> str:
    level, which = _health(seen)
    if which == "HealthRollup":
        return f"the BMC reports health {level} (Status.HealthRollup: the system's components)"
    return f"the BMC reports health {level} (Status.Health)"


def _cd_drive(system: Any) -> Any:
    """The system's virtual media that takes a CD/DVD image."""
    for member in system.virtual_media.get_members():
        types = {str(t.value) for t in member.media_types or ()}
        if types & {"CD", "DVD"}:
            return member
    raise ProviderError("redfish", f"system {system.path} has no CD/DVD virtual media")
