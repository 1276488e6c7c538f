"""Seed §11's fencing of coordinator instructions, for one shard: the highest coordinator term
it has seen, the sequence numbers seen in that term, and the first outcomes of instructions
that hand machine records over. A helper object of the shard workflow; its state crosses
continue-as-new with the shard's (`state()`)."""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import ApplicationError

from activities.wire import Instruction, SplitInstruction, TakeIn
from bigfleet.epochs import FUTURE_MS
from bigfleet.shard_state import ShardState

SEEN_KEPT = 1000
# First outcomes of instructions that hand machine records over (release, hand_out, split_out),
# for a retry that arrives after a continue-as-new (Temporal deduplicates update ids within one
# run only). Bounded by machine records, since it crosses continue-as-new with the shard.
OUTBOX_RECORDS = 500
FORGED_KEPT = 16  # terms the coordinator disowned, refused at once when sent again

AnyInstruction = Instruction | SplitInstruction | TakeIn


class Fencing:
    """One shard's fencing of coordinator instructions (design §11): the term, the seqs seen
    in it, the terms confirmed and disowned, and first outcomes kept for retries."""

    def __init__(self, state: ShardState | None = None) -> None:
        """The fencing the last run carried (`state`), or none yet."""
        self.term = state.term if state else 0
        # Sequence numbers seen in the current term: sagas run side by side, so instructions
        # may arrive out of order; a seq seen before is a replay.
        self.seen: list[int] = list(state.seen) if state else []
        # [term, seq, update, out]
        self.outbox: list[list[Any]] = list(state.outbox) if state else []
        # A term above `term` is taken only once the running coordinator confirmed it
        # (`verified`: the highest confirmed); terms it disowned are refused on sight.
        self.verified = (state.verified_term or 0) if state else 0
        forged = (state.forged_terms or []) if state else []
        self.forged: list[int] = list(forged)[-FORGED_KEPT:]

    def state(self) -> dict[str, Any]:
        """Its keys of the `ShardState` the next run starts from."""
        state = {"term": self.term, "seen": self.seen[-SEEN_KEPT:], "outbox": self.outbox}
        # Only when set: a state's size decides how many parts its snapshot takes, and a run
        # that never checked a term must carry the very state it carried before (replay).
        if self.verified:
            state["verified_term"] = self.verified
        if self.forged:
            state["forged_terms"] = self.forged
        return state

    def unverified(self, ins: AnyInstruction) -> bool:
        """A term above every term this shard has seen or had confirmed: it must be the
        running coordinator's before the shard takes it."""
        return ins.term > max(self.term, self.verified)

    def confirm(self, term: int) -> None:
        """The running coordinator confirmed `term`: taken from now on."""
        self.verified = max(self.verified, term)

    def disown(self, term: int) -> None:
        """The running coordinator disowned `term`: refused on sight from now on."""
        if term not in self.forged:
            self.forged = [*self.forged, term][-FORGED_KEPT:]

    def replay(self, ins: AnyInstruction) -> bool:
        """Whether this instruction (its term and seq) was carried out already."""
        return ins.term == self.term and ins.seq in self.seen

    def check(
        self,
        ins: AnyInstruction,
        touched: int,
        shard: int,
        size: int,
        max_share: float,
        now_ms: float,
        any_term: bool = False,
    ) -> bool:
        """Refuse a stale or oversized instruction (`ApplicationError`). True if it is a
        replay: carried out before, it is answered with its first outcome and checked no
        further. `any_term`: a compensation that only gives the shard back what is its own,
        accepted from any term (a newer coordinator must not strand machines an older one's
        saga was returning). `size`: the shard's machines, of which `max_share` may move."""
        if self.replay(ins):
            return True
        # Terms are the coordinator's start times in milliseconds: one from beyond this
        # shard's clock was never issued, and taking it would fence out the real coordinator.
        if ins.term > now_ms + FUTURE_MS:
            raise ApplicationError(
                f"term: {ins.term} is not a coordinator term (from the future)",
                type="StaleInstruction",
                non_retryable=True,
            )
        if ins.term in self.forged and not any_term:
            raise ApplicationError(
                f"term: {ins.term} is not the running coordinator's term",
                type="StaleInstruction",
                non_retryable=True,
            )
        if ins.term < self.term and not any_term:
            raise ApplicationError(
                f"stale instruction from coordinator term {ins.term}: shard {shard} "
                f"has seen term {self.term}",
                type="StaleInstruction",
                non_retryable=True,
            )
        limit = max(1, int(size * max_share))
        if touched > limit:
            raise ApplicationError(
                f"instruction touches {touched} machines, more than {max_share:.0%} of shard "
                f"{shard}'s {size} (limit {limit})",
                type="InstructionTooLarge",
                non_retryable=True,
            )
        return False

    def accept(self, ins: AnyInstruction, take_term: bool = True) -> bool:
        """Record the instruction's (term, seq). True if it is a replay (do nothing again).
        `take_term=False`: a compensation accepted from any term, which moves no term (it
        proves nothing about who sent it)."""
        if self.replay(ins):
            return True
        if ins.term > self.term and take_term:
            self.term, self.seen = ins.term, []
        if ins.term == self.term:
            self.seen.append(ins.seq)
            del self.seen[:-SEEN_KEPT]
        return False

    def remember(self, ins: Instruction | SplitInstruction, update: str, out: Any) -> Any:
        """Keep an instruction's first outcome (bounded in records, oldest dropped); `out`."""
        self.outbox.append([ins.term, ins.seq, update, out])
        records = 0
        for i in range(len(self.outbox) - 1, -1, -1):
            entry = self.outbox[i][3]
            records += len(entry) if isinstance(entry, list) else len(entry["needs"])
            if records > OUTBOX_RECORDS and i < len(self.outbox) - 1:
                del self.outbox[: i + 1]
                break
        return out

    def first_outcome(self, ins: Instruction | SplitInstruction, update: str) -> Any:
        """The outcome a replayed instruction had; refused if it is no longer kept."""
        for term, seq, kind, out in self.outbox:
            if (term, seq, kind) == (ins.term, ins.seq, update):
                return out
        raise ApplicationError(
            f"instruction (term {ins.term}, seq {ins.seq}) was already carried out and its "
            "outcome is no longer kept",
            type="ReplayedInstruction",
            non_retryable=True,
        )

    def released_here(self, ins: Instruction) -> bool:
        """Every machine of `ins` is one this shard released in that coordinator term."""
        ours = {
            m["id"]
            for term, _, kind, out in self.outbox
            if kind == "release" and term == ins.term
            for m in out
        }
        return bool(ins.machines) and all(m.id in ours for m in ins.machines)
