"""The shard merges one cycle's configures of a need on a provider into one workflow
(`workflows.actions.batched`): fewer workflows for the Temporal server, every machine kept,
nothing else moved, no machine's call carrying a token older than its own."""

from __future__ import annotations

import itertools

from activities.wire import TransitionInput
from bigfleet.models import FencingToken, NodeSelectorRequirement, Operator, Transition
from workflows.actions import batched

T = Transition
_seq = itertools.count(1)


def start(t: Transition, mid: str, **fields) -> TransitionInput:
    defaults = dict(provider="dc", capacity_type="bare-metal", cluster="a", need="a#0")
    return TransitionInput(
        shard=0,
        transition=t,
        machine_ids=[mid],
        token=FencingToken(shard_id=0, shard_epoch=1, seq=next(_seq)),
        **{**defaults, **fields},
    )


def test_configures_of_one_need_on_one_provider_become_one_workflow_up_to_the_limit():
    starts = [start(T.CONFIGURE, f"m{i}") for i in range(5)]
    out = batched(starts, limit=2)
    assert [s.machine_ids for s in out] == [["m0", "m1"], ["m2", "m3"], ["m4"]]
    # The newest token of those merged: no machine is called with one older than its own.
    assert [s.token for s in out] == [starts[1].token, starts[3].token, starts[4].token]
    # The inputs it was given are not changed (a start left over is sent again as it was).
    assert [s.machine_ids for s in starts] == [[f"m{i}"] for i in range(5)]


def test_only_configures_that_agree_on_everything_but_the_machine_are_merged():
    gpu = [NodeSelectorRequirement(key="gpu", operator=Operator.EXISTS)]
    starts = [
        start(T.CONFIGURE, "m0"),
        start(T.DRAIN, "d0", need=None, grace_seconds=30.0),
        start(T.CONFIGURE, "m1", cluster="b"),
        start(T.CONFIGURE, "m2", need="a#1"),
        start(T.CONFIGURE, "m3", provider="cloud"),
        start(T.CONFIGURE, "m4", priority=7),
        start(T.CONFIGURE, "m5", requirements=gpu),
        start(T.CREATE, "c0"),
        start(T.CONFIGURE, "m6"),
        start(T.CONFIGURE, "m7", requirements=gpu),
    ]
    out = batched(starts, limit=32)
    assert [(s.transition, s.machine_ids) for s in out] == [
        (T.CONFIGURE, ["m0", "m6"]),
        (T.DRAIN, ["d0"]),
        (T.CONFIGURE, ["m1"]),
        (T.CONFIGURE, ["m2"]),
        (T.CONFIGURE, ["m3"]),
        (T.CONFIGURE, ["m4"]),
        (T.CONFIGURE, ["m5", "m7"]),
        (T.CREATE, ["c0"]),
    ]


def test_a_limit_of_one_starts_a_workflow_per_machine():
    starts = [start(T.CONFIGURE, f"m{i}") for i in range(3)]
    assert [s.machine_ids for s in batched(starts, limit=1)] == [["m0"], ["m1"], ["m2"]]
