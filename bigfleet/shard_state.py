"""What a shard carries across continue-as-new: `ShardState`, one field per key.

The shard's own part (`bigfleet.snapshot.shard_state`: its columns, needs, memory, refusals,
machines on their way in or out) and the workflow's part (fencing, membership, refused
signals, providers owed a catch-up, the last cycles, the last result taken, transitions in
flight, shadow mode's record). A large state travels through the snapshot store with the
queued starts and unfolded results (`pipeline`, `results`); a small one inline in
`ShardInput.state`.

A state's JSON is the one the shard's plain dict had before it was typed, byte for byte: a
snapshot's size decides how many parts it is written in, so a run that replays must carry the
very bytes it carried. Keys are in the dict's order, and a key is present only when it was
given and is not None (several were added behind `workflow.patched` markers, or only when
non-empty); an old state missing any of the optional keys loads as it did.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from .cluster_modes import MAX_UNMANAGED

Number = int | float  # (kept as given: a float field would turn 3 into 3.0, and change bytes)


class ShardState(BaseModel):
    """A shard's state between two runs (see the module docstring for its JSON form)."""

    # Unknown keys are dropped, as the dict's reader ignored them.
    model_config = ConfigDict(extra="ignore")

    # ---- the shard (bigfleet/snapshot.py `shard_state`, `restore_shard`) --------------------
    id: int
    epoch: int  # its fencing epoch (design §11)
    seq: int  # the last fencing seq it handed out
    cycles: int  # decision cycles run so far
    inventory: dict[str, Any]  # the columns, packed (`inventory_state`)
    needs: list[dict[str, Any]]  # the needs table (`needs_state`)
    memory: dict[str, Any]  # the engine's memory: shortfall ages and forecasts
    refusals: list[list[Any]]  # [cluster, priority, until, why]
    refused: list[list[Any]] | None = None  # [cluster, priority, first, count]; when any
    rejections: list[str]  # the last roll-ups refused, as messages
    transfer_out: list[str] = Field(default_factory=list)  # machines draining to another shard
    handoff: list[dict[str, Any]] = Field(default_factory=list)  # machine records, JSON
    leaving: list[dict[str, Any]] = Field(default_factory=list)  # machine records, JSON
    moved: dict[str, int] = Field(default_factory=dict)  # cluster -> the shard it moved to
    decommissioned: list[str] = Field(default_factory=list)
    unheard: dict[str, Number] | None = None  # cluster -> adopted since; when any
    disruption: dict[str, Any] | None = None  # `DisruptionBook.state`; when any
    notices: dict[str, Any] | None = None  # `Notices.state`; when any (patch carry-notices)
    blocked: dict[str, Any] | None = None  # `BlockedDrains.state`; when any (likewise)
    fences: Any = None  # `FenceBook.state`; when any (checked where it is read back)
    # Unmanaged clusters once changed at run time (cluster_modes.py): wins over the config's.
    unmanaged: (
        Annotated[list[Annotated[str, Field(max_length=253)]], Field(max_length=MAX_UNMANAGED)]
        | None
    ) = None
    # Shadow clusters' roll-ups and records (bigfleet/shadow_clusters.py); when any. Checked
    # where it is read back.
    shadow_clusters: dict[str, Any] | None = None

    # ---- the workflow's instruction steps (workflows/instruction_steps.py, fencing.py) -----
    term: int = 0  # the coordinator term it serves
    seen: list[int] = Field(default_factory=list)  # seqs seen in that term
    outbox: list[list[Any]] = Field(default_factory=list)  # [term, seq, update, answer]
    verified_term: int | None = None  # the highest term the coordinator confirmed; when any
    forged_terms: list[int] | None = None  # terms the coordinator disowned; when any
    joining: bool = False  # split-born, its last part not arrived yet
    merging: bool = False  # merging away
    inherited: list[int] = Field(default_factory=list)  # shards whose share it took on

    # ---- the rest of the workflow (workflows/shard_carry.py) ---------------------------------
    # Checked where they are read back (anyone may start a shard with any input), so they
    # load as anything.
    guard: Any = None  # signals refused: `Rejections.state`
    owed_providers: list[str] = Field(default_factory=list)  # a catch-up owed to these
    cycle_ends: Any = None  # the last cycles' ends, workflow time (patch cycle-ends-carried)
    taken: Any = None  # [mailbox chain, number] of the last result taken; when any
    in_flight: Any = None  # [[key, until]] of transitions started (patch in-flight-bound)
    shadow: dict[str, Any] | None = None  # shadow mode's record (`ShadowBook.state`)
    pool_summary: Any = None  # the coordinator's last summary of free machines elsewhere
    builds: Any = None  # its last moves between builds (workflows/shard_builds.py); when any

    # ---- in the snapshot store only (workflows/shard_carry.py `_load`) ----------------------
    pipeline: list[dict[str, Any]] | None = None  # queued starts, `TransitionInput` JSON
    results: list[dict[str, Any]] | None = None  # unfolded results, `TransitionResult` JSON

    @model_serializer(mode="wrap")
    def _present(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Only the keys given, and not None: the dict it replaces had no others."""
        data: dict[str, Any] = handler(self)
        given = self.model_fields_set
        return {k: v for k, v in data.items() if k in given and v is not None}

    def dump(self) -> dict[str, Any]:
        """The state as the dict it replaces: JSON-ready, its keys in that dict's order."""
        return self.model_dump(mode="json")
