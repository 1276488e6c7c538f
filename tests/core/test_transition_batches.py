"""The shard merges one cycle's configures of a need on a provider, and its drains of a cluster
with one grace and reason, into one workflow each (`workflows.actions.batched`): fewer
workflows for the Temporal server, every machine kept, nothing else moved, no machine's call
carrying a token older than its own."""

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
    out = batched(starts, {T.CONFIGURE: 2})
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
    out = batched(starts, {T.CONFIGURE: 32, T.DRAIN: 32})
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
    assert [s.machine_ids for s in batched(starts, {T.CONFIGURE: 1})] == [["m0"], ["m1"], ["m2"]]


def test_drains_of_one_cluster_with_one_grace_and_reason_are_merged():
    drain = dict(need=None, grace_seconds=30.0, reason="preempt")
    starts = [
        start(T.DRAIN, "d0", **drain),
        start(T.DRAIN, "d1", **drain),
        start(T.DRAIN, "d2", **{**drain, "grace_seconds": 60.0}),
        start(T.DRAIN, "d3", **{**drain, "reason": "excess"}),
        start(T.DRAIN, "d4", **{**drain, "force": True}),
        start(T.DRAIN, "d5", **{**drain, "cluster": "b"}),
        start(T.DRAIN, "d6", **drain),
        start(T.DELETE, "x0", need=None),
        start(T.DELETE, "x1", need=None),
    ]
    out = batched(starts, {T.CONFIGURE: 32, T.DRAIN: 32})
    assert [s.machine_ids for s in out] == [
        ["d0", "d1", "d6"], ["d2"], ["d3"], ["d4"], ["d5"], ["x0"], ["x1"]
    ]
    # Drains left one a workflow (`drain_batch` 1): each machine's drain its own to escalate.
    assert len(batched(starts, {T.CONFIGURE: 32, T.DRAIN: 1})) == len(starts)
