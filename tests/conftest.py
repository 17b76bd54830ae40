"""Shared test fixtures: generic helpers only (no test logic lives here)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_SKIP_REASON = "../shared not present (reference data lives beside the checkout)"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The read-only reference tree that CI places beside the checkout; skip when it is absent."""
    path = Path(__file__).resolve().parents[1].parent / "shared"
    if not path.is_dir():
        pytest.skip(SHARED_SKIP_REASON)
    return path


@pytest.fixture(scope="session")
def ckpts(shared_dir: Path) -> Path:
    """The real tiny checkpoints written by transformers and msModelSlim (see PROVENANCE.md)."""
    return shared_dir / "data" / "checkpoints"


def tree_snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    """{relative path: (kind, size, mtime_ns)} of everything under ``root`` (symlinks not followed).

    Used to prove a command wrote nothing into a directory it only had to read.
    """
    snap: dict[str, tuple[str, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            kind = "link" if os.path.islink(p) else "dir" if os.path.isdir(p) else "file"
            snap[os.path.relpath(p, root)] = (kind, st.st_size, st.st_mtime_ns)
    return snap


@pytest.fixture
def snapshot():
    """The ``tree_snapshot`` helper as a fixture."""
    return tree_snapshot
