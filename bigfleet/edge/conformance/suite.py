"""The conformance suite: every check in its order against one address, and the table (or
JSON) of what passed, failed and was skipped."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import grpc

from ...deployment import ClientTLS
from .fencing import FencingChecks
from .lifecycle import LifecycleChecks
from .reads import ReadChecks
from .session import Check, Failed, S, Skipped, status_text


class Conformance(ReadChecks, LifecycleChecks, FencingChecks):
    """One run against one address: the checks in order, and what they leave for the next."""

    def run(self) -> list[Check]:
        steps: list[tuple[str, Callable[[], str]]] = [
            ("describe", self.describe),
            ("list-pages", self.list_pages),
            ("get-unknown-is-not-found", self.get_unknown),
            ("refuses-missing-token", self.missing_token),
            ("refuses-oversized-create", self.oversized_create),
            ("refuses-empty-machine-id", self.empty_machine_id),
            ("invalid-transition-is-failed-precondition", self.invalid_transition),
            ("create-acks-at-once", self.create),
            ("create-repeat-starts-nothing", self.create_repeat),
            ("create-settles", lambda: self.settle(S.IDLE)),
            ("configure-acks-at-once", self.configure),
            ("configure-repeat-starts-nothing", lambda: self.repeat("configure")),
            ("configure-settles", lambda: self.settle(S.CONFIGURED)),
            ("drain-acks-at-once", self.drain),
            ("drain-repeat-starts-nothing", lambda: self.repeat("drain")),
            ("drain-settles", lambda: self.settle(S.IDLE)),
            ("refused-call-moves-no-epoch", self.refused_call_keeps_epoch),
            ("future-epoch-is-refused", self.future_epoch),
            ("stale-token-is-refused", self.stale_token),
            ("delete-unsupported-is-unimplemented", self.delete_unsupported),
            ("delete-acks-at-once", self.delete),
            ("delete-repeat-starts-nothing", lambda: self.repeat("delete")),
            ("delete-settles", lambda: self.settle(S.SPECULATIVE, deletes=True)),
            ("rate-limited-is-resource-exhausted", self.rate_limited),
        ]
        for name, step in steps:
            if step == self.rate_limited and not self.throttled:
                continue  # RATE_LIMITED cannot be provoked; checked only if it was seen
            try:
                self.checks.append(Check(name, "pass", step()))
            except Skipped as why:
                self.checks.append(Check(name, "skip", str(why)))
            except Failed as why:
                self.checks.append(Check(name, "fail", str(why)))
            except grpc.RpcError as err:
                self.checks.append(Check(name, "fail", status_text(err)))
            except Exception as err:  # a check must report, whatever the provider sent
                self.checks.append(Check(name, "fail", f"{type(err).__name__}: {err}"))
        return self.checks


def run(address: str, tls_: ClientTLS | None = None, **options: Any) -> list[Check]:
    """Every check against `address`, in order (see Conformance for the options)."""
    suite = Conformance(address, tls_, **options)
    try:
        return suite.run()
    finally:
        suite.close()


def passed(checks: list[Check]) -> bool:
    """No check failed (a skip is no failure)."""
    return not any(c.result == "fail" for c in checks)


def render(address: str, checks: list[Check]) -> str:
    """The table `bigfleet provider conformance` prints."""
    width = max(len(c.name) for c in checks)
    lines = [f"conformance of {address}", ""]
    lines += [f"  {c.result.upper():<4}  {c.name:<{width}}  {c.detail}" for c in checks]
    counts = {r: sum(c.result == r for c in checks) for r in ("pass", "fail", "skip")}
    lines += ["", f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped"]
    return "\n".join(lines)


def as_json(address: str, checks: list[Check]) -> dict[str, Any]:
    """The run as JSON (`--json`): the address, whether it passed, every check."""
    return {"address": address, "passed": passed(checks), "checks": [asdict(c) for c in checks]}
