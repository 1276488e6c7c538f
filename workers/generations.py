"""What the roll-up gateway knows of each cluster's generation (`Generations`): what the
cluster's shard said when last asked, raised by what the gateway delivered since. The gateway
answers STALE_GENERATION by it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger("bigfleet.gateway")

# The gateway asks a cluster's shard for its generation when it last asked this long ago (and
# believes what it delivered meanwhile): another gateway or a `--direct` send may have moved it.
# Well under the shard's max_silence_seconds (300 s): a cluster that aged out is asked again.
ASK_GENERATION_EVERY_SECONDS = 60.0
GENERATION_CLUSTERS = 100_000  # clusters whose generation the gateway remembers (LRU)

# cluster -> the generation its shard holds (-1: none), or None if it cannot say now
AskGeneration = Callable[[str], Awaitable[int | None]]


@dataclass(slots=True)
class _Known:
    generation: int | None  # None: the shard could not say, and nothing was delivered since
    asked: float  # when the shard was last asked (monotonic)
    raised: float  # when a delivery last raised `generation`


class Generations:
    """The generation each cluster's shard holds, as far as this gateway knows: what the shard
    answered when last asked (`ask`, at most every `every` seconds a cluster), raised by what
    the gateway delivered since. A shard's answer replaces what the gateway believed (a cluster
    that aged out, or a shard reset to before some roll-ups, holds a lower one), except for
    deliveries made while it was being asked. Bounded: the `size` clusters last sent for."""

    def __init__(
        self,
        ask: AskGeneration | None,
        every: float = ASK_GENERATION_EVERY_SECONDS,
        size: int = GENERATION_CLUSTERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ask = ask
        self.every = every
        self.size = size
        self.clock = clock
        self._known: OrderedDict[str, _Known] = OrderedDict()
        self._asking: dict[str, asyncio.Future[None]] = {}

    async def current(self, cluster: str) -> int | None:
        """The cluster's generation (-1: none yet); None if nobody knows."""
        known = self._known.get(cluster)
        if known is not None:
            self._known.move_to_end(cluster)
        if self.ask is not None and (known is None or self.clock() - known.asked >= self.every):
            asking = self._asking.get(cluster)
            if asking is None:  # one question at a time a cluster
                asking = asyncio.ensure_future(self._ask(cluster, self.clock()))
                self._asking[cluster] = asking
                asking.add_done_callback(lambda _: self._asking.pop(cluster, None))
            await asyncio.shield(asking)
            known = self._known.get(cluster)
        return known.generation if known is not None else None

    async def _ask(self, cluster: str, started: float) -> None:
        assert self.ask is not None
        try:
            answer = await self.ask(cluster)
        except Exception as err:  # (ShardRouter.generation never raises; a stand-in might)
            log.info("asking the shard of %s for its generation: %s", cluster, err)
            answer = None
        known = self._known.get(cluster)
        if known is None:
            self._remember(cluster, _Known(answer, self.clock(), -1.0))
            return
        known.asked = self.clock()  # (also when it could not say: not asked again at once)
        if answer is None:
            return
        if known.raised >= started and known.generation is not None:  # delivered meanwhile
            answer = max(answer, known.generation)
        known.generation = answer

    def delivered(self, cluster: str, generation: int) -> None:
        """A roll-up of `generation` reached the cluster's shard."""
        known = self._known.get(cluster)
        if known is None:
            self._remember(cluster, _Known(generation, float("-inf"), self.clock()))
        elif known.generation is None or generation > known.generation:
            known.generation = generation
            known.raised = self.clock()

    def _remember(self, cluster: str, known: _Known) -> None:
        self._known[cluster] = known
        self._known.move_to_end(cluster)
        while len(self._known) > self.size:
            self._known.popitem(last=False)
