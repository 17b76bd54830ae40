"""What a hub says a repository holds at one revision."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Snapshot:
    commit: str              # what the cache is keyed by: the HF commit sha, a ModelScope listing digest
    files: dict[str, int]    # every file of the repository: path -> size in bytes
    url_rev: str             # the revision file URLs name (HF: the sha; ModelScope: the revision asked for)
