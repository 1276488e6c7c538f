"""The deployment config (bigfleet/deployment.py): what a platform team writes to point BigFleet
at its own providers and operators. A bad one names every bad field before anything starts."""

from pathlib import Path

import pytest
import yaml
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.wire import ShardConfig
from bigfleet.deployment import (
    Deployment,
    DeploymentError,
    hash_token,
    load,
    load_yaml,
    token_matches,
)
from bigfleet.policy import Policy

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deployment.yaml"


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


MINIMAL = {"name": "d", "providers": [{"name": "dc", "endpoint": "127.0.0.1:50051"}]}


def test_the_example_parses_and_finds_operators_by_list_then_template():
    dep = load_yaml(EXAMPLE, Deployment, "deployment config")
    assert [p.name for p in dep.providers] == ["aws-eu-west-1", "dc-ams"]
    assert dep.provider("aws-eu-west-1").calls_per_second == 20
    assert dep.operators.endpoint("training") == "10.0.3.7:50061"
    assert dep.operators.endpoint("web") == "operator.web.clusters.internal:50061"
    # A name that cannot stand in a host name gets no endpoint from the template.
    assert dep.operators.endpoint("Web_1") is None


def test_without_operators_no_cluster_has_an_endpoint(tmp_path):
    dep = load(write(tmp_path, MINIMAL))
    assert dep.operators.endpoint("web") is None
    assert dep.gateway.listen == "0.0.0.0:50070"


@pytest.mark.parametrize(
    "change, field",
    [
        ({"providers": []}, "providers"),
        ({"providers": [{"name": "dc", "endpoint": "no port"}]}, "providers.0.endpoint"),
        ({"providers": [{"name": "dc", "endpoint": "h:1", "deadline_seconds": 0}]},
         "providers.0.deadline_seconds"),
        ({"shards": "4"}, "shards"),
        ({"operators": {"template": "op.svc:1"}}, "operators"),
        ({"gateway": {"tokens": [{"cluster": "a"}]}}, "gateway.tokens.0"),
        ({"gateway": {"tokens": [{"cluster": "a", "sha256": "abc"}]}}, "gateway.tokens.0.sha256"),
        ({"surprise": 1}, "surprise"),
        ({"drain_batch": 0}, "drain_batch"),
        ({"configure_batch": 33}, "configure_batch"),
        ({"shard_task_timeout_seconds": 600}, "shard_task_timeout_seconds"),
        ({"providers": [{"name": "dc", "endpoint": "h:1", "tls": {"cert": "c.pem"}}]},
         "providers.0.tls"),
    ],
)
def test_a_bad_field_is_named(tmp_path, change, field):
    with pytest.raises(DeploymentError) as err:
        load(write(tmp_path, {**MINIMAL, **change}))
    assert f"  {field}" in str(err.value)


def test_transition_batches_and_task_timeout_reach_every_shard(tmp_path):
    """`drain_batch: 1` (a drain workflow per machine, escalated alone), the configure batch
    and the shard task timeout travel into each shard's config; left out, both batches are
    the largest and the timeout is a minute."""
    from workers.worker import shard_config

    changed = {"shards": 2, "drain_batch": 1, "shard_task_timeout_seconds": 15}
    dep = load(write(tmp_path, {**MINIMAL, **changed}))
    configs = [shard_config(dep, shard) for shard in range(2)]
    got = [(c.configure_batch, c.drain_batch, c.task_timeout_seconds) for c in configs]
    assert got == [(32, 1, 15), (32, 1, 15)]
    default = shard_config(load(write(tmp_path, MINIMAL)), 0)
    assert (default.configure_batch, default.drain_batch, default.task_timeout_seconds) == (
        32,
        32,
        60,
    )


def test_files_are_relative_to_the_config_and_must_exist(tmp_path):
    (tmp_path / "tls").mkdir()
    (tmp_path / "tls" / "ca.pem").write_text("x")
    data = {
        **MINIMAL,
        "providers": [{"name": "dc", "endpoint": "h:1", "tls": {"ca": "tls/ca.pem"}}],
        "gateway": {"tokens": [{"cluster": "a", "file": "tokens/a"}]},
    }
    with pytest.raises(DeploymentError) as err:
        load(write(tmp_path, data))
    assert "gateway.tokens.0.file: no such file" in str(err.value)
    assert "providers.0.tls.ca" not in str(err.value)
    (tmp_path / "tokens").mkdir()
    (tmp_path / "tokens" / "a").write_text("secret\n")
    dep = load(write(tmp_path, data))
    assert dep.providers[0].tls.ca == str(tmp_path / "tls" / "ca.pem")
    assert dep.gateway.tokens[0].file == str(tmp_path / "tokens" / "a")


def test_tokens_are_compared_by_their_hash():
    digest = hash_token("s3cret")
    assert token_matches(digest, "s3cret")
    assert not token_matches(digest, "s3cret ")
    assert not token_matches(digest, "")


def test_a_process_needs_only_the_files_of_the_sections_it_uses(tmp_path):
    data = {
        **MINIMAL,
        "gateway": {"tokens": [{"cluster": "a", "file": "tokens/a"}]},
    }
    path = write(tmp_path, data)
    with pytest.raises(DeploymentError):
        load(path)  # `bigfleet config check`: every file
    dep = load(path, uses=("providers", "operators"))  # a worker has no use for the tokens
    assert dep.gateway.tokens[0].file == str(tmp_path / "tokens" / "a")


async def test_a_policy_that_says_never_crosses_to_the_shard_intact():
    """`idle_timeout_seconds: {reserved: .inf}` reaches the shard workflow as infinity through
    Temporal's data converter (JSON has none: it used to arrive as null, and the shard's
    `Policy` refused it, failing every shard's first workflow task)."""
    policy = {"idle_timeout_seconds": {"reserved": float("inf")}}
    cfg = ShardConfig(shard=0, providers=["p"], policy=policy)
    payloads = await pydantic_data_converter.encode([cfg])
    (back,) = await pydantic_data_converter.decode(payloads, [ShardConfig])
    assert back.policy == policy
    assert Policy(**back.policy).idle_timeout_seconds == {"reserved": float("inf")}
