"""What arrives from outside a workflow, taken defensively (docs/design.md, "Bad input").

Anyone with access to the Temporal namespace can send any workflow any signal or update with any
payload: none, the wrong type, megabytes, NaN, nesting a thousand deep. So handlers never let the
SDK bind arguments to their parameters (a missing one raises inside the workflow task, which
then fails on every retry). They take the raw payloads and decode them here: exactly one JSON
argument, at most `max_bytes`, valid as the handler's type in pydantic's strict mode, every
float finite. Anything else raises `Rejected`, whose message names the field and never carries
more than `MAX_TEXT` characters of what was sent. The workflow records the rejection in a
bounded `Rejections` and carries on with its last good state.

Pure: no Temporal import; the workflows hand in `(encoding, data)` pairs.
"""

from __future__ import annotations

import json
import math
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from pydantic import TypeAdapter, ValidationError

MAX_TEXT = 200  # characters of any sender-chosen text kept in a rejection or a log line
KEPT = 20  # rejection records a workflow keeps (the counts are kept for good)
SIGNAL_BYTES = 256_000  # a signal's payload; a roll-up of hundreds of needs fits many times
# An update's (a saga step carries up to RECORDS_MAX machine ids, ~20 KB): its validator's bound,
# under the server's payload limit (workers/dev/server.py BLOB_ERROR_BYTES, issue 44). An
# update's handler (called after its validator, or replaying a history of a run begun before
# the bound) decodes up to UPDATE_BYTES_BEFORE.
UPDATE_BYTES = 450_000
UPDATE_BYTES_BEFORE = 1_900_000
UNKNOWN = "(unknown)"  # the handler name counted for a signal or update nobody handles


def json_size(value: Any) -> int:
    """How big a roll-up is, as the shard counts it against SIGNAL_BYTES for each roll-up of a
    `rollups` batch (and the gateway before it answers): its JSON's length, Python's default
    separators. A `rollup` signal's payload is compact JSON, never longer."""
    return len(json.dumps(value))


class Rejected(ValueError):
    """Input a handler refuses. The message names the field and is bounded."""

    def __init__(self, message: str) -> None:
        super().__init__(clip(message, 4 * MAX_TEXT))


def clip(text: object, limit: int = MAX_TEXT) -> str:
    """`text` cut to `limit` characters, saying how long it was."""
    s = text if isinstance(text, str) else _short_repr(text, limit)
    return s if len(s) <= limit else f"{s[:limit]}… ({len(s)} characters)"


def _short_repr(value: object, limit: int) -> str:
    if isinstance(value, (bytes, bytearray)):
        return repr(bytes(value[: limit + 1]))
    if isinstance(value, (list, tuple, dict, set)) and len(value) > limit:
        return f"<{type(value).__name__} of {len(value)} items>"
    return repr(value)


def explain(err: ValidationError) -> str:
    """One clause per problem, each naming the field: `needs.0.count: Input should be >= 0`.
    Field names are clipped too: an unknown field's name is the sender's choice."""
    parts = []
    for e in err.errors()[:5]:
        loc = ".".join(clip(str(p), 60) for p in e["loc"]) or "(value)"
        parts.append(f"{loc}: {clip(e['msg'], 120)}")
    more = err.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


@lru_cache(maxsize=64)
def adapter(hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(hint)


def decode(
    args: Sequence[tuple[str, bytes]],
    hint: Any,
    what: str,
    max_bytes: int = SIGNAL_BYTES,
    optional: bool = False,
) -> Any:
    """The one argument of a signal or update, as `hint`. `args` are the payloads' (encoding,
    data). `optional`: no argument at all is None (a signal whose argument is optional)."""
    if not args and optional:
        return None
    if len(args) != 1:
        raise Rejected(f"{what}: expected one argument, got {len(args)}")
    encoding, data = args[0]
    if encoding != "json/plain":
        raise Rejected(f"{what}: the argument must be JSON (json/plain), got {clip(encoding, 40)}")
    if len(data) > max_bytes:
        raise Rejected(f"{what}: argument of {len(data)} bytes, at most {max_bytes} accepted")
    try:
        value = adapter(hint).validate_json(data, strict=True)
    except ValidationError as err:
        raise Rejected(f"{what}: {explain(err)}") from None
    except (ValueError, RecursionError) as err:  # (pydantic reports bad JSON as ValidationError)
        raise Rejected(f"{what}: not valid JSON: {clip(str(err), 80)}") from None
    field = _not_finite(value) if _MAYBE_NOT_FINITE.search(data) else None
    if field is not None:
        raise Rejected(f"{what}: {field or '(value)'}: must be a finite number")
    return value


# JSON spells a NaN or infinite float only so (NaN, Infinity), or as a number too large for a
# float (a 3-digit exponent, or 300 digits): without any of these the walk below cannot find
# one, and is skipped (it took 1.9 ms of a 64-machine transition result's 4.5 ms decode).
_MAYBE_NOT_FINITE = re.compile(rb"NaN|Infinity|[eE][+-]?\d{3}|\d{300}")


def _not_finite(value: Any, path: str = "", depth: int = 0) -> str | None:
    """The path of the first NaN or infinite float in `value`, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if depth > 50:
        return None
    if hasattr(value, "__pydantic_fields__"):
        value = {k: getattr(value, k) for k in type(value).model_fields}
    if isinstance(value, Mapping):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _not_finite(item, f"{path}.{key}" if path else str(key), depth + 1)
        if found is not None:
            return found
    return None


def number(value: Any, what: str, low: float = 0.0, high: float = math.inf) -> float:
    """A finite real number in [low, high]; booleans and strings are not numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Rejected(f"{what}: a number is required, got {clip(value, 40)}")
    if not math.isfinite(value) or not low <= value <= high:
        raise Rejected(f"{what}: must be between {low:g} and {high:g}, got {clip(value, 40)}")
    return float(value)


class Rejections:
    """The last `KEPT` rejected inputs of a workflow and a count per handler, carried across
    continue-as-new (small and bounded: counts are keyed by the workflow's own handler names)."""

    def __init__(self, handlers: Iterable[str], state: Mapping[str, Any] | None = None) -> None:
        self.handlers = frozenset(handlers)
        state = state or {}
        self.recent: deque[dict[str, Any]] = deque(state.get("recent", []), maxlen=KEPT)
        self.counts: dict[str, int] = {
            k: int(v) for k, v in dict(state.get("counts", {})).items() if self.known(k) == k
        }

    def known(self, handler: str) -> str:
        return handler if handler in self.handlers else UNKNOWN

    def add(self, handler: str, error: str, at: float) -> str:
        """Record a rejection; returns the handler name as counted (bounded)."""
        name = self.known(handler)
        self.counts[name] = self.counts.get(name, 0) + 1
        self.recent.append({"at": at, "handler": clip(handler, 60), "error": clip(error, 400)})
        return name

    def absorb(self, state: Any) -> None:
        """Add what an earlier run carried (read back after this run began recording)."""
        if not isinstance(state, Mapping):
            return
        earlier = Rejections(self.handlers, state)
        for name, n in earlier.counts.items():
            self.counts[name] = self.counts.get(name, 0) + n
        mine = list(self.recent)
        self.recent.clear()
        self.recent.extend([*earlier.recent, *mine])

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def state(self) -> dict[str, Any]:
        return {"recent": list(self.recent), "counts": dict(self.counts)}
