"""Tests of the decision engine: bigfleet/engine/, the reference engine, the worked examples."""
