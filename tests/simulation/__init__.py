"""Tests of simulated providers and operators, the simulator, trace replay."""
