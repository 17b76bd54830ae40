"""What ``vllm bench serve`` (and aisbench) would report for a simulated run.

Definitions (research/serving-facts.md §3; vLLM ``benchmarks/serve.py``, aisbench calculators):

* TTFT = first token - request start (after the client's concurrency semaphore: client queueing
  excluded, server queueing included; ``endpoint_request_func.py:193-232``);
* TPOT = (latency - TTFT) / (output - 1) (``serve.py:446-451``);
* ITL = the gap between streamed chunks; one chunk per engine step, so with MTP one chunk carries
  1 + accepted tokens and ITL is the decode step time (``:234-236``, ``serve.py:434-438``);
* throughput = tokens / (last response - first request) (``serve.py:571-574``; aisbench
  ``infer_time = max(end) - min(start)``, ``default_perf_metric_calculator.py:80-82``).

The printed block and the JSON keys are vLLM's (research/kernel-types.md §4).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .sim import BenchRun


def _wquantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    if not len(x) or w.sum() <= 0:
        return 0.0
    o = np.argsort(x)
    cw = np.cumsum(w[o])
    return float(x[o][np.searchsorted(cw, q * cw[-1])])


def metrics(run: BenchRun) -> dict[str, Any]:
    wl = run.workload
    ok = run.done >= 0
    send, first, done = run.send[ok], run.first[ok], run.done[ok]
    n = int(ok.sum())
    duration = float(done.max() - run.send[run.send >= 0].min()) if n else 0.0
    ttft = (first - send) * 1e3
    tpot = (done - first) / max(wl.osl - 1, 1) * 1e3
    # ITL: one sample per decoding request per decode step
    st = run.steps
    dec = st[:, 2] > 0
    itl_x, itl_w = st[dec, 1] * 1e3, st[dec, 2]
    out_tokens = n * wl.osl
    in_tokens = n * wl.isl
    res: dict[str, Any] = {
        "num_prompts": wl.num_prompts,
        "request_rate": "inf" if wl.request_rate == float("inf") else wl.request_rate,
        "max_concurrency": wl.concurrency,
        "duration": duration, "completed": n, "failed": wl.num_prompts - n,
        "total_input_tokens": in_tokens, "total_output_tokens": out_tokens,
        "request_throughput": n / duration if duration else 0.0,
        "output_throughput": out_tokens / duration if duration else 0.0,
        "total_token_throughput": (in_tokens + out_tokens) / duration if duration else 0.0,
    }
    for name, x, w in (("ttft", ttft, np.ones(n)), ("tpot", tpot, np.ones(n)), ("itl", itl_x, itl_w)):
        mean = float((x * w).sum() / w.sum()) if len(x) and w.sum() > 0 else 0.0
        res[f"mean_{name}_ms"] = mean
        res[f"median_{name}_ms"] = _wquantile(x, w, 0.5)
        res[f"std_{name}_ms"] = float(np.sqrt(((x - mean) ** 2 * w).sum() / w.sum())) if len(x) and w.sum() > 0 else 0.0
        res[f"p99_{name}_ms"] = _wquantile(x, w, 0.99)
    res["output_throughput_per_die"] = res["output_throughput"] / max(run.dies, 1)
    return res


def render_block(m: dict[str, Any]) -> str:
    """The text ``vllm bench serve`` prints (``serve.py:918-1093``)."""
    L = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    row = lambda k, v: L.append("{:<40} {:<10}".format(k, v))                   # noqa: E731
    rowf = lambda k, v: L.append("{:<40} {:<10.2f}".format(k, v))               # noqa: E731
    row("Successful requests:", m["completed"])
    row("Failed requests:", m["failed"])
    row("Maximum request concurrency:", m["max_concurrency"])
    if m["request_rate"] != "inf":
        rowf("Request rate configured (RPS):", m["request_rate"])
    rowf("Benchmark duration (s):", m["duration"])
    row("Total input tokens:", m["total_input_tokens"])
    row("Total generated tokens:", m["total_output_tokens"])
    rowf("Request throughput (req/s):", m["request_throughput"])
    rowf("Output token throughput (tok/s):", m["output_throughput"])
    rowf("Total token throughput (tok/s):", m["total_token_throughput"])
    for title, key, label in (("Time to First Token", "ttft", "TTFT"),
                              ("Time per Output Token (excl. 1st token)", "tpot", "TPOT"),
                              ("Inter-token Latency", "itl", "ITL")):
        L.append("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        rowf(f"Mean {label} (ms):", m[f"mean_{key}_ms"])
        rowf(f"Median {label} (ms):", m[f"median_{key}_ms"])
        rowf(f"P99 {label} (ms):", m[f"p99_{key}_ms"])
    L.append("=" * 50)
    return "\n".join(L) + "\n"
