"""Unmanaged clusters (issue 46, bigfleet/cluster_modes.py): BigFleet runs beside the autoscalers
it replaces, on providers they share. A cluster the deployment lists as unmanaged, or a machine
its provider labels `bigfleet.io/unmanaged: "true"`, is left alone: never adopted, so never
drained, deleted or configured for anyone, and its roll-ups are refused with the reason. Before,
a shared provider's machines of a cluster that never sent BigFleet a roll-up were adopted and
drained as excess once the cluster had been silent for `max_silence_seconds`."""

import pydantic
import pytest

from bigfleet import labels as L
from bigfleet.cluster_modes import ClusterModes
from bigfleet.deployment import Deployment
from bigfleet.models import MachineState
from bigfleet.policy import Policy
from bigfleet.shard import Shard
from tests.fleet import need, on_demand, rollup

S = MachineState


def touched(decision) -> set[str]:
    """Machines a decision acts on."""
    out = set()
    for a in decision.actions:
        out.update(a.machine_ids if a.kind == "create" else [a.machine_id])
    return out


def shared_provider(shard: Shard, now: float = 0) -> list:
    """What a provider shared with another autoscaler lists: 3 machines serving cluster a
    (BigFleet's), 2 serving cluster legacy (not BigFleet's), one spare the other autoscaler
    keeps (labelled), one spare of nobody's."""
    legacy = [on_demand(i, S.CONFIGURED, cluster="legacy") for i in range(3, 5)]
    kept = on_demand(5, S.IDLE)
    kept.labels[L.UNMANAGED] = "true"
    listed = [*(on_demand(i, S.CONFIGURED, cluster="a") for i in range(3)), *legacy, kept]
    listed.append(on_demand(6, S.IDLE))
    return listed


def test_an_unmanaged_clusters_machines_are_never_taken_whatever_the_silence():
    shard = Shard(0, Policy(max_silence_seconds=300))
    shard.modes = ClusterModes(["legacy"])
    assert shard.adopt(shared_provider(shard), 0) == 4  # a's 3 and the unlabelled spare
    assert shard.modes.left_alone == 3
    assert shard.receive(rollup("a", 1, need(3, 100)), 1) is None
    for t in range(10, 1000, 10):  # well past the allowed silence
        assert shard.receive(rollup("a", 1 + t, need(3, 100)), t) is None
        decision = shard.cycle(t)
        assert touched(decision).isdisjoint({"od-0003", "od-0004", "od-0005"}), t
    assert shard.inventory.ids.find("od-0003") < 0


def test_before_the_fix_the_silent_clusters_machines_drained():
    """The defect, kept as a check that the test above can fail: without the mode, the
    machines of the cluster that never reports are drained after the allowed silence."""
    shard = Shard(0, Policy(max_silence_seconds=300))
    shard.adopt(shared_provider(shard), 0)
    drained = set()
    for t in range(10, 400, 10):
        shard.receive(rollup("a", 1 + t, need(3, 100)), t)
        drained |= {a.machine_id for a in shard.cycle(t).actions if a.kind == "drain"}
    assert {"od-0003", "od-0004"} <= drained


def test_an_unmanaged_clusters_roll_up_is_refused_with_the_reason():
    shard = Shard(0)
    shard.modes = ClusterModes(["legacy"])
    why = shard.receive(rollup("legacy", 1, need(2, 100)), 1)
    assert why is not None and "legacy" in why and "unmanaged" in why
    assert shard.needs.clusters() == []
    assert shard.modes.refused == 1


def test_listing_a_managed_cluster_as_unmanaged_hands_it_back_as_it_stands():
    """A cluster BigFleet managed, then listed as unmanaged (the next run of its shard): its
    machines leave the inventory without a drain or a delete, and its needs go."""
    shard = Shard(0)
    shard.adopt([on_demand(i, S.CONFIGURED, cluster="b") for i in range(2)], 0)
    shard.adopt([on_demand(2, S.CONFIGURED, cluster="a")], 0)
    shard.receive(rollup("b", 1, need(2, 100)), 0)
    shard.receive(rollup("a", 1, need(1, 100)), 0)
    shard.modes = ClusterModes(["b"])
    assert shard.modes.forget(shard) == ["od-0000", "od-0001"]
    assert shard.needs.clusters() == ["a"]
    assert touched(shard.cycle(10)) == set()
    assert shard.inventory.ids.find("od-0002") >= 0


def test_labelled_machines_in_the_inventory_are_given_up_too():
    shard = Shard(0)
    kept = on_demand(0, S.IDLE)
    kept.labels[L.UNMANAGED] = "true"
    shard.inventory.add([kept, on_demand(1, S.IDLE)], 0)  # (as a run before the rule held it)
    assert ClusterModes().forget(shard) == ["od-0000"]


def deployment(**extra):
    return {"name": "f", "providers": [{"name": "p", "endpoint": "localhost:1"}], **extra}


def test_the_deployment_names_its_unmanaged_clusters():
    dep = Deployment.model_validate(deployment(unmanaged_clusters=["legacy", "old-eu"]))
    assert dep.unmanaged_clusters == ["legacy", "old-eu"]


@pytest.mark.parametrize("bad", [[""], ["x" * 300], "legacy", [1], [None]])
def test_a_malformed_unmanaged_list_is_refused_naming_the_field(bad):
    with pytest.raises(pydantic.ValidationError) as err:
        Deployment.model_validate(deployment(unmanaged_clusters=bad))
    assert "unmanaged_clusters" in str(err.value)


def test_a_redfish_bmc_marked_unmanaged_lists_its_systems_with_the_label():
    """The Redfish provider labels a machine from its BMC's config (`labels.rack_labels`,
    which its listing uses): a BMC whose systems another autoscaler uses for now says so."""
    from bigfleet.providers.redfish.config import BMCSpec

    spec = {"address": "https://10.1.2.3", "rack": "r1", "zone": "ams-1", "instance_type": "x"}
    theirs = L.rack_labels("dc", BMCSpec.model_validate({**spec, "unmanaged": True}))
    ours = L.rack_labels("dc", BMCSpec.model_validate(spec))
    assert theirs[L.UNMANAGED] == "true" and L.UNMANAGED not in ours
    assert {k: v for k, v in theirs.items() if k != L.UNMANAGED} == ours


def test_a_mode_changed_at_run_time_survives_a_snapshot_and_wins_over_the_config():
    """The coordinator's `cluster_mode` changes the set at run time; the shard's snapshot
    carries it from then on (a config's list alone is not written: it comes with the run)."""
    from bigfleet.snapshot import restore_shard, shard_state

    shard = Shard(0)
    shard.modes = ClusterModes(["legacy"])
    assert "unmanaged" not in shard_state(shard)
    assert shard.modes.set("legacy", "managed") == "unmanaged"  # managed again
    assert shard.modes.set("old-eu", "unmanaged") == "managed"
    again = Shard(0)
    again.modes = ClusterModes(["legacy"])  # (what the run's config says)
    restore_shard(shard_state(shard), again)
    assert again.modes.unmanaged == {"old-eu"} and again.modes.changed


def test_the_unmanaged_set_is_bounded():
    from bigfleet.cluster_modes import MAX_UNMANAGED

    modes = ClusterModes(f"c{i}" for i in range(MAX_UNMANAGED))
    with pytest.raises(ValueError, match="at most"):
        modes.set("one-more", "shadow")
    assert modes.set("c0", "unmanaged") == "unmanaged"  # (one already there is no more)


def test_a_cluster_being_taken_back_has_its_roll_ups_wait():
    """Managed again, its shard takes its machines back (an activity: seconds); a roll-up
    served before that would buy machines the cluster already has, then drain them."""
    shard = Shard(0)
    shard.modes.taking_back.add("legacy")
    why = shard.receive(rollup("legacy", 1, need(2, 100)), 1)
    assert why is not None and "taken back" in why and "send again" in why
    assert shard.needs.clusters() == []
    shard.modes.taking_back.discard("legacy")
    assert shard.receive(rollup("legacy", 2, need(2, 100)), 2) is None
