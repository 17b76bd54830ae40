"""The packages import one way: no cycle between auditor's packages (or top-level modules), counting
imports inside functions too, so the floors stay visible (dtypes, units, lengths, layer_ranges at the
bottom; engines below memory and runtime; perf, serving, planner, align and the renderers above)."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "auditor"


def _unit(mod: str) -> str | None:
    """The package (or top-level module) a dotted auditor module belongs to."""
    parts = mod.split(".")
    if parts[0] != "auditor" or len(parts) == 1:
        return None
    return parts[1] if (ROOT / parts[1]).is_dir() else parts[1] + ".py"


def _edges() -> dict[str, dict[str, list[str]]]:
    edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        pkg = parts[:-1]
        src = _unit(".".join(parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = pkg[: len(pkg) - node.level + 1] if node.level else []
                mods = [".".join(base + ([node.module] if node.module else []))]
            else:
                continue
            for m in mods:
                dst = _unit(m)
                if dst and src and dst != src:
                    edges[src][dst].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return edges


def _cycles(edges) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    nodes = set(edges) | {d for v in edges.values() for d in v}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, {}))))]
        index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1; stack.append(w); on.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop(); on.discard(x); comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b": ["x"]}, "b": {"a": ["y"]}, "c": {"a": ["z"]}}) == [["a", "b"]]


def test_no_import_cycle_between_packages():
    edges = _edges()
    found = _cycles(edges)
    where = [f"{a} -> {b}: {edges[a][b][:3]}" for comp in found for a in comp for b in comp if b in edges[a]]
    assert found == [], where
