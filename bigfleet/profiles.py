"""Machine profiles (instance type × zone × capacity type × labels), interned once.

A shard holds up to hundreds of thousands of machines but only hundreds or a few thousand distinct
profiles; requirements are matched against profiles, never against machines, and the result is
cached per distinct requirement set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import labels as L
from .cost import DELETABLE, OWNED, marginal_price
from .models import CapacityType, Machine, Resources


@dataclass(frozen=True)
class Profile:
    provider: str
    instance_type: str
    zone: str
    capacity_type: CapacityType
    price_per_hour: float
    interruption_probability: float
    resources: Resources
    labels: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, machine: Machine) -> Profile:
        provider = machine.host.provider if machine.host else machine.labels.get(L.PROVIDER, "")
        merged = dict(machine.labels)
        merged[L.INSTANCE_TYPE] = machine.instance_type
        merged[L.ZONE] = machine.zone
        merged[L.CAPACITY_TYPE] = machine.capacity_type.value
        if provider:
            merged[L.PROVIDER] = provider
        return cls(
            provider=provider,
            instance_type=machine.instance_type,
            zone=machine.zone,
            capacity_type=machine.capacity_type,
            price_per_hour=float(machine.price_per_hour),
            interruption_probability=float(machine.interruption_probability),
            resources=machine.resources,
            labels=tuple(sorted(merged.items())),
        )

    def label(self, key: str) -> str | None:
        return self.label_map.get(key)

    @cached_property
    def name(self) -> str:
        """Human-readable and unique: the canonical tie-break between equal profiles."""
        extra = ",".join(
            f"{k}={v}"
            for k, v in self.labels
            if k not in (L.INSTANCE_TYPE, L.ZONE, L.CAPACITY_TYPE, L.PROVIDER)
        )
        base = (
            f"{self.provider}/{self.instance_type}/{self.zone}/{self.capacity_type.value}"
            f"@{self.price_per_hour:g}~{self.interruption_probability:g}"
        )
        return f"{base}[{extra}]" if extra else base

    @cached_property
    def marginal_price(self) -> float:
        """`cost.marginal_price`: 0 for owned and committed capacity, else the price."""
        return marginal_price(self.capacity_type, self.price_per_hour)

    @cached_property
    def short_name(self) -> str:
        """provider/instance-type/zone/capacity-type: how people name a kind of machine."""
        return f"{self.provider}/{self.instance_type}/{self.zone}/{self.capacity_type.value}"

    @cached_property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)



class ProfileTable:
    """Profile interning plus per-profile numeric columns the engine vectorises over."""

    def __init__(self) -> None:
        self.profiles: list[Profile] = []
        self._ids: dict[Profile, int] = {}
        self.price = np.zeros(0, dtype=np.float64)
        # Each profile's `marginal_price`: what placement ranks by (owned capacity at 0).
        self.marginal = np.zeros(0, dtype=np.float64)
        # Whether an idle machine of the profile may go back to speculative (`cost.DELETABLE`).
        self.deletable = np.zeros(0, dtype=bool)
        # Whether the profile is owned or committed capacity (`cost.OWNED`).
        self.owned = np.zeros(0, dtype=bool)
        self.interruption = np.zeros(0, dtype=np.float64)
        self._labels: dict[str, list[str | None]] = {}
        # The label keys some profile carries: only their columns are kept (any other key is a
        # sender's choice, from a roll-up's `same` or spread: kept, thousands of them would
        # each hold a column as long as the profile table).
        self._keys: set[str] = set()
        self._codes: dict[tuple[str, ...], tuple[np.ndarray, list[str]]] = {}
        self._providers: list[str] = []

    def __len__(self) -> int:
        return len(self.profiles)

    def intern(self, profile: Profile) -> int:
        pid = self._ids.get(profile)
        if pid is None:
            pid = len(self.profiles)
            self.profiles.append(profile)
            self._ids[profile] = pid
            self.price = np.append(self.price, profile.price_per_hour)
            self.marginal = np.append(self.marginal, profile.marginal_price)
            self.deletable = np.append(self.deletable, profile.capacity_type in DELETABLE)
            self.owned = np.append(self.owned, profile.capacity_type in OWNED)
            self.interruption = np.append(self.interruption, profile.interruption_probability)
            self._keys.update(profile.label_map)
        return pid

    def carries(self, key: str) -> bool:
        """Whether some profile carries label `key`."""
        return key in self._keys

    def labels(self, key: str) -> list[str | None]:
        """Each profile's value of label `key` (None where it has none), indexed by profile id:
        the engine's domain questions (`Same`, spread) read it per profile in their inner loops.
        A key no profile carries gets a fresh column of None, not kept."""
        if key not in self._keys:
            return [None] * len(self.profiles)
        column = self._labels.setdefault(key, [])
        if len(column) < len(self.profiles):
            column.extend(p.label_map.get(key) for p in self.profiles[len(column) :])
        return column

    def label_codes(self, key: str) -> tuple[np.ndarray, list[str]]:
        """`labels(key)` as a column of small integers (-1 where a profile has none) and the
        values they stand for, first seen first: what a per-domain tally sums over with
        `numpy.bincount` instead of a Python loop per profile."""
        if key not in self._keys:
            return np.full(len(self.profiles), -1, dtype=np.int64), []
        return self._coded(("label", key), self.labels(key))

    def provider_codes(self) -> tuple[np.ndarray, list[str]]:
        """Each profile's provider as a small integer, and the providers they stand for."""
        column = self._providers
        if len(column) < len(self.profiles):
            column.extend(p.provider for p in self.profiles[len(column) :])
        return self._coded(("provider",), column)

    def _coded(
        self, key: tuple[str, ...], column: Sequence[str | None]
    ) -> tuple[np.ndarray, list[str]]:
        codes, values = self._codes.get(key, (np.zeros(0, dtype=np.int64), []))
        if len(codes) < len(column):
            index = {v: i for i, v in enumerate(values)}
            fresh = [
                -1 if v is None else index.setdefault(v, len(index)) for v in column[len(codes) :]
            ]
            values = list(index)
            codes = np.concatenate([codes, np.array(fresh, dtype=np.int64)])
            self._codes[key] = (codes, values)
        return codes, values
