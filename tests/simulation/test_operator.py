"""The simulated cluster operator answers GenerateBootstrap as design §13 describes."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from bigfleet import labels
from bigfleet.models import BootstrapRequest, NodeSelectorRequirement, Operator
from bigfleet.operators import (
    KUBELET_VERSION,
    BootstrapRefused,
    ClusterOperator,
    OperatorUpdate,
    Reclaim,
    SimulatedOperator,
    UpcomingNode,
)

ENDPOINT = "https://10.0.0.1:6443"


def operator(**kw) -> SimulatedOperator:
    return SimulatedOperator("c1", ENDPOINT, seed=7, **kw)


def kubelet(op: Operator, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=KUBELET_VERSION, operator=op, values=list(values))


def request(*requirements: NodeSelectorRequirement, cluster: str = "c1") -> BootstrapRequest:
    return BootstrapRequest(
        cluster=cluster,
        machine_id="aws-euw1-m5-large-eu-west-1a-spot-00003",
        requirements=list(requirements),
        labels={labels.INSTANCE_TYPE: "m5.large", labels.ZONE: "eu-west-1a"},
    )


def node_labels(blob) -> dict[str, str]:
    files = yaml.safe_load(blob.user_data)["write_files"]
    (flags,) = [f["content"] for f in files if f["path"] == "/etc/default/kubelet"]
    pairs = flags.strip().removeprefix("KUBELET_EXTRA_ARGS=--node-labels=").split(",")
    return dict(pair.split("=", 1) for pair in pairs)


def join_token(blob) -> str:
    files = yaml.safe_load(blob.user_data)["write_files"]
    (kubeconfig,) = [f["content"] for f in files if f["path"].endswith("bootstrap-kubeconfig")]
    return yaml.safe_load(kubeconfig)["users"][0]["user"]["token"]


def test_the_simulated_operator_satisfies_the_protocol():
    assert isinstance(operator(), ClusterOperator)


def test_the_blob_is_cloud_init_that_joins_the_cluster_with_the_requested_labels():
    gpu = NodeSelectorRequirement(key="example.com/gpu", operator=Operator.IN, values=["h100"])
    blob = operator().generate_bootstrap(request(gpu))
    text = blob.user_data.decode()
    assert text.startswith("#cloud-config\n")
    assert f"server: {ENDPOINT}" in text
    assert node_labels(blob) == {
        labels.INSTANCE_TYPE: "m5.large",
        labels.ZONE: "eu-west-1a",
        "example.com/gpu": "h100",
        KUBELET_VERSION: "33",
    }
    assert yaml.safe_load(blob.user_data)["hostname"] == "aws-euw1-m5-large-eu-west-1a-spot-00003"
    assert blob.ttl_seconds == 3600


def test_every_blob_carries_a_fresh_join_token():
    op = operator()
    tokens = {join_token(op.generate_bootstrap(request())) for _ in range(5)}
    assert len(tokens) == 5
    assert all(len(t) == 23 and t[6] == "." for t in tokens)


def test_the_same_seed_gives_the_same_tokens():
    assert join_token(operator().generate_bootstrap(request())) == join_token(
        operator().generate_bootstrap(request())
    )


@pytest.mark.parametrize(
    ("requirement", "label"),
    [
        (kubelet(Operator.IN, "1.30", "1.31"), "1.31"),
        (kubelet(Operator.IN, "30"), "30"),
        (kubelet(Operator.LT, "32"), "31"),
        (kubelet(Operator.GT, "29"), "33"),
        (kubelet(Operator.NOT_IN, "1.33"), "32"),
        (kubelet(Operator.EXISTS), "33"),
    ],
)
def test_a_kubelet_inside_the_skew_window_is_granted(requirement, label):
    blob = operator().generate_bootstrap(request(requirement))
    assert node_labels(blob)[KUBELET_VERSION] == label
    assert f"kubelet=1.{int(label.split('.')[-1])}.*" in blob.user_data.decode()


@pytest.mark.parametrize(
    "requirement",
    [
        kubelet(Operator.GT, "33"),  # newer than the control plane
        kubelet(Operator.IN, "1.29"),  # older than 1.33 minus three minors
        kubelet(Operator.LT, "30"),
        kubelet(Operator.IN, "2.0", "latest"),
        kubelet(Operator.DOES_NOT_EXIST),
    ],
)
def test_a_kubelet_outside_the_skew_window_is_refused(requirement):
    op = operator()
    with pytest.raises(BootstrapRefused) as err:
        op.generate_bootstrap(request(requirement))
    assert err.value.cluster == "c1" and err.value.requirement == requirement
    refused = f"cluster c1 refused to bootstrap requirement {KUBELET_VERSION}"
    assert str(err.value).startswith(refused)
    assert "1.30-1.33" in str(err.value)


def test_a_label_the_machine_contradicts_is_refused():
    other = NodeSelectorRequirement(
        key=labels.INSTANCE_TYPE, operator=Operator.IN, values=["c5.xlarge"]
    )
    with pytest.raises(BootstrapRefused, match="c5.xlarge"):
        operator().generate_bootstrap(request(other))


def test_a_request_for_another_cluster_is_refused():
    with pytest.raises(BootstrapRefused, match="cluster c2"):
        operator().generate_bootstrap(request(cluster="c2"))


def test_notify_records_what_bigfleet_decided():
    op = operator()
    update = OperatorUpdate(
        cluster="c1",
        upcoming=[UpcomingNode(machine_id="m-1", instance_type="m5.large")],
        reclaims=[Reclaim(machine_id="m-2", grace_seconds=30)],
        available={"m5.large": 12},
    )
    op.notify(update)
    assert op.updates == [update]
    with pytest.raises(ValueError, match="c2"):
        op.notify(OperatorUpdate(cluster="c2"))


def test_an_update_with_a_negative_grace_is_rejected():
    with pytest.raises(ValidationError, match="grace_seconds"):
        Reclaim(machine_id="m-2", grace_seconds=-1)


def test_its_nodes_are_the_machines_it_bootstrapped_until_they_are_reclaimed():
    """What the operator reports as node health (design §9): the machines that joined."""
    op = operator()
    for i in (1, 2, 3):
        op.generate_bootstrap(request().model_copy(update={"machine_id": f"m-{i}"}))
    with pytest.raises(BootstrapRefused):
        op.generate_bootstrap(request(cluster="c2").model_copy(update={"machine_id": "m-9"}))
    op.notify(OperatorUpdate(cluster="c1", reclaims=[Reclaim(machine_id="m-2", grace_seconds=60)]))
    assert op.node_ids() == ["m-1", "m-3"]


def test_the_dev_operator_keeps_its_nodes_across_a_restart(tmp_path):
    from workers.verbs.operator import OperatorNodes

    path = tmp_path / "nodes.json"
    first = {"c1": operator()}
    first["c1"].generate_bootstrap(request())
    assert OperatorNodes(first, path).ready("c1") == [request().machine_id]
    again = {"c1": operator()}
    assert OperatorNodes(again, path).ready("c1") == [request().machine_id]
    path.write_text("{not json")
    assert OperatorNodes({"c1": operator()}, path).ready("c1") == []  # (said, not fatal)


def test_the_dev_operators_roll_ups_carry_their_node_health(tmp_path):
    import asyncio

    from bigfleet.simulation.scenario import load
    from workers.dev.operators import Operators

    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({
        "name": "f", "duration_seconds": 60, "cycle_seconds": 0.05, "providers": [],
        "clusters": [{"name": "c1", "rollups": [{"at": 0, "needs": []}]}],
    }))  # fmt: skip
    sent: list[dict] = []

    async def send(cluster: str, rollup: dict) -> str:
        sent.append(rollup)
        return "here"

    async def play() -> None:
        stop = asyncio.Event()
        ops = Operators(None, load(path), send=send, health=lambda c: [f"{c}-node-1"])
        task = asyncio.create_task(ops.run(stop))
        while len(sent) < 2:
            await asyncio.sleep(0.01)
        stop.set()
        await task

    asyncio.run(asyncio.wait_for(play(), 10))
    assert all(r["health"] == {"machine_ids": ["c1-node-1"]} for r in sent)
