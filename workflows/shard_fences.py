"""A shard refused as stale by a provider takes a new epoch that supersedes the kept one, a few
times an hour at most, then escalates (issue 44; the rule is bigfleet/fences.py `FenceBook`).
Called once a cycle by the shard workflow, after the results are folded in."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from bigfleet.shard import Shard

# Runs begun before re-epoched never (their transitions failed on a refusal as stale and told
# the shard nothing, so their books stay empty; the marker is for the decision itself).
REEPOCH = "fence-reepoch"


def supersede_fences(shard: Shard, now: float) -> None:
    """Take a new epoch if a provider's refusal calls for one; count it, and set the gauge of
    providers escalated (labels: shard, provider: both bounded)."""
    book = shard.fences
    if not book or not workflow.patched(REEPOCH):
        return
    was = dict(book.escalated)
    before = {p: len(t) for p, t in book.reepochs.items()}
    new = book.reepoch(shard.epoch, now)
    meter = workflow.metric_meter().with_additional_attributes({"shard": str(shard.id)})
    if new is not None:
        workflow.logger.warning(
            "shard %s: refused as stale by %s; epoch %s -> %s",
            shard.id,
            ", ".join(p for p, t in book.reepochs.items() if len(t) > before.get(p, 0)),
            shard.epoch,
            new,
        )
        shard.epoch = new
        counter = meter.create_counter(
            "bigfleet_fence_reepochs_total", "new epochs taken after a refusal as stale"
        )
        for p, times in book.reepochs.items():
            if len(times) > before.get(p, 0):
                counter.add(1, {"provider": p})
    gauge = meter.create_gauge(
        "bigfleet_fence_escalated",
        "1 while a provider keeps refusing the shard as stale past its re-epochs",
    )
    for p in sorted(set(was) | set(book.escalated)):
        if p in book.escalated and p not in was:
            kept, _ = book.escalated[p]
            workflow.logger.error(
                "shard %s: provider %s still refuses it as stale (keeps epoch %s, ours %s) "
                "after %d new epochs within the hour: escalated, not retried "
                "(bigfleet provider fence show)",
                shard.id,
                p,
                kept,
                shard.epoch,
                len(book.reepochs.get(p, [])),
            )
        gauge.set(int(p in book.escalated), {"provider": p})
