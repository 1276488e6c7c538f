"""`python -m workers.dev ARGS`: `bigfleet dev ARGS`, with unbuffered output."""

import os
import sys

from workers.cli import main

if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(["dev", *sys.argv[1:]]))
