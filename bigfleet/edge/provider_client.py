"""BigFleet's side of the CapacityProvider gRPC contract (proto/bigfleet/v1/provider.proto): a
provider reached over the network, behind the same Python contract as the simulated ones
(bigfleet/providers/base.py), so the provider activities cannot tell them apart.

Calls block (a grpc channel, not grpc.aio), so the class says `blocking = True` and its async
callers run it on a thread. Every call has the endpoint's deadline. A refusal comes back as
BigFleet's typed error (errors.provider_error: stale token, not found, throttled, ...); anything
else (UNAVAILABLE, DEADLINE_EXCEEDED) is raised as the grpc.RpcError it is, which a caller
retries. A reply is wire data and is checked like any other input: a malformed machine, a Create
reply whose acks do not match the request, or a listing that never ends raises
ProviderReplyError naming the field ("acks.0.machine.state").
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc

from ..deployment import ProviderEndpoint
from ..models import BootstrapBlob, FencingToken, ListFilter, Machine, TransitionAck
from ..providers.base import ProviderReplyError
from ..v1 import provider_pb2 as ppb
from ..v1 import provider_pb2_grpc
from . import convert, errors, tls

MAX_PAGES = 10_000
"""A listing that needs more pages than this is a provider bug (a token that never ends)."""


@dataclass(frozen=True)
class ProviderInfo:
    """What Describe says: the provider's name, capacity types and limits."""

    name: str
    capacity_types: tuple[str, ...]
    max_create_batch: int
    calls_per_second: float  # 0: no budget given
    supports_delete: bool
    max_list_page: int


class GrpcProvider:
    """One provider endpoint of the deployment config (bigfleet/deployment.py)."""

    blocking = True  # every call waits on the network: async callers use a thread

    def __init__(self, spec: ProviderEndpoint) -> None:
        self.spec = spec
        self.name = spec.name
        self._channel = tls.channel(spec.endpoint, spec.tls)
        self._stub = provider_pb2_grpc.CapacityProviderStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    # ---- the calls ---------------------------------------------------------------------------

    def describe(self) -> ProviderInfo:
        pb = self._rpc("describe", self._stub.Describe, ppb.DescribeRequest())
        return ProviderInfo(
            name=pb.name,
            capacity_types=tuple(pb.capacity_types),
            max_create_batch=pb.max_create_batch,
            calls_per_second=pb.calls_per_second,
            supports_delete=pb.supports_delete,
            max_list_page=pb.max_list_page,
        )

    def create(
        self, machine_ids: builtins.list[str], token: FencingToken, *, key: str = ""
    ) -> builtins.list[TransitionAck]:
        request = ppb.CreateRequest(
            machine_ids=list(machine_ids),
            token=convert.token_to_proto(token),
            idempotency_key=key,
        )
        reply = self._rpc("create", self._stub.Create, request)
        if len(reply.acks) != len(machine_ids):
            self._bad(
                [("acks", f"{len(reply.acks)} acks for {len(machine_ids)} machines requested")]
            )
        acks = [self._ack(pb, f"acks.{i}") for i, pb in enumerate(reply.acks)]
        wrong = [
            (f"acks.{i}.machine.id", f"expected {want}, got {ack.machine.id}")
            for i, (want, ack) in enumerate(zip(machine_ids, acks, strict=True))
            if ack.machine.id != want
        ]
        if wrong:
            self._bad(wrong)
        return acks

    def configure(
        self,
        machine_id: str,
        blob: BootstrapBlob,
        cluster: str,
        token: FencingToken,
        *,
        key: str = "",
    ) -> TransitionAck:
        request = ppb.ConfigureRequest(
            machine_id=machine_id,
            blob=convert.blob_to_proto(blob),
            cluster=cluster,
            token=convert.token_to_proto(token),
            idempotency_key=key,
        )
        return self._one(machine_id, self._rpc("configure", self._stub.Configure, request))

    def drain(
        self,
        machine_id: str,
        grace_seconds: float,
        token: FencingToken,
        force: bool = False,
        *,
        key: str = "",
    ) -> TransitionAck:
        request = ppb.DrainRequest(
            machine_id=machine_id,
            grace_seconds=grace_seconds,
            force=force,
            token=convert.token_to_proto(token),
            idempotency_key=key,
        )
        return self._one(machine_id, self._rpc("drain", self._stub.Drain, request))

    def delete(self, machine_id: str, token: FencingToken, *, key: str = "") -> TransitionAck:
        request = ppb.DeleteRequest(
            machine_id=machine_id, token=convert.token_to_proto(token), idempotency_key=key
        )
        return self._one(machine_id, self._rpc("delete", self._stub.Delete, request))

    def get(self, machine_id: str) -> Machine:
        pb = self._rpc("get", self._stub.Get, ppb.MachineRef(machine_id=machine_id))
        machine = self._machine(pb, "machine")
        if machine.id != machine_id:
            self._bad([("machine.id", f"expected {machine_id}, got {machine.id}")])
        return machine

    def list(self, filter: ListFilter) -> builtins.list[Machine]:
        """Every page of the listing; `filter.max_results` (0: no limit) caps the total."""
        machines: builtins.list[Machine] = []
        token, seen = "", set()
        for _ in range(MAX_PAGES):
            want = filter.max_results - len(machines) if filter.max_results else 0
            request = convert.list_filter_to_proto(
                filter.model_copy(update={"max_results": want}), page_token=token
            )
            page = self._rpc("list", self._stub.List, request)
            machines += [
                self._machine(pb, f"machines.{len(machines) + i}")
                for i, pb in enumerate(page.machines)
            ]
            token = page.next_page_token
            if not token or (filter.max_results and len(machines) >= filter.max_results):
                return machines[: filter.max_results or None]
            if token in seen:
                self._bad([("next_page_token", f"{token!r} came back twice: the listing loops")])
            seen.add(token)
        self._bad([("next_page_token", f"the listing did not end after {MAX_PAGES} pages")])

    # ---- machinery ---------------------------------------------------------------------------

    def _rpc(self, call: str, method: Any, request: Any) -> Any:
        try:
            return method(request, timeout=self.spec.deadline_seconds)
        except grpc.RpcError as err:
            typed = errors.provider_error(err, self.name, call)
            if typed is err:
                raise  # not a refusal (unavailable, deadline): the caller retries
            raise typed from None

    def _bad(self, problems: builtins.list[tuple[str, str]]) -> NoReturn:
        raise ProviderReplyError(self.name, problems)

    def _machine(self, pb: Any, field: str) -> Machine:
        try:
            return convert.machine_from_proto(pb, field)
        except convert.WireError as err:
            self._bad(err.problems)

    def _ack(self, pb: ppb.TransitionAck, field: str) -> TransitionAck:
        try:
            return convert.ack_from_proto(pb, field)
        except convert.WireError as err:
            self._bad(err.problems)

    def _one(self, machine_id: str, pb: ppb.TransitionAck) -> TransitionAck:
        ack = self._ack(pb, "")
        if ack.machine.id != machine_id:
            self._bad([("machine.id", f"expected {machine_id}, got {ack.machine.id}")])
        return ack
