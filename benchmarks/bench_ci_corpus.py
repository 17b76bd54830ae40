"""audit bench on the engine's own CI corpus: every calibration row of the published README's sections B,
E and F (``auditor/serving/ci_rows.py``) read with ``audit bench --launch <config> [--case NAME]``, beside the measured throughput (issue 29),
and the 4-node GLM-5.1 P/D report (TPOT and the decode node's logged KV tokens).

Why a script and not a test: it prints the table a closing note quotes (the "before" and "after" columns
of a model change come from the same script), and the runs take about a minute. The pass bar (every row
within 1.3x, the P/D report's TPOT within 15 % and its KV tokens within 2 %) is printed, not asserted.

Run: python benchmarks/bench_ci_corpus.py [--shared /work/shared] [ID ...]"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import time
from pathlib import Path

from auditor.serving.ci_rows import CI_ROWS, UCM_MEASURED  # the one row table (the calibration reads it too)

BLOCK_TOKENS = 128      # vLLM-Ascend's SFA block size (the report's KV tokens are blocks x 128)


def run_audit(args: list[str]) -> tuple[int, str, str]:
    """``audit ARGS`` in this process (numba's cache is loaded once): (exit code, stdout, stderr)."""
    from auditor.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue(), err.getvalue()


def bench(args: list[str]) -> dict:
    """The figures of one table-format run: tok/s, mean TPOT, KV blocks per rank of each instance."""
    rc, out, err = run_audit(["bench", *args])
    if rc != 0:
        return {"error": (err.strip().splitlines() or ["exit %d" % rc])[-1]}
    tok = float(re.search(r"Output token throughput \(tok/s\):\s+([\d.]+)", out).group(1))
    tpot = float(re.search(r"Mean TPOT \(ms\):\s+([\d.]+)", out).group(1))
    blocks = {m.group(1): int(m.group(2).replace(",", ""))
              for m in re.finditer(r"(aggregated|prefill|decode) ([\d,]+) blocks/rank", out)}
    acc = re.search(r"MTP acceptance ([^;]+);", out)
    wl = re.search(r"workload: concurrency (\d+), \d+ prompts, isl (\d+), osl (\d+)", out)
    head = re.search(r"^audit bench: (.*)$", out, re.MULTILINE)      # the deployment as audit read it
    chunk = re.search(r"batched (\d+)", head.group(1)) if head else None
    return {"tok_s": tok, "tpot_ms": tpot, "blocks": blocks, "acceptance": acc.group(1) if acc else "",
            "stderr": err, "deployment": head.group(1) if head else "",
            **({"concurrency": int(wl.group(1)), "isl": int(wl.group(2)), "osl": int(wl.group(3))} if wl else {}),
            "chunk": int(chunk.group(1)) if chunk else 0}


def single_request_prices(rows: list[dict]) -> None:
    """Concurrency-1 rows of one deployment (three or more; the deployment line audit prints for each, so one
    launch): the chunk price, its growth with context and the TPOT the measured figures imply, beside the same
    solve on audit's figures (``serving.decompose``)."""
    from auditor.serving.decompose import SingleRequestRow, decompose
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("concurrency") == 1 and r.get("chunk") and r.get("deployment"):
            groups.setdefault((r["deployment"], r["chunk"]), []).append(r)
    for (_, chunk), rs in groups.items():
        if len(rs) < 3:
            continue
        print(f"single-request rows {', '.join(r['id'] for r in rs)} (chunk {chunk}):")
        for who, key in (("measured", "measured"), ("audit", "tok_s")):
            try:
                p = decompose([SingleRequestRow(r["isl"], r["osl"], r[key]) for r in rs], chunk)
            except ValueError as exc:
                print(f"  {who:8s} {exc}")
                continue
            worst = max(abs(x) for x in p.residuals)
            print(f"  {who:8s} chunk {p.chunk_s:6.3f} s at no context, growth {p.growth_s_per_k * 1e3:+6.1f} ms per "
                  f"1k context, TPOT {p.tpot_s * 1e3:5.1f} ms (rows off the solve by {worst:.1%} at most)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default="/work/shared", help="the shared data directory")
    ap.add_argument("--json", action="store_true", help="also print the rows as JSON")
    ap.add_argument("ids", nargs="*", help="only these rows (default: all)")
    a = ap.parse_args()
    pub = Path(a.shared) / "data" / "published"
    rows: list[dict] = []
    jobs = [(r.id, r.section, r.argv(pub), r.measured) for r in CI_ROWS]
    print(f"{'row':10s} {'sec':3s} {'audit tok/s':>11s} {'measured':>10s} {'ratio':>6s} {'TPOT ms':>8s} "
          f"{'time':>7s}  acceptance / KV")
    worst = (1.0, "")
    for rid, sec, args, measured in jobs:
        if a.ids and rid not in a.ids:
            continue
        t = time.perf_counter()
        r = bench(args)
        dt = time.perf_counter() - t
        if "error" in r:
            print(f"{rid:10s} {sec:3s} {'-':>11s} {measured:10.2f} {'-':>6s} {'-':>8s} {dt:6.1f}s  {r['error']}")
            rows.append({"id": rid, "error": r["error"], "measured": measured})
            worst = (float("inf"), rid)
            continue
        ratio = r["tok_s"] / measured
        off = max(ratio, 1 / ratio) if ratio > 0 else float("inf")
        if off > worst[0]:
            worst = (off, rid)
        kv = ", ".join(f"{k} {v:,}" for k, v in r["blocks"].items())
        print(f"{rid:10s} {sec:3s} {r['tok_s']:11.2f} {measured:10.2f} {ratio:6.2f} {r['tpot_ms']:8.2f} {dt:6.1f}s  "
              f"{r['acceptance']} / blocks {kv}")
        rows.append({"id": rid, "tok_s": r["tok_s"], "measured": measured, "ratio": ratio, "tpot_ms": r["tpot_ms"],
                     "blocks": r["blocks"],
                     **{k: r[k] for k in ("deployment", "concurrency", "isl", "osl", "chunk") if k in r}})
        if rid == "UCM-PD":
            tpot_err = r["tpot_ms"] / UCM_MEASURED["tpot_ms"] - 1
            kv_tok = r["blocks"].get("decode", 0) * BLOCK_TOKENS
            kv_err = kv_tok / UCM_MEASURED["decode_kv_tokens"] - 1
            print(f"{'':14s} UCM TPOT {r['tpot_ms']:.1f} ms vs 20.2 ({tpot_err:+.1%}, bar 15%); decode KV "
                  f"{kv_tok:,} tokens vs 235,008 ({kv_err:+.1%}, bar 2%)")
    print(f"worst row: {worst[1]} at {worst[0]:.2f}x ({'within' if worst[0] <= 1.3 else 'OUTSIDE'} 1.3x)")
    single_request_prices(rows)
    if a.json:
        json.dump(rows, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
