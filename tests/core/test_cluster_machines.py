"""`bigfleet cluster NAME` lists the cluster's machines (issue 48): id, state, profile and since
when, as the README says it does."""

from __future__ import annotations

from bigfleet.models import MachineState
from bigfleet.shard import Shard
from bigfleet.synthetic import OFFERS, machine
from workers.verbs.status import render_cluster

GPU = next(o for o in OFFERS if o.instance_type == "gpu-8xh100")
REQ = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["gpu-8xh100"]}]
S = MachineState


def test_the_cluster_view_lists_the_machines_it_holds_and_no_others():
    shard = Shard(0)
    held = [machine(f"web-{i}", GPU, S.CONFIGURED, "web") for i in range(3)]
    other = [machine("batch-0", GPU, S.CONFIGURED, "batch"), machine("free-0", GPU, S.IDLE)]
    for cluster, n in (("web", 3), ("batch", 1)):
        need = {"requirements": REQ, "priority": 100_000, "count": n}
        shard.receive({"cluster": cluster, "generation": 1, "needs": [need]}, 0)
    shard.adopt(held + other, 1_700_000_000)
    view = {**shard.cluster_view("web"), "shard": 0}
    assert view["machines_total"] == 3
    assert sorted(m["id"] for m in view["machines"]) == ["web-0", "web-1", "web-2"]
    assert {m["state"] for m in view["machines"]} == {"CONFIGURED"}
    assert {m["profile"] for m in view["machines"]} == {shard.inventory.profile_of(0).short_name}
    assert all(m["since"] > 0 for m in view["machines"])
    text = render_cluster(view)
    assert "  machines:  3" in text, text
    row = next(line for line in text.splitlines() if "web-1" in line)
    assert "CONFIGURED" in row and "gpu-8xh100" in row and "UTC" not in row, row
    assert "batch-0" not in text and "free-0" not in text
    assert "machines:  none" in render_cluster({**shard.cluster_view("nobody"), "shard": 0})
