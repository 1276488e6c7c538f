"""Checks of fencing: a stale token is refused (ABORTED + STALE_FENCING_TOKEN, naming the epoch
presented and the one kept, which a shard must supersede: issue 44); calls refused for another
reason with a higher epoch, and an epoch two minutes beyond the clock (never issued: beyond
PROVIDER_FUTURE_MS), fence nothing out: the run's epoch is still accepted afterwards."""

from __future__ import annotations

import time
from typing import Any

import grpc

from ...v1 import machine_pb2 as mpb
from ...v1 import provider_pb2 as ppb
from .. import errors
from .session import BLOB, CLUSTER, Failed, R, S, Session, status_text

# Beyond the providers' skew (30 s), inside the 5 minutes allowed before issue 44; short if a
# provider keeps it.
FUTURE_PROBE_MS = 120_000
EPOCH_FIELD = "token.shard_epoch"


class FencingChecks(Session):
    """The checks that a provider fences by epoch, and only on calls that succeed."""

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
        got = self._expect(err, grpc.StatusCode.ABORTED, R.STALE_FENCING_TOKEN)
        info = errors.error_info(err)
        named = info is not None and info.presented_epoch == self.epoch - 1
        if info is None or not named or info.highest_epoch < self.epoch:
            said = "none" if info is None else f"{info.presented_epoch}, {info.highest_epoch}"
            raise Failed(
                f"ErrorInfo presented_epoch, highest_epoch: {said}, expected {self.epoch - 1} "
                f"and the epoch kept (at least {self.epoch}): a shard refused as stale takes an "
                "epoch above highest_epoch"
            )
        return got

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
        done[-1] += status_text(self._refused("Configure", unknown)).split(":")[0]
        speculative = [m for m in self._list(0) if m.state is S.SPECULATIVE]
        if speculative:
            higher += 1
            request = self._configure_request(speculative[-1].id, "refused-speculative")
            request.token.CopyFrom(self._token(higher))
            err = self._refused("Configure", request)
            done.append(f"of speculative {speculative[-1].id} at epoch {higher}: ")
            done[-1] += status_text(err).split(":")[0]
        try:
            return f"{'; '.join(done)}; then {self._still_current()}"
        except Failed as why:
            raise Failed(f"{'; '.join(done)}; then {why}") from None

    def future_epoch(self) -> str:
        """An epoch two minutes beyond the clock was never issued: refused as INVALID_FIELD
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
            problems.append(f"{what} at epoch {future} (2 min ahead): {why}")
        try:
            still = self._still_current()
        except Failed as why:
            problems.append(str(why))
        if problems:
            raise Failed("; ".join(problems))
        return f"{what} at epoch {future} (2 min ahead): {got.split(':')[0]}; then {still}"

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
                return f"{how}: {status_text(err).split(':')[0]}, not stale"
            kept = info.highest_epoch if info is not None else 0
            self.epoch = max(self.epoch, kept)  # carry on where the provider now fences
            until = ""
            if kept > time.time_ns() // 1_000_000:
                day = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(kept / 1000))
                until = f": shard {self.shard_id} is fenced out until {day}"
            raise Failed(f"{how} is now refused{until}: {status_text(err)}") from None
        if reply.operation_id != first:
            raise Failed(f"{how}: a new operation {reply.operation_id} (first: {first})")
        return f"{how} still answers {first}"

