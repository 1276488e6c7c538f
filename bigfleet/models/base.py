"""The strict base of every wire model and its field types: `Wire`, `from_wire` (data from
outside validated as its JSON form), `stamper` (cheap copies of a frozen model), and the
annotated numbers and names the models share."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX)]
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
Dollars = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Probability = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1, max_length=253)]


class Wire(BaseModel):
    """Base of every wire model: strict types, unknown fields rejected, immutable."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


W = TypeVar("W", bound=BaseModel)


def from_wire(model: type[W], raw: Any) -> W:
    """Validate data from outside (a decoded signal, YAML, a provider reply) as its JSON form:
    enums arrive as their string values, but every type stays strict ("5" is not a count)."""
    try:
        text = json.dumps(raw)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{model.__name__}: not JSON-shaped data: {err}") from None
    return model.model_validate_json(text)


def stamper(model: W, field: str) -> Callable[[Any], W]:
    """Copies of a validated model that differ only in `field`, one per call: how the engine
    stamps one validated action for each machine it names. The copies share one set of the
    fields set (a frozen model never changes it), so a copy costs a dict copy and four slot
    writes."""
    if not model.model_config.get("frozen"):
        raise TypeError(f"{type(model).__name__}: only a frozen model's copies may share state")
    cls, values = type(model), model.__dict__
    fields_set = model.__pydantic_fields_set__ | {field}
    new, write = object.__new__, object.__setattr__

    def stamp(value: Any) -> W:
        copy = new(cls)
        mine = values.copy()
        mine[field] = value
        write(copy, "__dict__", mine)
        write(copy, "__pydantic_fields_set__", fields_set)
        write(copy, "__pydantic_extra__", None)
        write(copy, "__pydantic_private__", None)
        return copy

    return stamp
