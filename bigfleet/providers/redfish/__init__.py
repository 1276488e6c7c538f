"""Bare metal through Redfish BMCs (design §7 "Bare-metal providers"), over the `sushy` client.

Every system of every configured BMC is a machine, SPECULATIVE until claimed. Redfish holds
power, health and boot settings; what it cannot hold (which machine is claimed, for which
cluster, a drain's grace, the highest fencing epoch per shard: kept only for calls that succeed,
bigfleet/providers/fencing.py) is a small JSON file, `state_path`, rewritten atomically after
every change (one provider process per file).

- Create claims a commissioned system (enabled, health OK): SPECULATIVE → IDLE at once. A
  system whose BMC reports health Warning is not claimed (nor configured): a machine known to
  be degraded is not handed out; it is claimable again once its BMC says OK.
- Configure publishes the bootstrap blob (cloud-init user data) as a cloud-init NoCloud seed
  (bigfleet/providers/nocloud.py): with `boot_method: virtual-media`, an ISO9660 image labelled
  `cidata` holding `user-data` (the blob) and `meta-data` (`instance-id: {machine
  id}-{digest[:16]}`, so a new blob is a new instance to cloud-init), `{media_dir}/{machine
  id}-{digest[:16]}.iso`, served to the BMCs at `media_url`; it is inserted as the Cd virtual
  media, the one-time boot override is Hdd (the system's own disk: the seed is not bootable),
  and the system is powered on (one that is running is switched off first): CONFIGURING, then
  CONFIGURED once the BMC reports it on. The OS on that disk must run cloud-init with the
  NoCloud datasource, which finds the `cidata` disk. With `boot_method: pxe` the seed is the
  files `{media_dir}/{machine id}/user-data` and `meta-data`, for the operator's PXE/HTTP boot
  server to serve and hand to cloud-init as `ds=nocloud-net;s={url}/{machine id}/`; the override
  is Pxe. A BMC that refuses any of it fails the configure (FAILED from CONFIGURING, its answer
  in `last_error`).
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

The modules: config.py (the settings), bmc.py (the exchanges with the BMCs and what their
replies mean), seeds.py (the NoCloud seeds published for a configure), records.py (the state
file) and provider.py (`RedfishProvider`, the contract's calls).
"""

from __future__ import annotations

from .bmc import BMCUnreachable, Observed
from .config import BMCSpec, RedfishConfig
from .provider import RedfishProvider

__all__ = ["BMCSpec", "BMCUnreachable", "Observed", "RedfishConfig", "RedfishProvider"]
