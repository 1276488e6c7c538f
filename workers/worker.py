"""BigFleet's Temporal workers for a fleet, against any Temporal server: built here for
`bigfleet worker` (workers/verbs/worker.py), `bigfleet dev` and the tests.

Roles: `shards` (shard workflows and the activity that starts transitions), `transitions`
(machine transition workflows and operator callbacks), `providers` (provider activities, one
rate-limited task queue per provider). A process may take any set of roles.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.audit import AuditActivities
from activities.coordination import CoordinationActivities
from activities.mailbox import MailboxActivities
from activities.membership import MembershipActivities
from activities.operators import OperatorActivities
from activities.providers import ProviderActivities, VirtualClock
from activities.recording import RecordActivities
from activities.shards import ShardClientActivities, terminate, wedged
from activities.snapshots import SnapshotActivities
from activities.starter import StarterActivities
from activities.terms import TermActivities
from activities.wire import (
    SHARD_TASK_QUEUE,
    TRANSITION_TASK_QUEUE,
    ShardConfig,
    ShardInput,
    build_queue,
    provider_task_queue,
    shard_task_timeout,
    shard_workflow_id,
)
from bigfleet.deployment import Deployment
from bigfleet.edge.operator_client import GrpcOperators
from bigfleet.edge.provider_client import GrpcProvider
from bigfleet.simulation import fleet as simulated
from bigfleet.simulation.scenario import CloudProviderSpec, Scenario
from workers.routing import coordinator_start
from workflows.audit import FleetAuditWorkflow
from workflows.coordinator import CoordinatorWorkflow
from workflows.mailbox import ShardMailbox
from workflows.membership import MembershipSagaWorkflow
from workflows.sagas import COORDINATOR_ID, TransferSagaWorkflow
from workflows.shard import ShardWorkflow
from workflows.transition import MachineTransitionWorkflow

ROLES = ("shards", "transitions", "providers")
log = logging.getLogger("bigfleet.worker")

# The workflow workers' settings (shard, transitions, and `bench temporal`'s ceiling worker):
# the SDK's defaults. More pollers, concurrent tasks or cached workflows measured slower with
# every role in one process (docs/temporal.md, "Temporal benchmark").
WORKER_TUNING: dict[str, Any] = {}

RUNNER = SandboxedWorkflowRunner(
    restrictions=SandboxRestrictions.default.with_passthrough_modules(
        "numpy", "sortedcontainers", "yaml", "bigfleet"
    )
)


class SimulatedFleet:
    """The simulated providers and operators a fleet file describes, on workflow time."""

    def __init__(self, fleet: Scenario) -> None:
        self.fleet = fleet
        self.clocks = {p.name: VirtualClock() for p in fleet.providers}
        self.providers = simulated.providers(fleet, self.clocks.__getitem__, fleet.seed)
        self.operators = simulated.operators(fleet, fleet.seed)

    def rate(self, provider: str) -> float | None:
        spec = next(p for p in self.fleet.providers if p.name == provider)
        return spec.api_calls_per_second if isinstance(spec, CloudProviderSpec) else None

    def close(self) -> None:
        pass  # in this process's memory: nothing to hang up


class RemoteFleet:
    """The providers and operators a deployment config names, called over gRPC: BigFleet
    against systems it did not write (bigfleet/deployment.py, docs/operations.md)."""

    def __init__(self, deployment: Deployment) -> None:
        self.fleet = deployment
        self.clocks: dict[str, VirtualClock] = {}  # real providers keep their own time
        self.providers = {p.name: GrpcProvider(p) for p in deployment.providers}
        self._operators = GrpcOperators(deployment.operators)
        self.operators = self._operators.operator  # cluster -> its operator, or None

    def rate(self, provider: str) -> float | None:
        spec = self.fleet.provider(provider)
        return spec.calls_per_second if spec is not None else None

    def close(self) -> None:
        for p in self.providers.values():
            p.close()
        self._operators.close()


Fleet = SimulatedFleet | RemoteFleet


def shard_config(fleet: Scenario | Deployment, shard: int, **overrides: object) -> ShardConfig:
    """Shard `shard`'s ShardConfig from a fleet file or a deployment config (`overrides`: fields
    set over it)."""
    if isinstance(fleet, Deployment):
        batches = {
            "configure_batch": fleet.configure_batch,
            "drain_batch": fleet.drain_batch,
            "delete_batch": fleet.delete_batch,
            "task_timeout_seconds": fleet.shard_task_timeout_seconds,
        }
        overrides = {**batches, **overrides}
        if fleet.shadow_shard(shard):
            overrides = {"shadow": True, **overrides}
        if fleet.unmanaged_clusters:
            overrides = {"unmanaged": list(fleet.unmanaged_clusters), **overrides}
        if fleet.shadow_clusters:
            overrides = {"shadow_clusters": list(fleet.shadow_clusters), **overrides}
        if fleet.record:
            overrides = {"record": True, **overrides}
    overrides = {"max_in_flight": max(1, fleet.max_in_flight // fleet.shards), **overrides}
    return ShardConfig(
        shard=shard,
        shards=fleet.shards,
        providers=[p.name for p in fleet.providers],
        cycle_seconds=fleet.cycle_seconds,
        policy=fleet.policy_overrides(),
        **overrides,
    )


async def ensure_shards(
    client: Client,
    fleet: Scenario | Deployment,
    plan_seconds: float | None = None,
    restart_closed: bool = False,
    **overrides: object,
) -> None:
    """Start the fleet's shard workflows that never ran (idempotent), and the coordinator
    (cluster assignment, rebalancing between shards). A shard whose workflow ended is left
    alone: a merged-away one retired for good, a terminated one is the coordinator's to revive
    from its durable state — started afresh it would adopt machines other shards now own.
    `restart_closed` (`bigfleet dev` after resetting its world) starts them afresh anyway."""
    reuse = (
        WorkflowIDReusePolicy.ALLOW_DUPLICATE
        if restart_closed
        else WorkflowIDReusePolicy.REJECT_DUPLICATE
    )
    for shard in range(fleet.shards):
        config = shard_config(fleet, shard, **overrides)
        try:
            await client.start_workflow(
                ShardWorkflow.run,
                ShardInput(config=config),
                id=shard_workflow_id(shard),
                task_queue=SHARD_TASK_QUEUE,
                task_timeout=shard_task_timeout(config),
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=reuse,
                static_summary=f"BigFleet shard {shard} of {fleet.shards}",
            )
        except WorkflowAlreadyStartedError:
            pass  # it ran before and ended: see above
    await client.start_workflow(**coordinator_start(fleet.shards, plan_seconds))


async def keep_coordinator(
    client: Client,
    shards: int,
    stop: asyncio.Event,
    every: float = 10.0,
    plan_seconds: float | None = None,
) -> None:
    """Keep the coordinator running (every worker with the shards role does this): one that
    ended (terminated, failed) is started again within `every` seconds; one that is wedged
    (its workflow task fails on every attempt) is ended and started afresh. A fresh
    coordinator takes a new term and learns the shards' clusters before it assigns any; the
    shards serve on meanwhile (static stability). Each restart is logged."""
    while not stop.is_set():
        try:
            await _keep_coordinator_once(client, shards, plan_seconds, terminate, wedged)
        except Exception as err:  # the server may be down for a moment: look again later
            log.warning("coordinator keeper: %s", err)
        try:
            await asyncio.wait_for(stop.wait(), timeout=every)
        except TimeoutError:
            pass


async def _keep_coordinator_once(
    client: Client, shards: int, plan_seconds: float | None, terminate: Any, wedged: Any
) -> None:
    handle = client.get_workflow_handle(COORDINATOR_ID)
    try:
        desc = await handle.describe()
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        desc = None
    if desc is not None and desc.status == WorkflowExecutionStatus.RUNNING:
        failing = await wedged(client, COORDINATOR_ID, desc)
        if failing is None:
            return
        log.warning("coordinator run %s is wedged (%s): restarting it", desc.run_id, failing)
        await terminate(client, COORDINATOR_ID, desc.run_id, f"bigfleet: {failing}")
    elif desc is not None:
        log.warning("coordinator ended (%s): starting it again", getattr(desc.status, "name", "?"))
    await client.start_workflow(**coordinator_start(shards, plan_seconds))


# The workflows on the shard task queue; with MachineTransitionWorkflow, every workflow.
SHARD_WORKFLOWS = [
    ShardWorkflow,
    ShardMailbox,
    CoordinatorWorkflow,
    TransferSagaWorkflow,
    MembershipSagaWorkflow,
    FleetAuditWorkflow,
]


def build_workers(
    client: Client,
    sim: Fleet,
    roles: Iterable[str] = ROLES,
    shard_client: Callable[[Client], ShardClientActivities] = ShardClientActivities,
    snapshot_dir: Path | None = None,
    starter: Callable[[Client], StarterActivities] = StarterActivities,
    build: str = "",
) -> list[Worker]:
    """The workers of `roles`, none started yet. `shard_client` makes the saga steps' activities
    and `starter` the shards' `start_transitions` (tests pass ones that inject faults or hold
    starts back, as a loaded server does); `snapshot_dir` is the snapshot store's directory
    (default: $BIGFLEET_SNAPSHOT_DIR, else .bigfleet/snapshots); `build`: the build of the
    shard workers, which poll that build's queue (workflows/shard_builds.py)."""
    roles = set(roles)
    unknown = roles - set(ROLES)
    if unknown:
        raise ValueError(f"--role: unknown {sorted(unknown)}; choose from {', '.join(ROLES)}")
    workers: list[Worker] = []
    if "shards" in roles:
        workers += shard_workers(
            client, shard_client(client), snapshot_dir, known_cluster(sim), starter(client), build
        )
    if "transitions" in roles:
        workers += transition_workers(client, sim)
    if "providers" in roles:
        workers += provider_workers(client, sim)
    return workers


def known_cluster(sim: Fleet) -> Callable[[str], bool] | None:
    """Whether the deployment knows a cluster (gives it an operator endpoint: what the gateway
    checks), for shards asked a cluster they do not serve. None (every name): a simulated
    fleet file (a cluster without a simulated operator is refused at its configures instead),
    or a deployment that names no operator at all (a shadow fleet configures nothing)."""
    if isinstance(sim, RemoteFleet):
        operators = sim.fleet.operators
        if operators.template is None and not operators.clusters:
            return None
        return lambda cluster: operators.endpoint(cluster) is not None
    return None


def shard_workers(
    client: Client,
    steps: ShardClientActivities,
    snapshot_dir: Path | None,
    known: Callable[[str], bool] | None = None,
    starter: StarterActivities | None = None,
    build: str = "",
) -> list[Worker]:
    """Role `shards`: the shard task queue (`build`'s), with every workflow but the
    transitions, and the activities they run themselves (starting transitions, snapshots,
    membership, saga steps, what shards and the coordinator ask each other). `known`: see
    `known_cluster`."""
    snapshots = SnapshotActivities(snapshot_dir)
    shard_clients = ShardClientActivities(client)
    return [
        Worker(
            client,
            task_queue=build_queue(build),
            workflows=SHARD_WORKFLOWS,
            activities=[
                (starter or StarterActivities(client)).start_transitions,
                snapshots.put,
                snapshots.get,
                *MembershipActivities(client).all(),
                steps.update,
                steps.machine_states,
                shard_clients.clusters,
                shard_clients.revive_shard,
                shard_clients.queue_polled,
                RecordActivities().record_lines,
                TermActivities(client).coordinator_term,
                *MailboxActivities(client).all(),
                *CoordinationActivities(client, known).all(),
            ],
            workflow_runner=RUNNER,
            **WORKER_TUNING,
        )
    ]


def transition_workers(client: Client, sim: Fleet) -> list[Worker]:
    """Role `transitions`: machine transition workflows and the operators' callbacks."""
    listed = sim.fleet.operators.clusters if isinstance(sim, RemoteFleet) else []
    operators = OperatorActivities(sim.operators, known=[c.cluster for c in listed])
    return [
        Worker(
            client,
            task_queue=TRANSITION_TASK_QUEUE,
            workflows=[MachineTransitionWorkflow],
            activities=[operators.generate_bootstrap, operators.notify, operators.notify_all],
            workflow_runner=RUNNER,
            **WORKER_TUNING,
        )
    ]


def provider_workers(client: Client, sim: Fleet) -> list[Worker]:
    """Role `providers`: per provider, its calls on a queue held to its API rate limit, and its
    reads (get, list, capacity, audit) on a `-read` queue of their own, without that limit."""
    acts = ProviderActivities(sim.providers, sim.clocks, client)
    workers: list[Worker] = []
    for name in sim.providers:
        workers.append(
            Worker(
                client,
                task_queue=provider_task_queue(name),
                activities=[acts.call],
                max_task_queue_activities_per_second=sim.rate(name),
            )
        )
        workers.append(
            Worker(
                client,
                task_queue=provider_task_queue(name) + "-read",
                activities=[
                    acts.get,
                    acts.noticed,
                    acts.list,
                    acts.share,
                    acts.capacity,
                    acts.unowned,
                    AuditActivities(acts).audit,
                ],
            )
        )
    return workers


async def run_workers(workers: list[Worker], stop: asyncio.Event) -> None:
    """Start the workers one by one and run them until `stop`; then stop them, last started
    first. If one fails to start, those already started are stopped before the error goes up.
    (Anything with `__aenter__`/`__aexit__` will do: tests stand in fakes for Worker.)"""
    async with contextlib.AsyncExitStack() as stack:
        for w in workers:
            await stack.enter_async_context(w)
        await stop.wait()
