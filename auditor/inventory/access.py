"""Can we read the model directory at all? Checked before the scan, so a directory we may not
list is never mistaken for a config-only one, and an unreadable shard is named, not skipped."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import AuditInputError

OPTIONAL_DIR = "optional"
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC     # never blocks on a FIFO; reads nothing


def _names(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except PermissionError as exc:
        raise AuditInputError(directory, f"cannot list the model directory: {exc.strerror}") from None


def _check_open(path: Path) -> None:
    try:
        fd = os.open(path, _READ_FLAGS)
    except PermissionError as exc:
        raise AuditInputError(path, f"cannot read: {exc.strerror}") from None
    except OSError:
        return          # missing, dangling, a loop...: the readers word these themselves
    os.close(fd)


def check_model_dir_access(model_dir: Path) -> None:
    """One AuditInputError for the first thing we may not read: the directory listing, then (in
    sorted order) config.json, every *.json and *.safetensors file, and optional/."""
    model_dir = Path(model_dir)
    names = _names(model_dir)
    for name in names:
        if name.endswith((".safetensors", ".json")):
            _check_open(model_dir / name)
    if OPTIONAL_DIR in names and (model_dir / OPTIONAL_DIR).is_dir():
        for name in _names(model_dir / OPTIONAL_DIR):
            if name.endswith(".safetensors"):
                _check_open(model_dir / OPTIONAL_DIR / name)
