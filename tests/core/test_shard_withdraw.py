"""A create the provider refused for want of capacity (QuotaExhausted: its quota shrank, or EC2
answered InsufficientInstanceCapacity) comes back to the shard as a transition result naming the
machines it no longer offers. The shard lets go of those and plans the need on the next-cheapest
capacity in the very next cycle; the machines the refused batch never reached are its to use
again."""

from activities.wire import ShardConfig, TransitionResult
from bigfleet.models import MachineState, Transition
from bigfleet.shard import Shard
from tests.fleet import created, need, on_demand, rollup
from workflows.actions import TransitionInputs

S = MachineState


def test_machines_refused_for_want_of_capacity_are_let_go_and_the_need_planned_elsewhere():
    shard = Shard(0)
    shard.adopt([on_demand(i, price=1.0 + i) for i in range(5)], 0)
    assert shard.receive(rollup("a", 1, need(2, 100)), 0) is None
    first = created(shard.cycle(1))
    assert first == ["od-0000", "od-0001"]  # the two cheapest

    refused = TransitionResult(
        transition=Transition.CREATE,
        machines=[on_demand(0, price=1.0)],  # never reached: the provider still offers it
        unavailable=["od-0001"],  # no longer offered
        cluster="a",
        priority=100,
    )
    cfg = ShardConfig(shard=0, providers=["aws-eu-west-1"])
    follow = TransitionInputs(shard, cfg).fold([refused], 2)

    inv = shard.inventory
    assert follow == []  # nothing to configure: nothing was created
    assert inv.ids.find("od-0001") < 0
    assert inv.state_of(inv.row("od-0000")) is S.SPECULATIVE
    assert shard.refusals == {}  # not the operator refusing to bootstrap: no back-off
    again = created(shard.cycle(3))
    assert sorted(again) == ["od-0000", "od-0002"]  # the next-cheapest instead of the lost one


def test_only_machines_waiting_to_be_created_are_let_go():
    shard = Shard(0)
    shard.adopt([on_demand(0, S.IDLE), on_demand(1, S.CREATING)], 0)
    assert shard.withdraw(["od-0000", "od-0001", "od-9999"]) == 1
    inv = shard.inventory
    assert inv.state_of(inv.row("od-0000")) is S.IDLE  # a running machine is never dropped
    assert inv.ids.find("od-0001") < 0
