"""moto in server mode for the EC2 provider's tests (tests/edge/test_ec2_provider.py,
tests/edge/test_ec2_notices.py): a real HTTP endpoint in its own process (`python -m
moto.server`) that boto3 talks to over the network, started once per test module, serving EC2
and SQS alike. Import the `moto_url` fixture into the test module."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import boto3
import pytest

from tests.procs import free_port

REGION = "us-east-1"


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    try:
        probe = boto3.client("ec2", region_name=REGION, endpoint_url=url)
        deadline = time.monotonic() + 30
        while True:
            try:
                probe.describe_regions()
                break
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server on {url} did not answer") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
