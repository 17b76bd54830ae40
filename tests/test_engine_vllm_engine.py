"""Upstream vLLM (CUDA) as a registered engine family: version resolution, the version rows' facts,
the launch line, the folder's imports, and ``audit memory`` running on it end to end."""
from __future__ import annotations

import ast
import json
import shlex
from pathlib import Path

import pytest

from auditor.cli import main
from auditor.devices.profiles import load_device
from auditor.deployment import InstancePlan
from auditor.engines import registry
from auditor.engines.vllm import versions
from auditor.errors import AuditInputError

FOLDER = Path(__file__).resolve().parents[1] / "auditor" / "engines" / "vllm"


@pytest.mark.parametrize("text, key, noted", [
    ("vllm", "vllm@0.28", False), ("vllm@0.28", "vllm@0.28", False), ("vllm@0.28.0", "vllm@0.28", False),
    ("vllm@0.20", "vllm@0.19", True), ("vllm@0.23.1", "vllm@0.22", True), ("vllm@0.25.0", "vllm@0.25", False),
    ("vllm@0.30", "vllm@0.28", True),
])
def test_version_resolution(text, key, noted):
    got, note = registry.resolve_engine(text)
    assert got == key and (note is not None) == noted
    assert registry.resolve(text).family == "vllm"


def test_older_than_modelled_and_ascend_default_untouched():
    with pytest.raises(AuditInputError, match="older than the oldest"):
        registry.resolve_engine("vllm@0.18")
    assert registry.resolve_engine("main")[0] == "vllm-ascend@main"
    assert registry.resolve_engine("0.23")[0].startswith("vllm-ascend@")


def test_version_rows_follow_the_spec():
    p = versions.PROFILES
    # gpu_memory_utilization default 0.9 up to v0.19, 0.92 from v0.22 (spec §0)
    assert p["vllm@0.19"].default_gmu == 0.9 and p["vllm@0.22"].default_gmu == 0.92 == p["vllm@0.28"].default_gmu
    assert not p["vllm@0.21"].default_gmu_confirmed
    # CUDA-graph estimate subtracted by default since v0.21.0
    assert [k for k, r in p.items() if r.cudagraph_profiled] == ["vllm@0.21", "vllm@0.22", "vllm@0.25", "vllm@0.28"]
    assert registry.resolve("vllm@0.19").graph_deducted_bytes() == 0 < registry.resolve("vllm@0.21").graph_deducted_bytes()
    # plain fp8 on Blackwell only where it was seen (v0.28, GPU-01)
    assert [k for k, r in p.items() if r.blackwell_plain_fp8] == ["vllm@0.28"]


def _inst(**kw):
    base = dict(name="aggregated", count=1, tp=8, dp=1, ep=1, sp=False, max_num_seqs=64, max_num_batched_tokens=8192,
                max_model_len=32768, gpu_memory_utilization=0.92)
    return InstancePlan(**{**base, **kw})


def test_launch_line_is_pasteable():
    eng = registry.resolve("vllm@0.28")
    out = eng.launch("zai-org/GLM-5.1-FP8", _inst(mtp=3, kv_cache_dtype="fp8", dp=2, ep=16))
    words = shlex.split(out["command"].replace("\\\n", " "))
    assert words[:3] == ["vllm", "serve", "zai-org/GLM-5.1-FP8"]
    assert words[words.index("--tensor-parallel-size") + 1] == "8"
    assert words[words.index("--data-parallel-size") + 1] == "2" and "--enable-expert-parallel" in words
    assert words[words.index("--kv-cache-dtype") + 1] == "fp8"
    assert json.loads(words[words.index("--speculative-config") + 1]) == {"method": "mtp", "num_speculative_tokens": 3}
    assert "--gpu-memory-utilization" not in words          # 0.92 is v0.28's default
    assert out["env"] == {}
    older = registry.resolve("vllm@0.19").launch("m", _inst())
    assert "--gpu-memory-utilization 0.92" in older["args"]  # v0.19's default is 0.9
    eager = eng.launch("m", _inst(graph_tokens=0))
    assert "--enforce-eager" in eager["args"]


@pytest.mark.parametrize("kw", [dict(sp=True), dict(fused_mc2=1), dict(balance_scheduling=True), dict(dcp=2)])
def test_launch_refuses_ascend_switches(kw):
    with pytest.raises(AuditInputError):
        registry.resolve("vllm@0.28").launch("m", _inst(**kw))


def test_folder_imports_only_generic_modules():
    for path in FOLDER.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert "vllm_ascend" not in node.module, f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any("vllm_ascend" in a.name for a in node.names), path.name


def test_audit_memory_runs_on_h200(shared_dir, capsys):
    rc = main(["memory", str(shared_dir / "data" / "configs" / "glm-5.1-fp8"), "--engine", "vllm@0.25", "--tp", "8",
               "--device", "h200", "--max-model-len", "32768", "--gpu-memory-utilization", "0.92"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "engine: vLLM v0.25.0 (CUDA)" in out and "(h200, GiB)" in out
    assert "Model loading took" in out and "Available KV cache memory:" in out
    # bf16 KV, 78 layers with an indexer each: 78 x (1152 + 132) B per token
    assert "100,152 B/token" in out


def test_kernel_program_needs_the_gpu_generation():
    """The CUDA kernels depend on the GPU generation: without it the engine refuses by name; with it the
    sparse-MLA backend follows the cache layout (FlashInfer MLA sparse for plain fp8 on SM100)."""
    eng = registry.resolve("vllm@0.28")
    with pytest.raises(AuditInputError, match="GPU generation"):
        eng.kernel_path("bf16")
    hopper = eng.kernel_path_on("fp8", eng.soc(load_device("h200")))
    blackwell = eng.kernel_path_on("fp8", eng.soc(load_device("b200")))
    assert (hopper.arch, blackwell.arch) == ("sm90", "sm100")
    assert hopper.kernel_for("sfa", "BF16", layout="fp8_ds_mla", ep=False) == "flash_mla_sparse"
    assert blackwell.kernel_for("sfa", "BF16", layout="fp8_e4m3", ep=False) == "flashinfer_mla_sparse"
    # select_fp8_moe_backend: Triton first on SM90 under TP only, FlashInfer-CUTLASS under EP, TRTLLM on SM100
    assert hopper.kernel_for("grouped_matmul", "F8", layout="bf16", ep=False) == "fused_moe[TRITON]"
    assert hopper.kernel_for("grouped_matmul", "F8", layout="bf16", ep=True) == "fused_moe[FLASHINFER_CUTLASS]"
    assert blackwell.kernel_for("grouped_matmul", "F8", layout="bf16", ep=False) == "fused_moe[FLASHINFER_TRTLLM]"


def test_an_msmodelslim_checkpoint_is_refused_on_cuda(capsys):
    """The glm-5.1 preset is msModelSlim W8A8: vLLM on CUDA has no linear method for it, so memory leads
    its answer with the refusal instead of modelling 177 GiB of 'float' weights per rank as if it loaded."""
    import json

    from auditor.cli import main
    main(["memory", "glm-5.1", "--engine", "vllm", "--device", "h200", "--tp", "8", "--ep", "8",
          "--max-model-len", "32K", "--format", "json"])
    rep = json.loads(capsys.readouterr().out)
    assert rep["answer"].startswith("ENGINE CANNOT START: scheme W8A8")
    errors = [f for f in rep["findings"] if f["severity"] == "error"]
    assert errors and all("refuses to start" in f["message"] for f in errors)
    # the same preset on vLLM-Ascend is the engine's own recipe: no such error
    main(["memory", "glm-5.1", "--tp", "16", "--ep", "16", "--max-model-len", "32K", "--format", "json"])
    rep = json.loads(capsys.readouterr().out)
    assert not any("no engine rule" in f["message"] for f in rep["findings"])
