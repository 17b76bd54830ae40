"""Measured kernel tables: replace the analytic time of an op by a measured one when we have it.

Why: the roofline is only as good as its efficiency constants; a profiler trace of the real
kernels on the real device is better wherever it covers the shape. The perf op asks
``KernelTable.lookup(kernel, key)`` with its own numeric shape key (e.g. a matmul's (M, K, N));
an exact hit is "measured", a point inside the range of measured points is "interpolated", and
anything else is ``None`` so the analytic model is used. We never extrapolate: a measured curve
carried outside its range is less trustworthy than the roofline.

Table file format (ours, CSV, UTF-8; lines starting with '#' are comments)::

    kernel,key0,key1,key2,time_us,source_note
    matmul_w8a8,16,6144,2048,11.8,kernel_details.csv rows 3-5 (QuantBatchMatmulV3)

* ``kernel``: our kernel name (the perf op's name for it).
* ``key0..keyN``: the numeric shape key, as many columns as needed (``key0`` ... in order);
  a row uses the first k of them and leaves the rest empty. Rows of one kernel may only be
  compared with keys of the same length.
* ``time_us``: kernel time in microseconds (duplicates are averaged on load).
* ``source_note``: free text provenance (optional column).

Interpolation (ours; no scipy). A query ``q`` that is not a measured key is interpolated over
the rows of the same kernel and key length, multilinearly inside a box of measured points:

1. Candidate axis sets are tried in order: every single axis, then every pair, then every triple
   (at most 3 axes, ``MAX_INTERP_DIMS``), each in key order; the first set that yields a value
   wins. For a set A, only the points equal to ``q`` on every axis outside A take part.
2. The box: for each axis a in A, a lower value lo_a <= q_a and an upper value hi_a >= q_a (equal
   when q_a is itself a measured value of that axis). They are the nearest measured values below
   and above q_a among the points whose other A-coordinates are box values of their own axes.
   This is found by starting from the nearest values over all participating points and re-taking
   each axis's nearest values among the points that sit on the other axes' current box values,
   until nothing changes (a box that keeps changing after ``MAX_BOX_ROUNDS`` rounds is no box).
3. Every corner of the box must be a measured point; the value is the multilinear blend of the
   2^|A| corners with weights prod_a (hi_a - q_a)/(hi_a - lo_a) or (q_a - lo_a)/(hi_a - lo_a).
   Along one axis this is plain linear interpolation between the two neighbours.
4. Otherwise (a corner missing, ``q`` outside the measured range on some axis, or no points
   matching the fixed axes) the lookup gives ``None`` and the analytic model is used. We never
   extrapolate and never interpolate over scattered points that do not form a full box.

Example: points (M, N) = (16, 2048): 10 us, (256, 2048): 50, (16, 4096): 20, (256, 4096): 80 and
the query (136, 3072): weights 1/2 on each axis, so (10 + 50 + 20 + 80) / 4 = 40 us. Drop the
(256, 4096) point and the same query gives ``None``.
"""
from __future__ import annotations

import csv
import itertools
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from ..errors import AuditInputError
from ..inputs import parse_number

MAX_KEY = float(1 << 50)          # a shape key (tokens, dims, experts)
MAX_TIME_US = 1e12


def _csv_rows(reader, path):
    try:
        for row in reader:
            yield row
    except csv.Error as exc:
        raise AuditInputError(path, f"malformed CSV: {exc}") from None

Key = tuple[float, ...]
_KEY_COL = re.compile(r"^key(\d+)$")
MAX_INTERP_DIMS = 3


@dataclass
class KernelTable:
    """Measured kernel times by (kernel name, numeric key)."""

    # kernel -> key -> (sum of times, count, notes): averaging duplicates happens on read
    _rows: dict[str, dict[Key, list]] = field(default_factory=lambda: defaultdict(dict))
    _cache: dict = field(default_factory=dict, repr=False)

    # -- building -------------------------------------------------------------------------
    def add(self, kernel: str, key: Iterable[float], time_us: float, note: str = "") -> None:
        """Add one measurement; repeated keys are averaged."""
        k = tuple(float(v) for v in key)
        slot = self._rows[kernel].get(k)
        if slot is None:
            self._rows[kernel][k] = [float(time_us), 1, [note] if note else []]
        else:
            slot[0] += float(time_us)
            slot[1] += 1
            if note and note not in slot[2]:
                slot[2].append(note)
        self._cache.clear()

    def kernels(self) -> list[str]:
        return sorted(self._rows)

    def points(self, kernel: str) -> dict[Key, float]:
        """Averaged measurements of one kernel: key -> time_us."""
        return {k: s / n for k, (s, n, _) in self._rows.get(kernel, {}).items()}

    def __len__(self) -> int:
        return sum(len(v) for v in self._rows.values())

    # -- lookup ---------------------------------------------------------------------------
    def lookup(self, kernel: str, key: tuple[float, ...]) -> tuple[float, str] | None:
        """(time_us, "measured" | "interpolated"), or None when the key is outside the data
        (semantics in the module docstring)."""
        q = tuple(float(v) for v in key)
        rows = self._rows.get(kernel)
        if not rows:
            return None
        hit = rows.get(q)
        if hit is not None:
            return hit[0] / hit[1], "measured"
        coords, times = self._arrays(kernel, len(q))
        if len(times) < 2:
            return None
        qa = np.array(q)
        for d in range(1, min(MAX_INTERP_DIMS, len(q)) + 1):
            for axes in itertools.combinations(range(len(q)), d):
                t = _interpolate_on_axes(coords, times, qa, axes)
                if t is not None:
                    return t, "interpolated"
        return None

    def _arrays(self, kernel: str, ndim: int) -> tuple[np.ndarray, np.ndarray]:
        """Averaged points of one kernel with ``ndim``-long keys as arrays (coords [n, ndim],
        times [n]); cached because a perf evaluation looks up every op of the program."""
        cache_key = (kernel, ndim)
        hit = self._cache.get(cache_key)
        if hit is None:
            pts = [(k, v) for k, v in self.points(kernel).items() if len(k) == ndim]
            coords = np.array([k for k, _ in pts], dtype=float).reshape(len(pts), ndim)
            hit = (coords, np.array([v for _, v in pts], dtype=float))
            self._cache[cache_key] = hit
        return hit

    # -- file I/O -------------------------------------------------------------------------
    def write(self, path: Path) -> None:
        """Write the table in the documented CSV format (averaged rows, sorted)."""
        width = max((len(k) for rows in self._rows.values() for k in rows), default=1)
        from ..outputs import open_output
        with open_output(path, "--output", text=True) as f:
            w = csv.writer(f)
            w.writerow(["kernel", *[f"key{i}" for i in range(width)], "time_us", "source_note"])
            for kernel in self.kernels():
                for k in sorted(self._rows[kernel]):
                    s, n, notes = self._rows[kernel][k]
                    keys = [_fmt(v) for v in k] + [""] * (width - len(k))
                    note = "; ".join(notes) + (f" (mean of {n})" if n > 1 else "")
                    w.writerow([kernel, *keys, f"{s / n:.6g}", note])


#: rounds of box refinement before a query is declared not boxed (a box settles in 1-2 rounds)
MAX_BOX_ROUNDS = 8

Box = list[tuple[float, float]]


def _interpolate_on_axes(coords: np.ndarray, times: np.ndarray, q: np.ndarray,
                         axes: tuple[int, ...]) -> float | None:
    """Multilinear value at ``q`` varying only ``axes`` (the others must match exactly), or None."""
    fixed = [i for i in range(len(q)) if i not in axes]
    mask = np.all(coords[:, fixed] == q[fixed], axis=1) if fixed else np.ones(len(times), dtype=bool)
    if mask.sum() < 2:
        return None
    sub, vals, x = coords[mask][:, list(axes)], times[mask], q[list(axes)]
    box = _find_box(sub, x)
    return None if box is None else _multilinear(sub, vals, x, box)


def _bracket(values: np.ndarray, x: float) -> tuple[float, float] | None:
    """Nearest values <= x and >= x (equal when x itself occurs); None outside the range."""
    below, above = values[values <= x], values[values >= x]
    if below.size == 0 or above.size == 0:
        return None
    return float(below.max()), float(above.min())


def _find_box(sub: np.ndarray, x: np.ndarray) -> Box | None:
    """The self-consistent bracketing box around ``x`` (module docstring, step 2), or None.

    Why the refinement: a point measured at some unrelated value of another axis must not
    displace the bracket of this axis; only points on the box's other values are neighbours.
    """
    box: Box = []
    for j in range(len(x)):
        br = _bracket(sub[:, j], x[j])
        if br is None:
            return None
        box.append(br)
    for _ in range(MAX_BOX_ROUNDS):
        new: Box = []
        for j in range(len(x)):
            on_box = np.ones(len(sub), dtype=bool)
            for b in range(len(x)):
                if b != j:
                    on_box &= np.isin(sub[:, b], box[b])
            br = _bracket(sub[on_box, j], x[j])
            if br is None:
                return None
            new.append(br)
        if new == box:
            return box
        box = new
    return None


def _multilinear(sub: np.ndarray, vals: np.ndarray, x: np.ndarray, box: Box) -> float | None:
    """Blend of the box corners with multilinear weights; None when a corner was not measured."""
    table = {tuple(p): v for p, v in zip(sub.tolist(), vals.tolist())}
    per_axis: list[list[tuple[float, float]]] = []
    for (lo, hi), xv in zip(box, x.tolist()):
        if hi == lo:
            per_axis.append([(lo, 1.0)])
        else:
            per_axis.append([(lo, (hi - xv) / (hi - lo)), (hi, (xv - lo) / (hi - lo))])
    total = 0.0
    for corner in itertools.product(*per_axis):
        v = table.get(tuple(c for c, _ in corner))
        if v is None:
            return None
        total += math.prod(w for _, w in corner) * v
    return total


def _fmt(v: float) -> str:
    return str(int(v)) if v == int(v) else repr(v)


def load_kernel_table(path: str | Path) -> KernelTable:
    """Read a table in our CSV format; any malformed row is one AuditInputError naming file:line."""
    from ..inputs import CSV_CAP, iter_lines
    path = Path(path)
    lines = [(i, ln) for i, ln in iter_lines(path, "kernel table", CSV_CAP)
             if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise AuditInputError(path, "kernel table is empty (expected a header kernel,key0,...,time_us)")
    reader = csv.reader([ln for _, ln in lines])
    try:
        header = [h.strip() for h in next(reader)]
    except csv.Error as exc:
        raise AuditInputError(path, f"malformed CSV: {exc}") from None
    key_cols = sorted((int(m.group(1)), i) for i, h in enumerate(header) if (m := _KEY_COL.match(h)))
    if "kernel" not in header or "time_us" not in header or not key_cols:
        raise AuditInputError(path, f"line {lines[0][0]}: header must have kernel, key0[, key1 ...], time_us; "
                                    f"got {','.join(header)}")
    if [n for n, _ in key_cols] != list(range(len(key_cols))):
        raise AuditInputError(path, "key columns must be key0, key1, ... without gaps")
    ki, ti = header.index("kernel"), header.index("time_us")
    ni = header.index("source_note") if "source_note" in header else None
    table = KernelTable()
    rows = _csv_rows(reader, path)
    for (lineno, _), row in zip(lines[1:], rows):
        if len(row) < len(header) - (1 if ni is not None and ni == len(header) - 1 else 0):
            raise AuditInputError(path, f"line {lineno}: expected {len(header)} columns, got {len(row)}")
        try:
            raw = [row[i].strip() for _, i in key_cols]
            while raw and raw[-1] == "":
                raw.pop()
            if not raw or "" in raw:
                raise ValueError("key columns must be filled left to right")
            key = tuple(parse_number(v, path, f"line {lineno}: bad number: key", lo=-MAX_KEY, hi=MAX_KEY) for v in raw)
            t = parse_number(row[ti], path, f"line {lineno}: bad number: time_us", lo=0, hi=MAX_TIME_US)
        except ValueError as exc:
            raise AuditInputError(path, f"line {lineno}: bad number ({exc})") from None
        kernel = row[ki].strip()
        if not kernel:
            raise AuditInputError(path, f"line {lineno}: empty kernel name")
        table.add(kernel, key, t, row[ni].strip() if ni is not None and ni < len(row) else "")
    return table


# -- Ascend profiler import ---------------------------------------------------------------------
#
# ``kernel_details.csv`` (msprof / torch_npu profiler) has one row per kernel launch with, among
# others, ``Name, Type, Accelerator Core, Start Time(us), Duration(us), Input Shapes,
# Input Data Types, Input Formats``. Shapes are ``;``-separated slots of ``,``-separated dims
# (empty slots kept). We read Type, Duration(us), Input Shapes and, when present, Input Formats
# (FRACTAL_NZ weights are folded back to their 2-D ND shape).

Shape = tuple[int, ...]
KeyFn = Callable[[list[Shape], list[str]], tuple[float, ...]]
REQUIRED_COLUMNS = ("Type", "Duration(us)", "Input Shapes")


def parse_shapes(text: str) -> list[Shape]:
    """'4096,6144;6144,2048;;' -> [(4096, 6144), (6144, 2048), (), ()]."""
    text = text.strip().strip('"').strip()
    if not text:
        return []
    out: list[Shape] = []
    for slot in text.split(";"):
        slot = slot.strip()
        dims = []
        for d in (slot.split(",") if slot else ()):
            d = d.strip()
            if not (d.isascii() and d.isdigit() and len(d) <= 15):
                raise ValueError(f"bad dimension {d[:40]!r}")
            dims.append(int(d))
        out.append(tuple(dims))
    return out


def _nd_2d(shape: Shape, fmt: str) -> tuple[int, int]:
    """(rows, cols) of a weight; FRACTAL_NZ [..., c1, r1, r0, c0] is rows r1*r0, cols c1*c0."""
    if "NZ" in fmt.upper() and len(shape) >= 4:
        return shape[-3] * shape[-2], shape[-4] * shape[-1]
    if len(shape) < 2:
        raise ValueError(f"weight shape {shape} is not a matrix")
    return shape[-2], shape[-1]


def _other_dim(rows: int, cols: int, k: int) -> int:
    """The output width N of a weight given the contraction width K (either orientation;
    NZ padding can make the K side slightly larger, so the closer side is K)."""
    return cols if abs(rows - k) <= abs(cols - k) else rows


def matmul_key(shapes: list[Shape], formats: list[str]) -> tuple[float, ...]:
    """(M, K, N): x[..., M, K] (leading dims folded into M) times a [K, N] or [N, K] weight."""
    x, w = shapes[0], shapes[1]
    if len(x) < 2:
        raise ValueError(f"activation shape {x} is not a matrix")
    m, k = math.prod(x[:-1]), x[-1]
    rows, cols = _nd_2d(w, formats[1] if len(formats) > 1 else "")
    return float(m), float(k), float(_other_dim(rows, cols, k))


def grouped_matmul_key(shapes: list[Shape], formats: list[str]) -> tuple[float, ...]:
    """(M, K, N, E): x[M, K] routed tokens, weight [E, K, N] (or NZ [E, ...])."""
    x, w = shapes[0], shapes[1]
    m, k = math.prod(x[:-1]), x[-1]
    fmt = formats[1] if len(formats) > 1 else ""
    e = w[0] if len(w) >= 3 else 1
    rows, cols = _nd_2d(w[1:] if len(w) >= 3 else w, fmt)
    return float(m), float(k), float(_other_dim(rows, cols, k)), float(e)


def sparse_attention_key(shapes: list[Shape], formats: list[str]) -> tuple[float, ...]:
    """(T, H, L): query (T, H, 512); L = attended length per query = min(block_table width x
    block size, top-k) from key_cache (blocks, bs, 1, 512), topk_indices (T, 1, topk),
    block_tables (B, maxblk)."""
    q, kc, idx, bt = shapes[0], shapes[1], shapes[3], shapes[4]
    cap = bt[-1] * kc[1]
    return float(q[0]), float(q[1]), float(min(cap, idx[-1]) if idx else cap)


def lightning_indexer_key(shapes: list[Shape], formats: list[str]) -> tuple[float, ...]:
    """(T, H, L): query (T, H, D); L = block_tables width x block size of indexer_cache."""
    q, kc, bt = shapes[0], shapes[1], shapes[3]
    return float(q[0]), float(q[1]), float(bt[-1] * kc[1])


#: kernel Type -> key function; a mapping may name any of these Types or bring its own function
KEY_FUNCTIONS: dict[str, KeyFn] = {
    "MatMulV2": matmul_key, "MatMulV3": matmul_key, "MatMulCommon": matmul_key,
    "QuantBatchMatmulV3": matmul_key, "GroupedMatmul": grouped_matmul_key,
    "SparseFlashAttention": sparse_attention_key, "LightningIndexer": lightning_indexer_key,
    "LightningIndexerVllm": lightning_indexer_key,
}




def import_kernel_details(path: str | Path, mapping: dict, stats: dict | None = None) -> KernelTable:
    """Build a KernelTable from an Ascend profiler ``kernel_details.csv``.

    ``mapping`` maps a kernel Type to our kernel name (``{"QuantBatchMatmulV3": "matmul_w8a8"}``)
    or to ``(name, key_fn)`` for a Type without a built-in key function. Rows of unmapped Types
    are skipped; rows with the same (kernel, key) are averaged. ``stats``, if given, receives
    counts of used and skipped rows. Malformed input is one AuditInputError naming file and line.
    """
    path = Path(path)
    resolved: dict[str, tuple[str, KeyFn]] = {}
    for typ, target in mapping.items():
        if isinstance(target, tuple):
            resolved[typ] = target
        elif typ in KEY_FUNCTIONS:
            resolved[typ] = (str(target), KEY_FUNCTIONS[typ])
        else:
            raise AuditInputError("mapping", f"no key function for kernel type {typ!r}; "
                                             f"known: {', '.join(sorted(KEY_FUNCTIONS))}")
    from ..inputs import PROFILE_CAP, iter_lines
    table = KernelTable()
    used = skipped = 0
    if True:
        reader = csv.DictReader(t for _, t in iter_lines(path, "profile", PROFILE_CAP))
        try:
            header = [h.strip() for h in (reader.fieldnames or [])]
        except csv.Error as exc:
            raise AuditInputError(path, f"line 1: malformed CSV: {exc}") from None
        # msprof op_summary names and the newer Block Num (research kernel-types.md §2.2, finding 6)
        aliases = {"OP Type": "Type", "Op Name": "Name", "Task Duration(us)": "Duration(us)",
                   "Task Start Time(us)": "Start Time(us)", "Block Num": "Block Dim"}
        header = [h if h in REQUIRED_COLUMNS or h not in aliases or aliases[h] in header else aliases[h]
                  for h in header]
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise AuditInputError(path, f"not a kernel_details.csv: missing column(s) {', '.join(missing)}")
        reader.fieldnames = header
        try:
            for row in reader:
                typ = (row.get("Type") or "").strip()
                if typ not in resolved:
                    skipped += 1
                    continue
                name, key_fn = resolved[typ]
                line = reader.line_num
                try:
                    dur = parse_number(row["Duration(us)"] or "", path, f"line {line} ({typ}): cannot read row: duration", lo=0,
                                       hi=MAX_TIME_US)
                    shapes = parse_shapes(row.get("Input Shapes") or "")
                    formats = [s.strip() for s in (row.get("Input Formats") or "").strip('"').split(";")]
                    key = key_fn(shapes, formats)
                except (ValueError, IndexError, TypeError) as exc:
                    raise AuditInputError(path, f"line {line} ({typ}): cannot read row: {exc}") from None
                table.add(name, key, dur, f"{path.name} {typ}")
                used += 1
        except csv.Error as exc:
            raise AuditInputError(path, f"line {reader.line_num}: malformed CSV: {exc}") from None
    if stats is not None:
        stats.update(used=used, skipped=skipped)
    return table
