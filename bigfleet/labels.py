"""Label keys a machine carries: the well-known Kubernetes ones and BigFleet's own."""

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
ARCH = "kubernetes.io/arch"
CAPACITY_TYPE = "bigfleet.io/capacity-type"
PROVIDER = "bigfleet.io/provider"
RACK = "bigfleet.io/rack"
KUBELET_VERSION = "bigfleet.io/kubelet-version"

# Labels that describe the machine itself. A requirement on any other key the machine does not
# carry (a kubelet version, a feature gate) is for the operator's bootstrap to satisfy (seed §13).
MACHINE_KEYS = frozenset({INSTANCE_TYPE, ZONE, REGION, ARCH, CAPACITY_TYPE, PROVIDER, RACK})


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
