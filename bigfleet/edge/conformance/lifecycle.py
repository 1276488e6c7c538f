"""Checks of one machine's life: each lifecycle call (Create, Configure, Drain, Delete) is
acknowledged at once, a repeat with the same idempotency key starts nothing, and each
transition settles; or Delete is refused as UNIMPLEMENTED where Describe says so."""

from __future__ import annotations

import time

import grpc

from ...models import MachineState
from ...v1 import provider_pb2 as ppb
from .. import convert
from .session import Failed, R, S, Session, Skipped

POLL_SECONDS = 0.2


class LifecycleChecks(Session):
    """The checks that move this run's one machine through its life."""

    # ---- one machine's life --------------------------------------------------------------

    def create(self) -> str:
        speculative = [m for m in self._list(0) if m.state is S.SPECULATIVE]
        if not speculative:
            raise Skipped("no speculative machine to create")
        # Not spot if there is a choice: an interruption would fail a later check.
        speculative.sort(key=lambda m: (m.capacity_type == "spot", m.id))
        target = speculative[0]
        self.held_before = self._held(target)
        request = ppb.CreateRequest(
            machine_ids=[target.id], token=self._token(), idempotency_key=self._key("create")
        )
        reply, took = self._timed("Create", request)
        if len(reply.acks) != 1:
            raise Failed(f"{len(reply.acks)} acks for 1 machine")
        ack = self._ack(reply.acks[0], "acks.0", target.id, took, {S.CREATING, S.IDLE})
        self.machine = ack.machine
        self.started["create"] = ("Create", request, ack.operation_id)
        return f"{target.id}: {ack.machine.state} in {took:.2f} s ({ack.operation_id})"

    def create_repeat(self) -> str:
        problems = []
        try:
            detail = self.repeat("create")
        except Failed as err:
            problems.append(str(err))
        machine = self._need()
        extra = sorted(self._held(machine) - self.held_before - {machine.id})
        if extra:
            problems.append(f"the repeat made {len(extra)} more machine(s): {', '.join(extra[:5])}")
        if problems:
            raise Failed("; ".join(problems))
        return detail + "; no extra machine listed"

    def configure(self) -> str:
        machine = self._need()
        request = self._configure_request(machine.id, "configure")
        return self._lifecycle("Configure", request, S.CONFIGURING, S.CONFIGURED)

    def drain(self) -> str:
        machine = self._need()
        request = ppb.DrainRequest(
            machine_id=machine.id,
            grace_seconds=0.0,
            token=self._token(),
            idempotency_key=self._key("drain"),
        )
        return self._lifecycle("Drain", request, S.DRAINING, S.IDLE)

    def delete(self) -> str:
        machine = self._need()
        if self.info is not None and not self.info.supports_delete:
            raise Skipped("Describe says delete is not supported")
        request = ppb.DeleteRequest(
            machine_id=machine.id, token=self._token(), idempotency_key=self._key("delete")
        )
        return self._lifecycle("Delete", request, S.DELETING, S.SPECULATIVE)

    def delete_unsupported(self) -> str:
        if self.info is None or self.info.supports_delete:
            raise Skipped("Describe says delete is supported")
        machine = self._need()
        request = ppb.DeleteRequest(
            machine_id=machine.id, token=self._token(), idempotency_key=self._key("nodelete")
        )
        err = self._refused("Delete", request)
        return self._expect(err, grpc.StatusCode.UNIMPLEMENTED, R.NOT_SUPPORTED)

    def repeat(self, call: str) -> str:
        if call not in self.started:
            raise Skipped(f"no {call} to repeat")
        rpc, request, first = self.started[call]
        reply = self._call(rpc, request)
        if call == "create" and len(reply.acks) != 1:
            raise Failed(f"{len(reply.acks)} acks for 1 machine")
        pb = reply.acks[0] if call == "create" else reply
        if pb.operation_id != first:
            raise Failed(f"same key, new operation: {pb.operation_id} (first: {first})")
        return f"same operation {first}"

    def settle(self, target: MachineState, deletes: bool = False) -> str:
        machine = self._need()
        if deletes and "delete" not in self.started:
            raise Skipped("no delete was started")
        deadline = time.monotonic() + self.settle_seconds
        while True:
            pb = self._call("Get", ppb.MachineRef(machine_id=machine.id))
            now = convert.machine_from_proto(pb, "machine")
            if now.state is target:
                self.machine = now
                return f"{machine.id}: {target}"
            if now.state is S.FAILED:
                raise Failed(f"{machine.id} FAILED (from {now.failed_from}): {now.last_error}")
            if time.monotonic() > deadline:
                raise Failed(f"{machine.id} still {now.state} after {self.settle_seconds:g} s")
            time.sleep(POLL_SECONDS)

