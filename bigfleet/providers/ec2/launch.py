"""Create's launch: one RunInstances per offering of a batch, tagged with the provider, shard,
epoch and a batch tag (EC2's ClientToken too), then one CreateTags per instance naming its
machine; a retry finds the batch by its tag and names the instances still unnamed."""

from __future__ import annotations

import builtins
import uuid
from typing import Any

from ...models import FencingToken, MachineState
from ..base import InvalidTransition, ProviderError, QuotaExhausted
from .api import (
    LIVE_STATES,
    T_BATCH,
    T_EPOCH,
    T_MACHINE,
    T_PROVIDER,
    T_SHARD,
    NoCapacity,
    client_token,
)
from .records import Offering, Record, instance_tags
from .steps import Ec2Steps

S = MachineState


class Ec2Launch(Ec2Steps):
    """Launches the missing machines of a create and names them."""

    def _missing(self, ids: builtins.list[str], records: dict[str, Record]) -> builtins.list[str]:
        """The machines of a create still to launch. Already made (a repeat, or made by an
        earlier attempt of this batch): nothing to do, unless the machine is in a state create
        cannot come from."""
        missing = []
        for machine_id in ids:
            record = records.get(machine_id)
            if record is None:
                missing.append(machine_id)
                continue
            state, _ = self._state_of(record)
            if state is S.SPECULATIVE:
                missing.append(machine_id)
            elif state is not S.CREATING and state is not S.IDLE:
                raise InvalidTransition(self.name, machine_id, state, "create")
        return missing

    def _create_group(
        self,
        offering: Offering,
        ids: builtins.list[str],
        missing: builtins.list[str],
        records: dict[str, Record],
        token: FencingToken,
        key: str,
    ) -> None:
        batch = client_token(self.name, key, offering.key, *ids) if key else uuid.uuid4().hex
        # An earlier attempt with this key may have launched instances and not named them all.
        launched = [
            i
            for i in self._describe([offering], [{"Name": f"tag:{T_BATCH}", "Values": [batch]}])
            if i["State"]["Name"] in LIVE_STATES
        ]
        unnamed = [i for i in launched if T_MACHINE not in instance_tags(i)]
        if not launched:
            unnamed = self._run_instances(offering, missing, batch, token)
        unnamed.sort(key=lambda i: (i.get("AmiLaunchIndex", 0), i["InstanceId"]))
        for machine_id, instance in zip(missing, unnamed, strict=False):
            tags = {T_MACHINE: machine_id}
            self._call(
                "CreateTags",
                self.client.create_tags,
                Resources=[instance["InstanceId"]],
                Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
            )
            instance = {
                **instance,
                "Tags": [*instance.get("Tags", []), {"Key": T_MACHINE, "Value": machine_id}],
            }
            _, index = self._parse(machine_id)
            record = Record(machine_id, offering, index, instance, instance_tags(instance))
            records[machine_id] = record
            self._recent[machine_id] = (self._clock(), record)
        left = [
            m for m in missing if m not in records or self._state_of(records[m])[0] is S.SPECULATIVE
        ]
        if left:
            raise ProviderError(
                self.name,
                f"provider {self.name}: batch {batch} launched too few instances for "
                f"{', '.join(left)}; retry the create",
            )

    def _run_instances(
        self, offering: Offering, ids: builtins.list[str], batch: str, token: FencingToken
    ) -> builtins.list[dict[str, Any]]:
        spec, cfg, n = offering.spec, self.config, len(ids)
        tags = {
            **cfg.tags,
            T_PROVIDER: self.name,
            T_SHARD: str(token.shard_id),
            T_EPOCH: str(token.shard_epoch),
            T_BATCH: batch,
        }
        kwargs: dict[str, Any] = {
            "ImageId": cfg.image_id,
            "InstanceType": spec.instance_type,
            "MinCount": n,
            "MaxCount": n,
            "ClientToken": batch,
            "TagSpecifications": [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        }
        subnet = cfg.subnets.get(spec.zone)
        if subnet:
            kwargs["SubnetId"] = subnet
        else:
            kwargs["Placement"] = {"AvailabilityZone": spec.zone}
        if cfg.security_groups:
            kwargs["SecurityGroupIds"] = list(cfg.security_groups)
        if cfg.key_name:
            kwargs["KeyName"] = cfg.key_name
        if cfg.instance_profile_arn:
            kwargs["IamInstanceProfile"] = {"Arn": cfg.instance_profile_arn}
        if spec.capacity_type == "spot":
            # Persistent, stopped when interrupted: the only spot instances EC2 lets BigFleet
            # stop (Configure, Drain). The request is tagged too, so IAM can scope its cancel.
            kwargs["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {
                    "SpotInstanceType": "persistent",
                    "InstanceInterruptionBehavior": "stop",
                },
            }
            kwargs["TagSpecifications"].append(
                {
                    "ResourceType": "spot-instances-request",
                    "Tags": [{"Key": T_PROVIDER, "Value": self.name}],
                }
            )
        try:
            reply = self._call("RunInstances", self.client.run_instances, **kwargs)
        except NoCapacity as err:
            self._unavailable[offering.key] = self._clock() + cfg.ice_seconds
            raise QuotaExhausted(self.name, ids[0], offering.key) from err
        return list(reply.get("Instances", []))
