"""What crosses to the provider and operator activities (activities/providers.py,
activities/operators.py): lifecycle calls, reads and their pages of machines, the capacity a
shard reconciles, and a machine's bootstrap."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, TypeAdapter

from bigfleet.models import FencingToken, Machine, NodeSelectorRequirement, Transition

from .base import Model

LIST_PAGE = 1000  # machines per provider_list page (~70–90 KB as a MachinePage)


def provider_task_queue(provider: str) -> str:
    """One queue per provider account-region: the server enforces its API rate limit there."""
    return f"bigfleet-provider-{provider}"


class ProviderCall(Model):
    """A lifecycle call to a provider. `now` is the caller's (workflow) time: simulated
    providers keep their clock by it, so time-skipping tests skip their time too."""

    provider: str
    transition: Transition
    machine_ids: list[str]
    token: FencingToken
    now: float
    cluster: str | None = None
    user_data: bytes = b""
    ttl_seconds: int = 3600
    grace_seconds: float = 0.0
    force: bool = False


class ProviderRead(Model):
    """A read of a provider's machines (`provider_get`, `provider_list`,
    `provider_noticed`), on the caller's clock `now`."""

    provider: str
    machine_ids: list[str] = Field(default_factory=list)
    now: float
    states: list[str] = Field(default_factory=list)
    # provider_list pages: machines with ids after `after`, at most `limit` (a page of records
    # stays far below Temporal's 2 MB payload limit).
    after: str = ""
    limit: int = Field(default=LIST_PAGE, ge=1)
    # provider_get: a machine the provider does not (or no longer) offer is left out of the
    # answer instead of failing the read.
    missing_ok: bool = False


# A machine's own fields; the rest (type, zone, capacity, price, labels, …) it shares with the
# other machines of its rack or pool: its shape.
_OWN = ("id", "state", "host", "cluster", "failed_from", "transition_started_unix", "last_error")


class MachinePage(Model):
    """A page of a provider's listing, compact: each shape once, then a row per machine of its
    own fields in `_OWN` order (`shape` after `id`). A listing enters the shard's history
    page by page: ~90 bytes a machine this way against ~630 as records."""

    shapes: list[dict[str, Any]] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)

    @classmethod
    def of(cls, machines: list[Machine]) -> MachinePage:
        index: dict[str, int] = {}
        page = cls()
        for m in machines:
            shape = m.model_dump(mode="json", exclude=set(_OWN))
            key = json.dumps(shape, sort_keys=True)
            if key not in index:
                index[key] = len(page.shapes)
                page.shapes.append(shape)
            own = m.model_dump(mode="json", include=set(_OWN))
            host = own["host"]
            page.rows.append(
                [
                    m.id,
                    index[key],
                    own["state"],
                    None if host is None else [host["provider"], host["ref"]],
                    own["cluster"],
                    own["failed_from"],
                    own["transition_started_unix"],
                    own["last_error"],
                ]
            )
        return page

    def machines(self) -> list[Machine]:
        raw = [
            {
                **self.shapes[shape],
                "id": mid,
                "state": state,
                "host": None if host is None else {"provider": host[0], "ref": host[1]},
                "cluster": cluster,
                "failed_from": failed_from,
                "transition_started_unix": started,
                "last_error": error,
            }
            for mid, shape, state, host, cluster, failed_from, started, error in self.rows
        ]
        # Validated as JSON, as the records were (enums by value, every type strict).
        return _MACHINES.validate_json(json.dumps(raw))


_MACHINES = TypeAdapter(list[Machine])


class CapacityRead(Model):
    """`provider_capacity`: a provider's speculative machines against what `shard` holds."""

    provider: str
    now: float
    shard: int
    shards: int
    # The shards whose machines by the assignment rule this shard takes (its own, and those of
    # shards merged into it).
    shares: list[int]


class CapacityDiff(Model):
    """What changed, small in steady state: at most `CAPACITY_GONE` ids and `LIST_PAGE`
    machines a reconcile (the rest at the next)."""

    gone: list[str] = Field(default_factory=list)
    fresh: list[Machine] = Field(default_factory=list)


CAPACITY_GONE = 20_000  # ids (~1 MB)
ELSEWHERE_MAX = 20_000  # ids an `owned_elsewhere` answer carries; asked again while full


class BootstrapCall(Model):
    """`generate_bootstrap`: ask a cluster's operator for one machine's bootstrap."""

    cluster: str
    machine_id: str
    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)


class BootstrapAnswer(Model):
    """The operator's bootstrap (its user data and how long it holds), or its refusal."""

    user_data: bytes = b""
    ttl_seconds: int = 0
    refused: str | None = None

