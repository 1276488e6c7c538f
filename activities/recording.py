"""A live fleet's recording (issue 46; docs/adoption.md "Record, then replay"): the lines each
shard hands over (roll-ups as it accepted them, what it held per profile with prices after each
reconcile, its decisions) appended to files under a directory every worker of the `shards` role
can reach (`$BIGFLEET_RECORD_DIR`, else `.bigfleet/recordings`): `shard-<n>.jsonl`, rotated
to `shard-<n>.<unix ms>.jsonl` past `file_bytes`, at most `files` of them kept per shard (the
oldest deleted): a recording never grows without bound. Each file begins with its own header
line, so every file reads on its own. `bigfleet simulate DIR --replay --fleet FILE` replays a
directory (bigfleet/simulation/shard_recording.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from temporalio import activity

from activities.wire import RecordBatch
from bigfleet.simulation.shard_recording import header_line

FILE_BYTES = 64 * 1024 * 1024  # a file's size before it is rotated
FILES = 8  # rotated files kept per shard, besides the one being written


def default_dir() -> Path:
    return Path(os.environ.get("BIGFLEET_RECORD_DIR", ".bigfleet/recordings"))


class RecordActivities:
    def __init__(
        self, root: Path | None = None, file_bytes: int = FILE_BYTES, files: int = FILES
    ) -> None:
        self.root, self.file_bytes, self.files = root or default_dir(), file_bytes, files

    @activity.defn(name="record_lines")
    async def record_lines(self, batch: RecordBatch) -> int:
        """Append a shard's lines; how many bytes its current file holds now."""
        return self.append(batch.shard, batch.lines)

    def append(self, shard: int, lines: list[str]) -> int:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"shard-{shard}.jsonl"
        text = "".join(line.rstrip("\n") + "\n" for line in lines)
        size = path.stat().st_size if path.exists() else 0
        if size and size + len(text) > self.file_bytes:
            path.replace(self.root / f"shard-{shard}.{int(time.time() * 1000)}.jsonl")
            self._forget_old(shard)
            size = 0
        with path.open("a", encoding="utf-8") as out:
            if size == 0:
                out.write(header_line(shard) + "\n")
            out.write(text)
            return out.tell()

    def _forget_old(self, shard: int) -> None:
        rotated = sorted(
            (p for p in self.root.glob(f"shard-{shard}.*.jsonl")),
            key=lambda p: int(p.name.split(".")[1]),
        )
        for old in rotated[: max(0, len(rotated) - self.files)]:
            old.unlink(missing_ok=True)
