"""Issue 30's reliability campaign, re-run and bounded: a fleet laid out as separate processes is
fed hostile input and killed while its roll-ups churn, then audited.

    python examples/hostile_campaign.py [--minutes N] [--seed S] [--json]

The fleet is tests/temporal/test_chaos.py's (2 shards, 12 GPUs, 12 cloud VMs, 3 clusters):
`temporal server start-dev` on a SQLite file with `bigfleet dev`'s blob limits, `bigfleet worker
--role shards,transitions` (the one killed) and `--role providers`. Under a roll-up per cluster
every 2 s (counts drawn from --seed) it sends test_fuzz_handlers.py's `hostile()` catalogue to
the signals and updates of the shards and the coordinator (refusals counted by the workflows'
`rejections` query before and after; each update must come back an error); replays issue 30's
six defects (a `bigfleet provider serve` of the fleet file's `cloud` provider, standalone, for
the 4th; a gateway in this process delivering to the fleet's shards for the 5th); SIGKILLs the
worker 3 times and the server once, then the worker every ~30 s while --minutes last; sends the
last counts again and audits until clean.

Exit 0 if the fleet held: audit clean (none owned by nobody or twice), every shard and the
coordinator running with no failing workflow task, every kill recovered, every hostile input
refused, every reproduction held; else 1. Takes about --minutes plus ~20 s (the scripted steps
alone take ~1.5-2 min; default 4: ~4.5 min on 2 cores); it gives up, failing, at --minutes + 5.5.
Logs and the Temporal database are kept (in /tmp) if it fails.
"""
# ruff: noqa: E402  (the repository root goes on sys.path before its modules are imported)

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from campaign_fleet import SECONDS
from campaign_reproductions import Reproductions
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from tests.procs import retrying
from tests.temporal.test_fuzz_handlers import LEGITIMATE, hostile

SHARD_SIGNALS = ["rollup", "transition_done", "revived", "no_such_signal"]
SHARD_UPDATES = ["adopt", "release", "drain_for_transfer", "cancel_transfer", "split_out",
                 "hand_out", "take_in", "retire", "decommission", "disown", "observe_records",
                 "reset_generation"]
COORD_SIGNALS = ["shard_report", "saga_done", "membership_done", "x" * 200]
COORD_UPDATES = ["assign_cluster", "split_shard", "merge_shards", "add_shard", "decommission",
                 "repair", "cluster_owners"]
# Also an operator's command, not hostile: the random JSON can be a real shard's number.
OPERATOR = {**LEGITIMATE,
            "split_shard": lambda a: len(a) == 1 and type(a[0]) is int and a[0] in (0, 1),
            "merge_shards": lambda a: len(a) == 1 and a[0] in ([0, 1], [1, 0])}


class Campaign(Reproductions):
    """The campaign: hostile input to the shards and the coordinator, the reproductions and the
    kills in their order while roll-ups churn, then the final audit."""

    # ---- hostile input --------------------------------------------------------------------------

    async def hostile(self, label: str, wid: str, signals: list[str], updates: list[str],
                      seed: int) -> None:
        handle, h = self.handle(wid), {"batch": label, "workflow": wid, "signals_sent": 0,
                                       "send_errors": 0, "updates_refused": 0, "accepted": [],
                                       "unanswered": 0, "skipped": 0}
        before = (await retrying("rejections", lambda: handle.query("rejections")))["total"]
        for name in signals:
            for _, args in hostile(seed):
                try:
                    await handle.signal(name, args=args, rpc_timeout=SECONDS)
                    h["signals_sent"] += 1
                except Exception:
                    h["send_errors"] += 1
        for name in updates:
            for what, args in hostile(seed):
                if OPERATOR.get(name, lambda _: False)(args):
                    h["skipped"] += 1  # what the update rightly takes
                    continue
                try:
                    await handle.execute_update(name, args=args, rpc_timeout=2 * SECONDS)
                    h["accepted"].append(f"{name}: {what}")
                except (WorkflowUpdateFailedError, RPCError):
                    h["updates_refused"] += 1
                except Exception:
                    h["unanswered"] += 1
        after = await self.until(lambda: handle.query("rejections"),
                                 lambda r: r["total"] >= before + h["signals_sent"], 60)
        after = (after or await handle.query("rejections"))["total"]
        h.update(rejections_before=before, rejections_after=after, signals_refused=after - before,
                 updates_sent=h["updates_refused"] + len(h["accepted"]) + h["unanswered"])
        self.out["hostile"].append(h)

    # ---- the campaign ---------------------------------------------------------------------------

    async def step(self, step: Any) -> None:
        """One step; one that fails is recorded and the campaign goes on."""
        try:
            await step()
        except Exception as err:
            self.out["step_errors"].append(f"{getattr(step, '__name__', 'step')}: "
                                           f"{type(err).__name__}: {str(err)[:300]}")

    async def run(self) -> None:
        began = time.monotonic()
        await self.start()
        self.out["setup_seconds"] = round(time.monotonic() - began, 1)
        began, stop = time.monotonic(), asyncio.Event()
        churn = asyncio.create_task(self.churn(stop))
        try:
            steps = [
                lambda: asyncio.gather(
                    self.hostile("A", "shard-1", SHARD_SIGNALS, SHARD_UPDATES, self.seed),
                    self.hostile("A", "coordinator", COORD_SIGNALS, COORD_UPDATES, self.seed + 1)),
                lambda: self.kill(self.worker), self.generations, self.phantom,
                lambda: self.kill(self.server, pause=1.0), self.forged_term, self.provider_epoch,
                self.gateway, lambda: self.kill(self.worker), self.flood,
                lambda: asyncio.gather(
                    self.hostile("B", "shard-0", SHARD_SIGNALS, SHARD_UPDATES, self.seed + 2),
                    self.hostile("B", "shard-1", SHARD_SIGNALS, [], self.seed + 3)),
                lambda: self.kill(self.worker)]
            for step in steps:
                await self.step(step)
            while time.monotonic() - began + 32 < self.minutes * 60:  # (a kill: ~32 s)
                await asyncio.sleep(20)
                await self.step(lambda: self.kill(self.worker))
        finally:
            stop.set()
            await churn
        self.out["chaos_seconds"] = round(time.monotonic() - began, 1)
        await self.converge()


def held(out: dict[str, Any]) -> bool:
    a, ws = out["audit"], out["workflows"].values()
    return bool(
        a.get("clean") and a.get("owned_twice") == 0 and a.get("nobody_owned") == 0
        and a.get("cli_exit_code") == 0 and out.get("processes_alive") and len(ws) >= 3
        and all(w["status"] == "RUNNING" and w["answers"] and w["task_attempt"] <= 1 for w in ws)
        and out["kills"] and all(k["recovered"] for k in out["kills"])
        and all(h["signals_refused"] >= h["signals_sent"] and not h["accepted"]
                and not h["send_errors"] for h in out["hostile"])
        and len(out["reproductions"]) == 6
        and all(r["held"] for r in out["reproductions"].values())
        and not out["step_errors"] and "error" not in out)


def table(out: dict[str, Any]) -> str:
    lines = [f"hostile campaign, seed {out['seed']}: setup {out.get('setup_seconds')} s, churn "
             f"and chaos {out.get('chaos_seconds')} s ({out['rounds']} rounds of roll-ups; "
             f"{out['send_errors']} sends failed while something was down)", "", "KILLS"]
    for what in sorted({k["what"] for k in out["kills"]}):
        ks = [k for k in out["kills"] if k["what"] == what]
        lines.append(f"  {what:<16} x{len(ks)}  recovered: " + ", ".join(
            f"yes {k['seconds']} s" if k["recovered"] else "NO" for k in ks))
    lines += ["", "HOSTILE PAYLOADS (signals: refusals the workflow counted, before -> after; "
              "updates: an error to the sender)"]
    for h in out["hostile"]:
        lines.append(
            f"  {h['batch']} {h['workflow']:<12} signals {h['signals_sent']:>3} sent, "
            f"{h['signals_refused']:>3} refused ({h['rejections_before']} -> "
            f"{h['rejections_after']}); updates {h['updates_sent']:>3} sent, "
            f"{h['updates_refused']:>3} refused, {len(h['accepted'])} accepted"
            f"{' ' + str(h['accepted']) if h['accepted'] else ''}, {h['unanswered']} "
            f"unanswered, {h['skipped']} legitimate not sent")
    sent = sum(h["signals_sent"] + h["updates_sent"] for h in out["hostile"])
    refused = sum(h["signals_refused"] + h["updates_refused"] for h in out["hostile"])
    lines += [f"  total: {sent} sent, {refused} refused", "", "REPRODUCTIONS (issue 30)"]
    for n, r in sorted(out["reproductions"].items()):
        lines.append(f"  {n}. {r['what']}: {'held' if r['held'] else 'FAILED'}\n"
                     f"       {r['observed']}")
    lines += ["", "WORKFLOWS AT THE END"] + [
        f"  {wid:<12} {w['status']}, answering queries: {w['answers']} (workflow task attempt "
        f"{w['task_attempt']})"
        for wid, w in out["workflows"].items()]
    a = out["audit"]
    lines += ["", "FINAL AUDIT", f"  machines audited {a.get('machines_audited')}, nobody-owned "
              f"{a.get('nobody_owned')}, owned twice {a.get('owned_twice')}, mismatched "
              f"{a.get('mismatch')}, unlisted {a.get('unlisted')}, in flight {a.get('in_flight')}"
              f"; clean: {a.get('clean')} after {a.get('seconds')} s; `bigfleet audit` exit "
              f"code {a.get('cli_exit_code')}", f"  configured {a.get('configured')}, last asked "
              f"{a.get('asked')}" + (f"\n  last audit error: {a['error']}" if a.get("error")
                                     else ""),
              *[f"STEP FAILED: {e}" for e in out["step_errors"]],
              "", f"THE FLEET {'HELD' if out['held'] else 'DID NOT HOLD'}"]
    return "\n".join(lines)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=4.0,
                    help="least length of the churn-and-chaos phase (default 4)")
    ap.add_argument("--seed", type=int, default=30, help="roll-up counts, hostile JSON")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)  # (the gateway logs each refusal)
    tmp = Path(tempfile.mkdtemp(prefix="hostile-campaign-"))
    campaign, began = Campaign(args.seed, args.minutes, tmp), time.monotonic()
    try:
        await asyncio.wait_for(campaign.run(), timeout=args.minutes * 60 + 330)
    except Exception as err:  # (a timeout too): report what was measured, and fail
        campaign.out["error"] = f"{type(err).__name__}: {err}"[:2000]
    finally:
        campaign.stop()
    out = campaign.out
    out["held"], out["wall_seconds"] = held(out), round(time.monotonic() - began, 1)
    if args.json:
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(table(out) + f" (wall time {out['wall_seconds']} s)")
        if "error" in out:
            print(f"campaign stopped: {out['error']}")
    if out["held"]:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"logs and the Temporal database: {tmp}", file=sys.stderr)
    return 0 if out["held"] else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
