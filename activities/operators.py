"""Cluster-operator callbacks as activities (design §13): bootstrap blobs, and what was decided.

The operators are a mapping (cluster -> operator: the simulated ones of a fleet file, tests) or a
resolver `cluster -> operator | None` (the gRPC operators of a deployment config,
bigfleet/edge/operator_client.py). An operator whose calls block (`blocking = True`) is called
in a thread.

Failures at the edge stay bounded. A configure for a cluster with no operator, or whose operator
does not answer (after one quick retry), gets a refused answer naming why, like an operator's
own refusal: the transition hands the machine back idle and the shard records a shortfall with
that reason and backs off, within a cycle, instead of retrying a call that cannot work while
the machine sits in CONFIGURING. Notifications are advisory: one that cannot be delivered is
logged (once a minute per cluster) and dropped.

Metric labels name only clusters the fleet knows (`_refused`): a cluster with no operator
is counted as `unknown`, never under the name a sender chose.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from temporalio import activity

from activities.metrics import BOOTSTRAP_REFUSALS, BOOTSTRAPS, OPERATOR_NOTIFICATIONS
from activities.wire import BootstrapAnswer, BootstrapCall
from bigfleet.edge.convert import WireError
from bigfleet.models import BootstrapBlob, BootstrapRequest
from bigfleet.operators import (
    BootstrapRefused,
    ClusterOperator,
    OperatorError,
    OperatorUnreachable,
    OperatorUpdate,
)

Resolver = Callable[[str], ClusterOperator | None]
A = TypeVar("A")
T = TypeVar("T")
log = logging.getLogger("bigfleet.operators")

# One quick retry, only after a quick failure (a refused connection, not a deadline), so a
# configure to an operator that is down answers in well under 10 s.
RETRY_IF_FAILED_WITHIN = 1.0
RETRY_PAUSE = 0.3
LOG_EVERY_SECONDS = 60.0
UNKNOWN_CLUSTER = "unknown"  # the metric label of a cluster with no operator


class OperatorActivities:
    def __init__(
        self,
        operators: Mapping[str, ClusterOperator] | Resolver,
        retry_pause: float = RETRY_PAUSE,
        known: Iterable[str] = (),
    ) -> None:
        """`known`: clusters a resolver has an operator for (the deployment config's list),
        whose refusal counters are exported at 0 from the start, as `unknown`'s is."""
        self.retry_pause = retry_pause
        for cluster in (UNKNOWN_CLUSTER, *known):  # at 0, so an alert sees the first refusal
            BOOTSTRAP_REFUSALS.labels(cluster)
        self._logged: dict[tuple[str, str], float] = {}
        if isinstance(operators, Mapping):
            self.operators: dict[str, ClusterOperator] = dict(operators)
            self._resolve: Resolver = self.operators.get
            self._missing = "no operator for cluster {} in the fleet file"
            for cluster in self.operators:  # exported at 0 too
                BOOTSTRAP_REFUSALS.labels(cluster)
        else:
            self.operators = {}
            self._resolve = operators
            self._missing = "no operator endpoint for cluster {} in the deployment config"

    @activity.defn(name="generate_bootstrap")
    async def generate_bootstrap(self, call: BootstrapCall) -> BootstrapAnswer:
        """A refusal is an answer, not an error: the need is unsatisfiable for now. So is an
        operator that is missing or does not answer."""
        cluster = call.cluster
        try:
            operator = self._resolve(cluster)
        except Exception as err:  # e.g. a certificate file gone: not worth a retry either
            message = f"operator of cluster {cluster}: {err}"
            return self._refused(cluster, "error", message, known=False)
        if operator is None:
            message = self._missing.format(cluster)
            return self._refused(cluster, "no_operator", message, known=False)
        request = BootstrapRequest(
            cluster=cluster, machine_id=call.machine_id, requirements=call.requirements
        )
        try:
            blob = await self._bootstrap(operator, request)
        except BootstrapRefused as refused:
            return self._refused(cluster, "refused", str(refused))
        except OperatorUnreachable as err:
            return self._refused(cluster, "unreachable", str(err))
        except OperatorError as err:
            return self._refused(cluster, "error", str(err))
        except WireError as err:
            where = getattr(operator, "endpoint", "?")
            message = f"operator of cluster {cluster} at {where} sent a malformed blob: {err}"
            return self._refused(cluster, "error", message)
        BOOTSTRAPS.labels(cluster, "ok").inc()  # (a cluster with an operator: known)
        return BootstrapAnswer(user_data=blob.user_data, ttl_seconds=blob.ttl_seconds)

    async def _bootstrap(
        self, operator: ClusterOperator, request: BootstrapRequest
    ) -> BootstrapBlob:
        started = time.monotonic()
        try:
            return await _call(operator, operator.generate_bootstrap, request)
        except OperatorUnreachable:
            if time.monotonic() - started > RETRY_IF_FAILED_WITHIN:
                raise
        await asyncio.sleep(self.retry_pause)
        return await _call(operator, operator.generate_bootstrap, request)

    def _refused(
        self, cluster: str, outcome: str, reason: str, known: bool = True
    ) -> BootstrapAnswer:
        """`known` False: the cluster has no operator we could find, so its name is whatever
        its roll-up's sender chose; it is counted as `unknown`."""
        label = cluster if known else UNKNOWN_CLUSTER
        BOOTSTRAPS.labels(label, outcome).inc()
        BOOTSTRAP_REFUSALS.labels(label).inc()
        if outcome != "refused":
            self._log(cluster, outcome, f"bootstrap for cluster {cluster} refused: {reason}")
        return BootstrapAnswer(refused=reason)

    @activity.defn(name="notify_operator")
    async def notify(self, update: OperatorUpdate) -> None:
        """Advisory: an operator that is missing or does not answer is logged and skipped (the
        next cycle tells it again); the shard's call is not retried for it."""
        cluster = update.cluster
        try:
            operator = self._resolve(cluster)
        except Exception as err:
            OPERATOR_NOTIFICATIONS.labels("error").inc()
            self._log(cluster, "notify", f"not notified: operator of cluster {cluster}: {err}")
            return
        if operator is None:
            OPERATOR_NOTIFICATIONS.labels("no_operator").inc()
            self._log(cluster, "notify", f"not notified: {self._missing.format(cluster)}")
            return
        try:
            await _call(operator, operator.notify, update)
        except OperatorError as err:
            outcome = "unreachable" if isinstance(err, OperatorUnreachable) else "error"
            OPERATOR_NOTIFICATIONS.labels(outcome).inc()
            self._log(cluster, "notify", f"not notified: {err}")
            return
        OPERATOR_NOTIFICATIONS.labels("ok").inc()

    @activity.defn(name="notify_operators")
    async def notify_all(self, updates: list[OperatorUpdate]) -> None:
        """A wave of notices, one per cluster, in one call (a shard of 1 000 clusters made
        hundreds of `notify_operator` activities a minute, most of its history); each is
        advisory as in `notify_operator`, and they go out at once."""
        await asyncio.gather(*(self.notify(update) for update in updates))

    def _log(self, cluster: str, kind: str, message: str) -> None:
        """A warning, at most once a minute per cluster and kind (every cycle would repeat it)."""
        now = time.monotonic()
        key = (cluster, kind)
        last = self._logged.get(key)
        if last is not None and now - last < LOG_EVERY_SECONDS:
            return
        if len(self._logged) > 10_000:
            self._logged.clear()
        self._logged[key] = now
        log.warning("%s", message)


async def _call(operator: ClusterOperator, method: Callable[[A], T], arg: A) -> T:
    if getattr(operator, "blocking", False):
        return await asyncio.to_thread(method, arg)
    return method(arg)
