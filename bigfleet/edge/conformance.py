"""The CapacityProvider conformance suite: does a live provider keep the gRPC contract
(proto/bigfleet/v1/provider.proto) BigFleet relies on? `bigfleet provider conformance ADDRESS`
runs it and prints the table; `run()` is the library form.

It checks what BigFleet cannot work without: Describe answers; List pages cover every machine
exactly once, in id order, each a valid Machine; Get of an unknown id is NOT_FOUND; a bad request
is INVALID_ARGUMENT naming the field; each lifecycle call is acknowledged at once with the
machine in its transitional or target state, and a repeat with the same idempotency key returns
the same operation and starts nothing (for Create: no extra machine appears); each transition
settles; a stale fencing token is refused with ABORTED + STALE_FENCING_TOKEN; calls refused for
another reason (an unknown machine, a speculative one configured) with a higher epoch do not
fence the current epoch out; an epoch a day beyond the clock (never issued: epochs are start
times in ms) is refused with INVALID_ARGUMENT + INVALID_FIELD `token.shard_epoch` and fences
nothing out either; a Configure of a speculative machine (valid token, fresh key) is refused
with FAILED_PRECONDITION + INVALID_TRANSITION and leaves it speculative; Delete is either a
full lifecycle or, where Describe says it is not supported, UNIMPLEMENTED + NOT_SUPPORTED.

It creates, configures, drains and deletes one real machine, so run it against a test account
or a fresh reference server (`bigfleet provider serve`), never against production capacity. It
fences with its own shard id (CONFORMANCE_SHARD, far above any real shard number) and an epoch
of the current time in ms, so it never fences out a running BigFleet, and each run fences out
only earlier runs. (A provider that fails future-epoch-is-refused may keep that day-ahead epoch
for the conformance shard: later runs against it fail until a day has passed or its fencing
state is cleared.) Throttling (RATE_LIMITED) is waited out after the provider's hint; if the
run was throttled at all, a last check (rate-limited-is-resource-exhausted, only then in the
table) says whether every such refusal was RESOURCE_EXHAUSTED with a positive
retry_after_seconds.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import grpc

from ..deployment import ClientTLS
from ..models import Machine, MachineState
from ..v1 import machine_pb2 as mpb
from ..v1 import provider_pb2 as ppb
from ..v1 import provider_pb2_grpc
from . import convert, errors, tls

S = MachineState
R = mpb.ErrorReason
CONFORMANCE_SHARD = 2**40 + 7  # no real BigFleet has this many shards
CLUSTER = "bigfleet-conformance"
BLOB = ppb.BootstrapBlob(
    user_data=b"#!/bin/sh\n# bigfleet conformance: not a real node\n", ttl_seconds=900
)
CAPACITY_TYPES = {"on-demand", "spot", "reserved", "bare-metal"}
SMALL_PAGE = 3
MAX_PAGES = 10_000
POLL_SECONDS = 0.2
FUTURE_PROBE_MS = 24 * 3600 * 1000  # far beyond any clock skew, short if a provider keeps it
EPOCH_FIELD = "token.shard_epoch"


@dataclass
class Check:
    name: str
    result: str  # "pass" | "fail" | "skip"
    detail: str


class Failed(Exception):
    pass


class Skipped(Exception):
    pass


class Conformance:
    """One run against one address: the checks in order, and what they leave for the next."""

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

    # ---- running -------------------------------------------------------------------------

    def run(self) -> list[Check]:
        steps: list[tuple[str, Callable[[], str]]] = [
            ("describe", self.describe),
            ("list-pages", self.list_pages),
            ("get-unknown-is-not-found", self.get_unknown),
            ("refuses-missing-token", self.missing_token),
            ("refuses-oversized-create", self.oversized_create),
            ("refuses-empty-machine-id", self.empty_machine_id),
            ("invalid-transition-is-failed-precondition", self.invalid_transition),
            ("create-acks-at-once", self.create),
            ("create-repeat-starts-nothing", self.create_repeat),
            ("create-settles", lambda: self.settle(S.IDLE)),
            ("configure-acks-at-once", self.configure),
            ("configure-repeat-starts-nothing", lambda: self.repeat("configure")),
            ("configure-settles", lambda: self.settle(S.CONFIGURED)),
            ("drain-acks-at-once", self.drain),
            ("drain-repeat-starts-nothing", lambda: self.repeat("drain")),
            ("drain-settles", lambda: self.settle(S.IDLE)),
            ("refused-call-moves-no-epoch", self.refused_call_keeps_epoch),
            ("future-epoch-is-refused", self.future_epoch),
            ("stale-token-is-refused", self.stale_token),
            ("delete-unsupported-is-unimplemented", self.delete_unsupported),
            ("delete-acks-at-once", self.delete),
            ("delete-repeat-starts-nothing", lambda: self.repeat("delete")),
            ("delete-settles", lambda: self.settle(S.SPECULATIVE, deletes=True)),
            ("rate-limited-is-resource-exhausted", self.rate_limited),
        ]
        for name, step in steps:
            if step == self.rate_limited and not self.throttled:
                continue  # RATE_LIMITED cannot be provoked; checked only if it was seen
            try:
                self.checks.append(Check(name, "pass", step()))
            except Skipped as why:
                self.checks.append(Check(name, "skip", str(why)))
            except Failed as why:
                self.checks.append(Check(name, "fail", str(why)))
            except grpc.RpcError as err:
                self.checks.append(Check(name, "fail", _status(err)))
            except Exception as err:  # a check must report, whatever the provider sent
                self.checks.append(Check(name, "fail", f"{type(err).__name__}: {err}"))
        return self.checks

    # ---- reads ---------------------------------------------------------------------------

    def describe(self) -> str:
        info = self._call("Describe", ppb.DescribeRequest())
        problems = []
        if not info.name:
            problems.append("name is empty")
        if info.max_create_batch < 1:
            problems.append(f"max_create_batch is {info.max_create_batch}")
        if info.max_list_page < 1:
            problems.append(f"max_list_page is {info.max_list_page}")
        odd = sorted(set(info.capacity_types) - CAPACITY_TYPES)
        if odd or not info.capacity_types:
            problems.append(
                f"capacity_types {list(info.capacity_types)}: expected some of "
                f"{sorted(CAPACITY_TYPES)}"
            )
        if problems:
            raise Failed("; ".join(problems))
        self.info = info
        delete = "delete" if info.supports_delete else "no delete"
        return (
            f"{info.name}: {', '.join(info.capacity_types)}; batch {info.max_create_batch}, "
            f"page {info.max_list_page}, {delete}"
        )

    def list_pages(self) -> str:
        small = self._list(SMALL_PAGE)
        ids = [m.id for m in small]
        if ids != sorted(set(ids)):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            raise Failed(f"pages of {SMALL_PAGE} are not in id order or repeat ids {dupes[:5]}")
        whole = {m.id for m in self._list(self.info.max_list_page if self.info else 0)}
        if set(ids) != whole:
            missing, extra = sorted(whole - set(ids)), sorted(set(ids) - whole)
            raise Failed(f"pages of {SMALL_PAGE} miss {missing[:5]} and add {extra[:5]}")
        if not any(m.state is S.SPECULATIVE for m in small):
            return f"{len(ids)} machines, none speculative: the lifecycle checks will skip"
        return f"{len(ids)} machines in pages of {SMALL_PAGE}, each once, in id order"

    def get_unknown(self) -> str:
        unknown = f"bigfleet-conformance-no-such-machine-{self.run_id}"
        err = self._refused("Get", ppb.MachineRef(machine_id=unknown))
        return self._expect(err, grpc.StatusCode.NOT_FOUND, R.NOT_FOUND)

    # ---- bad requests --------------------------------------------------------------------

    def missing_token(self) -> str:
        request = ppb.CreateRequest(machine_ids=[self._unknown(0)], idempotency_key=self._key("t"))
        err = self._refused("Create", request)
        return self._expect(err, grpc.StatusCode.INVALID_ARGUMENT, R.INVALID_FIELD, "token")

    def oversized_create(self) -> str:
        n = (self.info.max_create_batch if self.info else 64) + 1
        # Ids that do not exist: a provider that wrongly accepts the batch still makes nothing.
        request = ppb.CreateRequest(
            machine_ids=[self._unknown(i) for i in range(n)],
            token=self._token(),
            idempotency_key=self._key("big"),
        )
        err = self._refused("Create", request)
        return self._expect(err, grpc.StatusCode.INVALID_ARGUMENT, R.INVALID_FIELD, "machine_ids")

    def empty_machine_id(self) -> str:
        request = ppb.ConfigureRequest(
            machine_id="",
            blob=BLOB,
            cluster=CLUSTER,
            token=self._token(),
            idempotency_key=self._key("empty"),
        )
        err = self._refused("Configure", request)
        return self._expect(err, grpc.StatusCode.INVALID_ARGUMENT, R.INVALID_FIELD, "machine_id")

    # ---- typed refusals ------------------------------------------------------------------

    def invalid_transition(self) -> str:
        speculative = [m for m in self._list(0) if m.state is S.SPECULATIVE]
        if not speculative:
            raise Skipped("no speculative machine to configure")
        # The last one `create` would pick: the two checks meet only if there is one choice,
        # and then the refused Configure has left the machine as it was.
        speculative.sort(key=lambda m: (m.capacity_type == "spot", m.id))
        target = speculative[-1]
        err = self._refused("Configure", self._configure_request(target.id, "invalid"))
        got = self._expect(err, grpc.StatusCode.FAILED_PRECONDITION, R.INVALID_TRANSITION)
        now = convert.machine_from_proto(
            self._call("Get", ppb.MachineRef(machine_id=target.id)), "machine"
        )
        if now.state is not S.SPECULATIVE:
            raise Failed(f"refused ({got}), yet {target.id} is now {now.state}")
        return f"Configure of speculative {target.id}: {got}"

    def rate_limited(self) -> str:
        wrong = [
            f"{rpc}: {code}, retry_after_seconds {after:g}"
            for rpc, code, after in self.throttled
            if code != grpc.StatusCode.RESOURCE_EXHAUSTED.name or after <= 0
        ]
        if wrong:
            raise Failed(
                f"{len(wrong)} of {len(self.throttled)} RATE_LIMITED refusals were not "
                f"RESOURCE_EXHAUSTED with retry_after_seconds > 0: {'; '.join(wrong[:3])}"
            )
        return f"{len(self.throttled)} RATE_LIMITED refusals, each RESOURCE_EXHAUSTED with a hint"

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

    def stale_token(self) -> str:
        machine = self._need()
        # The lifecycle calls presented self.epoch for this shard; one less is stale. A drain of
        # a machine that is not configured starts nothing even where fencing is missing.
        stale = mpb.FencingToken(shard_id=self.shard_id, shard_epoch=self.epoch - 1, seq=1)
        request = ppb.DrainRequest(
            machine_id=machine.id,
            grace_seconds=0.0,
            token=stale,
            idempotency_key=self._key("stale"),
        )
        err = self._refused("Drain", request)
        return self._expect(err, grpc.StatusCode.ABORTED, R.STALE_FENCING_TOKEN)

    def refused_call_keeps_epoch(self) -> str:
        """Calls refused for another reason, with a higher epoch of this run's shard, must
        not move the shard's epoch: the current one is still accepted afterwards."""
        higher = self.epoch + 1
        unknown = ppb.ConfigureRequest(
            machine_id=self._unknown(999),
            blob=BLOB,
            cluster=CLUSTER,
            token=self._token(higher),
            idempotency_key=self._key("refused-unknown"),
        )
        done = [f"Configure of an unknown machine at epoch {higher}: "]
        done[-1] += _status(self._refused("Configure", unknown)).split(":")[0]
        speculative = [m for m in self._list(0) if m.state is S.SPECULATIVE]
        if speculative:
            higher += 1
            request = self._configure_request(speculative[-1].id, "refused-speculative")
            request.token.CopyFrom(self._token(higher))
            err = self._refused("Configure", request)
            done.append(f"of speculative {speculative[-1].id} at epoch {higher}: ")
            done[-1] += _status(err).split(":")[0]
        try:
            return f"{'; '.join(done)}; then {self._still_current()}"
        except Failed as why:
            raise Failed(f"{'; '.join(done)}; then {why}") from None

    def future_epoch(self) -> str:
        """An epoch a day beyond the clock was never issued: refused as INVALID_FIELD
        token.shard_epoch, and the current epoch is still accepted afterwards."""
        future = time.time_ns() // 1_000_000 + FUTURE_PROBE_MS
        request: Any
        if "drain" in self.started:
            # A repeat: a provider that wrongly accepts it starts nothing.
            rpc, first, _ = self.started["drain"]
            request = ppb.DrainRequest()
            request.CopyFrom(first)
            request.token.CopyFrom(self._token(future))
            what = "a repeat of the drain"
        else:
            rpc, what = "Configure", "a Configure of an unknown machine"
            request = ppb.ConfigureRequest(
                machine_id=self._unknown(998),
                blob=BLOB,
                cluster=CLUSTER,
                token=self._token(future),
                idempotency_key=self._key("future"),
            )
        problems, got = [], ""
        try:
            try:
                reply = self._call(rpc, request)
            except grpc.RpcError as refused:
                err = refused
            else:
                raise Failed(f"accepted (operation {reply.operation_id or '?'})")
            got = self._expect(err, grpc.StatusCode.INVALID_ARGUMENT, R.INVALID_FIELD, "token")
            info = errors.error_info(err)
            if info is not None and info.field != EPOCH_FIELD:
                raise Failed(f"field {info.field!r}, expected {EPOCH_FIELD!r}")
        except Failed as why:
            problems.append(f"{what} at epoch {future} (a day ahead): {why}")
        try:
            still = self._still_current()
        except Failed as why:
            problems.append(str(why))
        if problems:
            raise Failed("; ".join(problems))
        return f"{what} at epoch {future} (a day ahead): {got.split(':')[0]}; then {still}"

    def _still_current(self) -> str:
        """This run's epoch is still accepted: a repeat of the drain (which starts nothing)
        answers its operation; without one, a Configure of an unknown machine is not refused
        as stale. If it was fenced out, the run carries on with the epoch now demanded."""
        if "drain" in self.started:
            rpc, request, first = self.started["drain"]
            if request.token.shard_epoch != self.epoch:  # fenced out before: carry on
                request = ppb.DrainRequest()
                request.CopyFrom(self.started["drain"][1])
                request.token.CopyFrom(self._token())
            how = f"a repeat of the drain at epoch {self.epoch}"
        else:
            rpc, first = "Configure", ""
            request = ppb.ConfigureRequest(
                machine_id=self._unknown(997),
                blob=BLOB,
                cluster=CLUSTER,
                token=self._token(),
                idempotency_key=self._key(f"current-{self.seq}"),
            )
            how = f"a Configure of an unknown machine at epoch {self.epoch}"
        try:
            reply = self._call(rpc, request)
        except grpc.RpcError as err:
            info = errors.error_info(err)
            stale = err.code() == grpc.StatusCode.ABORTED or (
                info is not None and info.reason == R.STALE_FENCING_TOKEN
            )
            if not stale:
                if first:
                    raise
                return f"{how}: {_status(err).split(':')[0]}, not stale"
            kept = info.highest_epoch if info is not None else 0
            self.epoch = max(self.epoch, kept)  # carry on where the provider now fences
            until = ""
            if kept > time.time_ns() // 1_000_000:
                day = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(kept / 1000))
                until = f": shard {self.shard_id} is fenced out until {day}"
            raise Failed(f"{how} is now refused{until}: {_status(err)}") from None
        if reply.operation_id != first:
            raise Failed(f"{how}: a new operation {reply.operation_id} (first: {first})")
        return f"{how} still answers {first}"

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
        got = _status(err)
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


def _status(err: grpc.RpcError) -> str:
    code = err.code().name if hasattr(err, "code") and err.code() else "?"
    info = errors.error_info(err)
    reason = f" {R.Name(info.reason)}" if info is not None else ""
    field = f" field {info.field}" if info is not None and info.field else ""
    return f"{code}{reason}{field}: {err.details() if hasattr(err, 'details') else err}"


def run(address: str, tls_: ClientTLS | None = None, **options: Any) -> list[Check]:
    """Every check against `address`, in order (see Conformance for the options)."""
    suite = Conformance(address, tls_, **options)
    try:
        return suite.run()
    finally:
        suite.close()


def passed(checks: list[Check]) -> bool:
    return not any(c.result == "fail" for c in checks)


def render(address: str, checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = [f"conformance of {address}", ""]
    lines += [f"  {c.result.upper():<4}  {c.name:<{width}}  {c.detail}" for c in checks]
    counts = {r: sum(c.result == r for c in checks) for r in ("pass", "fail", "skip")}
    lines += ["", f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped"]
    return "\n".join(lines)


def as_json(address: str, checks: list[Check]) -> dict[str, Any]:
    return {"address": address, "passed": passed(checks), "checks": [asdict(c) for c in checks]}
