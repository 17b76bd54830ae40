"""`audit inventory`: what the checkpoint stores, classified (no engine, no parallel plan)."""
from __future__ import annotations

import csv
import io

import numpy as np
import orjson
from tabulate import tabulate

from ..inventory.progress import ProgressLine
from ..model.classify import ClassifiedTable
from ..model.names import BLOCKS
from ..source import ModelSource
from .findings import findings_section, group_findings
from .inventory_tensors import TensorRows
from ..units import Unit, human


def _group(keys: np.ndarray, nbytes: np.ndarray) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    uniq, inv = np.unique(keys.astype(str), return_inverse=True)
    counts = np.bincount(inv, minlength=len(uniq))
    sums = np.bincount(inv, weights=nbytes, minlength=len(uniq))
    for i, k in enumerate(uniq):
        out[str(k)] = {"count": int(counts[i]), "bytes": int(sums[i])}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["bytes"]))


def inventory_report(src: ModelSource, ct: ClassifiedTable, by: str = "summary") -> dict:
    t = ct.table
    loaded = t.loaded
    files = []
    if len(t):
        fc = np.bincount(t.file, minlength=len(t.files))
        fb = np.bincount(t.file, weights=t.nbytes, minlength=len(t.files))
        files = [{"file": f, "tensors": int(fc[i]), "bytes": int(fb[i]),
                  "loaded": bool(loaded[t.file == i].all()) if fc[i] else True} for i, f in enumerate(t.files)]
    findings = [f.to_dict() for f in list(src.findings) + ct.findings]
    rep = {
        "schema": 1, "tool": "audit inventory",
        "model": {"name": src.spec.name, "source": src.kind, "path": src.label, "recipe": src.recipe,
                  "synthesized": src.synthesized, "structure": src.spec.structure_summary()},
        "tensors": int(len(t)), "bytes": int(t.nbytes.sum()),
        "loaded": {"tensors": int(loaded.sum()), "bytes": int(t.nbytes[loaded].sum())},
        "by_category": ct.summary(),
        "by_kind": _group(ct.kind, t.nbytes),
        "by_block": _group(np.asarray(BLOCKS)[ct.addr.block], t.nbytes),
        "by_dtype": _group(t.dtype, t.nbytes),
        "by_scheme": _group(np.where(ct.scheme == "", "-", ct.scheme), t.nbytes),
        "files": files,
        "quant_description": str(src.desc.path) if src.desc is not None else None,
        "findings": findings,
        "finding_groups": group_findings(findings),
    }
    if by == "tensor":
        rep["tensor_rows"] = TensorRows(ct)
    return rep


def _rows(rep: dict) -> TensorRows:
    rows = rep["tensor_rows"]
    if not isinstance(rows, TensorRows):
        raise TypeError("tensor_rows must come from inventory_report (columns), not from JSON")
    return rows


def inventory_json(rep: dict) -> str:
    """The JSON document: ``tensor_rows`` becomes the list of per-tensor dicts here, and only here."""
    doc = dict(rep)
    if isinstance(doc.get("tensor_rows"), TensorRows):
        doc["tensor_rows"] = doc["tensor_rows"].to_list()
    # orjson: the same text as json.dumps(indent=2) for this document (ASCII names, no floats),
    # 0.4 s instead of 6.5 s for 177,000 tensor rows
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2, default=str).decode("utf-8") + "\n"


def render_inventory(rep: dict, fmt: str, progress: bool = False) -> str:
    """Text, markdown or CSV; ``progress`` shows a stderr line while the per-tensor table is laid out."""
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        if "tensor_rows" in rep:
            return _rows(rep).csv_rows()
        else:
            w.writerow(["group", "key", "count", "bytes"])
            for group in ("by_category", "by_kind", "by_block", "by_dtype", "by_scheme"):
                for k, v in rep[group].items():
                    w.writerow([group[3:], k, v["count"], v["bytes"]])
        return buf.getvalue()
    tf = "github" if fmt == "markdown" else "simple"
    h = (lambda s: f"\n## {s}\n") if fmt == "markdown" else (lambda s: f"\n{s}\n{'-' * len(s)}")
    m = rep["model"]
    gib = Unit(rep["bytes"])
    title = f"audit inventory: {m['name']} ({m['source']})"
    out = [f"# {title}" if fmt == "markdown" else title]
    if m["synthesized"]:
        out.append("NOTE: no safetensors were read; the inventory is SYNTHESIZED from config.json structure "
                   f"(recipe {m['recipe']}).")
    out.append(f"structure: {'; '.join(m['structure'])}")
    out.append(f"{rep['tensors']} tensors, {human(rep['bytes'])} stored in {len(rep['files'])} files; "
               f"{rep['loaded']['tensors']} tensors / {human(rep['loaded']['bytes'])} loaded by the engine")
    out.append(h("By category"))
    out.append(tabulate([[c, v["count"], gib(v["bytes"])] for c, v in rep["by_category"].items()],
                        ["category", "tensors", gib.name], tablefmt=tf, disable_numparse=True))
    for key, title in (("by_kind", "By kind"), ("by_block", "By block"), ("by_dtype", "By stored dtype"),
                       ("by_scheme", "By scheme (quant description)")):
        out.append(h(title))
        out.append(tabulate([[k, v["count"], gib(v["bytes"])] for k, v in rep[key].items()],
                            [key[3:], "tensors", gib.name], tablefmt=tf, disable_numparse=True))
    if "tensor_rows" in rep:
        out.append(h("Tensors"))
        rows = _rows(rep)
        with ProgressLine(len(rows), "formatting tensor rows", enabled=progress, unit="rows") as bar:
            out.append(rows.table(fmt, on_rows=lambda n: bar.update(step=n)))
    out.extend(findings_section(rep, h, tf))
    return "\n".join(out) + "\n"
