"""Upstream vLLM's materializer on CUDA: the generic module walk plus what only this engine does.

kv_b_proj is kept as an FP8 linear and W_UK_T/W_UV are added in bf16 (``kv_b``); the FP8 scale
layout follows the GPU generation per module (``emit``); ``topk_indices_buffer`` and the rotary
cache are model buffers counted with the weights (``buffers``). Rule tables are in ``rules.py``.
The SM100 scale layout needs the GPU generation, which the generic ``Engine.materializer`` hook
does not pass: without one, SM90's layout is used and the assumption is stated.
"""
from __future__ import annotations

from ...errors import AuditInputError
from ..materialize import Materializer
from . import rules as R
from .kv import BLACKWELL, BLACKWELL_WS, HOPPER

#: the GPU generations whose DeepGEMM scale format is UE8M0 packed per output row (the
#: ``DeepGemmQuantScaleFMT`` oracle, Part B §2.2: "SM100/SM120: UE8M0")
PACKED_SCALE_ARCHS = (BLACKWELL, BLACKWELL_WS)

#: DeepGEMM's per-module eligibility (``should_use_deepgemm_for_fp8_linear``, Part B §2.1)
DEEPGEMM_N, DEEPGEMM_K = 64, 128


class CudaMaterializer(Materializer):
    R = R
    #: a scheme without a CUDA rule (msModelSlim's W8A8 / W4A8: `--quantization ascend` exists only in
    #: vLLM-Ascend) is a checkpoint vLLM on CUDA cannot load, not one to model as float
    UNRULED_SEVERITY = "error"
    UNRULED_NOTE = ("vLLM on CUDA has no linear method for it (msModelSlim's --quantization ascend is "
                    "vLLM-Ascend's): the engine refuses to start; bytes shown as stored")

    # the version row's decisions (versions.py, each cited there)
    def gate_in_fp32(self) -> bool:
        return self.prof.gate_dtype == "F32"

    def index_cache(self) -> bool:
        return self.prof.index_cache

    def indexer_fused_wk(self) -> bool:
        return self.prof.indexer_fused_wk

    #: msModelSlim schemes a compressed-attention model's checkpoint may carry (vLLM-Ascend only)
    ASCEND_SCHEMES = frozenset({"W8A8", "W8A8_DYNAMIC", "W4A8_DYNAMIC"})

    def __init__(self, *args, arch: str = "", **kw) -> None:
        super().__init__(*args, **kw)
        if getattr(self.spec, "drafter", "mtp") == "dspark":
            # upstream's proposer shares the target's vocabulary tables (mtp_shares_vocab), which a Markov
            # head cannot; its DSpark drafter was not read (model-deepseek-v4.md §0 reads vLLM-Ascend's)
            raise AuditInputError(self.spec.name, "the DSpark drafter (dspark_target_layer_ids) is modelled on "
                                                  "vLLM-Ascend only (models/deepseek_v4/dspark.py); upstream "
                                                  "vLLM's is not")
        if self.spec.layer_kinds:
            found = sorted({sm.scheme for sm in self.stored.modules.values()} & self.ASCEND_SCHEMES)
            if found:
                raise AuditInputError("--recipe", f"{self.spec.name}: msModelSlim's {', '.join(found)} checkpoint loads "
                                                  "on vLLM-Ascend only (--quantization ascend); upstream vLLM on CUDA "
                                                  "runs the HF FP8 / FP4 release: --recipe fp8-block")
        # the generic linear() notes "vLLM-Ascend has no FP8 linear method" once; CUDA has one
        self._fp8_noted = True
        self.arch = arch or HOPPER
        if not arch:
            self.assumptions.append("FP8 scale layout of SM90 (fp32 128x128 blocks) assumed: the GPU generation is "
                                    "not passed to the materializer; on SM100 DeepGEMM packs UE8M0 scales per "
                                    "output row (about +0.78% of the fp8 bytes, UNCONFIRMED)")

    def _packed_scales(self, env: dict) -> bool:
        return (self.arch in PACKED_SCALE_ARCHS and "N" in env and "K" in env
                and env["N"] % DEEPGEMM_N == 0 and env["K"] % DEEPGEMM_K == 0)

    def emit(self, rule_set, *, conditions: dict, env: dict, **kw) -> None:
        packed = self._packed_scales(env)
        conditions = {**conditions, R.FP32_SCALES: not packed, R.UE8M0_SCALES: packed}
        super().emit(rule_set, conditions=conditions, env=env, **kw)

    def kv_b(self, layer: int, blk: str) -> None:
        """kv_b_proj stays (ColumnParallel, sharded by heads) and one bf16 copy feeds W_UK_T/W_UV."""
        s, L = self.spec, self.layout
        self.linear(layer, blk, "self_attn.kv_b_proj", ["self_attn.kv_b_proj"], s.NH * (s.Dn + s.Dv), s.Lkv,
                    "column", False)
        env = {"Hl": L.heads_local, "Dn": s.Dn, "Dv": s.Dv, "Lkv": s.Lkv}
        self.emit(self.R.KV_B, layer=layer, block=blk, module="self_attn.kv_b_proj", env=env, stored=[],
                  placement="stage", naive_shard=None, module_cause=None, conditions={})

    def buffers(self) -> None:
        s, plan = self.spec, self.plan
        if s.layer_kinds:
            layers = s.layer_kinds[:s.Lyr] + (s.layer_kinds[s.Lyr:] if plan.mtp else ())
            # one rotary cache per RoPE base: window-only layers (MTP's too) rope_theta, compressed ones
            # compress_rope_theta; yarn rows = original_max x factor (the config's max_position otherwise)
            bases = {kd.attention == "compressed" for kd in layers} | ({False} if plan.mtp else set())
            rows = int(s.rope_original_max * s.rope_scaling_factor) or s.max_position
            env = {"T": plan.max_num_batched_tokens, "topk": s.topk_tokens, "hcH": s.residual_mult * s.H,
                   "R": len(bases), "P": rows, "Dr": s.Dr}
            self.emit(self.R.COMPRESSED_BUFFERS, layer=-1, block="other", module="buffers", env=env, stored=[],
                      placement="all", naive_shard=None, module_cause=None, conditions={"dsa": s.dsa})
            return
        env = {"P": s.max_position, "Dr": s.Dr, "T": plan.max_num_batched_tokens, "topk": s.topk_tokens}
        self.emit(self.R.BUFFERS, layer=-1, block="other", module="buffers", env=env, stored=[], placement="all",
                  naive_shard=None, module_cause=None, conditions={"mla": bool(s.mla and s.max_position),
                                                                   "dsa": s.dsa})
