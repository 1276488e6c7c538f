"""What every simulated provider shares: machines moving through design §5's states in virtual time.

A lifecycle call only starts an operation; `advance(now)` (and every call, which first catches up
with the clock) completes operations whose latency has passed, fails those past their timeout and
fires spot interruptions, in time order. All randomness is seeded: each machine's draws by the
seed, the machine and how many it had (`_luck`), so a run is a function of the seed and the
calls made, and two runs using a machine alike meet the same luck.
"""

from __future__ import annotations

import builtins
import heapq
import math
import random
from collections import Counter
from collections.abc import Callable, Mapping

from ...models import (
    BootstrapBlob,
    CapacityType,
    FencingToken,
    ListFilter,
    Machine,
    MachineState,
    Notice,
    NoticeKind,
    Transition,
    TransitionAck,
)
from ...states import START_OF, TARGET_OF, check_transition
from .. import fencing
from ..base import (
    MAX_CREATE_BATCH,
    InvalidTransition,
    MachineNotFound,
    check_grace,
)
from .slots import Op, Slot, SlotTable, snapshot
from .trouble import DOOMABLE, Trouble

S = MachineState
T = Transition

DEFAULT_TIMEOUTS: dict[MachineState, float] = {
    S.CREATING: 600.0,
    S.CONFIGURING: 300.0,
    S.DRAINING: 600.0,  # beyond the drain's own grace period
    S.DELETING: 600.0,
}

# The stable state each call starts from, and which failures it corrects (design §7), keyed by
# the state the FAILED machine failed in.
_STARTS_FROM: dict[Transition, MachineState] = {
    T.CREATE: S.SPECULATIVE,
    T.CONFIGURE: S.IDLE,
    T.DRAIN: S.CONFIGURED,
    T.DELETE: S.IDLE,
}
_CORRECTS: dict[Transition, frozenset[MachineState]] = {
    T.CREATE: frozenset(),
    T.CONFIGURE: frozenset({S.CONFIGURING}),  # retry with a fresh blob
    T.DRAIN: frozenset({S.CONFIGURING, S.DRAINING}),  # forced: give up, or terminate
    T.DELETE: frozenset({S.CREATING, S.IDLE, S.CONFIGURED}),  # clean up a half-made or dead host
}
_INTERRUPTIBLE = frozenset({S.IDLE, S.CONFIGURED})


class SimulatedProvider(Trouble, fencing.OwnFences):
    """Base of the simulated providers; subclasses add pools and say how hosts are named.

    Idempotency keys are ignored: a repeated call finds its operation by (machine, target).
    The whole object pickles (plain counters, no closures of its own), so the reference gRPC
    server (bigfleet/edge/provider_server.py) can keep it across restarts if its clock pickles.
    """

    blocking = False  # in this process's memory: called on the event loop

    def __init__(
        self,
        name: str,
        clock: Callable[[], float],
        seed: int,
        *,
        configure_latency: float,
        delete_latency: float,
        drain_latency: float = 60.0,
        timeouts: Mapping[MachineState, float] | None = None,
        failure_rates: Mapping[Transition, float] | Mapping[str, float] | None = None,
        notice_seconds: float = 0.0,
    ) -> None:
        self.name = name
        # A spot interruption is announced this long before it comes (EC2: 2 minutes); 0: never.
        self.notice_seconds = notice_seconds
        self.calls: Counter[str] = Counter()
        self.started: Counter[Transition] = Counter()
        self.fail_next: Counter[Transition] = Counter()
        self.failure_rates = {T(k): v for k, v in (failure_rates or {}).items()}
        if not all(0 <= p <= 1 for p in self.failure_rates.values()):
            raise ValueError(f"provider {name}: failure rates must be in [0, 1]: {failure_rates}")
        self.timeouts = {**DEFAULT_TIMEOUTS, **(timeouts or {})}
        self.failed_from: dict[str, MachineState] = {}
        self._latency = {T.CONFIGURE: configure_latency, T.DELETE: delete_latency}
        self._drain_latency = drain_latency
        self._clock = clock
        self._rng = random.Random(seed)
        self._seed = seed
        self._draws: Counter[tuple[str, str]] = Counter()
        self._epochs: dict[int, int] = {}
        self._slots = SlotTable(name)
        self._events: builtins.list[tuple[float, int, str, str, str | int]] = []
        self._event_seq = 0  # ties between events due at the same time: first scheduled first
        self._op_seq = 0
        self._changed: set[str] = set()

    def _luck(self, kind: str, slot: Slot) -> random.Random:
        """The random numbers of one machine's `kind`-th draw of its kind (a create's
        latency, an interruption clock, an injected failure), seeded by the provider's seed,
        the machine and how many such draws it had: two runs of the same scenario that use
        the same machine the same way meet the same luck, whatever else each run does
        (common random numbers, so `--compare` compares the fleets, not the dice)."""
        if self._seed is None:
            return self._rng
        self._draws[(kind, slot.id)] += 1
        return random.Random(f"{self._seed}:{kind}:{slot.id}:{self._draws[(kind, slot.id)]}")

    def _new_host_ref(self, slot: Slot) -> str:
        raise NotImplementedError

    # -- the CapacityProvider calls ---------------------------------------------------------

    def create(
        self, machine_ids: builtins.list[str], token: FencingToken, *, key: str = ""
    ) -> builtins.list[TransitionAck]:
        # A malformed request is refused before it leaves the client: not counted, not throttled.
        """Start creating the batch's slots, all or nothing; done after the pool's create
        latency."""
        if len(machine_ids) > MAX_CREATE_BATCH:
            raise ValueError(
                f"create takes at most {MAX_CREATE_BATCH} machine ids per call, "
                f"got {len(machine_ids)}"
            )
        self._admit("create", token)
        slots = [self._slots[machine_id] for machine_id in machine_ids]
        # All or nothing, like RunInstances: one bad id starts none of the batch.
        for slot in slots:
            if not self._in_flight(slot, T.CREATE):
                self._check_start(slot, T.CREATE)
        for slot in slots:
            if not self._in_flight(slot, T.CREATE):
                self._begin(slot, T.CREATE)
        self._keep_epoch(token)
        return [self._ack(slot) for slot in slots]

    def configure(
        self,
        machine_id: str,
        blob: BootstrapBlob,
        cluster: str,
        token: FencingToken,
        *,
        key: str = "",
    ) -> TransitionAck:
        """Start joining an IDLE machine to `cluster`; a repeat for the same cluster returns the
        operation in flight."""
        self._admit("configure", token)
        slot = self._slots[machine_id]
        if not self._in_flight(slot, T.CONFIGURE, cluster):
            self._check_start(slot, T.CONFIGURE)
            self._begin(slot, T.CONFIGURE, cluster=cluster, ttl=blob.ttl_seconds)
        self._keep_epoch(token)
        return self._ack(slot)

    def drain(
        self,
        machine_id: str,
        grace_seconds: float,
        token: FencingToken,
        force: bool = False,
        *,
        key: str = "",
    ) -> TransitionAck:
        """Start draining a CONFIGURED machine for `grace_seconds` (none with `force`)."""
        check_grace(machine_id, grace_seconds)
        self._admit("drain", token)
        slot = self._slots[machine_id]
        grace = 0.0 if force else grace_seconds
        if self._in_flight(slot, T.DRAIN):
            self._escalate(slot, grace)
        else:
            self._check_start(slot, T.DRAIN, force)
            self._begin(slot, T.DRAIN, grace=grace)
        self._keep_epoch(token)
        return self._ack(slot)

    def delete(self, machine_id: str, token: FencingToken, *, key: str = "") -> TransitionAck:
        """Start giving a machine back; its slot is SPECULATIVE again once deleted."""
        self._admit("delete", token)
        slot = self._slots[machine_id]
        if not self._in_flight(slot, T.DELETE):
            self._check_start(slot, T.DELETE)
            slot.cluster = None  # a dead configured host leaves its cluster once cleanup starts
            self._begin(slot, T.DELETE)
        self._keep_epoch(token)
        return self._ack(slot)

    def get(self, machine_id: str) -> Machine:
        """One machine, after catching up with the clock."""
        self.calls["get"] += 1
        self.advance(self._clock())
        slot = self._slots.find(machine_id)
        if slot is None:
            raise MachineNotFound(self.name, machine_id)
        return self._snapshot(slot)

    def list(self, filter: ListFilter) -> builtins.list[Machine]:
        """The machines matching the filter, after catching up with the clock."""
        self.calls["list"] += 1
        self.advance(self._clock())
        return [self._snapshot(slot) for slot in self._slots.select(filter)]

    # -- virtual time ----------------------------------------------------------------------

    def advance(self, now: float) -> None:
        """Apply, in time order, every completion, timeout and interruption due by `now`."""
        while self._events and self._events[0][0] <= now:
            at, _, kind, machine_id, ref = heapq.heappop(self._events)
            slot = self._slots.find(machine_id)
            if slot is None:
                continue
            if kind == "notice":
                if ref == slot.clock_generation and slot.state in _INTERRUPTIBLE:
                    deadline = slot.interrupt_at
                    slot.notice = Notice(
                        kind=NoticeKind.INTERRUPTION,
                        deadline_unix=math.ceil(deadline),
                        detail=f"spot interruption at {deadline:.0f}",
                    )
                    self._changed.add(slot.id)
                continue
            if kind == "interrupt":
                # Announced, it comes whatever the machine does meanwhile (drained, idle).
                doomed = slot.notice is not None and slot.state in DOOMABLE
                if ref == slot.clock_generation and (slot.state in _INTERRUPTIBLE or doomed):
                    self._fail(slot, at, "spot interruption")
                continue
            op = slot.op
            # Events of a finished or escalated operation are stale; only the current one counts.
            if op is None or op.id != ref:
                continue
            if kind == "done" and op.due == at:
                self._complete(slot, op, at)
            elif kind == "timeout" and op.deadline == at:
                self._fail(slot, at, f"{op.transition} timed out after {at - op.started:.0f} s")

    def next_event_at(self) -> float | None:
        """When the next completion, timeout or interruption is due (for a simulator's clock)."""
        return self._events[0][0] if self._events else None

    def changes(self) -> builtins.list[str]:
        """Ids of machines whose state moved since the last call: the simulator's stand-in for a
        watch on `list`, so it looks at what changed instead of every machine."""
        changed, self._changed = sorted(self._changed), set()
        return changed

    # -- machinery -------------------------------------------------------------------------

    def _admit(self, call: str, token: FencingToken) -> None:
        """Every lifecycle call passes here first: counted, caught up with the clock, fenced
        (an epoch beyond the clock or below the shard's kept one is refused; nothing is kept
        until the call succeeds: `_keep_epoch`, bigfleet/providers/fencing.py)."""
        self.calls[call] += 1
        now = self._clock()
        self.advance(now)
        if not self.fenced_by_server:
            fencing.check(self.name, token, self._epochs.get(token.shard_id), now)

    def _keep_epoch(self, token: FencingToken) -> None:
        """The last step of a lifecycle call that succeeded: its epoch becomes the shard's."""
        keep = fencing.advanced(self.name, token, self._epochs.get(token.shard_id), self._clock())
        if keep is not None and not self.fenced_by_server:
            self._epochs[token.shard_id] = keep

    def _in_flight(self, slot: Slot, call: Transition, cluster: str | None = None) -> bool:
        """True if this very operation is already running (the idempotent repeat)."""
        op = slot.op
        if op is None:
            return False
        if op.transition is call and op.cluster == cluster:
            return True
        target = f" for cluster {op.cluster}" if op.cluster else ""
        why = f"{op.transition}{target} is in flight ({op.id})"
        raise InvalidTransition(self.name, slot.id, slot.state, str(call), why)

    def _check_start(self, slot: Slot, call: Transition, force: bool = False) -> None:
        if slot.state is _STARTS_FROM[call]:
            return
        origin = self.failed_from.get(slot.id)
        why = ""
        if origin in _CORRECTS[call]:
            if call is not T.DRAIN or force:
                return
            why = "a failed machine is only drained with force=True"
        elif origin is S.DELETING:
            why = "a failed delete is held for an operator"
        raise InvalidTransition(self.name, slot.id, slot.state, str(call), why, origin)

    def _begin(
        self,
        slot: Slot,
        call: Transition,
        *,
        grace: float = 0.0,
        cluster: str | None = None,
        ttl: float = math.inf,
    ) -> None:
        now = self._clock()
        state = START_OF[call]
        allowance = 0.0
        if call is T.CREATE:
            latency = self._luck("create", slot).uniform(*slot.pool.create_latency)
            allowance = slot.pool.create_allowance
            slot.host = self._new_host_ref(slot)
        elif call is T.DRAIN:
            latency = min(grace, self._drain_latency)
            allowance = grace
        else:
            latency = self._latency[call]
        # A kubelet whose join token expired before it booted never joins.
        hangs = self._injected_failure(call, slot) or (call is T.CONFIGURE and latency > ttl)
        op = Op(
            id=f"{self.name}-op-{self._next_op():06d}",
            transition=call,
            started=now,
            due=None if hangs else now + latency,
            deadline=now + allowance + self.timeouts[state],
            grace_end=now + grace if call is T.DRAIN else math.inf,
            cluster=cluster,
        )
        self._move(slot, state, now)
        slot.op = op
        self.started[call] += 1
        if op.due is not None:
            self._schedule(op.due, "done", slot.id, op.id)
        self._schedule(op.deadline, "timeout", slot.id, op.id)

    def _injected_failure(self, call: Transition, slot: Slot) -> bool:
        if self.fail_next[call] > 0:
            self.fail_next[call] -= 1
            return True
        rate = self.failure_rates.get(call, 0.0)
        return rate > 0 and self._luck(f"fail-{call.value}", slot).random() < rate

    def _escalate(self, slot: Slot, grace: float) -> None:
        """A shorter grace on a running drain pulls its end (and its timeout) forward."""
        op = slot.op
        assert op is not None
        grace_end = self._clock() + grace
        if grace_end >= op.grace_end:
            return
        op.grace_end = grace_end
        if op.due is not None and op.due > grace_end:
            op.due = grace_end
            self._schedule(op.due, "done", slot.id, op.id)
        if grace_end + self.timeouts[S.DRAINING] < op.deadline:
            op.deadline = grace_end + self.timeouts[S.DRAINING]
            self._schedule(op.deadline, "timeout", slot.id, op.id)

    def _complete(self, slot: Slot, op: Op, at: float) -> None:
        slot.op = None
        if op.transition is T.CONFIGURE:
            slot.cluster = op.cluster
        elif op.transition is T.DRAIN:
            slot.cluster = None
        elif op.transition is T.DELETE:
            slot.host = None
        self._move(slot, TARGET_OF[op.transition], at)
        if op.transition is T.DELETE:
            # The quota may have shrunk while the machine ran; its slot then goes away.
            self._slots.resize(slot.pool, slot.pool.quota)

    def _fail(self, slot: Slot, at: float, error: str) -> None:
        origin = slot.state
        slot.op = None
        slot.notice = None  # (what it warned of has come, or no longer matters)
        self._move(slot, S.FAILED, at)
        self.failed_from[slot.id] = origin
        slot.last_error = error

    def _move(self, slot: Slot, state: MachineState, at: float) -> None:
        check_transition(slot.id, slot.state, state)  # a provider bug, never a caller's
        if slot.state is S.FAILED:
            del self.failed_from[slot.id]
            slot.last_error = ""
        slot.state = state
        slot.since = at
        self._changed.add(slot.id)
        if state is S.SPECULATIVE:
            slot.notice = None
        if state in _INTERRUPTIBLE and slot.notice is None:  # (announced: its clock runs on)
            self._arm_interruption(slot, at)

    def _arm_interruption(self, slot: Slot, at: float) -> None:
        """A fresh exponential clock on each entry to IDLE or CONFIGURED (memoryless, so exact)."""
        slot.clock_generation += 1
        p = slot.pool.interruption_probability
        if slot.pool.capacity_type is not CapacityType.SPOT or p <= 0:
            return
        # Hourly probability p means rate -ln(1 - p) per hour: P(interrupted within 1 h) = p.
        luck = self._luck("interrupt", slot)
        delay = 0.0 if p >= 1 else luck.expovariate(-math.log1p(-p) / 3600.0)
        self._schedule(at + delay, "interrupt", slot.id, slot.clock_generation)
        slot.interrupt_at = at + delay
        if self.notice_seconds > 0:
            self._schedule(
                max(at, at + delay - self.notice_seconds), "notice", slot.id, slot.clock_generation
            )

    def _schedule(self, at: float, kind: str, machine_id: str, ref: str | int) -> None:
        self._event_seq += 1
        heapq.heappush(self._events, (at, self._event_seq, kind, machine_id, ref))

    def _next_op(self) -> int:
        self._op_seq += 1
        return self._op_seq

    def _snapshot(self, slot: Slot) -> Machine:
        return snapshot(slot, self.name, self.failed_from.get(slot.id))

    def _ack(self, slot: Slot) -> TransitionAck:
        assert slot.op is not None
        return TransitionAck(operation_id=slot.op.id, machine=self._snapshot(slot))
