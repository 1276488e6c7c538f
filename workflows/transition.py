"""One machine transition (design §5, §7) as a workflow: call the provider, watch the machine on
durable timers until it settles or times out, and take the corrective path when it fails."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from activities.wire import (
        RESULT_STATE,
        BootstrapAnswer,
        BootstrapCall,
        FenceRefusal,
        MachinePage,
        ProviderCall,
        ProviderRead,
        TransitionInput,
        TransitionResult,
        mailbox_workflow_id,
        provider_task_queue,
        shard_workflow_id,
    )
    from bigfleet.inputs import Rejected, number
    from bigfleet.models import CapacityType, Machine, MachineState, Transition
    from bigfleet.states import TARGET_OF, TRANSITIONAL
    from bigfleet.transitions import Corrective, corrective
    from workflows.guard import Guard, TakesSignals, accepts

S = MachineState
T = Transition
CALL: dict[str, Any] = dict(
    start_to_close_timeout=timedelta(seconds=30),
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=20),
)
# How long a forced drain or a cleanup may take after the transition itself gave up.
CORRECTIVE_SECONDS = 600.0
OUTCOMES = ("ok", "failed", "forced", "corrected", "refused", "fenced")
# A refusal as stale ends the transition with the machines as they are and the refusal, for the
# shard to take a newer epoch (workflows/shard_fences.py); runs begun before failed.
STALE_ENDS = "stale-ends-transition"
STALE = "StaleFencingToken"  # (activities/providers.py)
ESCALATION_MEMO = "escalation-memo"  # an escalated drain notes its new grace in its memo


@workflow.defn(name="MachineTransition")
class MachineTransitionWorkflow(TakesSignals):
    """Workflow `MachineTransition`: one create, configure, drain or delete of one machine or
    a batch of the same kind, searchable by machine id. It calls the provider, watches the
    machines on durable timers until they settle or time out, and runs the `FAILED` handling;
    a drain takes the `escalate_drain` signal."""
    # Set by `_watch` when a drain had to be forced: escalated to grace 0, or outlasting its
    # time (outcome "forced" in bigfleet_transition_outcomes_total).
    _forced = False

    @workflow.init
    def __init__(self, t: TransitionInput) -> None:
        self.t = t
        self._escalation: float | None = None
        self._grace = t.grace_seconds if t.transition is T.DRAIN else None
        self._machines: list[Machine] = []
        self._stale: FenceRefusal | None = None  # a call of a batch refused as stale
        self.guard = Guard(self, "MachineTransition")

    @accepts(Any)
    def escalate_drain(self, grace_seconds: Any) -> None:
        """A shorter grace for a running drain (0 = forced), in seconds: a number from 0 to
        the drain's own grace. A longer one changes nothing; one sent to any other transition
        is refused."""
        grace = number(grace_seconds, "escalate_drain: grace_seconds", 0.0, 7 * 24 * 3600.0)
        if self._grace is None:
            raise Rejected(f"escalate_drain: this is a {self.t.transition.value}, not a drain")
        if grace < self._grace:
            self._escalation = grace

    @workflow.query
    def machines(self) -> list[Machine]:
        """The machines as last observed (query `machines`)."""
        return self._machines

    @workflow.run
    async def run(self, t: TransitionInput) -> TransitionResult:
        """Carry out `t` and return each machine as it ended; a failure that is not a cancellation
        is counted and recorded before the workflow fails."""
        try:
            return await self._run(t)
        except FailureError as err:  # fails the workflow (other errors retry its task)
            fenced = self._fenced(err)
            if fenced is not None:
                return await self._fenced_out(fenced)
            if not is_cancelled_exception(err):
                self._failed(err)
            raise

    async def _run(self, t: TransitionInput) -> TransitionResult:
        result = TransitionResult(transition=t.transition, machines=[])
        watch, untouched = t.machine_ids, list[Machine]()
        if t.transition in (T.CONFIGURE, T.DRAIN, T.DELETE) and len(t.machine_ids) > 1:
            if t.transition is T.CONFIGURE:
                watch, untouched = await self._configure_each(t.machine_ids, result)
            else:  # (a drain's grace and force; a delete has neither)
                watch, untouched = await self._each(
                    t.transition, t.machine_ids, grace=t.grace_seconds, force=t.force
                )
            if not watch:
                result.machines = untouched
                return await self._finish(result)
        elif t.transition is T.CONFIGURE:
            answer = await self._bootstrap(t.machine_ids[0])
            if answer.refused:
                result.refused = answer.refused
                result.machines = await self._read(t.machine_ids)
                return await self._finish(result)
            await self._call(T.CONFIGURE, t.machine_ids, answer=answer)
        else:
            try:
                await self._call(t.transition, t.machine_ids, grace=t.grace_seconds, force=t.force)
            except ActivityError as err:
                if not self._out_of_capacity(err):
                    raise
                # What the refused batch left: machines no longer offered go back to the shard
                # as unavailable; ones it never reached stay speculative; ones it did launch
                # (a batch spanning offerings) are watched like any create.
                left = await self._read(t.machine_ids, missing_ok=True)
                result.unavailable = sorted(set(t.machine_ids) - {m.id for m in left})
                untouched = [m for m in left if m.state is S.SPECULATIVE]
                watch = [m.id for m in left if m.state is not S.SPECULATIVE]
                workflow.logger.warning(
                    "create refused for want of capacity: %s (%d unavailable, %d launched)",
                    err.cause,
                    len(result.unavailable),
                    len(watch),
                )
                if not watch:
                    result.machines = untouched
                    return await self._finish(result)
        timeout = t.timeout_seconds + (t.grace_seconds if t.transition is T.DRAIN else 0.0)
        machines = await self._watch(watch, TARGET_OF[t.transition], timeout)
        attempts = 1
        for _ in range(3):  # a corrective path may itself fail once more; then it is held
            failed = [m for m in machines if m.state is S.FAILED]
            if not failed:
                break
            fixed = []
            for m in failed:
                path = corrective(m.failed_from, CapacityType(t.capacity_type), attempts)
                result.corrective.append(f"{m.id}: {path.value}")
                fixed += await self._correct(m, path)
            attempts += 1
            done = {m.id for m in fixed}
            machines = [m for m in machines if m.id not in done] + fixed
        result.machines = machines + untouched
        return await self._finish(result)

    async def _configure_each(
        self, machine_ids: list[str], result: TransitionResult
    ) -> tuple[list[str], list[Machine]]:
        """A batched configure (one need's machines on one provider): a bootstrap for each
        machine (an operator's blob names its machine), then `_each` with its blob. Machines
        the operator refused (`result.refused`) are left as they were."""
        answers = await asyncio.gather(*(self._bootstrap(mid) for mid in machine_ids))
        blobs = {}
        for mid, answer in zip(machine_ids, answers, strict=True):
            if answer.refused:
                result.refused = result.refused or answer.refused
            else:
                blobs[mid] = answer
        return await self._each(T.CONFIGURE, machine_ids, blobs=blobs)

    async def _each(
        self,
        transition: Transition,
        machine_ids: list[str],
        blobs: dict[str, BootstrapAnswer] | None = None,
        grace: float = 0.0,
        force: bool = False,
    ) -> tuple[list[str], list[Machine]]:
        """A batched configure, drain or delete: one provider call per machine (the provider's
        API and its rate limit are per machine), all at once. Returns the machines to watch and, as
        read back, those left as they were: a configure without a blob, or a call that failed
        for good (the shard plans them again; the others go on)."""
        asked = [mid for mid in machine_ids if blobs is None or mid in blobs]
        done = await asyncio.gather(
            *(
                self._call(
                    transition,
                    [mid],
                    answer=blobs[mid] if blobs is not None else None,
                    grace=grace,
                    force=force,
                )
                for mid in asked
            ),
            return_exceptions=True,
        )
        watch = []
        for mid, outcome in zip(asked, done, strict=True):
            if isinstance(outcome, ActivityError):
                self._stale = self._fenced(outcome) or self._stale
                workflow.logger.warning("%s of %s failed: %s", transition.value, mid, outcome.cause)
            elif isinstance(outcome, BaseException):  # (cancelled: the workflow ends)
                raise outcome
            else:
                watch.append(mid)
        watching = set(watch)
        left = [mid for mid in machine_ids if mid not in watching]
        return watch, (await self._read(left) if left else [])

    def _out_of_capacity(self, err: ActivityError) -> bool:
        """A create the provider refused with QuotaExhausted: the transition ends (its
        machines go back to the shard, which plans again) instead of failing. Histories from
        before this was handled failed here, and replay so."""
        cause = err.cause
        return (
            self.t.transition is T.CREATE
            and isinstance(cause, ApplicationError)
            and cause.type == "QuotaExhausted"
            and workflow.patched("create-refused")
        )

    def _fenced(self, err: BaseException) -> FenceRefusal | None:
        """The provider's refusal as stale that `err` is, if it is one (issue 44)."""
        cause = err.cause if isinstance(err, ActivityError) else None
        if not (isinstance(cause, ApplicationError) and cause.type == STALE):
            return None
        if not workflow.patched(STALE_ENDS):
            return None
        epochs = [*cause.details, 0, 0][:2]  # (anything but two ints: the shard ignores it)
        presented, kept = epochs if all(type(e) is int for e in epochs) else (0, 0)
        return FenceRefusal(provider=self.t.provider, presented=presented, kept=kept)

    async def _fenced_out(self, fenced: FenceRefusal) -> TransitionResult:
        """The provider refused a call as stale: the machines go back to the shard as the
        provider has them, with the refusal, and the shard supersedes the kept epoch."""
        workflow.logger.warning("%s refused as stale: %s", self.t.transition.value, fenced)
        result = TransitionResult(transition=self.t.transition, machines=[], fenced=fenced)
        result.machines = await self._read(self.t.machine_ids, missing_ok=True)
        return await self._finish(result)

    # ---- steps ------------------------------------------------------------------------------

    async def _bootstrap(self, machine_id: str) -> BootstrapAnswer:
        return await workflow.execute_activity(
            "generate_bootstrap",
            BootstrapCall(
                cluster=self.t.cluster or "",
                machine_id=machine_id,
                requirements=self.t.requirements,
            ),
            result_type=BootstrapAnswer,
            **CALL,
        )

    async def _call(
        self,
        transition: Transition,
        machine_ids: list[str],
        answer: BootstrapAnswer | None = None,
        grace: float = 0.0,
        force: bool = False,
    ) -> list[Machine]:
        t = self.t
        call = ProviderCall(
            provider=t.provider,
            transition=transition,
            machine_ids=machine_ids,
            token=t.token,
            now=workflow.now().timestamp(),
            cluster=t.cluster,
            user_data=answer.user_data if answer else b"",
            ttl_seconds=answer.ttl_seconds if answer else 3600,
            grace_seconds=grace,
            force=force,
        )
        return await workflow.execute_activity(
            "provider_call",
            call,
            task_queue=provider_task_queue(t.provider),
            result_type=list[Machine],
            **CALL,
        )

    async def _read(self, machine_ids: list[str], missing_ok: bool = False) -> list[Machine]:
        read = ProviderRead(
            provider=self.t.provider,
            machine_ids=machine_ids,
            now=workflow.now().timestamp(),
            missing_ok=missing_ok,
        )
        self._machines = await workflow.execute_activity(
            "provider_get",
            read,
            task_queue=provider_task_queue(self.t.provider) + "-read",
            result_type=list[Machine],
            **CALL,
        )
        return self._machines

    async def _watch(
        self, machine_ids: list[str], target: MachineState, timeout: float
    ) -> list[Machine]:
        """Poll on durable timers until every machine is at `target` or FAILED, or time is up.
        A drain that outlasts its time is escalated to forced termination (design §7)."""
        deadline = workflow.now() + timedelta(seconds=timeout)
        forced = False
        while True:
            try:
                await workflow.wait_condition(
                    lambda: self._escalation is not None, timeout=self.t.poll_seconds
                )
            except TimeoutError:
                pass
            if self._escalation is not None and self.t.transition is T.DRAIN:
                grace, self._escalation = self._escalation, None
                self._grace = grace
                self._forced = self._forced or grace == 0
                workflow.logger.info("drain of %s escalated to %s s grace", machine_ids, grace)
                # The static summary keeps the grace the drain started with; this shows now.
                workflow.set_current_details(
                    f"**drain** escalated: grace now {grace:g} s"
                    + (" (forced)" if grace == 0 else f", was {self.t.grace_seconds:g} s")
                )
                # And in its memo, which `bigfleet machine history` reads with the list
                # (activities/starter.py `memo`; runs begun before upsert nothing).
                if workflow.patched(ESCALATION_MEMO):
                    workflow.upsert_memo({"escalated_grace_seconds": grace})
                if len(machine_ids) == 1:
                    await self._call(T.DRAIN, machine_ids, grace=grace, force=grace == 0)
                else:  # (a batched drain: every machine of it, one call each)
                    await self._each(T.DRAIN, machine_ids, grace=grace, force=grace == 0)
            machines = await self._read(machine_ids)
            settled = [m for m in machines if m.state in (target, S.FAILED)]
            if len(settled) == len(machines):
                return machines
            if workflow.now() >= deadline:
                if self.t.transition is T.DRAIN and not forced:
                    forced = self._forced = True
                    workflow.logger.warning("drain of %s outlasted its time: forcing", machine_ids)
                    stuck = [m.id for m in machines if m.state in TRANSITIONAL]
                    for mid in stuck:
                        await self._call(T.DRAIN, [mid], grace=0.0, force=True)
                    deadline = workflow.now() + timedelta(seconds=CORRECTIVE_SECONDS)
                    continue
                return machines

    async def _correct(self, m: Machine, path: Corrective) -> list[Machine]:
        try:
            if path is Corrective.CLEANUP:
                await self._call(T.DELETE, [m.id])
                return await self._watch([m.id], S.SPECULATIVE, CORRECTIVE_SECONDS)
            if path is Corrective.RETRY_CONFIGURE:
                answer = await self._bootstrap(m.id)
                if answer.refused is None:
                    await self._call(T.CONFIGURE, [m.id], answer=answer)
                    return await self._watch([m.id], S.CONFIGURED, self.t.timeout_seconds)
            if path in (Corrective.GIVE_UP, Corrective.FORCE_DRAIN, Corrective.RETRY_CONFIGURE):
                await self._call(T.DRAIN, [m.id], grace=0.0, force=True)
                return await self._watch([m.id], S.IDLE, CORRECTIVE_SECONDS)
        except ActivityError as err:
            self._stale = self._fenced(err) or self._stale
            workflow.logger.warning("corrective %s of %s failed: %s", path, m.id, err)
        return [m]

    def _count(self, outcome: str) -> None:
        """Every end of a transition, one of OUTCOMES (labels bounded: transition, provider,
        outcome)."""
        meter = workflow.metric_meter().with_additional_attributes(
            {"transition": self.t.transition.value, "provider": self.t.provider}
        )
        elapsed = (workflow.now() - workflow.info().start_time).total_seconds()
        meter.create_histogram_float(
            "bigfleet_transition_duration_seconds",
            "machine transition time, start to settled",
            "s",
        ).record(elapsed, {"outcome": outcome})
        counter = meter.create_counter(
            "bigfleet_transition_outcomes_total",
            "transitions ended, by outcome: ok, failed, forced, corrected, refused",
        )
        for o in OUTCOMES:  # every outcome exported (at 0), so an alert sees the first failure
            counter.add(int(o == outcome), {"outcome": o})

    def _failed(self, err: BaseException) -> None:
        """The workflow is about to fail (a step failed for good): BigFleetState says so, as
        on every other end, so `BigFleetState = "FAILED"` finds it."""
        self._count("failed")
        workflow.upsert_search_attributes([RESULT_STATE.value_set(S.FAILED.value)])
        workflow.set_current_details(f"**{self.t.transition.value}** failed: {err}")

    async def _finish(self, result: TransitionResult) -> TransitionResult:
        states = sorted({m.state.value for m in result.machines})
        refused = result.refused or result.unavailable
        outcome = "refused" if refused else ("corrected" if result.corrective else "ok")
        if self._forced:
            outcome = "forced"
        if any(m.state is S.FAILED for m in result.machines):
            outcome = "failed"
        result.fenced = result.fenced or self._stale
        if result.fenced is not None:
            outcome = "fenced"
        self._count(outcome)
        workflow.upsert_search_attributes([RESULT_STATE.value_set(",".join(states))])
        workflow.set_current_details(
            f"**{self.t.transition.value}** → {', '.join(states)}"
            + (f"  \ncorrective: {'; '.join(result.corrective)}" if result.corrective else "")
            + (f"  \nrefused: {result.refused}" if result.refused else "")
            + (
                f"  \nno capacity for {len(result.unavailable)}: "
                + ", ".join(result.unavailable[:5])
                + (" …" if len(result.unavailable) > 5 else "")
                if result.unavailable
                else ""
            )
        )
        result.cluster = self.t.cluster
        result.need = self.t.need
        result.priority = self.t.priority
        result.requirements = self.t.requirements
        told = result
        if workflow.patched("compact-result"):
            page = MachinePage.of(result.machines)
            told = result.model_copy(update={"machines": [], "page": page})
        # To the shard's mailbox, which the shard takes from (workflows/mailbox.py); to the
        # shard itself if there is none (a shard that has not taken from one yet), and as
        # before in runs begun before mailboxes.
        if workflow.patched("results-by-mailbox"):
            try:
                await workflow.get_external_workflow_handle(
                    mailbox_workflow_id(self.t.shard)
                ).signal("transition_done", told)
                return result
            except Exception:  # (no mailbox: the shard is told directly)
                pass
        try:
            await workflow.get_external_workflow_handle(shard_workflow_id(self.t.shard)).signal(
                "transition_done", told
            )
        except Exception as err:  # the shard may be restarting: it reconciles from providers
            workflow.logger.warning("could not tell shard %s: %s", self.t.shard, err)
        return result
