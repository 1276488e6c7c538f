"""An EC2 provider's settings: its account-region, its offerings (the quota lines shown as
speculative machines) and how its instances are launched, loaded from an operator's YAML file."""

from __future__ import annotations

import pathlib
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...models import Dollars, Name, Probability, Resources
from ...yamlfile import load_model
from ..base import MAX_CREATE_BATCH


def load_config(path: str | pathlib.Path) -> Ec2Config:
    """An EC2 provider's YAML config file; ValueError naming the file and every bad field."""
    return load_model(pathlib.Path(path), Ec2Config, "EC2 provider config", ValueError)


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Ec2Offering(_Spec):
    """One quota line: `count` instances of a type in a zone, on-demand or spot."""

    instance_type: Name
    zone: Name
    capacity_type: Literal["on-demand", "spot"]
    price_per_hour: Dollars
    interruption_probability: Probability = 0.0
    resources: Resources = Resources()
    arch: Name = "amd64"
    count: Annotated[int, Field(ge=0, le=100_000)]


class Ec2Config(_Spec):
    """An EC2 provider: an account-region, its offerings, and how its instances are launched."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$")]
    region: Name
    endpoint_url: str | None = None  # moto, or a VPC endpoint
    offerings: list[Ec2Offering] = Field(min_length=1)
    image_id: Name
    subnets: dict[str, str] = Field(default_factory=dict)  # zone -> subnet id
    security_groups: list[str] = Field(default_factory=list)
    key_name: str | None = None
    instance_profile_arn: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)  # added to every instance
    ice_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 180.0
    max_batch: Annotated[int, Field(ge=1, le=MAX_CREATE_BATCH)] = MAX_CREATE_BATCH
    account_limit: bool = False  # cap the provider's slots by the account's max-instances
    # Refresh spot prices from the spot price history this often (on List); none: the config's.
    spot_price_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    sdk_max_attempts: Annotated[int, Field(ge=1, le=10)] = 2
    backoff_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    backoff_cap_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 60.0
    # The SQS queue EventBridge puts EC2's interruption and maintenance events in (issue 33).
    interruption_queue_url: Annotated[str, Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _distinct(self) -> Ec2Config:
        keys = [(o.instance_type, o.zone, o.capacity_type) for o in self.offerings]
        if len(set(keys)) != len(keys):
            raise ValueError("offerings: two lines for the same instance type, zone and capacity")
        return self
