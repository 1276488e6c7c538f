"""The trivial workflow `bigfleet bench temporal` measures the server's own ceiling with: started,
one workflow task, completed. Registered only on the benchmark's own worker."""

from __future__ import annotations

from temporalio import workflow

BENCH_TASK_QUEUE = "bigfleet-bench"


@workflow.defn(name="BenchNoop")
class BenchNoopWorkflow:
    """A workflow that does nothing: `bigfleet bench temporal`'s yardstick for the server."""
    @workflow.run
    async def run(self, n: int) -> int:
        """Return `n`, at once."""
        return n
