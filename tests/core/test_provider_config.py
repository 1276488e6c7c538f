"""Provider config files for `bigfleet provider serve --config` (bigfleet/providers/configured.py):
the kind picks the provider, and a bad file is refused naming what is wrong."""

import pytest

from bigfleet.providers.configured import ProviderConfigError, load_provider


@pytest.mark.parametrize(
    "text, words",
    [
        ("kind: gce\nname: x\n", "kind: expected one of ec2, redfish, got 'gce'"),
        ("name: x\n", "kind: expected one of"),
        ("- kind: ec2\n", "expected a mapping with `kind`"),
        ("kind: [\n", "not valid YAML"),
    ],
)
def test_a_bad_provider_config_is_refused_naming_what_is_wrong(tmp_path, text, words):
    path = tmp_path / "provider.yaml"
    path.write_text(text)
    with pytest.raises(ProviderConfigError) as err:
        load_provider(path)
    assert words in str(err.value)


def test_a_missing_provider_config_is_named(tmp_path):
    with pytest.raises(ProviderConfigError) as err:
        load_provider(tmp_path / "nope.yaml")
    assert "nope.yaml: cannot read" in str(err.value)


def test_the_ec2_example_loads_without_calling_aws():
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "provider-ec2.yaml"
    provider = load_provider(example)
    assert provider.name == "aws-us-east-1"
    assert provider.blocking is True


def test_a_bad_ec2_field_is_named(tmp_path):
    path = tmp_path / "ec2.yaml"
    path.write_text("kind: ec2\nname: aws\nregion: us-east-1\nimage_id: ami-1\noffer: []\n")
    with pytest.raises(ProviderConfigError) as err:
        load_provider(path)
    assert "invalid ec2 provider" in str(err.value) and "  offer" in str(err.value)


def test_the_dev_examples_without_simulation_are_valid_configs():
    """The README's fleet without simulation: EC2 on moto, Redfish on the emulator."""
    from pathlib import Path

    import yaml

    from bigfleet.models import from_wire
    from bigfleet.providers.ec2 import Ec2Config
    from bigfleet.providers.redfish import RedfishConfig

    examples = Path(__file__).resolve().parents[2] / "examples"
    for name, model in (("dev-ec2-moto.yaml", Ec2Config), ("dev-redfish-emulator.yaml",
                                                           RedfishConfig)):  # fmt: skip
        raw = yaml.safe_load((examples / name).read_text())
        assert raw.pop("kind") in ("ec2", "redfish")
        from_wire(model, raw)
    # The racks of the Redfish example are the emulator configs' systems.
    for rack in ("ams-gpu-01", "ams-gpu-04"):
        assert (examples / f"sushy-rack-{rack}.conf").exists()
