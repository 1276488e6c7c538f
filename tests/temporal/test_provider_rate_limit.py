"""The per-provider API rate limit (design §10): a provider's lifecycle calls run on a task queue
of their own whose worker (workers/worker.py `provider_workers`) holds it to the provider's
`api_calls_per_second` (`max_task_queue_activities_per_second`), so a burst of calls waits in
the queue instead of being throttled by the provider. Against a real dev server (issue 44)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio import workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.wire import ProviderCall, provider_task_queue
from bigfleet.models import FencingToken, ListFilter, Machine, Transition, from_wire
from bigfleet.simulation.scenario import Scenario
from workers.bench.temporal import PROVIDER, fleet
from workers.worker import SimulatedFleet, provider_workers, run_workers

CALLS = 12
RATE = 2.0  # calls a second: the simulated provider's, and so its queue's


@workflow.defn(name="CallsAtOnce")
class CallsAtOnce:
    """Every call at once, each a provider_call activity on the provider's queue."""

    @workflow.run
    async def run(self, calls: list[ProviderCall]) -> int:
        done = await asyncio.gather(
            *(
                workflow.execute_activity(
                    "provider_call",
                    c,
                    task_queue=provider_task_queue(c.provider),
                    start_to_close_timeout=timedelta(seconds=60),
                    result_type=list[Machine],
                )
                for c in calls
            )
        )
        return sum(len(m) for m in done)


async def test_a_burst_of_calls_waits_in_the_queue_at_the_providers_rate_not_throttled(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    sim = SimulatedFleet(from_wire(Scenario, fleet(CALLS, 1, RATE)))
    provider = sim.providers[PROVIDER]
    ids = [m.id for m in provider.list(ListFilter())][:CALLS]
    calls = [
        ProviderCall(
            provider=PROVIDER,
            transition=Transition.CREATE,
            machine_ids=[mid],
            token=FencingToken(shard_id=0, shard_epoch=1, seq=i + 1),
            now=0.0,
        )
        for i, mid in enumerate(ids)
    ]
    queue = f"calls-{uuid.uuid4()}"
    workflows = Worker(
        client,
        task_queue=queue,
        workflows=[CallsAtOnce],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(run_workers([workflows, *provider_workers(client, sim)], stop))
    try:
        handle = await client.start_workflow(CallsAtOnce.run, calls, id=queue, task_queue=queue)
        assert await handle.result() == CALLS
    finally:
        stop.set()
        await task
    # Held to 2 a second by the queue, the calls never find the provider's bucket (2 a second,
    # 5 saved up) empty; run at once (the worker without its limit), 16 were throttled and
    # retried. A loaded machine only spreads them further apart.
    assert provider.rate_limited == 0
