"""The base of every model that crosses the Temporal boundary: unknown fields refused."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    """A workflow's or activity's input or result: JSON through Temporal's pydantic data
    converter; a field it does not know is refused, not dropped."""

    model_config = ConfigDict(extra="forbid")
