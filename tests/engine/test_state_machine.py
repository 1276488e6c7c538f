"""The machine state machine of design §5, driven through the inventory."""

import pytest
from pydantic import ValidationError

from bigfleet.inventory import CODE, Inventory
from bigfleet.models import CapacityType, HostRef, Machine, MachineState
from bigfleet.states import LEGAL, STABLE, TRANSITIONAL, IllegalTransition
from tests.fleet import AWS, S, on_demand

ALL = list(MachineState)

# The seed's four operations, each through its transitional state, and every timeout.
SEED_EDGES = [
    (S.SPECULATIVE, S.CREATING),
    (S.CREATING, S.IDLE),
    (S.IDLE, S.CONFIGURING),
    (S.CONFIGURING, S.CONFIGURED),
    (S.CONFIGURED, S.DRAINING),
    (S.DRAINING, S.IDLE),
    (S.IDLE, S.DELETING),
    (S.DELETING, S.SPECULATIVE),
    (S.CREATING, S.FAILED),
    (S.CONFIGURING, S.FAILED),
    (S.DRAINING, S.FAILED),
    (S.DELETING, S.FAILED),
]
# Shortcuts the seed rules out: every move between stable states goes through a transition,
# and a configured machine reaches speculative only via drain, idle and delete.
SHORTCUTS = [
    (S.SPECULATIVE, S.IDLE),
    (S.SPECULATIVE, S.CONFIGURING),
    (S.SPECULATIVE, S.CONFIGURED),
    (S.IDLE, S.CONFIGURED),
    (S.IDLE, S.SPECULATIVE),
    (S.CONFIGURED, S.IDLE),
    (S.CONFIGURED, S.SPECULATIVE),
    (S.CONFIGURED, S.DELETING),
    (S.CREATING, S.CONFIGURED),
    (S.DRAINING, S.CONFIGURED),
]
ILLEGAL = [(a, b) for a in ALL for b in ALL if a is not b and (a, b) not in LEGAL]


def test_eight_states():
    assert {s.value for s in MachineState} == {
        "SPECULATIVE", "CREATING", "IDLE", "CONFIGURING",
        "CONFIGURED", "DRAINING", "DELETING", "FAILED",
    }  # fmt: skip


def test_stable_and_transitional_states():
    assert STABLE == {S.SPECULATIVE, S.IDLE, S.CONFIGURED}
    assert TRANSITIONAL == {S.CREATING, S.CONFIGURING, S.DRAINING, S.DELETING}
    assert S.FAILED not in STABLE | TRANSITIONAL


@pytest.mark.parametrize("edge", SEED_EDGES, ids=lambda e: f"{e[0]}->{e[1]}")
def test_seed_edges_are_legal(edge):
    assert edge in LEGAL


@pytest.mark.parametrize("edge", SHORTCUTS, ids=lambda e: f"{e[0]}->{e[1]}")
def test_seed_shortcuts_are_illegal(edge):
    assert edge not in LEGAL


def _one_machine(state: MachineState) -> tuple[Inventory, int]:
    bound = state in (S.CONFIGURING, S.CONFIGURED, S.DRAINING)
    inv = Inventory()
    (row,) = inv.add([on_demand(7, state, cluster="a" if bound else None)], 100).tolist()
    return inv, row


@pytest.mark.parametrize("edge", sorted(LEGAL), ids=lambda e: f"{e[0]}->{e[1]}")
def test_every_legal_edge_is_accepted(edge):
    start, target = edge
    inv, row = _one_machine(start)
    pid = int(inv.profile[row])

    inv.move(row, target, 200, cluster="a" if target is S.CONFIGURING else None)

    assert inv.state_of(row) is target
    assert inv.counts[CODE[start], pid] == 0
    assert inv.counts[CODE[target], pid] == 1


@pytest.mark.parametrize("edge", ILLEGAL, ids=lambda e: f"{e[0]}->{e[1]}")
def test_illegal_transition_names_machine_state_and_target(edge):
    start, target = edge
    inv, row = _one_machine(start)
    counts = inv.counts.copy()

    with pytest.raises(IllegalTransition) as err:
        inv.move(row, target, 200, cluster="a")

    message = str(err.value)
    assert "od-0007" in message and str(start) in message and str(target) in message
    assert inv.state_of(row) is start
    assert (inv.counts == counts).all()


def test_machine_walks_the_whole_cloud_lifecycle_and_keeps_no_host_no_cluster():
    inv, row = _one_machine(S.SPECULATIVE)
    steps = [
        (S.CREATING, None, False, None),
        (S.IDLE, None, True, None),
        (S.CONFIGURING, "a", True, None),
        (S.CONFIGURED, None, True, "a"),
        (S.DRAINING, None, True, "a"),
        (S.IDLE, None, True, None),
        (S.DELETING, None, True, None),
        (S.SPECULATIVE, None, False, None),
    ]
    for now, (target, cluster, hosted, bound) in enumerate(steps, start=1):
        inv.move(row, target, now, cluster=cluster)
        m = inv.machine(row)
        assert (m.state, m.host is not None, m.cluster) == (target, hosted, bound)


@pytest.mark.parametrize("state", [S.SPECULATIVE, S.CREATING, S.CONFIGURED, S.DRAINING])
def test_wire_machine_rejects_a_cluster_without_a_host(state):
    with pytest.raises(ValidationError) as err:
        Machine(
            id="od-0001",
            state=state,
            host=None,
            instance_type="m5.large",
            zone="euw1-az1",
            capacity_type=CapacityType.ON_DEMAND,
            price_per_hour=0.1,
            interruption_probability=0.0,
            cluster="a",
        )
    assert "host" in str(err.value) and "od-0001" in str(err.value)


def test_wire_machine_with_a_host_may_carry_a_cluster():
    m = on_demand(1, S.CONFIGURED, cluster="a")
    assert m.host == HostRef(provider=AWS, ref="host-od-0001") and m.cluster == "a"
