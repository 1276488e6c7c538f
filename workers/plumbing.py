"""What every `bigfleet` verb that talks to Temporal shares: the one-line error (`CliError`),
running an async verb, connecting (with retries), RPC errors in one line, the running shards
and a query that waits out a shard reading its snapshot back.

It loads Temporal: workers/cli.py imports a verbs module, and so this one, only when its verb
is chosen. `CliError` itself lives in workers/errors.py, which loads nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.service import RPCError, RPCStatusCode

import workers.connect
from workers.errors import CliError


def blocking(coro: Callable[[argparse.Namespace], Awaitable[int]]) -> Callable[..., int]:
    """An async verb as the plain function argparse's `run=` default calls."""

    def run(args: argparse.Namespace) -> int:
        return asyncio.run(coro(args))

    return run


def display_address(args: argparse.Namespace) -> str:
    """The Temporal server and namespace a verb talks to, as its messages name them."""
    address = getattr(args, "address", None) or os.environ.get("TEMPORAL_ADDRESS")
    namespace = getattr(args, "namespace", None) or os.environ.get(
        "TEMPORAL_NAMESPACE", "default"
    )
    return f"{address or 'localhost:7233 (or the profile default)'}, namespace {namespace}"


async def connect(args: argparse.Namespace, rt: Any = None, wait: float = 0.0) -> Any:
    """Connect, retrying for `wait` seconds (a worker may start before its server)."""
    deadline = time.monotonic() + wait
    delay = 1.0
    while True:
        try:
            return await workers.connect.connect(args.address, args.namespace, rt)
        except Exception as err:  # RuntimeError from the core, or a bad config
            if time.monotonic() >= deadline:
                raise CliError(
                    f"cannot connect to Temporal at {display_address(args)}: {err}\n"
                    "  is the server running (`./bf dev`)? Point at it with --address HOST:PORT "
                    "or TEMPORAL_ADDRESS (and --namespace or TEMPORAL_NAMESPACE)"
                ) from None
            print(
                f"bigfleet {args.verb}: Temporal at {display_address(args)} not reachable yet "
                f"({err}); retrying",
                file=sys.stderr,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)


def rpc_error(err: Exception, what: str) -> CliError:
    """A Temporal RPC failure as a one-line CliError about `what` (NOT_FOUND: is it running?)."""
    if isinstance(err, RPCError) and err.status == RPCStatusCode.NOT_FOUND:
        return CliError(f"{what}: not found (is it running? see `bigfleet status`)")
    return CliError(f"{what}: {err}")


async def running_shards(client: Any) -> list[int]:
    """The numbers of the shard workflows running now, from the server's visibility."""
    found = []
    async for wf in client.list_workflows(
        'WorkflowType = "Shard" AND ExecutionStatus = "Running"'
    ):
        if wf.id.startswith("shard-") and wf.id[6:].isdigit():
            found.append(int(wf.id[6:]))
    return sorted(found)


async def shards_asked(client: Any, args: Any) -> list[int]:
    """`--shard N`, else every running shard; a CliError if there is none."""
    shards = [args.shard] if args.shard is not None else await running_shards(client)
    if not shards:
        raise CliError(f"no shard workflow is running on {display_address(args)}")
    return list(shards)


#: How long a query waits out a refusal that passes (`passing_refusal`) before the refusal is
#: the answer.
QUERY_PATIENCE_SECONDS = 10.0


def passing_refusal(err: BaseException) -> bool:
    """A query refused for a moment, not for good: a large shard reading its state back from
    its snapshot after a continue-as-new, or a workflow task being tried again. The second
    happens on a healthy shard too: a continue-as-new is refused (UnhandledCommand) when a
    roll-up, a timer or an activity's result arrives during its task, and the server answers
    queries "Workflow Task in failed state" until the next task completes, a moment later. A
    shard whose task keeps failing is wedged: the refusal outlasts any patience."""
    text = str(err)
    return "reading its snapshot back" in text or "Workflow Task in failed state" in text


async def query(client: Any, wid: str, name: str, *args: Any) -> Any:
    """Query workflow `wid`, waiting out a refusal that passes (up to
    `QUERY_PATIENCE_SECONDS`); a CliError if it fails."""
    deadline = time.monotonic() + QUERY_PATIENCE_SECONDS
    while True:
        try:
            return await client.get_workflow_handle(wid).query(name, *args)
        except Exception as err:
            if passing_refusal(err) and time.monotonic() < deadline:
                await asyncio.sleep(0.25)
                continue
            if "Workflow Task in failed state" in str(err):
                raise CliError(
                    f"{wid}: its workflow task has kept failing for {QUERY_PATIENCE_SECONDS:.0f} s "
                    "(wedged: `bigfleet status` says why; the coordinator revives a wedged "
                    "shard, or `bigfleet shard revive N`)"
                ) from None
            raise rpc_error(err, wid) from None
