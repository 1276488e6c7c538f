"""The Temporal SDK's metrics on BigFleet's own endpoint (issue 48): one `--metrics-port` per
process carries everything.

Workflow code can only emit metrics through the SDK's replay-safe meter (the decision cycle,
machines by state, shortfalls, cost, rejected inputs, transition outcomes), and the SDK's own
(`temporal_*`) are the SDK's too. Instead of a Prometheus exporter of its own on another port,
the SDK runtime is given a `MetricBuffer`; `SdkMetrics` drains it (every second, and at each
scrape) into running totals and serves them from prometheus_client's registry, under the names
the SDK gives them:

- a counter is the sum of its deltas; one named `..._total` is exported as a counter, any other
  (the SDK's `temporal_request`, ...) as untyped, so that its name stays as it is;
- a gauge is its last value;
- a histogram is counted into buckets: `SDK_HISTOGRAM_BUCKETS` (workers/connect.py) for
  BigFleet's, else `DEFAULT_MS_BUCKETS` (the SDK's durations are in milliseconds, as its own
  Prometheus exporter gives them).

Series are labelled with the attributes they were emitted with. A series is never dropped: a
gauge of something gone reads what the workflow last set (BigFleet's workflows set 0).
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client.core import REGISTRY, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from temporalio.runtime import (
    BUFFERED_METRIC_KIND_COUNTER,
    BUFFERED_METRIC_KIND_GAUGE,
    MetricBuffer,
)

log = logging.getLogger("bigfleet.metrics")

# Milliseconds, for the SDK's own latency histograms (`temporal_*_latency`).
DEFAULT_MS_BUCKETS = (
    1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 60000.0,
)  # fmt: skip
BUFFER_SIZE = 100_000  # updates between two drains (the SDK drops, and logs, past it)
DRAIN_SECONDS = 1.0

Labels = tuple[tuple[str, str], ...]


class _Histogram:
    __slots__ = ("bounds", "counts", "total", "n")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1


class _Series:
    """One metric's values by label set."""

    def __init__(self, name: str, description: str, kind: int) -> None:
        self.name, self.description, self.kind = name, description, kind
        self.values: dict[Labels, Any] = {}


class SdkMetrics(Collector):
    """The SDK's metrics, drained from `buffer` into running totals and collected by
    prometheus_client (`attach` registers it and starts the drain thread)."""

    def __init__(
        self, buffer: Any, buckets: Mapping[str, Sequence[float]] | None = None
    ) -> None:
        self.buffer = buffer
        self.buckets = dict(buckets or {})
        self.series: dict[str, _Series] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def drain(self) -> None:
        """Fold every update the buffer holds into the totals."""
        with self.lock:
            try:
                updates = self.buffer.retrieve_updates()
            except RuntimeError:  # (before the runtime is made)
                return
            for u in updates:
                self._fold(u.metric, u.value, u.attributes)

    def _fold(self, metric: Any, value: float, attributes: Mapping[str, Any]) -> None:
        s = self.series.get(metric.name)
        if s is None:
            s = self.series[metric.name] = _Series(
                metric.name, metric.description or metric.name, metric.kind
            )
        key = tuple(sorted((str(k), str(v)) for k, v in attributes.items()))
        if s.kind == BUFFERED_METRIC_KIND_COUNTER:
            s.values[key] = s.values.get(key, 0) + value
        elif s.kind == BUFFERED_METRIC_KIND_GAUGE:
            s.values[key] = value
        else:
            h = s.values.get(key)
            if h is None:
                h = s.values[key] = _Histogram(self.buckets.get(s.name, DEFAULT_MS_BUCKETS))
            h.observe(float(value))

    def describe(self) -> Iterable[Metric]:
        return []  # (names are known only once emitted: no clash check at registration)

    def collect(self) -> Iterator[Metric]:
        self.drain()
        with self.lock:
            for s in sorted(self.series.values(), key=lambda s: s.name):
                yield _family(s)

    def attach(self, registry: CollectorRegistry = REGISTRY) -> SdkMetrics:
        """Serve these from `registry` and drain the buffer every `DRAIN_SECONDS`."""
        registry.register(self)
        threading.Thread(target=self._drain_loop, name="sdk-metrics", daemon=True).start()
        return self

    def _drain_loop(self) -> None:
        while not self.stopped.wait(DRAIN_SECONDS):
            try:
                self.drain()
            except Exception:  # a metric must never take the worker down
                log.exception("draining the SDK's metrics")


def _family(s: _Series) -> Metric:
    if s.kind == BUFFERED_METRIC_KIND_COUNTER:
        if s.name.endswith("_total"):
            m = Metric(s.name[: -len("_total")], s.description, "counter")
        else:
            m = Metric(s.name, s.description, "unknown")
        for key, v in sorted(s.values.items()):
            m.add_sample(s.name, dict(key), float(v))
        return m
    if s.kind == BUFFERED_METRIC_KIND_GAUGE:
        m = Metric(s.name, s.description, "gauge")
        for key, v in sorted(s.values.items()):
            m.add_sample(s.name, dict(key), float(v))
        return m
    m = Metric(s.name, s.description, "histogram")
    for key, h in sorted(s.values.items()):
        labels = dict(key)
        running = 0
        for bound, n in zip((*h.bounds, float("inf")), h.counts, strict=True):
            running += n
            m.add_sample(f"{s.name}_bucket", {**labels, "le": _le(bound)}, float(running))
        m.add_sample(f"{s.name}_count", labels, float(h.n))
        m.add_sample(f"{s.name}_sum", labels, h.total)
    return m


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def metric_buffer() -> MetricBuffer:
    """A buffer for the SDK runtime's telemetry (`workers/connect.py` `runtime`)."""
    return MetricBuffer(BUFFER_SIZE)
