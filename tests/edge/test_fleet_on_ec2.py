"""A whole fleet on Temporal with EC2 as its cloud (issue 12): moto in server mode (a real HTTP
endpoint boto3 talks to), `bigfleet provider serve --config ec2.yaml` in front of it, a cluster
operator, the roll-up gateway and `bigfleet worker --config`, each its own process, as
`bigfleet dev` runs them. A cluster's roll-up becomes EC2 instances: launched, tagged with their
machine ids, given the operator's bootstrap blob as user data and reported CONFIGURED; when the
cluster lets them go, they are terminated after the idle timeout. The Temporal workflows show
every transition (searchable by machine id)."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import query_retrying
from tests.procs import ROOT, Proc, free_port

boto3 = pytest.importorskip("boto3")

BIGFLEET = [sys.executable, "-m", "workers.cli"]
VM = "m5.large"
FLEET = {  # what the operator serves and plays (no providers of its own)
    "name": "ec2",
    "cycle_seconds": 1,
    "duration_seconds": 1,
    "providers": [],
    "clusters": [{"name": "web"}],
}
EC2 = {
    "kind": "ec2",
    "name": "aws",
    "region": "us-east-1",
    "image_id": "ami-12c6146b",
    "offerings": [
        {"instance_type": VM, "zone": "us-east-1a", "capacity_type": "on-demand",
         "price_per_hour": 0.096, "resources": {"cpu": 2, "memory_gib": 8}, "count": 6},
    ],
}  # fmt: skip


def rollup(count: int) -> dict[str, Any]:
    need = {
        "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [VM]}
        ],
        "priority": 1000,
        "count": count,
    }
    return {"cluster": "web", "needs": [need]}


@pytest.mark.temporal
async def test_a_fleet_runs_on_ec2_through_its_provider_server(dev_env, tmp_path: Path):
    temporal = dev_env.client.service_client.config.target_host
    ports = {k: free_port() for k in ("moto", "provider", "operator", "gateway")}
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    moto_url = f"http://127.0.0.1:{ports['moto']}"
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    (tmp_path / "ec2.yaml").write_text(yaml.safe_dump({**EC2, "endpoint_url": moto_url}))
    (tmp_path / "web.token").write_text("token-of-web\n")
    deployment = {
        "name": "ec2",
        "cycle_seconds": 1,
        "policy": {"excess_grace_seconds": 1, "idle_timeout_seconds": {"on-demand": 2},
                   "max_silence_seconds": 3600},
        "providers": [{"name": "aws", "endpoint": f"127.0.0.1:{ports['provider']}"}],
        "operators": {"clusters": [{"cluster": "web",
                                    "endpoint": f"127.0.0.1:{ports['operator']}"}]},
        "gateway": {"listen": f"127.0.0.1:{ports['gateway']}",
                    "tokens": [{"cluster": "web", "file": "web.token"}]},
    }  # fmt: skip
    (tmp_path / "deployment.yaml").write_text(yaml.safe_dump(deployment))
    procs = [
        Proc("moto", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                      "-p", str(ports["moto"])], tmp_path / "moto.log"),
        Proc("provider", [*BIGFLEET, "provider", "serve", "--config", str(tmp_path / "ec2.yaml"),
                          "--listen", f"127.0.0.1:{ports['provider']}",
                          "--state-dir", str(tmp_path / "provider")], tmp_path / "provider.log"),
        Proc("operator", [*BIGFLEET, "operator", "serve", "--fleet", str(tmp_path / "fleet.yaml"),
                          "--listen", f"127.0.0.1:{ports['operator']}"],
             tmp_path / "operator.log"),
        Proc("gateway", [*BIGFLEET, "gateway", "--config", str(tmp_path / "deployment.yaml"),
                         "--address", temporal], tmp_path / "gateway.log"),
        Proc("worker", [*BIGFLEET, "worker", "--config", str(tmp_path / "deployment.yaml"),
                        "--address", temporal, "--metrics-port", "0", "--log-level", "warning",
                        "--snapshot-dir", str(tmp_path / "snapshots")], tmp_path / "worker.log"),
    ]  # fmt: skip
    ec2 = boto3.client(
        "ec2", region_name="us-east-1", endpoint_url=moto_url,
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )  # fmt: skip

    def instances(*states: str) -> list[dict[str, Any]]:
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "tag:bigfleet:provider", "Values": ["aws"]},
                     {"Name": "instance-state-name", "Values": list(states)}]
        )  # fmt: skip
        return [i for p in pages for r in p["Reservations"] for i in r["Instances"]]

    def logs() -> str:
        return "\n".join(p.tail() for p in procs)

    async def until(what: str, check: Any, timeout: float = 90.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                got = check()
            except Exception:  # a server still starting
                got = None
            if got:
                return got
            await asyncio.sleep(0.5)
        raise AssertionError(f"{what}: not after {timeout} s\n{logs()}")

    def send(count: int) -> None:
        path = tmp_path / f"rollup-{count}.yaml"
        path.write_text(yaml.safe_dump(rollup(count)))
        out = subprocess.run(
            [*BIGFLEET, "rollup", "send", str(path), "--gateway",
             f"127.0.0.1:{ports['gateway']}", "--token-file", str(tmp_path / "web.token")],
            cwd=ROOT, capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr + logs()

    try:
        for proc in procs:
            proc.env = env
            proc.start()
            if proc.name in ports:
                await proc.listening(ports[proc.name])

        await until("the gateway accepts roll-ups", lambda: send(3) is None)
        def user_data(inst: dict[str, Any]) -> str | None:
            return ec2.describe_instance_attribute(
                InstanceId=inst["InstanceId"], Attribute="userData"
            )["UserData"].get("Value")

        # Running, tagged for web and started with its bootstrap (a configure tags the instance
        # before it stops it to set the user data: tagged and running alone may be that moment).
        configured = await until("3 instances configured for web", lambda: (
            ms := [i for i in instances("running")
                   if {"Key": "bigfleet:cluster", "Value": "web"} in i.get("Tags", [])
                   and user_data(i)]
        ) and len(ms) == 3 and ms)  # fmt: skip
        for inst in configured:
            tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
            assert tags["bigfleet:machine-id"].startswith("aws-m5-large-us-east-1a-on-demand-")
            data = user_data(inst)
            assert data and base64.b64decode(data).startswith(b"#cloud-config"), data
        shard = dev_env.client.get_workflow_handle("shard-0")
        deadline = time.monotonic() + 60
        while (st := await query_retrying(lambda: shard.query("status")))["machines"].get(
            "CONFIGURED"
        ) != 3:
            assert time.monotonic() < deadline, f"{st}\n{logs()}"
            await asyncio.sleep(0.5)

        # The transitions are workflows, searchable by machine id as in the Temporal UI.
        mid = {t["Key"]: t["Value"] for t in configured[0]["Tags"]}["bigfleet:machine-id"]
        kinds = {
            wf.search_attributes.get("BigFleetTransition", [None])[0]
            async for wf in dev_env.client.list_workflows(f'BigFleetMachineIds = "{mid}"')
        }
        assert {"create", "configure"} <= kinds, kinds

        # web lets them go: drained, idle, then terminated after the idle timeout.
        send(0)
        await until("the instances terminated", lambda: not instances(
            "pending", "running", "stopping", "stopped"), timeout=120)  # fmt: skip
    finally:
        for proc in reversed(procs):
            proc.stop()
