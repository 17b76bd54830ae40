"""Upstream vLLM (CUDA) versions: what each modelled release does, one row per version.

Rows for the releases engine-vllm-cuda.md covers (v0.19 to v0.28). Every field is one behaviour
with the vLLM code it was read from, as the spec cites it (file:line at a release where the spec
gives one, else the index copy); code elsewhere reads these fields and never tests a version
string. How a version text resolves to a row is generic (``engines/registry.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

#: spec §1.3: kv_cache_utils.py::_report_kv_cache_config, "GPU KV cache size in tokens =
#: max_concurrency * max_model_len" (index id 55240182351); the older form
#: ``num_blocks // len(kv_cache_groups) * min_block_size`` (index id 56670295837). For DSV3.2 and
#: GLM-5.x (one uniform group) the two agree to within block rounding.
KV_TOKENS_CONCURRENCY = "concurrency_x_len"
KV_TOKENS_BLOCKS = "blocks_x_block_size"


@dataclass(frozen=True)
class VllmProfile:
    name: str
    label: str
    version: str | None               # oldest release this row models ("X.Y.Z"); None: development head
    # --gpu-memory-utilization default (vllm/config/cache.py ``Field(default=..., gt=0, le=1)``)
    default_gmu: float
    default_gmu_confirmed: bool
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1: the CUDA-graph estimate is subtracted from
    # the KV budget (spec §1.2, "default since v0.21.0", gpu_worker.py:553 log line at v0.25)
    cudagraph_profiled: bool
    # what "GPU KV cache size: N tokens" counts (KV_TOKENS_*)
    kv_tokens_formula: str
    # FLASHINFER_MLA_SPARSE accepts fp8/fp8_e4m3 (plain 576 B) on SM100 (spec §2.1: an older copy,
    # index id 104376506, lists only auto/bf16; GPU-01 shows it on v0.28)
    blackwell_plain_fp8: bool
    blackwell_plain_fp8_confirmed: bool
    # file:line of the log lines at this release (they drift; spec §1.2-§1.4, GPU-04)
    line_sites: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    # --- weights (Part B; the same in every row the spec covers)
    gate_dtype: str = "pd"            # GateLinear has no quant_config: bf16 [E, H] (deepseek_v2.py @002d6073)
    kv_b_kept: bool = True            # kv_b_proj is not disposed on CUDA (mla_attention.py, index id 59703362141)
    indexer_fused_wk: bool = True     # indexer.wk_weights_proj = wk + weights_proj, bf16 (deepseek_v2.py @002d6073)
    index_cache: bool = True          # skip-top-k layers build no indexer (#51209; deepseek_v2.py @002d6073)
    mtp_shares_embed: bool = True     # "Sharing target model embedding weights ... lm_head ... topk_indices_buffer"
    #: DeepSeek-V3.2 is served by the hardware-isolated ``vllm/models/deepseek_v32`` package, whose NVIDIA
    #: attention asserts a quantized KV cache: ``DeepseekV32Attention.require_fp8_kv_cache = True`` and, in
    #: ``__init__``, ``assert is_quantized_kv_cache(self.kv_cache_dtype)`` ("deepseek_v32 (nvidia) requires an
    #: fp8 KV cache ...") (``vllm/models/deepseek_v32/attention.py``, index id 62662889848, listing commit
    #: 1ba45afe; spec §2.1, Part B §1 and §4.1). Earlier rows route DeepSeek-V3.2 through ``deepseek_v2.py``,
    #: where ``verify_and_update_config`` maps bfloat16 to auto (bf16 allowed). GLM-5.x stays on deepseek_v2.py
    #: in every row (no assert; bf16 is its v0.28 default, GPU-01). The release that moved DeepSeek-V3.2 is
    #: UNCONFIRMED: the spec places the new package in the v0.28 era ("vLLM 0.28 has both")
    v32_requires_quantized_kv: bool = False
    #: upstream has no DSA context parallel; align's generic search reads this vLLM-Ascend field of every row
    dsa_cp_trigger: str = "none"


_V025_SITES = (("model_loading", "gpu_model_runner.py:5306"), ("cudagraph_profile", "gpu_model_runner.py:6534"),
               ("cudagraph_estimate", "gpu_model_runner.py:6639"), ("available_kv", "gpu_worker.py:538"),
               ("cudagraph_note", "gpu_worker.py:553"), ("kv_cache_size", "kv_cache_utils.py:2146"),
               ("max_concurrency", "kv_cache_utils.py:2147"))

def _row(version: str, **kw) -> VllmProfile:
    """One release's row: the v0.22+ behaviour unless ``kw`` says otherwise."""
    key = "vllm@" + version.rsplit(".", 1)[0]
    base = dict(default_gmu=0.92, default_gmu_confirmed=True, cudagraph_profiled=True,
                kv_tokens_formula=KV_TOKENS_CONCURRENCY, blackwell_plain_fp8=False, blackwell_plain_fp8_confirmed=False)
    return VllmProfile(name=key, label=f"vLLM v{version} (CUDA)", version=version, **{**base, **kw})


PROFILES: dict[str, VllmProfile] = {p.name: p for p in (
    _row("0.19.0", default_gmu=0.9, cudagraph_profiled=False,
         notes=("default --gpu-memory-utilization 0.9 up to v0.19 (spec §0, vllm/config/cache.py)",
                "CUDA-graph memory is not subtracted from the KV budget (profiling default since v0.21.0; in "
                "v0.19.2rc1 dev builds VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS was a no-op, spec §1.2)",
                "GPU KV cache size counted as concurrency x max_model_len (the version that changed it is "
                "UNCONFIRMED; one uniform DSA group agrees with the older num_blocks x block_size)")),
    _row("0.21.0", default_gmu=0.9, default_gmu_confirmed=False,
         line_sites=(("kv_cache_size", "kv_cache_utils.py:1710"), ("max_concurrency", "kv_cache_utils.py:1711")),
         notes=("CUDA-graph memory profiled and subtracted from the KV budget by default since v0.21.0 "
                "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1; gpu_worker.py:553 message, spec §1.2)",
                "default --gpu-memory-utilization on v0.21 is UNCONFIRMED (0.9 up to v0.19, 0.92 from v0.22): "
                "0.9 assumed; give --gpu-memory-utilization to be sure")),
    _row("0.22.0", line_sites=(("kv_cache_size", "kv_cache_utils.py:1744"), ("max_concurrency", "kv_cache_utils.py:1745")),
         notes=("default --gpu-memory-utilization 0.92 from v0.22 (spec §0)",)),
    _row("0.25.0", line_sites=_V025_SITES,
         notes=("vllm/config/cache.py: gpu_memory_utilization Field(default=0.92, gt=0, le=1) in v0.25.0 "
                "(index ids 68450683231, 70976838443)", "log-line sites as in a v0.25.0 start-up log (GPU-04)")),
    _row("0.28.0", blackwell_plain_fp8=True, blackwell_plain_fp8_confirmed=True, line_sites=_V025_SITES[:5],
         v32_requires_quantized_kv=True,
         notes=("--kv-cache-dtype fp8 on B200 is plain e4m3, 576 B/token/layer (FLASHINFER_MLA_SPARSE, "
                "flashinfer_mla_sparse.py, index id 42223421; GPU-01 ratio 1.942)",
                "GLM (deepseek_v2.py path) defaults to a bf16 KV cache (GPU-01; PR #53138 would change it)",
                "MoE backend on B200 TP8 logged as FLASHINFER_TRTLLM (fp8.py:411, GPU-01)",
                "DeepSeek-V3.2 on the vllm/models/deepseek_v32 path asserts an fp8 KV cache "
                "(DeepseekV32Attention.require_fp8_kv_cache, attention.py @1ba45afe; the first release with it is "
                "UNCONFIRMED, v0.28 assumed)")),
)}

#: ``--engine vllm`` alone is the newest modelled release (there is no development-head row)
NEWEST = "vllm@0.28"
ALIASES = {"vllm": NEWEST}
