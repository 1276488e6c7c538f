"""A Redfish provider's settings: its BMCs (each with the rack, zone and kind of machine its
systems are), where its state file and NoCloud seeds go, how machines boot their blob, and the
timeouts of configure, power-off and the BMC connections."""

from __future__ import annotations

import pathlib
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...models import Dollars, Name, Resources
from ...yamlfile import load_model

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Url = Annotated[str, Field(pattern=r"^https?://[^\s/]+(/\S*)?$")]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class BMCSpec(_Spec):
    """One BMC (or one Redfish aggregator) and the systems of it that belong to BigFleet."""

    address: Url  # the Redfish service's root, e.g. https://10.1.2.3 (…/redfish/v1 is added)
    username: str | None = None
    password: str | None = None
    password_file: str | None = None  # read at start; wins over `password`
    verify_tls: bool = True
    ca_path: str | None = None  # a CA bundle to verify the BMC with (implies verify_tls)
    systems: list[Name] = Field(default_factory=list)  # system ids; empty: every system listed
    rack: Name
    zone: Name
    region: Name | None = None  # default: the zone without its last part (ams-1 -> ams)
    instance_type: Name
    price_per_hour: Dollars = 0.0  # owned hardware: 0, or an amortised cost
    resources: Resources = Resources()
    arch: Name = "amd64"
    # Its systems are another autoscaler's for now: listed with `bigfleet.io/unmanaged: "true"`,
    # so BigFleet leaves them alone (bigfleet/cluster_modes.py) until this is taken off.
    unmanaged: bool = False

    @model_validator(mode="after")
    def _one_password(self) -> BMCSpec:
        if self.password is not None and self.password_file is not None:
            raise ValueError("password and password_file: give one or neither")
        return self


class RedfishConfig(_Spec):
    """A Redfish provider: its BMCs, its state file, and how configured machines boot."""

    name: Name
    bmcs: Annotated[list[BMCSpec], Field(min_length=1)]
    state_path: str  # JSON file: claims, clusters, drains, fencing epochs, seen systems
    boot_method: Literal["virtual-media", "pxe"] = "virtual-media"
    media_dir: str | None = None  # where the NoCloud seeds are written (required: _media)
    media_url: Url | None = None  # how the BMCs (or the PXE server's clients) reach media_dir
    configure_timeout_seconds: Seconds = 900.0  # power-on must be seen within this
    power_off_seconds: Seconds = 300.0  # graceful shutdown, then ForceOff
    connect_timeout_seconds: Seconds = 3.0
    read_timeout_seconds: Seconds = 15.0
    bmc_retry_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 10.0

    @model_validator(mode="after")
    def _media(self) -> RedfishConfig:
        # Every configure publishes a seed; without media_dir the blob would go nowhere.
        if self.boot_method == "virtual-media" and not (self.media_dir and self.media_url):
            raise ValueError(
                "boot_method virtual-media needs media_dir and media_url "
                "(the cidata ISO the BMCs insert is written to media_dir, fetched from media_url)"
            )
        if self.boot_method == "pxe" and not self.media_dir:
            raise ValueError(
                "boot_method pxe needs media_dir (the nocloud-net seed, "
                "{media_dir}/{machine id}/user-data and meta-data, is written there for the "
                "PXE/HTTP boot server to serve)"
            )
        return self

    @classmethod
    def load(cls, path: str | pathlib.Path) -> RedfishConfig:
        """A Redfish provider's YAML config file; ValueError naming the file and every bad field."""
        return load_model(pathlib.Path(path), cls, "Redfish provider config", ValueError)
