"""What a hub says a repository holds at one revision."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..errors import AuditInputError

MAX_FILE_SIZE = 2 ** 50      # 1 PiB: a listed size beyond this is not a real file


@dataclass(frozen=True)
class Snapshot:
    commit: str              # what the cache is keyed by: the HF commit sha, a ModelScope listing digest
    files: dict[str, int]    # every file of the repository: path -> size in bytes
    url_rev: str             # the revision file URLs name (HF: the sha; ModelScope: the revision asked for)


def listed_files(pairs: Iterable[tuple[str, object]], where: str) -> dict[str, int]:
    """{path: size} from a hub's listing, refusing a size that is not a plausible byte count."""
    files: dict[str, int] = {}
    for path, size in pairs:
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_FILE_SIZE:
            raise AuditInputError(where, f"the repository listing gives {str(path)[:200]!r} the size "
                                         f"{str(size)[:40]!r}")
        files[str(path)] = size
    return files
