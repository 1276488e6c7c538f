"""`bigfleet provider fence show|reset`: the fencing epochs a reference provider server keeps
per shard (issue 44), read or reset in its --state-dir while it runs.

The server's store is the one source of truth for its fences (a served provider's own step
aside: bigfleet/providers/fencing.py `OwnFences`), and it reads a shard's fence on every call,
so a reset takes effect at the next call. Every reset is recorded in the server's call log
(`bigfleet provider calls`): method FenceReset, who, the epoch before and after, and why.
"""

from __future__ import annotations

import argparse
import getpass
import json
import socket
import time

from bigfleet.edge.provider_store import existing
from bigfleet.epochs import latest_issued
from workers.errors import CliError


def register(pverbs: argparse._SubParsersAction) -> None:
    """`provider fence show` and `provider fence reset`."""
    f = pverbs.add_parser(
        "fence",
        help="show or reset the fencing epochs a `provider serve` keeps per shard",
        description="The highest shard epoch the server took per shard: a call below it is "
        "refused as stale. A shard refused as stale takes a newer epoch by itself a few times "
        "an hour; past that it escalates (`bigfleet status`), and an operator looks here.",
    )
    fverbs = f.add_subparsers(dest="fence", required=True)
    show = fverbs.add_parser("show", help="every shard's kept epoch")
    show.add_argument("--state-dir", required=True, metavar="DIR", help="the server's --state-dir")
    show.add_argument("--json", action="store_true", help="print JSON ({shard: epoch})")
    show.set_defaults(run=run_show)
    reset = fverbs.add_parser(
        "reset",
        help="drop (or set) one shard's kept epoch; recorded in the call log",
        description="Drop shard N's kept epoch, so its next call that succeeds is kept, or set "
        "it with --to (at most the server's clock plus its skew). Recorded in the call log "
        "with who did it and --reason.",
    )
    reset.add_argument("--state-dir", required=True, metavar="DIR", help="the server's --state-dir")
    reset.add_argument("--shard", required=True, type=int, metavar="N", help="the shard's id")
    reset.add_argument("--to", type=int, metavar="EPOCH", help="the epoch to keep instead (ms)")
    reset.add_argument("--reason", default="", metavar="TEXT", help="why (kept in the call log)")
    reset.set_defaults(run=run_reset)


def run_show(args: argparse.Namespace) -> int:
    """`bigfleet provider fence show`."""
    try:
        store = existing(args.state_dir)
    except OSError as err:
        raise CliError(str(err)) from None
    try:
        fences = store.fences()
    finally:
        store.close()
    if args.json:
        print(json.dumps({str(k): v for k, v in fences.items()}))
        return 0
    now_ms = int(time.time() * 1000)
    if not fences:
        print("no fences kept")
    for shard, epoch in fences.items():
        ahead = epoch - now_ms
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch / 1000))
        note = f"  ({ahead / 1000:.1f} s ahead of this clock)" if ahead > 0 else ""
        print(f"shard {shard}: epoch {epoch} (started {when}Z){note}")
    print(f"(epochs above {latest_issued(time.time())} are refused as never issued)")
    return 0


def run_reset(args: argparse.Namespace) -> int:
    """`bigfleet provider fence reset`."""
    if args.shard < 0:
        raise CliError(f"--shard: {args.shard}: a shard id is 0 or more", code=2)
    try:
        store = existing(args.state_dir)
    except OSError as err:
        raise CliError(str(err)) from None
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    try:
        before = store.reset_fence(args.shard, args.to, who, args.reason)
    except ValueError as err:
        raise CliError(str(err), code=2) from None
    finally:
        store.close()
    after = "dropped" if args.to is None else f"set to {args.to}"
    print(f"shard {args.shard}: fence {before} {after} (by {who}; recorded in the call log)")
    return 0
