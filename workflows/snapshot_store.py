"""State too large for one payload crosses continue-as-new through the snapshot store (claim
check, docs/decisions/0003): written in parts before the shard continues as new, read back
first thing in the next run, checked against its sha256. A helper object of the shard
workflow, handed the shard's config and id; what the workflow does meanwhile (roll-ups wait,
instructions are told to retry) is the workflow's.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import zlib
from typing import Any, Literal, TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.wire import (
        ShardConfig,
        SnapshotPart,
        SnapshotRef,
        shard_workflow_id,
    )
    from workflows.provider_sync import PATIENT, QUICK


T = TypeVar("T")
# Runs begun before write the state's JSON as it is. Compressed, a 100 000-machine shard's
# state (5.6 MB, most of it queued starts' machine ids) is a few parts: every part is written
# into this run's history and read into the next one's, and a continue-as-new waits for them.
COMPRESSED = "compressed-snapshot"


class SnapshotStore:
    """Writes a shard's state to the snapshot store in parts and reads it back, checked."""
    def __init__(self, cfg: ShardConfig) -> None:
        self.cfg = cfg

    def encode(self, state: dict[str, Any], beside: int = 0) -> str | None:
        """The state as the store keeps it; None if it is small enough to travel inline, with
        `beside` bytes that travel with it."""
        blob = json.dumps(state, separators=(",", ":"))
        return blob if len(blob) + beside > self.cfg.snapshot_inline_bytes else None

    def _waves(self, parts: list[T]) -> list[list[T]]:
        """Parts in waves of at most `snapshot_wave_bytes`, one workflow task each: a task's
        commands (or the results it reads) travel in one gRPC message, refused over 4 MB.
        Runs begun before this replay as they ran: every part at once."""
        per = max(1, self.cfg.snapshot_wave_bytes // self.cfg.snapshot_part_bytes)
        if len(parts) <= per or not workflow.patched("snapshot-waves"):
            return [parts]
        return [parts[i : i + per] for i in range(0, len(parts), per)]

    async def put(self, blob: str, suffix: str = "") -> SnapshotRef:
        """Write an encoded state in parts of `snapshot_part_bytes`; the reference the next
        run carries instead of the state (`suffix`: another blob of the same run)."""
        key = f"{shard_workflow_id(self.cfg.shard)}/{workflow.info().run_id}{suffix}"
        encoding: Literal["json", "zlib"] = "json"
        if workflow.patched(COMPRESSED):
            blob = base64.b64encode(zlib.compress(blob.encode(), 1)).decode()
            encoding = "zlib"
        size = self.cfg.snapshot_part_bytes
        parts = [blob[i : i + size] for i in range(0, len(blob), size)]
        for wave in self._waves(list(enumerate(parts))):
            await asyncio.gather(
                *(
                    workflow.execute_activity(
                        "snapshot_put",
                        SnapshotPart(key=key, part=i, data=data),
                        task_queue=workflow.info().task_queue,
                        **QUICK,
                    )
                    for i, data in wave
                )
            )
        digest = hashlib.sha256(blob.encode()).hexdigest()
        return SnapshotRef(
            key=key, parts=len(parts), size=len(blob), sha256=digest, encoding=encoding
        )

    async def get(self, ref: SnapshotRef) -> dict[str, Any]:
        """Read a state back (tried until the store answers: the shard cannot go on without
        it); refused if a part was lost or changed."""
        parts: list[str] = []
        for wave in self._waves(list(range(ref.parts))):
            parts += await asyncio.gather(
                *(
                    workflow.execute_activity(
                        "snapshot_get",
                        SnapshotPart(key=ref.key, part=i, data=""),
                        task_queue=workflow.info().task_queue,
                        result_type=str,
                        **PATIENT,
                    )
                    for i in wave
                )
            )
        blob = "".join(parts)
        if hashlib.sha256(blob.encode()).hexdigest() != ref.sha256:
            raise ApplicationError(
                f"snapshot {ref.key}: {len(blob)} bytes read, {ref.size} written, checksum "
                "differs: the store lost or changed a part"
            )
        if ref.encoding == "zlib":
            blob = zlib.decompress(base64.b64decode(blob)).decode()
        state: dict[str, Any] = json.loads(blob)
        return state
