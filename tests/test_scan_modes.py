"""The fast scan path is an accelerator only: with AUDIT_EXACT=1 every accelerator declines and
the exact readers alone must give byte-identical reports on a full-size checkpoint."""
from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path

import pytest

import auditor.inventory.fast as fast
from auditor.cli import main
from auditor.synth import synthesize

PLAN = ["--tp", "16", "--dp", "2", "--ep", "32", "--sp"]
# the accelerators a full msModelSlim checkpoint must exercise (headers, index, description, names)
EXPECTED_ANSWERS = {"shards.parsed_files", "index.read_index", "quantdesc.span_description",
                    "names.mask_groups"}


@pytest.fixture(scope="module")
def glm51(tmp_path_factory) -> Path:
    """GLM-5.1 W8A8 as msModelSlim writes it: 151 files, 177,102 tensors, ~50 MiB of sparse files."""
    out = tmp_path_factory.mktemp("modes") / "glm51-w8a8"
    synthesize(out, model="glm-5.1", recipe="w8a8")
    return out


def _report(args: list[str], out: Path) -> dict:
    assert main(args + ["--format", "json", "-o", str(out), "--no-progress"]) == 0
    return json.loads(out.read_text())


def _all_accelerators() -> list:
    found = []
    for info in pkgutil.iter_modules(fast.__path__):
        mod = importlib.import_module(f"{fast.__name__}.{info.name}")
        found += [f for f in vars(mod).values() if getattr(f, "accelerator", False) and f.__module__ == mod.__name__]
    return found


@pytest.mark.parametrize("command", [["inventory"], ["memory", *PLAN, "--by", "all"]],
                         ids=["inventory", "memory"])
def test_exact_mode_gives_identical_reports(glm51: Path, command: list[str], tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(fast.EXACT_ENV, raising=False)
    fast.ANSWERED.clear()
    quick = _report([command[0], str(glm51), *command[1:]], tmp_path / "fast.json")
    assert EXPECTED_ANSWERS <= set(fast.ANSWERED), fast.ANSWERED    # the fast mode was fast
    monkeypatch.setenv(fast.EXACT_ENV, "1")
    fast.ANSWERED.clear()
    exact = _report([command[0], str(glm51), *command[1:]], tmp_path / "exact.json")
    assert not fast.ANSWERED                                        # and the exact one exact
    assert quick == exact
    assert (quick.get("inventory") or quick)["tensors"] == 177102   # a full checkpoint was compared


def test_every_accelerator_declines_in_exact_mode(monkeypatch) -> None:
    accelerators = _all_accelerators()
    names = {f.__qualname__ for f in accelerators}
    assert EXPECTED_ANSWERS | {"jsonspans.parse_index", "names.proven_distinct"} <= names
    monkeypatch.setenv(fast.EXACT_ENV, "1")
    for f in accelerators:
        assert f() is None, f.__qualname__       # declines before it even looks at its arguments
    monkeypatch.setenv(fast.EXACT_ENV, "0")
    assert not fast.exact_only()


def _columns(model_dir: Path) -> dict:
    from auditor.inventory.scan import scan_model_dir
    from auditor.model.names import parse_names
    res = scan_model_dir(model_dir, progress=False)
    t = res.table
    addr = parse_names(t.name_spans)
    return {"files": t.files, "name": t.name.tolist(), "file": t.file.tolist(), "dtype": t.dtype.tolist(),
            "ndim": t.ndim.tolist(), "shape": t.shape.tolist(), "begin": t.begin.tolist(), "end": t.end.tolist(),
            "loaded": t.loaded.tolist(), "findings": res.index_findings, "layer": addr.layer.tolist(),
            "expert": addr.expert.tolist(), "module": addr.module.tolist(), "suffix": addr.suffix.tolist()}


def test_exact_mode_gives_identical_tables(glm51: Path, monkeypatch) -> None:
    """Every column of every row (what ``inventory --by tensor`` prints), both ways."""
    monkeypatch.delenv(fast.EXACT_ENV, raising=False)
    quick = _columns(glm51)
    monkeypatch.setenv(fast.EXACT_ENV, "1")
    assert _columns(glm51) == quick
    assert len(quick["name"]) == 177102
