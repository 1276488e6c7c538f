"""Durable orchestration on Temporal: machine transitions and the shard's decision loop.

Kept light: the sandbox re-imports this package for every workflow run.
"""
