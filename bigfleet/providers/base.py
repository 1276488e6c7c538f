"""The `CapacityProvider` contract of design §7: six methods, and the errors a caller branches on.

Like Karpenter's `pkg/cloudprovider/types.go`, one module holds the interface and its typed errors,
so a caller reacts to *what went wrong* (stale token, no quota, throttled) without parsing text.
"""

from __future__ import annotations

import builtins
import json
import re
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from ..models import (
    BootstrapBlob,
    FencingToken,
    ListFilter,
    Machine,
    MachineState,
    TransitionAck,
)

MAX_CREATE_BATCH = 64
"""Machines per `create` call: the seed batches Create 64 at a time, one API call per batch."""


@runtime_checkable
class CapacityProvider(Protocol):
    """A capacity backend. Lifecycle calls return at once; progress is observed via get/list.

    `key` is the caller's idempotency key, the same on every retry of one operation: a provider
    that keeps keys (the gRPC contract, proto/bigfleet/v1/provider.proto) answers a repeat with
    the operation already started. The simulated providers ignore it: they are idempotent by
    (machine, target) already. An implementation whose calls block on a network sets a class
    attribute `blocking = True`, and its async callers run it on a thread (activities/providers.py).
    """

    name: str
    """The provider's name: in every HostRef, error and label it gives."""

    def create(
        self, machine_ids: builtins.list[str], token: FencingToken, *, key: str = ""
    ) -> builtins.list[TransitionAck]:
        """Start making SPECULATIVE slots real machines (SPECULATIVE → CREATING → IDLE): at most
        MAX_CREATE_BATCH ids, all or nothing, one ack per id in order. A slot the quota no longer
        has raises QuotaExhausted; a machine already created or creating is a repeat."""
        ...

    def configure(
        self,
        machine_id: str,
        blob: BootstrapBlob,
        cluster: str,
        token: FencingToken,
        *,
        key: str = "",
    ) -> TransitionAck:
        """Start joining an IDLE machine to `cluster` with its bootstrap blob (IDLE →
        CONFIGURING → CONFIGURED); a machine whose configure failed may be configured again. The
        same machine and cluster again is a repeat."""
        ...

    def drain(
        self,
        machine_id: str,
        grace_seconds: float,
        token: FencingToken,
        force: bool = False,
        *,
        key: str = "",
    ) -> TransitionAck:
        """Start taking a CONFIGURED machine out of its cluster (CONFIGURED → DRAINING → IDLE)
        once `grace_seconds` are over (at once with `force`, which also drains a FAILED one); a
        shorter grace or force on a DRAINING machine pulls its end forward."""
        ...

    def delete(self, machine_id: str, token: FencingToken, *, key: str = "") -> TransitionAck:
        """Start giving an IDLE (or FAILED) machine back (→ DELETING → SPECULATIVE, its slot
        free again). A backend that keeps its machines (bare metal) raises NotSupported."""
        ...

    def get(self, machine_id: str) -> Machine:
        """One machine as it is now (a transition whose time has come moves on); MachineNotFound
        for an id that is not one of this provider's slots."""
        ...

    def list(self, filter: ListFilter) -> builtins.list[Machine]:
        """The provider's machines, SPECULATIVE slots included, that match the filter (zone,
        instance type, states, `noticed`), in id order, at most `max_results`."""
        ...


def check_grace(machine_id: str, grace_seconds: float) -> None:
    """A drain's grace is a number of seconds, 0 or more (NaN is not)."""
    if not grace_seconds >= 0:
        raise ValueError(f"drain of {machine_id}: grace_seconds must be >= 0, got {grace_seconds}")


def slot_id(*parts: str) -> str:
    """Join parts into a machine id; anything but letters, digits and dashes becomes a dash."""
    return re.sub(r"[^A-Za-z0-9-]", "-", "-".join(parts))


class ProviderError(Exception):
    """Base of every error a provider raises on purpose; `provider` names the backend."""

    def __init__(self, provider: str, message: str) -> None:
        super().__init__(message)
        self.provider = provider


class StaleFencingToken(ProviderError):
    """A call from a shard epoch older than one the provider has already seen (design §11)."""

    def __init__(self, provider: str, shard_id: int, presented: int, highest: int) -> None:
        super().__init__(
            provider,
            f"provider {provider}: stale fencing token for shard {shard_id}: "
            f"epoch {presented} presented, epoch {highest} already seen "
            "(a newer owner of the shard is running)",
        )
        self.shard_id = shard_id
        self.presented = presented
        self.highest = highest


class UnissuedEpoch(ProviderError, ValueError):
    """A fencing token whose epoch is beyond the provider's own clock (design §11): epochs are
    shard start times in ms (docs/decisions/0002), so no shard was ever given it. A bad request,
    not a stale one: refused as INVALID_FIELD naming `field`, and kept nowhere (taking it would
    fence the real shard out until the clock reached it)."""

    field = "token.shard_epoch"

    def __init__(self, provider: str, shard_id: int, presented: int, latest: int) -> None:
        super().__init__(
            provider,
            f"provider {provider}: token.shard_epoch {presented} of shard {shard_id} was never "
            f"issued: epochs are start times in ms, and this provider's clock allows at most "
            f"{latest} (its time plus the clock-skew tolerance)",
        )
        self.shard_id = shard_id
        self.presented = presented
        self.latest = latest


class MachineNotFound(ProviderError):
    """The id is not one of the provider's machines (nor a slot of its quota)."""

    def __init__(self, provider: str, machine_id: str) -> None:
        super().__init__(provider, f"provider {provider}: no machine {machine_id}")
        self.machine_id = machine_id


class QuotaExhausted(ProviderError):
    """The slot a caller named was withdrawn because the quota behind it shrank."""

    def __init__(self, provider: str, machine_id: str, pool: str) -> None:
        super().__init__(
            provider,
            f"provider {provider}: quota for {pool} is exhausted: "
            f"slot {machine_id} no longer exists",
        )
        self.machine_id = machine_id
        self.pool = pool


class NotSupported(ProviderError):
    """The backend has no such operation at all (e.g. delete on bare metal)."""

    def __init__(self, provider: str, call: str, why: str) -> None:
        super().__init__(provider, f"provider {provider}: {call} is not supported: {why}")
        self.call = call


class InvalidTransition(ProviderError):
    """The machine is not in a state the call can start from."""

    def __init__(
        self,
        provider: str,
        machine_id: str,
        state: MachineState,
        call: str,
        why: str = "",
        failed_from: MachineState | None = None,
    ) -> None:
        where = f"{state} (failed in {failed_from})" if failed_from else str(state)
        super().__init__(
            provider,
            f"provider {provider}: machine {machine_id} is {where}; {call} cannot start there"
            + (f": {why}" if why else ""),
        )
        self.machine_id = machine_id
        self.state = state
        self.call = call
        self.failed_from = failed_from


class RateLimited(ProviderError):
    """The provider's API budget is spent; the same call succeeds after `retry_after` seconds."""

    def __init__(self, provider: str, call: str, retry_after: float) -> None:
        super().__init__(
            provider, f"provider {provider}: {call} throttled; retry after {retry_after:.2f} s"
        )
        self.call = call
        self.retry_after = retry_after


class ProviderReplyError(ProviderError):
    """A provider's reply is not a valid `Machine`; `fields` names the offending fields."""

    def __init__(self, provider: str, problems: builtins.list[tuple[str, str]]) -> None:
        detail = "; ".join(f"{field}: {msg}" if field else msg for field, msg in problems)
        super().__init__(provider, f"provider {provider} sent a bad machine: {detail}")
        self.fields = [field for field, _ in problems if field]


def parse_machine_reply(raw: dict[str, Any], provider: str) -> Machine:
    """Validate a provider's raw reply as a `Machine`.

    The reply is wire data, so it is checked as JSON: enum fields arrive as their string values,
    while a number sent as a string or an unknown field is still rejected.
    """
    if not isinstance(raw, dict):
        raise ProviderReplyError(provider, [("", f"expected an object, got {type(raw).__name__}")])
    try:
        text = json.dumps(raw)
    except (TypeError, ValueError) as err:
        raise ProviderReplyError(provider, [("", f"not JSON-shaped: {err}")]) from None
    try:
        return Machine.model_validate_json(text)
    except ValidationError as err:
        problems = [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in err.errors()]
        raise ProviderReplyError(provider, problems) from None
