"""Label keys a machine carries: the well-known Kubernetes ones and BigFleet's own."""

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
ARCH = "kubernetes.io/arch"
CAPACITY_TYPE = "bigfleet.io/capacity-type"
PROVIDER = "bigfleet.io/provider"
RACK = "bigfleet.io/rack"
