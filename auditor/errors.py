"""Errors that the CLI turns into one clear line and exit code 2 (never a traceback)."""
from __future__ import annotations

from pathlib import Path


class AuditInputError(Exception):
    """Bad user input: a malformed file, a missing key, an impossible option.

    Always names the file (or option) and the problem, so the CLI can print
    ``audit: <path>: <problem>`` and exit 2.
    """

    def __init__(self, where: str | Path | None, problem: str):
        self.where = str(where) if where is not None else None
        self.problem = problem
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = f"{self.where}: {self.problem}" if self.where else self.problem
        return " ".join(text.split())
