"""A sender of roll-ups to BigFleet's gateway (the Rollups service of
proto/bigfleet/v1/rollups.proto): what `bigfleet rollup send` and `bigfleet operator serve` use,
and what a cluster operator written in Python would.

    sender = RollupSender("gateway.example:50070", ClientTLS(ca=..., cert=..., key=...))
    accepted = await sender.send(rollup)      # RollupAccepted(shard, generation, workflow_id)

Credentials: a TLS client certificate naming the cluster (`tls.cert`/`tls.key`), or a bearer
token (`token`, sent as `authorization: Bearer ...`), or both. A refusal is a grpc.aio.AioRpcError
(`refusal_text` says it in one line).
"""

from __future__ import annotations

import re
from pathlib import Path

import grpc

from ..deployment import ClientTLS
from ..models import ClusterCapacityNeeds
from ..v1 import rollups_pb2 as rpb
from ..v1 import rollups_pb2_grpc as rpg
from .convert import rollup_to_proto
from .errors import error_info
from .tls import aio_channel

SEND_SECONDS = 30.0  # the gateway may start the coordinator for a new fleet's first roll-up


def read_token(path: str | Path) -> str:
    """A token file's token (surrounding whitespace dropped); ValueError if it is empty."""
    token = Path(path).read_text().strip()
    if not token:
        raise ValueError(f"{path}: empty token file")
    if any(c.isspace() for c in token):
        raise ValueError(f"{path}: a token is one word")
    return token


class RollupSender:
    """Roll-ups to one gateway, over one channel (made on first use)."""

    def __init__(
        self,
        endpoint: str,
        tls: ClientTLS | None = None,
        token: str | None = None,
        deadline_seconds: float = SEND_SECONDS,
    ) -> None:
        self.endpoint = endpoint
        self.tls = tls
        self.token = token
        self.deadline = deadline_seconds
        self._channel: grpc.aio.Channel | None = None

    def _stub(self) -> rpg.RollupsStub:
        if self._channel is None:
            self._channel = aio_channel(self.endpoint, self.tls)
        return rpg.RollupsStub(self._channel)

    async def send(self, rollup: ClusterCapacityNeeds) -> rpb.RollupAccepted:
        return await self.send_proto(rollup_to_proto(rollup))

    async def send_proto(self, pb: rpb.ClusterCapacityNeeds) -> rpb.RollupAccepted:
        metadata = (("authorization", f"Bearer {self.token}"),) if self.token else None
        result: rpb.RollupAccepted = await self._stub().Send(
            pb, timeout=self.deadline, metadata=metadata
        )
        return result

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()


def refusal_text(err: grpc.RpcError) -> str:
    """`CODE: details` (and the field, for an invalid one) of a refused call."""
    code = err.code() if hasattr(err, "code") else None
    details = (err.details() if hasattr(err, "details") else "") or ""
    info = error_info(err)
    name = code.name if code is not None else "no status"
    if info is not None and info.field and info.field not in details:
        details = f"{details} (field {info.field})"
    hint = ""
    if code == grpc.StatusCode.UNAVAILABLE and _HANDSHAKE.search(details):
        hint = (
            " — the gateway closed the connection before any answer: the two sides do not "
            "speak the same security. A gateway with TLS needs --tls-ca (and, unless it takes "
            "tokens, the cluster's --tls-cert and --tls-key); one without TLS needs none of them"
        )
    return f"{name}: {details}{hint}"


# How a refused TLS handshake, or TLS spoken to plaintext (and back), shows in gRPC's details.
_HANDSHAKE = re.compile(
    r"Socket closed|handshake|SSL|TLS|certificate|Connection reset|wrong version", re.I
)
