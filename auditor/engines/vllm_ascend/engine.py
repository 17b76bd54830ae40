"""vLLM-Ascend as an Engine: its version rows plus the hooks the generic flow calls.

Each hook delegates to the module of this folder that holds the fact (placement, materializer
rules, KV cache, activation and communicator terms, unbudgeted items, log lines, launch command,
kernel paths). Nothing outside this folder knows a vLLM-Ascend fact.
"""
from __future__ import annotations

from typing import Any, ClassVar, Sequence

from ..base import Engine
from ..registry import register
from . import activation, budget_terms, graphs, hccl, kernel_paths, kv, launch, loglines, profiler, versions
from . import compressed
from .materializer import AscendMaterializer
from .placement import resolve_placement


@register
class VllmAscend(Engine):
    family: ClassVar[str] = "vllm-ascend"
    profiles: ClassVar[dict[str, Any]] = versions.PROFILES
    aliases: ClassVar[dict[str, str]] = versions.ALIASES
    kv_dtypes: ClassVar[tuple[str, ...]] = kv.KV_DTYPES
    block_size: ClassVar[int] = kv.BLOCK_SIZE
    others_at_start_bytes: ClassVar[int] = budget_terms.OTHERS_AT_START_BYTES
    #: block_size forced to 128 with prefix caching or chunked prefill (serving-facts §1.5,
    #: vllm_ascend/utils.py:1173-1199@182b75ea): hits are whole 128-token blocks
    prefix_block_tokens: ClassVar[int] = 128
    #: what align searches on this engine: its switches besides the role and the drafter
    align_search_space: ClassVar[dict[str, tuple]] = {
        "role": ("mixed", "prefill", "decode"),
        "sp": (False, True),
        "dsa_cp": (None, True),                        # None: enable_dsa_cp not set (the engine default)
        "layer_sharding": ((), ("q_b_proj",), ("o_proj",), ("q_b_proj", "o_proj")),
        "shared_expert_dp": (False, True),
        "mtp": (False, True),
        "nz_mode": (1, 0, 2),
    }

    def align_skip(self, option: dict, pinned: dict) -> bool:
        """enable_dsa_cp is a switch of its own only from v0.20.2rc, and deployments set it with SP."""
        return bool(option.get("dsa_cp") and (not option.get("sp") or self.profile.dsa_cp_trigger == "sp")
                    and "dsa_cp" not in pinned)
    default_hccl_buffsize_mb: ClassVar[int] = hccl.DEFAULT_HCCL_BUFFSIZE_MB
    term_docs: ClassVar[dict[str, str]] = activation.TERM_DOCS
    budget_labels: ClassVar[dict[str, str]] = {"non_torch": "HCCL + runtime", "graph": "ACL graph estimate",
                                               "weights": "Loading model weights"}
    # the engine's words in generic output (Engine.device_noun, ...): an Ascend NPU is addressed per die
    device_noun: ClassVar[str] = "die"
    outside_budget_words: ClassVar[str] = ("sparse-attention prefill transients the profile run skips, late HCCL "
                                           "groups, workspaces")
    prefill_util_evidence: ClassVar[str] = "the engine's tutorial runs one at 0.82"
    prefill_mtp_source: ClassVar[str] = "as the engine's P/D tutorials"

    def kv_link_words(self, bytes_per_s: float) -> str:
        """The TensorCast A3 CLOS tier, an assumption (serving/costs.py DEFAULT_KV_LINK_BYTES_PER_S)."""
        return f"{bytes_per_s / 1e9:g} GB/s per die, an assumption"

    def memory_savers(self, recipe: str | None, kv_cache_dtype: str | None) -> list[str]:
        """msModelSlim's W4A8 experts and the C8 KV cache (SFA-C8 + LI-C8) are this engine's."""
        return [x for x, have in (("w4a8", recipe == "w4a8"), ("c8 KV", kv_cache_dtype == "c8")) if not have]

    def plan_switches(self, plan: dict) -> str:
        return (f"DSA-CP={'on' if plan.get('dsa_cp') else 'off'} {super().plan_switches(plan)} "
                f"nz_mode={plan.get('nz_mode')}")

    #: version-row fields ``AscendMaterializer`` reads (placement fields are keyed separately)
    materializer_fields: ClassVar[tuple[str, ...]] = ("gate_dtype", "indexer_fused_wk", "o_proj_dsa_cp",
                                                      "o_proj_gather_input_copy", "index_cache",
                                                      "compressed_attention")

    # ------------------------------------------------------------ weights
    def placement(self, spec: Any, plan: Any) -> Any:
        return resolve_placement(spec, plan, self.profile)

    def materializer(self, spec: Any, plan: Any, layout: Any, stored: Any, desc: Any,
                     row_cache: dict | None = None) -> AscendMaterializer:
        return AscendMaterializer(spec, plan, self.profile, layout, stored, desc, row_cache)

    def loads_recipe(self, spec: Any, recipe: str) -> bool:
        """The HF FP8 / FP4 release of a compressed-attention model needs the A5 MX kernels (refused)."""
        return not (recipe == "fp8-block" and compressed.has_compressed_layers(spec))

    def materializer_plan_key(self, plan: Any, layout: Any) -> tuple:
        """What the materializer reads from the plan and placement besides the placement's decisions: whether
        MLAPO releases the originals (a decode node within MLAPO's token limit; ``AscendMaterializer.mlapo_drops``)."""
        return (AscendMaterializer.releases_mlapo_originals(plan, layout),)

    # ------------------------------------------------------------ runtime memory
    def kv_spec(self, spec: Any, plan: Any, *, variant: str = "bf16", dcp: int = 1, mtp: bool = False,
                stage: int | None = None, arch: str = "") -> Any:
        return kv.kv_spec(spec, plan, self.profile, variant=variant, dcp=dcp, mtp=mtp, stage=stage,
                          block_size=self.block_size)

    def kv_switches(self, variant: str) -> dict:
        return dict(self.profile.kv_switches.get(variant, {}))

    def activation_terms(self, spec: Any, expert_scheme: str | None = None, combine_max_tokens: int | None = None,
                         max_model_len: int | None = None, **kw: Any) -> dict[str, Any]:
        """``combine_max_tokens``: additional_config mega_moe_max_tokens (None: this version's default);
        ``max_model_len`` changes nothing here: the profile run skips sparse attention."""
        return activation.activation_terms(
            spec, fused=activation.fused_gmm1(expert_scheme),
            combine_max_tokens=combine_max_tokens or self.profile.ffn_combine_max_tokens,
            combine=activation.combine_variant(expert_scheme, self.profile.ffn_combine_gmm1_slots), **kw)

    def activation_peak(self, terms: dict[str, Any]) -> Any:
        return activation.activation_peak(terms)

    def non_torch_terms(self, plan: Any, *, hccl_buffsize_mb: int, dcp: int = 1, **state: Any) -> dict[str, int]:
        return hccl.non_torch_terms(plan, hccl_buffsize_mb=hccl_buffsize_mb, dcp=dcp, **state)

    runtime_non_torch_bytes: ClassVar[int] = hccl.C_RUNTIME_BYTES

    def minimal_profile_non_torch_bytes(self, plan: Any, *, hccl_buffsize_mb: int) -> int:
        """The communicators a TP ALLGATHER profile run touches (no MC2 warm-up) plus the ACL runtime."""
        comms = hccl.communicators(plan, hccl_buffsize_mb=hccl_buffsize_mb, path=activation.ALLGATHER, warmup=False,
                                   sp=False)
        return sum(c.bytes for c in comms if c.at_profile) + hccl.C_RUNTIME_BYTES

    def soc(self, device: Any) -> str:
        return activation.soc_of(device)

    def device_mismatch(self, device: Any) -> str | None:
        """vLLM-Ascend runs on Ascend NPUs; a profile that names an NVIDIA GPU is upstream vLLM's."""
        label = str(getattr(device, "label", ""))
        if "NVIDIA" in label:
            return (f"--device {getattr(device, 'name', device)} is an NVIDIA GPU ({label}) and {self.label} runs "
                    "on Ascend NPUs: give --engine vllm (upstream vLLM on CUDA)")
        return None

    def graph_max_tokens(self, max_num_seqs: int, mtp: int, max_num_batched_tokens: int) -> int:
        return graphs.default_graph_tokens(max_num_seqs, mtp, max_num_batched_tokens)

    def term_ranges(self, p_act: float, non_torch: dict[str, int], graph: int) -> dict[str, tuple[float, float]]:
        """(low, high) of every UNCONFIRMED budget term, in bytes (nominal values are the estimates)."""
        rt = non_torch.get("ACL runtime")
        out = {"activation peak": (p_act * activation.ACT_LOW, p_act * activation.ACT_HIGH)}
        if rt is not None:
            out["non-torch runtime (ACL)"] = tuple(float(x) for x in hccl.C_RUNTIME_RANGE)
        if graph:
            out["ACL graph estimate"] = tuple(float(x) for x in budget_terms.GRAPH_POOL_RANGE)
        return out

    def unbudgeted_items(self, spec: Any, plan: Any, kvs: Any, **kw: Any) -> list[tuple[str, int]]:
        return budget_terms.unbudgeted_items(spec, plan, kvs, graph_deducted=self.profile.graph_deducted,
                                             drafter_workspace=self.profile.drafter_workspace, **kw)

    def profile_run_error(self, spec: Any, plan: Any, *, tokens: int, seqs: int, mtp: int, hccl_buffsize_mb: int,
                          dsa_cp: bool = False, soc: str = "a3", prefill_mc2: bool = False, fused_mc2: int = 0,
                          **_: Any) -> str | None:
        """dispatch_ffn_combine refuses an HCCL window smaller than its rows need (FUSED_MC2 at T)."""
        path, _ = hccl.profile_state(spec, plan, tokens=tokens, seqs=seqs, mtp=mtp, soc=soc, prefill_mc2=prefill_mc2,
                                     fused_mc2=fused_mc2)
        if path != activation.FUSED_MC2:
            return None
        m = float(activation.moe_rows(tokens, plan.tp, bool(plan.sp or dsa_cp)))
        need = activation.ffn_combine_window_bytes(spec, m)
        if need <= hccl_buffsize_mb * 1024 * 1024:
            return None
        return loglines.ffn_combine_window_error(int(m), spec.H, spec.topk_experts, need, hccl_buffsize_mb)

    def graph_deducted_bytes(self) -> int:
        return budget_terms.GRAPH_POOL_BYTES if self.profile.graph_deducted else 0

    def budget_assumptions(self, spec: Any = None, kv: Any = None) -> Sequence[str]:
        if spec is not None and spec.layer_kinds:
            return tuple(budget_terms.ASSUMPTIONS) + compressed.BUDGET_ASSUMPTIONS
        return tuple(budget_terms.ASSUMPTIONS) + (budget_terms.LI_C8_ASSUMPTION,) + tuple(self.profile.runtime_notes)

    # ------------------------------------------------------------ what it prints and takes
    @property
    def loglines(self) -> Any:
        return loglines

    @classmethod
    def parse_breakdown(cls, line: str) -> dict | None:
        return loglines.parse_breakdown(line)

    @classmethod
    def weights_patterns(cls) -> tuple:
        return loglines.WEIGHTS_PATTERNS

    def launch(self, model: str, instance: Any, *, quantized: bool = False) -> dict[str, Any]:
        return launch.launch_instance(model, instance, self.kv_switches(instance.kv_cache_dtype), quantized=quantized,
                                      dsa_cp_switch=self.profile.dsa_cp_trigger != "sp")

    # ------------------------------------------------------------ kernels
    def kernel_path(self, variant: str) -> Any:
        return kernel_paths.kernel_path(variant)

    def weights_by_drafter_k(self, spec: Any) -> bool:
        """DeepSeek-V4's runtime RoPE buffers are 1 + K copies with a drafter (``compressed.buffer_rows``)."""
        from . import compressed
        return compressed.has_compressed_layers(spec)

    def drafter_eager(self, spec: Any, async_scheduling: bool = False) -> bool:
        """The DSpark proposer never captures a graph (``spec_decode/dspark_proposer.py:76``@182b75ea
        ``self.use_cuda_graph = False``); the MTP drafter by the version's rule (``EngineProfile.drafter_graph``):
        from v0.23.0rc1 vLLM-Ascend forces any GLM model's eager (``llm_base_proposer.py:178-197``@182b75ea), on
        v0.18 --async-scheduling makes every MTP drafter eager, on v0.19-v0.22 neither does."""
        if getattr(spec, "drafter", "mtp") == "dspark":
            return True
        rule = self.profile.drafter_graph
        if rule == "async":
            return bool(async_scheduling)
        return rule == "glm" and str(getattr(spec, "name", "")).lower().startswith("glm")

    def launch_overrides(self, options: dict[str, Any]) -> tuple[tuple[str, str, str], ...]:
        """From v0.23.0rc1 fused MC2 wins over the shared experts' second stream: with
        ``enable_fused_mc2 == 1`` (VLLM_ASCEND_ENABLE_FUSED_MC2 or additional_config) the engine sets
        ``multistream_overlap_shared_expert`` False and says so (``ascend_config.py:179-184``@v0.23.0,
        ``:175-180``@182b75ea; v0.18.0 and v0.22.1rc1 keep both)."""
        if self.profile.fused_mc2_drops_shared_expert_overlap and options.get("fused_mc2") == 1:
            return (("additional_config.multistream_overlap_shared_expert",
                     "turned off by the engine: fused MC2 (VLLM_ASCEND_ENABLE_FUSED_MC2=1) wins",
                     "VLLM_ASCEND_ENABLE_FUSED_MC2 (fused mc2) and multistream_overlap_shared_expert cannot be "
                     "enabled at the same time. Setting multistream_overlap_shared_expert to False."),)
        return ()

    def recipe_refusal(self, spec: Any, kv_b_schemes: Sequence[str]) -> str | None:
        """The SFA backend asserts an unquantized kv_b_proj (``engines/materialize.py``, ``kv_b``)."""
        return (f"kv_b_proj is {'/'.join(kv_b_schemes)}; the engine's SFA backend asserts an unquantized kv_b_proj "
                "and refuses to start (use a W8A8 / BF16 checkpoint, e.g. --recipe w8a8)")

    @property
    def profiler(self) -> Any:
        return profiler
