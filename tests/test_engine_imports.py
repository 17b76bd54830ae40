"""The engine seam holds in the import graph: no generic module imports an engine family's folder.

Everything an engine decides is reached through the Engine object (``engines/base.py``) that the
registry resolves; a second family is a sibling folder. Read from the source with ``ast`` (nothing
is imported or run)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "auditor"
FAMILY_DIRS = sorted(p.name for p in (ROOT / "engines").iterdir() if p.is_dir() and (p / "__init__.py").exists())


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute dotted module) of every import in ``path``."""
    rel = path.relative_to(ROOT.parent).with_suffix("")
    pkg = list(rel.parts[:-1]) if rel.name != "__init__" else list(rel.parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = pkg[: len(pkg) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
    return out


def test_there_is_at_least_one_family_folder():
    assert "vllm_ascend" in FAMILY_DIRS


def test_no_generic_module_imports_a_family_folder():
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "engines" and len(rel.parts) > 2 and rel.parts[1] in FAMILY_DIRS:
            continue                      # a family's own modules
        for line, mod in _imports(path):
            parts = mod.split(".")
            if len(parts) >= 3 and parts[:2] == ["auditor", "engines"] and parts[2] in FAMILY_DIRS:
                offenders.append(f"{rel}:{line} imports {mod}")
    assert offenders == []


def test_families_do_not_import_each_other():
    offenders = []
    for fam in FAMILY_DIRS:
        for path in sorted((ROOT / "engines" / fam).rglob("*.py")):
            for line, mod in _imports(path):
                parts = mod.split(".")
                if len(parts) >= 3 and parts[:2] == ["auditor", "engines"] and parts[2] in FAMILY_DIRS \
                        and parts[2] != fam:
                    offenders.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
    assert offenders == []
