"""Issue 11: the context-dependent ops as the engine runs them (docs/long-context-kernels.md), the
decode/prefill consistency, the host overhead line and the context-growth report.

Expected numbers are written out from GLM-5.1's dimensions (IH 32, ID 128, Lkv 512, Dr 64, top-k
2048, 64 heads) and the kernel facts of the doc: 8-query-row indexer tiles, 4.36 S_k + 3.32 k sort
ops per query row, per-token SFA gathers of 1152-byte entries, LI-C8 int8 keys with an fp16 scale.
"""
from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from auditor.context import DeploymentContext
from auditor.cli import cli
from auditor.devices.profiles import device_from_json
from auditor.model.presets import preset_spec
from auditor.parallel import ParallelPlan
from auditor.perf.api import Workload, evaluate

SPEC = preset_spec("glm-5.1")
ENGINE = "vllm-ascend@main"
DEV = device_from_json({
    "name": "t", "mma_flops": {"F32": 99.5e12, "BF16": 353.9e12, "I8": 752e12},
    "vector_flops": {"F32": 11e12, "BF16": 22e12}, "hbm_bytes_per_s": 1.6 * 2 ** 40,
    "hbm_capacity_bytes": 64 * 2 ** 30,
    "efficiency": {"compute": 0.7, "memory": 0.6, "sfa_kv": 1.0, "indexer_cache": 0.6, "comm": 0.7},
    "static_us": {"mma": 5.0, "gp": 2.0, "comm": 10.0}, "grid": [16],
    "tiers": [{"bytes_per_s": 196e9, "latency_us": 0.5}],
    "serving": {"launch_us": 100.0, "prefill_token_us": 10.0, "decode_token_us": 0.0, "step_ms": 30.0},
})
PLAN = ParallelPlan(tp=4, dp=1, ep=4)          # no SP: every rank runs all queries (frac = 1)
CONTEXT_OPS = ("self_attn.sfa", "self_attn.indexer.score", "self_attn.indexer.topk")


def layer_op(js: dict, name: str, layer: int = 5) -> dict:
    (o,) = [o for o in js["ops"] if o["name"] == name and o["layer"] == layer and o.get("pass") is None]
    return o


def run(phase: str, tokens: int, context: int, mtp: int = 0, cache: str = "bf16", plan=PLAN) -> dict:
    wl = Workload(phase, tokens, context, 1, mtp)
    return evaluate(DeploymentContext(SPEC, plan, ENGINE, "w8a8", DEV), wl, cache=cache).to_json()


@pytest.mark.parametrize("c0", [0, 2000, 40000])
def test_decode_steps_sum_to_the_prefill_of_the_range(c0):
    """n single-token decode steps at contexts c0 .. c0+n-1 do the work of one n-token prefill on c0
    cached tokens, op by op: FLOPs, vector and sort ops, SFA gather bytes. Indexer key reads are the
    documented exception (prefill re-reads a request's keys once per 8-row tile, decode once per step)."""
    n = 24
    pre = run("prefill", n, c0)
    steps = [run("decode", n, c0 + i) for i in range(n)]
    for name in CONTEXT_OPS:
        p = layer_op(pre, name)
        for key in ("mma_flops", "vector_flops", "vector_sort_ops"):
            assert sum(layer_op(s, name)[key] for s in steps) == pytest.approx(p[key], rel=1e-9), (name, key)
    # SFA: every query row gathers its own min(ctx + i, 2048) entries of 1152 bytes, in both phases
    gathered = sum(min(c0 + i, 2048) for i in range(1, n + 1)) * 1152
    q_out = 16 * (576 + 512) * 2 + 2048 * 4       # per token: q in + out, 16 local heads, top-k indices
    assert layer_op(pre, "self_attn.sfa")["bytes"] == pytest.approx(gathered + n * q_out)
    assert sum(layer_op(s, "self_attn.sfa")["bytes"] for s in steps) == pytest.approx(gathered + n * q_out)


def test_mtp_decode_indexer_per_request_sfa_per_token():
    """MTP 3: the 4 verified rows of a request share one 8-row indexer tile (keys read once), while
    SFA gathers the top-k of every row (docs §4)."""
    c = 131072
    js = run("decode", 4096, c, mtp=3)
    idx = layer_op(js, "self_attn.indexer.score")
    keys = sum(c + i for i in range(1, 5))
    assert idx["mma_flops"] == pytest.approx(2 * keys * 32 * 128)
    assert idx["bytes"] == pytest.approx(4 * 32 * 128 * 2 + 4 * 32 * 4 + 1 * (c + 4) * 256)
    sfa = layer_op(js, "self_attn.sfa")
    assert sfa["bytes"] == pytest.approx(4 * 2048 * 1152 + 4 * (16 * 1088 * 2 + 2048 * 4))
    topk = layer_op(js, "self_attn.indexer.topk")
    assert topk["vector_sort_ops"] == pytest.approx(4.36 * keys + 3.32 * 2048 * 4)


def test_prefill_chunk_at_128k_hand_calculation():
    """A 4096-token chunk on 126,976 cached tokens: the indexer's Cube, vector and sort work and the
    key re-reads, each by hand, and the op time as max(compute, memory) + launch."""
    q, c = 4096, 126976
    js = run("prefill", q, c)
    keys = q * c + q * (q + 1) / 2
    idx = layer_op(js, "self_attn.indexer.score")
    mma, vec = 2 * keys * 32 * 128, 8 * keys * 32
    nbytes = q * 32 * 128 * 2 + q * 32 * 4 + (q // 8) * (c + q) * 256
    assert idx["mma_flops"] == pytest.approx(mma) and idx["vector_flops"] == pytest.approx(vec)
    assert idx["bytes"] == pytest.approx(nbytes)
    t_c = (mma / 353.9e12 + vec / 22e12) / 0.7
    t_m = (q * 32 * 128 * 2 + q * 32 * 4) / (1.6 * 2 ** 40 * 0.6) + (q // 8) * (c + q) * 256 / (1.6 * 2 ** 40 * 0.6)
    assert idx["time_us"] == pytest.approx((max(t_c, t_m) + 5e-6) * 1e6)
    topk = layer_op(js, "self_attn.indexer.topk")
    assert topk["time_us"] == pytest.approx((4.36 * keys + 3.32 * 2048 * q) / (11e12 / 16) / 0.7 * 1e6)
    # SFA is capped: past 2048 cached tokens its work per query row no longer grows
    again = run("prefill", q, 2 * c)
    assert layer_op(again, "self_attn.sfa")["time_us"] == pytest.approx(layer_op(js, "self_attn.sfa")["time_us"])
    assert layer_op(again, "self_attn.indexer.score")["time_us"] > 1.9 * idx["time_us"]


def test_li_c8_path_int8_keys_and_cube_side_weighting():
    q, c = 64, 10000
    js = run("prefill", q, c, cache="c8-indexer")
    idx = layer_op(js, "self_attn.indexer.score")
    keys = q * c + q * (q + 1) / 2
    assert idx["dtype"] == "I8"
    assert idx["vector_flops"] == pytest.approx(4 * keys)          # one fp32 k-scale op per (row, key)
    tiles = math.ceil(q / (256 // 32))                              # M_BASE_SIZE 256 / 32 heads = 8 rows
    assert idx["bytes"] == pytest.approx(q * 32 * 128 * 2 + q * 32 * 4 + tiles * (c + q) * (128 + 2))
    sfa_bf16 = layer_op(run("prefill", q, c), "self_attn.sfa")
    sfa_c8 = layer_op(run("prefill", q, c, cache="c8"), "self_attn.sfa")
    entries = q * 2048
    assert sfa_bf16["bytes"] - sfa_c8["bytes"] == pytest.approx(entries * (1152 - 656))


def _launches(js: dict) -> int:
    """Kernels and collectives one step launches: every op but layout ops and the top-k fused into the
    indexer, every collective (the JSON lists one entry per op per layer per MTP pass)."""
    ops = [o for o in js["ops"] if o["kind"] not in ("layout", "indexer_topk")]
    return len(ops) + len(js["collectives"])


def test_host_overhead_is_its_own_term():
    # the serving host model (auditor.perf.host): an eager prefill step pays 100 us per launch, 10 us per
    # prefill token and the 30 ms step; a graph decode step pays the step and, GLM's drafter being eager,
    # 100 us per launch of its 3 passes
    pre = run("prefill", 512, 0, mtp=3)
    dec = run("decode", 512, 512, mtp=3)
    draft = [o for o in dec["ops"] if o.get("pass") is not None and o["kind"] not in ("layout", "indexer_topk")]
    draft_colls = [c for c in dec["collectives"] if c.get("pass") is not None]
    for js, host in ((pre, _launches(pre) * 0.1 + 512 * 0.01 + 30.0),
                     (dec, 30.0 + (len(draft) + len(draft_colls)) * 0.1)):
        t = sum(o["time_us"] for o in js["ops"]) + sum(c["time_us"] for c in js["collectives"])
        assert js["totals"]["host_ms"] == pytest.approx(host)
        assert js["totals"]["time_ms"] == pytest.approx(t / 1e3 + host)


def test_perf_both_prints_host_line_and_context_column():
    r = CliRunner().invoke(cli, ["perf", "--tp", "16", "--ep", "16", "--mtp", "3", "--recipe", "w4a8",
                                 "--phase", "both", "--context", "32000"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    host_rows = [ln.split() for ln in lines if ln.startswith("host ")]
    assert len(host_rows) == 2 and all(float(row[-1]) > 0 for row in host_rows)
    head = next(ln for ln in lines if ln.startswith("op ")).split()
    assert "context" in head
    col = head.index("context")
    sfa = next(ln for ln in lines if ln.startswith("self_attn.sfa ") and "pass" not in ln)
    experts = next(ln for ln in lines if ln.startswith("mlp.experts "))
    assert "grows" in sfa.split() and "grows" not in experts.split()
    assert col > 0


def test_contexts_table_shows_which_ops_grow(tmp_path):
    out = tmp_path / "g.json"
    args = ["perf", "--tp", "16", "--ep", "16", "--mtp", "3", "--recipe", "w4a8", "--contexts", "4K,32K,128K"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert "== context growth, prefill" in r.output and "== context growth, decode" in r.output
    rows = {ln.split()[0]: ln.split() for ln in r.output.split("== context growth, prefill")[1]
            .split("== context growth, decode")[0].splitlines() if ln and ln.split()[0] in
            ("indexer_score", "linear", "sfa")}
    assert rows["indexer_score"][1] == "grows" and rows["sfa"][1] == "grows" and rows["linear"][1] != "grows"
    # linear does not depend on the context: the same ms at every length, ratio 1.00
    assert len(set(rows["linear"][1:4])) == 1 and rows["linear"][-1] == "1.00"
    r = CliRunner().invoke(cli, args + ["--format", "json", "-o", str(out)])
    assert r.exit_code == 0, r.output
    g = json.loads(out.read_text())["context_growth"]
    assert g["contexts"] == [4096, 32768, 131072]
    assert set(g["context_dependent"]) == {"sfa", "indexer_score", "indexer_topk"}
    pre = g["by_class_ms"]["prefill"]
    assert pre["indexer_score"][2] > 10 * pre["indexer_score"][0]
    assert sum(v[1] for v in pre.values()) == pytest.approx(g["totals_ms"]["prefill"][1])


@pytest.mark.parametrize("bad", ["4K,2K", "x", "0", "4K,", "4.5"])
def test_bad_contexts_one_line(bad, capsys):
    from auditor.cli import main

    assert main(["perf", "--tp", "16", "--contexts", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("audit: error: --contexts") and "Traceback" not in err


def test_png_marks_context_dependent_classes(tmp_path):
    from auditor.perf.api import PerfResult
    from auditor.report.perf_png import CTX_SUFFIX, context_classes, perf_figure

    js = evaluate(DeploymentContext(SPEC, PLAN, ENGINE, "w8a8", DEV), Workload("prefill", 1024, 60000))
    assert context_classes(js) == {"sfa", "indexer_score", "indexer_topk"}
    fig = perf_figure(PerfResult(js.model, PLAN, ENGINE, "w8a8", "t", "expanded", js.phases))
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "indexer_score" + CTX_SUFFIX in labels and "linear" in labels
    assert not any(lab.startswith("linear") and CTX_SUFFIX in lab for lab in labels)


def test_mtp_acceptance_turns_steps_into_tokens():
    wl = Workload("decode", 1024, 1024, 2, 3, acceptance=0.5)
    ph = evaluate(DeploymentContext(SPEC, PLAN, ENGINE, "w8a8", DEV), wl).phases["decode"]
    assert ph.tokens == pytest.approx(2 * (1 + 0.5 + 0.25 + 0.125))
    assert ph.tokens_per_s == pytest.approx(2 * 1.875 / ph.time_s)


def test_dcp_splits_sfa_gathers_and_adds_two_collectives_per_layer():
    """DCP = TP = 4 (SFA "replicated indexer", research serving-facts §5): each rank attends all 64 heads
    over 1/4 of the selected entries, the indexer is untouched, and per layer the query [T, 64/4, 576] bf16
    is all-gathered and the partial output + LSE [T, 64, 512 bf16 + 4] x 3/4 goes by all-to-all."""
    q, c = 4, 40000                                  # one decode step of 1 + MTP 3 tokens at 40k context
    plan = ParallelPlan(tp=4, dp=1, ep=4)
    base = run("decode", q, c, mtp=3, plan=plan)
    dcp = run("decode", q, c, mtp=3, plan=plan.with_(dcp=4))
    s0, s1 = layer_op(base, "self_attn.sfa"), layer_op(dcp, "self_attn.sfa")
    entries = q * 2048                              # 4 query rows x top-2048 (context past the cap)
    # base: 16 local heads, every entry gathered (1152 B); DCP: 64 heads, a quarter of the entries
    assert s0["bytes"] == pytest.approx(entries * 1152 + q * 16 * (576 + 512) * 2 + q * 2048 * 4)
    assert s1["bytes"] == pytest.approx(entries / 4 * 1152 + q * 64 * (576 + 512) * 2 + q * 2048 * 4)
    assert s1["mma_flops"] == pytest.approx(s0["mma_flops"])        # 4x heads over 1/4 of the pairs
    assert layer_op(dcp, "self_attn.indexer.score") == layer_op(base, "self_attn.indexer.score")
    colls = {cl["tensor"]: cl for cl in dcp["collectives"] if cl["layer"] == 5 and cl.get("pass") is None}
    assert colls["self_attn.dcp_query"]["kind"] == "all_gather"
    assert colls["self_attn.dcp_query"]["bytes"] == q * 64 / 4 * 576 * 2
    assert colls["self_attn.dcp_out_lse"]["kind"] == "all_to_all"
    assert colls["self_attn.dcp_out_lse"]["bytes"] == pytest.approx(q * 64 * (512 * 2 + 4) * 3 / 4)
    # prefill is unchanged (each rank attends its own queries over the gathered KV; no LSE merge)
    assert layer_op(run("prefill", 64, c, plan=plan.with_(dcp=4)), "self_attn.sfa") == \
        layer_op(run("prefill", 64, c, plan=plan), "self_attn.sfa")


def test_dcp_prefill_gathers_the_requests_cache_over_the_dcp_group():
    """A prefill step under SFA DCP (sfa_cp.py:849-887 @182b75ea): each rank index-selects its 1/4 of the
    step's requests' main-cache blocks (context + the chunk just written, 1152 B bf16 entries) and
    all-gathers them over the DCP group, every layer; decode has no such gather. The bytes grow with the
    context, and the sweep kernel's split (context-independent part at context 0 + context part) adds up
    to the full evaluation."""
    import numpy as np
    from auditor_kernels.perf_core import ALL_PARTS, CTX_PART, REST_PART, partial_time

    from auditor.perf.api import cached_program
    from auditor.perf.device import group_table, kernel_vector
    plan = ParallelPlan(tp=4, dp=1, ep=4, dcp=4)
    q = 512
    for c in (0, 40000):
        colls = {cl["tensor"]: cl for cl in run("prefill", q, c, plan=plan)["collectives"]
                 if cl["layer"] == 5 and cl.get("pass") is None}
        assert colls["self_attn.dcp_kv"]["kind"] == "all_gather"
        assert colls["self_attn.dcp_kv"]["bytes"] == pytest.approx((c + q) * 1152 / 4)
    dec = run("decode", 4, 40000, mtp=3, plan=plan)
    assert not [cl for cl in dec["collectives"] if cl["tensor"] == "self_attn.dcp_kv"]
    arrays = cached_program(DeploymentContext(SPEC, plan, ENGINE, "w8a8"), "prefill", "repetition", True).arrays()
    dv, grp = kernel_vector(DEV), group_table(DEV, plan)
    args = (0, 4.0, float(q), 40000.0, 1.0, 0.0, dv, grp)
    whole = partial_time(*arrays, *args, ALL_PARTS)
    rest0 = partial_time(*arrays, *args[:3], 0.0, *args[4:], REST_PART)
    ctx = partial_time(*arrays, *args, CTX_PART)
    assert rest0 + ctx == pytest.approx(whole, rel=1e-12)
    # the context part includes the gather: more than the context-dependent ops alone
    nodcp = cached_program(DeploymentContext(SPEC, plan.with_(dcp=1), ENGINE, "w8a8"), "prefill", "repetition",
                           True).arrays()
    assert ctx > partial_time(*nodcp, *args, CTX_PART)
    assert np.isfinite(whole)
