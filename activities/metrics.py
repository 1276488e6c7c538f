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
PROVIDER_CALL_SECONDS = Histogram(
    "bigfleet_provider_call_seconds", "Provider call latency", ["provider", "call"]
)
BOOTSTRAPS = Counter(
    "bigfleet_bootstraps_total", "Bootstrap blobs asked of operators", ["cluster", "outcome"]
)
