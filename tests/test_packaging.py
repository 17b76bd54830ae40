"""What `pip install .` (not editable) ships: every package of the tree and its data files.

An editable install finds any directory on the path, so a package missing from pyproject's list
would only break the README's quick start on a fresh machine."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = (ROOT / "pyproject.toml").read_text()


def _listed() -> set[str]:
    block = re.search(r"^packages = \[(.*?)\]", PYPROJECT, re.M | re.S).group(1)
    return set(re.findall(r'"([^"]+)"', block))


def test_every_package_directory_is_listed():
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "auditor").rglob("__init__.py")}
    on_disk.add("auditor_kernels")                       # kernels/ is installed under this name
    assert (ROOT / "kernels" / "__init__.py").is_file()
    assert on_disk == _listed()


def test_package_data_names_files_that_exist():
    block = re.search(r"\[tool\.setuptools\.package-data\](.*?)(^\[|\Z)", PYPROJECT, re.M | re.S).group(1)
    for pattern in re.findall(r'"([^"]+)"', block):
        assert list((ROOT / "auditor").glob(pattern)), f"package-data pattern {pattern!r} matches nothing"
