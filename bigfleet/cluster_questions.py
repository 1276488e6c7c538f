"""What a shard or a roll-up sender asks the coordinator about new clusters, and its answers
(design §16: a cluster's shard is chosen on first contact); `Coordinator.owners` and
`Coordinator.assign` answer them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import Field

from .models import CapacityNeed, NodeSelectorRequirement, Wire

ClusterName = Annotated[str, Field(min_length=1, max_length=253)]

# Clusters a shard asks about at once (`ClusterQuestion`): roll-ups of clusters it does not
# serve yet wait for the answer, at most this many (workflows/new_clusters.py): a fleet's
# first roll-ups reach a shard at most this many new clusters a cycle, the rest when their
# operators send again.
MAX_ASKED = 250
NO_SHARD = -1  # `owners`: a cluster the map has no room for is nobody's


# A new cluster's needs its assignment looks at (`pooling/holdings.py`), at most: its first
# WANTS needs of at most WANT_RULES requirements each.
WANTS, WANT_RULES = 4, 16
Want = Annotated[list[NodeSelectorRequirement], Field(max_length=WANT_RULES)]


class ClusterQuestion(Wire):
    """A shard that got roll-ups of clusters it does not serve yet asks whose they are; with
    the clusters' needs' requirements (`wants`), where their capacity is can count."""

    shard: int = Field(ge=0)
    clusters: list[ClusterName] = Field(min_length=1, max_length=MAX_ASKED)
    wants: dict[str, Annotated[list[Want], Field(max_length=WANTS)]] = Field(
        default_factory=dict, max_length=MAX_ASKED
    )


class ClusterAsk(Wire):
    """A roll-up sender's first question (`assign_cluster`): the cluster, and its needs'
    requirements (`wants`). A bare cluster name asks the same with none."""

    cluster: ClusterName
    wants: list[Want] = Field(default_factory=list, max_length=WANTS)


def wants_of(needs: Iterable[CapacityNeed]) -> list[list[NodeSelectorRequirement]]:
    """What `ClusterQuestion.wants` and `ClusterAsk.wants` carry for a roll-up's needs: the
    highest priorities' first, each within the bounds (a need past WANT_RULES is left out, and
    one asking for no machine)."""
    ranked = sorted((n for n in needs if n.count > 0), key=lambda n: -n.priority)
    return [list(n.requirements) for n in ranked if len(n.requirements) <= WANT_RULES][:WANTS]


class ClusterOwners(Wire):
    """The answer a shard gets (activities/coordination.py): the shard each cluster is assigned
    to, and the clusters refused before the coordinator was asked (the deployment has no
    operator endpoint for them). `running` False: no coordinator runs, nobody was asked."""

    running: bool
    owners: dict[str, int] = Field(default_factory=dict)
    refused: dict[str, str] = Field(default_factory=dict)


# What `assign_cluster` takes: a bare cluster name (senders before issue 45), or a ClusterAsk.
AssignArgument = ClusterName | ClusterAsk


def asked(arg: str | ClusterAsk) -> ClusterAsk:
    """`assign_cluster`'s argument as a ClusterAsk."""
    return arg if isinstance(arg, ClusterAsk) else ClusterAsk(cluster=arg)
