"""The engine's own CI rows given for calibration (``../shared/data/published/README.md`` sections B, E and F):
each one ``audit bench`` argument list beside its measured output throughput.

Why here: ``benchmarks/bench_ci_corpus.py`` prints the table a closing note quotes, and the serving
calibration fits the DSA-CP prefill price on the rows of it that run DSA-CP (``auditor.ci_calibration``):
both read this one list. The configs stay in the shared data (``config`` is a path under its
``published/`` folder); the figures are the README's. Rows kept aside there for validation are not here.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CIRow:
    id: str
    section: str                # the published README's section
    config: str | None          # path under data/published/ read with --launch (None: ``extra`` says it all)
    case: str | None            # the aisbench case (--case); None: the config's one with a baseline
    extra: str                  # more audit options (a preset where the config's model is not readable here)
    measured: float             # output tok/s

    def argv(self, published: Path) -> list[str]:
        """``audit bench`` arguments of the row, its config read from ``published``."""
        head = ["--launch", str(published / self.config)] if self.config else []
        return head + (["--case", self.case] if self.case else []) + shlex.split(self.extra)


_GLM_E = (("E-PD20", "GLM-5.1-W8A8C8-3.5k-1.5k-0-20-PD.yaml", "perf_TPOT20", 1449.1316),
          ("E-PD50", "GLM-5.1-W8A8C8-3.5k-1.5k-0-50-PD.yaml", "perf_TPOT50", 8235.305),
          ("E-PD64k", "GLM-5.1-W8A8C8-64k-1k-90-50-PD.yaml", "perf", 2722.6),
          ("E-A3-20", "GLM-5.1-W8A8C8-A3_3.5k_1.5k_0_20.yaml", "perf_TPOT20", 321.4576),
          ("E-A3-50", "GLM-5.1-W8A8C8-A3_3.5k_1.5k_0_50.yaml", "perf_TPOT50", 1267.2573),
          ("E-A3-64k", "GLM-5.1-W8A8C8-A3_64k_90_50.yaml", "perf_64k", 687.4133))

#: P3a has no config file here (README section A: ``.../DeepSeek-V3_2-W8A8-EP.yaml``, not among the seven):
#: its flags as section A writes them, its workload as section B does
P3A = ("deepseek-v3.2 --recipe w8a8 "
       "--prefill '--tp 16 --dp 2 --ep 32 --max-model-len 133000 --max-num-batched-tokens 8192 --max-num-seqs 16 "
       "--gpu-memory-utilization 0.90 --mtp 2 --hccl-buffsize 360' "
       "--decode '--tp 4 --dp 8 --ep 32 --max-model-len 133000 --max-num-batched-tokens 42 --max-num-seqs 14 "
       "--gpu-memory-utilization 0.90 --mtp 2 --hccl-buffsize 1100' "
       "--concurrency 32 --isl 3500 --osl 1500 --num-prompts 128")

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

CI_ROWS: tuple[CIRow, ...] = (
    CIRow("P1", "B", "nightly/single_node__DeepSeek-V3.2-W8A8.yaml", None, "deepseek-v3.2", 192.0481),
    CIRow("P4", "B", "nightly/single_node__GLM-5.1-W8A8-PrefillMC2.yaml", None, "glm-5.1", 156.6562),
    CIRow("P5", "B", "nightly/multi_node_internal_dp__GLM5_1-W8A8-A2-dual-nodes.yaml", None,
          "glm-5.1 --device a2-313t", 314.1355),
    CIRow("P3a", "B", None, None, P3A, 983.2904),
    CIRow("P6", "B", "nightly/multi_node_internal_dp__GLM5_1-W8A8-A3-dual-nodes.yaml", None, "glm-5.1", 34.49),
    CIRow("P8", "B", "nightly/multi_node_internal_dp__GLM-5.1-W8A8C8-A3_128k_90_50.yaml", None, "glm-5.1",
          290.8308),
    *(CIRow(rid, "E", f"weekly/{f}", case, "glm-5.1", tok) for rid, f, case, tok in _GLM_E),
    # the weekly DeepSeek-V3.2 file's six measured cases (its first test case; README section E)
    *(CIRow(f"E-DS{ctx}-{bs}", "E", "weekly/DeepSeek-V3.2-W8A8_A3_weekly.yaml", f"perf_{ctx * 1024}_bs{bs}",
            "deepseek-v3.2", tok)
      for ctx, bs, tok in ((16, 4, 26.1), (16, 16, 60.53), (32, 4, 22.68), (32, 8, 32.73), (64, 4, 22.77),
                           (64, 8, 33.8))),
    CIRow("UCM-PD", "E", None, None, UCM, UCM_MEASURED["tok_s"]),
    # DeepSeek-V4 (section F): the configs' model names fall back to the presets they imply
    CIRow("F-A3", "F", "deepseek-v4/DeepSeek-V4-Flash-W8A8-A3.yaml", None, "", 181.8813),
    CIRow("F-PD1024", "F", "deepseek-v4/DeepSeek-V4-flash-w8a8-PD-no-prefix.yaml", "perf_TPOT50_3_5_1_5", "",
          15569.48),
    CIRow("F-PD100", "F", "deepseek-v4/DeepSeek-V4-flash-w8a8-PD-no-prefix.yaml", "perf_TPOT20_3_5_1_5", "",
          4071.471),
    CIRow("F-Pro1M", "F", "deepseek-v4/DeepSeek-V4-Pro-w4a8-1M-PD.yaml", None, "", 11.93),
)


def published_dir(shared: Path | None = None) -> Path:
    """``data/published`` of the shared reference data (default: ``../shared`` beside the checkout)."""
    root = shared if shared is not None else Path(__file__).resolve().parents[2].parent / "shared"
    return root / "data" / "published"


__all__ = ["CIRow", "CI_ROWS", "P3A", "UCM", "UCM_MEASURED", "published_dir"]
