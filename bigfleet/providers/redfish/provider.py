"""`RedfishProvider`: the CapacityProvider contract over Redfish BMCs (the design is in
bigfleet/providers/redfish/__init__.py): the contract's calls, the inventory of systems, the
moving on of transitions from what the BMCs report, and the machines it answers with."""

from __future__ import annotations

import builtins
import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any

import sushy
from sushy import exceptions as sushy_exc

from ... import labels
from ...models import (
    NOTICE_DETAIL_MAX,
    BootstrapBlob,
    CapacityType,
    FencingToken,
    HostRef,
    ListFilter,
    Machine,
    MachineState,
    Notice,
    NoticeKind,
    TransitionAck,
)
from ..base import (
    MAX_CREATE_BATCH,
    InvalidTransition,
    MachineNotFound,
    NotSupported,
    check_grace,
    slot_id,
)
from .bmc import (
    BMC,
    HEALTH_RANK,
    BmcDown,
    Observed,
    System,
    health_of,
    health_words,
    unfit,
)
from .config import RedfishConfig
from .records import RedfishRecords
from .seeds import publish, unpublish

S = MachineState
_NOTICED = (S.IDLE, S.CONFIGURING, S.CONFIGURED, S.DRAINING)  # hosted and not FAILED


class RedfishProvider(RedfishRecords):
    """The CapacityProvider protocol over Redfish BMCs (bigfleet/providers/redfish/__init__.py).
    Thread-safe: one lock around every call."""

    blocking = True  # every call goes over the network to a BMC
    supports_delete = False

    def __init__(self, config: RedfishConfig, clock: Callable[[], float] = time.time) -> None:
        super().__init__(config, clock)
        self._lock = threading.RLock()
        addresses = [b.address for b in config.bmcs]
        if len(set(addresses)) != len(addresses):
            raise ValueError(f"provider {self.name}: a BMC address is listed twice")
        self._bmcs = [BMC(spec) for spec in config.bmcs]

    # -- the CapacityProvider calls ---------------------------------------------------------

    def create(
        self, machine_ids: builtins.list[str], token: FencingToken, *, key: str = ""
    ) -> builtins.list[TransitionAck]:
        """Claim commissioned systems (enabled, health OK): SPECULATIVE to IDLE at once, all or
        nothing."""
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
                why = unfit(seen)
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
        """Publish the blob as a NoCloud seed, point the next boot at it and power the system
        on: CONFIGURING, CONFIGURED once the BMC reports it on."""
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
            why = unfit(seen)
            if why:
                raise InvalidTransition(self.name, machine_id, S(record["state"]), "configure", why)
            media = publish(self.config, machine_id, blob.user_data, digest)
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
        """Start the drain's grace; then the system is shut down, its media ejected and seed
        removed: IDLE once the BMC reports it off."""
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
        """Always NotSupported: bare metal stays in inventory."""
        raise NotSupported(
            self.name,
            "delete",
            f"bare metal stays in inventory; idle machine {machine_id} is reused, not released",
        )

    def get(self, machine_id: str) -> Machine:
        """The machine as its BMC reports it now, its transition moved on."""
        with self._lock:
            system = self._system(machine_id)
            self._settle(system, self._observe_or_none(system))
            return self._snapshot(system)

    def list(self, filter: ListFilter) -> builtins.list[Machine]:
        """Every system matching the filter, each read from its BMC and moved on."""
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

    def _systems(self) -> builtins.list[System]:
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
                except BmcDown:
                    ids = cached
                except Exception as err:  # a reply sushy cannot read: as good as no reply
                    self._mark_down(bmc, err)
                    ids = cached
            systems += [self._make_system(bmc, i) for i in ids]
        seen: dict[str, System] = {}
        for system in systems:
            if system.machine_id in seen:
                raise ValueError(
                    f"provider {self.name}: two systems would be machine {system.machine_id} "
                    f"({seen[system.machine_id].bmc.spec.address} and {system.bmc.spec.address})"
                )
            seen[system.machine_id] = system
        return systems

    def _make_system(self, bmc: BMC, system_id: str) -> System:
        return System(slot_id(self.name, bmc.spec.rack, system_id), bmc, system_id)

    def _system(self, machine_id: str) -> System:
        for system in self._systems():
            if system.machine_id == machine_id:
                return system
        raise MachineNotFound(self.name, machine_id)

    # -- moving machines on ----------------------------------------------------------------

    def _settle(self, system: System, seen: Observed | None) -> None:
        """Apply what the BMC reports to the machine's record; nothing when it did not answer."""
        record = self._record(system.machine_id)
        if record is None or seen is None:
            return
        now = self._clock()
        state = S(record["state"])
        on = seen.power == sushy.PowerState.ON.value
        off = seen.power == sushy.PowerState.OFF.value
        critical = health_of(seen)[0] == "Critical"
        changed = True
        if state is S.CONFIGURING:
            if critical:
                self._fail(record, now, health_words(seen))
            elif record.get("power_on_pending") and off:
                try:
                    with self._talk(system.bmc) as root:
                        root.get_system(system.path).reset_system(sushy.ResetType.ON)
                    record["power_on_pending"] = False
                except BmcDown:
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
                self._fail(record, now, health_words(seen))
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

    def _drain_step(self, system: System, record: dict[str, Any], now: float, off: bool) -> bool:
        if now < record["grace_end"]:
            return False
        try:
            if off:
                self._clean_boot(system)
                unpublish(self.config, system.machine_id)
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
        except BmcDown:
            pass  # tried again on the next get or list
        except sushy_exc.SushyError as err:
            self._fail(record, now, f"the BMC refused to power the system off: {err}"[:500])
            return True
        return False

    # -- replies ---------------------------------------------------------------------------

    def _ack(self, system: System) -> TransitionAck:
        record = self._record_of(system.machine_id)
        return TransitionAck(operation_id=record["op"], machine=self._snapshot(system))

    def _snapshot(self, system: System) -> Machine:
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
            why = unfit(seen)
            if why:
                errors.append(why)
        moving = state in (S.CONFIGURING, S.DRAINING, S.FAILED)
        notice = None
        if seen is not None and state in _NOTICED and HEALTH_RANK.get(health_of(seen)[0], 0):
            detail = health_words(seen)[:NOTICE_DETAIL_MAX]
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

