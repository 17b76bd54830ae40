"""Benchmark results: vLLM's ``vllm bench serve --save-result`` JSON, and our latency CSV (the
``audit calibrate`` format: ``scenario, phase, query_len, context_len, measured_ms``).

From the JSON we keep the latency statistics (mean / median / p99 of TTFT, TPOT, ITL, and E2EL
when present, in ms) and the throughputs; the workload keys (``num_prompts``, ``max_concurrency``,
``total_input_tokens``, ``total_output_tokens``, ``completed``) say what was measured.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import AuditInputError, read_input_bytes
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


def _number(doc: dict, key: str, path: Path) -> float | None:
    v = doc.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise AuditInputError(path, f"{key}: expected a finite number, got {v!r}")
    return float(v)


def parse_bench_serve(doc: object, path: Path) -> BenchServe:
    if not isinstance(doc, dict):
        raise AuditInputError(path, "bench serve result must be a JSON object")
    out = BenchServe(str(path))
    for m in METRICS:
        for s in STATS:
            v = _number(doc, f"{s}_{m}_ms", path)
            if v is not None:
                out.latency_ms.setdefault(m, {})[s] = v
    for k in THROUGHPUTS:
        v = _number(doc, k, path)
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
    """JSON files are bench serve results; anything else is read as our latency CSV."""
    ev = BenchEvidence()
    for p in paths:
        path = Path(p)
        data = read_input_bytes(path, "benchmark result")
        ev.files.append(str(path))
        if data.lstrip()[:1] in (b"{", b"["):
            try:
                doc = json.loads(data)
            except (ValueError, UnicodeDecodeError) as exc:
                raise AuditInputError(path, f"not valid JSON: {exc}") from None
            ev.serve.append(parse_bench_serve(doc, path))
        else:
            ev.latency += [(str(path), s) for s in load_scenarios(path)]
    return ev
