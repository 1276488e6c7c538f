"""A shard revived from its last snapshot reconciles its inventory with the providers' `list`:
owned machines take the provider's state, owned machines no provider lists are given up, and
machines it does not own are never adopted (another shard owns them)."""

from bigfleet.models import MachineState
from bigfleet.shard import Shard
from bigfleet.snapshot import restore_shard, shard_state
from bigfleet.synthetic import OFFERS, machine

GPU = next(o for o in OFFERS if o.instance_type == "gpu-8xh100")
S = MachineState


def restored(shard: Shard) -> Shard:
    """The shard as a revived run sees it: rebuilt from the snapshot of its last run."""
    return restore_shard(shard_state(shard), Shard(shard.id))


def test_a_restored_shard_takes_the_providers_word_for_what_it_owns():
    before = Shard(0)
    before.adopt(
        [
            machine("g-0", GPU, S.IDLE),
            machine("g-1", GPU, S.CONFIGURING, "research"),
            machine("g-2", GPU, S.CONFIGURED, "research"),
            machine("g-3", GPU, S.IDLE),
        ],
        0,
    )
    shard = restored(before)
    listing = [
        machine("g-0", GPU, S.CONFIGURED, "research"),  # configured after the snapshot
        machine("g-1", GPU, S.CONFIGURED, "research"),  # its configure finished
        machine("g-2", GPU, S.CONFIGURED, "research"),  # as it was
        # g-3: no provider lists it any more
        machine("x-9", GPU, S.IDLE),  # another shard's machine
    ]
    summary = shard.reconcile_listing(listing, 100)
    assert summary == {"listed": 4, "changed": 2, "gone": 1, "not_mine": 1}
    inv = shard.inventory
    states = {inv.machine_id(r): inv.state_of(r) for r in inv.live_rows().tolist()}
    assert states == {"g-0": S.CONFIGURED, "g-1": S.CONFIGURED, "g-2": S.CONFIGURED}
    assert {inv.cluster_of(inv.row(m)) for m in states} == {"research"}
    # Reconciling again with the same listing changes nothing.
    assert shard.reconcile_listing(listing, 101) == {
        "listed": 4,
        "changed": 0,
        "gone": 0,
        "not_mine": 1,
    }


def test_a_restored_transfer_follows_the_provider():
    before = Shard(0)
    before.adopt([machine(f"g-{i}", GPU, S.CONFIGURED, "research") for i in range(4)], 0)
    before.drain_for_transfer(["g-0", "g-1", "g-2"], 10)
    shard = restored(before)
    assert shard.transfer_out == {"g-0", "g-1", "g-2"}
    listing = [
        machine("g-0", GPU, S.IDLE),  # drained: waits in the handoff for its release
        machine("g-1", GPU, S.DRAINING, "research"),  # still draining: still leaving
        machine("g-2", GPU, S.CONFIGURED, "research"),  # its drain never started: it stays
        machine("g-3", GPU, S.CONFIGURED, "research"),
    ]
    shard.reconcile_listing(listing, 20)
    assert set(shard.handoff) == {"g-0"}
    assert shard.transfer_out == {"g-1"}
    assert shard.machines_by_state() == {
        **{s.value: 0 for s in S},
        "IDLE": 1,
        "DRAINING": 1,
        "CONFIGURED": 2,
    }
    # A handed-off machine no provider lists any more is no longer the shard's either.
    shard.reconcile_listing(listing[1:], 30)
    assert shard.handoff == {}
    assert sum(shard.machines_by_state().values()) == 3


def test_a_shards_ids_are_read_page_by_page_each_once():
    """What `provider_capacity` and `owned_elsewhere` read from a shard by queries, a page at a
    time: every machine it holds once (the drained hand-offs with the last page), and its
    speculative machines of one provider — not another provider's, not other states."""
    m6i = next(o for o in OFFERS if o.instance_type == "m6i.xlarge")
    shard = Shard(0)
    shard.adopt([machine(f"s-{i:03d}", m6i, S.SPECULATIVE) for i in range(250)], 0)
    shard.adopt([machine(f"i-{i:03d}", m6i, S.IDLE) for i in range(7)], 0)
    shard.adopt([machine(f"g-{i}", GPU, S.CONFIGURED, "research") for i in range(4)], 0)
    shard.drain_for_transfer(["g-0"], 1)
    shard.reconcile_listing(
        [machine("g-0", GPU, S.IDLE)]
        + [machine(f"g-{i}", GPU, S.CONFIGURED, "research") for i in range(1, 4)]
        + [machine(f"s-{i:03d}", m6i, S.SPECULATIVE) for i in range(250)]
        + [machine(f"i-{i:03d}", m6i, S.IDLE) for i in range(7)],
        2,
    )
    assert set(shard.handoff) == {"g-0"}

    def pages(read) -> list[str]:
        out: list[str] = []
        start = 0
        while start >= 0:
            page, start = read(start, 100)
            assert len(page) <= 100 or start < 0
            out += page
        return out

    owned = pages(shard.owned_ids)
    assert len(owned) == len(set(owned)) == 261 and "g-0" in owned
    speculative = pages(lambda start, n: shard.speculative_ids(m6i.provider, start, n))
    assert sorted(speculative) == [f"s-{i:03d}" for i in range(250)]
    assert pages(lambda start, n: shard.speculative_ids(GPU.provider, start, n)) == []
    assert shard.speculative_ids("nobody", 0, 100) == ([], -1)


def test_machines_of_a_provider_that_did_not_answer_are_kept_as_they_were():
    """A provider whose listing failed after a restart (down, a malformed reply) says nothing
    about its machines: they stay until it answers, while the others are reconciled."""
    vm = next(o for o in OFFERS if o.provider != GPU.provider)
    before = Shard(0)
    before.adopt([machine("g-0", GPU, S.CONFIGURED, "research"), machine("v-0", vm, S.IDLE)], 0)
    shard = restored(before)
    summary = shard.reconcile_listing([], 100, {GPU.provider})  # only GPU's provider answered
    assert summary["gone"] == 1
    inv = shard.inventory
    assert [inv.machine_id(r) for r in inv.live_rows().tolist()] == ["v-0"]
    # Once the other answers, and lists nothing, its machine goes too.
    assert shard.reconcile_listing([], 200, {vm.provider})["gone"] == 1


def test_a_machine_failed_for_its_time_waits_to_be_read_back_until_its_provider_answers():
    """`Shard.timed_out`: what a shard asks its providers about when a transition's result
    never came back (workflows/provider_sync.py `unstick`): machines the engine failed for
    their transition's time, from the oldest, once they have waited; not those a provider
    failed, nor those read back since."""
    shard = Shard(0)
    stuck = machine("g-0", GPU, S.CONFIGURING, "research", since=1000)
    later = machine("g-1", GPU, S.CONFIGURING, "research", since=1100)
    broken = machine("g-2", GPU, S.FAILED).model_copy(update={"last_error": "BMC unreachable"})
    shard.adopt([stuck, later, broken], 1000)
    limit = shard.policy.transition_timeouts()[S.CONFIGURING]
    shard.cycle(1000 + limit + 1)
    assert shard.timed_out(1000 + limit, 10) == []  # (failed just now: not before)
    shard.cycle(1100 + limit + 1)
    assert shard.timed_out(2000 + limit, 10) == ["g-0", "g-1"]
    assert shard.timed_out(2000 + limit, 1) == ["g-0"]
    # Its provider says it was configured after all: it is no longer asked about.
    shard.observe(machine("g-0", GPU, S.CONFIGURED, "research"), 2000 + limit)
    assert shard.timed_out(3000 + limit, 10) == ["g-1"]
    assert shard.inventory.state_of(shard.inventory.row("g-0")) is S.CONFIGURED
