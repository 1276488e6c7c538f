"""What `bigfleet audit` sends and gets back across the Temporal boundary: the scope of an audit,
a provider's findings, and the report the CLI prints and the coordinator's `repair` takes."""

from __future__ import annotations

from pydantic import Field

from activities.wire import MachinePage, Model
from bigfleet.audit import KINDS, STALE_SECONDS

EXAMPLES_MAX = 1000  # example findings a report carries (~150 bytes each with its record)


class AuditScope(Model):
    """What to audit, as the caller found it: the running shards, how the assignment rule
    counts shards (`rule_shards`: the fleet file's `shards`), and which running shard takes
    each rule share (its own, and those of shards merged into it)."""

    providers: list[str] = Field(min_length=1)
    shards: list[int]
    not_running: list[int] = Field(default_factory=list)
    rule_shards: int = Field(ge=1)
    shares: dict[int, int] = Field(default_factory=dict)
    limit: int = Field(default=EXAMPLES_MAX, ge=0, le=EXAMPLES_MAX)
    settle_seconds: float = Field(default=2.0, ge=0, le=300)
    stale_seconds: float = Field(default=STALE_SECONDS, gt=0)


class AuditRead(AuditScope):
    """`provider_audit`: one provider, at the workflow's `now`."""

    provider: str
    now: float


class AuditHolder(Model):
    shard: int
    state: str
    cluster: str | None = None


class AuditFinding(Model):
    kind: str  # one of bigfleet.audit.KINDS
    machine_id: str
    provider: str
    provider_state: str | None = None  # None: the provider does not list it
    provider_cluster: str | None = None
    holders: list[AuditHolder] = Field(default_factory=list)
    rule_shard: int | None = None  # the running shard the assignment rule gives it to


class AuditReport(Model):
    providers: list[str] = Field(default_factory=list)
    shards: list[int] = Field(default_factory=list)
    not_running: list[int] = Field(default_factory=list)
    listed: int = 0  # machines the providers list
    held: int = 0  # holdings the shards report (a machine held twice counts twice)
    counts: dict[str, int] = Field(default_factory=dict)
    # CONFIGURED machines per cluster, as the providers say.
    configured: dict[str, int] = Field(default_factory=dict)
    findings: list[AuditFinding] = Field(default_factory=list)
    # The provider's record of each listed machine among the findings (for a repair).
    machines: MachinePage = Field(default_factory=MachinePage)
    truncated: bool = False

    def discrepancies(self) -> int:
        return sum(self.counts.get(kind, 0) for kind in KINDS)

    def clean(self) -> bool:
        return not self.discrepancies() and not self.not_running
