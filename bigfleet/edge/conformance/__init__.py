"""The CapacityProvider conformance suite: does a live provider keep the gRPC contract
(proto/bigfleet/v1/provider.proto) BigFleet relies on? `bigfleet provider conformance ADDRESS`
runs it and prints the table; `run()` is the library form.

It checks what BigFleet cannot work without: Describe answers; List pages cover every machine
exactly once, in id order, each a valid Machine; Get of an unknown id is NOT_FOUND; a bad request
is INVALID_ARGUMENT naming the field; each lifecycle call is acknowledged at once with the
machine in its transitional or target state, and a repeat with the same idempotency key returns
the same operation and starts nothing (for Create: no extra machine appears); each transition
settles; a stale fencing token is refused with ABORTED + STALE_FENCING_TOKEN, naming the epoch
presented and the one kept (ErrorInfo presented_epoch, highest_epoch); calls refused for
another reason (an unknown machine, a speculative one configured) with a higher epoch do not
fence the current epoch out; an epoch two minutes beyond the clock (never issued: epochs are
start times in ms, and a provider allows 30 s of skew) is refused with INVALID_ARGUMENT +
INVALID_FIELD `token.shard_epoch` and fences nothing out either; a Configure of a speculative
machine (valid token, fresh key) is refused with FAILED_PRECONDITION + INVALID_TRANSITION and
leaves it speculative; Delete is either a full lifecycle or, where Describe says it is not
supported, UNIMPLEMENTED + NOT_SUPPORTED.

It creates, configures, drains and deletes one real machine, so run it against a test account
or a fresh reference server (`bigfleet provider serve`), never against production capacity. It
fences with its own shard id (CONFORMANCE_SHARD, far above any real shard number) and an epoch
of the current time in ms, so it never fences out a running BigFleet, and each run fences out
only earlier runs. (A provider that fails future-epoch-is-refused may keep that day-ahead epoch
for the conformance shard: later runs against it fail until a day has passed or its fencing
state is cleared.) Throttling (RATE_LIMITED) is waited out after the provider's hint; if the
run was throttled at all, a last check (rate-limited-is-resource-exhausted, only then in the
table) says whether every such refusal was RESOURCE_EXHAUSTED with a positive
retry_after_seconds.

The suite's modules: session.py (the connection and the calls every check is written in),
reads.py, lifecycle.py and fencing.py (the checks, by what they check), suite.py (their order,
the table). This package re-exports what callers use.
"""

from .session import CONFORMANCE_SHARD, Check
from .suite import Conformance, as_json, passed, render, run

__all__ = ["CONFORMANCE_SHARD", "Check", "Conformance", "as_json", "passed", "render", "run"]
