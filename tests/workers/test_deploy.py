"""deploy/: the Prometheus alerting rules and the Grafana dashboard are well-formed and use only
metric names the code exports. Pure: no Prometheus, no Grafana (promtool is not on PyPI).

The exported names are collected from the source itself: every quoted `bigfleet_*` string in
activities/, workflows/ and bigfleet/ (prometheus_client in activities/metrics.py, the SDK's
meter in the workflows), and, for the histograms among them, `_bucket`, `_sum` and `_count`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from workers.connect import SDK_HISTOGRAM_BUCKETS
from workflows.transition import OUTCOMES

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "bigfleet.json"
SOURCES = ("activities", "workflows", "bigfleet")

NAME = re.compile(r"\bbigfleet_[a-z0-9_]+\b")
QUOTED = re.compile(r"""["'](bigfleet_[a-z0-9_]+)["']""")
# A histogram: prometheus_client's Histogram("name", ...) or the SDK meter's
# create_histogram[_float|_timedelta]("name", ...).
HISTOGRAM = re.compile(
    r"""(?:\bHistogram|\bcreate_histogram\w*)\(\s*["'](bigfleet_[a-z0-9_]+)["']"""
)
SUFFIXES = ("_bucket", "_sum", "_count")


def source_text() -> str:
    return "\n".join(path.read_text() for d in SOURCES for path in sorted((ROOT / d).rglob("*.py")))


def exported() -> tuple[set[str], set[str]]:
    """(every metric name the code exports, the histograms among them)."""
    text = source_text()
    names = set(QUOTED.findall(text))
    histograms = set(HISTOGRAM.findall(text))
    return names | {h + s for h in histograms for s in SUFFIXES}, histograms


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(d: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in d["panels"]:
        out.append(p)
        out += p.get("panels", [])  # panels of a collapsed row
    return out


def exprs() -> list[tuple[str, str]]:
    """(where, PromQL) of every alert rule and dashboard target."""
    found = [(f"alert {r['alert']}", r["expr"]) for r in rules()]
    d = dashboard()
    for p in panels(d):
        found += [(f"panel {p['title']!r}", t["expr"]) for t in p.get("targets", [])]
    for v in d.get("templating", {}).get("list", []):
        q = v.get("query")
        if v.get("type") == "query":
            found.append((f"variable {v['name']}", q["query"] if isinstance(q, dict) else q))
    return found


def test_the_source_scan_finds_the_metrics():
    names, histograms = exported()
    assert {
        "bigfleet_decision_cycle_seconds_bucket",
        "bigfleet_transition_outcomes_total",
        "bigfleet_bootstrap_refusals_total",
        "bigfleet_provider_call_seconds_count",
    } <= names
    assert {"bigfleet_decision_cycle_seconds", "bigfleet_transition_duration_seconds"} <= (
        histograms
    )


def test_every_sdk_histogram_has_its_buckets():
    """The SDK's default buckets are milliseconds (50 … 10000): a histogram in seconds without
    an override would put everything in the first bucket."""
    text = "\n".join(p.read_text() for p in sorted((ROOT / "workflows").rglob("*.py")))
    sdk = set(re.findall(r"""create_histogram\w*\(\s*["'](bigfleet_[a-z0-9_]+)["']""", text))
    assert sdk and sdk <= set(SDK_HISTOGRAM_BUCKETS), sdk - set(SDK_HISTOGRAM_BUCKETS)
    for name, buckets in SDK_HISTOGRAM_BUCKETS.items():
        assert list(buckets) == sorted(set(buckets)), name


def test_every_rule_is_complete():
    seen = set()
    for r in rules():
        assert set(r) >= {"alert", "expr", "for", "labels", "annotations"}, r
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", r["alert"]), r["alert"]
        assert r["alert"] not in seen, f"two rules named {r['alert']}"
        seen.add(r["alert"])
        assert re.fullmatch(r"\d+[smh]", str(r["for"])), r
        assert r["labels"].get("severity") in ("critical", "warning", "info"), r
        assert r["annotations"].get("summary"), r


@pytest.mark.parametrize("source", ["alerts", "dashboard"])
def test_every_metric_named_is_exported(source: str):
    names, _ = exported()
    used = {
        (where, name)
        for where, expr in exprs()
        if where.startswith("alert") == (source == "alerts")
        for name in NAME.findall(expr)
    }
    assert used
    unknown = sorted((where, name) for where, name in used if name not in names)
    assert not unknown, f"not exported by the code: {unknown}"


def test_the_outcomes_named_are_the_ones_counted():
    for where, expr in exprs():
        for outcome in re.findall(r'outcome\s*=~?\s*"([^"]*)"', expr):
            if "bigfleet_transition_outcomes_total" in expr:
                assert set(outcome.split("|")) <= set(OUTCOMES), (where, outcome)


def balanced(expr: str) -> bool:
    """(), [] and {} nest properly outside string literals."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    quote = None
    escaped = False
    for ch in expr:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'`":
            quote = ch
        elif ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            if not stack or stack.pop() != pairs[ch]:
                return False
    return not stack and quote is None


def test_balanced_catches_what_it_should():
    assert balanced('sum by (a) (rate(x{b="(("}[5m]))')
    assert not balanced("sum(rate(x[5m])")
    assert not balanced("sum(rate(x[5m)])")


def test_promql_brackets_balance():
    bad = [(where, expr) for where, expr in exprs() if not balanced(expr)]
    assert not bad, bad


def test_dashboard_panels_have_ids_datasources_and_targets():
    d = dashboard()
    assert d["title"] and d["uid"]
    ps = panels(d)
    ids = [p["id"] for p in ps]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {ids}"
    for p in ps:
        if p.get("type") == "row":
            continue
        assert p.get("datasource"), p["title"]
        assert p.get("targets"), p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        assert all(t.get("expr") for t in p["targets"]), p["title"]
        assert set(p["gridPos"]) == {"h", "w", "x", "y"}, p["title"]
    # the template variables the panels use are defined
    defined = {v["name"] for v in d["templating"]["list"]}
    used = set(re.findall(r"\$\{?([a-z_]+)", json.dumps(d["panels"]))) - {"__rate_interval"}
    assert used <= defined, used - defined


# ---- cost you can see live (issue 31) ----------------------------------------------------------

COST_METRICS = (
    "bigfleet_cost_dollars_per_hour",
    "bigfleet_idle_owned_machines",
    "bigfleet_elastic_while_owned_idle_machines",
)


def test_the_cost_gauges_are_exported():
    names, histograms = exported()
    assert set(COST_METRICS) <= names
    assert not set(COST_METRICS) & histograms


def test_elastic_while_owned_idle_alerts_after_30_minutes():
    (rule,) = [r for r in rules() if "bigfleet_elastic_while_owned_idle_machines" in r["expr"]]
    assert rule["alert"] == "BigFleetElasticWhileOwnedIdle"
    assert re.fullmatch(r"max by \(shard\) \(bigfleet_elastic_while_owned_idle_machines\) > 0",
                        rule["expr"].strip())  # fmt: skip
    assert rule["for"] == "30m"


def test_the_dashboard_has_a_cost_row():
    ps = panels(dashboard())
    (row,) = [p for p in ps if p.get("type") == "row" and p["title"] == "Cost"]
    below = row_panels(ps, row)
    exprs_by_title = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in below}
    wanted = {
        "Cost $/h by capacity type": ("bigfleet_cost_dollars_per_hour", "by (capacity_type)"),
        "Cost $/h by cluster (top 20)": ("bigfleet_cost_dollars_per_hour", "by (cluster)"),
        "Idle owned machines by profile": ("bigfleet_idle_owned_machines", "by (profile)"),
        "Elastic machines while owned idle": ("bigfleet_elastic_while_owned_idle_machines", ""),
    }
    for title, parts in wanted.items():
        assert title in exprs_by_title, title
        assert all(part in exprs_by_title[title] for part in parts), (title, parts)
    # Every panel of the row is a cost panel.
    assert all(
        any(m in exprs_by_title[p["title"]] for m in COST_METRICS) for p in below
    ), sorted(exprs_by_title)


def row_panels(ps: list[dict[str, Any]], row: dict[str, Any]) -> list[dict[str, Any]]:
    """The panels below `row` and above the next row."""
    y = row["gridPos"]["y"]
    rows = [p["gridPos"]["y"] for p in ps if p.get("type") == "row" and p["gridPos"]["y"] > y]
    end = min(rows, default=float("inf"))
    return [p for p in ps if y < p["gridPos"]["y"] < end]


def test_the_dashboard_has_a_node_cost_row_of_opencost_names_the_workers_export():
    from workers.node_costs import GAUGES, LABELS

    ps = panels(dashboard())
    (row,) = [p for p in ps if p.get("type") == "row" and "OpenCost" in p["title"]]
    text = " ".join(t["expr"] for p in row_panels(ps, row) for t in p["targets"])
    named = set(re.findall(r"\b(?:node|kubecost)_[a-z_]+\b", text))
    assert "node_total_hourly_cost" in named and "kubecost_node_is_spot" in named, named
    assert named <= {name for name, _ in GAUGES}, named
    assert {"node", "instance_type", "region", "provider_id", "cluster"} == set(LABELS)


# ---- one pool across shards (issue 45) ---------------------------------------------------------

POOL_METRICS = ("bigfleet_elastic_beside_idle_owned", "bigfleet_coordinator_moves_total")


def test_elastic_beside_idle_owned_alerts_after_15_minutes():
    names, histograms = exported()
    assert set(POOL_METRICS) <= names and not set(POOL_METRICS) & histograms
    (rule,) = [r for r in rules() if "bigfleet_elastic_beside_idle_owned" in r["expr"]]
    assert rule["alert"] == "BigFleetElasticBesideIdleOwned"
    assert re.fullmatch(r"sum\(max by \(profile\) \(bigfleet_elastic_beside_idle_owned\)\) > 0",
                        rule["expr"].strip())  # fmt: skip
    assert rule["for"] == "15m"


def test_the_dashboard_has_a_pool_row():
    ps = panels(dashboard())
    (row,) = [p for p in ps if p.get("type") == "row" and p["title"] == "Pool across shards"]
    exprs_by_title = {
        p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in row_panels(ps, row)
    }
    by_profile = "Elastic machines beside idle owned ones in another shard, by profile"
    assert "bigfleet_elastic_beside_idle_owned" in exprs_by_title[by_profile]
    assert "by (profile)" in exprs_by_title[by_profile]
    moves = exprs_by_title["Machines moved between shards, by reason"]
    assert "bigfleet_coordinator_moves_total" in moves and "reason" in moves
