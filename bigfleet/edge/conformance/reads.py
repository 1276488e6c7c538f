"""Checks of the contract's reads and refusals: Describe, List's pages, Get of an unknown id,
bad requests refused as INVALID_ARGUMENT naming the field, a Configure of a speculative
machine refused as FAILED_PRECONDITION, and throttling answered as RESOURCE_EXHAUSTED."""

from __future__ import annotations

import grpc

from ...v1 import provider_pb2 as ppb
from .. import convert
from .session import BLOB, CLUSTER, Failed, R, S, Session, Skipped

CAPACITY_TYPES = {"on-demand", "spot", "reserved", "bare-metal"}
SMALL_PAGE = 3


class ReadChecks(Session):
    """The checks that read, and those a provider must refuse without moving a machine."""

    # ---- reads ---------------------------------------------------------------------------

    def describe(self) -> str:
        info = self._call("Describe", ppb.DescribeRequest())
        problems = []
        if not info.name:
            problems.append("name is empty")
        if info.max_create_batch < 1:
            problems.append(f"max_create_batch is {info.max_create_batch}")
        if info.max_list_page < 1:
            problems.append(f"max_list_page is {info.max_list_page}")
        odd = sorted(set(info.capacity_types) - CAPACITY_TYPES)
        if odd or not info.capacity_types:
            problems.append(
                f"capacity_types {list(info.capacity_types)}: expected some of "
                f"{sorted(CAPACITY_TYPES)}"
            )
        if problems:
            raise Failed("; ".join(problems))
        self.info = info
        delete = "delete" if info.supports_delete else "no delete"
        return (
            f"{info.name}: {', '.join(info.capacity_types)}; batch {info.max_create_batch}, "
            f"page {info.max_list_page}, {delete}"
        )

    def list_pages(self) -> str:
        small = self._list(SMALL_PAGE)
        ids = [m.id for m in small]
        if ids != sorted(set(ids)):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            raise Failed(f"pages of {SMALL_PAGE} are not in id order or repeat ids {dupes[:5]}")
        whole = {m.id for m in self._list(self.info.max_list_page if self.info else 0)}
        if set(ids) != whole:
            missing, extra = sorted(whole - set(ids)), sorted(set(ids) - whole)
            raise Failed(f"pages of {SMALL_PAGE} miss {missing[:5]} and add {extra[:5]}")
        if not any(m.state is S.SPECULATIVE for m in small):
            return f"{len(ids)} machines, none speculative: the lifecycle checks will skip"
        return f"{len(ids)} machines in pages of {SMALL_PAGE}, each once, in id order"

    def get_unknown(self) -> str:
        unknown = f"bigfleet-conformance-no-such-machine-{self.run_id}"
        err = self._refused("Get", ppb.MachineRef(machine_id=unknown))
        return self._expect(err, grpc.StatusCode.NOT_FOUND, R.NOT_FOUND)

    # ---- bad requests --------------------------------------------------------------------

    def missing_token(self) -> str:
        request = ppb.CreateRequest(machine_ids=[self._unknown(0)], idempotency_key=self._key("t"))
        err = self._refused("Create", request)
        return self._expect(err, grpc.StatusCode.INVALID_ARGUMENT, R.INVALID_FIELD, "token")

    def oversized_create(self) -> str:
        n = (self.info.max_create_batch if self.info else 64) + 1
        # Ids that do not exist: a provider that wrongly accepts the batch still makes nothing.
        request = ppb.CreateRequest(
            machine_ids=[self._unknown(i) for i in range(n)],
            token=self._token(),
            idempotency_key=self._key("big"),
        )
        err = self._refused("Create", request)
        return self._expect(err, grpc.StatusCode.INVALID_ARGUMENT, R.INVALID_FIELD, "machine_ids")

    def empty_machine_id(self) -> str:
        request = ppb.ConfigureRequest(
            machine_id="",
            blob=BLOB,
            cluster=CLUSTER,
            token=self._token(),
            idempotency_key=self._key("empty"),
        )
        err = self._refused("Configure", request)
        return self._expect(err, grpc.StatusCode.INVALID_ARGUMENT, R.INVALID_FIELD, "machine_id")

    # ---- typed refusals ------------------------------------------------------------------

    def invalid_transition(self) -> str:
        speculative = [m for m in self._list(0) if m.state is S.SPECULATIVE]
        if not speculative:
            raise Skipped("no speculative machine to configure")
        # The last one `create` would pick: the two checks meet only if there is one choice,
        # and then the refused Configure has left the machine as it was.
        speculative.sort(key=lambda m: (m.capacity_type == "spot", m.id))
        target = speculative[-1]
        err = self._refused("Configure", self._configure_request(target.id, "invalid"))
        got = self._expect(err, grpc.StatusCode.FAILED_PRECONDITION, R.INVALID_TRANSITION)
        now = convert.machine_from_proto(
            self._call("Get", ppb.MachineRef(machine_id=target.id)), "machine"
        )
        if now.state is not S.SPECULATIVE:
            raise Failed(f"refused ({got}), yet {target.id} is now {now.state}")
        return f"Configure of speculative {target.id}: {got}"

    def rate_limited(self) -> str:
        wrong = [
            f"{rpc}: {code}, retry_after_seconds {after:g}"
            for rpc, code, after in self.throttled
            if code != grpc.StatusCode.RESOURCE_EXHAUSTED.name or after <= 0
        ]
        if wrong:
            raise Failed(
                f"{len(wrong)} of {len(self.throttled)} RATE_LIMITED refusals were not "
                f"RESOURCE_EXHAUSTED with retry_after_seconds > 0: {'; '.join(wrong[:3])}"
            )
        return f"{len(self.throttled)} RATE_LIMITED refusals, each RESOURCE_EXHAUSTED with a hint"

