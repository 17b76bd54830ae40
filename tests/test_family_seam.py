"""A model family a newcomer adds is one module: this toy one (two window-only and two compress-4 layers,
a residual 2 x H wide, a dense MLP, HF-spelled names) is registered from here, and memory, synth and the
KV pool walk its declared layers with nothing else changed.

Expected figures are worked by hand: tensor bytes from the shapes below, the pool from
model-deepseek-v4.md §4.3-§4.4's layout rules (pages 131,072 / 16,640 B at block 128).
"""
from __future__ import annotations

import json
import types

import pytest

from auditor.cli import main
from auditor.errors import AuditInputError
from auditor.model import families
from auditor.model.blueprint import ModuleDecl as M
from auditor.model.spec import LayerKind, ModelSpec

H, NH, D, V, ID, IH, TOPK, I = 256, 4, 512, 1024, 128, 2, 16, 512
WINDOW = 128
KINDS = ("window", "window", "compressed", "compressed")


def _spec(cfg, name="model", where="config.json"):
    kinds = tuple(LayerKind(attention=k, compress_ratio=4 if k == "compressed" else 0, window=WINDOW,
                            indexer=k == "compressed", moe=False, router="none") for k in cfg["toy_layers"])
    return ModelSpec(name=name, model_type="toy", H=cfg["hidden_size"], NH=NH, Lyr=len(kinds), V=V, NKV=1,
                     head_dim=D, Qr=0, Dr=64, dsa=True, IH=IH, ID=ID, topk_tokens=TOPK,
                     indexer_layers=tuple(k.indexer for k in kinds), Id=I, moe=False, moe_layers=(False,) * len(kinds),
                     max_position=8192, family="toy", layer_kinds=kinds, residual_mult=2, sliding_window=WINDOW)


def _layer_modules(spec, layer):
    kind = spec.layer_kinds[layer]
    out = [M("norm", "input_layernorm", (H,), "norm"), M("norm", "post_attention_layernorm", (H,), "norm"),
           M("param", "", (2, 2 * H), "other", suffix="mix", dtype="F32"),
           M("linear", "self_attn.q_proj", (NH * D, H), role="column"),
           M("linear", "self_attn.kv_proj", (D, H)),
           M("linear", "self_attn.o_proj", (H, NH * D), role="row")]
    if kind.compress_ratio:
        out += [M("param", "self_attn.compressor", (4, 2 * D), suffix="ape", dtype="F32"),
                M("linear", "self_attn.compressor.wkv", (2 * D, H), float_only=True),
                M("linear", "self_attn.indexer.wq_b", (IH * ID, H), "indexer")]
    out += [M("linear", "mlp.gate_up_proj", (2 * I, H), "dense_mlp", role="column",
              members=("mlp.gate_proj", "mlp.up_proj")),
            M("linear", "mlp.down_proj", (H, I), "dense_mlp", role="row")]
    return out


def _layout_rows(spec, recipe, *, include_mtp=True, writer=None):
    if recipe != "bf16":
        raise AuditInputError("--recipe", "the toy family has bf16 checkpoints only")
    rows = []
    for layer in range(spec.Lyr):
        p = f"model.layers.{layer}."
        for d in _layer_modules(spec, layer):
            if d.kind == "linear":
                for m in d.stored:
                    out = d.shape[0] // len(d.stored)
                    rows.append((p + m + ".weight", "BF16", (out, d.shape[1]), "FLOAT"))
            elif d.kind == "norm":
                rows.append((p + d.name + ".weight", "BF16", d.shape, "FLOAT"))
            else:
                rows.append((p + (d.name + "." if d.name else "") + d.suffix, "F32", d.shape, "FLOAT"))
    rows += [("model.embed_tokens.weight", "BF16", (V, H), "FLOAT"), ("model.norm.weight", "BF16", (H,), "FLOAT"),
             ("lm_head.weight", "BF16", (V, H), "FLOAT")]
    return rows


TOY = types.SimpleNamespace(
    NAME="toy",
    claims=lambda cfg: "toy_layers" in cfg,
    spec_from_config=_spec,
    structure_summary=lambda spec: ["toy: 2 window-only + 2 compress-4 layers, residual 2 x H"],
    layout_rows=_layout_rows,
    description=lambda spec, recipe, include_mtp=True: None,
    layer_modules=_layer_modules,
    global_modules=lambda spec: [],
    config_from_spec=lambda spec: {"hidden_size": spec.H, "num_hidden_layers": spec.Lyr, "num_attention_heads": NH,
                                   "vocab_size": V, "toy_layers": [k.attention for k in spec.layer_kinds]},
)
CONFIG = {"hidden_size": H, "num_hidden_layers": 4, "num_attention_heads": NH, "vocab_size": V,
          "max_position_embeddings": 8192, "toy_layers": list(KINDS)}


def _toy_layer(b, L, kind, st, shard, mtp_layer):
    """The toy family's op program: q / kv projections, attention over the window (and the compressed
    rows, top-k of them, at compress-4), o_proj with its TP all-reduce, the dense MLP."""
    from auditor.perf import ops as O
    from auditor.perf.quant import FLOAT
    from auditor.perf.tokens import State
    x, tp = st.hidden, b.tp
    b.op(O.rms_norm("input_layernorm", x, H))
    b.op(O.linear("self_attn.q_proj", x, H, NH * D // tp, FLOAT, b.wb(L, "self_attn.q_proj"), "self_attn.q_proj"))
    b.op(O.linear("self_attn.kv_proj", x, H, D, FLOAT, b.wb(L, "self_attn.kv_proj"), "self_attn.kv_proj"))
    b.op(O.sfa("self_attn.window", x, NH // tp, D, 0, float(WINDOW), 1.0, 1024.0))
    if kind.compress_ratio:
        b.op(O.sfa("self_attn.compressed", x, NH // tp, D, 0, float(TOPK), 1.0, 1024.0, ratio=kind.compress_ratio))
    b.op(O.linear("self_attn.o_proj", x, NH * D // tp, H, FLOAT, b.wb(L, "self_attn.o_proj"), "self_attn.o_proj"))
    if tp > 1:
        b.coll("all_reduce", "tp", x, H * 2, "self_attn.o_proj.out")
    b.op(O.rms_norm("post_attention_layernorm", x, H))
    return State(b.dense_mlp(L, x, mtp_layer), None)


@pytest.fixture
def toy(tmp_path):
    from auditor.perf.families import FamilyProgram, register_program, unregister_program
    families.register(TOY)
    register_program("toy", FamilyProgram(_toy_layer))
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "config.json").write_text(json.dumps(CONFIG))
    yield tmp_path / "toy"
    families.unregister("toy")
    unregister_program("toy")


def _memory(path, capsys, *extra):
    args = ["memory", str(path), "--recipe", "bf16", "--tp", "2", "--max-model-len", "8192",
            "--max-num-batched-tokens", "512", "--block-size", "128", "--device", "a3-752t", "--format", "json", *extra]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_toy_family_memory_is_its_declared_modules(toy, capsys):
    rep = _memory(toy, capsys)
    tp = 2
    per_layer = (2 * NH * D * H // tp          # q_proj, column
                 + 2 * D * H                     # kv_proj, replicated
                 + 2 * H * NH * D // tp          # o_proj, row
                 + 2 * 2 * I * H // tp + 2 * H * I // tp     # dense MLP
                 + 2 * 2 * H + 4 * 2 * 2 * H)    # two norms, the fp32 mixing parameter
    compressed = 4 * 4 * 2 * D + 2 * 2 * D * H + 2 * IH * ID * H     # ape, compressor wkv, indexer wq_b
    vocab = 2 * (2 * V // tp * H) + 2 * H        # embedding, LM head (V/TP rows each), final norm
    # the engine's buffers for compressed attention: cos + sin fp32 [max_position, 64] per base (2 bases),
    # runtime cos/sin [T, 64] fp32 for 3 (base, group) pairs, the int32 top-k buffer [T, top-k]
    T = 512
    buffers = 2 * 2 * 8192 * 64 * 4 + 2 * 3 * T * 64 * 4 + T * TOPK * 4
    assert rep["worst_rank"]["bytes"] == 4 * per_layer + 2 * compressed + vocab + buffers


def test_toy_family_kv_pool_by_hand(toy, capsys):
    rt = _memory(toy, capsys)["runtime"]
    # ratios [0, 0, 4, 4]: tuples = 2 (the layer counts 2, 4, 2 divide by 2), the window group splits in 2;
    # P_t = 131,072 + 16,640 B, NT = 2 (no MTP); 2 + 2 tensors
    assert rt["kv_spec"]["page_block_bytes"] == 2 * (131072 + 16640)
    assert rt["kv_spec"]["kv_tensors"] == 4
    assert [g["name"] for g in rt["kv_spec"]["groups"]] == ["c4", "swa#0", "swa#1", "c4-states"]
    # one 8192-token request with 512 tokens in flight: c4 cdiv(8192, 512) = 16; each window group
    # cdiv(127 + 512, 128) + 1 = 6; the states cdiv(7 + 512, 8) + 1 = 66
    assert rt["kv_bytes_per_request"] == (16 + 6 + 6 + 66) * 2 * (131072 + 16640)


def test_toy_family_synth_round_trip(toy, tmp_path, capsys):
    out = tmp_path / "ckpt"
    assert main(["synth", str(out), "-m", str(toy), "--recipe", "bf16"]) == 0
    capsys.readouterr()
    a = _memory(toy, capsys)
    b = _memory(out, capsys)
    assert a["worst_rank"]["bytes"] == b["worst_rank"]["bytes"]


def test_family_registry_is_asked_by_structure(toy):
    """The registered family claims its config by a structure key; once unregistered it is gone."""
    from auditor.model.config import spec_from_config
    assert spec_from_config(CONFIG).family == "toy"
    families.unregister("toy")
    with pytest.raises(KeyError):
        families.family("toy")



def test_toy_family_perf_is_its_op_program(toy, capsys):
    """perf times the toy's layers with its own program: op FLOPs by hand (TP 2, one decoding token at key
    position 4096: the window holds 128 rows, a compress-4 layer's top-16 of 1024 compressed rows)."""
    tp = 2
    assert main(["perf", str(toy), "--recipe", "bf16", "--tp", str(tp), "--device", "a3-752t", "--phase", "decode",
                 "--tokens", "1", "--context", "4095", "--batch", "1", "--mtp", "0", "--max-model-len", "8192",
                 "--format", "json"]) == 0
    ops = {(o["layer"], o["name"]): o["mma_flops"] for o in json.loads(capsys.readouterr().out)["ops"]
           if o["layer"] is not None}
    for layer in range(4):
        assert ops[(layer, "self_attn.q_proj")] == 2 * H * NH * D / tp
        assert ops[(layer, "self_attn.window")] == 4 * D * WINDOW * NH / tp       # 2 P h D for QK and PV
        assert ops[(layer, "mlp.gate_up_proj")] == 2 * H * 2 * I / tp
    assert ops[(2, "self_attn.compressed")] == 4 * D * TOPK * NH / tp
    assert (0, "self_attn.compressed") not in ops


def test_toy_family_bench_admits_by_its_pool(toy, capsys):
    """bench runs the toy deployment on its pool: the instance's blocks are memory's, and a request's
    fixed blocks (2 window groups of cdiv(127 + 1, 128) + 1 = 2, states cdiv(7 + 1, 8) + 1 = 2) are held."""
    mem = _memory(toy, capsys)["runtime"]
    assert main(["bench", str(toy), "--recipe", "bf16", "--tp", "2", "--max-model-len", "8192",
                 "--max-num-batched-tokens", "512", "--block-size", "128", "--device", "a3-752t", "--mtp", "0",
                 "--concurrency", "2", "--isl", "256", "--osl", "8", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["instances"][0]["kv_blocks_per_rank"] == mem["num_blocks"]
    assert doc["output_throughput"] > 0
    from auditor.engines.registry import as_engine
    from auditor.model.config import spec_from_config
    from auditor.parallel import ParallelPlan
    kv = as_engine("vllm-ascend@main").kv_spec(spec_from_config(CONFIG), ParallelPlan(tp=2, block_size=128))
    assert kv.affine_blocks(1) == (512, 2 + 2 + 2)           # the c4 group grows one block per 4 x 128 tokens
