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


#: GPU-01's two rows the budget does not bring within 1% (GLM-5.2-FP8, 8 x B200, v0.28, fp8 KV, max_model_len
#: 16384, gmu 0.93; max_num_batched_tokens as the observation's config gives it, 8192). Hand figures, from the
#: observed tokens x the KV page (78 x 576 + 21 x 132 = 47,700 B/token; with MTP 79 x 576 + 22 x 132 = 48,408):
#: the main fp8 row 1,546,112 tokens = 68.69 GiB of KV, this row 1,571,008 = 69.79 GiB, the MTP 2 row 1,472,768
#: = 66.40 GiB.
GPU01_UNMODELLED = {
    "gpu_kv_cache_tokens_fp8_mml16384_gmu0.93": (
        "predicted 1,588,928 tokens (+1.1%): from the 0.92 / 32K row the KV memory grows by 1.10 GiB where gmu "
        "+0.01 x 178.34 GiB and the smaller FlashMLA prefill workspace (-0.09 GiB) give +1.87 GiB, so 0.77 GiB more "
        "non-KV memory than the model has. No term that depends on gmu or max_model_len grows; the run is most "
        "likely GPU-02's rerun (its label: max_num_batched_tokens 16384, async), and the missing term is the "
        "profile run's torch peak as a function of T: the spec gives no formula, the forward term is fitted at one "
        "T (8,192) as T x H x 92 B, and at T 16,384 that linear form predicts -5.1% (+4.31 GiB where the run shows "
        "about +0.7 GiB). A fixed/per-token split needs a second measured T, not these rows"),
    "gpu_kv_cache_tokens_fp8_mml16384_gmu0.93_mtp2": (
        "predicted 1,529,856 tokens (+3.9%): MTP 2 lowers the KV memory by 3.39 GiB against the row without it; "
        "the model has the drafter's decoder layer (+1.32 GiB in 'Model loading took', embed/lm_head/topk buffer "
        "shared, spec §1.4), its KV layer (page 47,700 -> 48,408 B/token) and the sampler's (1 + K) fp32 logits "
        "(+0.30 GiB): 1.61 GiB. The missing 1.78 GiB is what the spec gives no figure for: the CUDA-graph "
        "estimate as a function of MTP (the drafter's own graphs and capture sizes of (1 + K) x max_num_seqs; the "
        "one figure is GPU-04's 1.58 GiB, DeepSeek-V4-Flash TP2, 68 graphs) and the rejection sampler's "
        "probability buffers in the profile run"),
}


@pytest.mark.parametrize("figure, mtp", [
    pytest.param(k, 2 if k.endswith("mtp2") else 0, marks=pytest.mark.xfail(strict=True, reason=why))
    for k, why in GPU01_UNMODELLED.items()])
def test_gpu01_mml16384_gmu093_rows_within_1_percent(shared_dir, capsys, figure, mtp):
    from auditor.cli import main
    ob = _gpu01(shared_dir)
    argv = ["memory", str(shared_dir / "data" / "configs" / "glm-5.2-fp8"), "--engine", f"vllm@{ob['engine_version']}",
            "--device", "b200", "--tp", "8", "--kv-cache-dtype", "fp8", "--max-model-len", "16384",
            "--gpu-memory-utilization", "0.93",
            "--max-num-batched-tokens", str(ob["config"]["max_num_batched_tokens"]), "--format", "json"]
    assert main(argv + (["--mtp", str(mtp)] if mtp else [])) == 0
    tokens = json.loads(capsys.readouterr().out)["runtime"]["kv_tokens"]
    assert tokens == pytest.approx(ob["figures"][figure], rel=0.01)
