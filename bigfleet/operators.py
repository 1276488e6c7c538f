"""The cluster operator's side of BigFleet (design §13): the bootstrap callback and what it is told.

BigFleet never joins a node itself. It asks the cluster's operator for a bootstrap blob that
satisfies a need's requirements; an operator that cannot (a kubelet outside its skew window)
refuses, and BigFleet treats the need as unsatisfiable. The operator also hears what BigFleet
decided for its cluster, so it can write UpcomingNode objects and signal reclaims.
"""

from __future__ import annotations

import random
import string
import threading
from typing import Annotated, Protocol, runtime_checkable

import yaml
from pydantic import Field

from . import labels as L
from .models import (
    BootstrapBlob,
    BootstrapRequest,
    Count,
    Name,
    NodeSelectorRequirement,
    Operator,
    Wire,
)
from .requirements import describe, requirement_matches

KUBELET_VERSION = L.KUBELET_VERSION
"""Node label holding the kubelet's minor version, as "1.NN" or "NN"."""

BOOTSTRAP_TTL_SECONDS = 3600


class _CloudInitDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Multi-line strings as `|` blocks and no line folding, as cloud-init files are written."""


def _literal_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_CloudInitDumper.add_representer(str, _literal_str)


class UpcomingNode(Wire):
    machine_id: Name
    instance_type: Name


class Reclaim(Wire):
    machine_id: Name
    grace_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)]


class OperatorUpdate(Wire):
    """What BigFleet decided for one cluster in a cycle (design §6, §13)."""

    cluster: Name
    upcoming: list[UpcomingNode] = Field(default_factory=list)
    reclaims: list[Reclaim] = Field(default_factory=list)
    available: dict[str, Count] = Field(
        default_factory=dict, description="Instance type -> machines BigFleet could still provide."
    )


@runtime_checkable
class ClusterOperator(Protocol):
    def generate_bootstrap(self, request: BootstrapRequest) -> BootstrapBlob: ...

    def notify(self, update: OperatorUpdate) -> None: ...


class BootstrapRefused(Exception):
    """The operator cannot produce a node meeting a requirement: the need is unsatisfiable."""

    def __init__(
        self, cluster: str, reason: str, requirement: NodeSelectorRequirement | None = None
    ) -> None:
        refused = f" requirement {describe(requirement)}" if requirement else ""
        super().__init__(f"cluster {cluster} refused to bootstrap{refused}: {reason}")
        self.cluster = cluster
        self.reason = reason
        self.requirement = requirement

    @classmethod
    def as_told(cls, cluster: str, message: str) -> BootstrapRefused:
        """A refusal that came over the wire: the operator's message as it wrote it (BigFleet's
        own operator server sends `str()` of a BootstrapRefused, so it is not prefixed twice)."""
        prefix = f"cluster {cluster} refused to bootstrap"
        if message.startswith(prefix):
            err = cls(cluster, message)
            err.args = (message,)
            return err
        return cls(cluster, message or "no reason given")


class OperatorError(Exception):
    """A cluster's operator could not be asked, or answered with something other than a blob or
    a refusal (a remote operator: bigfleet/edge/operator_client.py). BigFleet treats it like a
    refusal for now (the machine stays idle, a shortfall is recorded) and asks again later."""

    def __init__(self, cluster: str, endpoint: str, detail: str) -> None:
        super().__init__(f"operator of cluster {cluster} at {endpoint} failed: {detail}")
        self.cluster = cluster
        self.endpoint = endpoint
        self.detail = detail


class OperatorUnreachable(OperatorError):
    """The operator did not answer (UNAVAILABLE, DEADLINE_EXCEEDED): down, or the network."""

    def __init__(self, cluster: str, endpoint: str, detail: str) -> None:
        super().__init__(cluster, endpoint, detail)
        self.args = (f"operator of cluster {cluster} unreachable at {endpoint}: {detail}",)


def kubelet_minor(version: str) -> int | None:
    """33 for "1.33" or "33"; None for anything else (another major, "latest", ...)."""
    major, dot, minor = version.partition(".")
    text = minor if dot else major
    if dot and major != "1":
        return None
    return int(text) if text.isdigit() else None


class SimulatedOperator:
    """An operator for one cluster: cloud-init blobs with fresh join tokens, a recorded feed."""

    def __init__(
        self,
        cluster: str,
        endpoint: str,
        kubelet_version: str = "1.33",
        skew_minor: int = 3,
        seed: int = 0,
    ) -> None:
        minor = kubelet_minor(kubelet_version)
        if minor is None or skew_minor < 0:
            raise ValueError(
                f"operator of {cluster}: kubelet_version must be '1.NN' and skew_minor >= 0, "
                f"got {kubelet_version!r}, {skew_minor}"
            )
        self.cluster = cluster
        self.endpoint = endpoint
        self.kubelet_version = kubelet_version
        self.skew_minor = skew_minor
        self.supported = range(minor - skew_minor, minor + 1)
        self.requests: list[BootstrapRequest] = []
        self.updates: list[OperatorUpdate] = []
        self._rng = random.Random(seed)
        # The nodes that joined the cluster, as its API server would list them (in order):
        # each machine it bootstrapped, until BigFleet says it reclaims it. What it reports as
        # node health in its roll-ups (design §9).
        self.nodes: dict[str, None] = {}
        self._nodes_lock = threading.Lock()  # (a gRPC server's threads call in)

    def generate_bootstrap(self, request: BootstrapRequest) -> BootstrapBlob:
        self.requests.append(request)
        if request.cluster != self.cluster:
            raise BootstrapRefused(self.cluster, f"the request is for cluster {request.cluster}")
        labels = self._node_labels(request)
        for req in request.requirements:
            if not requirement_matches(req, labels):
                raise BootstrapRefused(self.cluster, "no node this operator makes has it", req)
        user_data = self._cloud_init(request.machine_id, labels, self._join_token())
        with self._nodes_lock:
            self.nodes[request.machine_id] = None
        return BootstrapBlob(user_data=user_data.encode(), ttl_seconds=BOOTSTRAP_TTL_SECONDS)

    def notify(self, update: OperatorUpdate) -> None:
        if update.cluster != self.cluster:
            raise ValueError(f"operator of {self.cluster} sent an update for {update.cluster}")
        self.updates.append(update)
        with self._nodes_lock:
            for reclaim in update.reclaims:
                self.nodes.pop(reclaim.machine_id, None)

    def node_ids(self) -> list[str]:
        """The cluster's nodes now, in the order they joined."""
        with self._nodes_lock:
            return list(self.nodes)

    def rejoin(self, machine_ids: list[str]) -> None:
        """Nodes that joined before a restart (kept by whoever runs the operator)."""
        with self._nodes_lock:
            self.nodes.update(dict.fromkeys(machine_ids))

    def _node_labels(self, request: BootstrapRequest) -> dict[str, str]:
        """The machine's own labels, plus a value for every In it lacks, plus the kubelet's."""
        labels = dict(request.labels)
        reqs = request.requirements
        for req in reqs:
            if req.operator is Operator.IN and req.key not in labels and req.key != KUBELET_VERSION:
                # The first value every requirement on this key accepts, so In + NotIn compose.
                same_key = [r for r in reqs if r.key == req.key]
                fits = (
                    v
                    for v in req.values
                    if all(requirement_matches(r, {r.key: v}) for r in same_key)
                )
                labels[req.key] = next(fits, req.values[0])
        labels[KUBELET_VERSION] = self._kubelet_label(reqs)
        return labels

    def _kubelet_label(self, reqs: list[NodeSelectorRequirement]) -> str:
        """The newest supported kubelet the requirements allow, spelled as they spell it."""
        candidates = list(self.supported)
        spelling: dict[int, str] = {}
        for req in (r for r in reqs if r.key == KUBELET_VERSION):
            minors = {m: v for v in req.values if (m := kubelet_minor(v)) is not None}
            if req.operator is Operator.IN:
                candidates = [m for m in candidates if m in minors]
                spelling.update(minors)
            elif req.operator is Operator.NOT_IN:
                candidates = [m for m in candidates if m not in minors]
            elif req.operator is Operator.GT:
                candidates = [m for m in candidates if m > int(req.values[0])]
            elif req.operator is Operator.LT:
                candidates = [m for m in candidates if m < int(req.values[0])]
            elif req.operator is Operator.DOES_NOT_EXIST:
                candidates = []  # every node this operator makes carries the label
            if not candidates:
                lo, hi = self.supported[0], self.supported[-1]
                raise BootstrapRefused(
                    self.cluster,
                    f"outside the supported kubelet versions 1.{lo}-1.{hi} "
                    f"(control plane {self.kubelet_version}, skew {self.skew_minor} minors)",
                    req,
                )
        newest = max(candidates)
        # Kubernetes compares Gt/Lt as integers, so without an In the label is the bare minor.
        return spelling.get(newest, str(newest))

    def _join_token(self) -> str:
        """A kubeadm-style bootstrap token, `[a-z0-9]{6}.[a-z0-9]{16}`, fresh on every call."""
        alphabet = string.ascii_lowercase + string.digits
        pick = self._rng.choices
        return "".join(pick(alphabet, k=6)) + "." + "".join(pick(alphabet, k=16))

    def _cloud_init(self, machine_id: str, labels: dict[str, str], token: str) -> str:
        user = "kubelet-bootstrap"
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.cluster, "cluster": {"server": self.endpoint}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "bootstrap", "context": {"cluster": self.cluster, "user": user}}],
            "current-context": "bootstrap",
        }
        node_labels = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        minor = kubelet_minor(labels[KUBELET_VERSION])
        config = {
            # The node is named after the machine, so the operator can report health by machine id.
            "hostname": machine_id,
            "packages": [f"kubelet=1.{minor}.*"],
            "write_files": [
                {
                    "path": "/var/lib/kubelet/bootstrap-kubeconfig",
                    "permissions": "0600",
                    "content": _dump(kubeconfig),
                },
                {
                    "path": "/etc/default/kubelet",
                    "content": f"KUBELET_EXTRA_ARGS=--node-labels={node_labels}\n",
                },
            ],
            "runcmd": ["systemctl enable --now kubelet"],
        }
        return "#cloud-config\n" + _dump(config)


def _dump(data: object) -> str:
    return yaml.dump(data, Dumper=_CloudInitDumper, sort_keys=False, width=10_000)
