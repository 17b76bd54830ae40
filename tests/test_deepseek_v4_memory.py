"""DeepSeek-V4 (Flash W8A8, Pro W4A8) on vLLM-Ascend: what a rank holds, its KV pool, the deployments that start.

Every expected figure is worked by hand here from model-deepseek-v4.md (§3.2's per-tensor rules, §3.5's
per-rank totals, §4.3-§4.5's pool layout, §6.2's tutorial deployments), not read from audit's code.
"""
from __future__ import annotations

import json

import pytest

from auditor.cli import main
from auditor.engines.registry import as_engine
from auditor.memory.audit import run_memory_audit
from auditor.parallel import ParallelPlan
from auditor.source import open_model

GiB, MiB = 2 ** 30, 2 ** 20
# Flash / Pro dimensions (§1.1)
FLASH = dict(H=4096, NH=64, D=512, Qr=1024, G=8, R=1024, E=256, I=2048, V=129280, IH=64, ID=128, K=6, L=43)
PRO = dict(H=7168, NH=128, D=512, Qr=1536, G=16, R=1024, E=384, I=3072, V=129280, IH=64, ID=128, K=6, L=61)


def _memory_json(args, capsys):
    assert main(["memory", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _tensors(model, plan, engine="vllm-ascend@main"):
    src = open_model(model)
    audit = run_memory_audit(src, plan, as_engine(engine))
    rows = {}
    for g in audit.tensor_rows():
        rows.setdefault((g["block"], g["module"], g["tensor"]), []).append(g)
    return audit, rows


def _per_layer(rows, key):
    """(bytes of one layer, layer count) of a tensor grouped over identical layers."""
    (g,) = rows[key]
    return g["bytes"] // g["count"], g["count"]


def test_flash_tp4_tensors_follow_the_spec_rules():
    """§3.2 table, Flash TP4 DSA-CP off: each tensor's per-rank bytes from its rule."""
    d = FLASH
    tp = 4
    _, rows = _tensors("deepseek-v4-flash", ParallelPlan(tp=tp, dp=4, ep=16))
    # W8A8_DYNAMIC linear [N, K]: int8 [K, N] + scale pd [N] + offset pd [N] + scale fp32 [N]
    assert _per_layer(rows, ("attention", "self_attn.wq_a", "weight")) == (d["H"] * d["Qr"], 43)
    assert _per_layer(rows, ("attention", "self_attn.wq_a", "weight_scale_fp32"))[0] == d["Qr"] * 4
    assert _per_layer(rows, ("attention", "self_attn.wq_b", "weight"))[0] == d["Qr"] * d["NH"] * d["D"] // tp
    assert _per_layer(rows, ("attention", "self_attn.wkv", "weight"))[0] == d["H"] * d["D"]     # replicated
    # wo_a / wo_b stay bf16 (FLOAT): [G/TP, NH*D/G, R] and [H, G*R/TP]
    assert _per_layer(rows, ("attention", "self_attn.wo_a", "weight"))[0] == 2 * d["G"] // tp * d["NH"] * d["D"] // d["G"] * d["R"]
    assert _per_layer(rows, ("attention", "self_attn.wo_b", "weight"))[0] == 2 * d["H"] * d["G"] * d["R"] // tp
    # compressors: c4 = ape fp32 [4, 1024] + wkv, wgate bf16 [1024, H] (21 layers); c128 = [128, 512], [512, H] (20)
    assert {(g["bytes"] // g["count"], g["count"]) for g in rows[("attention", "self_attn.compressor.wkv", "weight")]} \
        == {(2 * 1024 * d["H"], 21), (2 * 512 * d["H"], 20)}
    assert {g["count"]: g["bytes"] // g["count"] for g in rows[("attention", "self_attn.compressor", "ape")]} == \
        {21: 4 * 1024 * 4, 20: 128 * 512 * 4}
    # indexer (21 compress-4 layers): wq_b int8 [Qr, IH*ID], weights_proj bf16 [IH, H]
    assert _per_layer(rows, ("indexer", "self_attn.indexer.wq_b", "weight")) == (d["Qr"] * d["IH"] * d["ID"], 21)
    assert _per_layer(rows, ("indexer", "self_attn.indexer.weights_proj", "weight"))[0] == 2 * d["IH"] * d["H"]
    # the attention sink is fp32 [NH/TP]; mHC mixing fp32 [24, 4H] twice per layer
    assert _per_layer(rows, ("attention", "self_attn", "attn_sink"))[0] == 4 * d["NH"] // tp
    assert _per_layer(rows, ("other", "layer", "hc_attn_fn"))[0] == 4 * 24 * 4 * d["H"]
    # the gate keeps bf16 [E, H] and an fp32 copy; hash layers 0-2 an int32 [V, K] table
    assert _per_layer(rows, ("router", "mlp.gate", "weight"))[0] == 2 * d["E"] * d["H"]
    assert _per_layer(rows, ("router", "mlp.gate", "weight_fp32"))[0] == 4 * d["E"] * d["H"]
    tid = rows[("router", "mlp.gate", "tid2eid")][0]
    assert tid["layers"] == "0-2" and tid["bytes"] == 3 * d["V"] * d["K"] * 4
    # routed experts, W8A8_DYNAMIC: 3HI + 16I + 4H bytes per expert (companion §2.4), 16 per rank at EP16
    per_expert = 3 * d["H"] * d["I"] + 16 * d["I"] + 4 * d["H"]
    experts = sum(g["bytes"] for (b, m, t), gs in rows.items() for g in gs if b == "routed_experts")
    assert experts == 43 * 16 * per_expert


def test_pro_w4a8_experts_and_mtp_own_tables():
    """W4A8_DYNAMIC experts: 1.5HI + 32I + 16H bytes each (§3.2); the MTP layer keeps its own embedding and
    LM head (share_embeddings = not use_compress), V/TP rows each."""
    d = PRO
    tp = 16
    _, rows = _tensors("deepseek-v4-pro", ParallelPlan(tp=tp, dp=2, ep=32, mtp=True))
    per_expert = 1.5 * d["H"] * d["I"] + 32 * d["I"] + 16 * d["H"]
    experts = sum(g["bytes"] for (b, m, t), gs in rows.items() for g in gs if b == "routed_experts")
    assert experts == 61 * 12 * per_expert
    vocab_rows = d["V"] // tp           # 129280 is a multiple of 64 and of 16
    for module in ("embed_tokens", "shared_head.head"):
        (g,) = rows[("mtp", module, "weight")]
        assert g["bytes"] == 2 * vocab_rows * d["H"] and g["layers"] == "61"


#: §3.5: (preset, flags, spec's per-rank total GiB)
TOTALS = [
    ("deepseek-v4-flash", "--tp 4 --dp 4 --shared-expert-dp --mtp 1 --max-num-batched-tokens 10240", 23.1),
    ("deepseek-v4-flash", "--tp 4 --dp 4 --dsa-cp --role prefill --mtp 1 --max-num-batched-tokens 8192", 24.1),
    ("deepseek-v4-flash", "--tp 1 --dp 16 --role decode --mtp 3 --max-num-batched-tokens 240", 30.9),
    ("deepseek-v4-flash", "--tp 8 --dp 1 --dsa-cp --mtp 1 --max-num-batched-tokens 8192 --device a2-376t", 39.0),
    ("deepseek-v4-pro", "--tp 16 --dp 2 --mtp 1 --max-num-batched-tokens 4096", 30.8),
    ("deepseek-v4-pro", "--tp 16 --dp 2 --shared-expert-dp --mtp 1 --max-num-batched-tokens 4096", 34.4),
    ("deepseek-v4-pro", "--tp 8 --dp 4 --dsa-cp --role prefill --mtp 1 --max-num-batched-tokens 4096", 40.3),
    ("deepseek-v4-pro", "--tp 2 --dp 16 --role decode --mtp 3 --max-num-batched-tokens 120", 47.1),
    ("deepseek-v4-pro", "--tp 8 --dp 4 --shared-expert-dp --mtp 1 --max-num-batched-tokens 4096 --device a2-376t", 36.5),
]


@pytest.mark.parametrize("model,flags,total", TOTALS)
def test_per_rank_totals_match_the_worked_table(model, flags, total, capsys):
    args = [model, *flags.split(), "--ep", "on", "--max-model-len", "131072"]
    if "--device" not in flags:
        args += ["--device", "a3-752t"]
    rep = _memory_json(args, capsys)
    # the table rounds to 0.1 GiB
    assert abs(rep["worst_rank"]["bytes"] / GiB - total) <= 0.05 + 1e-9


def test_dsa_cp_switch_copies_by_version():
    """§3.3 / §7.1 row 9: DSA-CP replicates wq_b; on a P node main keeps a per-layer transposed wo_b shard
    (G*R/TP x H bf16, every layer incl. MTP) and two pools; v0.26 only the pools."""
    d = FLASH
    plan = ParallelPlan(tp=4, dp=4, ep=16, dsa_cp=True, sp=True, role="prefill", mtp=True)
    _, main_rows = _tensors("deepseek-v4-flash", plan, "vllm-ascend@main")
    _, v26_rows = _tensors("deepseek-v4-flash", plan, "vllm-ascend@0.26")
    for rows in (main_rows, v26_rows):
        assert _per_layer(rows, ("attention", "self_attn.wq_b", "weight"))[0] == d["Qr"] * d["NH"] * d["D"]
        assert rows[("attention", "self_attn.wo_a_full_pool", "gather_output")][0]["bytes"] == 64 * MiB
        assert rows[("attention", "self_attn.wo_b_full_pool", "gather_output")][0]["bytes"] == 64 * MiB
    copies = sum(g["bytes"] for (b, m, t), gs in main_rows.items() for g in gs if t == "gather_input")
    assert copies == 44 * 2 * d["G"] * d["R"] // 4 * d["H"]            # 704 MiB
    assert not any(t == "gather_input" for (_, _, t) in v26_rows)
    # a decode node (kv_consumer) gets no switch
    _, dec = _tensors("deepseek-v4-flash", ParallelPlan(tp=4, dp=4, ep=16, dsa_cp=True, role="decode"))
    assert not any("pool" in m for (_, m, _) in dec)


def test_rope_tables_and_buffers():
    """§3.2 / §3.4: fp32 cos + sin tables of 65536 x 16 rows x 64 per base (window-only layers: rope_theta;
    compressed: compress_rope_theta), whatever --max-model-len; Pro without MTP has no window-only layer."""
    _, flash = _tensors("deepseek-v4-flash", ParallelPlan(tp=4, dp=4, ep=16, mtp=True))
    tables = [k for k in flash if k[1] == "buffers" and k[2].endswith("_full")]
    assert len(tables) == 4 and all(flash[k][0]["bytes"] == 1048576 * 64 * 4 for k in tables)
    _, pro = _tensors("deepseek-v4-pro", ParallelPlan(tp=16, dp=2, ep=32))
    assert sum(1 for k in pro if k[1] == "buffers" and k[2].endswith("_full")) == 2
    # main allocates the drafter's [T, 4H] buffer only with a drafter (PR #14250); v0.26 always
    assert not any(k[2] == "_mtp_hidden_buffer" for k in pro)
    _, pro26 = _tensors("deepseek-v4-pro", ParallelPlan(tp=16, dp=2, ep=32), "vllm-ascend@0.26")
    (g,) = pro26[("other", "buffers", "_mtp_hidden_buffer")]
    assert g["bytes"] == 8192 * 4 * PRO["H"] * 2


def test_kv_pool_through_memory(capsys):
    """§4.3-§4.5: the budget divisor P_t x NT = 147,712 x 23 at bs 128 (Flash, MTP loaded); the fit check
    and "Maximum concurrency" take n = max_num_batched_tokens: 3,883 blocks for a 1M request at T = 10240."""
    rep = _memory_json(["deepseek-v4-flash", "--tp", "4", "--dp", "4", "--ep", "on", "--mtp", "1",
                        "--max-num-batched-tokens", "10240", "--max-model-len", "1048576", "--device", "a3-752t",
                        "--block-size", "128"], capsys)
    rt = rep["runtime"]
    assert rt["kv_spec"]["page_block_bytes"] == (131072 + 16640) * 23
    assert rt["kv_spec"]["block_id_bytes"] == 3_364_096 and rt["kv_spec"]["kv_tensors"] == 44
    assert rt["num_blocks"] == rt["kv_available_bytes"] // ((131072 + 16640) * 23)
    assert rt["kv_bytes_per_request"] == 3883 * (131072 + 16640) * 23
    assert rt["max_concurrency"] == pytest.approx(rt["num_blocks"] / 3883)
    # the naive context-proportional figure: 21 x 288.5 + 20 x 8 B/token
    assert rt["kv_bytes_per_token"] == pytest.approx(21 * 288.5 + 20 * 8)
    lines = rep["vllm_log_lines"]
    assert lines[0].startswith("Loading model weights took") and "Maximum concurrency" in lines[-1]


def test_block_size_outside_the_table_is_said(capsys):
    rep = _memory_json(["deepseek-v4-flash", "--tp", "4", "--dp", "4", "--ep", "on", "--block-size", "16",
                        "--max-model-len", "131072", "--device", "a3-752t"], capsys)
    assert rep["runtime"]["block_size"] == 32
    assert any("Setting block size to 32" in a for a in rep["assumptions"] + rep["vllm_log_lines"])


#: §6.2 tutorial deployments: (id, model, device, flags) per instance
TUTORIALS = [
    ("F-A2-1", "deepseek-v4-flash", "a2-376t", "--tp 8 --dp 1 --max-model-len 133120 --max-num-batched-tokens 8192 "
     "--max-num-seqs 32 --block-size 128 --mtp 1 --dsa-cp"),
    ("F-A3-1", "deepseek-v4-flash", "a3-752t", "--tp 4 --dp 4 --max-model-len 1048576 --max-num-batched-tokens 10240 "
     "--max-num-seqs 64 --block-size 32 --mtp 1"),
    ("F-A3-PD P", "deepseek-v4-flash", "a3-752t", "--tp 4 --dp 4 --max-model-len 1048576 --max-num-batched-tokens 8192 "
     "--max-num-seqs 16 --block-size 32 --mtp 1 --shared-expert-dp --dsa-cp --role prefill"),
    ("F-A3-PD D", "deepseek-v4-flash", "a3-752t", "--tp 1 --dp 16 --max-model-len 1048576 --max-num-batched-tokens 120 "
     "--max-num-seqs 60 --block-size 32 --mtp 1 --role decode"),
    ("F-A2-PD P", "deepseek-v4-flash", "a2-376t", "--tp 1 --dp 8 --max-model-len 135000 --max-num-batched-tokens 4096 "
     "--max-num-seqs 16 --block-size 128 --mtp 1 --role prefill"),
    ("F-A2-PD D", "deepseek-v4-flash", "a2-376t", "--tp 1 --dp 32 --max-model-len 135000 --max-num-batched-tokens 60 "
     "--max-num-seqs 30 --block-size 128 --mtp 1 --role decode"),
    ("P-A2-1", "deepseek-v4-pro", "a2-376t", "--tp 8 --dp 4 --max-model-len 135000 --max-num-batched-tokens 4096 "
     "--max-num-seqs 16 --block-size 128 --mtp 1 --shared-expert-dp"),
    ("P-A3-1", "deepseek-v4-pro", "a3-752t", "--tp 16 --dp 2 --max-model-len 135000 --max-num-batched-tokens 4096 "
     "--max-num-seqs 32 --block-size 128 --mtp 1"),
    ("P-A3-PD P", "deepseek-v4-pro", "a3-752t", "--tp 16 --dp 2 --max-model-len 131072 --max-num-batched-tokens 4096 "
     "--max-num-seqs 16 --block-size 128 --mtp 1 --dsa-cp --role prefill --gpu-memory-utilization 0.92 --fused-mc2 1"),
    ("P-A3-PD D", "deepseek-v4-pro", "a3-752t", "--tp 2 --dp 16 --max-model-len 131072 --max-num-batched-tokens 120 "
     "--max-num-seqs 60 --block-size 128 --mtp 1 --role decode"),
    ("P-A2-PD P", "deepseek-v4-pro", "a2-376t", "--tp 8 --dp 4 --max-model-len 133072 --max-num-batched-tokens 4096 "
     "--max-num-seqs 16 --mtp 1 --shared-expert-dp --dsa-cp --role prefill"),
    ("P-A2-PD D", "deepseek-v4-pro", "a2-376t", "--tp 4 --dp 8 --max-model-len 133072 --max-num-batched-tokens 120 "
     "--max-num-seqs 60 --block-size 128 --mtp 1 --role decode"),
]


@pytest.mark.parametrize("tid,model,device,flags", TUTORIALS, ids=[t[0] for t in TUTORIALS])
def test_tutorial_deployments_start(tid, model, device, flags, capsys):
    """Every §6.2 deployment the tutorials run is predicted to start (no false "does not fit"), with the
    engine's own lines."""
    rep = _memory_json([model, "--ep", "on", "--device", device, *flags.split()], capsys)
    rt = rep["runtime"]
    assert rt["error"] is None and rt["fits"] and rt["num_blocks"] > 0
    lines = rep["vllm_log_lines"]
    assert [ln.split(":")[0].split(" took")[0] for ln in lines] == [
        "Loading model weights", "Available KV cache memory", "GPU KV cache size",
        f"Maximum concurrency for {rt['max_model_len']:,} tokens per request"]


def test_synthesized_checkpoint_reads_like_the_preset(tmp_path, capsys):
    """A header-exact checkpoint (DeepSeek-native names, msModelSlim description) of a small config is
    classified into the same resident bytes as its config-only inventory."""
    from auditor.model.presets import preset_config
    cfg = {**preset_config("deepseek-v4-flash"), "num_hidden_layers": 5, "n_routed_experts": 8,
           "compress_ratios": [0, 4, 128, 4, 128, 0]}
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(cfg))
    assert main(["synth", str(tmp_path / "ckpt"), "-m", str(tmp_path / "cfg"), "--recipe", "w8a8"]) == 0
    names = json.loads((tmp_path / "ckpt" / "quant_model_description.json").read_text())
    assert "layers.1.attn.indexer.compressor.ape" in names and "mtp.0.emb.tok_emb.weight" in names
    capsys.readouterr()
    flags = ["--tp", "2", "--dp", "2", "--ep", "on", "--mtp", "1", "--max-model-len", "8192", "--device", "a3-752t"]
    ckpt = _memory_json([str(tmp_path / "ckpt"), *flags], capsys)
    conf = _memory_json([str(tmp_path / "cfg"), "--recipe", "w8a8", *flags], capsys)
    assert ckpt["worst_rank"]["bytes"] == conf["worst_rank"]["bytes"]
    assert not [f for f in ckpt["findings"] if f["severity"] == "error"]


@pytest.mark.parametrize("engine,words", [("vllm-ascend@0.23", "not modelled on vLLM-Ascend v0.23.0"),
                                          # upstream vLLM models the family now (issue 28), from the HF release
                                          # only: the msModelSlim W8A8 preset recipe is refused in one line
                                          ("vllm@0.28", "loads on vLLM-Ascend only")])
def test_engines_without_the_family_refuse(engine, words, capsys):
    args = ["memory", "deepseek-v4-flash", "--tp", "4", "--engine", engine]
    if engine.startswith("vllm@"):
        args += ["--device", "h200"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_align_explains_a_weights_line(tmp_path, capsys):
    """align reads a DeepSeek-V4 engine log with the family's recipes only (the HF FP8 release is not one
    of them) and explains the weights line of the single-node deployment (§3.5: 23.1 GiB) by a ledger."""
    flags = ["--tp", "4", "--dp", "4", "--ep", "on", "--shared-expert-dp", "--mtp", "1",
             "--max-num-batched-tokens", "10240"]
    rep = _memory_json(["deepseek-v4-flash", *flags, "--max-model-len", "131072", "--device", "a3-752t"], capsys)
    line = rep["vllm_log_lines"][0]
    assert abs(float(line.split()[-2]) - 23.1) <= 0.05
    log = tmp_path / "serve.log"
    log.write_text("INFO [model_runner_v1.py:3571] " + line + "\n")
    assert main(["align", "deepseek-v4-flash", *flags, "--log", str(log), "--output-dir", str(tmp_path / "t"),
                 "--no-png"]) == 0
    capsys.readouterr()
    ticket = json.loads((tmp_path / "t" / "ticket.json").read_text())
    assert ticket["verdict"]["explained"]
    assert ticket["memory"]["candidates"][0]["max_rel_residual"] < 1e-3
    assert set(ticket["memory"]["search"]["recipes"]) <= {"bf16", "w8a8", "w8a8-dynamic", "w4a8"}


#: model-deepseek-v4.md §6.3: the CI configs given for calibration, per node: (file, node, TP, DP, role,
#: max_num_batched_tokens, max_num_seqs, block size, MTP k, DSA-CP)
CI_NODES = [
    ("DeepSeek-V4-Flash-W8A8-A3.yaml", None, 4, 4, "mixed", 10240, 64, 128, 1, False),
    ("DeepSeek-V4-flash-w8a8-PD-no-prefix.yaml", "0", 4, 4, "prefill", 8192, 16, 32, 1, True),
    ("DeepSeek-V4-flash-w8a8-PD-no-prefix.yaml", "1", 1, 16, "decode", 240, 60, 32, 3, False),
    ("DeepSeek-V4-Pro-w4a8-1M-PD.yaml", "0", 16, 2, "prefill", 2048, 16, 128, 1, False),
    ("DeepSeek-V4-Pro-w4a8-1M-PD.yaml", "2", 16, 2, "decode", 60, 60, 128, 1, False),
]


@pytest.mark.parametrize("name,node,tp,dp,role,batched,seqs,bs,k,cp", CI_NODES,
                         ids=[f"{c[0][:-5]}-{c[1]}" for c in CI_NODES])
def test_ci_configs_read_through_launch(shared_dir, name, node, tp, dp, role, batched, seqs, bs, k, cp, capsys):
    """The three DeepSeek-V4 CI configs of §6.3 (block sizes 32 and 128, MTP k 1 and 3, a 1M-token dataset,
    --no-disable-hybrid-kv-cache-manager) read through --launch into the deployment they run; offline, the
    checkpoint's hub name implies its preset."""
    args = ["memory", "--launch", str(shared_dir / "data" / "published" / "deepseek-v4" / name), "--format", "json"]
    if node is not None:
        args += ["--node", node]
    assert main(args) == 0
    rep = json.loads(capsys.readouterr().out)
    plan, rt = rep["plan"], rep["runtime"]
    assert (plan["tp"], plan["dp"], plan["role"]) == (tp, dp, role)
    assert (rt["max_num_batched_tokens"], rt["max_num_seqs"], rt["block_size"], rt["mtp"]) == (batched, seqs, bs, k)
    assert rep["model"]["name"].startswith("deepseek-v4") and rt["error"] is None
    assert plan["dsa_cp"] is cp        # the resolved switch: enable_dsa_cp on the weekly P node only


def test_hub_names_imply_presets_the_dspark_checkpoints_theirs():
    from auditor.launch.nightly import implied_preset
    assert implied_preset("Eco-Tech/DeepSeek-V4-Flash-w8a8-mtp") == "deepseek-v4-flash"
    assert implied_preset("ms://Eco-Tech/DeepSeek-V4-Pro-w4a8-mtp") == "deepseek-v4-pro"
    # the DSpark checkpoints carry a DSpark drafter, not Flash's MTP layer (tests/test_deepseek_v4_dspark.py)
    assert implied_preset("Eco-Tech/DeepSeek-V4-Flash-0731-w8a8") == "deepseek-v4-flash-0731"
    assert implied_preset("UploadWeight/DeepSeek-V4-Flash-DSpark-w4a8-test") == "deepseek-v4-flash-0731"
