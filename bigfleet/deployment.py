"""The deployment config: where BigFleet's edges are (docs/operations.md, "Your own providers
and operators", documents it field by field).

A scenario (bigfleet/simulation/scenario.py) describes a *simulated* world; this file describes
a real one: the capacity providers BigFleet calls over gRPC, the cluster operators it calls for
bootstrap blobs, and the roll-up gateway's listening address and who may send roll-ups through
it. `bigfleet worker --config`, `bigfleet gateway --config` and `bigfleet dev` read it.

Every path in it (certificates, token files) is relative to the file's own directory.
"""

from __future__ import annotations

import hashlib
import hmac
import pathlib
import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .cluster_modes import MAX_UNMANAGED
from .models import Name, from_wire
from .simulation.scenario import PolicyOverrides
from .transitions import MAX_TRANSITION_BATCH
from .yamlfile import load_model

# A shard workflow's task timeout by default, and the most Temporal allows: long enough to
# replay a run of the fleet's largest shard (docs/temporal.md, "Bounded workflow tasks").
SHARD_TASK_TIMEOUT_SECONDS = 60.0
MAX_TASK_TIMEOUT_SECONDS = 120.0

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
# host:port, [v6]:port, or unix:/path: what grpc's channel and server addresses take.
Endpoint = Annotated[str, Field(pattern=r"^(unix:.+|\[[0-9a-fA-F:.]+\]:\d{1,5}|[^\s:/]+:\d{1,5})$")]


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ClientTLS(Spec):
    """TLS of a connection BigFleet makes. `ca` verifies the server (default: the system's
    roots); `cert` and `key` are BigFleet's own certificate, for servers that require mutual
    TLS; `server_name` overrides the name checked against the server's certificate."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    server_name: str | None = None

    @model_validator(mode="after")
    def _pair(self) -> ClientTLS:
        if (self.cert is None) != (self.key is None):
            raise ValueError("cert and key: give both or neither")
        return self


class ServerTLS(Spec):
    """TLS of a server BigFleet runs. With `client_ca`, every client must present a
    certificate signed by it (mutual TLS)."""

    cert: str
    key: str
    client_ca: str | None = None


class ProviderEndpoint(Spec):
    name: Name
    endpoint: Endpoint
    tls: ClientTLS | None = None  # none: plaintext (loopback and tests only)
    deadline_seconds: Seconds = 10.0  # per call; lifecycle calls are acknowledged at once
    calls_per_second: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None


class OperatorEndpoint(Spec):
    cluster: Name
    endpoint: Endpoint


class Operators(Spec):
    """Each cluster's operator: listed by name, or found by `template`, in which `{cluster}`
    stands for the cluster's name ("operator.{cluster}.svc:50061"). A cluster with neither has
    no operator: the gateway refuses its roll-ups (nothing could be configured for it)."""

    template: str | None = None
    clusters: list[OperatorEndpoint] = Field(default_factory=list)
    tls: ClientTLS | None = None
    # GenerateBootstrap runs inside a 30 s activity with one quick retry: at most 20 s a call.
    deadline_seconds: Annotated[float, Field(gt=0, le=20, allow_inf_nan=False)] = 5.0

    @model_validator(mode="after")
    def _template(self) -> Operators:
        if self.template is not None and "{cluster}" not in self.template:
            raise ValueError("template: must contain {cluster}")
        names = [c.cluster for c in self.clusters]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"clusters: listed twice: {', '.join(dupes)}")
        return self

    def endpoint(self, cluster: str) -> str | None:
        for c in self.clusters:
            if c.cluster == cluster:
                return c.endpoint
        if self.template is not None and _CLUSTER_NAME.match(cluster):
            return self.template.replace("{cluster}", cluster)
        return None


# A cluster name that may stand in a host name (the template's use).
_CLUSTER_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")


class ClusterToken(Spec):
    """A cluster's roll-up token: the SHA-256 of the token in hex (so the config holds no
    secret), or a file holding the token itself (a mounted secret)."""

    cluster: Name
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _one(self) -> ClusterToken:
        if (self.sha256 is None) == (self.file is None):
            raise ValueError("give exactly one of sha256 and file")
        return self


Count = Annotated[int, Field(ge=1, le=1_000_000)]
Limit = Annotated[float, Field(gt=0, le=86_400, allow_inf_nan=False)]  # seconds


class GatewayLimits(Spec):
    """What the roll-up gateway gives a sender (docs/operations.md, "The roll-up gateway").
    A sender's credentials are checked before its call holds anything; these bound what an
    authenticated one holds, so that no sender, idle or not, takes what the others need."""

    sends: Count = 2000  # roll-ups in flight in the whole gateway
    sends_per_cluster: Count = 8  # in flight per credential (a token's or certificate's clusters)
    # Per peer address: behind a proxy or NAT that hides senders' addresses, raise these.
    sends_per_address: Count = 500
    connections_per_address: Count = 256  # (connections with a roll-up in flight)
    streams_per_connection: Count = 100  # HTTP/2 streams a connection may open at once
    receive_seconds: Limit = 10.0  # the roll-up must arrive this soon after its call's headers
    handshake_seconds: Limit = 10.0  # a connection's TLS and HTTP/2 handshake
    idle_seconds: Limit = 300.0  # a connection with no call in flight is closed
    connection_age_seconds: Limit = 3600.0  # then the client reconnects (its calls finish)
    # Pings of a client with no call sending data, at most this often (clients of BigFleet
    # ping every 30 s): twice more often and the connection is closed.
    min_ping_interval_seconds: Limit = 20.0


class Gateway(Spec):
    """The roll-up gateway. A sender is authenticated by its TLS client certificate (whose
    common name or a DNS name in its subjectAltName is the cluster's name; needs
    `tls.client_ca`), or by a bearer token listed in `tokens`."""

    listen: Endpoint = "0.0.0.0:50070"
    tls: ServerTLS | None = None
    tokens: list[ClusterToken] = Field(default_factory=list)
    # With mutual TLS on `listen` (a `tls.client_ca`), senders of tokens have no certificate to
    # show there: they are served here, over TLS without client certificates. (gRPC's Python
    # server either requires a client certificate on a port or asks for none.)
    token_listen: Endpoint | None = None
    health_port: Annotated[int, Field(ge=0, le=65535)] = 0
    limits: GatewayLimits = Field(default_factory=lambda: GatewayLimits())


class Deployment(Spec):
    name: Name
    shards: Annotated[int, Field(ge=1, le=64)] = 1
    # Transition workflows running at once in the whole fleet, shared equally by its shards:
    # they share one Temporal server (workflows/outbox.py; past it, starts wait in the shards'
    # pipelines). Four shards of 1 000 each had 3 600 running on a server that completed 7.5
    # a second, and two of them configured nothing in 4 minutes.
    max_in_flight: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    cycle_seconds: Seconds = 10.0
    # Machines one configure (of a need) or drain (of a cluster, one grace and reason) workflow
    # carries; `escalate_drain` escalates a whole drain workflow, so 1 keeps a drain per machine.
    configure_batch: Annotated[int, Field(ge=1, le=MAX_TRANSITION_BATCH)] = MAX_TRANSITION_BATCH
    drain_batch: Annotated[int, Field(ge=1, le=MAX_TRANSITION_BATCH)] = MAX_TRANSITION_BATCH
    # And deletes (of a provider, one reason): a delete call per machine, one workflow.
    delete_batch: Annotated[int, Field(ge=1, le=MAX_TRANSITION_BATCH)] = MAX_TRANSITION_BATCH
    # A shard workflow's task timeout; a worker killed mid-task leaves its shards waiting
    # this long.
    shard_task_timeout_seconds: Annotated[float, Field(ge=1, le=MAX_TASK_TIMEOUT_SECONDS)] = (
        SHARD_TASK_TIMEOUT_SECONDS
    )
    policy: PolicyOverrides = Field(default_factory=lambda: PolicyOverrides())
    providers: Annotated[list[ProviderEndpoint], Field(min_length=1)]
    operators: Operators = Field(default_factory=Operators)
    gateway: Gateway = Field(default_factory=Gateway)
    # Shadow mode (docs/shadow.md): true for every shard, or the numbers of the shards that
    # run in it. Such a shard decides and records, and calls no mutating method.
    shadow: bool | Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=64)] = False
    # Clusters BigFleet leaves to their own autoscalers (bigfleet/cluster_modes.py): their
    # machines are never adopted, drained or deleted, whoever lists them; their roll-ups are
    # refused. (Machines a provider labels `bigfleet.io/unmanaged: "true"` are left alone too.)
    unmanaged_clusters: Annotated[list[Name], Field(max_length=MAX_UNMANAGED)] = Field(
        default_factory=list
    )
    # Clusters in shadow (bigfleet/shadow_clusters.py, docs/adoption.md): left alone as those
    # are, their roll-ups taken and decided on without acting; `bigfleet shadow report`
    # compares what BigFleet would have done with what each has.
    shadow_clusters: Annotated[list[Name], Field(max_length=MAX_UNMANAGED)] = Field(
        default_factory=list
    )
    # Shards record what they accept, hold and decide (docs/adoption.md "Record, then replay")
    # under $BIGFLEET_RECORD_DIR of their workers (bounded, rotating files).
    record: bool = False

    @model_validator(mode="after")
    def _unique(self) -> Deployment:
        names = [p.name for p in self.providers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"providers: names must be unique: {', '.join(dupes)}")
        if isinstance(self.shadow, list):
            wrong = sorted({s for s in self.shadow if s >= self.shards})
            if wrong:
                raise ValueError(
                    f"shadow: shard(s) {', '.join(map(str, wrong))} do not exist "
                    f"(the fleet has shards 0..{self.shards - 1})"
                )
        both = sorted(set(self.shadow_clusters) & set(self.unmanaged_clusters))
        if both:
            raise ValueError(
                f"shadow_clusters: {', '.join(both[:5])} also in unmanaged_clusters: a cluster "
                "has one mode"
            )
        if len(set(self.shadow_clusters) | set(self.unmanaged_clusters)) > MAX_UNMANAGED:
            raise ValueError(
                f"shadow_clusters: with unmanaged_clusters, at most {MAX_UNMANAGED} clusters"
            )
        return self

    def shadow_shard(self, shard: int) -> bool:
        """Whether shard `shard` runs in shadow mode."""
        return self.shadow if isinstance(self.shadow, bool) else shard in self.shadow

    def policy_overrides(self) -> dict[str, Any]:
        return self.policy.model_dump(mode="json", exclude_unset=True)

    def provider(self, name: str) -> ProviderEndpoint | None:
        return next((p for p in self.providers if p.name == name), None)


class DeploymentError(ValueError):
    """A deployment config that cannot be used; the message names the file and every field."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(expected_sha256: str, presented: str) -> bool:
    return hmac.compare_digest(expected_sha256, hash_token(presented))


def load_yaml(path: pathlib.Path, model: type[Spec], what: str) -> Any:
    """A YAML file as `model`; a DeploymentError naming the file and every bad field."""
    return load_model(path, model, what, DeploymentError)


SECTIONS = ("providers", "operators", "gateway")


def load(path: str | pathlib.Path, uses: tuple[str, ...] = SECTIONS) -> Deployment:
    """Read and check a deployment config; paths in it become absolute (relative to it), and
    every certificate, key and token file of the sections the caller `uses` must be readable
    now, not at first use (a worker uses providers and operators, the gateway its own)."""
    path = pathlib.Path(path)
    dep: Deployment = load_yaml(path, Deployment, "deployment config")
    base = path.parent.resolve()
    data = dep.model_dump(mode="json", exclude_unset=True)
    missing: list[str] = []

    def fix(node: Any, where: str) -> Any:
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                at = f"{where}.{k}" if where else k
                if k in ("ca", "cert", "key", "client_ca", "file") and isinstance(v, str):
                    full = (base / v).resolve()
                    if at.split(".")[0] in uses and not full.is_file():
                        missing.append(f"  {at}: no such file {full}")
                    out[k] = str(full)
                else:
                    out[k] = fix(v, at)
            return out
        if isinstance(node, list):
            return [fix(v, f"{where}.{i}") for i, v in enumerate(node)]
        return node

    data = fix(data, "")
    if missing:
        raise DeploymentError(f"{path}: invalid deployment config:\n" + "\n".join(missing))
    return from_wire(Deployment, data)
