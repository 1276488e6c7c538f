"""Deliberately broken CapacityProvider servers, each its own process, for the tests that show
BigFleet's side catches them (tests/edge/test_provider_contract.py):

    python -m tests.edge.broken_provider --mode MODE --listen 127.0.0.1:0

    duplicate   keeps no idempotency keys and makes a second machine when a Create is repeated
                (as a provider that calls RunInstances again would); Get of an unknown id
                answers a blank machine instead of NOT_FOUND. The conformance suite must fail.
    malformed   answers machines BigFleet must not accept: a Create ack without a state, a Get
                with a negative price, a List page with a machine without an id.
    wrong-code  refuses an invalid transition (e.g. Configure of a speculative machine) with
                INVALID_ARGUMENT instead of FAILED_PRECONDITION; its ErrorInfo is right. The
                conformance suite must fail invalid-transition-is-failed-precondition.
    fences-refused
                fences as BigFleet's own server did before issue 30: it keeps the epoch of every
                call it is sent, refused or not, and takes any epoch however far beyond its
                clock. The conformance suite must fail refused-call-moves-no-epoch and
                future-epoch-is-refused.

All serve the cloud provider of tests/edge/conformance-fleet.yaml through ProviderService, so
everything else about them is right. Prints "listening on HOST:PORT" once serving.
"""

from __future__ import annotations

import argparse
import signal
import threading
import types
from pathlib import Path
from typing import Any, NoReturn

import grpc

from bigfleet.edge.errors import refusal
from bigfleet.edge.provider_requests import Mutation, Refusal, describe_of
from bigfleet.edge.provider_server import ProviderService, WallClock, serve_provider
from bigfleet.edge.provider_store import Operation
from bigfleet.models import FencingToken, ListFilter, MachineState, TransitionAck
from bigfleet.providers.base import MachineNotFound, RateLimited, StaleFencingToken
from bigfleet.providers.simulated.cloud import SimulatedCloudProvider
from bigfleet.simulation.fleet import provider as make_provider
from bigfleet.simulation.scenario import load
from bigfleet.v1 import machine_pb2 as mpb
from bigfleet.v1 import provider_pb2 as ppb

FLEET = Path(__file__).with_name("conformance-fleet.yaml")
S = MachineState


class DuplicatingService(ProviderService):
    """Create is not idempotent: a repeat boots another instance on a spare slot."""

    def _run(self, m: Mutation) -> tuple[list[TransitionAck], str]:
        if m.method != "Create":
            return super()._run(m)
        self.store.check_fence(self.provider.name, m.token, self.clock())
        self.store.keep_fence(self.provider.name, m.token, self.clock())
        acks = []
        for mid in m.machine_ids:
            machine = self.provider.get(mid)
            if machine.state is S.SPECULATIVE:
                acks += self.provider.create([mid], m.token)
                continue
            same_pool = ListFilter(
                states=[S.SPECULATIVE], zone=machine.zone, instance_type=machine.instance_type
            )
            spare = next(
                x
                for x in self.provider.list(same_pool)
                if x.capacity_type == machine.capacity_type
            )
            (second,) = self.provider.create([spare.id], m.token)
            acks.append(TransitionAck(operation_id=second.operation_id, machine=machine))
        return acks, "started"

    def Get(self, request: ppb.MachineRef, context: Any) -> mpb.Machine:  # noqa: N802
        try:
            self.provider.get(request.machine_id)
        except MachineNotFound:
            return mpb.Machine()  # "not found" as an empty record: the bug
        return super().Get(request, context)


class MalformedService(ProviderService):
    def Create(self, request: ppb.CreateRequest, context: Any) -> ppb.TransitionAcks:  # noqa: N802
        reply = super().Create(request, context)
        for ack in reply.acks:
            ack.machine.state = mpb.MACHINE_STATE_UNSPECIFIED
        return reply

    def Get(self, request: ppb.MachineRef, context: Any) -> mpb.Machine:  # noqa: N802
        machine = super().Get(request, context)
        machine.price_per_hour = -1.0
        return machine

    def List(self, request: ppb.ListFilter, context: Any) -> ppb.MachineList:  # noqa: N802
        reply = super().List(request, context)
        if reply.machines:
            reply.machines[0].id = ""
        return reply


class WrongCodeService(ProviderService):
    """An invalid transition goes out as INVALID_ARGUMENT (reason and details kept)."""

    @staticmethod
    def _abort(context: Any, refused: Refusal) -> NoReturn:
        if refused.reason == "INVALID_TRANSITION":
            refused.code = grpc.StatusCode.INVALID_ARGUMENT
        ProviderService._abort(context, refused)


class StaleUnnamedService(ProviderService):
    """A refusal as stale names no epochs in its ErrorInfo (reason and message kept): a shard
    could not supersede the one kept (issue 44)."""

    @staticmethod
    def _abort(context: Any, refused: Refusal) -> NoReturn:
        if refused.reason == "STALE_FENCING_TOKEN":
            _, _, refused.trailers = refusal(mpb.STALE_FENCING_TOKEN, refused.details)
        ProviderService._abort(context, refused)


class FencesRefusedService(ProviderService):
    """Fencing before issue 30: every epoch is kept before the call is even looked at."""

    def _run(self, m: Mutation) -> tuple[list[TransitionAck], str]:
        name, shard, epoch = self.provider.name, m.token.shard_id, m.token.shard_epoch
        kept = self.store.epoch(shard)
        if kept is not None and epoch < kept:
            raise StaleFencingToken(name, shard, epoch, kept)
        self.store.db.execute(
            "INSERT INTO fences VALUES (?, ?) ON CONFLICT (shard_id) DO UPDATE "
            "SET highest_epoch = excluded.highest_epoch",
            (shard, epoch),
        )
        done = self.store.operation(m.key) if m.key else None
        if done is not None:
            acks = [
                TransitionAck(operation_id=op, machine=self.provider.get(mid))
                for op, mid in zip(done.operation_ids, done.machine_ids, strict=True)
            ]
            return acks, "repeat"
        acks = m.start()
        if m.key:
            ops = [a.operation_id for a in acks]
            self.store.remember(m.key, Operation(m.method, m.fingerprint, m.machine_ids, ops))
        return acks, "started"


def _admit_before_issue_30(self: SimulatedCloudProvider, call: str, token: FencingToken) -> None:
    """The simulated cloud provider's admission before issue 30: the epoch kept at once."""
    self.calls[call] += 1
    self.advance(self._clock())
    highest = self._epochs.get(token.shard_id, token.shard_epoch)
    if token.shard_epoch < highest:
        raise StaleFencingToken(self.name, token.shard_id, token.shard_epoch, highest)
    self._epochs[token.shard_id] = token.shard_epoch
    wait = self._bucket.take()
    if wait:
        raise RateLimited(self.name, call, wait)


MODES: dict[str, type[ProviderService]] = {
    "duplicate": DuplicatingService,
    "malformed": MalformedService,
    "wrong-code": WrongCodeService,
    "fences-refused": FencesRefusedService,
    "stale-unnamed": StaleUnnamedService,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mode", choices=sorted(MODES), required=True)
    ap.add_argument("--listen", default="127.0.0.1:0")
    args = ap.parse_args()
    scenario = load(FLEET)
    spec = next(p for p in scenario.providers if p.name == "cloud")
    provider = make_provider(spec, WallClock(), seed=1)
    if args.mode == "fences-refused":
        assert isinstance(provider, SimulatedCloudProvider)
        provider._admit = types.MethodType(_admit_before_issue_30, provider)  # type: ignore[method-assign]
    kind = MODES[args.mode]
    service = kind(provider, info=describe_of(provider))
    server = serve_provider(service, args.listen)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"listening on 127.0.0.1:{server.port}", flush=True)
    while not stop.wait(1.0):
        pass
    server.stop(0)


if __name__ == "__main__":
    main()
