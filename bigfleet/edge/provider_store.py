"""What the reference provider server keeps (bigfleet/edge/provider_server.py), in one SQLite
database: the idempotency store (key -> the operation it started), the highest fencing epoch
per shard of the calls that succeeded (bigfleet/providers/fencing.py), the call log, and
optionally the provider object itself. The fences here are the only ones a served provider
has (bigfleet/providers/fencing.py `OwnFences`).

Everything the server changes for one call is written in one transaction, so a server killed at
any moment restarts with a call either wholly recorded (its operation, its log line, the
provider as it left it) or not at all. The database is in WAL mode, so `bigfleet provider
calls` can read the log while the server runs.
"""

from __future__ import annotations

import json
import pickle
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..epochs import latest_issued
from ..models import FencingToken
from ..providers import fencing
from ..providers.base import CapacityProvider

KEEP_KEYS_SECONDS = 7 * 24 * 3600.0  # longer than any retry of one operation
KEEP_CALLS = 100_000  # call log rows kept

SCHEMA = """
CREATE TABLE IF NOT EXISTS operations (
    key TEXT PRIMARY KEY,
    method TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    machine_ids TEXT NOT NULL,    -- JSON list, request order
    operation_ids TEXT NOT NULL,  -- JSON list, one per machine
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS fences (
    shard_id INTEGER PRIMARY KEY,
    highest_epoch INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    method TEXT NOT NULL,
    key TEXT NOT NULL,
    machine_ids TEXT NOT NULL,    -- JSON list
    outcome TEXT NOT NULL,        -- started | repeat | an ErrorReason name | INTERNAL
    detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS provider (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    name TEXT NOT NULL,
    state BLOB NOT NULL,          -- the pickled provider object
    saved_at REAL NOT NULL
);
"""

DB_NAME = "provider.sqlite3"


@dataclass(frozen=True)
class Operation:
    method: str
    fingerprint: str
    machine_ids: list[str]
    operation_ids: list[str]


class ProviderStore:
    """The server's durable state in SQLite; every method runs inside `transaction()`."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        if self.path != ":memory:":
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        self.prune()

    @classmethod
    def in_dir(cls, state_dir: str | Path) -> ProviderStore:
        path = Path(state_dir)
        path.mkdir(parents=True, exist_ok=True)
        return cls(path / DB_NAME)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def operation(self, key: str) -> Operation | None:
        row = self.db.execute(
            "SELECT method, fingerprint, machine_ids, operation_ids FROM operations WHERE key = ?",
            (key,),
        ).fetchone()
        if row is None:
            return None
        return Operation(row[0], row[1], json.loads(row[2]), json.loads(row[3]))

    def remember(self, key: str, op: Operation) -> None:
        self.db.execute(
            "INSERT INTO operations VALUES (?, ?, ?, ?, ?, ?)",
            (
                key,
                op.method,
                op.fingerprint,
                json.dumps(op.machine_ids),
                json.dumps(op.operation_ids),
                time.time(),
            ),
        )

    def epoch(self, shard_id: int) -> int | None:
        """The epoch kept for a shard: the highest of its calls that succeeded."""
        row = self.db.execute(
            "SELECT highest_epoch FROM fences WHERE shard_id = ?", (shard_id,)
        ).fetchone()
        return None if row is None else int(row[0])

    def check_fence(self, provider: str, token: FencingToken, now: float) -> None:
        """Refuse (raise) an epoch beyond the clock `now` (seconds) or below the shard's kept
        one; records nothing (bigfleet/providers/fencing.py)."""
        fencing.check(provider, token, self.epoch(token.shard_id), now)

    def keep_fence(self, provider: str, token: FencingToken, now: float) -> None:
        """The call with `token` succeeded (it passed `check_fence`): keep its epoch."""
        keep = fencing.advanced(provider, token, self.epoch(token.shard_id), now)
        if keep is not None:
            self.db.execute(
                "INSERT INTO fences VALUES (?, ?) ON CONFLICT (shard_id) DO UPDATE "
                "SET highest_epoch = excluded.highest_epoch",
                (token.shard_id, keep),
            )

    def fences(self) -> dict[int, int]:
        """Every shard's kept epoch (`bigfleet provider fence show`)."""
        rows = self.db.execute("SELECT shard_id, highest_epoch FROM fences ORDER BY shard_id")
        return {int(shard): int(epoch) for shard, epoch in rows}

    def reset_fence(self, shard_id: int, to: int | None, who: str, why: str) -> int | None:
        """An operator's reset of a shard's fence (`bigfleet provider fence reset`): the kept
        epoch dropped (`to` None: the shard's next call that succeeds is kept) or set to `to`,
        which must be within the skew of the clock (a reset must not fence anyone out either).
        Recorded in the call log: who, the epoch before and after, why. Returns the epoch
        before. Raises ValueError naming the field."""
        if to is not None and not 0 < to <= latest_issued(time.time()):
            raise ValueError(
                f"--to: epoch {to} is not a start time up to the provider's clock plus its "
                f"skew (at most {latest_issued(time.time())})"
            )
        with self.transaction():
            before = self.epoch(shard_id)
            if to is None:
                self.db.execute("DELETE FROM fences WHERE shard_id = ?", (shard_id,))
            else:
                self.db.execute(
                    "INSERT INTO fences VALUES (?, ?) ON CONFLICT (shard_id) DO UPDATE "
                    "SET highest_epoch = excluded.highest_epoch",
                    (shard_id, to),
                )
            detail = f"by {who}: shard {shard_id} epoch {before} -> {to}" + (
                f" ({why})" if why else ""
            )
            self.log("FenceReset", "", [], "reset", detail[:2000])
        return before

    def log(self, method: str, key: str, machine_ids: list[str], outcome: str, detail: str) -> None:
        self.db.execute(
            "INSERT INTO calls (at, method, key, machine_ids, outcome, detail) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (time.time(), method, key, json.dumps(machine_ids), outcome, detail),
        )

    def calls(self) -> list[dict[str, Any]]:
        return call_rows(self.db)

    def save_provider(self, provider: CapacityProvider) -> None:
        state = pickle.dumps(provider, protocol=pickle.HIGHEST_PROTOCOL)
        self.db.execute(
            "INSERT INTO provider VALUES (1, ?, ?, ?) ON CONFLICT (id) DO UPDATE "
            "SET name = excluded.name, state = excluded.state, saved_at = excluded.saved_at",
            (provider.name, state, time.time()),
        )

    def load_provider(self) -> Any | None:
        row = self.db.execute("SELECT state FROM provider WHERE id = 1").fetchone()
        return None if row is None else pickle.loads(row[0])

    def prune(self) -> None:
        with self.transaction():
            self.db.execute(
                "DELETE FROM operations WHERE at < ?", (time.time() - KEEP_KEYS_SECONDS,)
            )
            self.db.execute(
                "DELETE FROM calls WHERE seq <= (SELECT MAX(seq) FROM calls) - ?", (KEEP_CALLS,)
            )
            # Epochs from beyond the clock were never issued (kept by refused calls before
            # issue 30): they fence nothing, and must not start to once the clock reaches them.
            self.db.execute(
                "DELETE FROM fences WHERE highest_epoch > ?", (latest_issued(time.time()),)
            )


def call_rows(db: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = db.execute(
        "SELECT seq, at, method, key, machine_ids, outcome, detail FROM calls ORDER BY seq"
    ).fetchall()
    return [
        {
            "seq": seq,
            "at": at,
            "method": method,
            "key": key,
            "machine_ids": json.loads(ids),
            "outcome": outcome,
            "detail": detail,
        }
        for seq, at, method, key, ids, outcome, detail in rows
    ]


def _db_path(state_dir: str | Path) -> Path:
    path = Path(state_dir) / DB_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no provider state in {state_dir} (no {DB_NAME})")
    return path


def read_calls(state_dir: str | Path) -> list[dict[str, Any]]:
    """The call log of a server's state dir, read-only (the server may be running)."""
    db = sqlite3.connect(f"file:{_db_path(state_dir)}?mode=ro", uri=True)
    try:
        return call_rows(db)
    finally:
        db.close()


def existing(state_dir: str | Path) -> ProviderStore:
    """The store of a server's state dir, to read or reset its fences (the server may be
    running: SQLite in WAL mode, and the server reads a fence on every call)."""
    return ProviderStore(_db_path(state_dir))
