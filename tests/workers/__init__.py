"""Tests of the command line, the compose file, the deploy/ rules."""
