"""What the workflows' handlers do with whatever arrives (bigfleet/inputs.py), as properties:
for any payload, `decode` either returns a value of the handler's type or raises `Rejected`
with a short message, and every rejection record stays bounded."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from activities.wire import Instruction, TransitionResult
from bigfleet.inputs import (
    KEPT,
    MAX_TEXT,
    UNKNOWN,
    Rejected,
    Rejections,
    clip,
    decode,
    json_size,
    number,
)
from bigfleet.reports import ShardReport

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=300),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=20), inner),
    max_leaves=30,
)
HINTS = [dict[str, Any], Instruction, ShardReport, TransitionResult, str, int]


def payload(value: Any) -> list[tuple[str, bytes]]:
    # allow_nan: a client can send NaN and Infinity; they must be refused, not crash.
    return [("json/plain", json.dumps(value, allow_nan=True).encode())]


@settings(max_examples=300, deadline=None)
@given(value=JSON, hint=st.sampled_from(HINTS))
def test_any_json_is_decoded_or_rejected_briefly(value, hint):
    try:
        out = decode(payload(value), hint, "handler")
    except Rejected as err:
        assert str(err).startswith("handler")
        assert len(str(err)) <= 4 * MAX_TEXT + 40
        return
    assert out is not None or hint is dict[str, Any]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200), encoding=st.sampled_from(["json/plain", "binary/plain", ""]))
def test_any_bytes_are_decoded_or_rejected(data, encoding):
    try:
        decode([(encoding, data)], dict[str, Any], "rollup")
    except Rejected as err:
        assert len(str(err)) <= 4 * MAX_TEXT + 40


@settings(max_examples=200, deadline=None)
@given(value=JSON)
def test_a_decoded_value_holds_no_nan_or_infinity(value):
    try:
        out = decode(payload(value), Any, "x")
    except Rejected:
        return
    assert all(math.isfinite(f) for f in floats(out))


def floats(value: Any) -> list[float]:
    if isinstance(value, float):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [f for v in value for f in floats(v)] if isinstance(value, list) else []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "expected one argument, got 0"),
        ([("json/plain", b"1"), ("json/plain", b"2")], "expected one argument, got 2"),
        ([("binary/plain", b"\x00")], "must be JSON"),
        ([("json/plain", b"[" * 5000 + b"]" * 5000)], "rollup"),
        ([("json/plain", b"{not json")], "rollup"),
        ([("json/plain", b'"' + b"x" * 300_000 + b'"')], "at most"),
        ([("json/plain", b'{"cluster": 5}')], "rollup: cluster"),
    ],
)
def test_each_kind_of_bad_payload_is_named(args, says):
    hint = dict[str, str]
    with pytest.raises(Rejected) as err:
        decode(args, hint, "rollup")
    assert says in str(err.value)


def test_strict_types_and_finite_numbers():
    with pytest.raises(Rejected, match="term"):
        decode([("json/plain", b'{"term": "5", "seq": 1}')], Instruction, "adopt")
    with pytest.raises(Rejected, match="grace_seconds"):
        decode(
            [("json/plain", b'{"term": 5, "seq": 1, "grace_seconds": NaN}')], Instruction, "adopt"
        )
    assert decode([("json/plain", b'{"term": 5, "seq": 1}')], Instruction, "adopt").term == 5
    assert decode([], int, "x", optional=True) is None


@pytest.mark.parametrize("value", [True, "5", -5, math.nan, math.inf, None, [1]])
def test_number_refuses_what_is_not_a_grace(value):
    with pytest.raises(Rejected, match="grace"):
        number(value, "grace", 0, 3600)


def test_number_takes_ints_and_floats_in_range():
    assert number(0, "grace") == 0.0 and number(2.5, "grace", 0, 3) == 2.5


def test_rejections_are_bounded_and_counted_by_known_handler():
    r = Rejections(["rollup"])
    for i in range(KEPT * 3):
        r.add("x" * 10_000 if i % 2 else "rollup", "e" * 100_000, float(i))
    assert len(r.recent) == KEPT
    assert r.counts == {"rollup": KEPT * 3 // 2, UNKNOWN: KEPT * 3 // 2}
    assert len(json.dumps(r.state())) < KEPT * 700
    again = Rejections(["rollup"], r.state())
    again.absorb({"counts": {"rollup": 2, "not-mine": 5}, "recent": []})
    assert again.counts["rollup"] == KEPT * 3 // 2 + 2 and "not-mine" not in again.counts


def test_clip_says_how_long_it_was():
    assert clip("x" * 1_500_000).endswith("(1500000 characters)")
    assert len(clip("x" * 1_500_000)) < MAX_TEXT + 40
    assert clip(b"\x00" * 10_000, 20).startswith("b'\\x00")


@settings(max_examples=200, deadline=None)
@given(value=st.dictionaries(st.text(max_size=20), JSON, max_size=5))
def test_json_size_never_undercounts_the_signal_payload(value):
    """The gateway refuses a roll-up over SIGNAL_BYTES by `json_size`, as the shard judges each
    roll-up of a `rollups` batch; a roll-up sent alone as a `rollup` signal is judged by its
    payload, which Temporal writes compact: never longer, so what the gateway lets through
    either way is taken."""
    from temporalio.converter import default

    if not all(math.isfinite(f) for f in floats(value)):
        return
    (payload_,) = default().payload_converter.to_payloads([value])
    assert json_size(value) == len(json.dumps(value))
    assert len(payload_.data) <= json_size(value)
