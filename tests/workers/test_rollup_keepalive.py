"""`bigfleet rollup send --every SECONDS` keeps a roll-up alive (issue 48): a shard ages out a
roll-up it has not heard again within max_silence_seconds, so the command re-sends it, each time
with a newer generation (an equal one would be refused as stale)."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from workers.cli import main
from workers.verbs.rollup import keep_sending, load_rollup

ROLLUP = "examples/rollup-sandbox.yaml"


def test_every_resends_with_a_newer_generation_each_time():
    sent: list[int] = []

    async def send(args, rollup):
        sent.append(rollup.generation)
        return 0

    args = argparse.Namespace(every=0.001, count=3)
    rollup = load_rollup(ROLLUP)
    assert asyncio.run(keep_sending(args, rollup, send)) == 3
    assert sent[0] == rollup.generation
    assert sent == sorted(set(sent)) and len(sent) == 3, sent


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--every", "0"], "--every: must be above 0 s"),
        (["--every", "soon"], "--every: expected seconds"),
        (["--count", "2"], "--count: a number of sends of at least 1, with --every"),
    ],
)
def test_bad_keep_alive_flags_are_refused_naming_the_flag(capsys, argv, says):
    with pytest.raises(SystemExit) as exit_:
        code = main(["rollup", "send", ROLLUP, "--gateway", "127.0.0.1:1", *argv])
        raise SystemExit(code)
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err
