"""The coordinator's `cluster_mode` update (`ClusterModeChanges`, mixed into
workflows/coordinator.py): a cluster becomes unmanaged (every shard gives up its machines as they
stand, no drain, and refuses its roll-ups) or managed again (every shard stops leaving it alone,
and the cluster's shard takes its machines back as the providers list them), at run time, with
an audit entry (bigfleet/cluster_modes.py, docs/adoption.md; issue 46).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field
from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from activities.wire import CoordinatorInput, Instruction, ShardCall
    from activities.wire.base import Model
    from bigfleet.coordinator import Coordinator
    from bigfleet.inputs import Rejected, clip
    from workflows.guard import NO_ARGUMENT, Guard, guarded
    from workflows.sagas import STEP

MODE_LOG = 100  # audit entries the coordinator keeps (the update's own history keeps them all)


class ClusterModeRequest(Model):
    """`bigfleet cluster NAME --mode managed|unmanaged|shadow`: who asks and why go in the
    audit entry."""

    cluster: Annotated[str, Field(min_length=1, max_length=253)]
    mode: Literal["managed", "unmanaged", "shadow"]
    reason: Annotated[str, Field(max_length=500)] = ""
    by: Annotated[str, Field(max_length=200)] = ""


class ClusterModeChanges:
    """The update, its validator, and the audit log it keeps (carried across continue-as-new
    in the coordinator's state under "modes" once it has an entry)."""

    inp: CoordinatorInput
    c: Coordinator
    guard: Guard
    ready: bool
    _mode_log: list[dict[str, Any]] | None = None

    @property
    def mode_log(self) -> list[dict[str, Any]]:
        if self._mode_log is None:
            carried = (self.inp.state or {}).get("modes", [])
            self._mode_log = list(carried)[-MODE_LOG:] if isinstance(carried, list) else []
        return self._mode_log

    def modes_state(self) -> dict[str, Any]:
        """The log, for the next run's state (nothing while it is empty)."""
        return {"modes": self.mode_log} if self.mode_log else {}

    @workflow.update
    @guarded
    async def cluster_mode(self, raw: RawValue = NO_ARGUMENT) -> dict[str, Any]:
        """Change a cluster's mode on every running shard, then note it (the entry is the
        answer). Managed again: its shard (kept, or assigned now) takes its machines back. A
        cluster no shard left alone, of which nothing was taken back, cannot become managed:
        refused, after asking them."""
        req = self.guard.arg(raw, ClusterModeRequest, "cluster_mode")
        await workflow.wait_condition(lambda: self.ready)
        target = self.c.assign(req.cluster) if req.mode == "managed" else None
        answers: dict[str, Any] = {}
        for shard in sorted(self.c.shards):
            term, seq = self.c.next_token()
            ins = Instruction(
                term=term, seq=seq, cluster=req.cluster, mode=req.mode, adopt=shard == target
            )
            answers[str(shard)] = await workflow.execute_activity(
                "shard_update",
                ShardCall(shard=shard, update="cluster_mode", instruction=ins),
                **STEP,
            )
        said = [a for a in answers.values() if isinstance(a, dict)]
        # (Refused only if nothing happened: a command run again after a shard failed it finds
        # the others managed already, and its shard takes the machines back all the same.)
        taken = sum(int(a.get("taken_back", 0) or 0) for a in said)
        left = ("unmanaged", "shadow")
        if req.mode == "managed" and not taken and all(a.get("was") not in left for a in said):
            raise Rejected(
                f"cluster_mode: cluster: {clip(req.cluster, 80)!r} is not unmanaged or shadow "
                "on any shard: nothing to change"
            )
        entry = {
            "at": workflow.now().timestamp(),
            **req.model_dump(),
            "shard": target,
            "answers": answers,
        }
        self.mode_log.append(entry)
        del self.mode_log[:-MODE_LOG]
        workflow.logger.warning(
            "cluster %s is now %s (by %r: %r): %s", req.cluster, req.mode, req.by, req.reason,
            answers,
        )
        return entry

    @cluster_mode.validator
    def _cluster_mode_ok(self, raw: RawValue = NO_ARGUMENT) -> None:
        self.guard.arg(raw, ClusterModeRequest, "cluster_mode")

    @workflow.query
    def cluster_modes(self) -> list[dict[str, Any]]:
        """The mode changes made at run time, oldest first (the last `MODE_LOG`)."""
        return list(self.mode_log)
