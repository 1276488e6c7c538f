"""The one-line failure every `bigfleet` verb reports (`CliError`), importable without loading
Temporal."""

from __future__ import annotations


class CliError(Exception):
    """A failure to report in one line; `code` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code
