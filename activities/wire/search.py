"""Typed search attributes: what BigFleet's workflows are found by in Temporal (the UI, `bigfleet
machine history`); `bigfleet dev` and a deployment register SEARCH_ATTRIBUTES."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

# Typed search attributes: a machine's whole life is `BigFleetMachineIds = "m-…"` in the UI.
MACHINE_IDS = SearchAttributeKey.for_keyword_list("BigFleetMachineIds")
SHARD = SearchAttributeKey.for_keyword("BigFleetShard")
CLUSTER = SearchAttributeKey.for_keyword("BigFleetCluster")
PROVIDER = SearchAttributeKey.for_keyword("BigFleetProvider")
TRANSITION = SearchAttributeKey.for_keyword("BigFleetTransition")
RESULT_STATE = SearchAttributeKey.for_keyword("BigFleetState")
SEARCH_ATTRIBUTES = (MACHINE_IDS, SHARD, CLUSTER, PROVIDER, TRANSITION, RESULT_STATE)
