"""Mapping files: how the columns of a real trace become BigFleet demand (docs/traces.md).

A mapping is YAML, read strictly (an unknown or bad field is named). It says how to read the file
(delimiter, header, comments, missing-value tokens), which column holds what, the time unit and
origin, the class -> priority band and penalties table, and the kinds of job: which resource a kind
packs, how many units fit on one machine, and the machine requirements. Two shapes:

- `format: jobs`: one row per job (start, end or duration, resources, class, group).
- `format: series`: one row per (time, group[, class][, kind]) with running and pending counts,
  in machines or in resource units.
"""

from __future__ import annotations

import pathlib
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..models import Dollars, Int32, Name, NodeSelectorRequirement
from ..yamlfile import load_model

Column = Annotated[str, Field(min_length=1)] | Annotated[int, Field(ge=0)]
"""A column by header name, or by 0-based position (for files without a header)."""

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]

UNIT_SECONDS = {
    "microseconds": 1e-6,
    "milliseconds": 1e-3,
    "seconds": 1.0,
    "minutes": 60.0,
    "hours": 3600.0,
}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class TimeSpec(Strict):
    """Trace second = (value - origin) * seconds per `unit`, for every time column."""

    unit: Literal["microseconds", "milliseconds", "seconds", "minutes", "hours"] = "seconds"
    origin: float = Field(default=0.0, allow_inf_nan=False)

    @property
    def seconds(self) -> float:
        return UNIT_SECONDS[self.unit]


class ResourceSpec(Strict):
    """A job's amount of one resource: the product of `columns`, times `scale` (e.g. num_gpu *
    gpu_milli * 0.001 GPUs). A missing value counts as 0."""

    columns: Annotated[list[Column], Field(min_length=1)]
    scale: Positive = 1.0


class ClassSpec(Strict):
    """What a class (QoS, queue, priority name) of the trace becomes in a capacity need."""

    priority: Int32
    interruption_penalty: Dollars = 0.0
    reclamation_penalty: Dollars = 0.0


class KindSpec(Strict):
    """A kind of job and the machines it runs on. A job is of the first kind whose `when`
    resource it uses (> 0); a kind without `when` takes every job left."""

    name: Name
    when: str | None = None
    resource: str
    per_machine: Positive
    requirements: Annotated[list[NodeSelectorRequirement], Field(min_length=1)]


class FileSpec(Strict):
    header: bool = True
    delimiter: Literal[",", ";", "\t", "whitespace"] = ","
    comment: str | None = None
    missing: list[str] = Field(default_factory=lambda: [""])


class MappingBase(Strict):
    file: FileSpec = Field(default_factory=FileSpec)
    time: TimeSpec = Field(default_factory=TimeSpec)
    classes: Annotated[dict[str, ClassSpec], Field(min_length=1)]
    default_class: str | None = None
    kinds: Annotated[list[KindSpec], Field(min_length=1)]

    @model_validator(mode="after")
    def _names_resolve(self) -> MappingBase:
        if self.default_class is not None and self.default_class not in self.classes:
            raise ValueError(
                f"default_class {self.default_class!r} is not one of classes "
                f"({', '.join(self.classes)})"
            )
        names = [k.name for k in self.kinds]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"kinds: names must be unique: {', '.join(dupes)}")
        if not self.file.header:
            named = [c for c in self.read_columns() if isinstance(c, str)]
            if named:
                raise ValueError(
                    f"file.header is false, so columns must be positions, not names: {named[0]!r}"
                )
        return self

    def read_columns(self) -> list[Column]:
        """Every column this mapping reads (to check them against the header)."""
        raise NotImplementedError

    def class_order(self) -> list[str]:
        """Class names by falling priority, file order on a tie: the order of the needs."""
        names = list(self.classes)
        return sorted(names, key=lambda n: (-self.classes[n].priority, names.index(n)))


class JobColumns(Strict):
    id: Column | None = None
    start: Column
    end: Column | None = None
    duration: Column | None = None
    class_: Column | None = Field(default=None, alias="class")
    group: Column | None = None

    @model_validator(mode="after")
    def _end_or_duration(self) -> JobColumns:
        if (self.end is None) == (self.duration is None):
            raise ValueError("give exactly one of end and duration")
        return self


class JobsMapping(MappingBase):
    """Per-job logs. A job asks for its resources from start to end (or start + duration); a
    missing end or duration means it outlives the trace."""

    format: Literal["jobs"]
    columns: JobColumns
    resources: Annotated[dict[str, ResourceSpec], Field(min_length=1)]

    @model_validator(mode="after")
    def _kinds_use_known_resources(self) -> JobsMapping:
        for i, kind in enumerate(self.kinds):
            for field in ("resource", "when"):
                value = getattr(kind, field)
                if value is not None and value not in self.resources:
                    raise ValueError(
                        f"kinds.{i}.{field}: {value!r} is not one of resources "
                        f"({', '.join(self.resources)})"
                    )
        if self.columns.class_ is None and self.default_class is None:
            raise ValueError("without a class column, give default_class")
        return self

    def read_columns(self) -> list[Column]:
        c = self.columns
        named = [c.id, c.start, c.end, c.duration, c.class_, c.group]
        named += [col for r in self.resources.values() for col in r.columns]
        return [x for x in named if x is not None]


class SeriesColumns(Strict):
    time: Column
    group: Column | None = None
    running: Column
    pending: Column | None = None
    class_: Column | None = Field(default=None, alias="class")
    kind: Column | None = None


class SeriesMapping(MappingBase):
    """Per-group time series: demand at a time is running + pending of the latest row at or
    before it, per (group, class, kind); `counts` says whether they count machines or units of
    the kind's resource."""

    format: Literal["series"]
    columns: SeriesColumns
    counts: Literal["machines", "units"] = "machines"

    @model_validator(mode="after")
    def _class_known(self) -> SeriesMapping:
        if self.columns.class_ is None and self.default_class is None:
            raise ValueError("without a class column, give default_class")
        return self

    def read_columns(self) -> list[Column]:
        c = self.columns
        named = [c.time, c.group, c.running, c.pending, c.class_, c.kind]
        return [x for x in named if x is not None]


class MappingFile(Strict):
    mapping: Annotated[JobsMapping | SeriesMapping, Field(discriminator="format")]


Mapping = JobsMapping | SeriesMapping


class MappingError(ValueError):
    """A mapping file that cannot be used; the message names the file and every bad field."""


def load_mapping(path: str | pathlib.Path) -> Mapping:
    """A mapping file (its top-level key is `mapping:`), validated."""
    return load_model(pathlib.Path(path), MappingFile, "trace mapping", MappingError).mapping
