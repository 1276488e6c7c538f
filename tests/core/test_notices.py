"""Notices and repair (issue 33, bigfleet/notices.py): a provider's warning is acted on before
the machine goes, and repair of unhealthy machines stops itself when too much of a cluster is
unhealthy at once. Worked examples on one shard, as its workflow drives it: machines observed
from their provider, roll-ups with node health, cycles."""

from bigfleet.models import Machine, MachineState, Notice, NoticeKind
from bigfleet.policy import Policy
from bigfleet.shard import Shard
from bigfleet.snapshot import restore_shard, shard_state
from tests.fleet import bare_metal, need, rollup, spot

S = MachineState
K = NoticeKind
NOW = 1_000_000.0


def warned(m: Machine, kind: NoticeKind, deadline: float = 0) -> Machine:
    return m.model_copy(update={"notice": Notice(kind=kind, deadline_unix=int(deadline))})


def actions(decision, kind: str, reason: str | None = None) -> list[str]:
    return sorted(
        getattr(a, "machine_id", "")
        for a in decision.actions
        if a.kind == kind and (reason is None or a.reason == reason)
    )


def spot_fleet(serving: int, free: int) -> Shard:
    """Cluster train holds `serving` configured spot machines and asks for them all; `free`
    speculative spot slots wait."""
    shard = Shard(0, Policy(max_silence_seconds=86400))
    shard.adopt([spot(i, S.CONFIGURED, cluster="train") for i in range(serving)], NOW - 100)
    shard.adopt([spot(i, S.SPECULATIVE) for i in range(serving, serving + free)], NOW - 100)
    assert shard.receive(rollup("train", 1, need(serving, 100)), NOW - 90) is None
    shard.cycle(NOW - 80)
    return shard


def test_an_interruption_warning_drains_with_the_time_left_and_replaces_in_the_same_cycle():
    shard = spot_fleet(serving=4, free=2)
    doomed = spot(1, S.CONFIGURED, cluster="train")
    shard.observe(warned(doomed, K.INTERRUPTION, NOW + 120), NOW - 5)
    decision = shard.cycle(NOW)
    drain = [a for a in decision.actions if a.kind == "drain"]
    assert [(a.machine_id, a.reason, a.grace_seconds) for a in drain] == [
        ("spot-0001", "notice", 120.0)
    ]
    # The replacement starts now, not when the machine is gone.
    assert len(actions(decision, "create")) == 1
    assert shard.notices.acted == {"drain interruption": 1}


def test_a_scheduled_change_far_off_drains_with_the_policys_grace_and_no_budget_holds_it():
    shard = spot_fleet(serving=4, free=2)
    shard.receive({**rollup("train", 2, need(4, 100)),
                   "disruption": {"budgets": [{"machines": "0"}]}}, NOW - 1)  # fmt: skip
    shard.observe(warned(spot(2, S.CONFIGURED, cluster="train"), K.SCHEDULED, NOW + 86400), NOW)
    drain = [a for a in shard.cycle(NOW).actions if a.kind == "drain"]
    assert [(a.machine_id, a.grace_seconds) for a in drain] == [("spot-0002", 600.0)]


def test_a_doomed_idle_machine_is_deleted_and_never_handed_out():
    shard = spot_fleet(serving=2, free=0)
    shard.adopt([spot(9, S.IDLE)], NOW - 50)
    shard.observe(warned(spot(9, S.IDLE), K.INTERRUPTION, NOW + 60), NOW - 1)
    # A new need that the idle machine would have served at once.
    shard.receive(rollup("train", 2, need(3, 100)), NOW - 1)
    decision = shard.cycle(NOW)
    assert actions(decision, "delete", "notice") == ["spot-0009"]
    assert "spot-0009" not in actions(decision, "configure")


def test_a_notice_the_provider_no_longer_lists_has_ended():
    shard = spot_fleet(serving=3, free=0)
    shard.observe(warned(spot(0, S.CONFIGURED, cluster="train"), K.REBALANCE), NOW)
    assert shard.notices.get("spot-0000") is not None
    shard.notices.settle({"spot-0000"}, listed=set())
    assert shard.notices.get("spot-0000") is None


def test_a_rebalance_recommendation_makes_the_machine_the_first_given_up():
    shard = spot_fleet(serving=4, free=0)
    shard.observe(warned(spot(0, S.CONFIGURED, cluster="train"), K.REBALANCE), NOW - 1)
    assert actions(shard.cycle(NOW - 1), "drain") == []  # (no deadline: nothing yet)
    shard.receive(rollup("train", 2, need(3, 100)), NOW)
    assert actions(shard.cycle(NOW), "drain", "excess") == ["spot-0000"]


# ---- repair --------------------------------------------------------------------------------


def racked(clusters: dict[str, int], policy: Policy | None = None) -> Shard:
    """Each cluster's machines configured for it (bare metal), with as many spares idle."""
    shard = Shard(0, policy or Policy(max_silence_seconds=86400))
    i = 0
    for cluster, count in clusters.items():
        shard.adopt([bare_metal(i + k, S.CONFIGURED, cluster=cluster) for k in range(count)],
                    NOW - 100)  # fmt: skip
        i += count
    shard.adopt([bare_metal(i + k, S.IDLE) for k in range(sum(clusters.values()))], NOW - 100)
    for cluster, count in clusters.items():
        assert shard.receive(rollup(cluster, 1, need(count, 100)), NOW - 90) is None
    shard.cycle(NOW - 80)
    return shard


def members(shard: Shard, cluster: str) -> list[str]:
    inv = shard.inventory
    return sorted(
        inv.machine_id(r)
        for r in inv.live_rows().tolist()
        if inv.cluster_of(r) == cluster and inv.state_of(r) is S.CONFIGURED
    )


def test_an_unhealthy_notice_is_repaired_within_max_unhealthy():
    shard = racked({"web": 10})
    for mid in ("gpu-0001", "gpu-0002"):  # 2 of 10: the default 20 % allows 2
        shard.observe(warned(bare_metal(int(mid[-4:]), S.CONFIGURED, cluster="web"),
                             K.UNHEALTHY), NOW - 1)  # fmt: skip
    decision = shard.cycle(NOW)
    assert actions(decision, "drain", "unhealthy") == ["gpu-0001", "gpu-0002"]
    assert len(actions(decision, "configure")) == 2  # replaced from the idle spares
    assert not [s for s in decision.shortfalls if s.repair_held]


def test_more_unhealthy_at_once_than_max_unhealthy_holds_repair_and_escalates():
    shard = racked({"web": 10})
    for i in (1, 2, 3):  # 3 of 10 > 20 %
        shard.observe(warned(bare_metal(i, S.CONFIGURED, cluster="web"), K.UNHEALTHY), NOW - 1)
    decision = shard.cycle(NOW)
    assert actions(decision, "drain") == []
    [held] = [s for s in decision.shortfalls if s.repair_held]
    assert (held.cluster, held.count, held.escalated) == ("web", 3, True)
    assert "max_unhealthy allows 2" in held.profile
    # One comes back healthy: 2 of 10 may be repaired again.
    shard.observe(bare_metal(3, S.CONFIGURED, cluster="web"), NOW + 5)
    decision = shard.cycle(NOW + 10)
    assert actions(decision, "drain", "unhealthy") == ["gpu-0001", "gpu-0002"]
    assert not [s for s in decision.shortfalls if s.repair_held]


def test_a_clusters_own_max_unhealthy_overrides_the_policy():
    shard = racked({"web": 10})
    shard.receive({**rollup("web", 2, need(10, 100)), "disruption": {"max_unhealthy": "3"}}, NOW)
    for i in (1, 2, 3):
        shard.observe(warned(bare_metal(i, S.CONFIGURED, cluster="web"), K.UNHEALTHY), NOW)
    assert len(actions(shard.cycle(NOW), "drain", "unhealthy")) == 3


def health(shard: Shard, cluster: str, generation: int, missing: set[str], now: float) -> None:
    seen = [m for m in members(shard, cluster) if m not in missing]
    raw = {**rollup(cluster, generation, need(len(members(shard, cluster)), 100)),
           "health": {"machine_ids": seen}}  # fmt: skip
    assert shard.receive(raw, now) is None


def test_a_machine_its_cluster_does_not_see_but_its_provider_says_is_up_is_repaired():
    policy = Policy(max_silence_seconds=86400, health_missed_reports=3, repair_after_verifies=2)
    shard = racked({"web": 10}, policy)
    gone = {"gpu-0004"}
    t, verified = NOW, 0
    for g in range(2, 40):
        t += 30
        health(shard, "web", g, gone, t)
        decision = shard.cycle(t)
        if actions(decision, "drain", "unhealthy"):
            break
        for mid in actions(decision, "verify"):
            shard.verified_up(mid)  # the provider answers: CONFIGURED, up
            verified += 1
    assert actions(decision, "drain", "unhealthy") == ["gpu-0004"]
    assert verified == 2
    assert len(actions(decision, "configure")) == 1
    # Drained, it is not handed out again: bare metal waits out of the engine's reach.
    shard.observe(bare_metal(4, S.IDLE), t + 60)
    shard.cycle(t + 70)
    assert "gpu-0004" in shard.notices.quarantined
    assert shard.ownership("gpu-0004") == "IDLE"
    shard.cycle(t + 70 + policy.quarantine_seconds)
    assert "gpu-0004" not in shard.notices.quarantined
    assert shard.inventory.state_of(shard.inventory.row("gpu-0004")) is S.IDLE


def test_an_operator_that_reports_no_node_makes_nothing_be_replaced():
    """A broken operator (or network): every machine is missing from its reports at once."""
    shard = racked({"web": 10, "batch": 5})
    members_web = set(members(shard, "web"))
    t = NOW
    for g in range(2, 30):
        t += 30
        health(shard, "web", g, members_web, t)  # reports no node at all
        health(shard, "batch", g, set(), t)
        decision = shard.cycle(t)
        for mid in actions(decision, "verify"):
            shard.verified_up(mid)
        assert actions(decision, "drain") == []
    held = [s for s in decision.shortfalls if s.repair_held]
    assert [(s.cluster, s.count) for s in held] == [("web", 10)]
    assert members(shard, "web") == sorted(members_web)  # every machine still serves web


def test_notices_and_holds_survive_a_snapshot():
    shard = racked({"web": 10})
    for i in (1, 2, 3):
        shard.observe(warned(bare_metal(i, S.CONFIGURED, cluster="web"), K.UNHEALTHY), NOW - 1)
    shard.cycle(NOW)
    again = restore_shard(shard_state(shard), Shard(0, shard.policy))
    assert again.notices.get("gpu-0002") == shard.notices.get("gpu-0002")
    assert set(again.notices.holds) == {"web"}
    assert again.notices.view("web", again.inventory)["repair_held"]["unhealthy"] == 3
