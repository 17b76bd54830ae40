"""The DSpark drafter of DeepSeek-V4-Flash-0731 / Flash-DSpark on vLLM-Ascend (method "dspark").

Every expected figure is worked by hand here from model-deepseek-v4.md: the drafter's modules (§1.6:
``dspark_num_mtp_layers`` window-only decoder layers, MoE never hash-routed, ``main_proj [H, H x
len(dspark_target_layer_ids)]``, ``main_norm``, ``norm``, ``markov_w1`` / ``markov_w2`` ``[V, markov_rank]``,
``proj [1, H + markov_rank]``, its own embedding, head and ``hc_head_*``) with §3.2's sharding rules,
the pool (§4.1: 3 SWA caches instead of 1; §4.3: NT = 22 + 3), the §6.2 tutorial deployments. The
Flash-0731 config (46 ratios, target layers [40, 41, 42], Markov rank 256) is a single third-party copy,
UNCONFIRMED (§1.1).
"""
from __future__ import annotations

import json

import pytest

from auditor.cli import main
from auditor.engines.registry import as_engine
from auditor.memory.audit import run_memory_audit
from auditor.model.presets import preset_config, preset_spec
from auditor.parallel import ParallelPlan
from auditor.source import open_model

GiB = 2 ** 30
FLASH = dict(H=4096, NH=64, D=512, Qr=1024, G=8, R=1024, I=2048, V=129280, hc=4)


def _memory_json(args, capsys):
    assert main(["memory", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _small_cfg(**over):
    """Flash dimensions, 5 main layers, 8 experts, 3 DSpark layers reading layers 2-4, Markov rank 256."""
    cfg = {k: v for k, v in preset_config("deepseek-v4-flash").items() if k != "num_nextn_predict_layers"}
    cfg.update(num_hidden_layers=5, n_routed_experts=8, compress_ratios=[0, 4, 128, 4, 128, 0, 0, 0],
               dspark_target_layer_ids=[2, 3, 4], dspark_markov_rank=256, dspark_num_mtp_layers=3)
    cfg.update(over)
    return cfg


def _write(tmp_path, cfg, name="cfg"):
    (tmp_path / name).mkdir()
    (tmp_path / name / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path / name)


def test_flash_0731_structure():
    """§1.1: 43 main layers (Flash's kinds) + 3 window-only draft layers, none hash-routed."""
    s = preset_spec("deepseek-v4-flash-0731")
    assert (s.Lyr, s.mtp_layers, s.drafter, s.drafter_targets, s.markov_rank) == (43, 3, "dspark", (40, 41, 42), 256)
    assert [k.compress_ratio for k in s.layer_kinds] == [0, 0] + [4, 128] * 20 + [4, 0, 0, 0]
    assert all(k.mtp and k.attention == "window" and k.router == "score" for k in s.layer_kinds[43:])
    # the main model is Flash's, layer for layer
    assert s.layer_kinds[:43] == preset_spec("deepseek-v4-flash").layer_kinds[:43]


def test_drafter_bytes_per_rank_by_hand(tmp_path):
    """bf16, TP2 EP2 (DP1), DSA-CP off: what the drafter adds to a rank, each module from §3.2's rules."""
    d = FLASH
    H, NH, D, Qr, G, R, I, V, hc = (d[k] for k in ("H", "NH", "D", "Qr", "G", "R", "I", "V", "hc"))
    tp, ep, E, rank = 2, 2, 8, 256
    Vp = -(-V // 64) * 64
    layer = (2 * H * 2                                      # input / post-attention norms
             + 2 * ((2 + hc) * hc * hc * H + (2 + hc) * hc + 3) * 4   # hc_attn_*, hc_ffn_* fp32
             + Qr * H * 2 + Qr * 2                          # wq_a (replicated) + q_norm
             + NH * D // tp * Qr * 2                        # wq_b column / TP
             + D * H * 2 + D * 2                            # wkv (replicated) + kv_norm
             + G * R // tp * (NH * D // G) * 2              # wo_a column over groups
             + H * G * R // tp * 2                          # wo_b row
             + NH // tp * 4                                 # attn_sink fp32 [NH/TP]
             + E * H * 2 + E * H * 4 + E * 4                # gate bf16 + fp32 copy + score bias (never hash)
             + E // ep * 3 * H * I * 2                      # routed experts E/EP
             + 2 * I // tp * H * 2 + H * I // tp * 2)       # shared expert gate_up / down, I/TP
    top = (H * 3 * H * 2 + 2 * H * 2                        # main_proj [H, 3H] replicated + main_norm, norm
           + 2 * Vp // tp * rank * 2                        # markov_w1 / markov_w2 [V/TP, rank]
           + (H + rank) * 2                                 # proj [1, H + rank]
           + 2 * Vp // tp * H * 2                           # its own embed_tokens and lm_head [V/TP, H]
           + (hc * hc * H + hc + 1) * 4)                    # hc_head_* fp32
    src = open_model(_write(tmp_path, _small_cfg()), recipe="bf16")
    plan = ParallelPlan(tp=tp, dp=1, ep=ep, mtp=True, num_speculative_tokens=7)
    audit = run_memory_audit(src, plan, as_engine("vllm-ascend@main"))
    got = sum(g["bytes"] for g in audit.tensor_rows() if g["block"] == "mtp")
    assert got == 3 * layer + top
    # without the drafter none of it is loaded
    off = run_memory_audit(src, plan.with_(mtp=False, num_speculative_tokens=0), as_engine("vllm-ascend@main"))
    assert not [g for g in off.tensor_rows() if g["block"] == "mtp"]


@pytest.mark.parametrize("bs,tuple_bytes", [(128, 131072 + 16640), (32, 32768 + 4160)])
def test_pool_nt_and_block_ids_per_gib(bs, tuple_bytes):
    """§4.3: NT = 22 + 3 for DSpark Flash; a block id costs P_t x NT of the budget; §4.1: 46 SWA caches."""
    s = preset_spec("deepseek-v4-flash-0731")
    kv = as_engine("vllm-ascend@main").kv_spec(s, ParallelPlan(tp=4, dp=4, ep=16, block_size=bs, mtp=True),
                                               mtp=True)
    assert kv.page_block_bytes == tuple_bytes * (22 + 3)
    assert round(GiB / kv.page_block_bytes, 2) == {128: 290.77, 32: 1163.07}[bs]
    assert (kv.main_layers, kv.mtp_layers) == (43, 3)
    # allocated: 21 full tuples, the half tuple of layer 21 (its 131072-slot page), one SWA page per draft layer
    swa_page = 131072 * bs // 128
    assert kv.config.block_bytes == 21 * tuple_bytes + swa_page + 3 * swa_page
    assert kv.kv_tensors == 2 * 21 + 1 + 3


TUTORIALS = [
    # §6.2 / Appendix A.1 (main 182b75ea), dspark 7 with an eager draft
    ("F-A2-DS", "a2-376t", "--recipe w4a8 --tp 8 --dp 1 --max-model-len 800000 --max-num-batched-tokens 8192 "
     "--max-num-seqs 32 --block-size 128 --mtp 7"),
    ("F-A3-DS", "a3-752t", "--tp 4 --dp 4 --max-model-len 1048576 --max-num-batched-tokens 10240 "
     "--max-num-seqs 64 --block-size 32 --mtp 7 --dsa-cp"),
    ("F-A3-PD-DS P", "a3-752t", "--tp 4 --dp 4 --max-model-len 1048576 --max-num-batched-tokens 8192 "
     "--max-num-seqs 16 --block-size 32 --mtp 7 --shared-expert-dp --no-dsa-cp --role prefill --hccl-buffsize 2560"),
    ("F-A3-PD-DS D", "a3-752t", "--tp 1 --dp 16 --max-model-len 1048576 --max-num-batched-tokens 256 "
     "--max-num-seqs 32 --block-size 32 --mtp 7 --role decode"),
]


@pytest.mark.parametrize("tid,device,flags", TUTORIALS, ids=[t[0] for t in TUTORIALS])
def test_dspark_tutorial_deployments_start(tid, device, flags, capsys):
    """Every §6.2 DSpark deployment is predicted to start, with the engine's own lines."""
    rep = _memory_json(["deepseek-v4-flash-0731", "--ep", "on", "--device", device, *flags.split()], capsys)
    rt = rep["runtime"]
    assert rt["error"] is None and rt["fits"] and rt["num_blocks"] > 0
    assert rt["kv_spec"]["mtp_layers"] == 3
    lines = rep["vllm_log_lines"]
    assert [ln.split(":")[0].split(" took")[0] for ln in lines] == [
        "Loading model weights", "Available KV cache memory", "GPU KV cache size",
        f"Maximum concurrency for {rt['max_model_len']:,} tokens per request"]


def test_launch_with_method_dspark_reads_as_the_drafter(tmp_path, capsys):
    """--speculative-config method dspark loads the checkpoint's drafter with K draft tokens (not refused)."""
    serve = ("vllm serve deepseek-v4-flash-0731 --tensor-parallel-size 4 --data-parallel-size 4 "
             "--enable-expert-parallel --max-model-len 1048576 --max-num-batched-tokens 10240 --max-num-seqs 64 "
             "--block-size 32 --speculative-config '{\"method\": \"dspark\", \"num_speculative_tokens\": 7, "
             "\"enforce_eager\": true}' --additional-config '{\"enable_dsa_cp\": true}'")
    (tmp_path / "run.sh").write_text(serve + "\n")
    launched = _memory_json(["--launch", str(tmp_path / "run.sh"), "--device", "a3-752t"], capsys)
    own = _memory_json(["deepseek-v4-flash-0731", "--device", "a3-752t", *TUTORIALS[1][2].split(), "--ep", "on"],
                       capsys)
    assert launched["worst_rank"] == own["worst_rank"] and launched["runtime"]["mtp"] == 7
    assert launched["runtime"]["num_blocks"] == own["runtime"]["num_blocks"]


def test_synthesized_dspark_checkpoint_reads_like_the_config(tmp_path, capsys):
    """A header-exact DSpark checkpoint (DeepSeek-native names, the drafter under mtp.J.) is classified
    into the same resident bytes as its config-only inventory."""
    cfg_dir = _write(tmp_path, _small_cfg())
    assert main(["synth", str(tmp_path / "ckpt"), "-m", cfg_dir, "--recipe", "w8a8"]) == 0
    names = json.loads((tmp_path / "ckpt" / "quant_model_description.json").read_text())
    for n in ("mtp.0.main_proj.weight", "mtp.0.markov_w1.weight", "mtp.0.markov_w2.weight", "mtp.0.proj.weight",
              "mtp.0.emb.tok_emb.weight", "mtp.0.head.weight", "mtp.2.attn.wq_a.weight"):
        assert n in names, n
    assert "mtp.1.main_proj.weight" not in names and "mtp.0.e_proj.weight" not in names
    assert names["mtp.0.main_proj.weight"] == "FLOAT" and names["mtp.2.attn.wq_a.weight"] == "W8A8_DYNAMIC"
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["dspark_target_layer_ids"] == [2, 3, 4]
    capsys.readouterr()
    flags = ["--tp", "2", "--dp", "2", "--ep", "on", "--mtp", "7", "--max-model-len", "8192", "--device", "a3-752t"]
    ckpt = _memory_json([str(tmp_path / "ckpt"), *flags], capsys)
    conf = _memory_json([cfg_dir, "--recipe", "w8a8", *flags], capsys)
    assert ckpt["worst_rank"]["bytes"] == conf["worst_rank"]["bytes"]
    assert ckpt["ranks"][0]["by_block"]["mtp"] == conf["ranks"][0]["by_block"]["mtp"] > 0
    assert not [f for f in ckpt["findings"] if f["severity"] == "error"]


@pytest.mark.parametrize("over,words", [
    # 44 ratios (Flash's 43 + 1 MTP) with the DSpark keys: the 3 draft layers' kinds are not given
    ({"compress_ratios": [0, 4, 128, 4, 128, 0]}, "compress_ratios has 6 entries"),
    ({"compress_ratios": [0, 4, 128, 4, 128, 0, 4, 0]}, "DSpark's draft layers are window-only"),
    ({"dspark_target_layer_ids": [2, 3, 9]}, "must be distinct main layers"),
    ({"dspark_markov_rank": None}, "dspark_markov_rank"),
])
def test_inconsistent_dspark_configs_are_refused_in_one_line(tmp_path, capsys, over, words):
    cfg = _small_cfg(**over)
    assert main(["memory", _write(tmp_path, {k: v for k, v in cfg.items() if v is not None}), "--tp", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("cmd,extra", [
    ("perf", []), ("sweep", []),
    ("bench", ["--concurrency", "8", "--isl", "1000", "--osl", "100", "--num-prompts", "16"]),
])
def test_a_drafter_without_an_op_program_is_refused_not_timed_as_mtp(cmd, extra, capsys, monkeypatch):
    """Take DSpark's program away from the family: every timing command refuses in one line instead of
    pricing the block drafter as MTP passes."""
    from auditor.perf.families import program_of
    fam = program_of("deepseek_v4")
    monkeypatch.delitem(fam.drafters, "dspark")
    assert main([cmd, "deepseek-v4-flash-0731", "--tp", "8", "--dp", "4", "--ep", "on", "--mtp", "7",
                 "--device", "a3-752t", *extra]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("audit: error")]
    assert len(err) == 1 and "dspark drafter has no op program" in err[0]


def test_upstream_vllm_refuses_dspark(capsys):
    assert main(["memory", "deepseek-v4-flash-0731", "--engine", "vllm@0.28", "--device", "h200", "--tp", "8",
                 "--kv-cache-dtype", "fp8", "--recipe", "fp8-block"]) == 2
    assert "DSpark" in capsys.readouterr().err


@pytest.mark.parametrize("model,method,words", [
    ("deepseek-v4-flash", "dspark", "method dspark on deepseek-v4-flash"),
    ("deepseek-v4-flash-0731", "mtp", "method mtp on deepseek-v4-flash-0731, a DSpark checkpoint"),
])
@pytest.mark.parametrize("cmd", ["memory", "perf"])
def test_a_method_that_is_not_the_checkpoints_drafter_is_refused(tmp_path, capsys, model, method, words, cmd):
    """The launch's method must be the checkpoint's drafter: never the one priced as the other."""
    (tmp_path / "run.sh").write_text(
        f"vllm serve {model} --tensor-parallel-size 4 --data-parallel-size 4 --enable-expert-parallel "
        f"--max-model-len 1048576 --block-size 32 --speculative-config "
        f"'{{\"method\": \"{method}\", \"num_speculative_tokens\": 7}}'\n")
    assert main([cmd, "--launch", str(tmp_path / "run.sh"), "--device", "a3-752t"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("audit: error")]
    assert len(err) == 1 and words in err[0]


def test_release_branch_rows(capsys):
    """v0.26.0rc's F-A3-DS (Appendix A.1: enable_flashcomm1, no DSA-CP) starts; v0.24, whose DSpark code was
    not read, refuses the drafter in one line."""
    flags = ["deepseek-v4-flash-0731", "--ep", "on", "--device", "a3-752t", "--tp", "4", "--dp", "4", "--sp",
             "--max-model-len", "1048576", "--max-num-batched-tokens", "10240", "--max-num-seqs", "64",
             "--block-size", "32", "--mtp", "7"]
    rt = _memory_json([*flags, "--engine", "vllm-ascend@0.26"], capsys)["runtime"]
    assert rt["fits"] and rt["kv_spec"]["page_block_bytes"] == (32768 + 4160) * 25
    assert main(["memory", *flags, "--engine", "vllm-ascend@0.24"]) == 2
    err = capsys.readouterr().err.strip()
    assert "DSpark drafter is not modelled on vLLM-Ascend v0.24.0rc" in err and len(err.splitlines()) == 1


# ------------------------------------------------------------------ property: DSpark keys from outside
from hypothesis import given, settings, strategies as st  # noqa: E402

_JSONISH = st.one_of(st.none(), st.booleans(), st.integers(-5, 100), st.floats(allow_nan=True, allow_infinity=True),
                     st.text(max_size=6), st.lists(st.integers(-3, 60), max_size=6))


_N_MAIN = preset_config("deepseek-v4-flash")["num_hidden_layers"]


@st.composite
def _dspark_keys(draw):
    """(ids, layers, rank, ratios past the main layers): a consistent DSpark drafter with each field
    replaced by an arbitrary JSON value now and then, or arbitrary values throughout."""
    if not draw(st.booleans()):
        return (draw(_JSONISH), draw(_JSONISH), draw(_JSONISH),
                draw(st.lists(st.sampled_from([0, 1, 4, 128, 7]), max_size=5)))
    n = draw(st.integers(1, 4))
    ids = draw(st.lists(st.integers(0, _N_MAIN - 1), min_size=1, max_size=4, unique=True))
    layers = None if n == 3 and draw(st.booleans()) else n           # 3 is the engine's default
    rank = draw(st.integers(1, 512))
    ratios = [0] * n
    junk = draw(st.sampled_from([None, "ids", "layers", "rank", "ratios"]))
    if junk == "ids":
        ids = draw(_JSONISH)
    elif junk == "layers":
        layers = draw(_JSONISH)
    elif junk == "rank":
        rank = draw(_JSONISH)
    elif junk == "ratios":
        ratios = draw(st.lists(st.sampled_from([0, 1, 4, 128, 7]), max_size=5))
    return ids, layers, rank, ratios


@settings(max_examples=200, deadline=None)
@given(keys=_dspark_keys())
def test_any_dspark_key_values_build_a_drafter_or_are_refused_in_one_line(keys):
    """Whatever a config puts in the DSpark keys (and however many ratios it lists past the main layers),
    reading it gives a spec whose drafter agrees with those keys, or one AuditInputError line; never
    another exception, never an MTP drafter read from a DSpark config."""
    from auditor.errors import AuditInputError
    from auditor.model.config import spec_from_config
    ids, layers, rank, extra_ratios = keys
    base = {k: v for k, v in preset_config("deepseek-v4-flash").items() if k != "num_nextn_predict_layers"}
    n_main = base["num_hidden_layers"]
    cfg = {**base, "compress_ratios": list(base["compress_ratios"][:n_main]) + extra_ratios,
           "dspark_target_layer_ids": ids, "dspark_num_mtp_layers": layers, "dspark_markov_rank": rank}
    try:
        spec = spec_from_config(cfg)
    except AuditInputError as exc:
        assert "\n" not in str(exc)
        return
    set_keys = [v for v in (ids, layers, rank) if v not in (None, 0, False, [], "")]
    if not set_keys:                      # every DSpark key off: a plain family config
        assert spec.drafter == "mtp"
        return
    assert spec.drafter == "dspark"
    assert list(spec.drafter_targets) == ids and spec.markov_rank == rank
    draft = spec.layer_kinds[spec.Lyr:]
    assert len(draft) == spec.mtp_layers == len(extra_ratios) and all(k.attention == "window" for k in draft)
