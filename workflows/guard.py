"""Every signal and update of every BigFleet workflow enters through here (docs/design.md,
"Bad input").

- Signals: each workflow has one dynamic signal handler that receives raw payloads and calls
  `Guard.signal`, which looks the name up among the methods marked `@accepts(...)`, decodes
  the one argument strictly (`bigfleet.inputs.decode`) and calls the method. A missing, extra,
  oversized, undecodable or invalid argument, an unknown signal name, a method that refuses
  (`Rejected`) or even a bug in it is recorded as a bounded rejection, logged, counted
  (`bigfleet_rejected_inputs_total`) and shown by the workflow's queries; the workflow task
  never fails for it.
- Updates: their one parameter is a `RawValue` with a default (`NO_ARGUMENT`), so the SDK
  binds nothing; the validator decodes it with `Guard.arg` and refuses bad input before it
  enters history. `@guarded` turns anything unexpected an accepted update raises into a failed
  update instead of a failed workflow task.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from bigfleet.inputs import (
        SIGNAL_BYTES,
        UNKNOWN,
        UPDATE_BYTES,
        UPDATE_BYTES_BEFORE,
        Rejected,
        Rejections,
        clip,
        decode,
    )

NO_ARGUMENT = RawValue(Payload())
# What BigFleet's workflows take and send fits the server's lower payload limit (issue 44:
# workers/dev/server.py BLOB_ERROR_BYTES): runs begun before take and send what they did.
SMALL_PAYLOADS = "payloads-under-the-blob-limit"
SIGNAL_SPEC = "__bigfleet_signal__"
F = TypeVar("F", bound=Callable[..., Any])


def accepts(
    hint: Any, max_bytes: int | Callable[[], int] = SIGNAL_BYTES, optional: bool = False
) -> Callable[[F], F]:
    """Mark a method as the handler of the signal of its own name, taking one `hint` of at most
    `max_bytes` (or what `max_bytes()` says when the signal comes: a bound behind a patch)."""

    def mark(fn: F) -> F:
        setattr(fn, SIGNAL_SPEC, (hint, max_bytes, optional))
        return fn

    return mark


def _payloads(args: Sequence[RawValue]) -> list[tuple[str, bytes]]:
    out = []
    for a in args:
        if a is NO_ARGUMENT or not isinstance(a, RawValue):
            continue
        encoding = a.payload.metadata.get("encoding", b"")
        out.append((encoding.decode("utf-8", "replace"), a.payload.data))
    return out


def handler_names(cls: type) -> list[str]:
    """The signal and update names a workflow class handles (what its rejections count by)."""
    names = []
    for attr in dir(cls):
        value = getattr(cls, attr, None)
        if hasattr(value, SIGNAL_SPEC):
            names.append(attr)
        defn = getattr(value, "_defn", None)
        if defn is not None and type(defn).__name__ == "_UpdateDefinition" and defn.name:
            names.append(defn.name)
    return names


LOGGED_PER_ACTIVATION = 20  # rejections logged in one activation; the rest only counted


class Guard:
    """The rejections of one workflow, and the decoding of what its handlers receive."""

    def __init__(self, owner: object, workflow_type: str, state: Any = None) -> None:
        self.owner = owner
        self.workflow_type = workflow_type
        self.rejections = Rejections(
            handler_names(type(owner)), state if isinstance(state, dict) else None
        )
        self.logged_at, self.logged = 0.0, 0  # (log lines this activation: `reject`)
        # The bytes of every signal's payloads this run received, refused or not (each is in
        # its history): what `on_signal` watches (`_watch`).
        self.signal_bytes = 0
        self.on_signal: Callable[[], None] | None = None
        # Exported at 0 for each handler from the start: a dashboard or alert that names the
        # counter finds it before anything is rejected (issue 34).
        counter = self._counter()
        for handler in sorted(self.rejections.handlers | {UNKNOWN}):
            counter.add(0, {"workflow": workflow_type, "handler": handler})

    def signal(self, name: str, args: Sequence[RawValue]) -> None:
        """Dispatch a signal by name; never raises."""
        self.signal_bytes += sum(len(a.payload.data) for a in args if isinstance(a, RawValue))
        method = getattr(type(self.owner), name, None) if len(name) <= 100 else None
        spec = getattr(method, SIGNAL_SPEC, None)
        if method is None or spec is None:
            self.reject(name, f"no signal {clip(name, 60)!r} on a {self.workflow_type} workflow")
            return
        hint, max_bytes, optional = spec
        try:
            limit = max_bytes() if callable(max_bytes) else max_bytes
            value = decode(_payloads(args), hint, name, limit, optional)
            method(self.owner, value)
        except Rejected as err:
            self.reject(name, str(err))
        except Exception as err:  # a bug must not wedge the workflow: recorded, not raised
            workflow.logger.exception("signal %s failed in its handler", name)
            self.reject(name, f"{name}: the handler failed: {clip(repr(err))}")
        finally:
            self._watch()

    def _watch(self) -> None:
        """After every signal, accepted or not: the workflow's `on_signal` (it watches how fast
        signals grow its history, `signal_bytes`: a refused one is in it all the same)."""
        if self.on_signal is not None:
            try:
                self.on_signal()
            except Exception:  # (never fails the task)
                workflow.logger.exception("watching the history after a signal failed")

    def arg(self, raw: RawValue, hint: Any, what: str, max_bytes: int | None = None) -> Any:
        """An update's argument as `hint`, or `Rejected` (call it in the validator first). An
        update's validator takes at most UPDATE_BYTES (issue 44: under the server's payload
        limit); its handler, called after the validator or replaying a history, what it took
        before (UPDATE_BYTES_BEFORE): an update a run begun before took replays as it ran."""
        if max_bytes is None:
            max_bytes = UPDATE_BYTES if workflow.unsafe.is_read_only() else UPDATE_BYTES_BEFORE
        try:
            return decode(_payloads([raw]), hint, what, max_bytes)
        except Rejected:
            self.count(what)
            raise

    def reject(self, handler: str, error: str) -> None:
        """Record a rejection, count it, and log it: the first LOGGED_PER_ACTIVATION of an
        activation (a batch of 500 roll-ups refused while a shard writes its state logged
        thousands of lines, past the SDK's 2 s deadline for a task); the rest are counted."""
        now = workflow.now().timestamp()
        self.rejections.add(handler, error, now)
        if now != self.logged_at:
            self.logged_at, self.logged = now, 0
        self.logged += 1
        if self.logged <= LOGGED_PER_ACTIVATION:
            workflow.logger.warning("%s: rejected %s", self.workflow_type, clip(error, 400))
        elif self.logged == LOGGED_PER_ACTIVATION + 1:
            workflow.logger.warning(
                "%s: more rejections in this activation are counted, not logged (`rejections`)",
                self.workflow_type,
            )
        self.count(handler)

    def count(self, handler: str) -> None:
        """Count one refused input of `handler` in `bigfleet_rejected_inputs_total`."""
        self._counter().add(
            1, {"workflow": self.workflow_type, "handler": self.rejections.known(handler)}
        )

    @staticmethod
    def _counter() -> Any:
        return workflow.metric_meter().create_counter(
            "bigfleet_rejected_inputs_total", "signals and updates refused as malformed or unknown"
        )

    def view(self) -> dict[str, Any]:
        """The refusals recorded, for the workflow's status query (bounded)."""
        return {"total": self.rejections.total, **self.rejections.state()}


def guarded(fn: F) -> F:
    """An update handler whose unexpected exceptions fail the update, not the workflow task."""
    name = fn.__name__

    def failure(err: Exception) -> ApplicationError:
        if isinstance(err, Rejected):
            return ApplicationError(str(err), type="Rejected", non_retryable=True)
        workflow.logger.exception("update %s failed in its handler", name)
        return ApplicationError(
            f"{name}: the handler failed: {clip(repr(err))}", type="HandlerFailed",
            non_retryable=True,
        )

    if inspect.iscoroutinefunction(fn):

        async def run_async(self, raw: RawValue = NO_ARGUMENT):  # type: ignore[no-untyped-def]
            try:
                return await fn(self, raw)
            except ApplicationError:
                raise
            except Exception as err:
                raise failure(err) from err

        wrapper: Any = run_async
    else:

        def run(self, raw: RawValue = NO_ARGUMENT):  # type: ignore[no-untyped-def]
            try:
                return fn(self, raw)
            except ApplicationError:
                raise
            except Exception as err:
                raise failure(err) from err

        wrapper = run
    wrapper.__name__, wrapper.__qualname__, wrapper.__doc__ = name, fn.__qualname__, fn.__doc__
    return wrapper  # type: ignore[no-any-return]


class TakesSignals:
    """Mixed into every BigFleet workflow: its one signal handler, and the query that shows what
    it refused. The workflow makes `self.guard` in its `__init__`."""

    guard: Guard

    @workflow.signal(dynamic=True)
    def _signal(self, name: str = "", args: Sequence[RawValue] = ()) -> None:
        # The SDK hands a dynamic handler every payload of a signal as a RawValue: a signal
        # sent with none arrives as `()`, never as a missing argument (the default says so).
        self.guard.signal(name, args)

    @workflow.query
    def rejections(self) -> dict[str, Any]:
        """Signals this workflow refused: how many per signal, and the last few."""
        return self.guard.view()


class NoSignals(TakesSignals):
    """For workflows that take no signal (sagas, audits): a signal sent to one anyway is
    recorded as a bounded rejection, not buffered by the SDK for the rest of the run."""

    def __init__(self) -> None:
        self.guard = Guard(self, workflow.info().workflow_type)


HISTORY_SURGE = "continue-as-new-on-history-surge"  # (the patch: runs begun before wait)


class HistorySurge:
    """Signals that grow a run's history fast: a flood (issue 44). A handler cannot refuse what
    the server already wrote to the history (a refused signal is in it all the same, and the
    server ends a run at 50 MB), so once the signals since the last `mark` (a cycle's or a
    round's end) add more than `limit` bytes, `surged` is set and `then` called: the workflow
    continues as new at once, its state in a fresh history. Runs begun before never surge."""

    def __init__(self, guard: Guard, limit: int, then: Callable[[], None] | None = None) -> None:
        self.guard, self.limit, self.then = guard, limit, then
        self.since: int | None = None  # the signals' bytes at the last mark (None: not yet)
        self.surged = False
        guard.on_signal = self._watch

    def mark(self) -> None:
        """From here on (a cycle or round ended)."""
        self.since = self.guard.signal_bytes

    async def wait(self, seconds: float) -> None:
        """Mark, then wait `seconds` or until the signals since surge."""
        self.mark()
        try:
            await workflow.wait_condition(lambda: self.surged, timeout=seconds)
        except TimeoutError:
            pass  # (the time is up)

    def _watch(self) -> None:
        if self.since is None or self.surged:
            return
        if self.guard.signal_bytes - self.since > self.limit and workflow.patched(HISTORY_SURGE):
            workflow.logger.warning(
                "%s: history grew fast (a flood?): continuing as new", self.guard.workflow_type
            )
            self.surged = True
            if self.then is not None:
                self.then()
