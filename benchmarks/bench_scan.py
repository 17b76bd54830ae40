"""Benchmark the checkpoint scanner against safetensors.safe_open and a raw header-parse floor.

    python benchmarks/bench_scan.py                  # synthesize full-size GLM-5.1 W8A8 in a temp dir
    python benchmarks/bench_scan.py --model-dir DIR  # any checkpoint directory

Why these: ``safe_open`` is what a user would write to inventory a checkpoint (the bar to beat
by >= 3x; the target is judged on the full scan, which also cross-checks the index, and the
header-only line shows the like-for-like figure); the floor (read every header, parse it with orjson, nothing else) is the least any
header scanner must do, and the scanner's validation + columns should cost at most as much again
(ours/floor <= 2x). The page cache is warmed by one untimed run of each variant; each figure is
the best of ``--repeats`` runs. The two inventories are compared row by row before timing counts.
Exit status 1 when a target is missed or the inventories differ.
The scanner pauses Python's cyclic GC while parsing (it creates millions of short-lived objects and
no cycles); the floor is shown both with the default GC and with the same pause, for fairness.
"""
from __future__ import annotations

import argparse
import gc
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import orjson
from safetensors import safe_open
from tabulate import tabulate

from auditor.inventory.scan import scan_model_dir
from auditor.inventory.shards import read_headers

Row = tuple[str, str, str, tuple[int, ...]]   # name, file, dtype, shape


def ours(model_dir: Path, files: list[str]) -> list[Row]:
    t = scan_model_dir(model_dir, progress=False).table
    return [(str(t.name[i]), t.files[int(t.file[i])], str(t.dtype[i]), t.shape_of(i)) for i in range(len(t))]


def time_ours(model_dir: Path, files: list[str]) -> int:
    return len(scan_model_dir(model_dir, progress=False).table)


def headers_only(model_dir: Path, files: list[str]) -> int:
    """Only what the safe_open variant does: every header read, validated, into a table (no
    index cross-check, no config or description lookup)."""
    was = gc.isenabled()
    gc.disable()
    try:
        batch = read_headers([model_dir / rel for rel in files], check_unique=True)
        return len(batch.to_table(files, [True] * len(files)))
    finally:
        if was:
            gc.enable()


def with_safe_open(model_dir: Path, files: list[str]) -> list[Row]:
    rows: list[Row] = []
    for rel in files:
        with safe_open(str(model_dir / rel), framework="numpy") as f:
            for k in f.keys():
                sl = f.get_slice(k)
                rows.append((k, rel, sl.get_dtype(), tuple(sl.get_shape())))
    return rows


def floor(model_dir: Path, files: list[str]) -> int:
    n = 0
    for rel in files:
        with open(model_dir / rel, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            n += len(orjson.loads(fh.read(size)))
    return n


def floor_gc_paused(model_dir: Path, files: list[str]) -> int:
    """The floor under the same GC policy as the scanner (which pauses the cyclic GC)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return floor(model_dir, files)
    finally:
        if was:
            gc.enable()


def best_of(fn: Callable, args: tuple, repeats: int) -> float:
    fn(*args)   # warm the page cache and any lazy imports
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def synthesize_default(out_dir: Path) -> Path:
    from auditor.synth import synthesize   # the full-size sparse GLM-5.1 W8A8 stand-in

    t0 = time.perf_counter()
    res = synthesize(out_dir, model="glm-5.1", recipe="w8a8")
    print(f"{res.summary()} [{time.perf_counter() - t0:.1f} s]", file=sys.stderr)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, help="checkpoint directory (default: synthesize GLM-5.1 W8A8)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--keep", action="store_true", help="keep the synthesized checkpoint")
    args = ap.parse_args(argv)

    tmp = None
    if args.model_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="bench_scan_"))
        model_dir = synthesize_default(tmp / "glm-5.1-w8a8")
    else:
        model_dir = args.model_dir
    try:
        res = scan_model_dir(model_dir, progress=False)
        files = list(res.table.files)
        header_mb = sum(8 + struct.unpack("<Q", open(model_dir / f, "rb").read(8))[0] for f in files) / 1e6

        a, b = sorted(ours(model_dir, files)), sorted(with_safe_open(model_dir, files))
        if a != b:
            diff = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y) if len(a) == len(b) else None
            print(f"MISMATCH: ours {len(a)} rows, safe_open {len(b)} rows, first difference at {diff}",
                  file=sys.stderr)
            return 1

        t_ours = best_of(time_ours, (model_dir, files), args.repeats)
        t_headers = best_of(headers_only, (model_dir, files), args.repeats)
        t_safe = best_of(with_safe_open, (model_dir, files), args.repeats)
        t_floor = best_of(floor, (model_dir, files), args.repeats)
        t_floor_nogc = best_of(floor_gc_paused, (model_dir, files), args.repeats)
        print(f"{model_dir}: {len(files)} safetensors files, {len(a)} tensors, {header_mb:.1f} MB of headers; "
              f"inventories identical; best of {args.repeats}")
        print(tabulate([
            ["scan_model_dir (ours: headers + index cross-check)", f"{t_ours:.3f}", ""],
            ["headers only (ours, same work as safe_open)", f"{t_headers:.3f}",
             f"safe_open/headers = {t_safe / t_headers:.1f}x"],
            ["safetensors.safe_open", f"{t_safe:.3f}", f"safe_open/ours = {t_safe / t_ours:.1f}x (target >= 3x)"],
            ["floor: read + orjson", f"{t_floor:.3f}", f"ours/floor = {t_ours / t_floor:.2f}x (target <= 2x)"],
            ["floor, GC paused like ours", f"{t_floor_nogc:.3f}", f"ours/floor = {t_ours / t_floor_nogc:.2f}x"],
        ], headers=["variant", "seconds", "ratio"]))
        ok = t_safe / t_ours >= 3 and t_ours / t_floor <= 2
        return 0 if ok else 1
    finally:
        if tmp is not None and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp is not None:
            print(f"kept {model_dir}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
