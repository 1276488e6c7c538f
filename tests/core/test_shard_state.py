"""`ShardState` carries a shard's state across continue-as-new as the plain dict did before it
was typed: the same JSON bytes (a snapshot's size decides how many parts it is written in, so a
replayed run must write the very bytes it wrote), the same keys left out, and old states with
keys missing still load."""

import json

import pytest
from pydantic_core import to_json

from activities.wire import ShardConfig, ShardInput
from bigfleet.shard import Shard
from bigfleet.shard_state import ShardState
from bigfleet.snapshot import restore_shard, shard_state
from tests.core.test_disruption import TUESDAY_10, shrinking
from tests.core.test_snapshot import busy_shard, summary
from workflows.actions import TransitionInputs
from workflows.fencing import Fencing
from workflows.instruction_steps import InstructionSteps


def full_shard() -> Shard:
    """A shard whose state has every optional key of its own (refused, unheard, disruption,
    blocked)."""
    shard = shrinking({"budgets": [{"machines": "2"}]})
    shard.refused = {("web", 3): (TUESDAY_10 - 5, 2)}
    shard.unheard = {"quiet": TUESDAY_10 - 60, "int-clock": 7}
    shard.blocked.drains = {"gpu-0001": ("web", 3, TUESDAY_10 - 1.5)}
    return shard


def with_notices(state: dict) -> dict:
    """`state` with a notices entry where `shard_state` puts it (after disruption)."""
    out = {}
    for key, value in state.items():
        if key == "blocked":
            out["notices"] = {"notes": {}, "strikes": {"gpu-0003": 1}, "holds": {},
                              "acted": {}, "quarantined": {}}  # fmt: skip
        out[key] = value
    return out


def old_way(shard: Shard, **workflow_keys) -> dict:
    """The dict the shard workflow carried before `ShardState`: the shard's, then the
    steps', then the workflow's keys, each only when the old code put it in."""
    state = shard_state(shard)
    state.update(
        {"term": 4, "seen": [1, 2, 5], "outbox": [[4, 2, "release", {"machines": []}]]}
    )
    state.update(workflow_keys.pop("fencing_extra", {}))
    state.update({"joining": False, "merging": True, "inherited": [2]})
    state["guard"] = {"recent": [{"signal": "rollup", "error": "bad"}], "counts": {"rollup": 1}}
    state["owed_providers"] = ["aws-eu", "dc"]
    state.update(workflow_keys)
    return state


WORKFLOW_KEYS = {
    "none": {},
    "all": {
        "fencing_extra": {"verified_term": 4, "forged_terms": [9, 11]},
        "cycle_ends": [TUESDAY_10 - 20.0, TUESDAY_10 - 10.25],
        "taken": ["chain-1", 41],
        "in_flight": [["drain:gpu-0001", TUESDAY_10 + 900.0]],
        "shadow": {"since": 1.5, "at": None, "cycles": 3, "actions": {}},
    },
    "stored": {
        "cycle_ends": [],
        "pipeline": [{"shard": 0, "transition": "drain", "machine_ids": ["gpu-0002"]}],
        "results": [{"transition": "create", "machines": [], "note": None}],
    },
}


@pytest.mark.parametrize("keys", sorted(WORKFLOW_KEYS))
@pytest.mark.parametrize("shard", ["busy", "full", "full+notices"])
def test_the_model_writes_the_bytes_the_dict_wrote(shard, keys):
    made = busy_shard(3) if shard == "busy" else full_shard()
    old = old_way(made, **json.loads(json.dumps(WORKFLOW_KEYS[keys])))
    if shard == "full+notices":
        old = with_notices(old)
    state = ShardState.model_validate(old)
    assert list(state.dump()) == list(old)
    assert state.dump() == old
    # The snapshot store's bytes (json.dumps) and the inline payload's (pydantic's to_json).
    assert json.dumps(state.dump(), separators=(",", ":")) == json.dumps(old, separators=(",", ":"))
    assert to_json(state) == to_json(old)
    inp = ShardInput(config=ShardConfig(shard=0, providers=["dc"]), state=state)
    assert b'"state":' + to_json(old) + b"," in to_json(inp)
    # Read back from the payload, it is the same state.
    again = ShardInput.model_validate_json(to_json(inp)).state
    assert again is not None and to_json(again) == to_json(old)


def test_keys_given_as_none_or_not_given_are_left_out():
    old = shard_state(busy_shard(4))
    state = ShardState(**old, **{"guard": {}, "taken": None, "in_flight": None})
    assert list(state.dump()) == [*old, "guard"]
    stored = state.model_copy(update={"pipeline": [], "results": None})
    assert list(stored.dump()) == [*old, "guard", "pipeline"]
    assert "pipeline" not in state.dump()  # (the copy's alone)


def test_an_old_state_without_the_optional_keys_loads():
    required = ["id", "epoch", "seq", "cycles", "inventory", "needs", "memory", "refusals",
                "rejections"]  # fmt: skip
    original = busy_shard(5)
    old = {k: v for k, v in json.loads(json.dumps(shard_state(original))).items() if k in required}
    state = ShardState.model_validate(old)
    assert state.dump() == old
    assert state.moved == {} and state.transfer_out == [] and state.term == 0
    copy = restore_shard(state, Shard(0))
    assert copy.machines_by_state() == original.machines_by_state()
    assert summary(copy.cycle(30)) == summary(original.cycle(30))
    fencing = Fencing(state)
    assert (fencing.term, fencing.seen, fencing.verified, fencing.forged) == (0, [], 0, [])


def test_unknown_keys_are_ignored_as_the_dict_reader_ignored_them():
    old = {**shard_state(busy_shard(6)), "from_a_future_run": 1}
    assert "from_a_future_run" not in ShardState.model_validate(old).dump()


def test_the_steps_carry_what_they_took_back():
    shard = busy_shard(7)
    cfg = ShardConfig(shard=0, providers=["dc"])
    old = old_way(shard, fencing_extra={"verified_term": 6, "forged_terms": [8]})
    steps = InstructionSteps(shard, cfg, TransitionInputs(shard, cfg), ShardState(**old))
    assert steps.state() == {k: old[k] for k in steps.state()}
    assert list(steps.state()) == ["term", "seen", "outbox", "verified_term", "forged_terms",
                                   "joining", "merging", "inherited"]  # fmt: skip
