"""BigFleet's core, with no Temporal import (tests/test_layering.py): it runs alike inside a
workflow sandbox, the simulator and the benchmarks.

Most of it is pure: what decides (the shards, bigfleet/engine/, the models, the simulated
providers of bigfleet/providers/simulated/) reads and writes nothing but memory. The edges do
I/O and are never called from a workflow: the provider backends that talk to real systems
(bigfleet/providers/ec2/ calls AWS; bigfleet/providers/redfish/ calls BMCs and writes its state
file and NoCloud seeds), and the gRPC edges of bigfleet/edge/ (the provider server that serves
such a backend, with its SQLite store; the client that reaches it). Under Temporal, providers
are called only from activities (activities/providers.py): in process for a simulated fleet,
over gRPC otherwise; the simulator calls its simulated ones directly.
"""
