"""`bigfleet worker`: the workers of a fleet against any Temporal server.

Roles: `shards` (shard workflows and the activity that starts transitions), `transitions`
(machine transition workflows and operator callbacks), `providers` (provider activities, one
rate-limited task queue per provider). A process may take any set of roles.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.operators import OperatorActivities
from activities.providers import ProviderActivities, VirtualClock
from activities.shards import ShardClientActivities
from activities.starter import StarterActivities
from bigfleet.assignment import cluster_shard
from bigfleet.simulation import fleet as simulated
from bigfleet.simulation.scenario import CloudProviderSpec, Scenario
from workflows.coordinator import CoordinatorWorkflow
from workflows.sagas import COORDINATOR_ID, TransferSagaWorkflow
from workflows.shard import ShardWorkflow
from workflows.transition import MachineTransitionWorkflow
from workflows.types import (
    SHARD_TASK_QUEUE,
    TRANSITION_TASK_QUEUE,
    CoordinatorInput,
    ShardConfig,
    ShardInput,
    provider_task_queue,
    shard_workflow_id,
)

ROLES = ("shards", "transitions", "providers")

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


def shard_config(fleet: Scenario, shard: int, **overrides: object) -> ShardConfig:
    return ShardConfig(
        shard=shard,
        shards=fleet.shards,
        providers=[p.name for p in fleet.providers],
        cycle_seconds=fleet.cycle_seconds,
        policy=fleet.policy_overrides(),
        **overrides,
    )


shard_of = cluster_shard


async def ensure_shards(client: Client, fleet: Scenario, **overrides: object) -> None:
    """Start every shard workflow that is not already running (idempotent), and the coordinator
    when there is more than one shard to coordinate."""
    for shard in range(fleet.shards):
        await client.start_workflow(
            ShardWorkflow.run,
            ShardInput(config=shard_config(fleet, shard, **overrides)),
            id=shard_workflow_id(shard),
            task_queue=SHARD_TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"BigFleet shard {shard} of {fleet.shards}",
        )
    if fleet.shards > 1:
        await client.start_workflow(
            CoordinatorWorkflow.run,
            CoordinatorInput(shards=fleet.shards),
            id=COORDINATOR_ID,
            task_queue=SHARD_TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"BigFleet coordinator of {fleet.shards} shards",
        )


def build_workers(
    client: Client, sim: SimulatedFleet, roles: Iterable[str] = ROLES
) -> list[Worker]:
    roles = set(roles)
    unknown = roles - set(ROLES)
    if unknown:
        raise ValueError(f"--role: unknown {sorted(unknown)}; choose from {', '.join(ROLES)}")
    workers = []
    if "shards" in roles:
        workers.append(
            Worker(
                client,
                task_queue=SHARD_TASK_QUEUE,
                workflows=[ShardWorkflow, CoordinatorWorkflow, TransferSagaWorkflow],
                activities=[
                    StarterActivities(client).start_transitions,
                    ShardClientActivities(client).update,
                    ShardClientActivities(client).machine_states,
                ],
                workflow_runner=RUNNER,
            )
        )
    if "transitions" in roles:
        workers.append(
            Worker(
                client,
                task_queue=TRANSITION_TASK_QUEUE,
                workflows=[MachineTransitionWorkflow],
                activities=[
                    OperatorActivities(sim.operators).generate_bootstrap,
                    OperatorActivities(sim.operators).notify,
                ],
                workflow_runner=RUNNER,
            )
        )
    if "providers" in roles:
        acts = ProviderActivities(sim.providers, sim.clocks)
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
                    client, task_queue=provider_task_queue(name) + "-read",
                    activities=[acts.get, acts.list],
                )
            )
    return workers


async def run_workers(workers: list[Worker], stop: asyncio.Event) -> None:
    async with _all(workers):
        await stop.wait()


class _all:
    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers

    async def __aenter__(self) -> None:
        for w in self.workers:
            await w.__aenter__()

    async def __aexit__(self, *exc: object) -> None:
        for w in reversed(self.workers):
            await w.__aexit__(*exc)
