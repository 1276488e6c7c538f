"""Carries out a shard's actions against simulated providers and operators, in virtual time.

It does what the Temporal transition workflows do against real ones: call the provider, watch
the machine until it settles, configure a freshly created machine for the need it was created
for, and take the corrective path of design §7 when a transition fails.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..models import (
    Action,
    BootstrapRequest,
    ConfigureAction,
    DeleteAction,
    DeleteReason,
    DrainAction,
    DrainReason,
    Machine,
    MachineState,
    NodeSelectorRequirement,
    Transition,
)
from ..operators import BootstrapRefused, SimulatedOperator
from ..providers.base import ProviderError, RateLimited
from ..providers.simulated.provider import SimulatedProvider
from ..shard import Shard
from ..transitions import Corrective, corrective
from .recorder import Recorder

S = MachineState
T = Transition


@dataclass
class InFlight:
    transition: Transition
    cluster: str | None
    need: str | None
    priority: int
    requirements: list[NodeSelectorRequirement]


class Executor:
    def __init__(
        self,
        shard: Shard,
        providers: dict[str, SimulatedProvider],
        operators: dict[str, SimulatedOperator],
        recorder: Recorder,
    ) -> None:
        self.shard = shard
        self.providers = providers
        self.operators = operators
        self.recorder = recorder
        self.in_flight: dict[str, InFlight] = {}
        # Configure attempts per machine since it last settled: a retry with a fresh blob, then
        # back to idle (design §7).
        self.configure_attempts: dict[str, int] = {}
        self.retry: list[tuple[float, Action]] = []

    # ---- starting transitions ---------------------------------------------------------------

    def execute(self, actions: Iterable[Action], now: float) -> None:
        due, self.retry = [a for t, a in self.retry if t <= now], [
            (t, a) for t, a in self.retry if t > now
        ]
        for action in [*due, *actions]:
            self.start(action, now)

    def start(self, action: Action, now: float) -> None:
        """Carry out one action now (a throttled call is retried later)."""
        provider = self.providers[action.provider]
        try:
            if action.kind == "create":
                provider.create(action.machine_ids, self.shard.token())
                for mid in action.machine_ids:
                    self.in_flight[mid] = InFlight(
                        T.CREATE, action.cluster, action.need, action.priority,
                        list(action.requirements),
                    )
            elif action.kind == "configure":
                flight = InFlight(
                    T.CONFIGURE, action.cluster, action.need, action.priority,
                    list(action.requirements),
                )
                self._configure(action.machine_id, flight, now)
            elif action.kind == "drain":
                provider.drain(
                    action.machine_id, action.grace_seconds, self.shard.token(), force=action.force
                )
                self.in_flight[action.machine_id] = InFlight(T.DRAIN, action.cluster, None, 0, [])
            elif action.kind == "delete":
                provider.delete(action.machine_id, self.shard.token())
                self.in_flight[action.machine_id] = InFlight(T.DELETE, None, None, 0, [])
            else:  # (verify)
                machine = provider.get(action.machine_id)
                if machine.state is S.CONFIGURED:
                    self.shard.verified_up(machine.id)
                self.observe(machine, now)
        except RateLimited as limited:
            self.recorder.rate_limited(action.provider)
            self.retry.append((now + limited.retry_after, action))
            return
        except ProviderError as err:
            self.recorder.error(now, str(err))
            return
        self.recorder.action(now, action, self.shard, provider)

    def _configure(self, machine_id: str, flight: InFlight, now: float) -> None:
        """Bootstrap blob from the cluster's operator, then the provider's Configure."""
        cluster = flight.cluster or ""
        provider = self._provider_of(machine_id)
        try:
            blob = self.operators[cluster].generate_bootstrap(
                BootstrapRequest(
                    cluster=cluster, machine_id=machine_id, requirements=flight.requirements
                )
            )
        except BootstrapRefused as refused:
            self.shard.refuse_again(cluster, flight.priority, str(refused), now)
            self.recorder.error(now, str(refused))
            self.in_flight.pop(machine_id, None)
            self.shard.observe(provider.get(machine_id), now)
            return
        flight.transition = T.CONFIGURE
        self.configure_attempts[machine_id] = self.configure_attempts.get(machine_id, 0) + 1
        provider.configure(machine_id, blob, cluster, self.shard.token())
        self.in_flight[machine_id] = flight

    def _provider_of(self, machine_id: str) -> SimulatedProvider:
        inv = self.shard.inventory
        return self.providers[inv.profile_of(inv.row(machine_id)).provider]

    # ---- watching machines ------------------------------------------------------------------

    def observe(self, machine: Machine, now: float) -> None:
        """A provider's record of a machine that changed: fold it in, continue or correct."""
        flight = self.in_flight.get(machine.id)
        self.shard.observe(machine, now)
        if machine.state is S.FAILED:
            self._correct(machine, flight, now)
            return
        if flight is None or machine.state in (S.CREATING, S.CONFIGURING, S.DRAINING, S.DELETING):
            return
        self.recorder.settled(now, machine, flight)
        del self.in_flight[machine.id]
        self.configure_attempts.pop(machine.id, None)
        if flight.transition is T.CREATE and machine.state is S.IDLE and flight.cluster:
            # Created for a need: configured for its cluster right away (a throttled call is
            # retried like any other action).
            self.shard.begin_configure(machine.id, flight.cluster, now)
            self.start(
                ConfigureAction(
                    provider=self._provider_of(machine.id).name,
                    machine_id=machine.id,
                    cluster=flight.cluster,
                    need=flight.need,
                    requirements=flight.requirements,
                    priority=flight.priority,
                ),
                now,
            )

    def _correct(self, machine: Machine, flight: InFlight | None, now: float) -> None:
        """Seed §7's corrective path, as actions: a throttled one is retried like any other."""
        provider = self._name(machine)
        attempts = self.configure_attempts.get(machine.id, 0)
        path = corrective(machine.failed_from, machine.capacity_type, attempts)
        self.recorder.failed(now, machine, path)
        self.in_flight.pop(machine.id, None)
        if path is Corrective.CLEANUP:
            self.start(
                DeleteAction(provider=provider, machine_id=machine.id, reason=DeleteReason.FAILED),
                now,
            )
        elif path is Corrective.RETRY_CONFIGURE and flight is not None and flight.cluster:
            self.shard.begin_configure(machine.id, flight.cluster, now)
            self.start(
                ConfigureAction(
                    provider=provider,
                    machine_id=machine.id,
                    cluster=flight.cluster,
                    need=flight.need,
                    requirements=flight.requirements,
                    priority=flight.priority,
                ),
                now,
            )
        elif path in (Corrective.GIVE_UP, Corrective.FORCE_DRAIN, Corrective.RETRY_CONFIGURE):
            self.start(
                DrainAction(
                    provider=provider,
                    machine_id=machine.id,
                    cluster=machine.cluster or (flight.cluster if flight else None) or "",
                    grace_seconds=0.0,
                    reason=DrainReason.FAILED,
                    force=True,
                ),
                now,
            )
        else:
            self.configure_attempts.pop(machine.id, None)

    def _name(self, machine: Machine) -> str:
        return self.shard.inventory.profile_of(self.shard.inventory.row(machine.id)).provider
