"""`bigfleet rollout`: a new build of the shard workers on a few shards first, side by side with
the rest, then promoted or rolled back (docs/rollout.md; workflows/shard_builds.py). The parser
and main() are in workers/cli.py.

    bigfleet worker --role shards --build B        # the new build's workers, beside the old
    bigfleet rollout start --build B               # about 5 % of the shards (at least one)
    bigfleet rollout status                        # each shard's build; each build's health
    bigfleet rollout promote --build B             # every shard
    bigfleet rollout back                          # every shard to the default build

A shard moves at its next continue-as-new (its run never changes code mid-history); `status`
shows `next_build` until it has.
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
from collections import defaultdict
from typing import Any

from temporalio.client import WorkflowUpdateFailedError

from activities.wire import shard_workflow_id
from workers.args import build_name, connection_options, shard_number
from workers.errors import CliError
from workers.plumbing import blocking, connect, query, rpc_error, shards_asked

DEFAULT_SHARE = 0.05


def register(verbs: argparse._SubParsersAction) -> None:
    """`rollout start|status|promote|back`."""
    ro = verbs.add_parser("rollout", help="a new build of the shard workers, shard by shard")
    rverbs = ro.add_subparsers(dest="what", required=True)
    start = rverbs.add_parser(
        "start",
        help="move a few shards to a build at their next continue-as-new",
        description="Move a share of the shards (about 5 %% by default, at least one; the ones "
        "holding the fewest machines) or the shards named to build B, whose workers must be "
        "running (`bigfleet worker --role shards --build B`). Each moves at its next "
        "continue-as-new. See docs/rollout.md.",
    )
    start.add_argument("--build", required=True, type=build_name, metavar="B")
    start.add_argument(
        "--share", type=float, default=DEFAULT_SHARE, help="share of the shards (default 0.05)"
    )
    start.add_argument("--shards", type=shard_number, nargs="+", metavar="N", help="these shards")
    promote = rverbs.add_parser("promote", help="move every shard to a build")
    promote.add_argument("--build", required=True, type=build_name, metavar="B")
    back = rverbs.add_parser("back", help="move every shard back to a build (default: default)")
    back.add_argument("--build", default="", type=build_name, metavar="B")
    status = rverbs.add_parser("status", help="each shard's build, each build's health")
    status.add_argument("--json", action="store_true", help="print JSON")
    for p in (start, promote, back):
        p.add_argument("--reason", default="", help="why (kept in each shard's log of moves)")
    for p in (start, promote, back, status):
        connection_options(p)
        p.set_defaults(run=run_rollout)


@blocking
async def run_rollout(args: argparse.Namespace) -> int:
    client = await connect(args)
    args.shard = None
    shards = await shards_asked(client, args)
    if args.what == "status":
        return await _status(client, shards, args.json)
    views = {s: await query(client, shard_workflow_id(s), "status") for s in shards}
    if args.what == "start":
        chosen = args.shards or _fewest(views, args.share)
        unknown = sorted(set(chosen) - set(shards))
        if unknown:
            raise CliError(f"--shards: {unknown} are not running shards ({shards})", code=2)
    else:
        chosen = shards
    for s in chosen:
        answer = await _move(client, s, args.build, args.reason)
        print(
            f"shard {s}: on {answer['build'] or 'default'}; next: {answer['next'] or 'default'} "
            f"({answer['when']})"
        )
    return 0


def _fewest(views: dict[int, dict[str, Any]], share: float) -> list[int]:
    """The share of the shards (at least one) that hold the fewest machines."""
    if not 0 < share <= 1:
        raise CliError(f"--share: between 0 and 1, got {share}", code=2)
    n = max(1, math.floor(share * len(views) + 0.5))
    by_size = sorted(views, key=lambda s: (sum(views[s]["machines"].values()), s))
    return sorted(by_size[:n])


def build_label(st: dict[str, Any]) -> str:
    """A shard's build for `bigfleet status` (nothing on the default build, not moving)."""
    build, moving = st.get("build") or "", st.get("next_build")
    if not build and moving is None:
        return ""
    return f"  build {build or 'default'}" + (f" -> {moving or 'default'}" if moving is not None
                                              else "")  # fmt: skip


async def _move(client: Any, shard: int, build: str, reason: str) -> dict[str, Any]:
    try:
        by = getpass.getuser()[:100]
    except (OSError, KeyError):
        by = ""
    wid = shard_workflow_id(shard)
    try:
        return await client.get_workflow_handle(wid).execute_update(
            "move_to_build", {"build": build, "reason": reason[:200], "by": by}
        )
    except WorkflowUpdateFailedError as err:
        raise CliError(f"{wid} refused: {err.cause}") from None
    except Exception as err:
        raise rpc_error(err, wid) from None


async def _status(client: Any, shards: list[int], as_json: bool) -> int:
    """Each shard's build and health, and each build's totals side by side."""
    rows = []
    for s in shards:
        v = await query(client, shard_workflow_id(s), "status")
        rows.append(
            {
                "shard": s,
                "build": v.get("build", ""),
                "next_build": v.get("next_build"),
                "cycles": v["cycles"],
                "last_cycle_ms": v["last_cycle_ms"],
                "machines": sum(v["machines"].values()),
                "draining": v["machines"].get("DRAINING", 0),
                "shortfalls": len(v["shortfalls"]),
                "refused_inputs": sum(v["rejected_inputs"].values()),
                "failures": len(v["failures"]),
            }
        )
    builds: dict[str, dict[str, Any]] = defaultdict(lambda: defaultdict(float))
    for r in rows:
        b = builds[r["build"]]
        b["shards"] += 1
        for k in ("machines", "draining", "shortfalls", "refused_inputs", "failures"):
            b[k] += r[k]
        b["cycle_ms_mean"] += r["last_cycle_ms"]
    for b in builds.values():
        b["cycle_ms_mean"] = round(b["cycle_ms_mean"] / b["shards"], 3)
    if as_json:
        print(json.dumps({"shards": rows, "builds": builds}, indent=2))
        return 0
    head = f"{'SHARD':>5} {'BUILD':<16} {'NEXT':<16} {'CYCLES':>7} {'CYCLE MS':>9} "
    print(head + f"{'MACHINES':>8} {'DRAINING':>8} {'SHORT':>5} {'REFUSED':>7} {'FAILED':>6}")
    for r in rows:
        nxt = "-" if r["next_build"] is None else (r["next_build"] or "default")
        print(
            f"{r['shard']:>5} {r['build'] or 'default':<16} {nxt:<16} {r['cycles']:>7} "
            f"{r['last_cycle_ms']:>9.1f} {r['machines']:>8} {r['draining']:>8} "
            f"{r['shortfalls']:>5} {r['refused_inputs']:>7} {r['failures']:>6}"
        )
    print()
    for name, b in sorted(builds.items()):
        print(
            f"build {name or 'default'}: {int(b['shards'])} shard(s), mean cycle "
            f"{b['cycle_ms_mean']:.1f} ms, {int(b['machines'])} machines, "
            f"{int(b['draining'])} draining, {int(b['shortfalls'])} shortfalls, "
            f"{int(b['refused_inputs'])} inputs refused, {int(b['failures'])} failed calls"
        )
    return 0
