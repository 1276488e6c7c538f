"""Cluster-operator callbacks as activities (seed §13): bootstrap blobs, and what was decided."""

from __future__ import annotations

from collections.abc import Mapping

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.metrics import BOOTSTRAP_REFUSALS, BOOTSTRAPS
from activities.wire import BootstrapAnswer, BootstrapCall
from bigfleet.models import BootstrapRequest
from bigfleet.operators import BootstrapRefused, ClusterOperator, OperatorUpdate


class OperatorActivities:
    def __init__(self, operators: Mapping[str, ClusterOperator]) -> None:
        self.operators = dict(operators)
        for cluster in self.operators:  # exported at 0, so an alert sees the first refusal
            BOOTSTRAP_REFUSALS.labels(cluster)

    def _operator(self, cluster: str) -> ClusterOperator:
        operator = self.operators.get(cluster)
        if operator is None:
            raise ApplicationError(
                f"no operator for cluster {cluster!r} on this worker", non_retryable=True
            )
        return operator

    @activity.defn(name="generate_bootstrap")
    async def generate_bootstrap(self, call: BootstrapCall) -> BootstrapAnswer:
        """A refusal is an answer, not an error: the need is unsatisfiable for now."""
        operator = self._operator(call.cluster)
        try:
            blob = operator.generate_bootstrap(
                BootstrapRequest(
                    cluster=call.cluster, machine_id=call.machine_id, requirements=call.requirements
                )
            )
        except BootstrapRefused as refused:
            BOOTSTRAPS.labels(call.cluster, "refused").inc()
            BOOTSTRAP_REFUSALS.labels(call.cluster).inc()
            return BootstrapAnswer(refused=str(refused))
        BOOTSTRAPS.labels(call.cluster, "ok").inc()
        return BootstrapAnswer(user_data=blob.user_data, ttl_seconds=blob.ttl_seconds)

    @activity.defn(name="notify_operator")
    async def notify(self, update: OperatorUpdate) -> None:
        self._operator(update.cluster).notify(update)
