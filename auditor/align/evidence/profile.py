"""Ascend profiler ``kernel_details.csv`` reader: measured kernel time per op class and per layer.

One file per rank (several files = several ranks), or one file holding several ranks in a
``Device_id`` column. Columns used: ``Type``, ``Duration(us)`` (required), ``Name``, ``Start Time(us)``,
``Input Shapes`` (optional; shapes are read with the kernel-table importer's ``parse_shapes``).

Mapping (data, ``KERNEL_CLASSES``): a kernel's Type (else its Name) maps to one of our perf op
classes (``linear``, ``bmm``, ``sfa``, ...) or collectives (``all_gather``, ...). Kernels nothing
maps are kept and listed with their total time, never dropped.

Layers come from the order inside a layer: the attention kernel (``sfa`` / ``attention``) occurs
once per decoder layer, so it anchors each layer; the layer starts ``norms_before_anchor`` norm
kernels before its anchor (3 in the DSA program: input, q_a and kv_a layernorms), so the input
layernorm and the projections before attention belong to the anchor's layer. Kernels before the
first layer or after the last one are ``None`` (embedding, final norm, lm_head).
"""
from __future__ import annotations

import csv
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import AuditInputError
from ...perf.measured import REQUIRED_COLUMNS, parse_shapes

from ...engines.vllm_ascend.profiler import ANCHOR_CLASSES, COLLECTIVE_CLASSES, KERNEL_CLASSES, NORM_CLASSES  # noqa: F401


def kernel_class(typ: str, name: str = "") -> str | None:
    """Our op class of one kernel, or None (unmapped)."""
    for text in (typ, name):
        low = text.lower()
        for needle, cls in KERNEL_CLASSES:
            # HCCL kernel names vary in case (hcom_alltoAll_, hcom_allGather_): collectives match caselessly
            if needle in text or (cls in COLLECTIVE_CLASSES and needle.lower() in low):
                return cls
    return None


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

    def total_us(self) -> float:
        return sum(self.by_class_us.values())


def _rows(path: Path, rank_base: int) -> list[Kernel]:
    try:
        f = path.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise AuditInputError(path, f"cannot read profile: {exc.strerror or exc}") from None
    out: list[Kernel] = []
    with f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in REQUIRED_COLUMNS if c not in header and c != "Input Shapes"]
        if missing:
            raise AuditInputError(path, f"not a kernel_details.csv: missing column(s) {', '.join(missing)}")
        reader.fieldnames = header
        try:
            for i, row in enumerate(reader):
                typ = (row.get("Type") or "").strip()
                name = (row.get("Name") or "").strip()
                try:
                    dur = float(row["Duration(us)"])
                    start = float(row.get("Start Time(us)") or i)
                    if not (math.isfinite(dur) and dur >= 0 and math.isfinite(start)):
                        raise ValueError(row["Duration(us)"])
                    shapes = (row.get("Input Shapes") or "").strip().strip('"')
                    parse_shapes(shapes)             # validates the shape column like the importer does
                    dev = row.get("Device_id")
                    rank = rank_base + (int(dev) if dev not in (None, "") else 0)
                except (ValueError, TypeError) as exc:
                    raise AuditInputError(path, f"line {reader.line_num}: cannot read row: {exc}") from None
                out.append(Kernel(rank, name, typ, start, dur, shapes, kernel_class(typ, name)))
        except csv.Error as exc:
            raise AuditInputError(path, f"line {reader.line_num}: malformed CSV: {exc}") from None
    return out


def assign_layers(kernels: list[Kernel], n_layers: int | None, norms_before_anchor: int = 3) -> tuple[int, int]:
    """Set ``Kernel.layer`` for one rank's kernels (sorted by start); returns (layers, steps)."""
    anchors = [i for i, k in enumerate(kernels) if k.cls in ANCHOR_CLASSES]
    if not anchors:
        return 0, 1
    per_pass = n_layers if n_layers else len(anchors)
    steps = max(1, round(len(anchors) / per_pass)) if per_pass else 1
    starts = []
    for a in anchors:
        j, seen, start = a - 1, 0, a
        lo = starts[-1] + 1 if starts else 0
        while j >= lo and seen < norms_before_anchor:
            if kernels[j].cls in NORM_CLASSES:
                seen += 1
                start = j
            j -= 1
        starts.append(start if seen == norms_before_anchor else a)
    # a layer ends where the next begins; the last one at the last kernel of its class pattern
    # (the period of the previous layer), so the lm_head and final norm stay outside
    period = (starts[-1] - starts[-2]) if len(starts) > 1 else len(kernels) - starts[0]
    for n, s in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else min(len(kernels), s + period)
        layer = n % per_pass if per_pass else n
        for k in kernels[s:end]:
            k.layer = layer
    return min(per_pass, len(anchors)), steps


def read_profiles(paths: list[str | Path], n_layers: int | None = None,
                  norms_before_anchor: int = 3) -> ProfileEvidence:
    """Kernels of every file (file i = rank i unless a Device_id column says otherwise)."""
    kernels: list[Kernel] = []
    for i, p in enumerate(paths):
        rows = _rows(Path(p), 0 if len(paths) == 1 else i)
        if not rows:
            raise AuditInputError(p, "kernel_details.csv has no kernel rows")
        kernels += rows
    by_rank: dict[int, list[Kernel]] = defaultdict(list)
    for k in kernels:
        by_rank[k.rank].append(k)
    layers, steps = 0, 1
    for rank_kernels in by_rank.values():
        rank_kernels.sort(key=lambda k: k.start_us)
        layers, steps = assign_layers(rank_kernels, n_layers, norms_before_anchor)
    nr = len(by_rank)
    by_class: dict[str, float] = defaultdict(float)
    by_layer: dict[tuple[int, str], float] = defaultdict(float)
    unmapped: dict[str, list] = {}
    for k in kernels:
        if k.cls is None:
            u = unmapped.setdefault(k.type or k.name, [0, 0.0])
            u[0] += 1
            u[1] += k.duration_us
            continue
        by_class[k.cls] += k.duration_us / nr / steps
        if k.layer is not None:
            by_layer[(k.layer, k.cls)] += k.duration_us / nr / steps
    un = sorted(({"type": t, "count": c, "total_us": us} for t, (c, us) in unmapped.items()),
                key=lambda d: -d["total_us"])
    return ProfileEvidence([str(p) for p in paths], kernels, sorted(by_rank), steps, layers,
                           dict(by_class), dict(by_layer), un)
