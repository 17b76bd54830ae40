"""Errors that the CLI turns into one clear line and exit code 2 (never a traceback)."""
from __future__ import annotations

from pathlib import Path


#: characters of one error line; a longer problem (a value from a hostile file quoted whole) is cut in the middle
MAX_ERROR_CHARS = 1000


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
        text = " ".join(text.split())
        if len(text) > MAX_ERROR_CHARS:
            text = f"{text[:MAX_ERROR_CHARS - 200]} ... ({len(text) - MAX_ERROR_CHARS + 100:,} characters cut) ... " \
                   f"{text[-100:]}"
        return text

