"""audit synth: sparse, header-exact checkpoints. Byte-compared with the real tiny outputs where
they exist; full-size sizes checked against sums computed here from the published dims."""
from __future__ import annotations

import json
import math
import os
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from safetensors import safe_open

from auditor.errors import AuditInputError
from auditor.model.config import spec_from_config
from auditor.model.expected import expected_tensors
from auditor.model.presets import preset_names, preset_spec
from auditor.synth import config_from_spec, safetensors_header, synthesize
from auditor.cli.synth import synth_command
from auditor.units import parse_size


def raw_header(path: Path) -> tuple[bytes, dict]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        body = f.read(n)
    return struct.pack("<Q", n) + body, json.loads(body)


def header_data_bytes(path: Path) -> int:
    _, h = raw_header(path)
    return sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in h.items() if k != "__metadata__")


def test_tiny_w8a8_is_byte_identical_to_msmodelslim(ckpts, tmp_path):
    real = ckpts / "glm5-tiny-w8a8"
    synthesize(tmp_path / "out", str(real), "w8a8")
    out = tmp_path / "out"
    for rel in ("quant_model_weights-00001-of-00001.safetensors", "rot.safetensors",
                "optional/quarot.safetensors"):
        assert raw_header(out / rel)[0] == raw_header(real / rel)[0], rel
        assert (out / rel).stat().st_size == (real / rel).stat().st_size, rel
    for rel in ("quant_model_weights.safetensors.index.json", "quant_model_description.json"):
        assert (out / rel).read_bytes() == (real / rel).read_bytes(), rel


def test_header_writer_reproduces_transformers_shards(ckpts):
    for shard in sorted((ckpts / "glm5-tiny-bf16").glob("model-*.safetensors")):
        raw, h = raw_header(shard)
        rows = [(k, v["dtype"], tuple(v["shape"])) for k, v in h.items() if k != "__metadata__"]
        head, data = safetensors_header(rows, {"format": "pt"})
        assert head == raw, shard.name
        assert len(head) + data == shard.stat().st_size


def glm51_w8a8_bytes() -> int:
    """GLM-5.1 W8A8 + MTP stored bytes from the published dims, written out term by term."""
    H, NH, Qr, Lkv, Dn, Dr, Dv = 6144, 64, 2048, 512, 192, 64, 256
    IH, ID, E, S, I, Id, V, L, Kd = 32, 128, 256, 1, 2048, 12288, 154880, 78, 3

    def static(n, k):      # I8 weight, I32 quant_bias, F32 input_scale/offset, F32 deq_scale
        return n * k + 4 * n + 4 + 4 + 4 * n

    def dynamic(n, k):     # I8 weight, F32 weight_scale and weight_offset [n,1]
        return n * k + 8 * n

    attn_quant = (static(Qr, H) + static(NH * (Dn + Dr), Qr) + static(Lkv + Dr, H)
                  + static(H, NH * Dv) + static(IH * ID, Qr))
    attn_float = 2 * (NH * (Dn + Dv) * Lkv + ID * H + IH * H)
    norms = 4 * (Qr + Lkv + 2 * ID + 2 * H)
    dense = 2 * dynamic(Id, H) + dynamic(H, Id)
    moe = 2 * E * H + 4 * E + (E + S) * (2 * dynamic(I, H) + dynamic(H, I))
    main = L * (attn_quant + attn_float + norms) + Kd * dense + (L - Kd) * moe
    mtp_attn = 2 * (Qr * H + NH * (Dn + Dr) * Qr + (Lkv + Dr) * H + NH * (Dn + Dv) * Lkv
                    + H * NH * Dv + IH * ID * Qr + ID * H + IH * H)
    mtp_moe = 2 * E * H + 4 * E + (E + S) * 2 * 3 * I * H
    mtp = mtp_attn + norms + mtp_moe + 3 * 2 * H + 2 * V * H + 2 * H * 2 * H + 2 * V * H
    top = 2 * V * H + 4 * H + 4 * V * H            # embed bf16, norm f32, lm_head f32
    side = 2 * H * H + 4 * H * H                   # rot.weight bf16, global_rotation f32
    return main + mtp + top + side


def test_full_size_glm51_w8a8_costs_no_disk(tmp_path):
    out = tmp_path / "glm51"
    t0 = time.perf_counter()
    res = synthesize(out, "glm-5.1", "w8a8")
    elapsed = time.perf_counter() - t0
    assert elapsed < 30, f"full-size synth took {elapsed:.1f}s"
    expected = glm51_w8a8_bytes()
    assert res.tensor_bytes == expected
    assert 700e9 < expected < 800e9                 # ~754B params at ~1 byte each
    assert 0 < res.logical_bytes - res.tensor_bytes < 100 * 2 ** 20   # headers + JSON only
    assert res.disk_bytes < 100 * 2 ** 20
    assert sum(os.stat(p).st_blocks * 512 for p in out.rglob("*") if p.is_file()) == res.disk_bytes

    index = json.loads((out / "quant_model_weights.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()) - {"rot.safetensors"})
    sizes = [header_data_bytes(out / s) for s in shards]
    assert max(sizes) <= 5 * 2 ** 30
    assert len(shards) >= math.ceil(index["metadata"]["total_size"] / (5 * 2 ** 30))
    assert sum(sizes) == index["metadata"]["total_size"]
    assert len(index["weight_map"]) == res.tensors - 1          # all but optional/quarot
    desc = json.loads((out / "quant_model_description.json").read_text())
    assert desc["model.layers.77.mlp.experts.255.down_proj.weight"] == "W8A8_DYNAMIC"
    assert desc["model.layers.78.mlp.experts.255.down_proj.weight"] == "FLOAT"

    name = "model.layers.40.self_attn.q_b_proj.deq_scale"
    with safe_open(str(out / index["weight_map"][name]), framework="np") as f:
        assert name in set(f.keys())
        sl = f.get_slice(name)
        assert sl.get_shape() == [64 * 256] and sl.get_dtype() == "F32"
        assert not np.any(f.get_tensor(name))       # a hole reads as zeros
        w = "model.layers.40.self_attn.q_b_proj.weight"
        assert f.get_slice(w).get_shape() == [16384, 2048] and f.get_slice(w).get_dtype() == "I8"
        assert f.get_slice(w)[:2, :3].shape == (2, 3)


def test_deepseek_v32_fp8_block(tmp_path):
    out = tmp_path / "ds"
    res = synthesize(out, "deepseek-v3.2", "fp8-block", shard_bytes=50 * 2 ** 30)
    assert (out / "model.safetensors.index.json").is_file()
    assert not (out / "quant_model_description.json").exists()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization_config"]["weight_block_size"] == [128, 128]
    index = json.loads((out / "model.safetensors.index.json").read_text())
    wm = index["weight_map"]
    assert list(wm) == sorted(wm)
    # by hand: o_proj N = 7168, K = 128 heads x 128 = 16384 -> [56, 128];
    # MTP q_a_proj N = 1536, K = 7168 -> [12, 56]; dense down_proj N = 7168, K = 18432 -> [56, 144]
    cases = {"model.layers.10.self_attn.o_proj.weight_scale_inv": [56, 128],
             "model.layers.61.self_attn.q_a_proj.weight_scale_inv": [12, 56],
             "model.layers.0.mlp.down_proj.weight_scale_inv": [56, 144]}
    for name, shape in cases.items():
        with safe_open(str(out / wm[name]), framework="np") as f:
            assert f.get_slice(name).get_shape() == shape
            assert f.get_slice(name).get_dtype() == "F32"
            w = f.get_slice(name.replace("_scale_inv", ""))
            assert w.get_dtype() == "F8_E4M3"
            assert [math.ceil(d / 128) for d in w.get_shape()] == shape
    _, meta = raw_header(out / wm["model.embed_tokens.weight"])
    assert meta["__metadata__"] == {"format": "pt"}
    assert res.tensors == len(wm)


def test_dense_32b_bf16_index(tmp_path):
    out = tmp_path / "d32"
    res = synthesize(out, "dense-32b", "bf16")
    index = json.loads((out / "model.safetensors.index.json").read_text())
    H, L, V, I, q, kv = 5120, 64, 151936, 25600, 64 * 128, 8 * 128
    params = L * (2 * H * q + 2 * H * kv + 3 * H * I + 2 * H) + 2 * V * H + H
    assert index["metadata"]["total_parameters"] == params
    assert index["metadata"]["total_size"] == 2 * params == res.tensor_bytes
    shards = sorted(set(index["weight_map"].values()))
    assert shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    for s in shards:
        assert header_data_bytes(out / s) <= 5 * 2 ** 30


def test_single_shard_transformers_has_no_index(tmp_path):
    spec = preset_spec("dense-32b")
    cfg = {**config_from_spec(spec), "num_hidden_layers": 1, "vocab_size": 1000}
    synthesize(tmp_path / "one", "dense-32b", "bf16", config=cfg)
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["config.json", "model.safetensors"]


def test_refuses_non_empty_dir_and_overwrite_drops_stale_shards(tmp_path):
    out = tmp_path / "o"
    synthesize(out, "dense-32b", "bf16", shard_bytes=2 * 2 ** 30)
    before = len(list(out.glob("model-*.safetensors")))
    with pytest.raises(AuditInputError, match="not empty"):
        synthesize(out, "dense-32b", "bf16")
    synthesize(out, "dense-32b", "bf16", overwrite=True)
    after = list(out.glob("model-*.safetensors"))
    assert before > len(after) > 0
    assert all(p.name.endswith(f"-of-{len(after):05d}.safetensors") for p in after)


@pytest.mark.parametrize("name", preset_names())
def test_config_from_spec_round_trips(name):
    spec = preset_spec(name)
    back = spec_from_config(config_from_spec(spec), name=spec.name)
    assert expected_tensors(back, "w8a8") == expected_tensors(spec, "w8a8")


def test_parse_size():
    assert parse_size("5GiB") == 5 * 2 ** 30
    assert parse_size("4GB") == 4 * 10 ** 9
    assert parse_size("1.5MiB") == 1572864
    assert parse_size("2000000B") == 2000000
    assert parse_size("2G") == parse_size("2GiB") == 2 * 2 ** 30   # a bare G is GiB everywhere
    for bad in ("five", "2000000", "38", "3 parsecs", ""):
        with pytest.raises(AuditInputError):
            parse_size(bad)


def test_synth_refuses_zero_shard_size(tmp_path):
    r = CliRunner().invoke(synth_command, [str(tmp_path / "c"), "--model", "dense-32b", "--shard-size", "0B"])
    assert r.exit_code != 0 and "--shard-size" in str(r.exception)


def test_cli_prints_one_line_summary(tmp_path):
    runner = CliRunner()
    r = runner.invoke(synth_command, [str(tmp_path / "c"), "--model", "dense-32b", "--shard-size", "10GiB"])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1
    assert "dense-32b bf16 (transformers)" in lines[0] and "579 tensors" in lines[0]
    assert "61.02 GiB logical" in lines[0]
    r = runner.invoke(synth_command, [str(tmp_path / "c"), "--model", "dense-32b"])
    assert isinstance(r.exception, AuditInputError)


def test_a_preset_inventory_is_built_once_and_cannot_be_changed():
    """open_model shares one synthesized inventory per (spec, recipe) within a process; its columns are
    read-only, so a caller writing into one raises instead of changing the next caller's answer."""
    import numpy as np
    from auditor.source import open_model
    a, b = open_model("glm-5.1", "w8a8"), open_model("glm-5.1", "w8a8")
    assert a.table is b.table
    assert open_model("glm-5.1", "bf16").table is not a.table
    for col in (a.table.nbytes, a.table.loaded, a.table.shape, a.table.name_spans.start):
        with pytest.raises(ValueError):
            col[0] = col[0]
    assert int(np.sum(a.table.nbytes)) == int(np.sum(b.table.nbytes))
