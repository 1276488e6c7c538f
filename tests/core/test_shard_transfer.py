"""A shard's side of cross-shard preemption: drained machines leave the engine's reach until
released (or the transfer is cancelled), and are owned by the shard throughout."""

from bigfleet.models import MachineState
from bigfleet.shard import Shard
from bigfleet.synthetic import OFFERS, machine

GPU = next(o for o in OFFERS if o.instance_type == "gpu-8xh100")
REQ = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["gpu-8xh100"]}]
S = MachineState


def donor() -> Shard:
    shard = Shard(0)
    shard.adopt([machine(f"g-{i}", GPU, S.CONFIGURED, "research") for i in range(10)], 0)
    need = {"requirements": REQ, "priority": 100_000, "count": 10}
    shard.receive({"cluster": "research", "generation": 1, "needs": [need]}, 0)
    shard.cycle(10)
    return shard


def drained(shard: Shard, ids: list[str], now: float) -> None:
    """The provider reports the drains done."""
    for mid in ids:
        record = shard.inventory.machine(shard.inventory.row(mid))
        shard.observe(record.model_copy(update={"state": S.IDLE, "cluster": None}), now)


def test_drained_machines_wait_out_of_the_engines_reach_until_released():
    shard = donor()
    shard.drain_for_transfer(["g-0", "g-1"], 20)
    drained(shard, ["g-0", "g-1"], 30)
    decision = shard.cycle(40)
    # research is short of two machines, but the two idle ones are not given back to it
    assert not [a for a in decision.actions if a.kind == "configure"]
    assert shard.machines_by_state()["IDLE"] == 2  # still owned, counted idle
    released = shard.release(["g-0", "g-1"])
    assert [m.id for m in released] == ["g-0", "g-1"]
    assert sum(shard.machines_by_state().values()) == 8


def test_a_cancelled_transfer_gives_the_machines_back_to_the_shard():
    shard = donor()
    shard.drain_for_transfer(["g-0"], 20)
    drained(shard, ["g-0"], 30)
    shard.cancel_transfer(["g-0"], 35)
    decision = shard.cycle(40)
    assert [a.machine_id for a in decision.actions if a.kind == "configure"] == ["g-0"]
    assert sum(shard.machines_by_state().values()) == 10


def test_a_transfer_drain_result_after_an_older_configure_result_still_hands_the_machine_off():
    """Results can come back twice or out of order (a mailbox answering a take again). An old
    CONFIGURED result folded after the transfer's drain began put the machine back to
    CONFIGURED, and the drain's IDLE then failed the shard's workflow task on an illegal
    CONFIGURED -> IDLE move, again at every retry."""
    shard = donor()
    shard.drain_for_transfer(["g-0"], 20)
    configured = shard.inventory.machine(shard.inventory.row("g-1"))
    shard.observe(configured.model_copy(update={"id": "g-0"}), 21)  # (the old result)
    drained(shard, ["g-0"], 22)
    assert "g-0" in shard.handoff and "g-0" not in shard.transfer_out
    assert shard.inventory.ids.find("g-0") < 0
