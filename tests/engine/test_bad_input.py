"""Bad roll-ups (docs/design.md, "Bad input"): a clear error naming the field, and the last
good roll-up stands."""

import copy

import pytest
from pydantic import ValidationError

from bigfleet.needs import NeedsTable
from tests.fleet import ENGINES, S, bare_metal, configured, many, need, rollup, table

GOOD = rollup("a", 1, need(2, 1000))


def _broken(path: tuple, value) -> dict:
    """The good roll-up's successor (generation 2, 5 machines) with one value replaced."""
    raw = copy.deepcopy(rollup("a", 2, need(5, 1000)))
    target = raw
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return raw


BAD = {
    "negative count": (_broken(("needs", 0, "count"), -1), "count"),
    "NaN interruption penalty": (
        _broken(("needs", 0, "interruption_penalty"), float("nan")),
        "interruption_penalty",
    ),
    "infinite reclamation penalty": (
        _broken(("needs", 0, "reclamation_penalty"), float("inf")),
        "reclamation_penalty",
    ),
    "priority above int32": (_broken(("needs", 0, "priority"), 2**31), "priority"),
    "priority below int32": (_broken(("needs", 0, "priority"), -(2**31) - 1), "priority"),
    "unknown operator": (_broken(("needs", 0, "requirements", 0, "operator"), "Like"), "operator"),
    "In without values": (_broken(("needs", 0, "requirements", 0, "values"), []), "values"),
    "Gt with a non-integer": (
        _broken(
            ("needs", 0, "requirements", 0),
            {"key": "bigfleet.io/gpus", "operator": "Gt", "values": ["eight"]},
        ),
        "values",
    ),
    "seventeen spread rules": (
        _broken(("needs", 0, "spread"), [{"key": f"k{i}", "max_skew": 1} for i in range(17)]),
        "spread",
    ),
    "unknown need field": (_broken(("needs", 0, "urgency"), "high"), "urgency"),
    "unknown roll-up field": (_broken(("shard",), 3), "shard"),
}


@ENGINES
@pytest.mark.parametrize(("raw", "field"), list(BAD.values()), ids=list(BAD))
def test_bad_rollup_is_rejected_naming_the_field_and_the_last_good_one_stands(
    make_shard, raw, field
):
    needs = table(GOOD)
    before = [n.spec for n in needs.needs_of("a")]

    with pytest.raises(ValidationError) as err:
        needs.submit(raw, 10)

    assert field in str(err.value)
    # Named by the error itself (its location or message), not only echoed in the input.
    errors = err.value.errors()
    assert any(field in e["loc"] or f"{field}:" in e["msg"] for e in errors), errors
    assert [n.spec for n in needs.needs_of("a")] == before
    assert needs.generation("a") == 1
    shard = make_shard(many(bare_metal, 8))
    assert len(configured(shard.decide(needs, 20))) == 2


def test_replayed_rollup_is_ignored():
    needs = table(GOOD, rollup("a", 2, need(3, 1000)))

    assert needs.submit(rollup("a", 2, need(7, 1000)), 20) is False
    assert needs.submit(rollup("a", 1, need(9, 1000)), 30) is False

    assert [n.count for n in needs.needs_of("a")] == [3]
    assert needs.generation("a") == 2


@ENGINES
def test_replayed_rollup_does_not_change_what_is_served(make_shard):
    needs = table(GOOD, rollup("a", 2, need(3, 1000)))
    needs.submit(rollup("a", 1, need(6, 1000)), 30)

    decision = make_shard(many(bare_metal, 8, state=S.IDLE)).decide(needs, 40)

    assert len(configured(decision)) == 3


def test_silent_cluster_ages_out():
    needs = NeedsTable(max_silence_seconds=300)
    needs.submit(GOOD, 0)
    needs.submit(rollup("b", 1, need(1, 1000)), 0)
    needs.submit(rollup("b", 2, need(1, 1000)), 250)

    assert needs.expire(300) == []
    assert needs.expire(301) == ["a"]

    assert needs.needs_of("a") == []
    assert [n.cluster for n in needs] == ["b"]
    assert needs.expire(551) == ["b"]
    assert len(needs) == 0


@ENGINES
def test_label_keys_no_machine_carries_are_not_kept(make_shard):
    """Anyone who may send a roll-up chooses its `same` and spread keys: a signal's worth of
    them (here 1 200 keys) must leave nothing behind in the shard's profile table, whose
    columns of a kept key are as long as the table. The needs are short, not served."""
    fleet = many(bare_metal, 8)
    shard = make_shard(fleet)
    keys = [f"example.com/k{i}" for i in range(1200)]
    needs = [need(1, 1000, same=keys[i]) for i in range(400)]
    needs += [
        need(1, 1000, spread=[{"key": k, "max_skew": 1} for k in keys[400 + 2 * i : 402 + 2 * i]])
        for i in range(400)
    ]
    decision = shard.decide(table(rollup("a", 1, *needs)), 10)

    assert configured(decision) == []
    # Each is short, and says why no machine here could ever serve it.
    whys = {s.why for s in decision.shortfalls}
    assert "no machine of this shard carries label key example.com/k0 (same or spread)" in whys
    assert all(s.why.startswith("no machine of this shard carries") for s in decision.shortfalls)
    if shard.inventory is not None:  # (the fast engine's table)
        profiles = shard.inventory.profiles
        assert not set(profiles._labels) & set(keys)
        assert not {k[-1] for k in profiles._codes} & set(keys)


def test_what_the_engine_works_out_per_need_is_forgotten_with_the_need():
    """Each roll-up may bring needs never seen (their requirements are the sender's choice):
    what the engine caches per need signature and per requirement is dropped once the needs
    are gone, so 40 roll-ups of 20 new needs each leave about the last roll-up's behind."""
    from bigfleet.engine.supply import RETAIN_SLACK
    from tests.fleet import GPU, fast_shard

    shard = fast_shard(many(bare_metal, 8))
    for generation in range(1, 41):
        fresh = [
            {**need(1, 1000), "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In",
                 "values": [GPU, f"type-{generation}-{i}"]}]}
            for i in range(20)
        ]  # fmt: skip
        decision = shard.cycle(table(rollup("a", generation, *fresh)), generation * 10)
    supply = shard.engine.supply
    kept = len(supply._match) + len(supply._rank) + len(supply._rank_of)
    assert kept <= 2 * 3 * 20 + RETAIN_SLACK < 40 * 20  # (three caches per signature)
    assert len(supply._columns._masks) <= 2 * 21 + RETAIN_SLACK < 40 * 20
    assert sum(decision.satisfied.values()) == 8  # (and the engine still serves them)
