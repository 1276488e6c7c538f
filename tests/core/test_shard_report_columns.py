"""The shard's 30-second report is built from the inventory's columns (one machine record per
profile, ids for the rest); it must say exactly what grouping a machine record per offered
machine (`ShardReport.of`) says, so the coordinator plans the same moves."""

import random

from bigfleet.models import MachineState
from bigfleet.reports import Preemptible, ShardReport
from bigfleet.shard import Shard
from bigfleet.synthetic import OFFERS, fleet, machine, rollups


def _from_records(shard: Shard, r: ShardReport) -> ShardReport:
    inv = shard.inventory

    def record(mid: str):
        return inv.machine(inv.row(mid))

    return ShardReport.of(
        r.shard,
        r.at,
        idle=[record(mid) for g in r.idle for mid in g.ids],
        speculative=[record(mid) for g in r.speculative for mid in g.ids],
        preemptible=[
            Preemptible(
                machine=record(mid),
                priority=g.priority,
                cluster=g.cluster,
                reclamation_penalty=g.reclamation_penalty,
            )
            for g in r.preemptible
            for mid in g.ids
        ],
        machines=r.machines,
        clusters=r.clusters,
        shortfalls=r.shortfalls,
        elastic=r.elastic,
        holds=r.holds,
        demand=r.demand,
    )


def _busy_shard() -> Shard:
    shard = Shard(3)
    shard.adopt(fleet(random.Random(5), 400, 4), 0)
    cpu = next(o for o in OFFERS if o.instance_type == "cpu-64")
    shard.adopt([machine(f"spec-{i}", cpu, MachineState.SPECULATIVE) for i in range(40)], 0)
    for r in rollups(random.Random(6), 4, 3, 40):
        shard.receive(r, 0)
    for t in (10, 20, 30):
        shard.cycle(t)
    return shard


def test_the_column_report_is_the_record_report():
    shard = _busy_shard()
    for sample in (3, 32, 256):
        r = shard.report(40, sample=sample)
        assert r.idle or r.speculative or r.preemptible
        assert r.model_dump(mode="json") == _from_records(shard, r).model_dump(mode="json")


def test_each_profile_record_describes_every_machine_offered_under_it():
    shard = _busy_shard()
    inv = shard.inventory
    r = shard.report(40)
    groups = [*r.idle, *r.speculative, *r.preemptible]
    assert len({g.profile for g in groups}) == len(r.profiles)
    for g in groups:
        template = r.profiles[g.profile]
        for mid in g.ids:
            m = inv.machine(inv.row(mid))
            assert (m.instance_type, m.zone, m.capacity_type, m.labels) == (
                template.instance_type, template.zone, template.capacity_type, template.labels
            )


def test_a_report_after_a_change_offers_what_the_shard_holds_now():
    shard = _busy_shard()
    first = shard.report(40)
    offered = [mid for g in first.speculative for mid in g.ids]
    assert shard.report(70).speculative == first.speculative  # nothing changed: same offers
    shard.release(offered[:5])
    later = shard.report(100)
    assert [mid for g in later.speculative for mid in g.ids] == offered[5:]
    assert later.model_dump(mode="json") == _from_records(shard, later).model_dump(mode="json")


def test_a_report_without_samples_still_says_what_the_shard_has_and_misses():
    """What a shard alone sends (the simulator's coordinator has nobody to move machines to)."""
    shard = _busy_shard()
    full, bare = shard.report(40), shard.report(40, sample=0)
    assert (bare.idle, bare.speculative, bare.preemptible, bare.profiles) == ([], [], [], [])
    assert (bare.machines, bare.clusters, bare.shortfalls) == (
        full.machines, full.clusters, full.shortfalls
    )


def test_a_machine_that_left_is_never_offered_again_even_when_its_row_is_reused():
    """A shard hands an idle machine over and adopts another, which takes the freed row with
    the same profile: the next report offers the newcomer, not the machine gone (the
    coordinator would move a machine the shard no longer has)."""
    cpu = next(o for o in OFFERS if o.instance_type == "cpu-64")
    shard = Shard(4)
    shard.adopt([machine(f"a-{i}", cpu, MachineState.IDLE, rack="r") for i in range(3)], 0)
    shard.cycle(10)
    assert sorted(shard.report(10).idle[0].ids) == ["a-0", "a-1", "a-2"]
    shard.release(["a-1"])
    shard.adopt([machine("b-0", cpu, MachineState.IDLE, rack="r")], 11)
    shard.cycle(20)
    assert sorted(shard.report(20).idle[0].ids) == ["a-0", "a-2", "b-0"]
