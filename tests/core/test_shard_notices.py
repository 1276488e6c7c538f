"""What a cycle tells the cluster operators (design §6 step 7): at fleet scale one cycle can
announce tens of thousands of machines, so a cluster's news may come in chunks; together the
chunks say exactly what one update would."""

from bigfleet.models import MachineState
from bigfleet.shard import Shard
from tests.fleet import bare_metal, many

S = MachineState


def _need(cluster: str, generation: int, count: int) -> dict:
    need = {"requirements": [], "priority": 100, "count": count}
    return {"cluster": cluster, "generation": generation, "needs": [need]}


def test_a_cycles_news_in_chunks_covers_every_machine_once():
    shard = Shard(0)
    shard.adopt(many(bare_metal, 40, state=S.IDLE), 0)
    shard.receive(_need("a", 1, 23), 0)
    shard.cycle(1)  # 23 configures for a
    for m in shard.inventory.live_rows().tolist():  # (their configures done)
        if shard.inventory.state_of(m) is S.CONFIGURING:
            shard.inventory.move(m, S.CONFIGURED, 2, cluster="a")
    shard.receive(_need("a", 2, 0), 3)
    shard.receive(_need("b", 1, 11), 3)
    decision = shard.cycle(4)

    whole = list(shard.operator_updates(decision))
    parts = list(shard.operator_updates(decision, 5))

    assert sum(len(u.upcoming) for u in whole) == 11  # b: idle machines configured
    assert sum(len(u.reclaims) for u in whole) == 23  # a: every machine drained
    for one in whole:
        mine = [u for u in parts if u.cluster == one.cluster]
        assert all(len(u.upcoming) + len(u.reclaims) <= 5 for u in mine)
        assert [n for u in mine for n in u.upcoming] == one.upcoming
        assert [r for u in mine for r in u.reclaims] == one.reclaims
        assert all(u.available == one.available for u in mine)
    assert {u.cluster for u in parts} == {"a", "b"}


def test_news_of_a_machine_the_shard_does_not_hold_is_refused():
    """An action naming a machine the inventory does not have is a bug, not news to pass on."""
    import pytest

    from bigfleet.engine import Decision
    from bigfleet.inventory import MachineNotFound
    from bigfleet.models import ConfigureAction

    shard = Shard(0)
    shard.adopt(many(bare_metal, 2, state=S.IDLE), 0)
    ghost = ConfigureAction(
        provider="dc", machine_id="nowhere-1", cluster="a", need="a/100", priority=100
    )
    with pytest.raises(MachineNotFound, match="nowhere-1"):
        list(shard.operator_updates(Decision(actions=[ghost])))
