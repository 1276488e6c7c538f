# mypy: disable-error-code="arg-type,index,misc,var-annotated"
# (The reference is the seed's pseudo-code written plainly: a domain of a machine without the
# label is None and is tallied like any other, as the seed does; typed loosely on purpose.)
"""The reference engine: the seed's pseudo-code, plainly (one object per machine, linear scans).

It is deliberately slow and obvious. It is the oracle the fast engine is property-tested against
and the baseline `bigfleet bench engine` measures it against. Same rules as docs/engine.md.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from .cost import (
    ELASTIC,
    OWNED,
    drain_grace_period,
    shard_pressure,
    victim_weights,
)
from .engine.common import (
    CLAIM_ORDER,
    Decision,
    Preemption,
    age_shortfalls,
    consolidation_budget,
    describe,
    domain_of,
    move_domain,
    pick_same_domain,
    pick_same_wait_domain,
    pick_spread_domain,
    supply_key,
    victim_order,
    worth_moving,
)
from .engine.fleet_cost import (
    SpreadRoom,
    displace_budget,
    displaceable,
    idle_hold,
    idle_spare,
    regret_swaps,
    worth_displacing,
)
from .models import (
    ConfigureAction,
    CreateAction,
    DeleteAction,
    DeleteReason,
    DrainAction,
    DrainReason,
    MachineState,
    VerifyAction,
)
from .needs import Need
from .reference_fleet import Rec, ReferenceFleet

S = MachineState


class ReferenceEngine(ReferenceFleet):
    # ---- the cycle --------------------------------------------------------------------------

    # One long function on purpose: it follows the seed's pseudo-code step by step (§8), so a
    # reader can hold the two side by side; the fast engine is the one split into phases.
    def decide(self, needs: Iterable[Need], now: float) -> Decision:
        needs = list(needs)
        policy = self.policy
        sunk = policy.fleet_cost
        out = Decision()
        self.memory.observe_counts(needs, now)
        self._assigned = {}
        taken: set[int] = set()
        claims: dict[str, list[Rec]] = {}
        holder: dict[int, Need] = {}

        # Claims: each need keeps the cluster's own machines that match it.
        for need in needs:
            cands = [
                m
                for m in self.machines
                if m.state in CLAIM_ORDER
                and m.cluster == need.cluster
                and m.ordinal not in taken
                and self._matches(need, m)
            ]
            if need.spec.same:
                per_domain: dict[str, int] = defaultdict(int)
                for m in cands:
                    per_domain[domain_of(need, m.profile)] += 1
                if per_domain:
                    home = max(sorted(per_domain), key=lambda d: per_domain[d])
                    cands = [m for m in cands if domain_of(need, m.profile) == home]
            cands.sort(
                key=lambda m: (
                    CLAIM_ORDER.index(m.state),
                    supply_key(need, m.profile, sunk),
                    -m.holder_reclamation,
                    m.ordinal,
                )
            )
            claims[need.key] = cands[: need.count]
            for m in claims[need.key]:
                taken.add(m.ordinal)
                holder[m.ordinal] = need

        # Phase 1: fill deficits from idle machines, then speculative ones (seed §8).
        assigned: dict[str, int] = {}
        reserved: dict[str, int] = defaultdict(int)
        kept: set[int] = set()
        creates: dict[tuple[str, str], list[Rec]] = defaultdict(list)
        demand: dict[str, int] = defaultdict(int)
        chosen_of: dict[str, list[Rec]] = {}
        # Configures are emitted after Phase 2: a need yielding for cost may take one over.
        configures: list[tuple[Need, Rec]] = []
        for need in needs:
            deficit = need.count - len(claims[need.key])
            if deficit <= 0:
                continue
            idle = [
                m
                for m in self.machines
                if m.state is S.IDLE and m.ordinal not in taken and self._matches(need, m)
            ]
            spec = [
                m
                for m in self.machines
                if m.state is S.SPECULATIVE and m.ordinal not in taken and self._matches(need, m)
            ]
            idle.sort(
                key=lambda m: (supply_key(need, m.profile, sunk), m.holder_reclamation, m.ordinal)
            )
            spec.sort(key=lambda m: (supply_key(need, m.profile, sunk), m.ordinal))
            chosen = self._choose(need, claims[need.key], idle + spec, deficit)
            if need.spec.same and not chosen:
                held = self._reserve_same(need, claims[need.key], idle + spec, holder, deficit)
                reserved[need.key] = len(held)
                for m in held:
                    taken.add(m.ordinal)
                    kept.add(m.ordinal)
            for m in chosen:
                taken.add(m.ordinal)
                holder[m.ordinal] = need
                self._assigned[m.ordinal] = need
                demand[m.profile.name] += 1
                if m.state is S.IDLE:
                    configures.append((need, m))
                else:
                    creates[(m.profile.provider, need.key)].append(m)
            assigned[need.key] = len(chosen)
            chosen_of[need.key] = chosen

        # Owned machines go where they save the fleet the most (docs/decisions/0012).
        if policy.fleet_cost:
            self._swap_owned(needs, configures, creates, chosen_of, holder, taken, demand)

        # Phase 2: inversions. Supply on its way first, then strictly lower priorities.
        free = sum(1 for m in self.machines if m.state in (S.IDLE, S.SPECULATIVE))
        usable = sum(1 for m in self.machines if m.state is not S.FAILED)
        weights = victim_weights(shard_pressure(free, usable))
        preempted: set[int] = set()
        earmarked: set[int] = set(kept)
        unmet = []
        cycle = {
            "claims": claims,
            "chosen_of": chosen_of,
            "configures": configures,
            "assigned": assigned,
            "position": {n.key: i for i, n in enumerate(needs)},
            "creates": creates,
            "holder": holder,
            "taken": taken,
            "earmarked": earmarked,
            "preempted": preempted,
            "weights": weights,
            "demand": demand,
            "displace_left": displace_budget(
                policy, sum(1 for m in self.machines if m.state is S.CONFIGURED)
            ),
        }
        for need in needs:
            have = len(claims[need.key]) - sum(
                1 for m in claims[need.key] if m.ordinal in preempted
            )
            deficit = need.count - have - assigned.get(need.key, 0) - reserved[need.key]
            out.satisfied[need.key] = have + assigned.get(need.key, 0)
            if reserved[need.key]:
                out.earmarked[need.key] = reserved[need.key]
            if deficit <= 0:
                self._yield_for_cost(need, cycle, out)
                continue

            def open_supply(state: S, need: Need = need) -> list[Rec]:
                rows = [
                    m
                    for m in self.machines
                    if m.state is state
                    and m.ordinal not in earmarked
                    and m.ordinal not in preempted
                    and (state is not S.CONFIGURED or m.ordinal not in holder)
                    and self._matches(need, m)
                ]
                return sorted(rows, key=lambda m: (supply_key(need, m.profile, sunk), m.ordinal))

            incoming = open_supply(S.DRAINING) + open_supply(S.CONFIGURED)
            if need.spec.same:
                incoming = [
                    m for m in open_supply(S.IDLE) + open_supply(S.SPECULATIVE)
                    if m.ordinal not in taken
                ] + incoming
            victims = [
                m
                for m in self.machines
                if m.state is S.CONFIGURED
                and m.ordinal in holder
                and m.ordinal not in preempted
                and holder[m.ordinal].priority < need.priority
                and self._matches(need, m)
            ]

            def victim_key(m: Rec) -> tuple:
                order = victim_order(weights, holder[m.ordinal], policy)
                return (*order, m.profile.name, m.ordinal)

            victims.sort(key=victim_key)
            if need.spec.same:
                incoming, victims = self._same_supply(
                    need, claims[need.key], incoming, victims, deficit
                )
            took = incoming[:deficit]
            for m in took:
                earmarked.add(m.ordinal)
            deficit -= len(took)
            hits = victims[:deficit] if not need.spec.same or len(victims) >= deficit else []
            for m in hits:
                self._preempt(m, holder[m.ordinal], need, preempted, out)
            deficit -= len(hits)
            out.earmarked[need.key] = reserved[need.key] + len(took) + len(hits)
            if deficit > 0:
                matching = sorted(
                    (m.profile for m in self.machines if self._matches(need, m)),
                    key=lambda p: supply_key(need, p, sunk),
                )
                label = matching[0].short_name if matching else describe(need.requirements)
                unmet.append((need, deficit, label))
                demand[matching[0].name if matching else label] += deficit
            self._yield_for_cost(need, cycle, out)
        out.actions.extend(self._configure(need, m) for need, m in configures)
        self._create(creates, holder, out)
        out.shortfalls = age_shortfalls(self.memory, policy, unmet)

        # Consolidation: a settled need moves its dearest machines onto free cheaper ones
        # that fit it in the same domains, while the saving is worth the move.
        budget = consolidation_budget(
            policy, sum(1 for m in self.machines if m.state is S.CONFIGURED)
        )
        creates = defaultdict(list)
        for need in needs:
            if (
                budget == 0
                or not self._settled(need, claims[need.key], preempted, holder)
                or not self.memory.stable(need, policy, now)
            ):
                continue
            spare = [
                m
                for m in self.machines
                if m.state in (S.IDLE, S.SPECULATIVE)
                and m.ordinal not in taken
                and m.ordinal not in earmarked
                and self._matches(need, m)
            ]
            spare.sort(
                key=lambda m: (
                    supply_key(need, m.profile, sunk),
                    m.state is S.SPECULATIVE,
                    m.holder_reclamation if m.state is S.IDLE else 0.0,
                    m.ordinal,
                )
            )
            dearest_first = sorted(
                (m for m in claims[need.key] if m.state is S.CONFIGURED),
                key=lambda m: (-supply_key(need, m.profile, sunk)[0], m.profile.name, m.ordinal),
            )
            for old in dearest_first:
                domains = move_domain(need, old.profile)
                new = next(
                    (
                        m
                        for m in spare
                        if m.ordinal not in taken and move_domain(need, m.profile) == domains
                    ),
                    None,
                )
                saving = supply_key(need, old.profile, sunk)[0] - (
                    supply_key(need, new.profile, sunk)[0] if new else 0.0
                )
                if budget == 0 or new is None or not worth_moving(need, policy, saving):
                    continue
                budget -= 1
                out.consolidations[need.key] = out.consolidations.get(need.key, 0) + 1
                taken.add(new.ordinal)
                holder[new.ordinal] = self._assigned[new.ordinal] = need
                demand[new.profile.name] += 1
                if new.state is S.IDLE:
                    out.actions.append(self._configure(need, new))
                else:
                    creates[(new.profile.provider, need.key)].append(new)
        self._create(creates, holder, out)

        # Phase 3: excess configured machines drain, most expensive first (seed §8).
        excess = [
            m
            for m in self.machines
            if m.state is S.CONFIGURED and m.ordinal not in holder and m.ordinal not in preempted
        ]
        excess.sort(
            key=lambda m: (
                -(m.profile.marginal_price if sunk else m.profile.price_per_hour),
                -m.profile.price_per_hour,
                m.holder_reclamation,
                m.ordinal,
            )
        )
        for m in excess:
            out.actions.append(
                DrainAction(
                    provider=m.profile.provider,
                    machine_id=m.id,
                    cluster=m.cluster or "",
                    grace_seconds=policy.excess_grace_seconds,
                    reason=DrainReason.EXCESS,
                )
            )
        self.memory.observe_demand(demand, policy)
        self._idle_and_upkeep(out, taken, kept, now)
        return out

    def _preempt(self, m: Rec, h: Need, need: Need, preempted: set[int], out: Decision) -> None:
        """`m`, held by `h`, drains for `need` with the grace of their priority gap."""
        preempted.add(m.ordinal)
        grace = drain_grace_period(need.priority, h.priority)
        out.actions.append(
            DrainAction(
                provider=m.profile.provider,
                machine_id=m.id,
                cluster=m.cluster or "",
                grace_seconds=grace,
                reason=DrainReason.PREEMPT,
                preemptor_cluster=need.cluster,
                preemptor_priority=need.priority,
                victim_priority=h.priority,
            )
        )
        out.preemptions.append(
            Preemption(m.id, h.cluster, h.priority, need.cluster, need.priority, grace)
        )

    def _yield_for_cost(self, need: Need, cycle: dict, out: Decision) -> None:
        """Backfill yields before the fleet buys (docs/decisions/0012): a need (not `Same`)
        Phase 1 gave speculative elastic machines takes owned ones instead: idle ones Phase 1
        gave to needs `displaceable` for it (configured for it instead), DRAINING ones nobody
        waits for, then configured ones of needs `displaceable` for it, best victim first;
        each where `worth_displacing`, a spread need within its `SpreadRoom`. As many of its
        purchases, dearest first, go back."""
        c, policy = cycle, self.policy
        holder, preempted = c["holder"], c["preempted"]
        bought = [
            m
            for m in c["chosen_of"].get(need.key, [])
            if m.state is S.SPECULATIVE and m.profile.capacity_type in ELASTIC
        ]
        if not policy.fleet_cost or not bought or need.spec.same:
            return
        want = len(bought)
        mine = c["claims"][need.key] + c["chosen_of"].get(need.key, [])
        room = SpreadRoom(need, [(m.profile, 1) for m in mine])
        cheapest = min(supply_key(need, m.profile)[0] for m in bought)

        def worth(h: Need) -> bool:
            return worth_displacing(h, policy, cheapest, self._cheapest_elastic(h))

        def fits(m: Rec) -> bool:
            return m.profile.capacity_type in OWNED and self._matches(need, m)

        given = 0
        handed = sorted(
            (
                i
                for i, (h, m) in enumerate(c["configures"])
                if fits(m) and not h.spec.same and displaceable(h, need, policy)
            ),
            key=lambda i: (
                supply_key(need, c["configures"][i][1].profile),
                -c["position"][c["configures"][i][0].key],
                c["configures"][i][1].ordinal,
            ),
        )
        for i in handed:
            h, m = c["configures"][i]
            if given < want and room.room(m.profile) >= 1 and worth(h):
                room.add(m.profile, 1)
                c["configures"][i] = (need, m)
                holder[m.ordinal] = self._assigned[m.ordinal] = need
                c["assigned"][h.key] -= 1
                given += 1
        draining = sorted(
            (
                m
                for m in self.machines
                if m.state is S.DRAINING and m.ordinal not in c["earmarked"] and fits(m)
            ),
            key=lambda m: (supply_key(need, m.profile), m.ordinal),
        )
        took: list[Rec] = []
        for m in draining:
            if given + len(took) < want and room.room(m.profile) >= 1:
                room.add(m.profile, 1)
                took.append(m)
        c["earmarked"].update(m.ordinal for m in took)
        victims = sorted(
            (
                m
                for m in self.machines
                if m.state is S.CONFIGURED
                and m.ordinal in holder
                and m.ordinal not in preempted
                and displaceable(holder[m.ordinal], need, policy)
                and fits(m)
            ),
            key=lambda m: (
                *victim_order(c["weights"], holder[m.ordinal], policy),
                m.profile.name,
                m.ordinal,
            ),
        )
        hits: list[Rec] = []
        for m in victims:
            if given + len(took) + len(hits) == want:
                break
            h = holder[m.ordinal]
            if c["displace_left"] > 0 and room.room(m.profile) >= 1 and worth(h):
                c["displace_left"] -= 1
                room.add(m.profile, 1)
                hits.append(m)
                self._preempt(m, h, need, preempted, out)
        back = sorted(bought, key=lambda m: (supply_key(need, m.profile), m.ordinal))
        for m in back[len(back) - (given + len(took) + len(hits)) :]:
            c["creates"][(m.profile.provider, need.key)].remove(m)
            c["taken"].discard(m.ordinal)
            del holder[m.ordinal]
            self._assigned.pop(m.ordinal, None)
            c["demand"][m.profile.name] -= 1
        if took or hits:
            out.satisfied[need.key] -= len(took) + len(hits)
            out.earmarked[need.key] = out.earmarked.get(need.key, 0) + len(took) + len(hits)
        if hits:
            out.cost_moves[need.key] = len(hits)

    def _swap_owned(self, needs, configures, creates, chosen_of, holder, taken, demand) -> None:
        """`regret_swaps` over Phase 1's choices: the giver's owned machines are configured
        for the taker, the taker's purchases go back, the giver buys its option instead."""

        def plain(need: Need) -> bool:
            return not (need.spec.same or need.spec.spread)

        def grouped(pairs) -> list:
            counts: dict = {}
            for need, m in pairs:
                counts[(need.key, m.profile)] = counts.get((need.key, m.profile), 0) + 1
            by_key = {n.key: n for n in needs}
            return [(by_key[k], p, c) for (k, p), c in counts.items()]

        given = grouped(
            (n, m) for n, m in configures if m.profile.capacity_type in OWNED and plain(n)
        )
        buys = grouped(
            (n, m)
            for n in needs
            if plain(n)
            for m in chosen_of.get(n.key, [])
            if m.state is S.SPECULATIVE and m.profile.capacity_type in ELASTIC
        )
        if not given or not buys:
            return
        spare: dict = defaultdict(int)
        sample: dict = {}
        for m in self.machines:
            sample.setdefault(m.profile, m)
            if m.state is S.SPECULATIVE and m.ordinal not in taken:
                spare[m.profile] += 1

        def options(need: Need) -> list:
            mine = {m.profile for m in self.machines if self._matches(need, m)}
            elastic = [p for p in mine if p.capacity_type in ELASTIC]
            return sorted(elastic, key=lambda p: supply_key(need, p))

        def fits(need: Need, profile) -> bool:
            return self._matches(need, sample[profile])

        def cost(need: Need, profile) -> float:
            return supply_key(need, profile)[0]

        for sw in regret_swaps(given, buys, dict(spare), options, fits, cost):
            k = sw.count
            moving = [
                i for i, (n, m) in enumerate(configures) if n is sw.giver and m.profile == sw.owned
            ][:k]
            for i in moving:
                m = configures[i][1]
                configures[i] = (sw.taker, m)
                holder[m.ordinal] = self._assigned[m.ordinal] = sw.taker
                chosen_of[sw.giver.key].remove(m)
                chosen_of.setdefault(sw.taker.key, []).append(m)
            line = creates[(sw.bought.provider, sw.taker.key)]
            for m in [m for m in line if m.profile == sw.bought][:k]:
                line.remove(m)
                taken.discard(m.ordinal)
                del holder[m.ordinal]
                self._assigned.pop(m.ordinal, None)
                chosen_of[sw.taker.key].remove(m)
            fresh = [
                m
                for m in self.machines
                if m.state is S.SPECULATIVE and m.ordinal not in taken and m.profile == sw.instead
            ][:k]
            for m in fresh:
                creates[(m.profile.provider, sw.giver.key)].append(m)
                taken.add(m.ordinal)
                holder[m.ordinal] = self._assigned[m.ordinal] = sw.giver
                chosen_of[sw.giver.key].append(m)
            demand[sw.instead.name] += k
            demand[sw.bought.name] -= k

    def _cheapest_elastic(self, need: Need) -> float:
        """The effective cost of the cheapest elastic machine `need` could run on (0: none)."""
        costs = [
            supply_key(need, m.profile)[0]
            for m in self.machines
            if m.profile.capacity_type in ELASTIC and self._matches(need, m)
        ]
        return min(costs, default=0.0)

    def _create(
        self, creates: dict[tuple[str, str], list[Rec]], holder: dict[int, Need], out: Decision
    ) -> None:
        """Create actions for speculative machines assigned to a need, per (provider, need)."""
        for (provider, _), recs in creates.items():
            if not recs:
                continue
            need = holder[recs[0].ordinal]
            for i in range(0, len(recs), self.policy.create_batch):
                batch = recs[i : i + self.policy.create_batch]
                out.actions.append(
                    CreateAction(
                        provider=provider,
                        machine_ids=[m.id for m in batch],
                        cluster=need.cluster,
                        need=need.key,
                        requirements=list(need.requirements),
                        priority=need.priority,
                    )
                )

    def _settled(
        self, need: Need, claimed: list[Rec], preempted: set[int], holder: dict[int, Need]
    ) -> bool:
        """Whole count held, none preempted this cycle, and no unclaimed machine of its
        cluster that could serve it still coming up (a move's replacement)."""
        if need.count == 0 or len(claimed) < need.count:
            return False
        if any(m.ordinal in preempted for m in claimed):
            return False
        return not any(
            m.state in (S.CONFIGURING, S.CREATING)
            and m.cluster == need.cluster
            and m.ordinal not in holder
            and self._matches(need, m)
            for m in self.machines
        )

    def _choose(self, need: Need, claimed: list[Rec], supply: list[Rec], deficit: int) -> list[Rec]:
        if need.spec.same:
            have = defaultdict(int)
            for m in claimed:
                have[domain_of(need, m.profile)] += 1
            free = defaultdict(int)
            for m in supply:
                free[domain_of(need, m.profile)] += 1
            home = pick_same_domain(need, have, free, deficit)
            if home is None:
                return []
            return [m for m in supply if domain_of(need, m.profile) == home][:deficit]
        if need.spec.spread:
            key = need.spec.spread[0].key
            current: dict[str, int] = defaultdict(int)
            for m in claimed:
                current[m.profile.label(key) or ""] += 1
            eligible = {
                m.profile.label(key)
                for m in self.machines
                if m.state is not S.FAILED and m.profile.label(key) and self._matches(need, m)
            }
            pools: dict[str, list[Rec]] = defaultdict(list)
            for m in supply:
                if m.profile.label(key):
                    pools[m.profile.label(key)].append(m)
            chosen = []
            while len(chosen) < deficit:
                d = pick_spread_domain(
                    current,
                    {k: len(v) for k, v in pools.items()},
                    eligible,
                    need.spec.spread[0].max_skew,
                )
                if d is None:
                    break
                chosen.append(pools[d].pop(0))
                current[d] += 1
            return chosen
        return supply[:deficit]

    def _reserve_same(
        self,
        need: Need,
        claimed: list[Rec],
        free: list[Rec],
        holder: dict[int, Need],
        deficit: int,
    ) -> list[Rec]:
        """A `Same` need that cannot be placed yet keeps the free machines of the domain it is
        waiting on (draining and excess machines will complete it), so lower priorities do not
        take them in the meantime."""
        coming: dict[str, int] = defaultdict(int)
        for m in free:
            coming[domain_of(need, m.profile)] += 1
        for m in self.machines:
            on_its_way = m.state is S.DRAINING or (
                m.state is S.CONFIGURED and m.ordinal not in holder
            )
            if on_its_way and self._matches(need, m):
                coming[domain_of(need, m.profile)] += 1
        home = pick_same_wait_domain(
            {domain_of(need, m.profile) for m in claimed}, coming, {}, deficit
        )
        return [m for m in free if domain_of(need, m.profile) == home][:deficit] if home else []

    def _same_supply(
        self,
        need: Need,
        claimed: list[Rec],
        incoming: list[Rec],
        victims: list[Rec],
        deficit: int,
    ) -> tuple[list[Rec], list[Rec]]:
        """A `Same` need waits or preempts only inside the one domain that can hold it whole."""

        def tally(recs: list[Rec]) -> dict[str, int]:
            out: dict[str, int] = defaultdict(int)
            for m in recs:
                out[domain_of(need, m.profile)] += 1
            return out

        home = pick_same_wait_domain(
            {domain_of(need, m.profile) for m in claimed}, tally(incoming), tally(victims), deficit
        )
        return (
            [m for m in incoming if domain_of(need, m.profile) == home],
            [m for m in victims if domain_of(need, m.profile) == home],
        )

    def _configure(self, need: Need, m: Rec) -> ConfigureAction:
        return ConfigureAction(
            provider=m.profile.provider,
            machine_id=m.id,
            cluster=need.cluster,
            need=need.key,
            requirements=list(need.requirements),
            priority=need.priority,
        )

    def _idle_and_upkeep(
        self, out: Decision, taken: set[int], kept: set[int], now: float
    ) -> None:
        policy = self.policy
        # Per profile, the longest-idle elastic machines beyond what its forecast wants and
        # a waiting `Same` need keeps go (`idle_spare`); the others wait for `idle_hold`.
        idle_of: dict[str, list[Rec]] = defaultdict(list)
        for m in self.machines:
            if m.state is S.IDLE and (m.ordinal not in taken or m.ordinal in kept):
                idle_of[m.profile.name].append(m)
        gone: set[int] = set()
        for group in idle_of.values():
            profile = group[0].profile
            spare = idle_spare(policy, profile, self.memory.forecast.get(profile.name, 0.0))
            free = sorted(
                (m for m in group if m.ordinal not in kept), key=lambda m: (m.since, m.ordinal)
            )
            if spare is None:
                hold = idle_hold(policy, profile, self.memory.wants_soon(profile, policy))
                gone.update(m.ordinal for m in free if now - m.since >= hold)
            else:
                gone.update(m.ordinal for m in free[: max(0, len(free) - spare)])
        for m in self.machines:
            if m.ordinal in gone:
                out.actions.append(
                    DeleteAction(
                        provider=m.profile.provider,
                        machine_id=m.id,
                        reason=DeleteReason.IDLE_TIMEOUT,
                    )
                )
            limit = policy.transition_timeouts().get(m.state)
            if limit is not None and now - m.since > limit:
                out.timed_out.append(m.id)
            if m.state is S.CONFIGURED and m.missed >= policy.health_missed_reports:
                out.actions.append(
                    VerifyAction(provider=m.profile.provider, machine_id=m.id, cluster=m.cluster)
                )
