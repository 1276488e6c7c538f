"""BigFleet's own Prometheus metrics (prometheus-client), served by each worker process.

Workflow-side numbers (decision-cycle time, actions, machines by state, shortfalls, transition
durations) go through the Temporal SDK's replay-safe metric meter and appear on the SDK's
endpoint; these count what activities do.
"""

from prometheus_client import Counter, Histogram

PROVIDER_CALLS = Counter(
    "bigfleet_provider_calls_total",
    "Calls that reached a capacity provider, by outcome: ok, error, stale (refused as stale)",
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
# `cluster` is a cluster with an operator (the fleet file's, or an endpoint in the deployment
# config), or `unknown` for every other name: a cluster name reaches a configure from a
# roll-up, and a direct signal to a shard can name anything, so no label is the sender's
# string (activities/operators.py). Outcomes: ok, refused (by the operator), unreachable,
# no_operator, error (any other failure of the call, a malformed blob); all but ok are
# answered as refusals and counted in BOOTSTRAP_REFUSALS too.
BOOTSTRAPS = Counter(
    "bigfleet_bootstraps_total", "Bootstrap blobs asked of operators", ["cluster", "outcome"]
)
BOOTSTRAP_REFUSALS = Counter(
    "bigfleet_bootstrap_refusals_total",
    "Bootstrap requests an operator refused (the need is unsatisfiable for now)",
    ["cluster"],
)
# Notifications are advisory: one that cannot be delivered is dropped, and counted here.
OPERATOR_NOTIFICATIONS = Counter(
    "bigfleet_operator_notifications_total",
    "Notifications of what BigFleet decided, sent to cluster operators",
    ["outcome"],  # ok, unreachable, no_operator, error
)
# The roll-up gateway (`bigfleet gateway`, workers/gateway.py) counts what it answered. No cluster
# label: a refused sender names any cluster it likes.
GATEWAY_ROLLUPS = Counter(
    "bigfleet_gateway_rollups_total",
    "Roll-ups the gateway answered: accepted, or the reason it refused them",
    # accepted, unauthenticated, permission_denied, invalid_argument, unknown_cluster,
    # unavailable (Temporal or the shard could not be reached)
    ["outcome"],
)
GATEWAY_SEND_SECONDS = Histogram(
    "bigfleet_gateway_send_seconds",
    "Time to accept a roll-up: authenticate, validate, find the shard, signal it",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
