"""A conformance run's session with one provider: its channel, its fencing (shard id, epoch,
seq), what it has started, and the calls and expectations every check is written in
(throttling waited out, a refusal's status and ErrorInfo checked)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import grpc

from ...deployment import ClientTLS
from ...models import Machine, MachineState
from ...v1 import machine_pb2 as mpb
from ...v1 import provider_pb2 as ppb
from ...v1 import provider_pb2_grpc
from .. import convert, errors, tls

S = MachineState
R = mpb.ErrorReason
CONFORMANCE_SHARD = 2**40 + 7  # no real BigFleet has this many shards
CLUSTER = "bigfleet-conformance"
BLOB = ppb.BootstrapBlob(
    user_data=b"#!/bin/sh\n# bigfleet conformance: not a real node\n", ttl_seconds=900
)
MAX_PAGES = 10_000


@dataclass
class Check:
    """One line of the table: a check's name, its result and what it saw."""

    name: str
    result: str  # "pass" | "fail" | "skip"
    detail: str


class Failed(Exception):
    """The provider broke the contract: the check fails, saying how."""


class Skipped(Exception):
    """The check cannot run here (nothing to create, delete not supported): skipped."""


class Session:
    """One run against one address: the connection, and what the checks leave for the next."""

    def __init__(
        self,
        address: str,
        tls_: ClientTLS | None = None,
        *,
        ack_seconds: float = 2.0,
        settle_seconds: float = 120.0,
        deadline_seconds: float = 10.0,
        shard_id: int = CONFORMANCE_SHARD,
    ) -> None:
        self.channel = tls.channel(address, tls_)
        self.stub = provider_pb2_grpc.CapacityProviderStub(self.channel)
        self.ack_seconds = ack_seconds
        self.settle_seconds = settle_seconds
        self.deadline = deadline_seconds
        self.shard_id = shard_id
        self.epoch = time.time_ns() // 1_000_000
        self.seq = 0
        self.run_id = uuid.uuid4().hex[:12]
        self.info: ppb.ProviderInfo | None = None
        self.machine: Machine | None = None  # the one this run moves through its life
        self.held_before: set[str] = set()  # its pool's non-speculative machines before Create
        self.started: dict[str, tuple[str, Any, str]] = {}  # call -> (rpc, request, op id)
        self.checks: list[Check] = []
        self.throttled: list[tuple[str, str, float]] = []  # (rpc, status code, retry_after)

    def close(self) -> None:
        self.channel.close()

    # ---- machinery -----------------------------------------------------------------------

    def _need(self) -> Machine:
        if self.machine is None:
            raise Skipped("no machine was created")
        return self.machine

    def _lifecycle(self, rpc: str, request: Any, moving: MachineState, target: MachineState) -> str:
        machine = self._need()
        reply, took = self._timed(rpc, request)
        ack = self._ack(reply, "", machine.id, took, {moving, target})
        self.started[rpc.lower()] = (rpc, request, ack.operation_id)
        return f"{machine.id}: {ack.machine.state} in {took:.2f} s ({ack.operation_id})"

    def _ack(
        self,
        pb: ppb.TransitionAck,
        field: str,
        machine_id: str,
        took: float,
        states: set[MachineState],
    ) -> Any:
        try:
            ack = convert.ack_from_proto(pb, field)
        except convert.WireError as err:
            raise Failed(f"malformed ack: {err}") from None
        if ack.machine.id != machine_id:
            raise Failed(f"ack is for {ack.machine.id}, not {machine_id}")
        if took > self.ack_seconds:
            raise Failed(f"acknowledged after {took:.2f} s (bound {self.ack_seconds:g} s)")
        if ack.machine.state not in states:
            want = " or ".join(sorted(states))
            raise Failed(f"ack shows {ack.machine.state}, expected {want}")
        return ack

    def _list(self, page: int, **where: Any) -> list[Machine]:
        machines: list[Machine] = []
        token, seen = "", set()
        for _ in range(MAX_PAGES):
            request = ppb.ListFilter(max_results=page, page_token=token, **where)
            reply = self._call("List", request)
            if page and len(reply.machines) > page:
                raise Failed(f"a page of {len(reply.machines)} for max_results {page}")
            for pb in reply.machines:
                try:
                    machines.append(convert.machine_from_proto(pb, f"machines.{len(machines)}"))
                except convert.WireError as err:
                    raise Failed(f"List sent a bad machine: {err}") from None
            token = reply.next_page_token
            if not token:
                return machines
            if token in seen:
                raise Failed(f"page token {token!r} came back twice")
            seen.add(token)
        raise Failed(f"List did not end after {MAX_PAGES} pages")

    def _held(self, like: Machine) -> set[str]:
        """Machines of `like`'s pool that are not speculative (where an extra create shows)."""
        same = self._list(0, zone=like.zone, instance_type=like.instance_type)
        return {m.id for m in same if m.state is not S.SPECULATIVE}

    def _call(self, rpc: str, request: Any) -> Any:
        return self._timed(rpc, request)[0]

    def _timed(self, rpc: str, request: Any) -> tuple[Any, float]:
        """The call's reply and how long its last attempt took; throttling is waited out
        (the provider's hint, at most 5 s a time)."""
        method = getattr(self.stub, rpc)
        for _ in range(30):
            start = time.monotonic()
            try:
                return method(request, timeout=self.deadline), time.monotonic() - start
            except grpc.RpcError as err:
                info = errors.error_info(err)
                if info is None or info.reason != R.RATE_LIMITED:
                    raise
                code = err.code().name if err.code() else "?"
                self.throttled.append((rpc, code, info.retry_after_seconds))
                time.sleep(min(5.0, max(0.05, info.retry_after_seconds)))
        raise Failed("still throttled after 30 tries")

    def _refused(self, rpc: str, request: Any) -> grpc.RpcError:
        try:
            reply = self._call(rpc, request)
        except grpc.RpcError as err:
            return err
        raise Failed(f"accepted: {str(reply).strip()[:200] or 'an empty reply'}")

    @staticmethod
    def _expect(
        err: grpc.RpcError, code: grpc.StatusCode, reason: int, field: str | None = None
    ) -> str:
        info = errors.error_info(err)
        got = status_text(err)
        if err.code() != code:
            raise Failed(f"expected {code.name}, got {got}")
        if info is None:
            raise Failed(f"{code.name} without an ErrorInfo in the {errors.TRAILER} trailer")
        if info.reason != reason:
            raise Failed(f"reason {R.Name(info.reason)}, expected {R.Name(reason)}")
        if field is not None and info.field.split(".")[0] != field:
            raise Failed(f"field {info.field!r}, expected {field!r}")
        return got

    def _configure_request(self, machine_id: str, step: str) -> ppb.ConfigureRequest:
        return ppb.ConfigureRequest(
            machine_id=machine_id,
            blob=BLOB,
            cluster=CLUSTER,
            token=self._token(),
            idempotency_key=self._key(step),
        )

    def _token(self, epoch: int | None = None) -> mpb.FencingToken:
        self.seq += 1
        return mpb.FencingToken(
            shard_id=self.shard_id,
            shard_epoch=self.epoch if epoch is None else epoch,
            seq=self.seq,
        )

    def _key(self, step: str) -> str:
        return f"bigfleet-conformance/{self.run_id}/{step}"

    def _unknown(self, i: int) -> str:
        return f"bigfleet-conformance-{self.run_id}-{i:03d}"


def status_text(err: grpc.RpcError) -> str:
    code = err.code().name if hasattr(err, "code") and err.code() else "?"
    info = errors.error_info(err)
    reason = f" {R.Name(info.reason)}" if info is not None else ""
    field = f" field {info.field}" if info is not None and info.field else ""
    return f"{code}{reason}{field}: {err.details() if hasattr(err, 'details') else err}"

