"""Benchmark results: vLLM's ``vllm bench serve --save-result`` JSON, the block ``vllm bench serve``
prints (`` Serving Benchmark Result ``, V18 vllm/benchmarks/serve.py:918-1093: ``"{:<40} {:<10.2f}"``
rows), and our latency CSV (the ``audit calibrate`` format: ``scenario, phase, query_len, context_len,
measured_ms``).

The JSON's ``request_rate`` is the string ``"inf"`` at the default rate (serve.py:1825-1827) and is
read as infinity; every other figure must be a finite number in its range (latencies and throughputs
0..1e9, counts 0..1e12). ``--append-result`` files (one JSON object per line) are read line by line.

From the JSON we keep the latency statistics (mean / median / p99 of TTFT, TPOT, ITL, and E2EL
when present, in ms) and the throughputs; the workload keys (``num_prompts``, ``max_concurrency``,
``total_input_tokens``, ``total_output_tokens``, ``completed``) say what was measured.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import AuditInputError
from ...inputs import JSON_CAP, iter_lines, load_json, parse_number
from ...perf.calibrate import Scenario, load_scenarios

METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "p99")
THROUGHPUTS = ("request_throughput", "output_throughput", "total_token_throughput")
WORKLOAD = ("num_prompts", "completed", "max_concurrency", "total_input_tokens", "total_output_tokens",
            "duration", "request_rate")


@dataclass
class BenchServe:
    file: str
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)   # metric -> stat -> ms
    throughput: dict[str, float] = field(default_factory=dict)
    workload: dict[str, float] = field(default_factory=dict)

    @property
    def mean_input_len(self) -> float | None:
        n, t = self.workload.get("completed") or self.workload.get("num_prompts"), self.workload.get("total_input_tokens")
        return t / n if n and t else None

    @property
    def mean_output_len(self) -> float | None:
        n, t = self.workload.get("completed") or self.workload.get("num_prompts"), self.workload.get("total_output_tokens")
        return t / n if n and t else None


@dataclass
class BenchEvidence:
    serve: list[BenchServe] = field(default_factory=list)
    latency: list[tuple[str, Scenario]] = field(default_factory=list)       # (file, scenario)
    files: list[str] = field(default_factory=list)


MAX_MS = 1e9
MAX_COUNT = 1e12


def _number(doc: dict, key: str, path: Path, hi: float = MAX_COUNT) -> float | None:
    v = doc.get(key)
    if v is None:
        return None
    if key == "request_rate" and v == "inf":
        return math.inf                     # vLLM writes the default rate as the string "inf"
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise AuditInputError(path, f"{key}: expected a finite number, got {str(v)[:60]!r}")
    if not 0 <= v <= hi:
        raise AuditInputError(path, f"{key}: {v!r} is outside the plausible range [0, {hi:g}]")
    return float(v)


#: printed label -> JSON key (serve.py:918-1093)
TEXT_LABELS = {"Successful requests": "completed", "Benchmark duration (s)": "duration",
               "Total input tokens": "total_input_tokens", "Total generated tokens": "total_output_tokens",
               "Request throughput (req/s)": "request_throughput", "Output token throughput (tok/s)": "output_throughput",
               "Total token throughput (tok/s)": "total_token_throughput",
               "Maximum request concurrency": "max_concurrency", "Request rate configured (RPS)": "request_rate"}
_STAT_WORDS = {"Mean": "mean", "Median": "median", "P99": "p99"}
TEXT_MARK = "Serving Benchmark Result"


def parse_bench_text(lines, path: Path) -> BenchServe | None:
    """The printed block as the JSON's keys; None when the file has no such block."""
    doc: dict = {}
    seen = False
    for n, line in lines:
        if TEXT_MARK in line:
            seen = True
            continue
        if not seen:
            continue
        label, sep, value = line.partition(":")
        label, value = label.strip(), value.strip()
        if not sep or not value:
            continue
        key = TEXT_LABELS.get(label)
        if key is None:
            word, _, rest = label.partition(" ")
            metric = rest.removesuffix(" (ms)").lower()
            if word in _STAT_WORDS and rest.endswith("(ms)") and metric in METRICS:
                key = f"{_STAT_WORDS[word]}_{metric}_ms"
        if key is None:
            continue
        hi = MAX_MS if key.endswith("_ms") or key.endswith("throughput") else MAX_COUNT
        doc[key] = parse_number(value, path, f"line {n}: {label}", lo=0, hi=hi)
    if not seen:
        return None
    return parse_bench_serve(doc, path)


def parse_bench_serve(doc: object, path: Path) -> BenchServe:
    if not isinstance(doc, dict):
        raise AuditInputError(path, "bench serve result must be a JSON object")
    out = BenchServe(str(path))
    for m in METRICS:
        for s in STATS:
            v = _number(doc, f"{s}_{m}_ms", path, MAX_MS)
            if v is not None:
                out.latency_ms.setdefault(m, {})[s] = v
    for k in THROUGHPUTS:
        v = _number(doc, k, path, MAX_MS)
        if v is not None:
            out.throughput[k] = v
    for k in WORKLOAD:
        v = _number(doc, k, path)
        if v is not None:
            out.workload[k] = v
    if not out.latency_ms and not out.throughput:
        raise AuditInputError(path, "no bench serve metrics (expected keys like mean_ttft_ms, mean_tpot_ms, "
                                    "output_throughput)")
    return out


def read_bench(paths: list[str | Path]) -> BenchEvidence:
    """JSON files are bench serve results (one object, or one per line from --append-result); a file
    holding the printed "Serving Benchmark Result" block is read as that; anything else is our
    latency CSV."""
    ev = BenchEvidence()
    for p in paths:
        path = Path(p)
        first = ""
        for _, line in iter_lines(path, "benchmark result", JSON_CAP):
            if line.strip():
                first = line.strip()
                break
        ev.files.append(str(path))
        if first.startswith(("{", "[")):
            try:
                doc = load_json(path, "benchmark result")
                docs = [doc]
            except AuditInputError as exc:
                if "line 2" not in exc.problem and "Extra data" not in exc.problem:
                    raise
                docs = [_line_json(path, n, line) for n, line in iter_lines(path, "benchmark result", JSON_CAP)
                        if line.strip()]
            ev.serve += [parse_bench_serve(d, path) for d in docs]
            continue
        text = parse_bench_text(iter_lines(path, "benchmark result", JSON_CAP), path)
        if text is not None:
            ev.serve.append(text)
        else:
            ev.latency += [(str(path), s) for s in load_scenarios(path)]
    return ev


def _line_json(path: Path, n: int, line: str):
    from ...inputs import parse_json_text
    try:
        return parse_json_text(line, path, "a benchmark result line")
    except AuditInputError as exc:
        raise AuditInputError(path, f"line {n}: {exc.problem}") from None
