"""Health → verify → replace (design §9), on the shard as the workflow drives it: a configured
machine its cluster stops reporting is verified with its provider after 3 missed reports, and
replaced once the provider confirms it dead; one that shows up again is left alone.

The provider's answer is folded in with `Shard.observe`, as `workflows/shard.py` does with the
result of its `provider_get` activity.
"""

from bigfleet.models import MachineState
from bigfleet.shard import Shard
from tests.fleet import DC, bare_metal, configured, need, of_kind, rollup

S = MachineState
KEPT, SILENT, SPARE = "gpu-0000", "gpu-0001", "gpu-0002"


class Cluster:
    """Cluster `a` sending a roll-up of 2 GPU machines with its node health every 10 s."""

    def __init__(self, shard: Shard) -> None:
        self.shard = shard
        self.generation = 0
        self.now = 0.0

    def report(self, *present: str):
        """One roll-up listing `present` as the cluster's nodes, then one shard cycle."""
        self.generation += 1
        self.now += 10
        raw = rollup("a", self.generation, need(2, 1000))
        raw["health"] = {"machine_ids": list(present)}
        assert self.shard.receive(raw, self.now) is None
        return self.shard.cycle(self.now)


def fleet() -> tuple[Shard, Cluster]:
    shard = Shard(0)
    shard.adopt(
        [
            bare_metal(0, S.CONFIGURED, cluster="a"),
            bare_metal(1, S.CONFIGURED, cluster="a"),
            bare_metal(2),  # an idle spare
        ],
        0,
    )
    return shard, Cluster(shard)


def verified(decision) -> list[tuple[str, str, str]]:
    return [(a.machine_id, a.provider, a.cluster) for a in of_kind(decision, "verify")]


def test_a_machine_missing_from_three_reports_is_verified_then_replaced_when_dead():
    shard, cluster = fleet()
    assert verified(cluster.report(KEPT, SILENT)) == []

    # Two missed reports: not yet a suspect.
    for _ in range(2):
        decision = cluster.report(KEPT)
        assert verified(decision) == [] and decision.actions == []

    # The third: its provider is asked. Until it answers, the machine still counts as the
    # cluster's (nothing is replaced on a suspicion).
    third = cluster.report(KEPT)
    assert verified(third) == [(SILENT, DC, "a")]
    assert configured(third) == [] and third.satisfied["a#0"] == 2

    # The provider says the host is dead: the next cycle configures the spare in its place.
    dead = bare_metal(1, S.FAILED)
    assert shard.observe(dead, cluster.now + 1)
    replaced = cluster.report(KEPT)
    assert configured(replaced) == [SPARE]
    assert {a.cluster for a in of_kind(replaced, "configure")} == {"a"}
    assert verified(replaced) == []
    assert replaced.satisfied["a#0"] == 2 and replaced.shortfalls == []


def test_a_machine_that_reports_again_is_no_longer_suspect():
    shard, cluster = fleet()
    for _ in range(3):
        decision = cluster.report(KEPT)
    assert verified(decision) == [(SILENT, DC, "a")]

    # Back in the cluster's report (a report that missed it, not a dead host): no more checks.
    back = cluster.report(KEPT, SILENT)
    assert verified(back) == [] and back.actions == []
    assert shard.inventory.state_of(shard.inventory.row(SILENT)) is S.CONFIGURED
