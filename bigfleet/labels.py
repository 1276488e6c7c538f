"""Label keys a machine carries: the well-known Kubernetes ones and BigFleet's own."""

from typing import Any

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
ARCH = "kubernetes.io/arch"
CAPACITY_TYPE = "bigfleet.io/capacity-type"
PROVIDER = "bigfleet.io/provider"
RACK = "bigfleet.io/rack"
KUBELET_VERSION = "bigfleet.io/kubelet-version"
HOSTNAME = "kubernetes.io/hostname"
# "true" on a machine BigFleet must leave alone: another autoscaler's (bigfleet/cluster_modes.py).
UNMANAGED = "bigfleet.io/unmanaged"

# Labels that describe the machine itself. A requirement on any other key the machine does not
# carry (a kubelet version, a feature gate) is for the operator's bootstrap to satisfy (design §13).
MACHINE_KEYS = frozenset({INSTANCE_TYPE, ZONE, REGION, ARCH, CAPACITY_TYPE, PROVIDER, RACK})

# Keys whose every value is one machine's own: a spread over one of them holds by itself (each
# machine is a domain of its own, so a need's machines are never more than one apart there).
PER_MACHINE_KEYS = frozenset({HOSTNAME})


def machine_labels(
    provider: str,
    instance_type: str,
    zone: str,
    region: str,
    arch: str,
    capacity_type: str,
    rack: str | None = None,
) -> dict[str, str]:
    """The labels every provider puts on a machine (and a rack's, for bare metal)."""
    out = {
        INSTANCE_TYPE: instance_type,
        ZONE: zone,
        REGION: region,
        ARCH: arch,
        CAPACITY_TYPE: capacity_type,
        PROVIDER: provider,
    }
    if rack is not None:
        out[RACK] = rack
    return out


def rack_labels(provider: str, rack: Any) -> dict[str, str]:
    """A bare-metal machine's labels, from its rack (a RackSpec, a Redfish BMCSpec: anything
    with instance_type, zone, region, arch and rack)."""
    region = rack.region or rack.zone.rsplit("-", 1)[0]  # ams-1 -> ams
    out = machine_labels(
        provider, rack.instance_type, rack.zone, region, rack.arch, "bare-metal", rack=rack.rack
    )
    if getattr(rack, "unmanaged", False):  # (another autoscaler's for now: cluster_modes.py)
        out[UNMANAGED] = "true"
    return out
