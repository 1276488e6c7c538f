"""BigFleet's own Prometheus metrics (prometheus-client), served by each worker process.

Workflow-side numbers (decision-cycle time, actions, machines by state, shortfalls, transition
durations) go through the Temporal SDK's replay-safe metric meter and appear on the SDK's
endpoint; these count what activities do.
"""

from prometheus_client import Counter, Histogram

PROVIDER_CALLS = Counter(
    "bigfleet_provider_calls_total",
    "Calls that reached a capacity provider",
    ["provider", "call", "outcome"],
)
# A provider call is an HTTP round trip or a cloud API call: milliseconds to the 30 s
# start-to-close timeout of a call.
PROVIDER_CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
PROVIDER_CALL_SECONDS = Histogram(
    "bigfleet_provider_call_seconds",
    "Provider call latency",
    ["provider", "call"],
    buckets=PROVIDER_CALL_BUCKETS,
)
# `cluster` is only ever a cluster this worker has an operator for (an unknown cluster fails
# before anything is counted), so both counters stay as small as the fleet file.
BOOTSTRAPS = Counter(
    "bigfleet_bootstraps_total", "Bootstrap blobs asked of operators", ["cluster", "outcome"]
)
BOOTSTRAP_REFUSALS = Counter(
    "bigfleet_bootstrap_refusals_total",
    "Bootstrap requests an operator refused (the need is unsatisfiable for now)",
    ["cluster"],
)
