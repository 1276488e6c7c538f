"""`provider_audit`: one provider's listing against every shard's holdings of its machines
(`bigfleet audit`). It runs on the provider's read queue, where the listing is at hand (the
simulated providers live in the `providers` worker only), reads the shards by the `holdings`
query page by page, looks twice (`settle_seconds` apart) and returns only the discrepancies
both looks saw: counts, and at most `limit` examples with the provider's records — never the
listing itself (a shard may hold 500 000 machines; a payload is capped at 2 MB)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.audit_wire import AuditFinding, AuditHolder, AuditRead, AuditReport
from activities.membership import ID_PAGE
from activities.providers import ProviderActivities, provider_errors
from activities.wire import MachinePage, shard_workflow_id
from bigfleet.assignment import machine_shard
from bigfleet.audit import HOLDINGS_PAGE_MAX, KINDS, Holding, classify, persisting
from bigfleet.cluster_modes import ClusterModes
from bigfleet.models import ListFilter, Machine, MachineState

QUERY_TRIES = 40


async def query(client: Client, shard: int, name: str, *args: Any, result_type: Any = None) -> Any:
    """A shard query, asked again while the shard reads its state back from the snapshot
    store (a moment after a large shard's continue-as-new)."""
    handle = client.get_workflow_handle(shard_workflow_id(shard))
    for attempt in range(QUERY_TRIES):
        try:
            return await handle.query(name, args=list(args), result_type=result_type)
        except Exception as err:
            if "snapshot" not in str(err) or attempt == QUERY_TRIES - 1:
                raise
            await asyncio.sleep(0.25)


class AuditActivities:
    def __init__(self, providers: ProviderActivities) -> None:
        self.providers = providers

    @activity.defn(name="provider_audit")
    # Over 60 lines: list, read the holdings, look twice, classify, report: one audit in
    # the order it happens (the steps are the functions of bigfleet/audit.py).
    async def audit(self, r: AuditRead) -> AuditReport:
        client = self.providers.client
        if client is None:
            raise ApplicationError("provider_audit needs a Temporal client", non_retryable=True)
        started = time.monotonic()
        first, _, _ = await self._look(client, r, r.now)
        await asyncio.sleep(r.settle_seconds)
        activity.heartbeat("second look")
        now = r.now + (time.monotonic() - started)
        second, listed, held = await self._look(client, r, now)
        found = persisting(first, second)
        # Machines a shard took out of the fleet (decommissioned bare metal) are nobody's on
        # purpose: not orphans.
        orphans = sorted(found["orphan"])
        retired: set[str] = set()
        for i in range(0, len(orphans), ID_PAGE):
            chunk = orphans[i : i + ID_PAGE]
            for shard in r.shards:
                states = await query(
                    client, shard, "machine_states", chunk, result_type=dict[str, str]
                )
                retired.update(mid for mid, s in states.items() if s == "DECOMMISSIONED")
        for mid in retired:
            del found["orphan"][mid]
        # Machines of clusters BigFleet leaves to their own autoscalers are not orphans either.
        left = await self._left_alone(client, r, found["orphan"], listed)
        for mid in left:
            del found["orphan"][mid]
        counts = {kind: len(found[kind]) for kind in (*KINDS, "in_flight")}
        counts["decommissioned"] = len(retired)
        counts["unmanaged"] = len(left)
        findings: list[AuditFinding] = []
        records: list[Machine] = []
        for kind in ("double", "orphan", "mismatch", "unlisted"):
            for mid in sorted(found[kind]):
                if len(findings) >= r.limit:
                    break
                m = listed.get(mid)
                rule = r.shares.get(machine_shard(m, r.rule_shards)) if m is not None else None
                findings.append(
                    AuditFinding(
                        kind=kind,
                        machine_id=mid,
                        provider=r.provider,
                        provider_state=m.state.value if m else None,
                        provider_cluster=m.cluster if m else None,
                        holders=[
                            AuditHolder(shard=s, state=st, cluster=c)
                            for s, st, c, _ in sorted(held.get(mid, ()))
                        ],
                        rule_shard=rule,
                    )
                )
                if m is not None:
                    records.append(m)
        configured = Counter(
            m.cluster for m in listed.values() if m.state is MachineState.CONFIGURED and m.cluster
        )
        return AuditReport(
            providers=[r.provider],
            shards=list(r.shards),
            listed=len(listed),
            held=sum(len(h) for h in held.values()),
            counts=counts,
            configured=dict(configured),
            findings=findings,
            machines=MachinePage.of(records),
            truncated=sum(counts[k] for k in KINDS) > len(findings),
        )

    async def _left_alone(
        self, client: Client, r: AuditRead, orphans: Mapping[str, Any], listed: dict[str, Machine]
    ) -> list[str]:
        """Of the orphans, the machines an unmanaged cluster's (bigfleet/cluster_modes.py), as
        the running shards name those clusters."""
        if not orphans:
            return []
        names: set[str] = set()
        for shard in r.shards:
            names.update(await query(client, shard, "unmanaged_clusters", result_type=list[str]))
        modes = ClusterModes(names)
        return [mid for mid in orphans if mid in listed and modes.leaves_alone(listed[mid])]

    async def _look(
        self, client: Client, r: AuditRead, now: float
    ) -> tuple[dict[str, dict[str, tuple]], dict[str, Machine], dict[str, list[Holding]]]:
        p = self.providers._provider(r.provider, now)
        with provider_errors():
            listed = {m.id: m for m in p.list(ListFilter())}
        held: dict[str, list[Holding]] = {}
        for shard in r.shards:
            cursor = 0
            while cursor >= 0:
                rows, cursor = await query(
                    client, shard, "holdings", r.provider, cursor, HOLDINGS_PAGE_MAX,
                    result_type=tuple[list[list[Any]], int],
                )
                for mid, state, cluster, since in rows:
                    held.setdefault(mid, []).append((shard, state, cluster, int(since)))
                activity.heartbeat(shard, cursor)
        return classify(listed, held, now, r.stale_seconds), listed, held
