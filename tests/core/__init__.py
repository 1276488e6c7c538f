"""Tests of the rest of the pure core: shards, coordinator planning, snapshots, input checks."""
