"""The shard's columnar inventory (design §9): lookups, counts, profiles, size."""

from collections import Counter

import pytest

from bigfleet.held import HELD_STATES
from bigfleet.inventory import Inventory, MachineNotFound
from bigfleet.models import CapacityType
from tests.fleet import DC, S, bare_metal, ids, many, on_demand, spot


def counts(inv: Inventory) -> Counter:
    """(state, instance type) -> machines, read from the inventory's per-profile counters."""
    out: Counter = Counter()
    for code, pid in zip(*inv.counts.nonzero(), strict=True):
        out[(list(S)[code], inv.profiles.profiles[pid].instance_type)] += int(inv.counts[code, pid])
    return out


def held(inv: Inventory, cluster: str) -> Counter:
    """State -> machines the cluster holds or is about to hold, from the per-cluster tallies."""
    out: Counter = Counter()
    for tally in inv.held.get(inv.clusters.get(cluster), {}).values():
        for state, n in zip(HELD_STATES, tally, strict=True):
            if n:
                out[state] += n
    return out


def scanned(inv: Inventory) -> Counter:
    """The same counts by looking at every machine: what the counters must agree with."""
    return Counter((inv.state_of(r), inv.profile_of(r).instance_type) for r in inv.live_rows())


def test_added_machines_are_found_by_id():
    machines = many(bare_metal, 3) + many(on_demand, 2)
    inv = Inventory()
    rows = inv.add(machines, 0)

    assert len(inv) == 5
    assert [inv.row(m.id) for m in machines] == rows.tolist()
    assert [inv.machine_id(r) for r in rows.tolist()] == ids(machines)


def test_unknown_id_raises_machine_not_found_naming_it():
    inv = Inventory()
    inv.add([bare_metal(1)], 0)

    with pytest.raises(MachineNotFound) as err:
        inv.row("gpu-0002")
    assert "gpu-0002" in str(err.value)
    with pytest.raises(KeyError):
        inv.row("gpu-1")


def test_duplicate_id_is_rejected_and_the_inventory_is_unchanged():
    inv = Inventory()
    inv.add([bare_metal(1)], 0)

    with pytest.raises(ValueError, match="gpu-0001"):
        inv.add([bare_metal(1, rack="r9")], 0)
    assert len(inv) == 1
    assert counts(inv) == Counter({(S.IDLE, "gpu-8xh100"): 1})


def test_duplicate_id_within_one_batch_is_rejected():
    inv = Inventory()

    with pytest.raises(ValueError, match="gpu-0001"):
        inv.add([bare_metal(1), bare_metal(1, rack="r9")], 0)
    assert len(inv) == 0


def test_rejected_add_after_a_remove_leaves_the_inventory_as_it_was():
    inv = Inventory()
    inv.add(many(bare_metal, 3), 0)
    inv.remove("gpu-0001")

    with pytest.raises(ValueError, match="gpu-0000"):
        inv.add([bare_metal(0)], 0)

    assert len(inv) == 2
    assert sorted(inv.machine_id(r) for r in inv.live_rows()) == ["gpu-0000", "gpu-0002"]


def test_counts_and_held_follow_moves_and_remove():
    inv = Inventory()
    inv.add(many(bare_metal, 4) + many(on_demand, 2, instance_type="m5.large"), 0)
    gpu = [inv.row(f"gpu-{i:04d}") for i in range(4)]
    od = [inv.row(f"od-{i:04d}") for i in range(2)]

    for r in gpu[:3]:
        inv.move(r, S.CONFIGURING, 10, cluster="a")
    inv.move(od[0], S.CREATING, 10, cluster="b")
    assert held(inv, "a") == Counter({S.CONFIGURING: 3})
    assert held(inv, "b") == Counter({S.CREATING: 1})

    inv.move(gpu[0], S.CONFIGURED, 20)
    inv.move(gpu[1], S.CONFIGURED, 20)
    inv.move(gpu[2], S.FAILED, 20)
    inv.move(od[0], S.IDLE, 20)
    inv.move(gpu[1], S.DRAINING, 30)
    assert held(inv, "a") == Counter({S.CONFIGURED: 1, S.DRAINING: 1, S.FAILED: 1})
    assert held(inv, "b") == Counter()

    inv.move(gpu[1], S.IDLE, 40)
    inv.remove("gpu-0000")
    inv.remove("od-0001")

    assert held(inv, "a") == Counter({S.FAILED: 1})
    expected = {(S.IDLE, "gpu-8xh100"): 2, (S.FAILED, "gpu-8xh100"): 1, (S.IDLE, "m5.large"): 1}
    assert counts(inv) == Counter(expected)
    assert scanned(inv) == Counter(expected)
    assert len(inv) == 4
    with pytest.raises(MachineNotFound):
        inv.row("gpu-0000")


def test_removed_id_can_come_back():
    inv = Inventory()
    inv.add(many(bare_metal, 2), 0)
    record = inv.remove("gpu-0000")

    (row,) = inv.add([record], 50).tolist()

    assert inv.row("gpu-0000") == row
    assert inv.state_of(row) is S.IDLE
    assert len(inv) == 2 and counts(inv) == scanned(inv)


def test_machines_of_one_profile_share_it():
    inv = Inventory()
    slot, running, other_zone = on_demand(0), on_demand(1, S.IDLE), on_demand(2, zone="ams-2")
    rows = inv.add([slot, running, other_zone, spot(0)], 0).tolist()

    profile = [int(inv.profile[r]) for r in rows]
    assert profile[0] == profile[1]
    assert len(set(profile)) == 3
    assert len(inv.profiles) == 3


def test_machine_round_trips_the_wire_fields():
    originals = [
        bare_metal(3, S.CONFIGURED, cluster="a", rack="r7"),
        on_demand(4, S.DRAINING, cluster="b", price=6.5, since=1234),
        spot(5, price=1.8, interruption=0.1),
    ]
    inv = Inventory()
    rows = inv.add(originals, 0).tolist()

    for original, row in zip(originals, rows, strict=True):
        back = inv.machine(row)
        fields = ("id", "state", "instance_type", "zone", "capacity_type", "resources", "cluster")
        assert back.model_dump(include=set(fields)) == original.model_dump(include=set(fields))
        assert back.price_per_hour == pytest.approx(original.price_per_hour, rel=1e-6)
        assert back.interruption_probability == pytest.approx(
            original.interruption_probability, rel=1e-6
        )
        assert original.labels.items() <= back.labels.items()
        assert (back.host is None) == (original.host is None)
        if original.host is not None:
            assert back.host.provider == original.host.provider
    assert inv.machine(rows[1]).transition_started_unix == 1234
    assert inv.machine(rows[0]).capacity_type is CapacityType.BARE_METAL
    assert inv.profile_of(rows[0]).provider == DC


@pytest.mark.parametrize("size", [1000, 1024, 5000])
def test_at_most_48_bytes_a_machine(size):
    inv = Inventory(capacity=size)
    inv.add(many(on_demand, size), 0)

    assert len(inv) == size == inv.capacity
    assert inv.nbytes() / len(inv) <= 48


def test_many_ids_are_found_at_once_as_one_by_one():
    """`find_many` (by column) answers what `find` answers for each id: rows of live ids,
    -1 for unknown prefixes, numbers never added and ids removed since."""
    import random

    from bigfleet.machine_ids import MachineIds

    names = [f"m-{i:05d}" for i in range(3000)] + [f"x{i}" for i in range(2000)] + ["plain"]
    table = MachineIds(8)
    inv = Inventory()
    inv.ids = table  # (not used through the inventory: the table alone)
    import numpy as np

    table.resize(8000, np.arange(0))
    table.add(np.arange(len(names)), names)
    rng = random.Random(7)
    for name in rng.sample(names, 500):
        table.forget(name)
    asked = names + ["nope", "m-99999", "x77777", "m-5", "plain2"]
    rng.shuffle(asked)

    found = table.find_many(asked)

    assert found.tolist() == [table.find(n) for n in asked]
    assert (found >= 0).sum() == len(names) - 500



def test_many_ids_are_named_at_once_as_one_by_one():
    """`ids_of` (many ids at once, as the engine's actions read them) gives back each id exactly as
    it was added: zero-padded numbers, unpadded ones, ids without a number, a `%` in a
    prefix."""
    import numpy as np

    from bigfleet.machine_ids import MachineIds

    names = ["m-00042", "m-7", "plain", "50%-off-3", "x0", "y-000", "z-0123456789", "m-00043"]
    table = MachineIds(16)
    table.add(np.arange(len(names)), names)
    rows = np.array([7, 0, 2, 3, 1, 4, 5, 6])

    assert table.ids_of(rows) == [names[r] for r in rows.tolist()]
    assert table.ids_of(rows) == [table.id_of(r) for r in rows.tolist()]


def test_deferred_ids_read_as_named_when_deferred():
    """`deferred` (the engine's actions name machines this way) reads exactly as `ids_of` did
    at the time, by index, slice and batch, even after the store reuses the rows."""
    import numpy as np

    from bigfleet.machine_ids import IdBatches, MachineIds

    names = ["m-00042", "m-7", "plain", "50%-off-3", "x0", "y-000", "z-0123456789", "m-00043"]
    table = MachineIds(16)
    table.add(np.arange(len(names)), names)
    rows = np.array([7, 0, 2, 3, 1, 4, 5, 6])
    expected = table.ids_of(rows)

    later = table.deferred(rows)
    table.add(np.arange(8, 12), ["new-1", "new-2", "new-3", "new-4"])
    table.prefix[rows], table.number[rows] = 0, 0  # the rows written over after deciding

    assert list(later) == expected
    assert len(later) == 8
    assert [later[i] for i in range(8)] == expected and later[-1] == expected[-1]
    assert list(later[1:6:2]) == expected[1:6:2]
    assert list(IdBatches(later, 3)) == [expected[0:3], expected[3:6], expected[6:8]]
    assert len(IdBatches(later, 3)) == 3 and IdBatches(later, 3)[-1] == expected[6:8]
    assert list(IdBatches(later[8:], 3)) == []
