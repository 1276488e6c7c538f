"""The snapshot store (docs/temporal.md, "claim check"): a shard whose state is too large for one
Temporal payload (2 MB) puts it here in parts at continue-as-new and carries only a reference;
its next run reads the parts back. Embedded default: files under a directory every worker of
the `shards` role can reach (`--snapshot-dir`, `$BIGFLEET_SNAPSHOT_DIR`, else
`.bigfleet/snapshots`): one host, or a shared volume. A store on object storage would implement
the same two activities.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.wire import SnapshotPart

KEEP_PER_SHARD = 3  # the newest snapshots of a shard kept; older ones are deleted


def default_dir() -> Path:
    return Path(os.environ.get("BIGFLEET_SNAPSHOT_DIR", ".bigfleet/snapshots"))


class SnapshotActivities:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or default_dir()

    def _dir(self, key: str) -> Path:
        """`shard-<n>/<run id>`: one directory per shard, one per snapshot inside it."""
        names = key.split("/")
        if len(names) != 2 or not all(names) or any(n in (".", "..") for n in names):
            raise ApplicationError(f"snapshot key {key!r} is not a store key", non_retryable=True)
        return self.root / names[0] / names[1]

    @activity.defn(name="snapshot_put")
    async def put(self, part: SnapshotPart) -> None:
        """Write one part (atomically: a reader never sees half a file)."""
        where = self._dir(part.key)
        where.mkdir(parents=True, exist_ok=True)
        tmp = where / f"{part.part}.tmp"
        tmp.write_text(part.data)
        tmp.replace(where / f"{part.part}.json")
        if part.part == 0:
            self._forget_old(where.parent)

    @activity.defn(name="snapshot_get")
    async def get(self, part: SnapshotPart) -> str:
        """One part of a snapshot (`part.data` unused)."""
        path = self._dir(part.key) / f"{part.part}.json"
        try:
            return path.read_text()
        except FileNotFoundError:
            raise ApplicationError(
                f"snapshot {part.key} part {part.part} is not in the store at {self.root} "
                "(is --snapshot-dir shared by every shards worker?)",
                non_retryable=True,
            ) from None

    def _forget_old(self, shard_dir: Path) -> None:
        runs = sorted(
            (d for d in shard_dir.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime
        )
        for old in runs[:-KEEP_PER_SHARD]:
            shutil.rmtree(old, ignore_errors=True)
