"""Matching Kubernetes `NodeSelectorRequirement`s against a machine's labels."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .labels import MACHINE_KEYS
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
    """Does a machine with these labels fit? A requirement on a key the machine does not carry
    and that is not one of the machine's own keys (`MACHINE_KEYS`) is left to the operator:
    the node gets that label from its bootstrap blob, or the operator refuses (design §13)."""
    return all(
        requirement_matches(r, labels)
        for r in reqs
        if r.key in labels or r.key in MACHINE_KEYS
    )


def describe(req: NodeSelectorRequirement) -> str:
    """`key Operator v1,v2`, as people write a requirement."""
    return " ".join([req.key, str(req.operator), *([",".join(req.values)] if req.values else [])])
