"""State too large for one payload crosses continue-as-new through the snapshot store (claim
check, DESIGN §3): written in parts before the shard continues as new, read back first thing in
the next run. Mixed into the shard workflow, whose state these methods share.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.wire import (
        SHARD_TASK_QUEUE,
        ShardConfig,
        SnapshotPart,
        SnapshotRef,
        TransitionInput,
        shard_workflow_id,
    )
    from bigfleet.shard import Shard
    from workflows.provider_sync import PATIENT, QUICK


class SnapshotStore:
    shard: Shard
    cfg: ShardConfig
    pipeline: list[TransitionInput]
    restoring: bool
    snapshotting: bool
    early_rollups: list[dict[str, Any]]
    _restore: Callable[..., None]
    rollup: Callable[[dict[str, Any]], None]

    async def _store(self, state: dict[str, Any]) -> SnapshotRef | None:
        """Put a state larger than `snapshot_inline_bytes` into the snapshot store, in parts;
        None if it travels inline."""
        blob = json.dumps(state, separators=(",", ":"))
        if len(blob) <= self.cfg.snapshot_inline_bytes:
            return None
        # From here the state is written: signals wait in the next run's input, instructions
        # are told to retry.
        self.snapshotting = True
        key = f"{shard_workflow_id(self.shard.id)}/{workflow.info().run_id}"
        size = self.cfg.snapshot_part_bytes
        parts = [blob[i : i + size] for i in range(0, len(blob), size)]
        await asyncio.gather(
            *(
                workflow.execute_activity(
                    "snapshot_put",
                    SnapshotPart(key=key, part=i, data=data),
                    task_queue=SHARD_TASK_QUEUE,
                    **QUICK,
                )
                for i, data in enumerate(parts)
            )
        )
        digest = hashlib.sha256(blob.encode()).hexdigest()
        return SnapshotRef(key=key, parts=len(parts), size=len(blob), sha256=digest)

    def _store_failed(self) -> None:
        """Writing the snapshot failed: this run goes on (its history grows a little longer)
        and what waited for the next run is applied here."""
        self.snapshotting = False
        self._apply_early_rollups()

    async def _load(self, ref: SnapshotRef, joining: bool) -> None:
        parts: list[str] = await asyncio.gather(
            *(
                workflow.execute_activity(
                    "snapshot_get",
                    SnapshotPart(key=ref.key, part=i, data=""),
                    task_queue=SHARD_TASK_QUEUE,
                    result_type=str,
                    **PATIENT,  # the shard cannot go on without it
                )
                for i in range(ref.parts)
            )
        )
        blob = "".join(parts)
        if hashlib.sha256(blob.encode()).hexdigest() != ref.sha256:
            raise ApplicationError(
                f"snapshot {ref.key}: {len(blob)} bytes read, {ref.size} written, checksum "
                "differs: the store lost or changed a part"
            )
        state = json.loads(blob)
        queued = [TransitionInput.model_validate(t) for t in state.pop("pipeline", [])]
        self._restore(state, joining)
        self.pipeline = queued + self.pipeline
        self.restoring = False
        self._apply_early_rollups()

    def _apply_early_rollups(self) -> None:
        early, self.early_rollups = self.early_rollups, []
        for raw in early:
            self.rollup(raw)
