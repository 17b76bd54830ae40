"""vLLM-Ascend's materializer: the generic module walk plus what only this engine creates.

MLAPO fused copies (§4.2 of engine-vllm-ascend.md), o_proj under DSA-CP (gather pool, aclnn
copies, gather input), the indexer's C8 rotations, rotary caches and model buffers, and the
layer-sharding prefetch windows (§3.4). Rule tables are in ``rules.py``.
"""
from __future__ import annotations

import math

from ...dtypes import DTYPE_BYTES
from ...errors import AuditInputError
from ..bridge import C_BUFFERS, C_C8, C_LSHARD, C_MLAPO_DROP, C_OREP
from ...model import blueprint as B
from ..materialize import Materializer, Resident
from . import compressed
from . import rules as R


class AscendMaterializer(Materializer):
    R = R
    SCHEME_NOTES = {"FP8": ("warning", "FP8 linears: vLLM-Ascend has no FP8 linear method (A2/A3 have no FP8 units); "
                                       "weights shown as stored, convert to W8A8 to deploy")}

    #: the HF release's schemes (FP8 block linears, MXFP4 routed experts) of a compressed-attention model
    HF_RELEASE_SCHEMES = frozenset({"FP8_BLOCK", "FP8", "MXFP4", "FP4"})

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        if compressed.has_compressed_layers(self.spec):
            found = sorted({sm.scheme for sm in self.stored.modules.values()} & self.HF_RELEASE_SCHEMES)
            if found:
                raise AuditInputError("--recipe", f"{self.spec.name}: the HF FP8/FP4 release ({', '.join(found)}) runs on "
                                                  "vLLM-Ascend only through the A5 MX kernels (quantization=deepseek_v4_fp8, "
                                                  "vllm_ascend/quantization/fp8_config.py:43-70@182b75ea), not modelled; "
                                                  "use msModelSlim's W8A8 / W4A8 checkpoints, or --engine vllm (CUDA)")

    # ---------------------------------------------------------------- version-row decisions
    def gate_in_fp32(self) -> bool:
        return self.prof.gate_dtype == "F32"        # AscendGateLinear (gate_linear.py:48@v0.21.0rc1)

    def index_cache(self) -> bool:
        return self.prof.index_cache                # IndexCache from v0.23.0rc1 (PR #10441)

    def indexer_fused_wk(self) -> bool:
        return self.prof.indexer_fused_wk           # wk_weights_proj (sfa_v1.py:471@v0.21.0rc1)

    # ---------------------------------------------------------------- compressed-attention models
    def router_rules(self):
        """A compressed-attention model's gate keeps the model-dtype weight and an fp32 copy
        (``precast_fp32_weight=True``, models/deepseek_v4/model.py:279-282@182b75ea); others: the shared rule."""
        return R.ROUTER_PRECAST if compressed.has_compressed_layers(self.spec) else R.ROUTER

    def mtp_shares_vocab(self) -> bool:
        """The drafter of a model with ``compress_ratios`` keeps its own embedding and LM head
        (``share_embeddings = not self.use_compress``, spec_decode/llm_base_proposer.py:140, 418; the head
        is shared only for ``is_deepseek_mla`` models, :475-478@182b75ea)."""
        return not compressed.has_compressed_layers(self.spec)

    def tp_switch(self, layer: int, d: B.ModuleDecl, scheme: str) -> None:
        """DSA-CP's o_proj full-weight switch on P / mixed nodes (model-deepseek-v4.md §3.3): a pool per
        attribute shape shared by all layers, and on main a per-layer copy of a row-parallel shard."""
        if not self.layout.o_proj_gather_pool:
            return
        dt = self.spec.pd if scheme == "FLOAT" else "I8"
        self._switch_pools[(d.name, dt)] = d.shape
        self.rows += compressed.switch_rows(layer, d.block, d.name, d.role, d.shape, scheme, dt, self.plan, self.prof)

    def _mlapo_applies(self, qkv_scheme: str, layer: int) -> bool:
        if qkv_scheme != "W8A8" or self.layout.dsa_cp:
            return False
        if not self.norm_bias:
            if layer == 0:
                self.assumptions.append("MLAPO not modelled: it needs RMSNorm biases (no 'norm.bias' key in the "
                                        "description)")
            return False
        return True

    #: what MLAPO's weight preparation releases on a decode node (``sfa_v1.py:822-836``@182b75ea, the same at
    #: releases/v0.18.0 ``:607-621`` and v0.23.0 ``:977-991``): the originals' weight, deq_scale and quant_bias
    _MLAPO_RELEASED = {("self_attn.fused_qkv_a_proj", t) for t in ("weight", "deq_scale", "quant_bias")} | \
        {("self_attn.q_b_proj", t) for t in ("weight", "deq_scale", "quant_bias")}
    #: ``MLAPO_MAX_SUPPORTED_TOKENS`` (``attention/mla_v1.py:69``@182b75ea)
    MLAPO_MAX_TOKENS = 1024

    @classmethod
    def releases_mlapo_originals(cls, plan, layout) -> bool:
        return layout.kv_role == "kv_consumer" and plan.max_num_batched_tokens <= cls.MLAPO_MAX_TOKENS

    def mlapo_drops(self, layer: int) -> None:
        """On a kv_consumer with max_num_batched_tokens <= 1024, MLAPO runs every step, so the engine sets the
        originals' fused_qkv_a_proj / q_proj (q_b) weight, deq_scale and quant_bias to None and empties the
        cache: they are not resident when the KV budget is measured."""
        if not self.releases_mlapo_originals(self.plan, self.layout):
            return
        # the rows of a released (module, tensor), collected incrementally: rows are only appended, and the
        # one in-place replacement (below) keeps module and tensor, so this visits the rows the full scan of
        # every row would match, in the same order (that scan per layer was quadratic: 12% of a pass)
        rows = self.rows
        if getattr(self, "_mlapo_of", None) is not rows:          # first call (or a new row list): scan it all
            self._mlapo_of, self._mlapo_seen, self._mlapo_rows = rows, 0, []
        self._mlapo_rows += [j for j in range(self._mlapo_seen, len(rows))
                             if (rows[j].module, rows[j].tensor) in self._MLAPO_RELEASED]
        self._mlapo_seen = len(rows)
        for i in self._mlapo_rows:
            r = rows[i]
            if r.layer == layer and r.bytes:
                self.rows[i] = Resident(**{**r.__dict__, "bytes": 0, "cause": C_MLAPO_DROP,
                                           "note": "released by MLAPO on a decode node (sfa_v1.py:822-836)"})
        if layer == 0:
            self.assumptions.append("MLAPO on a pure decode node (max_num_batched_tokens <= 1024) releases the "
                                    "original fused_qkv_a / q_b weights and their scales (sfa_v1.py:822-836)")

    def o_proj(self, layer: int, blk: str, mtp: bool) -> None:
        s, L = self.spec, self.layout
        Kf = s.NH * s.Dv
        rep = L.o_proj_replicated
        sharded = "o_proj" in L.layer_sharding and rep and not mtp
        scheme = self.module(layer, blk, B.O_MLA, rep,
                             module_cause=C_OREP if rep else None,
                             layer_shard_owner=layer % self.plan.ranks_per_stage if sharded else -1)
        if L.o_proj_gather_pool and not rep:
            env = {"Kf": Kf, "K": Kf // self.plan.tp, "H": s.H}
            if scheme == "W8A8" and self.prof.o_proj_dsa_cp != "p_node_replicated":
                self.emit(R.O_PROJ_ACLNN_COPIES, layer=layer, block=blk, module="self_attn.o_proj", env=env,
                          stored=[], placement="stage", naive_shard=None, module_cause=None, conditions={})
            if scheme == "FLOAT" and self.prof.o_proj_gather_input_copy:
                self.emit((R.O_PROJ_GATHER_INPUT,), layer=layer, block=blk, module="self_attn.o_proj", env=env,
                          stored=[], placement="stage", naive_shard=None, module_cause=None, conditions={})
            self._o_pool_schemes.add(scheme)

    def indexer_extras(self, layer: int, blk: str) -> None:
        if self.c8:
            self.emit(R.INDEXER_C8, layer=layer, block=blk, module="self_attn.indexer", env={"ID": self.spec.ID},
                      stored=[], placement="stage", naive_shard=None, module_cause=None, conditions={})

    def buffers(self) -> None:
        s, plan, L = self.spec, self.plan, self.layout
        if compressed.has_compressed_layers(s):
            if plan.mtp and s.drafter == "dspark" and s.mtp_layers:
                self.assumptions.append(
                    "DSpark drafter (model-deepseek-v4.md §1.6): its checkpoint names (mtp.J., the drafter-level "
                    "tensors under mtp.0.), main_norm [H] and a FLOAT main_proj are assumed (UNCONFIRMED); the "
                    "profile run's draft pass is taken as MTP's (4*T_x*H*2) and the RoPE runtime buffers as "
                    "1 + k copies (whether use_eagle() counts dspark is UNCONFIRMED); DSpark's extra SWA indices "
                    "and proposer buffers are not modelled")
            self.rows += compressed.buffer_rows(s, plan, self.prof)
            self.rows += compressed.pool_rows(self._switch_pools)
            return
        rows: list[tuple[str, tuple[int, ...], str, str]] = []
        if s.mla or s.head_dim:
            rope = s.Dr if s.mla else s.head_dim
            if s.rope_scaling_factor > 1 and s.rope_original_max:
                n = int(s.rope_original_max * s.rope_scaling_factor)
                inst = 2 if (s.dsa and not s.indexer_rope_interleave) else 1
                for k in range(inst):
                    for t in ("cos_sin_cache", "cos_cached", "sin_cached"):
                        rows.append((f"rope{k}.{t}", (n, rope), s.pd, "DeepSeek yarn rotary cache"))
                    rows.append((f"rope{k}.inv_freq", (rope // 2,), "F32", ""))
            else:
                rows.append(("rope.cos_sin_cache", (s.max_position, rope), s.pd, "default rotary cache"))
                rows.append(("rope._cos_cache+_sin_cache", (2 * s.max_position, rope), s.pd,
                             "global interleaved copy, ~2x (UNCONFIRMED duplication)"))
                self.assumptions.append("default rope: a global _cos/_sin copy about 2x the cos_sin_cache is "
                                        "counted (spec: exact duplication UNCONFIRMED)")
            if s.mla:
                for t in ("_cos_mla", "_sin_mla"):
                    rows.append((t, (plan.max_num_batched_tokens, 1, 1, s.Dr), s.pd, "model-runner rope buffer"))
        if s.dsa:
            rows.append(("topk_indices_buffer", (plan.max_num_batched_tokens, s.topk_tokens), "I32",
                         "one per model, shared with the MTP drafter"))
        for name, shape, dt, note in rows:
            self.rows.append(Resident(-1, "other", "buffers", name, "derived", dt, shape,
                                      int(math.prod(shape) * DTYPE_BYTES[dt]), 0, "all", -1, C_BUFFERS,
                                      "created", note))
        # the pool is keyed by (attr, dtype, dim, full shape): one buffer per distinct o_proj dtype
        # (an int8 one for quantized layers, a pd one for a FLOAT MTP layer)
        pools = {R.O_PROJ_POOL_QUANT if sch in ("W8A8", "W8A8_DYNAMIC") else R.O_PROJ_POOL_FLOAT
                 for sch in self._o_pool_schemes} if L.o_proj_gather_pool else set()
        for rule in sorted(pools, key=lambda r: r.dtype):
            self.emit((rule,), layer=-1, block="attention", module="o_proj_full_pool",
                      env={"Kf": s.NH * s.Dv, "H": s.H}, stored=[], placement="all", naive_shard=None,
                      module_cause=None, conditions={})
        if self.c8:
            for t in ("q_hadamard", "k_hadamard"):
                self.rows.append(Resident(-1, "other", "buffers", t, "derived", "BF16", (128, 128), 128 * 128 * 2, 0,
                                          "all", -1, C_C8, "created", "class-shared, one pair per process"))

    def layer_sharding_windows(self) -> None:
        """§3.4: per series, 2 window buffers of the processed weight size on every rank."""
        for series in self.layout.layer_sharding:
            owned = [r for r in self.rows if r.placement == "owner" and r.module == f"self_attn.{series}"
                     and r.tensor == "weight"]
            if not owned:
                continue
            w = owned[0]
            for k in range(2):
                self.rows.append(Resident(-1, "attention", f"self_attn.{series}", f"layer_shard_window{k}",
                                          "derived", w.dtype, w.shape, w.bytes, 0, "all", -1, C_LSHARD,
                                          "created", "prefetch window (prefetch_step=1)"))
