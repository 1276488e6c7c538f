"""Splitting a fleet into shards never costs more than a stated tolerance over one shard, and
never serves a band of priority >= 500000 less (issue 45): on small random fleets
(`random_fleets.fleets`: a few owned racks of 2-3 instance types, a cloud quota of spot and
on-demand lines, 2-8 clusters whose needs change at a few times, one or two hours), each run on
1, 2 and 4 shards with the same seed.

The tolerances, and why they are not zero. N shards learn of each other's capacity only
through the coordinator, whose rounds are 30 s apart (`REPORT_SECONDS`): a machine asked for in
one shard and free in another comes a round or two later than on one shard. So each machine
asked for (every rise of a need's count) may come `LAG_SECONDS` (two rounds) later:
- cost: `cost(N) <= cost(1) * (1 + COST_TOLERANCE) + LAG_SECONDS of the dearest elastic
  machine of the quota per machine asked` (the shard buys one while the owned one comes over)
  `+ the dearest elastic machine for each machine-hour N shards serve more than one shard in
  a band >= 500000` (that spend bought service one shard did not give: the fleets are small
  and often short, and one shard does not always buy what N shards do);
- service, per band >= 500000: `served(N) >= served(1) - SERVED_TOLERANCE - LAG_SECONDS per
  machine asked in the band / machine-seconds asked in it`.
COST_TOLERANCE (2 %) is the issue's "done when"; SERVED_TOLERANCE (0.02) what is left for
drains a cross-shard preemption waits out and spot interruptions that fall differently.

TODAY the property holds only with the looser `*_TODAY` figures below.
test_shards_counterexamples.py keeps minimal fleets that break the targets, each with why: what
the coordinator still gets wrong. Tighten the `*_TODAY` figures to the targets as those are
fixed;
`python -m tests.simulation.shards_explore` measures the same on hundreds of fleets.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

from .random_fleets import asks, dearest_elastic, fleets, outcome, run_on

LAG_SECONDS = 60.0
COST_TOLERANCE = 0.02
SERVED_TOLERANCE = {">=900000": 0.02, "500000-899999": 0.02}

# FIXME(issue 45): what holds today on the 50 fleets CI runs (derandomized); down to the
# targets above as test_shards_counterexamples.py's cases are fixed. Measured on 82dbb4a+
# (the coordinator's pooling rules): cost holds the target (0.84 was needed on daf6394, before
# them: p5 machines at $98.32/h bought for low-priority needs beside idle owned ones); the top
# band needs 0.17 beyond the lag (0.12 on daf6394: one fleet's narrow 1 000 000 need gets
# 0.73 against 0.89, the `narrow need` counterexamples) and the 500000 band 0.12 (0.11):
# 14 of the 100 runs (50 fleets on 2 and 4 shards) break a target.
COST_TOLERANCE_TODAY = COST_TOLERANCE
SERVED_TOLERANCE_TODAY = {">=900000": 0.17, "500000-899999": 0.12}

# Derandomized: CI runs the same fleets every time, each 3 simulations of 1-2 hours (85 s of
# CPU in all). No shrinking: one step of it is 3 simulations, and it ran over five
# minutes without getting small; the counterexamples file keeps fleets shrunk by hand.
PROPERTY = settings(
    max_examples=50,
    phases=(Phase.explicit, Phase.generate),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def broken(
    raw: dict[str, Any],
    one: dict[str, Any],
    many: dict[str, Any],
    cost_tolerance: float = COST_TOLERANCE,
    served_tolerance: dict[str, float] = SERVED_TOLERANCE,
) -> list[str]:
    """What the N-shard outcome `many` of fleet `raw` breaks against its 1-shard outcome
    `one` (`random_fleets.outcome`), by the rule of the module; [] if nothing."""
    machines, hours = asks(raw)
    out = []
    price = dearest_elastic(raw)
    lag_cost = LAG_SECONDS / 3600 * price * machines["all"]
    served_more = sum(
        max(0.0, many["served"].get(b, 0.0) - one["served"][b]) * hours[b] for b in one["served"]
    )
    if many["cost"] > one["cost"] * (1 + cost_tolerance) + lag_cost + served_more * price:
        out.append(
            f"cost ${many['cost']:,.2f} against ${one['cost']:,.2f} on one shard (allowed: "
            f"{cost_tolerance:.0%}, ${lag_cost:,.2f} of lag and ${served_more * price:,.2f} for "
            f"{served_more:.2f} machine-hours served more)"
        )
    for band, served in one["served"].items():
        lag = LAG_SECONDS * machines[band] / (hours[band] * 3600) if hours[band] else 0.0
        if (got := many["served"].get(band, 0.0)) < served - served_tolerance[band] - lag:
            out.append(
                f"{band} served {got:.4f} against {served:.4f} on one shard "
                f"(allowed: {served_tolerance[band]} and {lag:.4f} of lag)"
            )
    return out


def check(raw: dict[str, Any]) -> None:
    one = outcome(run_on(raw, 1))
    for n in (2, 4):
        found = broken(
            raw, one, outcome(run_on(raw, n)), COST_TOLERANCE_TODAY, SERVED_TOLERANCE_TODAY
        )
        assert not found, f"on {n} shards: {'; '.join(found)}"


# (Hypothesis derives the derandomized fleets from this function's source: the checks live in
# `check`, so that changing them does not change which fleets CI runs.)
@PROPERTY
@given(fleets())
def test_n_shards_cost_and_serve_like_one(raw: dict[str, Any]) -> None:
    check(raw)
