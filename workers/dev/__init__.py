"""`bigfleet dev` and its processes: the launcher (launcher.py), the Temporal dev server
(server.py), the provider, gateway and operator subprocesses (processes.py), the dev fleet's
roll-up timelines (operators.py) and the progress lines (progress.py).

`python -m workers.dev ARGS` is `bigfleet dev ARGS` (see __main__.py).
"""
