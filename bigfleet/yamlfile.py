"""A YAML file read as a strict model, with every bad field named: fleet files, scenarios and
deployment configs are all read this way."""

from __future__ import annotations

import pathlib
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .models import from_wire

M = TypeVar("M", bound=BaseModel)

# libyaml's parser when PyYAML was built with it (its wheels are): the same safe subset, ~10x
# faster on a week-long scenario of 90 KB.
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> object:
    """`yaml.safe_load`, with libyaml's parser where there is one."""
    return yaml.load(text, Loader=SafeLoader)  # noqa: S506 (a safe loader)


def load_model(path: pathlib.Path, model: type[M], what: str, error: type[ValueError]) -> M:
    """`path` as `model`; else `error` naming the file and every bad field, one per line."""
    try:
        raw = safe_load(path.read_text())
    except OSError as err:
        raise error(f"{path}: cannot read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise error(f"{path}: not valid YAML: {err}") from None
    try:
        return from_wire(model, raw)
    except ValidationError as err:
        raise error(f"{path}: invalid {what}:\n{field_lines(err)}") from None
    except ValueError as err:  # not JSON-shaped at all
        raise error(f"{path}: invalid {what}: {err}") from None


def field_lines(err: ValidationError) -> str:
    """One line per bad field: `  needs.0.count: Input should be ...`."""
    return "\n".join(
        f"  {'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
        for e in err.errors()
    )
