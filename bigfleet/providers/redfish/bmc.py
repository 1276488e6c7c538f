"""Talking to the BMCs over sushy, and reading their replies: connecting (a BMC that does not
answer is not asked again for `bmc_retry_seconds`), what a system reports (`Observed`: power,
health, enabled), booting a system into its blob, powering it off, ejecting the media; and
what a system's health means (a claimable system, the words of a notice)."""

from __future__ import annotations

import contextlib
import pathlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import sushy
from sushy import exceptions as sushy_exc

from ..base import ProviderError
from .config import BMCSpec, RedfishConfig


class BMCUnreachable(ProviderError):
    """The machine's BMC did not answer; the call changed nothing and may be retried."""


@dataclass
@dataclass
class Observed:
    """What a BMC said of one system just now."""

    power: str  # sushy.PowerState value: "On", "Off", "PoweringOn", "PoweringOff", "Paused"
    health: str  # Status.Health: "OK", "Warning", "Critical" or "" when the BMC does not say
    enabled: bool
    health_rollup: str = ""  # Status.HealthRollup (the system with its components), as health



@dataclass
class System:
    """One system of a BMC, and the machine id it is."""

    machine_id: str
    bmc: BMC
    system_id: str

    @property
    def path(self) -> str:
        """The system's Redfish path on its BMC."""
        return f"/redfish/v1/Systems/{self.system_id}"



@dataclass
class BMC:
    """One configured BMC: its connection, whether it is down (and why), and what it last said
    of each of its systems."""

    spec: BMCSpec
    root: Any = None  # sushy.Sushy, connected lazily
    down_until: float = 0.0
    error: str = ""
    last_seen: dict[str, Observed] = field(default_factory=dict)


class BmcDown(Exception):
    """The BMC is not answering (its `error` says why); nothing was changed."""


HEALTH_RANK = {"OK": 0, "Warning": 1, "Critical": 2}  # Redfish's Health, worst last


def health_of(seen: Observed) -> tuple[str, str]:
    """The worse of the system's Health and HealthRollup, and which property said it ("" and
    "Health" when the BMC reports neither)."""
    rollup = HEALTH_RANK.get(seen.health_rollup, -1) > HEALTH_RANK.get(seen.health, -1)
    return (seen.health_rollup, "HealthRollup") if rollup else (seen.health, "Health")


def health_words(seen: Observed) -> str:
    """The BMC's health of a system in words, naming the property that said it."""
    level, which = health_of(seen)
    if which == "HealthRollup":
        return f"the BMC reports health {level} (Status.HealthRollup: the system's components)"
    return f"the BMC reports health {level} (Status.Health)"



def unfit(seen: Observed) -> str:
    """Why a system cannot be claimed or configured now; "" when it can."""
    if not seen.power and not seen.enabled:
        return "the BMC no longer lists this system"
    if not seen.enabled:
        return "the BMC reports the system not Enabled"
    if HEALTH_RANK.get(health_of(seen)[0], 0):  # Warning or Critical
        return health_words(seen)
    return ""


def cd_drive(system: Any) -> Any:
    """The system's virtual media that takes a CD/DVD image."""
    for member in system.virtual_media.get_members():
        types = {str(t.value) for t in member.media_types or ()}
        if types & {"CD", "DVD"}:
            return member
    raise ProviderError("redfish", f"system {system.path} has no CD/DVD virtual media")


class BmcCalls:
    """A provider's exchanges with its BMCs (the config's timeouts, boot method and retry)."""

    def __init__(self, config: RedfishConfig) -> None:
        self.config = config
        self.name = config.name

    def _root(self, bmc: BMC) -> Any:
        """The BMC's Redfish root, connecting if needed; BmcDown while it is not answering."""
        now = time.monotonic()
        if bmc.root is not None:
            return bmc.root
        if now < bmc.down_until:
            raise BmcDown(bmc.error)
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
            raise BmcDown(bmc.error) from None
        bmc.error = ""
        return bmc.root

    def _mark_down(self, bmc: BMC, err: Exception) -> None:
        bmc.root = None
        bmc.down_until = time.monotonic() + self.config.bmc_retry_seconds
        what = (
            "refused the credentials" if isinstance(err, sushy_exc.AccessError) else "unreachable"
        )
        bmc.error = f"BMC {bmc.spec.address} {what}: {type(err).__name__}: {err}"[:500]

    @contextlib.contextmanager
    def _talk(self, bmc: BMC) -> Iterator[Any]:
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
            raise BmcDown(bmc.error) from None

    def _observe(self, system: System) -> Observed:
        """Read the system now; BMCUnreachable if its BMC does not answer."""
        seen = self._observe_or_none(system)
        if seen is None:
            raise BMCUnreachable(self.name, f"provider {self.name}: {system.bmc.error}")
        return seen

    def _observe_or_none(self, system: System) -> Observed | None:
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
        except BmcDown:
            return None
        except sushy_exc.ResourceNotFoundError:
            system.bmc.last_seen.pop(system.system_id, None)
            return Observed(power="", health="", enabled=False)
        except Exception as err:  # a reply sushy cannot read: as good as no reply
            self._mark_down(system.bmc, err)
            return None
        system.bmc.last_seen[system.system_id] = seen
        return seen

    def _boot(self, system: System, seen: Observed, media: str) -> tuple[bool, str]:
        """Point the next boot at the seed and power the system on: (True if it was on and is
        being switched off first, the BMC's refusal or "")."""
        try:
            with self._talk(system.bmc) as root:
                sys_ = root.get_system(system.path)
                if self.config.boot_method == "virtual-media":
                    cd = cd_drive(sys_)
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
        except BmcDown:
            raise BMCUnreachable(self.name, f"provider {self.name}: {system.bmc.error}") from None
        except (sushy_exc.SushyError, ProviderError) as err:
            return False, f"the BMC refused to boot the blob: {err}"[:500]

    def _power_off(self, system: System, force: bool) -> None:
        with self._talk(system.bmc) as root:
            reset = sushy.ResetType.FORCE_OFF if force else sushy.ResetType.GRACEFUL_SHUTDOWN
            root.get_system(system.path).reset_system(reset)

    def _clean_boot(self, system: System) -> None:
        """Eject the blob's media so the next boot is the system's own disk."""
        if self.config.boot_method != "virtual-media":
            return
        try:
            with self._talk(system.bmc) as root:
                cd = cd_drive(root.get_system(system.path))
                if cd.inserted:
                    cd.eject_media()
        except (sushy_exc.SushyError, ProviderError):
            pass  # the override was for one boot only; the next configure replaces the media
