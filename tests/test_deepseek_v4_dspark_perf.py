"""The DSpark drafter's step in perf, bench, sweep and plan (vLLM-Ascend main 182b75ea, ``perf.dspark``).

Every expected figure is worked by hand from the engine's code as model-deepseek-v4.md §1.6 and the
proposer read it: per step, ``main_proj`` [T, 3H] -> H over every token the step ran
(``dspark.py:201-202``), each draft layer's ``wkv`` over the same tokens (``:239-253``), K query tokens
per request through the window-only draft layers (``dspark_proposer.py:42-46``), the LM head on those
K x requests rows and K Markov rounds of ``markov_w2`` [V, 256] on one row per request
(``llm_base_proposer.py:1141-1158``); the proposer never captures a graph (``dspark_proposer.py:76``).
Flash's sizes (H 4096, V 129,280, 64 heads of 512, window 128) are the real config's; the DSpark keys
(3 target layers, Markov rank 256) the single third-party copy the preset is written from (UNCONFIRMED).
"""
from __future__ import annotations

import json

import pytest

from auditor.cli import main

H, V, NH, D, W = 4096, 129280, 64, 512, 128
TARGETS, RANK, DRAFT_LAYERS = 3, 256, 3
GOLDENS = (0.88, 0.74, 0.58, 0.49, 0.40, 0.30, 0.18)   # test_dspark_deepseekv4.py:38-53@182b75ea


def _json(args, capsys):
    assert main(args + ["--format", "json"]) == 0
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def _decode(capsys, tp=4, batch=8, k=7, context=4096):
    return _json(["perf", "deepseek-v4-flash-0731", "--tp", str(tp), "--dp", "4", "--ep", "on", "--mtp", str(k),
                  "--phase", "decode", "--batch", str(batch), "--context", str(context), "--device", "a3-752t"],
                 capsys)


def test_dspark_step_ops_by_hand(capsys):
    tp, B, k, c = 4, 8, 7, 4096
    rep = _decode(capsys, tp, B, k, c)
    ops = rep["ops"]

    def named(name):
        return [o for o in ops if o["name"] == name]

    # 1. context: every token the step verified (B x (1 + K)), once per step
    (mp,) = named("dspark.main_proj")
    assert mp["tokens"] == B * (1 + k)
    assert mp["mma_flops"] == 2 * B * (1 + k) * TARGETS * H * H
    wkv = [o for o in ops if o["name"].endswith(".context_wkv")]
    assert len(wkv) == DRAFT_LAYERS and all(o["tokens"] == B * (1 + k) for o in wkv)
    assert all(o["mma_flops"] == 2 * B * (1 + k) * H * D for o in wkv)
    # 2. the query block: K tokens per request, through each draft layer once, window attention only
    (emb,) = named("dspark.embed_tokens")
    assert emb["tokens"] == B * k
    draft_attn = [o for o in named("self_attn.window_attention") if o["layer"] >= 43]
    assert [o["layer"] for o in draft_attn] == [43, 44, 45]
    # each of the B x K queries attends min(context + i, W) = W rows of 512 (QK and PV: 4 D per row), 64 / TP heads
    assert all(o["tokens"] == B * k and o["mma_flops"] == 4 * D * W * (NH // tp) * B * k for o in draft_attn)
    assert not [o for o in ops if o["layer"] is not None and o["layer"] >= 43 and "compress" in o["name"]]
    (head,) = named("dspark.lm_head")
    assert head["tokens"] == B * k and head["mma_flops"] == 2 * B * k * H * (V // tp)
    # 3. K Markov rounds, one row per request each, markov_w2 read every round
    w2 = named("dspark.markov_w2")
    assert len(w2) == k and [o["pass"] for o in w2] == list(range(1, k + 1))
    assert all(o["tokens"] == B and o["mma_flops"] == 2 * B * RANK * (V // tp) for o in w2)
    assert all(o["weight_bytes"] == w2[0]["weight_bytes"] > 0 for o in w2)
    # no MTP pass structure: nothing of the drafter beyond pass 1 but the Markov rounds
    later = {o["name"] for o in ops if (o.get("pass") or 0) > 1}
    assert later == {"dspark.markov_w1", "dspark.markov_w2", "dspark.markov_add_argmax"}
    # the step yields 1 + p1 + ... + p7 tokens per request (the goldens, no geometric form)
    assert rep["totals"]["tokens"] == pytest.approx(B * (1 + sum(GOLDENS)))
    assert any("DSpark: the block drafter runs once per step" in n for n in rep["notes"])


def test_dspark_block_tracks_k(capsys):
    """K = 5 (the v0.25 tutorial's): five query tokens and five Markov rounds; the context is B x 6."""
    rep = _decode(capsys, k=5)
    (mp,) = [o for o in rep["ops"] if o["name"] == "dspark.main_proj"]
    (emb,) = [o for o in rep["ops"] if o["name"] == "dspark.embed_tokens"]
    assert mp["tokens"] == 8 * 6 and emb["tokens"] == 8 * 5
    assert len([o for o in rep["ops"] if o["name"] == "dspark.markov_w2"]) == 5
    assert rep["totals"]["tokens"] == pytest.approx(8 * (1 + sum(GOLDENS[:5])))


def test_dspark_drafter_is_host_time_of_every_step():
    """The proposer is eager (dspark_proposer.py:76): its launches are host time of a graph decode step,
    where a DeepSeek-V4 MTP drafter without enforce_eager is captured with the step (no drafter launches)."""
    from auditor.context import DeploymentContext
    from auditor.devices.profiles import load_device
    from auditor.parallel import ParallelPlan
    from auditor.perf.host import host_model, launch_counts
    from auditor.perf.program import build_program
    from auditor.source import open_model

    def model(name, k):
        src = open_model(name, "w8a8", tables=False)
        plan = ParallelPlan(tp=4, dp=4, ep=16, mtp=True, num_speculative_tokens=k)
        dep = DeploymentContext(src.spec, plan, "vllm-ascend@main", src.scheme_recipe, load_device("a3-752t"))
        pre, dec = build_program(dep, "prefill", "repetition"), build_program(dep, "decode", "repetition")
        return host_model(src.spec, pre, dec, k, dep.device, engine="vllm-ascend@main"), dec

    hm, dec = model("deepseek-v4-flash-0731", 7)
    _, draft = launch_counts(dec.arrays(), 7)
    assert hm.launches_draft == draft > 0
    # the Markov rounds launch K times: embedding, head, add/argmax and the two collectives per round
    _, draft5 = launch_counts(dec.arrays(), 5)
    assert draft - draft5 == 2 * 5
    mtp, _ = model("deepseek-v4-flash", 1)
    assert mtp.launches_draft == 0


def test_bench_uses_the_dspark_goldens(capsys):
    rep = _json(["bench", "deepseek-v4-flash-0731", "--tp", "4", "--dp", "4", "--ep", "on", "--mtp", "7",
                 "--device", "a3-752t", "--max-model-len", "65536", "--concurrency", "8", "--isl", "2000",
                 "--osl", "200", "--num-prompts", "16"], capsys)
    assert rep["completed"] == 16 and rep["output_throughput"] > 0
    # every request decodes osl - 1 tokens after its first in about (osl - 1) / 4.57 steps of 1 + 7 verified
    tokens_per_step = 1 + sum(GOLDENS)
    assert rep["mean_tpot_ms"] > 0
    text = json.dumps(rep)
    assert "DSpark goldens" in text and f"{tokens_per_step:.2f}" in text


def test_tutorial_claim_dspark_about_twice_mtp(capsys):
    """The A2 DSpark tutorial (DeepSeek-V4-Flash.md:201-222@182b75ea, model-deepseek-v4.md §6.2): one
    request reaches "more than 50" tokens/s and "2X" MTP's. Not fitted: a check of the prediction."""
    common = ["--ep", "on", "--device", "a2-376t", "--recipe", "w4a8", "--tp", "8", "--max-model-len", "800000",
              "--max-num-batched-tokens", "8192", "--max-num-seqs", "32", "--block-size", "128",
              "--concurrency", "1", "--isl", "3500", "--osl", "1500", "--num-prompts", "4"]
    ds = _json(["bench", "deepseek-v4-flash-0731", "--mtp", "7", *common], capsys)["output_throughput"]
    mtp = _json(["bench", "deepseek-v4-flash", "--mtp", "1", *common], capsys)["output_throughput"]
    assert ds > 50
    assert 1.5 <= ds / mtp <= 3.0, (ds, mtp)


def test_plan_searches_dspark_k_and_launches_method_dspark(capsys):
    rep = _json(["plan", "deepseek-v4-flash-0731", "--device", "a3-752t", "--dies", "16", "--ttft-ms", "2000",
                 "--tpot-ms", "50", "--isl", "1000", "--osl", "100", "--no-disagg", "--simulate", "1"], capsys)
    assert rep["mtp_acceptance"] == list(GOLDENS)
    ks = {r["mtp"] for r in rep["best"]}
    assert ks and ks <= {0, 5, 6, 7}
    spec_cfg = [a for inst in rep["launch"] for a in inst["args"] if a.startswith("--speculative-config")]
    assert spec_cfg and all('"method": "dspark"' in a for a in spec_cfg)


def test_plan_refuses_a_dspark_k_below_five(capsys):
    assert main(["plan", "deepseek-v4-flash-0731", "--device", "a3-752t", "--dies", "16", "--ttft-ms", "2000",
                 "--tpot-ms", "50", "--isl", "1000", "--osl", "100", "--mtp", "1,3,7"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("audit: error")]
    assert len(err) == 1 and "K >= 5" in err[0] and "1,3" in err[0]
