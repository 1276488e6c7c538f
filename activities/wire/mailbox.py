"""What crosses to a shard's mailbox workflow (workflows/mailbox.py): its id, its input, a
shard's take of the transition results it holds, and the batch it answers with."""

from __future__ import annotations

from pydantic import Field

from .base import Model
from .shard import shard_workflow_id
from .transitions import TransitionResult


def mailbox_workflow_id(shard: int) -> str:
    """The workflow that holds a shard's transition results until it takes them."""
    return f"{shard_workflow_id(shard)}-mailbox"



class MailboxInput(Model):
    """A shard's mailbox (workflows/mailbox.py): its shard, and the results it still holds
    (carried across its continue-as-new)."""

    shard: int = Field(ge=0)
    results: list[TransitionResult] = Field(default_factory=list)
    first: int = Field(default=0, ge=0)  # the number of results[0] (they are numbered in order)
    # The mailbox's chain of runs: its first run's id, carried on ("": this is the first run).
    chain: str = Field(default="", max_length=200)


class MailboxTake(Model):
    """A shard's take from its mailbox (`take_after`): it has every result up to number
    `after` of the mailbox `chain` (its first run's id), which lets them go and answers those
    that follow. Taking again with the same `after` answers them again: a batch whose answer
    was lost (a worker killed as it came back) is not lost with it."""

    shard: int = Field(ge=0)
    after: int = Field(default=-1, ge=-1)
    chain: str = Field(default="", max_length=200)
    # Unix time the take is answered at (the shard's next cycle; 0: at once): its answer wakes
    # the shard then (workflows/shard_results.py `_collect`).
    at: float = 0.0


class TakenResults(Model):
    """A batch from the mailbox: `results` numbered from `first`, of the mailbox `chain`."""

    results: list[TransitionResult] = Field(default_factory=list)
    first: int = Field(default=0, ge=0)
    chain: str = ""

