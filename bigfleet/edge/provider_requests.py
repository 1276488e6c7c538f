"""What a CapacityProvider server (provider_server.py) makes of a call: the validated fields
of each request, the Mutation a lifecycle call becomes (what to fence, remember, log and
start), Describe's answer for a Python provider, and the gRPC status a refused call is
answered with."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import grpc
from pydantic import Field

from ..models import FencingToken, ListFilter, Name, TransitionAck, Wire
from ..providers.base import MAX_CREATE_BATCH, CapacityProvider
from ..v1 import machine_pb2 as mpb
from ..v1 import provider_pb2 as ppb
from . import convert, errors
from .convert import WireError

log = logging.getLogger("bigfleet.provider_server")
MAX_LIST_PAGE = 1000  # ~0.5 MB of machines: well inside tls.MAX_MESSAGE_BYTES
MAX_KEY = 512

Key = Annotated[str, Field(max_length=MAX_KEY)]


class CreateFields(Wire):
    """A Create request's fields: the machine ids (at most a create batch) and its key."""

    machine_ids: Annotated[list[Name], Field(min_length=1, max_length=MAX_CREATE_BATCH)]
    idempotency_key: Key


class ConfigureFields(Wire):
    """A Configure request's fields (its blob and token are read apart)."""

    machine_id: Name
    cluster: Name
    idempotency_key: Key


class DrainFields(Wire):
    """A Drain request's fields: the machine, its grace, whether forced, its key."""

    machine_id: Name
    grace_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    force: bool
    idempotency_key: Key


class DeleteFields(Wire):
    """A Delete request's fields."""

    machine_id: Name
    idempotency_key: Key


class GetFields(Wire):
    """A Get request's field."""

    machine_id: Name


@dataclass
class Mutation:
    """A validated lifecycle request: what to fence, remember and log, and how to start it."""

    method: str
    key: str
    token: FencingToken
    machine_ids: list[str]
    fingerprint: str  # the request without its token: a repeat must match it
    start: Callable[[], list[TransitionAck]]


def token_of(request: Any) -> FencingToken:
    """A request's fencing token, validated (a missing one is refused, field `token`)."""
    return convert.token_from_proto(request.token, request.HasField("token"))


def fingerprint(method: str, **fields: Any) -> str:
    """A request without its token, as the text a repeat of its idempotency key must match."""
    return json.dumps({"method": method, **fields}, sort_keys=True)



def describe_of(provider: CapacityProvider, calls_per_second: float = 0.0) -> ppb.ProviderInfo:
    """Describe's answer for a Python provider: capacity types from its listing; a provider
    says it cannot delete with a class attribute `supports_delete = False`."""
    types = sorted({str(m.capacity_type) for m in provider.list(ListFilter())})
    return ppb.ProviderInfo(
        name=provider.name,
        capacity_types=types,
        max_create_batch=MAX_CREATE_BATCH,
        calls_per_second=calls_per_second,
        supports_delete=bool(getattr(provider, "supports_delete", True)),
        max_list_page=MAX_LIST_PAGE,
    )


def refusal_of(err: Exception) -> tuple[grpc.StatusCode, str, tuple, str]:
    """(code, details, trailers, reason for the call log) to answer a failed call with."""
    if isinstance(err, ValueError) and not isinstance(err, WireError):
        # The provider found the request bad; an error that knows its field names it
        # (UnissuedEpoch: token.shard_epoch).
        err = WireError("request", [(str(getattr(err, "field", "") or ""), str(err))])
    try:
        code, details, trailers = errors.status_of(err)
    except TypeError:
        return grpc.StatusCode.INTERNAL, f"{type(err).__name__}: {err}", (), "INTERNAL"
    reason = mpb.ErrorReason.Name(errors.info_of(err).reason)
    return code, details, trailers, reason


class Refusal:
    """How a call that raised `err` is answered; an error that is no refusal is logged."""

    def __init__(self, err: Exception) -> None:
        self.code, self.details, self.trailers, self.reason = refusal_of(err)
        if self.reason == "INTERNAL":
            log.error("provider call failed: %s", err, exc_info=err)
