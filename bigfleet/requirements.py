"""Matching Kubernetes `NodeSelectorRequirement`s against a machine's labels."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .models import NodeSelectorRequirement, Operator


def _as_int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def requirement_matches(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """Kubernetes semantics: NotIn and DoesNotExist match a node without the label."""
    value = labels.get(req.key)
    op = req.operator
    if op is Operator.IN:
        return value is not None and value in req.values
    if op is Operator.NOT_IN:
        return value is None or value not in req.values
    if op is Operator.EXISTS:
        return value is not None
    if op is Operator.DOES_NOT_EXIST:
        return value is None
    have = _as_int(value) if value is not None else None
    if have is None:
        return False
    bound = int(req.values[0])
    return have > bound if op is Operator.GT else have < bound


def all_match(reqs: Iterable[NodeSelectorRequirement], labels: Mapping[str, str]) -> bool:
    return all(requirement_matches(r, labels) for r in reqs)
