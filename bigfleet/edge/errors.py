"""Typed errors on the wire: each refusal is a gRPC status plus an `ErrorInfo` (machine.proto)
in the binary trailer `bigfleet-error-bin`, so a caller branches on a reason, not on text.

A server turns BigFleet's typed errors (bigfleet/providers/base.py, bigfleet/operators.py) into a
status with `status_of`; a client turns a status back into the same typed error with
`provider_error`. A status without the trailer (a proxy, a server that is not BigFleet's) still
maps by its code where the code alone is unambiguous.
"""

from __future__ import annotations

from typing import Any

import grpc

from ..models import MachineState
from ..operators import BootstrapRefused
from ..providers.base import (
    InvalidTransition,
    MachineNotFound,
    NotSupported,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    StaleFencingToken,
)
from ..v1 import machine_pb2 as mpb
from .convert import WireError, state_name, state_number

TRAILER = "bigfleet-error-bin"
R = mpb.ErrorReason
C = grpc.StatusCode

CODE_OF: dict[int, grpc.StatusCode] = {
    R.STALE_FENCING_TOKEN: C.ABORTED,
    R.NOT_FOUND: C.NOT_FOUND,
    R.QUOTA_EXHAUSTED: C.RESOURCE_EXHAUSTED,
    R.RATE_LIMITED: C.RESOURCE_EXHAUSTED,
    R.NOT_SUPPORTED: C.UNIMPLEMENTED,
    R.INVALID_TRANSITION: C.FAILED_PRECONDITION,
    R.BOOTSTRAP_REFUSED: C.FAILED_PRECONDITION,
    R.INVALID_FIELD: C.INVALID_ARGUMENT,
    R.UNAUTHENTICATED: C.UNAUTHENTICATED,
    R.PERMISSION_DENIED: C.PERMISSION_DENIED,
    R.UNKNOWN_CLUSTER: C.FAILED_PRECONDITION,
    R.STALE_GENERATION: C.FAILED_PRECONDITION,
    R.ROLLUP_TOO_LARGE: C.INVALID_ARGUMENT,
}
"""The status code each reason is sent with (the table in machine.proto)."""


def info_of(err: Exception) -> mpb.ErrorInfo:
    """The ErrorInfo of one of BigFleet's typed errors; INVALID_FIELD for a WireError."""
    msg = str(err)
    if isinstance(err, StaleFencingToken):
        return mpb.ErrorInfo(
            reason=R.STALE_FENCING_TOKEN,
            message=msg,
            shard_id=err.shard_id,
            presented_epoch=err.presented,
            highest_epoch=err.highest,
        )
    if isinstance(err, MachineNotFound):
        return mpb.ErrorInfo(reason=R.NOT_FOUND, message=msg, machine_id=err.machine_id)
    if isinstance(err, QuotaExhausted):
        return mpb.ErrorInfo(
            reason=R.QUOTA_EXHAUSTED, message=msg, machine_id=err.machine_id, pool=err.pool
        )
    if isinstance(err, RateLimited):
        return mpb.ErrorInfo(
            reason=R.RATE_LIMITED, message=msg, call=err.call, retry_after_seconds=err.retry_after
        )
    if isinstance(err, NotSupported):
        return mpb.ErrorInfo(reason=R.NOT_SUPPORTED, message=msg, call=err.call)
    if isinstance(err, InvalidTransition):
        return mpb.ErrorInfo(
            reason=R.INVALID_TRANSITION,
            message=msg,
            machine_id=err.machine_id,
            call=err.call,
            state=state_number(err.state),  # type: ignore[arg-type]
            failed_from=state_number(err.failed_from),  # type: ignore[arg-type]
        )
    if isinstance(err, BootstrapRefused):
        return mpb.ErrorInfo(reason=R.BOOTSTRAP_REFUSED, message=msg)
    if isinstance(err, WireError):
        return mpb.ErrorInfo(reason=R.INVALID_FIELD, message=msg, field=err.field)
    raise TypeError(f"not a typed error: {type(err).__name__}")


def status_of(err: Exception) -> tuple[grpc.StatusCode, str, tuple[tuple[str, bytes], ...]]:
    """(code, details, trailing metadata) to refuse a call with."""
    info = info_of(err)
    return CODE_OF[info.reason], info.message, ((TRAILER, info.SerializeToString()),)


def refusal(reason: int, message: str, **fields: Any) -> tuple[grpc.StatusCode, str, tuple]:
    info = mpb.ErrorInfo(reason=reason, message=message, **fields)  # type: ignore[arg-type]
    return CODE_OF[reason], message, ((TRAILER, info.SerializeToString()),)


def error_info(err: grpc.RpcError) -> mpb.ErrorInfo | None:
    """The ErrorInfo a refusal carried, if it carried one that parses."""
    trailers = getattr(err, "trailing_metadata", lambda: None)() or ()
    for key, value in trailers:
        if key == TRAILER and isinstance(value, bytes):
            info = mpb.ErrorInfo()
            try:
                info.ParseFromString(value)
            except Exception:
                return None
            return info
    return None


def provider_error(err: grpc.RpcError, provider: str, call: str) -> Exception:
    """A provider's refusal as BigFleet's typed error. Anything that is not a refusal
    (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, ...) is returned unchanged: the caller retries."""
    code = err.code() if hasattr(err, "code") else None
    details = (err.details() if hasattr(err, "details") else "") or ""
    carried = error_info(err)
    info = carried if carried is not None else mpb.ErrorInfo()
    reason: int | None = info.reason
    if carried is None:  # a bare status: its code alone
        reason = {
            C.NOT_FOUND: R.NOT_FOUND,
            C.UNIMPLEMENTED: R.NOT_SUPPORTED,
            C.ABORTED: R.STALE_FENCING_TOKEN,
        }.get(code)  # type: ignore[arg-type]
    if reason == R.STALE_FENCING_TOKEN:
        return StaleFencingToken(
            provider, info.shard_id, info.presented_epoch, info.highest_epoch
        )
    if reason == R.NOT_FOUND:
        return MachineNotFound(provider, info.machine_id or "?")
    if reason == R.QUOTA_EXHAUSTED:
        return QuotaExhausted(provider, info.machine_id or "?", info.pool or "?")
    if reason == R.RATE_LIMITED:
        return RateLimited(provider, info.call or call, max(0.0, info.retry_after_seconds) or 1.0)
    if reason == R.NOT_SUPPORTED:
        return NotSupported(provider, info.call or call, details)
    if reason == R.INVALID_TRANSITION:
        state = state_name(info.state) or ""
        failed = state_name(info.failed_from)
        try:
            return InvalidTransition(
                provider,
                info.machine_id or "?",
                MachineState(state),
                info.call or call,
                failed_from=MachineState(failed) if failed else None,
            )
        except ValueError:
            return ProviderError(provider, f"provider {provider}: {details}")
    if reason == R.INVALID_FIELD:
        # The provider says *our* request was bad: a bug on one side, not worth a retry.
        return ProviderError(provider, f"provider {provider} refused the request: {details}")
    return err
