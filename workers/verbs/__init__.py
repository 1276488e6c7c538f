"""The `bigfleet` verbs of workers/, one module per verb family, named for it. Each has a
`register(verbs)` that adds its subcommands (with `run=` their handlers) to argparse;
workers/cli.py's table names the module of each verb and imports it only when that verb is
chosen, so a module may import Temporal, gRPC or pydantic at its top.
"""
