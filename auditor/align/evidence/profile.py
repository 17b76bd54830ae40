"""Ascend profiler reader: measured kernel time per op class and per layer.

Files (research kernel-types.md §2): torch_npu's ``kernel_details.csv``
(``<dir>_ascend_pt/ASCEND_PROFILER_OUTPUT/``), msprof's ``op_summary_*.csv`` (same rows, msprof column
names: ``OP Type``, ``Op Name``, ``Task Duration(us)``, ``Task Start Time(us)``, ``Task Type``) and
``op_statistic*.csv`` (one row per Type: ``OP Type``, ``Count``, ``Total Time(us)``; no order, so no
layers). ``Block Dim`` and its newer name ``Block Num`` are both accepted (torch_npu commit 48596093).

Rows: ``N/A`` or blank fields are read (communication rows carry ``N/A`` shapes and OP State, AICPU rows
``N/A`` block dims: DOC field table, msmodeling parse_kernel_details.py:289-291); a row whose duration is
``N/A`` is counted as skipped, never an error. Every number is range-checked (durations 0..1e12 us,
dims 0..2^40, Device_id 0..65535); a malformed one is one error naming file and line.

Ranks (§2.4): ``profiler_info_{rank}.json`` (``rank_id``) next to the file or one or two levels up, else
a ``rank{r}`` field of a ``*_ascend_pt`` directory name (vLLM-Ascend's worker_name
``dp{d}_pp{p}_tp{t}_dcp{c}_ep{e}_rank{r}``, V18 vllm/distributed/utils.py:594-626), else (file,
``Device_id``): ``Device_id`` is the local chip id and repeats on every node, so two files are never
folded into one rank by it; ranks then follow file order and the ticket says so.

Classes (``auditor.engines.vllm_ascend.profiler``): Type, else Name, to an op class, a composite class
(``moe_fused``, ``mla_preprocess``, ...), "ignore: why" (listed, not fitted) or None (unmapped, listed).

Layers: the attention kernel (SFA / FIA / ring-MLA, not AttentionUpdate) anchors each decoder layer;
the layer starts ``norms_before_anchor`` norm kernels before it (input, q_a and kv_a norms; MLAPO's
``mla_preprocess`` holds the q_a and kv_a norms and counts two, the W8A8 ``AddRmsNormDynamicQuant``
and ``KvRmsNormRopeCache`` count one). Kernels before the first layer or after the last are outside.
"""
from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import AuditInputError
from ...inputs import PROFILE_CAP, csv_header, load_json, parse_number

MAX_US = 1e12                 # one kernel's duration or start time, in us (11.6 days)
MAX_DIM = 1 << 40
MAX_ROWS = 20_000_000

#: our column -> the names the tools use for it (kernel_details first, then msprof op_summary)
COLUMNS: dict[str, tuple[str, ...]] = {
    "Type": ("Type", "OP Type", "Op Type"),
    "Name": ("Name", "Op Name", "OP Name"),
    "Duration(us)": ("Duration(us)", "Task Duration(us)"),
    "Start Time(us)": ("Start Time(us)", "Task Start Time(us)"),
    "Accelerator Core": ("Accelerator Core", "Task Type", "Core Type"),
    "Block Dim": ("Block Dim", "Block Num"),
    "Input Shapes": ("Input Shapes",),
    "Device_id": ("Device_id", "Device ID"),
    "Count": ("Count",),
    "Total Time(us)": ("Total Time(us)",),
}
NA = ("", "N/A", "NA", "n/a", "-")


@dataclass
class Kernel:
    rank: int
    name: str
    type: str
    start_us: float
    duration_us: float
    shapes: str
    cls: str | None
    layer: int | None = None
    anchor: bool = False


@dataclass
class ProfileEvidence:
    files: list[str]
    kernels: list[Kernel]
    ranks: list[int]
    steps: int                                   # forward passes seen (anchors / layers per pass)
    layers: int                                  # decoder layers found per pass
    by_class_us: dict[str, float] = field(default_factory=dict)         # mean over ranks, per step
    by_layer_class_us: dict[tuple[int, str], float] = field(default_factory=dict)
    unmapped: list[dict] = field(default_factory=list)                   # {type, count, total_us}
    ignored: list[dict] = field(default_factory=list)                    # {type, count, total_us, why}
    rank_source: dict[int, str] = field(default_factory=dict)            # rank -> where it came from
    rank_total_us: dict[int, float] = field(default_factory=dict)        # per step
    anchors_per_rank: dict[int, int] = field(default_factory=dict)
    skipped_rows: int = 0
    notes: list[str] = field(default_factory=list)
    aggregated: bool = False                     # op_statistic: no order, no layers

    def total_us(self) -> float:
        return sum(self.by_class_us.values())


def _rank_from_path(path: Path) -> tuple[int | None, str]:
    """(rank, how) from profiler_info_{rank}.json or a ``rank{r}`` field of an ``*_ascend_pt`` dir."""
    for d in list(path.parents)[:3]:
        try:
            infos = sorted(p for p in d.iterdir() if p.name.startswith("profiler_info") and p.name.endswith(".json"))
        except OSError:
            infos = []
        if len(infos) == 1:
            doc = load_json(infos[0], "profiler info", cap=1 << 20)
            r = doc.get("rank_id") if isinstance(doc, dict) else None
            if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 65_536:
                return r, f"{infos[0].name} rank_id"
            stem = infos[0].name[len("profiler_info"):-len(".json")].lstrip("_")
            if stem.isdigit() and stem.isascii() and len(stem) <= 5:
                return int(stem), infos[0].name
        if d.name.endswith("_ascend_pt"):
            for tok in d.name.split("_"):
                if tok.startswith("rank") and tok[4:].isdigit() and tok[4:].isascii() and len(tok) <= 9:
                    return int(tok[4:]), f"directory {d.name}"
    return None, ""


def _cell(row: list[str], idx: dict[str, int], col: str) -> str:
    i = idx.get(col)
    return row[i].strip() if i is not None and i < len(row) else ""


def _shapes(text: str, where: Path, at: str = "") -> list[tuple[int, ...]]:
    t = text.strip().strip('"').strip()
    if t in NA:
        return []
    out = []
    for slot in t.split(";"):
        slot = slot.strip()
        if not slot or slot in NA:
            out.append(())
            continue
        dims = []
        for d in slot.split(","):
            d = d.strip()
            if not (d.isascii() and d.isdigit() and len(d) <= 13):
                raise AuditInputError(where, f"{at}Input Shapes: bad dimension {d[:40]!r}")
            v = int(d)
            if v > MAX_DIM:
                raise AuditInputError(where, f"{at}Input Shapes: dimension {v} is over 2^40")
            dims.append(v)
        out.append(tuple(dims))
    return out


def _rows(path: Path, hidden: int | None, prof: Any) -> tuple[dict[int, list[Kernel]], int, bool]:
    """{Device_id: kernels} of one file, rows skipped (N/A duration), and whether it is an op_statistic."""
    header, reader = csv_header(path, "profile", PROFILE_CAP)
    idx: dict[str, int] = {}
    for ours, names in COLUMNS.items():
        for n in names:
            if n in header:
                idx[ours] = header.index(n)
                break
    stat = "Total Time(us)" in idx and "Count" in idx and "Duration(us)" not in idx
    need = ("Type", "Total Time(us)") if stat else ("Type", "Duration(us)")
    missing = [c for c in need if c not in idx]
    if missing:
        raise AuditInputError(path, "not a kernel_details.csv / op_summary / op_statistic CSV: missing column(s) "
                                    + ", ".join(" or ".join(COLUMNS[c]) for c in missing))
    out: dict[int, list[Kernel]] = defaultdict(list)
    skipped = n = 0
    try:
        for row in reader:
            n += 1
            line = reader.line_num
            where, at = path, f"line {line}: "
            if n > MAX_ROWS:
                raise AuditInputError(path, f"more than {MAX_ROWS:,} kernel rows")
            if not any(c.strip() for c in row):
                continue
            typ, name = _cell(row, idx, "Type"), _cell(row, idx, "Name")
            dev_t = _cell(row, idx, "Device_id")
            dev = 0 if dev_t in NA else int(parse_number(dev_t, where, at + "Device_id", lo=0, hi=65_535, integer=True))
            dur_t = _cell(row, idx, "Total Time(us)" if stat else "Duration(us)")
            if dur_t in NA:
                skipped += 1
                continue
            dur = parse_number(dur_t, where, at + "duration", lo=0, hi=MAX_US)
            start_t = _cell(row, idx, "Start Time(us)")
            start = float(n) if stat or start_t in NA else parse_number(start_t, where, at + "start time", lo=0, hi=1e18)
            shapes_t = _cell(row, idx, "Input Shapes")
            cls = prof.kernel_class(typ, name)
            if cls == "embedding" and "GatherV2" in (typ or name):
                cls = prof.gather_class(_shapes(shapes_t, where, at), hidden)
            else:
                _shapes(shapes_t, where, at)                 # validated either way
            out[dev].append(Kernel(-1, name, typ, start, dur, shapes_t, cls, anchor=prof.is_anchor(typ or name, cls)))
    except csv.Error as exc:
        raise AuditInputError(path, f"line {reader.line_num}: malformed CSV: {exc}") from None
    return out, skipped, stat


def assign_layers(kernels: list[Kernel], n_layers: int | None, norms_before_anchor: int = 3,
                  norm_weight: dict[str, float] | None = None) -> tuple[int, int]:
    """Set ``Kernel.layer`` for one rank's kernels (sorted by start); returns (layers, steps)."""
    anchors = [i for i, k in enumerate(kernels) if k.anchor]
    if not anchors:
        return 0, 1
    per_pass = n_layers if n_layers else len(anchors)
    steps = max(1, round(len(anchors) / per_pass)) if per_pass else 1
    starts: list[int] = []
    for a in anchors:
        j, seen, start = a - 1, 0, a
        lo = starts[-1] + 1 if starts else 0
        while j >= lo and seen < norms_before_anchor:
            w = (norm_weight or {}).get(kernels[j].cls or "", 0)
            if w:
                seen += w
                start = j
            j -= 1
        starts.append(start if seen >= norms_before_anchor else a)
    # a layer ends where the next begins; the last one at the period of the previous layer, so the
    # lm_head and final norm stay outside
    period = (starts[-1] - starts[-2]) if len(starts) > 1 else len(kernels) - starts[0]
    for n, s in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else min(len(kernels), s + period)
        layer = n % per_pass if per_pass else n
        for k in kernels[s:end]:
            k.layer = layer
    return min(per_pass, len(anchors)), steps


def read_profiles(paths: list[str | Path], n_layers: int | None = None, norms_before_anchor: int = 3,
                  hidden: int | None = None, engine: Any = None) -> ProfileEvidence:
    """Kernels of every file, ranks as the module docstring says; times per step, mean over ranks.
    ``engine``: whose profiler format the files are (its ``profiler`` module; default: the default
    engine family's)."""
    from ...engines.registry import DEFAULT_FAMILY, as_engine
    prof = as_engine(engine if engine is not None else DEFAULT_FAMILY + "@main").profiler
    notes: list[str] = []
    per_file = []
    skipped = 0
    any_stat = False
    for p in paths:
        path = Path(p)
        rows, sk, stat = _rows(path, hidden, prof)
        skipped += sk
        any_stat |= stat
        if not rows:
            raise AuditInputError(path, "profile has no kernel rows")
        rank, how = _rank_from_path(path)
        per_file.append((path, rows, rank, how))
    # global ranks: the profiler's own where every file names one, else (file, Device_id) in order
    by_rank: dict[int, list[Kernel]] = {}
    source: dict[int, str] = {}
    named = all(r is not None and len(rows) == 1 for _, rows, r, _ in per_file)
    if named:
        for path, rows, r, how in per_file:
            if r in by_rank:
                notes.append(f"{path}: rank {r} ({how}) is also named by {source[r]}; its kernels kept as a separate "
                             "rank")
                r = max(by_rank) + 1
            (ks,) = rows.values()
            by_rank[r], source[r] = ks, f"{path.name}: {how}"
    else:
        nxt = 0
        for path, rows, r, how in per_file:
            for dev in sorted(rows):
                by_rank[nxt], source[nxt] = rows[dev], f"{path.name}: Device_id {dev}"
                nxt += 1
        if len(per_file) > 1:
            notes.append("ranks from file order and Device_id (no profiler_info_{rank}.json or *_rank{r}_*_ascend_pt "
                         "directory names them): Device_id is the chip on its node, so which global rank each "
                         "file is stays ambiguous")
    if skipped:
        notes.append(f"{skipped} profile row(s) with an N/A duration skipped")
    kernels: list[Kernel] = []
    layers, steps = 0, 1
    anchors: dict[int, int] = {}
    for r, ks in by_rank.items():
        for k in ks:
            k.rank = r
        ks.sort(key=lambda k: k.start_us)
        anchors[r] = sum(k.anchor for k in ks)
        if not any_stat:
            layers, steps = assign_layers(ks, n_layers, norms_before_anchor, prof.NORM_WEIGHT)
        kernels += ks
    if any_stat:
        notes.append("op_statistic rows have no order: time per op class only, no layers, one step assumed")
    elif n_layers and anchors and any(a % n_layers for a in anchors.values()):
        odd = sorted({a for a in anchors.values()})
        notes.append(f"LAYER MISMATCH: {', '.join(map(str, odd))} attention kernel(s) per rank is not a multiple of "
                     f"the model's {n_layers} layers (an MTP layer, a partial step, or another model); per-layer "
                     "rows are approximate")
    nr = len(by_rank)
    by_class: dict[str, float] = defaultdict(float)
    by_layer: dict[tuple[int, str], float] = defaultdict(float)
    rank_total: dict[int, float] = defaultdict(float)
    unmapped: dict[str, list] = {}
    ignored: dict[str, list] = {}
    for k in kernels:
        if k.cls is None or k.cls.startswith("ignore"):
            d = unmapped if k.cls is None else ignored
            u = d.setdefault(k.type or k.name, [0, 0.0, k.cls])
            u[0] += 1
            u[1] += k.duration_us
            continue
        by_class[k.cls] += k.duration_us / nr / steps
        rank_total[k.rank] += k.duration_us / steps
        if k.layer is not None:
            by_layer[(k.layer, k.cls)] += k.duration_us / nr / steps
    un = sorted(({"type": t, "count": c, "total_us": us} for t, (c, us, _) in unmapped.items()),
                key=lambda d: (-d["total_us"], d["type"]))
    ig = sorted(({"type": t, "count": c, "total_us": us, "why": why.partition(": ")[2]}
                 for t, (c, us, why) in ignored.items()), key=lambda d: (-d["total_us"], d["type"]))
    return ProfileEvidence([str(p) for p in paths], kernels, sorted(by_rank), steps, layers, dict(by_class),
                           dict(by_layer), un, ig, source, dict(rank_total), anchors, skipped, notes, any_stat)
