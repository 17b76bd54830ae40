"""The token-layout contract of seed RFC §3.3.1 / §3.3.2 / §3.8 on GLM-5.1, through the API.

Prefill: TP16 DP2 EP32 with SP (DSA-CP on), 4096 tokens: one TP all_gather per layer boundary
carries the normalized input to 4096 tokens, and the engine slices each rank's 4096 / 16 = 256
back before the attention (vllm-ascend sfa_cp.py:257-272 ``_prepare_native_hidden_states`` and
:160-196 local query lengths @182b75ea; v0.18.0 sfa_v1.py:242-312 slices cos/sin/slots the same
way): MLA preprocessing, the indexer, SFA, v_up and o_proj see 256 tokens with all 64 heads; only
the new tokens' cache entries are all-gathered (the fused KV) and written for all 4096. The seed's
"full-token attention" is the graph boundary; TensorCast's own profile decomposer projects these
ops to T / TP (anchor-tensorcast.md §3.3). Every MoE op sees 256; no o_proj feature reduction;
nothing ever sees 65536 = 16 x 4096 tokens; the repetition graph expands to the same ops.
Decode: the seed's DP8 TP4 example with 9 tokens per DP rank.
"""
from __future__ import annotations

from collections import Counter

import pytest

from auditor.context import DeploymentContext
from auditor.devices.profiles import load_device
from auditor.model.presets import preset_spec
from auditor.perf.api import Workload, evaluate
from auditor.parallel import ParallelPlan

SPEC = preset_spec("glm-5.1")
DEV = load_device("a3-752t")   # layout/shape assertions only: independent of its constants
ENGINE = "vllm-ascend@main"
T, TP = 4096, 16
LOCAL = T // TP            # 256
N_LAYERS = 78
MOE_LAYERS = range(3, 78)
H = 6144

FULL_TOKEN_OPS = ("self_attn.kv_cache_write", "self_attn.indexer.cache_write")
LOCAL_QUERY_OPS = ("self_attn.fused_qkv_a_proj", "self_attn.q_a_layernorm", "self_attn.kv_a_layernorm",
                   "self_attn.q_b_proj", "self_attn.rope", "self_attn.indexer.wk", "self_attn.indexer.k_norm",
                   "self_attn.indexer.k_rope", "self_attn.q_absorb", "self_attn.sfa", "self_attn.v_up",
                   "self_attn.indexer.wq_b", "self_attn.indexer.q_rope", "self_attn.indexer.weights_proj",
                   "self_attn.indexer.score", "self_attn.indexer.topk")
#: one fused cache entry per new token, all-gathered: bf16 latent + rope (1152 B) + indexer key (256 B)
FUSED_KV_BYTES = (512 + 64) * 2 + 128 * 2


def _prefill(graph: str, role: str = "mixed", engine: str = ENGINE) -> dict:
    plan = ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True, role=role)
    return evaluate(DeploymentContext(SPEC, plan, engine, "w8a8", DEV), Workload("prefill", T), graph=graph).to_json()


@pytest.fixture(scope="module")
def expanded() -> dict:
    return _prefill("expanded")


@pytest.fixture(scope="module")
def repetition() -> dict:
    return _prefill("repetition")


def _by(ops: list[dict], name: str) -> list[dict]:
    return [o for o in ops if o["name"] == name and o.get("pass") is None]


@pytest.mark.parametrize("graph", ["expanded", "repetition"])
def test_cache_writes_see_full_tokens_attention_sees_its_shard(graph, expanded, repetition):
    ops = (expanded if graph == "expanded" else repetition)["ops"]
    for name in FULL_TOKEN_OPS:
        got = _by(ops, name)
        assert len(got) == N_LAYERS, name
        assert {o["tokens"] for o in got} == {T}, name
        assert {o["layout"] for o in got} == {"full"}, name
    sfa = _by(ops, "self_attn.sfa")[0]
    assert sfa["shape_out"] == [[LOCAL, 64, 512]]      # all 64 heads (replicated under DSA-CP), local rows
    v_up = _by(ops, "self_attn.v_up")[0]
    assert v_up["shape_out"] == [[LOCAL, 64, 256]]


@pytest.mark.parametrize("graph", ["expanded", "repetition"])
def test_local_side_sees_256(graph, expanded, repetition):
    ops = (expanded if graph == "expanded" else repetition)["ops"]
    for name in LOCAL_QUERY_OPS + ("self_attn.o_proj", "post_attention_layernorm"):
        got = _by(ops, name)
        assert len(got) == N_LAYERS and {o["tokens"] for o in got} == {LOCAL}, name
    sl = _by(ops, "self_attn.token_slice")
    assert len(sl) == N_LAYERS
    assert sl[0]["shape_in"] == [[T, H]] and sl[0]["shape_out"] == [[LOCAL, H]]
    assert sl[0]["flops"] == 0 and sl[0]["bytes"] == 0 and sl[0]["layout"] == "full->local"
    o_proj = _by(ops, "self_attn.o_proj")[0]
    assert o_proj["shape_in"] == [[LOCAL, 64 * 256]] and o_proj["shape_out"] == [[LOCAL, H]]
    moe = [o for o in ops if o["layer"] in MOE_LAYERS and o["name"].startswith("mlp")]
    assert {o["name"] for o in moe} >= {"mlp.gate", "mlp.topk", "mlp.experts", "mlp.shared_experts.gate_up_proj",
                                         "mlp.shared_experts.down_proj"}
    assert {o["tokens"] for o in moe} == {LOCAL}
    gate = _by(ops, "mlp.gate")[0]
    assert gate["shape_in"] == [[LOCAL, H]] and gate["shape_out"] == [[LOCAL, 256]]
    assert _by(ops, "mlp.topk")[0]["shape_out"][0] == [LOCAL, 8]
    # the residual stream stays local at every layer boundary after the first
    assert {o["tokens"] for o in _by(ops, "input_layernorm")} == {LOCAL}


@pytest.mark.parametrize("graph", ["expanded", "repetition"])
def test_one_gather_per_boundary_carrying_normalized_input(graph, expanded, repetition):
    colls = (expanded if graph == "expanded" else repetition)["collectives"]
    tp_ag = [c for c in colls if c["kind"] == "all_gather" and c["group"] == "tp" and c["layer"] is not None]
    boundary = Counter(c["layer"] for c in tp_ag if c["tensor"] == "input_layernorm.out")
    assert boundary == Counter({L: 1 for L in range(N_LAYERS)})
    for c in tp_ag:
        if c["tensor"] == "input_layernorm.out":
            assert c["bytes"] == LOCAL * H * 2 == 3_145_728
            assert c["tokens"] == LOCAL
    # MoE layers gather no other activation than the new tokens' fused cache entries (the only other
    # TP all_gather is the o_proj weight pool)
    for L in MOE_LAYERS:
        acts = [c for c in tp_ag if c["layer"] == L and not c["tensor"].endswith(".weight")]
        assert [c["tensor"] for c in acts] == ["input_layernorm.out", "self_attn.fused_kv"]
    kv = [c for c in tp_ag if c["tensor"] == "self_attn.fused_kv"]
    assert {c["bytes"] for c in kv} == {LOCAL * FUSED_KV_BYTES} and {c["tokens"] for c in kv} == {LOCAL}
    # nothing named residual is ever moved
    assert not [c for c in colls if "residual" in c["tensor"]]


def test_replicated_o_proj_node_has_exactly_one_tp_gather_per_moe_layer():
    """On a v0.18 P node (kv_producer) o_proj is fully replicated (the seed's setting): the only
    TP all_gather of a MoE layer is the boundary one, and every TP collective stays local-token."""
    colls = _prefill("expanded", role="prefill", engine="vllm-ascend@0.18")["collectives"]
    for L in MOE_LAYERS:
        tp = [c for c in colls if c["layer"] == L and c["group"] == "tp"]
        assert [(c["kind"], c["tensor"]) for c in tp if c["kind"] == "all_gather"] == [
            ("all_gather", "input_layernorm.out"), ("all_gather", "self_attn.fused_kv")]
        assert [c["tokens"] for c in tp] == [LOCAL] * len(tp)


@pytest.mark.parametrize("graph", ["expanded", "repetition"])
def test_no_feature_reduction_after_o_proj(graph, expanded, repetition):
    colls = (expanded if graph == "expanded" else repetition)["collectives"]
    bad = [c for c in colls if c["after"] == "self_attn.o_proj" or c["tensor"] == "self_attn.o_proj.out"]
    assert bad == []
    assert not [c for c in colls if c["kind"] in ("all_reduce", "reduce_scatter") and "o_proj" in c["tensor"]]


@pytest.mark.parametrize("graph", ["expanded", "repetition"])
def test_no_op_sees_inflated_tokens(graph, expanded, repetition):
    res = expanded if graph == "expanded" else repetition
    assert max(o["tokens"] for o in res["ops"]) == T
    assert max(c["tokens"] for c in res["collectives"]) == T
    assert all("over-gathered" not in o["layout"] for o in res["ops"])
    assert all(T * TP not in dim for o in res["ops"] for dim in o["shape_in"] + o["shape_out"])


def _canon(entries: list[dict]) -> list[tuple]:
    return sorted(tuple(sorted((k, repr(v)) for k, v in e.items())) for e in entries)


def test_repetition_expands_to_the_expanded_graph(expanded, repetition):
    assert len(expanded["ops"]) == len(repetition["ops"])
    assert _canon(expanded["ops"]) == _canon(repetition["ops"])
    assert _canon(expanded["collectives"]) == _canon(repetition["collectives"])
    assert expanded["totals"] == pytest.approx(repetition["totals"], rel=1e-12)


def test_repetition_equivalence_in_decode_with_mtp():
    plan = ParallelPlan(tp=4, dp=8, ep=32, sp=True, dsa_cp=True)
    wl = Workload("decode", 1, context=3000, batch=3, mtp=2)
    a = evaluate(DeploymentContext(SPEC, plan, ENGINE, "w4a8", DEV), wl, graph="expanded").to_json()
    b = evaluate(DeploymentContext(SPEC, plan, ENGINE, "w4a8", DEV), wl, graph="repetition").to_json()
    assert _canon(a["ops"]) == _canon(b["ops"])
    assert _canon(a["collectives"]) == _canon(b["collectives"])
    # the MTP layer (index 78) runs K = 2 times: pass 1 on 9 tokens, pass 2 on 3 tokens; DSA-CP shards
    # them over TP 4 in decode too (ceil(9 / 4) = 3 and ceil(3 / 4) = 1 per rank, sfa_cp.py:148-153)
    sfa = [o for o in a["ops"] if o["name"] == "self_attn.sfa" and o["layer"] == 78]
    assert sorted((o["pass"], o["tokens"]) for o in sfa) == [(1, 3), (2, 1)]
    # pass 2 runs its projections on the padded pass-1 rows (input_batch_size = num_input_tokens for
    # "mtp", llm_base_proposer.py:1215) and only its attention kernels on one query per request
    qb = [o for o in a["ops"] if o["name"] == "self_attn.q_b_proj" and o["layer"] == 78]
    assert sorted((o["pass"], o["tokens"]) for o in qb) == [(1, 3), (2, 3)]
    eh = [o for o in a["ops"] if o["name"] == "mtp.eh_proj"]
    assert sorted((o["pass"], o["tokens"]) for o in eh) == [(1, 9), (2, 9)]
    o_in = [c for c in a["collectives"] if c["tensor"] == "self_attn.o_proj.in" and c["layer"] == 10]
    assert [(c["kind"], c["tokens"]) for c in o_in] == [("all_to_all", 3)]       # 9 tokens / TP 4


@pytest.fixture(scope="module")
def decode_dp8_tp4() -> dict:
    plan = ParallelPlan(tp=4, dp=8, ep=32)
    return evaluate(DeploymentContext(SPEC, plan, ENGINE, "w8a8", DEV),
                    Workload("decode", 1, context=2500, batch=9)).to_json()


def test_seed_decode_gate_pad_slice(decode_dp8_tp4):
    ops = decode_dp8_tp4["ops"]
    L = 10

    def one(name):
        (o,) = [o for o in ops if o["layer"] == L and o["name"] == name]
        return o
    gate = one("mlp.gate")
    assert gate["shape_in"] == [[9, H]] and gate["shape_out"] == [[9, 256]]
    pad = one("mlp.pad")
    assert pad["shape_out"] == [[12, H], [12, 256]]
    sl = one("mlp.tp_slice")
    assert sl["shape_in"] == [[12, H], [12, 256]] and sl["shape_out"] == [[3, H], [3, 256]]
    topk = one("mlp.topk")
    assert topk["shape_in"] == [[3, 256]] and topk["shape_out"][0] == [3, 8]
    experts = one("mlp.experts")
    assert experts["shape_in"] == [[3, H]] and experts["tokens"] == 3
    # attention runs on the full packed-local 9 tokens
    assert one("self_attn.sfa")["tokens"] == 9
    # dispatch/combine carry the 3 sliced tokens; the finalize gathers them back over TP
    colls = [c for c in decode_dp8_tp4["collectives"] if c["layer"] == L]
    a2a = [c for c in colls if c["kind"] == "all_to_all"]
    assert [c["tensor"] for c in a2a] == ["mlp.dispatch", "mlp.combine"] and {c["group"] for c in a2a} == {"ep"}
    assert {c["tokens"] for c in a2a} == {3}
    fin = [c for c in colls if c["tensor"] == "mlp.finalize"]
    assert len(fin) == 1 and fin[0]["kind"] == "all_gather" and fin[0]["bytes"] == 3 * H * 2


def test_normal_tp_path_without_sp():
    """SP off: heads TP-sharded, all_reduce after o_proj and after the shared experts, no token slice."""
    plan = ParallelPlan(tp=16, dp=2, ep=32)
    js = evaluate(DeploymentContext(SPEC, plan, ENGINE, "w8a8", DEV), Workload("prefill", T)).to_json()
    L = 20
    ops = {o["name"]: o for o in js["ops"] if o["layer"] == L}
    assert "self_attn.token_slice" not in ops
    assert ops["self_attn.sfa"]["shape_in"] == [[T, 4, 576]]       # 64 heads / TP16
    assert ops["self_attn.o_proj"]["tokens"] == T
    assert ops["mlp.gate"]["tokens"] == T and ops["mlp.topk"]["tokens"] == LOCAL
    colls = [(c["kind"], c["group"], c["tensor"]) for c in js["collectives"] if c["layer"] == L]
    assert ("all_reduce", "tp", "self_attn.o_proj.out") in colls
    assert ("all_reduce", "tp", "mlp.shared_experts.out") in colls
    assert not [c for c in colls if c[0] == "all_gather" and c[2] == "input_layernorm.out"]
