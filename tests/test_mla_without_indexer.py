"""DeepSeek-V3/R1: MLA without the lightning indexer. Its attention is FusedInferAttentionScore over the
whole latent cache (not SFA over top-k), there are no indexer ops, weights or cache; the preset is
DeepSeek-V3.2's published config without the index_* keys."""
from __future__ import annotations

import json

from auditor.cli import main
from auditor.model.presets import preset_spec


def test_preset_is_v32_without_indexer():
    v3, v32 = preset_spec("deepseek-v3"), preset_spec("deepseek-v3.2")
    assert v3.mla and not v3.dsa and v32.dsa
    assert (v3.H, v3.Lyr, v3.E, v3.Lkv, v3.Dr) == (v32.H, v32.Lyr, v32.E, v32.Lkv, v32.Dr) == (7168, 61, 256, 512, 64)


def test_perf_models_fia_attention_not_sfa(capsys):
    assert main(["perf", "deepseek-v3", "--tp", "16", "--ep", "16", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for phase in ("prefill", "decode"):
        names = {o["name"] for o in doc[phase]["ops"] if o["layer"] == 5}
        kinds = {o["kind"] for o in doc[phase]["ops"] if o["layer"] == 5}
        assert "self_attn.attention" in names and "self_attn.sfa" not in names
        assert not any("indexer" in n for n in names)
        assert "attention" in kinds and "sfa" not in kinds


def test_memory_kv_is_latent_only(capsys):
    """KV bytes per token: 61 layers x (512 + 64) x 2 B of latent, no indexer keys (hand count)."""
    assert main(["memory", "deepseek-v3", "--tp", "16", "--ep", "16", "--max-model-len", "8K",
                 "--format", "json"]) in (0, 3)
    rt = json.loads(capsys.readouterr().out)["runtime"]
    assert rt["kv_bytes_per_token"] == 61 * (512 + 64) * 2
