"""`bigfleet shadow report`: what shards in shadow mode would have done against what happened
at the providers (docs/shadow.md), and what BigFleet would have done for each cluster in shadow
against what the cluster has (bigfleet/shadow_clusters.py, docs/adoption.md). The parser and
main() are in workers/cli.py.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from activities.wire import shard_workflow_id
from workers.args import connection_options, shard_number
from workers.errors import CliError
from workers.plumbing import blocking, connect, query, shards_asked

RECENT_SHOWN = 5


def register(verbs: argparse._SubParsersAction) -> None:
    """`shadow report [--shard N] [--json]`."""
    sh = verbs.add_parser("shadow", help="shards in shadow mode: would-be against actual")
    sverbs = sh.add_subparsers(dest="what", required=True)
    r = sverbs.add_parser(
        "report",
        help="would-be against actual: cost, time to capacity, actions",
        description="What each shard in shadow mode would have done (its decisions) against "
        "what happened at the providers (machines others created, configured, drained, "
        "deleted): cost per hour and so far, time to capacity (p50/p99), actions by kind. "
        "See docs/shadow.md for what the figures mean and leave out.",
    )
    connection_options(r)
    r.add_argument("--shard", type=shard_number, metavar="N", help="one shard (default: all)")
    r.add_argument(
        "--clusters",
        action="store_true",
        help="the clusters in shadow (`bigfleet cluster NAME --mode shadow`, the deployment's "
        "shadow_clusters) instead of shards: what BigFleet would give each against what it has",
    )
    r.add_argument("--cluster", metavar="NAME", help="one cluster in shadow (implies --clusters)")
    r.add_argument("--json", action="store_true", help="print JSON (with the recent entries)")
    r.set_defaults(run=run_report)


@blocking
async def run_report(args: argparse.Namespace) -> int:
    client = await connect(args)
    shards = await shards_asked(client, args)
    if args.clusters or args.cluster is not None:
        return await _clusters(client, args, shards)
    reports = []
    for s in shards:
        try:
            reports.append(await query(client, shard_workflow_id(s), "shadow_report"))
        except CliError as err:
            if args.shard is not None or "not in shadow mode" not in str(err):
                raise
    if not reports:
        raise CliError(
            f"no shard runs in shadow mode (shards {shards}); see docs/shadow.md (clusters in "
            "shadow: --clusters)"
        )
    if args.json:
        print(json.dumps(reports[0] if args.shard is not None else reports, indent=2))
    else:
        print("\n\n".join(render(r) for r in reports))
    return 0


async def _clusters(client: Any, args: argparse.Namespace, shards: list[int]) -> int:
    """`--clusters` / `--cluster NAME`: each cluster in shadow, from the shard it reports to."""
    clusters = []
    for s in shards:
        got = await query(client, shard_workflow_id(s), "shadow_clusters")
        clusters += [
            {**c, "shard": s, "error": got["error"]}
            for c in got["clusters"]
            if args.cluster in (None, c["cluster"])
        ]
    if not clusters:
        what = f"cluster {args.cluster} is" if args.cluster else "no cluster is"
        raise CliError(
            f"{what} not in shadow on shards {shards} (or sent no roll-up yet); see "
            "docs/adoption.md"
        )
    if args.json:
        print(json.dumps(clusters, indent=2))
    else:
        print("\n\n".join(map(render_cluster, clusters)))
    return 0


def render_cluster(r: dict[str, Any]) -> str:
    """One shadow cluster: what BigFleet would have given it against what it has."""
    would, actual = r["would_be"], r["actual"]
    machines = [("machines", str(would["machines"]), str(actual["machines"]))]
    lines = [
        f"cluster {r['cluster']} (shadow, shard {r['shard']}): since {_when(r['since'])}, "
        f"{r['cycles']} cycles (last {_when(r['at'])}); asks for {r['asked']} machines",
        *_table(would, actual, "times covered", machines),
        f"  would-be actions: {_kinds(would['actions'])}",
        f"  short since: {_when(r['short_since'])}; needs withdrawn before covered: "
        f"{r['withdrawn']}; machines it has that no provider listed (not priced): "
        f"{actual['unpriced']}",
    ]
    lines += [
        f"  would {a['kind']:<9} {a['machine']}"
        + (f" (+{a['machines'] - 1})" if a["machines"] > 1 else "")
        + f" at {_when(a['t'])}"
        for a in r["recent_actions"][-RECENT_SHOWN:]
    ]
    if r["error"]:
        lines.append(f"  the shadow's last failure: {r['error']}")
    return "\n".join(lines)


def _when(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _seconds(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s"


def _kinds(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "none"


def _spend_rows(
    would: dict[str, Any] | None, actual: dict[str, Any] | None
) -> list[tuple[str, str, str]]:
    """Billed $/h (bigfleet/spend.py's rules) by capacity type, idle owned machines and
    elastic machines an idle owned one could replace, each side; none before a cycle."""
    if would is None or actual is None:
        return []
    w, a = would["dollars_per_hour"], actual["dollars_per_hour"]
    rows = [("billed $/h", f"${w:.2f}", f"${a:.2f}")]
    for ct in would["by_capacity_type"]:
        w, a = would["by_capacity_type"][ct], actual["by_capacity_type"].get(ct, 0.0)
        if w or a:
            rows.append((f"  {ct}", f"${w:.2f}", f"${a:.2f}"))
    rows.append(("idle owned machines", str(sum(would["idle_owned_machines"].values())),
                 str(sum(actual["idle_owned_machines"].values()))))  # fmt: skip
    rows.append(("elastic w/ owned idle", str(would["elastic_while_owned_idle_machines"]),
                 str(actual["elastic_while_owned_idle_machines"])))  # fmt: skip
    return rows


def _table(would: dict[str, Any], actual: dict[str, Any], covered: str,
           rows: list[tuple[str, str, str]]) -> list[str]:  # fmt: skip
    """Would-be against actual, side by side: `rows`, then cost and time to capacity."""
    wt, at = would["time_to_capacity"], actual["time_to_capacity"]
    rows = [
        *rows,
        ("cost per hour", f"${would['cost_per_hour']:.2f}", f"${actual['cost_per_hour']:.2f}"),
        ("cost so far", f"${would['cost_usd']:.2f}", f"${actual['cost_usd']:.2f}"),
        ("time to capacity p50", _seconds(wt["p50"]), _seconds(at["p50"])),
        ("time to capacity p99", _seconds(wt["p99"]), _seconds(at["p99"])),
        (covered, str(wt["count"]), str(at["count"])),
    ]
    return [
        f"  {'':<22} {'WOULD-BE':>12} {'ACTUAL':>12}",
        *(f"  {name:<22} {w:>12} {a:>12}" for name, w, a in rows),
    ]


def render(r: dict[str, Any]) -> str:
    would, actual = r["would_be"], r["actual"]
    lines = [
        f"shard {r['shard']}: shadow since {_when(r['since'])}, {r['cycles']} cycles "
        f"(last {_when(r['at'])})",
        *_table(would, actual, "needs covered", []),
        *(f"  {name:<22} {w:>12} {a:>12}"
          for name, w, a in _spend_rows(would.get("spend"), actual.get("spend"))),  # fmt: skip
        f"  would-be actions: {_kinds(would['actions'])}",
        f"  actual changes:   {_kinds(actual['changes'])}",
        f"  short now: {r['short_now']} cluster(s); needs withdrawn before covered: "
        f"{r['withdrawn']}; covered at the providers before the shadow decided it: "
        f"{r['actual_first']}",
        "  (would-be time to capacity excludes the providers' latency: docs/shadow.md)",
    ]
    for a in r["recent_actions"][-RECENT_SHOWN:]:
        lines.append(
            f"  would {a['kind']:<9} {a['machine']}"
            + (f" (+{a['machines'] - 1})" if a["machines"] > 1 else "")
            + f" {a['provider']}/{a['capacity_type']}"
            + (f" for {a['cluster']}" if a["cluster"] else "")
            + (f": {a['reason']}" if a["reason"] else "")
            + f" at {_when(a['t'])}"
        )
    for c in r["recent_changes"][-RECENT_SHOWN:]:
        lines.append(
            f"  saw {'+'.join(c['kinds']):<11} {c['machine']} {c['provider']} "
            f"{c['from'] or '-'} -> {c['to'] or 'gone'}"
            + (f" ({c['cluster']})" if c["cluster"] else "")
            + f" at {_when(c['t'])}"
        )
    return "\n".join(lines)
