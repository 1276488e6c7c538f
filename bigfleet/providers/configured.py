"""Real providers from a provider config file, for `bigfleet provider serve --config`:

    kind: ec2          # or redfish
    name: aws-us-east-1
    ...                # the fields of that kind's config (bigfleet/providers/ec2/, redfish/)

The kind picks the module; its config model checks the rest, naming every bad field.
"""

from __future__ import annotations

import importlib
import pathlib
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ..models import from_wire
from ..yamlfile import field_lines, safe_load
from .base import CapacityProvider

# kind -> (module, config model, provider class)
KINDS = {
    "ec2": ("bigfleet.providers.ec2", "Ec2Config", "Ec2Provider"),
    "redfish": ("bigfleet.providers.redfish", "RedfishConfig", "RedfishProvider"),
}


class ProviderConfigError(ValueError):
    """A provider config that cannot be used; the message names the file and every field."""


def load_provider(path: str | pathlib.Path) -> CapacityProvider:
    """The provider an operator's YAML file describes, by its `kind` (KINDS);
    ProviderConfigError naming the file and every bad field."""
    path = pathlib.Path(path)
    try:
        raw = safe_load(path.read_text())
    except OSError as err:
        raise ProviderConfigError(f"{path}: cannot read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ProviderConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ProviderConfigError(f"{path}: expected a mapping with `kind`")
    kind = raw.pop("kind", None)
    if kind not in KINDS:
        raise ProviderConfigError(
            f"{path}: kind: expected one of {', '.join(sorted(KINDS))}, got {kind!r}"
        )
    module_name, config_name, provider_name = KINDS[kind]
    module = importlib.import_module(module_name)
    model: type[BaseModel] = getattr(module, config_name)
    try:
        config: Any = from_wire(model, raw)
    except ValidationError as err:
        raise ProviderConfigError(f"{path}: invalid {kind} provider:\n{field_lines(err)}") from None
    provider: CapacityProvider = getattr(module, provider_name)(config)
    return provider
