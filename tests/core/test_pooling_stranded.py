"""Elastic machines beside idle owned ones in another shard (issue 45, "Visible";
bigfleet/pooling/stranded.py): worked examples, numbers by hand."""

from bigfleet.models import MachineState
from bigfleet.pooling.stranded import stranded
from tests.core.test_pooling import elastic, idle_gpus, report
from tests.fleet import bare_metal, many

S = MachineState
AMS1 = "dc-ams/gpu-8xh100/ams-1/bare-metal"
AMS2 = "dc-ams/gpu-8xh100/ams-2/bare-metal"
CPU_REQ = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m6i.large"]}]


def spare_gpus(n: int, start: int) -> list:
    """Speculative bare-metal GPUs in zone ams-2 (another profile than `idle_gpus`')."""
    return many(bare_metal, n, start=start, state=S.SPECULATIVE, rack="S", zone="ams-2")


def test_each_free_machine_pairs_once_dearest_spend_first():
    """Shard 1 pays for web's 6 on-demand GPUs at $98/h and batch's 3 at $40/h, and holds 1 idle
    GPU (ams-1); shard 2 pays for train's 2 at $60/h and holds 4 idle GPUs (ams-1); shard 3
    holds 3 speculative GPUs (ams-2), and pays for a CPU need no GPU fits.

    Dearest first: web (shard 1) takes shard 2's 4 and 2 of shard 3's (never its own shard's
    idle one); train (shard 2) takes shard 1's idle one and shard 3's last; batch finds nothing
    left. ams-1: 4 + 1 = 5, ams-2: 2 + 1 = 3: 8 elastic machines, each of the 8 free ones
    counted once."""
    reports = {
        1: report(
            1,
            elastic=[elastic(3, 40.0, cluster="batch"), elastic(6, 98.0, cluster="web")],
            idle=idle_gpus(1, "Z", start=100),
        ),
        2: report(2, elastic=[elastic(2, 60.0, cluster="train")], idle=idle_gpus(4, "A")),
        3: report(
            3,
            elastic=[elastic(5, 200.0, cluster="api", requirements=CPU_REQ)],
            speculative=spare_gpus(3, start=10),
        ),
    }
    assert stranded(reports) == {AMS1: 5, AMS2: 3}
    # The same reports in another order: the same answer.
    assert stranded(dict(reversed(list(reports.items())))) == {AMS1: 5, AMS2: 3}


def test_needs_not_settled_count_and_a_shards_own_free_machines_do_not():
    """Batch's 3 on-demand GPUs on shard 1 are not settled yet: they still count (2 idle GPUs
    on shard 2 would stand in: 2). Shard 1's own idle GPU is its own shard's matter (its
    `bigfleet_elastic_while_owned_idle_machines`), not this gauge's."""
    unsettled = elastic(3, 40.0, cluster="batch", settled=False)
    assert stranded({1: report(1, elastic=[unsettled]), 2: report(2, idle=idle_gpus(2, "A"))}) == {
        AMS1: 2
    }
    assert stranded({1: report(1, elastic=[unsettled], idle=idle_gpus(2, "A"))}) == {}


def test_an_owned_machine_that_would_cost_more_is_no_stand_in_and_quota_is_not_owned():
    """Idle bare-metal GPUs interrupted 5 % an hour (a flaky rack): for a need with a $2 500
    interruption penalty they cost 0 + 0.05 × 2 500 = $125/h effective, more than its $98
    on-demand: nothing counts; with $100 (0.05 × 100 = $5 < $98) all 4 do. Speculative spot
    slots at $31/h, cheaper than $98 even so, are cloud quota, not owned: never counted."""
    from bigfleet.synthetic import OFFERS
    from bigfleet.synthetic import machine as offer_machine

    flaky = many(bare_metal, 4, rack="F", interruption=0.05)

    def with_penalty(penalty: float) -> dict[str, int]:
        return stranded(
            {1: report(1, elastic=[elastic(6, 98.0, penalty)]), 2: report(2, idle=flaky)}
        )

    assert with_penalty(2500.0) == {}
    assert with_penalty(100.0) == {AMS1: 4}

    spot = next(o for o in OFFERS if o.instance_type == "p5.48xlarge" and o.price == 31.0)
    slots = [offer_machine(f"slot-{i}", spot, S.SPECULATIVE) for i in range(4)]
    p5 = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}]
    paying = report(1, elastic=[elastic(6, 98.0, 100.0, requirements=p5)])
    assert stranded({1: paying, 2: report(2, speculative=slots)}) == {}
