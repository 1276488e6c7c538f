"""Which coordinator term is real (design §11): a shard takes a term above every one it has seen
only from the coordinator that runs now. Anyone who can write to the namespace can send an
instruction with any term, but not run the `coordinator` workflow's current run."""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.wire import COORDINATOR_ID, CoordinatorTerm


class TermActivities:
    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name="coordinator_term")
    async def coordinator_term(self) -> CoordinatorTerm:
        """The running coordinator's term, asked of the workflow itself; not running if there
        is none (never started, or ended and not started again yet)."""
        handle = self.client.get_workflow_handle(COORDINATOR_ID)
        try:
            desc = await handle.describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return CoordinatorTerm(running=False)
            raise
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return CoordinatorTerm(running=False)
        # The run that runs now (a newer one started meanwhile answers for itself next time).
        term = await self.client.get_workflow_handle(COORDINATOR_ID, run_id=desc.run_id).query(
            "term", result_type=int
        )
        return CoordinatorTerm(running=True, term=int(term))
