"""The machine state machine of design §5: eight states, the legal moves between them."""

from __future__ import annotations

from .models import MachineState as S
from .models import Transition

STABLE = frozenset({S.SPECULATIVE, S.IDLE, S.CONFIGURED})
TRANSITIONAL = frozenset({S.CREATING, S.CONFIGURING, S.DRAINING, S.DELETING})

# (from, to) -> the operation that moves a machine along that edge.
LEGAL: dict[tuple[S, S], str] = {
    (S.SPECULATIVE, S.CREATING): "create",
    (S.CREATING, S.IDLE): "create done",
    (S.IDLE, S.CONFIGURING): "configure",
    (S.CONFIGURING, S.CONFIGURED): "configure done",
    (S.CONFIGURED, S.DRAINING): "drain",
    (S.DRAINING, S.IDLE): "drain done",
    (S.IDLE, S.DELETING): "delete",
    (S.DELETING, S.SPECULATIVE): "delete done",
    # Every transitional state can time out, or fail outright, into FAILED (design §7).
    (S.CREATING, S.FAILED): "timeout",
    (S.CONFIGURING, S.FAILED): "timeout",
    (S.DRAINING, S.FAILED): "timeout",
    (S.DELETING, S.FAILED): "timeout",
    # Corrective paths out of FAILED (design §5 and §7).
    (S.FAILED, S.DELETING): "cleanup of a failed create",
    (S.FAILED, S.SPECULATIVE): "slot restored after cleanup",
    (S.FAILED, S.IDLE): "configure given up, or forced drain done",
    (S.FAILED, S.CONFIGURING): "configure retried with a fresh bootstrap",
    (S.FAILED, S.DRAINING): "drain escalated to forced termination",
    # A running machine found dead by health reconciliation.
    (S.IDLE, S.FAILED): "found dead",
    (S.CONFIGURED, S.FAILED): "found dead",
}

# Which operation starts in which state, and the state it aims at. CREATE and DRAIN both aim at
# IDLE, so idempotency is keyed on (machine, transition): the seed's (machine, target state) key
# cannot tell "create it" from "drain it".
TRANSITION_OF: dict[S, Transition] = {
    S.CREATING: Transition.CREATE,
    S.CONFIGURING: Transition.CONFIGURE,
    S.DRAINING: Transition.DRAIN,
    S.DELETING: Transition.DELETE,
}
TARGET_OF: dict[Transition, S] = {
    Transition.CREATE: S.IDLE,
    Transition.CONFIGURE: S.CONFIGURED,
    Transition.DRAIN: S.IDLE,
    Transition.DELETE: S.SPECULATIVE,
}
START_OF: dict[Transition, S] = {t: s for s, t in TRANSITION_OF.items()}


class IllegalTransition(ValueError):
    """A move the state machine forbids; names the machine, its state and the attempted move."""

    def __init__(self, machine_id: str, state: S, target: S) -> None:
        super().__init__(
            f"machine {machine_id}: illegal transition {state} -> {target} "
            f"(legal from {state}: {', '.join(sorted(t for (f, t) in LEGAL if f == state))})"
        )
        self.machine_id = machine_id
        self.state = state
        self.target = target


def check_transition(machine_id: str, state: S, target: S) -> None:
    if (state, target) not in LEGAL:
        raise IllegalTransition(machine_id, state, target)


def has_host(state: S) -> bool:
    """SPECULATIVE and CREATING have no host yet; FAILED depends on where it failed."""
    return state not in (S.SPECULATIVE, S.CREATING, S.FAILED)
