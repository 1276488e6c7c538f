"""Idle Send calls held open against a roll-up gateway, from their own process (issue 44, the
gateway starved by streams that never send a body; tests/edge/test_gateway_starvation.py):

    python -m tests.edge.idle_streams --gateway HOST:PORT --streams 2000 \
        [--token-streams 40 --token TOKEN] [--per-connection 50]

Each call sends its headers (with `authorization: Bearer TOKEN` for the token streams, none for
the others) and never a body, with no deadline, over connections of its own (`per-connection`
calls each: gRPC's default connection limit is 100 streams). Prints one JSON line
{"connected": N} once every call's headers are out (or the call has ended), then one
{"ended": {kind: {code: count}}, "details": {kind: {code: a detail}}} once every call ended.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from typing import Any

import grpc

from bigfleet.v1 import rollups_pb2 as rpb

METHOD = "/bigfleet.v1.Rollups/Send"


def hold(channel: grpc.aio.Channel, token: str | None) -> Any:
    """One idle call: its headers, then nothing."""
    send = channel.stream_unary(
        METHOD,
        request_serializer=rpb.ClusterCapacityNeeds.SerializeToString,
        response_deserializer=rpb.RollupAccepted.FromString,
    )
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    return send(metadata=metadata)  # no request iterator: nothing is written, ever


async def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gateway", required=True)
    p.add_argument("--streams", type=int, default=2000)
    p.add_argument("--token-streams", type=int, default=0)
    p.add_argument("--token")
    p.add_argument("--per-connection", type=int, default=50)
    args = p.parse_args(argv)
    kinds = [("token", args.token)] * args.token_streams + [("anonymous", None)] * args.streams
    channels: list[grpc.aio.Channel] = []
    calls: list[tuple[str, Any]] = []
    for n, (kind, token) in enumerate(kinds):
        if n % args.per_connection == 0 or kind != kinds[n - 1][0]:
            # A pool of its own: a connection of its own (channels share them otherwise).
            channels.append(grpc.aio.insecure_channel(
                args.gateway, options=[("grpc.use_local_subchannel_pool", 1)]))  # fmt: skip
        calls.append((kind, hold(channels[-1], token)))
    # Once every call's headers are out (a call refused at once is out too).
    await asyncio.gather(*(c.wait_for_connection() for _, c in calls), return_exceptions=True)
    print(json.dumps({"connected": len(calls)}), flush=True)
    ended: dict[str, Counter[str]] = {}
    details: dict[str, dict[str, str]] = {}

    async def outcome(kind: str, call: Any) -> None:
        try:
            await call
            code, detail = "OK", ""
        except grpc.aio.AioRpcError as err:
            code, detail = err.code().name, err.details() or ""
        ended.setdefault(kind, Counter())[code] += 1
        details.setdefault(kind, {}).setdefault(code, detail)

    await asyncio.gather(*(outcome(kind, call) for kind, call in calls))
    print(json.dumps({"ended": ended, "details": details}), flush=True)
    for channel in channels:
        await channel.close()


if __name__ == "__main__":
    asyncio.run(main())
