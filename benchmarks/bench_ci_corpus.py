"""audit bench on the engine's own CI corpus: every calibration row of the published README's sections B
and E read with ``audit bench --launch <config> [--case NAME]``, beside the measured throughput (issue 29),
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
import shlex
import sys
import time
from pathlib import Path

#: (id, section, config under data/published/, --case, extra audit options, measured output tok/s)
CI_ROWS: tuple[tuple[str, str, str, str | None, str, float], ...] = (
    ("P1", "B", "nightly/single_node__DeepSeek-V3.2-W8A8.yaml", None, "deepseek-v3.2", 192.0481),
    ("P4", "B", "nightly/single_node__GLM-5.1-W8A8-PrefillMC2.yaml", None, "glm-5.1", 156.6562),
    ("P5", "B", "nightly/multi_node_internal_dp__GLM5_1-W8A8-A2-dual-nodes.yaml", None, "glm-5.1 --device a2-313t",
     314.1355),
    ("P6", "B", "nightly/multi_node_internal_dp__GLM5_1-W8A8-A3-dual-nodes.yaml", None, "glm-5.1", 34.49),
    ("P8", "B", "nightly/multi_node_internal_dp__GLM-5.1-W8A8C8-A3_128k_90_50.yaml", None, "glm-5.1", 290.8308),
    ("E-PD20", "E", "weekly/GLM-5.1-W8A8C8-3.5k-1.5k-0-20-PD.yaml", "perf_TPOT20", "glm-5.1", 1449.1316),
    ("E-PD50", "E", "weekly/GLM-5.1-W8A8C8-3.5k-1.5k-0-50-PD.yaml", "perf_TPOT50", "glm-5.1", 8235.305),
    ("E-PD64k", "E", "weekly/GLM-5.1-W8A8C8-64k-1k-90-50-PD.yaml", "perf", "glm-5.1", 2722.6),
    ("E-A3-20", "E", "weekly/GLM-5.1-W8A8C8-A3_3.5k_1.5k_0_20.yaml", "perf_TPOT20", "glm-5.1", 321.4576),
    ("E-A3-50", "E", "weekly/GLM-5.1-W8A8C8-A3_3.5k_1.5k_0_50.yaml", "perf_TPOT50", "glm-5.1", 1267.2573),
    ("E-A3-64k", "E", "weekly/GLM-5.1-W8A8C8-A3_64k_90_50.yaml", "perf_64k", "glm-5.1", 687.4133),
) + tuple(
    # the weekly DeepSeek-V3.2 file's six measured cases (its first test case; README section E)
    (f"E-DS{ctx}-{bs}", "E", "weekly/DeepSeek-V3.2-W8A8_A3_weekly.yaml", f"perf_{ctx * 1024}_bs{bs}", "deepseek-v3.2",
     tok) for ctx, bs, tok in ((16, 4, 26.1), (16, 16, 60.53), (32, 4, 22.68), (32, 8, 32.73), (64, 4, 22.77),
                               (64, 8, 33.8)))

#: P3a has no config file here (README section A: ``.../DeepSeek-V3_2-W8A8-EP.yaml``, not among the seven):
#: its flags as section A writes them, its workload as section B does
P3A = ("deepseek-v3.2 --recipe w8a8 "
       "--prefill '--tp 16 --dp 2 --ep 32 --max-model-len 133000 --max-num-batched-tokens 8192 --max-num-seqs 16 "
       "--gpu-memory-utilization 0.90 --mtp 2 --hccl-buffsize 360' "
       "--decode '--tp 4 --dp 8 --ep 32 --max-model-len 133000 --max-num-batched-tokens 42 --max-num-seqs 14 "
       "--gpu-memory-utilization 0.90 --mtp 2 --hccl-buffsize 1100' "
       "--concurrency 32 --isl 3500 --osl 1500 --num-prompts 128", 983.2904)

#: the UCM 4-node GLM-5.1 P/D report (README section E, "two more public measurements"): vLLM-Ascend
#: 0.18.0rc1, P DP4 TP8 EP32 FlashComm1 FUSED_MC2=1 eager, D DP8 TP4 EP32 graphs up to 32 tokens
#: --async-scheduling, HCCL_BUFFSIZE 256; measured 314.1 tok/s, TPOT 20.2 ms, decode KV 235,008 tokens
UCM = ("glm-5.1 --recipe w8a8 --engine vllm-ascend@0.18.0 "
       "--prefill '--tp 8 --dp 4 --ep 32 --sp --fused-mc2 1 --max-model-len 202752 --max-num-batched-tokens 4096 "
       "--max-num-seqs 64 --gpu-memory-utilization 0.95 --mtp 3 --hccl-buffsize 256 --graph-max-tokens 0' "
       "--decode '--tp 4 --dp 8 --ep 32 --fused-mc2 1 --max-model-len 202752 --max-num-batched-tokens 32 "
       "--max-num-seqs 8 --gpu-memory-utilization 0.92 --mtp 3 --hccl-buffsize 256 --graph-max-tokens 32 "
       "--async-scheduling' "
       "--concurrency 20 --isl 65536 --osl 1024 --num-prompts 80 --no-prefix-caching")
UCM_MEASURED = {"tok_s": 314.1, "tpot_ms": 20.2, "decode_kv_tokens": 235_008}
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
    return {"tok_s": tok, "tpot_ms": tpot, "blocks": blocks, "acceptance": acc.group(1) if acc else "",
            "stderr": err}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default="/work/shared", help="the shared data directory")
    ap.add_argument("--json", action="store_true", help="also print the rows as JSON")
    ap.add_argument("ids", nargs="*", help="only these rows (default: all)")
    a = ap.parse_args()
    pub = Path(a.shared) / "data" / "published"
    rows: list[dict] = []
    jobs = [(rid, sec, ["--launch", str(pub / f)] + (["--case", case] if case else []) + shlex.split(extra),
             measured) for rid, sec, f, case, extra, measured in CI_ROWS]
    jobs.insert(3, ("P3a", "B", shlex.split(P3A[0]), P3A[1]))
    jobs.append(("UCM-PD", "E", shlex.split(UCM), UCM_MEASURED["tok_s"]))
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
                     "blocks": r["blocks"]})
        if rid == "UCM-PD":
            tpot_err = r["tpot_ms"] / UCM_MEASURED["tpot_ms"] - 1
            kv_tok = r["blocks"].get("decode", 0) * BLOCK_TOKENS
            kv_err = kv_tok / UCM_MEASURED["decode_kv_tokens"] - 1
            print(f"{'':14s} UCM TPOT {r['tpot_ms']:.1f} ms vs 20.2 ({tpot_err:+.1%}, bar 15%); decode KV "
                  f"{kv_tok:,} tokens vs 235,008 ({kv_err:+.1%}, bar 2%)")
    print(f"worst row: {worst[1]} at {worst[0]:.2f}x ({'within' if worst[0] <= 1.3 else 'OUTSIDE'} 1.3x)")
    if a.json:
        json.dump(rows, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
