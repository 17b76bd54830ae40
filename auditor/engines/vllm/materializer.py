"""Upstream vLLM's materializer on CUDA: the generic module walk plus what only this engine does.

kv_b_proj is kept as an FP8 linear and W_UK_T/W_UV are added in bf16 (``kv_b``); the FP8 scale
layout follows the GPU generation per module (``emit``); ``topk_indices_buffer`` and the rotary
cache are model buffers counted with the weights (``buffers``). Rule tables are in ``rules.py``.
The SM100 scale layout needs the GPU generation, which the generic ``Engine.materializer`` hook
does not pass: without one, SM90's layout is used and the assumption is stated.
"""
from __future__ import annotations

from ..materialize import Materializer
from . import rules as R
from .kv import BLACKWELL, HOPPER

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

    def __init__(self, *args, arch: str = "", **kw) -> None:
        super().__init__(*args, **kw)
        # the generic linear() notes "vLLM-Ascend has no FP8 linear method" once; CUDA has one
        self._fp8_noted = True
        self.arch = arch or HOPPER
        if not arch:
            self.assumptions.append("FP8 scale layout of SM90 (fp32 128x128 blocks) assumed: the GPU generation is "
                                    "not passed to the materializer; on SM100 DeepGEMM packs UE8M0 scales per "
                                    "output row (about +0.78% of the fp8 bytes, UNCONFIRMED)")

    def _packed_scales(self, env: dict) -> bool:
        return (self.arch == BLACKWELL and "N" in env and "K" in env
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
        env = {"P": s.max_position, "Dr": s.Dr, "T": plan.max_num_batched_tokens, "topk": s.topk_tokens}
        self.emit(self.R.BUFFERS, layer=-1, block="other", module="buffers", env=env, stored=[], placement="all",
                  naive_shard=None, module_cause=None, conditions={"mla": bool(s.mla and s.max_position),
                                                                   "dsa": s.dsa})
