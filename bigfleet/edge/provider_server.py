"""The provider side of the CapacityProvider gRPC contract: any Python `CapacityProvider` served
over gRPC, with what the contract asks of a server beyond the provider's own calls.

- Requests are validated before the provider sees them: a bad one is INVALID_ARGUMENT with an
  ErrorInfo naming the field ("machine_ids", "token"); a refusal of the provider is its typed
  error on the wire (errors.status_of).
- Idempotency keys: the first call with a key is executed and its acks stored; a repeat returns
  the stored operation (with a fresh snapshot of each machine) and starts nothing. A key reused
  for a different request is refused (INVALID_ARGUMENT, field idempotency_key). An empty key is
  no key: the call is executed, and the provider's own (machine, target) idempotency applies.
- Fencing is checked here too, before the store is consulted, so a zombie shard repeating an
  old key learns it is stale instead of getting the old answer; an epoch beyond the server's
  clock (plus bigfleet/epochs.py's tolerance) was never issued and is refused as INVALID_FIELD
  `token.shard_epoch`. The epoch is kept only once the call has succeeded (started, or a repeat
  answered from the store): a refused call moves no fencing state (bigfleet/providers/fencing.py).
- The store's fences are the only ones: a provider that keeps its own (OwnFences) lets the
  server fence for it, so `bigfleet provider fence reset` on the store is the whole story.
- The call log records every mutating call: (time, method, key, machine ids, outcome), the
  outcome "started", "repeat" or the refusal's reason ("STALE_FENCING_TOKEN", "INVALID_FIELD"),
  and every operator's fence reset (method "FenceReset", outcome "reset": who, what, why).
- List pages in id order; the page token is the last id returned.

The idempotency store, the fencing epochs and the call log are tables of one SQLite database
(bigfleet/edge/provider_store.py; ":memory:" when nothing needs to survive). With
`persist_provider`, the provider object itself is pickled into the same database after every
mutating call, in the transaction that records the call: that is how the reference server
(`bigfleet provider serve`) keeps a simulated provider's machines across a restart. A pickle is
enough for a reference server that runs code we wrote (it is not a format for anyone else to
read); a real provider keeps its state in its own backend. Reads are not saved: a simulated
provider's reads only apply completions due by now, which replaying from the saved state
reproduces exactly.

Calls into the provider are serialized by one lock (simulated providers are not thread-safe);
the grpc server's thread pool only overlaps the network.

What a request is validated into, and how a refusal is answered, is provider_requests.py.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ..deployment import ServerTLS
from ..models import TransitionAck
from ..providers.base import CapacityProvider
from ..providers.fencing import OwnFences
from ..v1 import machine_pb2 as mpb
from ..v1 import provider_pb2 as ppb
from ..v1 import provider_pb2_grpc
from . import convert, tls
from .convert import WireError
from .provider_requests import (
    MAX_LIST_PAGE,
    ConfigureFields,
    CreateFields,
    DeleteFields,
    DrainFields,
    GetFields,
    Mutation,
    Refusal,
    describe_of,
    fingerprint,
    token_of,
)
from .provider_store import Operation, ProviderStore

SERVICE = ppb.DESCRIPTOR.services_by_name["CapacityProvider"].full_name
DEFAULT_LIST_PAGE = 500
PRUNE_EVERY = 1000  # mutating calls between prunings


# ---- the service -----------------------------------------------------------------------------


class ProviderService(provider_pb2_grpc.CapacityProviderServicer):
    """The CapacityProvider service over one Python provider (module docstring)."""

    def __init__(
        self,
        provider: CapacityProvider,
        store: ProviderStore | None = None,
        *,
        persist_provider: bool = False,
        info: ppb.ProviderInfo | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.provider = provider
        if isinstance(provider, OwnFences):  # the store's fences are the only ones (issue 44)
            provider.fenced_by_server = True
        self.store = store or ProviderStore()
        self.clock = clock  # what an epoch is checked against (seconds)
        self.persist_provider = persist_provider
        self._lock = threading.Lock()
        self._since_prune = 0
        with self._lock:
            self.info = info or describe_of(provider)
            if persist_provider:
                with self.store.transaction():
                    self.store.save_provider(provider)

    # ---- lifecycle ---------------------------------------------------------------------------

    def Create(self, request: ppb.CreateRequest, context: Any) -> ppb.TransitionAcks:  # noqa: N802
        def parse() -> Mutation:
            f = convert.validated(
                CreateFields,
                {
                    "machine_ids": list(request.machine_ids),
                    "idempotency_key": request.idempotency_key,
                },
                "create request",
            )
            if len(set(f.machine_ids)) != len(f.machine_ids):
                raise WireError("create request", [("machine_ids", "an id is listed twice")])
            token = token_of(request)
            return Mutation(
                "Create",
                f.idempotency_key,
                token,
                f.machine_ids,
                fingerprint("create", machine_ids=f.machine_ids),
                lambda: self.provider.create(f.machine_ids, token, key=f.idempotency_key),
            )

        acks = self._mutate(context, "Create", request, parse)
        return ppb.TransitionAcks(acks=[convert.ack_to_proto(a) for a in acks])

    def Configure(self, request: ppb.ConfigureRequest, context: Any) -> ppb.TransitionAck:  # noqa: N802
        def parse() -> Mutation:
            f = convert.validated(
                ConfigureFields,
                {
                    "machine_id": request.machine_id,
                    "cluster": request.cluster,
                    "idempotency_key": request.idempotency_key,
                },
                "configure request",
            )
            if not request.HasField("blob"):
                raise WireError("configure request", [("blob", "missing")])
            blob = convert.blob_from_proto(request.blob)
            token = token_of(request)
            digest = hashlib.sha256(blob.user_data).hexdigest()
            return Mutation(
                "Configure",
                f.idempotency_key,
                token,
                [f.machine_id],
                fingerprint(
                    "configure",
                    machine_id=f.machine_id,
                    cluster=f.cluster,
                    user_data_sha256=digest,
                    ttl_seconds=blob.ttl_seconds,
                ),
                lambda: [
                    self.provider.configure(
                        f.machine_id, blob, f.cluster, token, key=f.idempotency_key
                    )
                ],
            )

        (ack,) = self._mutate(context, "Configure", request, parse)
        return convert.ack_to_proto(ack)

    def Drain(self, request: ppb.DrainRequest, context: Any) -> ppb.TransitionAck:  # noqa: N802
        def parse() -> Mutation:
            f = convert.validated(
                DrainFields,
                {
                    "machine_id": request.machine_id,
                    "grace_seconds": request.grace_seconds,
                    "force": request.force,
                    "idempotency_key": request.idempotency_key,
                },
                "drain request",
            )
            token = token_of(request)
            return Mutation(
                "Drain",
                f.idempotency_key,
                token,
                [f.machine_id],
                fingerprint(
                    "drain", machine_id=f.machine_id, grace_seconds=f.grace_seconds, force=f.force
                ),
                lambda: [
                    self.provider.drain(
                        f.machine_id, f.grace_seconds, token, f.force, key=f.idempotency_key
                    )
                ],
            )

        (ack,) = self._mutate(context, "Drain", request, parse)
        return convert.ack_to_proto(ack)

    def Delete(self, request: ppb.DeleteRequest, context: Any) -> ppb.TransitionAck:  # noqa: N802
        def parse() -> Mutation:
            f = convert.validated(
                DeleteFields,
                {"machine_id": request.machine_id, "idempotency_key": request.idempotency_key},
                "delete request",
            )
            token = token_of(request)
            return Mutation(
                "Delete",
                f.idempotency_key,
                token,
                [f.machine_id],
                fingerprint("delete", machine_id=f.machine_id),
                lambda: [self.provider.delete(f.machine_id, token, key=f.idempotency_key)],
            )

        (ack,) = self._mutate(context, "Delete", request, parse)
        return convert.ack_to_proto(ack)

    # ---- reads -------------------------------------------------------------------------------

    def Describe(self, request: ppb.DescribeRequest, context: Any) -> ppb.ProviderInfo:  # noqa: N802
        return self.info

    def Get(self, request: ppb.MachineRef, context: Any) -> mpb.Machine:  # noqa: N802
        with self._lock:
            try:
                f = convert.validated(GetFields, {"machine_id": request.machine_id}, "get request")
                return convert.machine_to_proto(self.provider.get(f.machine_id))
            except Exception as err:
                refused = Refusal(err)
        self._abort(context, refused)

    def List(self, request: ppb.ListFilter, context: Any) -> ppb.MachineList:  # noqa: N802
        with self._lock:
            try:
                f = convert.list_filter_from_proto(request)
                size = min(f.max_results or DEFAULT_LIST_PAGE, MAX_LIST_PAGE)
                everything = self.provider.list(f.model_copy(update={"max_results": 0}))
                after = request.page_token
                rest = sorted((m for m in everything if m.id > after), key=lambda m: m.id)
                page = rest[:size]
                more = len(rest) > size
                return ppb.MachineList(
                    machines=[convert.machine_to_proto(m) for m in page],
                    next_page_token=page[-1].id if more else "",
                )
            except Exception as err:
                refused = Refusal(err)
        self._abort(context, refused)

    # ---- machinery ---------------------------------------------------------------------------

    def _mutate(
        self, context: Any, method: str, request: Any, parse: Callable[[], Mutation]
    ) -> list[TransitionAck]:
        """Validate, fence, find or start the operation, log it; all in one transaction."""
        key = str(getattr(request, "idempotency_key", ""))
        ids = list(request.machine_ids) if method == "Create" else [str(request.machine_id)]
        with self._lock:
            refused: Refusal | None = None
            with self.store.transaction():
                outcome, detail = "started", ""
                acks: list[TransitionAck] = []
                try:
                    m = parse()
                    acks, outcome = self._run(m)
                    detail = ", ".join(a.operation_id for a in acks)
                except Exception as err:
                    refused = Refusal(err)
                    outcome, detail = refused.reason, refused.details
                self.store.log(method, key, ids, outcome, detail[:2000])
            self._since_prune += 1
            if self._since_prune >= PRUNE_EVERY:
                self._since_prune = 0
                self.store.prune()
        if refused is not None:
            self._abort(context, refused)
        return acks

    def _run(self, m: Mutation) -> tuple[list[TransitionAck], str]:
        now = self.clock()
        self.store.check_fence(self.provider.name, m.token, now)
        done = self.store.operation(m.key) if m.key else None
        if done is not None:
            if (done.method, done.fingerprint) != (m.method, m.fingerprint):
                raise WireError(
                    f"{m.method} request",
                    [
                        (
                            "idempotency_key",
                            f"already used for a different request ({done.method} of "
                            f"{', '.join(done.machine_ids)})",
                        )
                    ],
                )
            acks = [
                TransitionAck(operation_id=op, machine=self.provider.get(mid))
                for op, mid in zip(done.operation_ids, done.machine_ids, strict=True)
            ]
            self.store.keep_fence(self.provider.name, m.token, now)
            return acks, "repeat"
        try:
            acks = m.start()
        finally:
            if self.persist_provider:
                self.store.save_provider(self.provider)  # even a refusal may have moved it
        self.store.keep_fence(self.provider.name, m.token, now)  # only now: it succeeded
        if m.key:
            ops = [a.operation_id for a in acks]
            self.store.remember(m.key, Operation(m.method, m.fingerprint, m.machine_ids, ops))
        return acks, "started"

    @staticmethod
    def _abort(context: Any, refused: Refusal) -> NoReturn:
        if refused.trailers:
            context.set_trailing_metadata(refused.trailers)
        context.abort(refused.code, refused.details)
        raise AssertionError("context.abort returns only by raising")


# ---- serving ---------------------------------------------------------------------------------


class WallClock:
    """A simulated provider's clock on real time: time.time(), never going backwards (its
    events assume a clock that does not), and picklable with the provider."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        self.now = max(self.now, time.time())
        return self.now


@dataclass
class ProviderServer:
    """A running CapacityProvider server: its port, its service, its health."""

    server: grpc.Server
    port: int
    service: ProviderService
    health: health.HealthServicer

    def stop(self, grace: float = 2.0) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
        self.service.store.close()


def serve_provider(
    service: ProviderService,
    listen: str,
    tls_: ServerTLS | None = None,
    max_workers: int = 8,
    client_names: Iterable[str] = (),
) -> ProviderServer:
    """Start serving `service` and grpc.health.v1 on `listen` (port 0: any free one); with
    `client_names`, only clients whose certificate names one may call. Raises OSError if it
    cannot listen."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers),
        options=tls.OPTIONS,
        interceptors=tls.interceptors(client_names),
    )
    provider_pb2_grpc.add_CapacityProviderServicer_to_server(service, server)
    checker = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    port = tls.add_port(server, listen, tls_)
    server.start()
    for name in ("", SERVICE):
        checker.set(name, health_pb2.HealthCheckResponse.SERVING)
    return ProviderServer(server, port, service, checker)


def simulated_service(
    scenario_path: str | Path, provider_name: str, state_dir: str | Path
) -> ProviderService:
    """The reference server's service: provider `provider_name` of a scenario, on real time,
    kept in `state_dir` (restored from it when it holds one). Raises ValueError if the scenario
    has no such provider or the state dir holds another one."""
    from ..simulation.fleet import provider as make_provider
    from ..simulation.scenario import CloudProviderSpec, load

    scenario = load(scenario_path)
    names = [p.name for p in scenario.providers]
    if provider_name not in names:
        raise ValueError(
            f"{scenario_path}: no provider {provider_name!r} (it has {', '.join(names)})"
        )
    i = names.index(provider_name)
    spec = scenario.providers[i]
    store = ProviderStore.in_dir(state_dir)
    provider = store.load_provider()
    if provider is None:
        # The seed as bigfleet.simulation.fleet.providers derives it: the same hosts as a run.
        provider = make_provider(spec, WallClock(), scenario.seed * 1_000_003 + i)
    elif provider.name != provider_name:
        store.close()
        raise ValueError(f"{state_dir} holds provider {provider.name}, not {provider_name}")
    rate = spec.api_calls_per_second if isinstance(spec, CloudProviderSpec) else 0.0
    return ProviderService(provider, store, persist_provider=True, info=describe_of(provider, rate))


def configured_service(config_path: str | Path, state_dir: str | Path) -> ProviderService:
    """A real provider of a provider config (bigfleet/providers/configured.py) behind the
    contract: its machines live at the provider (EC2, the BMCs); `state_dir` keeps the
    idempotency keys, fencing epochs and the call log."""
    from ..providers.configured import load_provider

    provider = load_provider(config_path)
    store = ProviderStore.in_dir(state_dir)
    rate = float(getattr(provider, "calls_per_second", 0.0) or 0.0)
    return ProviderService(provider, store, info=describe_of(provider, rate))
