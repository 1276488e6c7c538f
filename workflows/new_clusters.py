"""Roll-ups of clusters a shard does not serve yet wait until the coordinator says they are its
own (issue 30). A helper object of the shard workflow (`ShardWorkflow.new_clusters`).

Anyone who can write to the namespace can signal a shard a roll-up of any cluster, and a
cluster's shard is the coordinator's to choose (`assign_cluster`; the gateway and `bigfleet
rollup send --direct` ask it first). So a roll-up of a cluster the shard already serves (its
needs table has it, or it holds machines configured for it) is applied at once, as always;
one of any other cluster waits here, and once a cycle the shard asks whose they are (the
`cluster_owners` activity, which asks the coordinator's `cluster_owners` update): this
shard's are applied, the others refused and recorded like any bad input. A cluster nobody has
asked about is assigned on that question, as `assign_cluster` would (home, else least-loaded;
this shard first among equally loaded ones). With a deployment config that names operators, a
cluster it gives no operator endpoint is refused before the coordinator is asked (the
gateway's own check; workers/worker.py `known_cluster`).

No coordinator running (none started yet, or ended and not back): they are applied. The shard
runs alone then (static stability); there is nobody to ask, and the coordinator that starts
next learns the clusters the shards serve before it assigns any (`shard_clusters`), so the
cluster stays this shard's. A coordinator that does not answer (still learning, wedged) is
asked again `ASK_AGAIN_SECONDS` later; the roll-ups wait meanwhile.

Waiting roll-ups live in the workflow's `early_rollups` (outside reading or writing the
snapshot it holds nothing else), so a continue-as-new carries them to the next run, which
judges them again; bounded in count (one question's worth) and bytes, one per cluster, a newer
generation replacing an older one.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from bigfleet.cluster_questions import wants_of
    from bigfleet.coordinator import MAX_ASKED, NO_SHARD, ClusterOwners, ClusterQuestion
    from bigfleet.inputs import Rejected, clip, json_size
    from bigfleet.models import ClusterCapacityNeeds, from_wire
    from bigfleet.shard import Shard
    from workflows.guard import Guard

PATCH = "rollups-of-assigned-clusters"  # runs begun before take every cluster's roll-ups
WANTS_PATCH = "cluster-question-wants"  # runs begun before ask with the names alone
HELD_CLUSTERS = MAX_ASKED
# (At least one roll-up of the largest size waits; below EARLY_ROLLUP_BYTES, which bounds what
# waits in all, these and those that come while the snapshot is written: a continue-as-new
# carries them in its input.)
HELD_BYTES = 400_000
ASK_TIMEOUT = timedelta(seconds=12)  # two calls of 5 s at most (activities/coordination.py)
ASK_WAIT_SECONDS = 2.0  # the cycle waits this long for the answer, at most; a later one
# is applied at a next cycle
ASK_AGAIN_SECONDS = 10.0


class Owner(Protocol):
    """What `NewClusters` needs of the shard it serves."""
    shard: Shard
    guard: Guard
    early_rollups: list[dict[str, Any]]
    early_bytes: int

    def _note_failure(self, what: str, err: ActivityError) -> None: ...


class NewClusters:
    """Roll-ups of clusters this shard does not serve yet, held until the coordinator says whose
    they are; bounded in count and bytes (see the module)."""
    def __init__(self, owner: Owner) -> None:
        self.owner = owner
        self.asking: workflow.ActivityHandle[ClusterOwners] | None = None
        self.asked: set[str] = set()
        self.ask_after = 0.0

    def serves(self, cluster: str) -> bool:
        """A cluster in the needs table, or one the shard has configured machines for."""
        shard = self.owner.shard
        return (
            shard.needs.last_seen(cluster) is not None
            or shard.inventory.clusters.get(cluster) is not None
        )

    def held(self, raw: dict[str, Any]) -> bool:
        """Hold a roll-up of a cluster the shard does not serve: True if held (or dropped as
        older than the one waiting), False if it is to be judged now (it is invalid: refused
        at once as ever; or the run began before this check)."""
        try:
            rollup = from_wire(ClusterCapacityNeeds, raw)
        except ValueError:
            return False
        if not workflow.patched(PATCH):
            return False
        self._hold(raw, rollup)
        return True

    def _hold(self, raw: dict[str, Any], rollup: ClusterCapacityNeeds) -> None:
        owner = self.owner
        waiting = owner.early_rollups
        if not waiting:
            owner.early_bytes = 0
        size = json_size(raw)
        for i, other in enumerate(waiting):
            if other.get("cluster") != rollup.cluster:
                continue
            if rollup.generation <= other.get("generation", -1):
                return  # a replay, or older than the one waiting: that one stands
            before = json_size(other)
            if owner.early_bytes - before + size > HELD_BYTES:
                raise self._full(rollup.cluster)
            waiting[i] = raw
            owner.early_bytes += size - before
            return
        if len(waiting) >= HELD_CLUSTERS or owner.early_bytes + size > HELD_BYTES:
            raise self._full(rollup.cluster)
        waiting.append(raw)
        owner.early_bytes += size

    def _full(self, cluster: str) -> Rejected:
        owner = self.owner
        return Rejected(
            f"rollup: cluster {clip(cluster, 80)!r} is not one shard {owner.shard.id} serves, "
            f"and {len(owner.early_rollups)} such roll-ups ({owner.early_bytes} bytes) wait "
            f"for the coordinator's answer already; send it again"
        )

    async def settle(self, wait: bool = True, ask: bool = True) -> None:
        """The loop's step: ask whose the waiting roll-ups' clusters are (one question at a
        time), and apply or refuse them by the answer. `wait=False` (a shard whose cycle never
        waits: workflows/outbox.py) looks for the answer at the next cycles instead; `ask=False`
        (a quiet cycle before a continue-as-new) applies an answer that came, asks nothing."""
        owner = self.owner
        if not owner.early_rollups or not workflow.patched(PATCH):
            return
        now = workflow.now().timestamp()
        if self.asking is None:
            if now < self.ask_after or not ask:
                return
            clusters = sorted({str(raw["cluster"]) for raw in owner.early_rollups})[:MAX_ASKED]
            self.asked = set(clusters)
            question = ClusterQuestion(shard=owner.shard.id, clusters=clusters)
            if workflow.patched(WANTS_PATCH):  # (where their capacity is counts: issue 45)
                question = question.model_copy(update={"wants": self._wants(clusters)})
            self.asking = workflow.start_activity(
                "cluster_owners",
                question,
                result_type=ClusterOwners,
                start_to_close_timeout=ASK_TIMEOUT,
                retry_policy=RetryPolicy(maximum_attempts=1),
            )
        asking = self.asking
        if not wait:
            if not asking.done():
                return  # (no timer: looked at again next cycle)
        else:
            try:
                await workflow.wait_condition(asking.done, timeout=ASK_WAIT_SECONDS)
            except TimeoutError:
                # (An activation that brings the answer and the timer together, e.g. a task
                # retried after a failure, may raise here with the answer in: applied all the
                # same.)
                if not asking.done():
                    return  # still out: applied at a next cycle
        self.asking = None
        try:
            answer = asking.result()
        except ActivityError as err:
            owner._note_failure("asking the coordinator whose new clusters are", err)
            self.ask_after = workflow.now().timestamp() + ASK_AGAIN_SECONDS
            return
        self._apply(answer)

    def _wants(self, clusters: list[str]) -> dict[str, list[Any]]:
        """The asked clusters' needs' requirements (`ClusterQuestion.wants`), from the
        roll-ups waiting (validated when they were held)."""
        asked, out = set(clusters), {}
        for raw in self.owner.early_rollups:
            if raw.get("cluster") in asked:
                out[str(raw["cluster"])] = wants_of(from_wire(ClusterCapacityNeeds, raw).needs)
        return out

    def _apply(self, answer: ClusterOwners) -> None:
        owner = self.owner
        me = owner.shard.id
        keep: list[dict[str, Any]] = []
        take: list[dict[str, Any]] = []
        for raw in owner.early_rollups:
            cluster = str(raw["cluster"])
            shard = answer.owners.get(cluster)
            if cluster not in self.asked:
                keep.append(raw)  # came after the question: the next one
            elif cluster in answer.refused:
                owner.guard.reject(
                    "rollup", f"rollup: cluster {clip(cluster, 80)!r}: {answer.refused[cluster]}"
                )
            elif shard == me or (not answer.running and shard is None):
                take.append(raw)
            elif shard is None:
                keep.append(raw)  # (not in the answer: asked again)
            else:
                whose = (
                    f"the coordinator assigns it to shard {shard}"
                    if shard != NO_SHARD
                    else "the coordinator has no room for it"
                )
                owner.guard.reject(
                    "rollup",
                    f"rollup: cluster {clip(cluster, 80)!r} is not assigned to shard {me} "
                    f"({whose}); senders ask the coordinator (assign_cluster) for its shard",
                )
        owner.early_rollups = keep
        owner.early_bytes = sum(json_size(raw) for raw in keep)
        self.asked = set()
        now = workflow.now().timestamp()
        for raw in take:
            reason = owner.shard.receive(raw, now)
            if reason:
                owner.guard.reject("rollup", reason)
