"""BigFleet's benchmarks against Temporal: `bigfleet bench temporal` (temporal.py), `bigfleet
bench fleet` (fleet*.py) and `python -m workers.bench.history` (history.py). The engine and
snapshot benchmarks, which need no server, are in bigfleet/.
"""
