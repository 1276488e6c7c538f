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
