"""`bigfleet dev --shadow` (issue 34): shadow mode tried without a hand-written config. The
deployment config dev writes for its workers puts every shard in shadow, and only then."""

from pathlib import Path

import pytest

from tests.procs import free_ports
from workers.dev.processes import DevProcesses
from workers.process import load_deployment, load_fleet

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("shadow", [True, False])
def test_dev_writes_a_deployment_whose_shards_run_in_shadow_when_asked(tmp_path, shadow):
    fleet_path = ROOT / "examples" / "dev-fleet.yaml"
    # Its own ports, not the default ones a `./bf dev` running beside the tests holds.
    procs = DevProcesses(
        fleet_path, load_fleet(str(fleet_path)), tmp_path, "localhost:7233", shadow=shadow,
        base_port=free_ports(8),
    )
    procs.plan()
    deployment = load_deployment(str(procs.config_path))
    assert [deployment.shadow_shard(s) for s in range(deployment.shards)] == [shadow] * 2


def test_dev_takes_the_shadow_flag():
    from workers.cli import parser

    args = parser().parse_args(["dev", "--shadow"])
    assert args.shadow is True
