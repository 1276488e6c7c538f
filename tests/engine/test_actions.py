"""A decision's actions, stamped in runs (`Actions.stamp`), read exactly as if each had been
appended one by one: the shard, the simulator and the tests see no difference."""

import pytest

from bigfleet.engine.decision import Actions, Decision
from bigfleet.models import ConfigureAction, CreateAction, DeleteAction, DeleteReason, stamper


def configure(machine_id: str) -> ConfigureAction:
    return ConfigureAction(
        provider="aws", machine_id=machine_id, cluster="a", need="a|n", requirements=[], priority=7
    )


def test_stamped_runs_read_as_actions_appended_one_by_one() -> None:
    first = configure("m-1")
    delete = DeleteAction(provider="aws", machine_id="m-9", reason=DeleteReason.IDLE_TIMEOUT)
    stamped = Actions()
    stamped.stamp(first, "machine_id", ["m-2", "m-3"])
    stamped.append(delete)
    stamped.stamp(configure("m-4"), "machine_id", [])
    one_by_one = [first, configure("m-2"), configure("m-3"), delete, configure("m-4")]

    assert list(stamped) == one_by_one
    assert stamped == one_by_one and len(stamped) == 5
    assert stamped[2].machine_id == "m-3" and stamped[-1] == configure("m-4")
    assert stamped[1:3] == one_by_one[1:3]
    assert stamped.kinds() == {"configure", "delete"}
    # Each read makes fresh copies, validated as the first was: same fields, same dump.
    assert [a.model_dump() for a in stamped] == [a.model_dump() for a in one_by_one]
    assert stamped != one_by_one[:4] and stamped != "configure"


def test_a_stamped_copy_is_as_frozen_as_its_first() -> None:
    stamped = Actions()
    stamped.stamp(configure("m-1"), "machine_id", ["m-2"])
    second = stamped[1]
    with pytest.raises(ValueError):
        second.machine_id = "m-3"  # type: ignore[misc]
    assert stamper(second, "cluster")("b").cluster == "b" and second.cluster == "a"


def test_a_decision_given_a_list_keeps_it_as_actions() -> None:
    decision = Decision(actions=[configure("m-1")])  # type: ignore[arg-type]
    assert isinstance(decision.actions, Actions)
    assert decision.actions == [configure("m-1")] and decision.count("configure") == 1


def test_a_template_run_reads_as_its_copies_alone() -> None:
    """`stamp_all`: a create validated once is the template of every batch's create; the
    template itself is not an action, and a run of no values adds nothing."""

    def create(ids: list[str]) -> CreateAction:
        return CreateAction(
            provider="aws", machine_ids=ids, cluster="a", need="a|n", requirements=[], priority=7
        )

    stamped = Actions()
    stamped.stamp_all(create(["m-1"]), "machine_ids", [["m-1", "m-2"], ["m-3"]])
    stamped.stamp_all(configure("m-9"), "machine_id", [])
    assert list(stamped) == [create(["m-1", "m-2"]), create(["m-3"])]
    assert len(stamped) == 2 and stamped.kinds() == {"create"}
    assert [a.model_dump() for a in stamped] == [
        create(["m-1", "m-2"]).model_dump(),
        create(["m-3"]).model_dump(),
    ]
