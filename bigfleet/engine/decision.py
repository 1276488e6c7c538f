"""The decision record: what one cycle of either engine asks for (actions, preemptions,
shortfalls, counts per need), and the lazy action list it carries."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from ..models import Action, Shortfall, stamper


@dataclass(frozen=True, slots=True)
class Preemption:
    """A configured machine drained for a need of higher priority (or displaced for the
    fleet's cost): whose it was, for whom, and the drain's grace."""

    machine_id: str
    victim_cluster: str
    victim_priority: int
    preemptor_cluster: str
    preemptor_priority: int
    grace_seconds: float
    # Displaced for the fleet's cost: never past its cluster's marks or budget (disruption.py).
    for_cost: bool = False


class Actions(Sequence[Action]):
    """A decision's actions, in order. Most of a moving cycle's actions come in runs that
    differ only in the machine they name (a need's configures on one profile, a victim's
    drains): the engine adds such a run as its first validated action and the other machines'
    ids (`stamp`), and each further action is made only when someone reads it, one at a time,
    so a cycle that names 30 000 machines builds no 30 000 objects inside the decision (nor
    makes the cyclic collector walk them). Reading gives exactly the actions appended one by
    one would."""

    def __init__(self, actions: Iterable[Action] = ()) -> None:
        # (first action, the field the rest change, the rest's values of it, whether the
        # first is itself an action or only the template of the rest)
        self._runs: list[tuple[Action, str, Sequence[Any], bool]] = []
        self._len = 0
        self.extend(actions)

    def append(self, action: Action) -> None:
        self._runs.append((action, "", [], True))
        self._len += 1

    def extend(self, actions: Iterable[Action]) -> None:
        for action in actions:
            self.append(action)

    def stamp(self, first: Action, field: str, values: Sequence[Any]) -> None:
        """`first`, then a copy of it for each of `values` with `field` set to the value."""
        self._runs.append((first, field, values, True))
        self._len += 1 + len(values)

    def stamp_all(self, template: Action, field: str, values: Sequence[Any]) -> None:
        """A copy of `template` for each of `values` with `field` set to the value (the
        template itself is not one of the actions)."""
        if values:
            self._runs.append((template, field, values, False))
            self._len += len(values)

    def kinds(self) -> set[str]:
        """The kinds of action present (without making any)."""
        return {first.kind for first, *_ in self._runs}

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Action]:
        for first, name, values, itself in self._runs:
            if itself:
                yield first
            if values:
                yield from map(stamper(first, name), values)

    @overload
    def __getitem__(self, index: int) -> Action: ...
    @overload
    def __getitem__(self, index: slice) -> list[Action]: ...
    def __getitem__(self, index: int | slice) -> Action | list[Action]:
        return list(self)[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Actions({list(self)!r})"


# The error of a machine the engine failed for its transition's time (`Decision.timed_out`).
TIMED_OUT = "transition timed out"


@dataclass
class Decision:
    """One cycle's output. `satisfied` counts, per need key, the machines it holds or has on the
    way (claimed plus newly assigned); `earmarked` counts supply it waits for (draining or excess
    machines, preemption victims). A consolidation's replacement is in neither."""

    actions: Actions = field(default_factory=Actions)
    shortfalls: list[Shortfall] = field(default_factory=list)
    satisfied: dict[str, int] = field(default_factory=dict)
    earmarked: dict[str, int] = field(default_factory=dict)
    preemptions: list[Preemption] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    # Replacements started this cycle toward cheaper capacity, per need key (their configures
    # and creates are among `actions`; the machines they replace drain once they are up).
    consolidations: dict[str, int] = field(default_factory=dict)
    # Machines moved for the fleet's cost this cycle, per need key: owned machines a need
    # takes from backfill at least `Policy.displace_gap` below it instead of buying elastic
    # capacity (their drains are among `preemptions`).
    cost_moves: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.actions, Actions):
            self.actions = Actions(self.actions)

    def count(self, kind: str) -> int:
        """Machines the actions of `kind` name (a create names several)."""
        return sum(
            len(a.machine_ids) if a.kind == "create" else 1 for a in self.actions if a.kind == kind
        )
