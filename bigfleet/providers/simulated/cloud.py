"""A simulated cloud account in one region: quota lines reported as speculative machines (§10).

Each `QuotaSpec` is a pool of slots with deterministic ids; Create boots an instance on a slot and
Delete returns the slot. Spot instances are interrupted at their hourly probability, and the
account's API is rate-limited by a token bucket, as EC2's RunInstances is (design §10, §13).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pydantic import field_validator

from ... import labels
from ...models import (
    CapacityType,
    Count,
    Dollars,
    FencingToken,
    MachineState,
    Name,
    Probability,
    Resources,
    Transition,
    Wire,
)
from ..base import RateLimited, slot_id
from .provider import SimulatedProvider
from .slots import Pool, Slot


class QuotaSpec(Wire):
    """One quota line: `count` instances of a type in a zone, at a price and interruption risk."""

    instance_type: Name
    zone: Name
    capacity_type: CapacityType
    count: Count
    price_per_hour: Dollars
    interruption_probability: Probability = 0.0
    resources: Resources = Resources()
    arch: Name = "amd64"

    @field_validator("capacity_type")
    @classmethod
    def _cloud_capacity(cls, value: CapacityType) -> CapacityType:
        if value is CapacityType.BARE_METAL:
            raise ValueError("bare-metal capacity belongs to a bare-metal provider, not a cloud")
        return value


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved up; time is the provider's virtual clock."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float]) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"token bucket needs rate > 0 and burst >= 1, got {rate}, {burst}")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._stamp = clock()

    def take(self) -> float:
        """Take a token: 0.0 if one was there, else the seconds until one will be."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + max(0.0, now - self._stamp) * self.rate)
        self._stamp = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self.rate


NOTICE_SECONDS = 120.0  # a spot interruption's warning comes this early (EC2's two minutes)


class SimulatedCloudProvider(SimulatedProvider):
    """A cloud account-region: on-demand, spot and reserved quota as speculative machines."""

    def __init__(
        self,
        name: str,
        region: str,
        quota: list[QuotaSpec],
        clock: Callable[[], float],
        seed: int,
        api_calls_per_second: float = 2.0,
        create_latency: tuple[float, float] = (30.0, 90.0),
        configure_latency: float = 30.0,
        delete_latency: float = 5.0,
        failure_rates: Mapping[Transition, float] | Mapping[str, float] | None = None,
        *,
        api_burst: float = 5.0,
        drain_latency: float = 60.0,
        timeouts: Mapping[MachineState, float] | None = None,
        notice_seconds: float = NOTICE_SECONDS,
    ) -> None:
        super().__init__(
            name,
            clock,
            seed,
            configure_latency=configure_latency,
            delete_latency=delete_latency,
            drain_latency=drain_latency,
            timeouts=timeouts,
            failure_rates=failure_rates,
            notice_seconds=notice_seconds,
        )
        self.region = region
        self.rate_limited = 0
        self._bucket = TokenBucket(api_calls_per_second, api_burst, clock)
        self._pools: dict[tuple[str, str, CapacityType], Pool] = {}
        for spec in quota:
            key = (spec.instance_type, spec.zone, spec.capacity_type)
            if key in self._pools:
                raise ValueError(f"provider {name}: two quota lines for {'/'.join(key)}")
            self._pools[key] = pool = self._pool(spec, create_latency)
            self._slots.resize(pool, spec.count)

    def set_quota(
        self,
        instance_type: str,
        zone: str,
        capacity_type: CapacityType | str,
        count: int,
    ) -> None:
        """Grow or shrink a quota line. Shrinking removes speculative slots only (design §10)."""
        key = (instance_type, zone, CapacityType(capacity_type))
        pool = self._pools.get(key)
        if pool is None:
            raise ValueError(f"provider {self.name}: no quota line for {'/'.join(key)}")
        if count < 0:
            raise ValueError(
                f"provider {self.name}: quota for {pool.key} must be >= 0, got {count}"
            )
        self.advance(self._clock())
        self._slots.resize(pool, count)

    def _admit(self, call: str, token: FencingToken) -> None:
        # Fencing first: a stale shard learns it is stale without spending the live one's budget.
        super()._admit(call, token)
        wait = self._bucket.take()
        if wait:
            self.rate_limited += 1
            raise RateLimited(self.name, call, wait)

    def _new_host_ref(self, slot: Slot) -> str:
        return f"i-{self._rng.getrandbits(68):017x}"

    def _pool(self, spec: QuotaSpec, create_latency: tuple[float, float]) -> Pool:
        return Pool(
            key=f"{spec.instance_type}/{spec.zone}/{spec.capacity_type}",
            id_prefix=slot_id(self.name, spec.instance_type, spec.zone, spec.capacity_type),
            instance_type=spec.instance_type,
            zone=spec.zone,
            capacity_type=spec.capacity_type,
            price_per_hour=spec.price_per_hour,
            interruption_probability=spec.interruption_probability,
            resources=spec.resources,
            labels=labels.machine_labels(
                self.name,
                spec.instance_type,
                spec.zone,
                self.region,
                spec.arch,
                str(spec.capacity_type),
            ),
            quota=spec.count,
            create_latency=create_latency,
        )
