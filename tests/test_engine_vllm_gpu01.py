"""GPU-01 (GLM-5.2-FP8 on 8 x B200, vLLM 0.28, ../shared/data/published/gpu): the engine's budget
terms, the ledger's weights and the KV page give the measured "GPU KV cache size" for bf16 and fp8.

The forward-activation coefficient was fitted on the bf16 figure (estimates.py says so), so the bf16
check is a consistency check; the fp8 figure is independent of the fit: only the page changes
(576 B plain fp8 on Blackwell instead of 1152 B), and the same budget must give its token count."""
from __future__ import annotations

import json

import pytest

from auditor.devices.profiles import load_device
from auditor.engines.registry import resolve
from auditor.engines.vllm import budget, kv
from auditor.memory.audit import run_memory_audit
from auditor.parallel import ParallelPlan
from auditor.source import open_model


def _gpu01(shared_dir):
    obs = json.loads((shared_dir / "data" / "published" / "gpu" / "vllm-cuda-observations.json").read_text())
    return next(o for o in obs if o["id"] == "GPU-01")


@pytest.mark.parametrize("variant, figure", [("bf16", "gpu_kv_cache_tokens_bf16_default"),
                                             ("fp8", "gpu_kv_cache_tokens_kv_fp8")])
def test_gpu01_kv_tokens_within_2_percent(shared_dir, variant, figure):
    ob = _gpu01(shared_dir)
    cfg = ob["config"]
    L, T, gmu = cfg["max_model_len"], cfg["max_num_batched_tokens"], cfg["gpu_memory_utilization"]
    eng = resolve(f"vllm@{ob['engine_version']}")
    src = open_model(shared_dir / "data" / "configs" / "glm-5.2-fp8")
    plan = ParallelPlan(tp=8)
    weights = int(run_memory_audit(src, plan, eng).ledger.total.max())
    device = load_device("b200")
    act = eng.activation_peak(eng.activation_terms(src.spec, tokens=T, seqs=256, max_model_len=L))
    terms = budget.BudgetTerms(device.hbm_usable_bytes, gmu, weights, int(act),
                               sum(eng.non_torch_terms(plan).values()), eng.graph_deducted_bytes(),
                               eng.profile.cudagraph_profiled)
    layout = kv.resolve_layout(variant, arch=eng.soc(device), model_type=src.spec.model_type, prof=eng.profile)
    group = kv.worker_group(src.spec, plan, eng.profile, layout=layout)
    tokens = group.kv_tokens(group.num_blocks(terms.available_kv_bytes()), L)
    assert tokens == pytest.approx(ob["figures"][figure], rel=0.02)
    conc = group.max_concurrency(group.num_blocks(terms.available_kv_bytes()), L)
    key = "max_concurrency_at_32k_" + ("bf16" if variant == "bf16" else "fp8")
    assert conc == pytest.approx(ob["figures"][key], rel=0.02)
