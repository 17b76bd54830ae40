"""Op classes of the layer program (GenZ style): each knows its shapes, its parameters for the
cost kernel, the weight it streams and the measured-kernel key it can be looked up under.

Kind codes and parameter slot names are declared in ``kernels/kinds.py``; FLOP and byte
formulas are implemented once, in ``kernels/perf_core.py::op_work``; they are
stated here so a reader never has to open the kernel. T = tokens the op processes on the rank,
2 FLOPs per multiply-accumulate; "vec" = vector-unit FLOPs; W = weight bytes resident on the rank.

====================  ========================================================  ===============================
class                 FLOPs                                                     bytes
====================  ========================================================  ===============================
linear (K->N)         mma 2TKN on the scheme's unit (I8 for W8A8/W4A8);         T K a_in + W + T N out
                      W8A8_DYNAMIC adds vec 4TK (per-token quant)               (+ 2TK bf16 read when dynamic)
bmm (h, K->N)         mma 2ThKN (bf16; absorbed W_UK_T / W_UV)                  2ThK + W + 2ThN
vector (D)            vec T D ops_per_elem                                      2 T D tensors
sfa (h, 512+64)       pairs P = sum_i min(ctx+i, topk) per request;             q/out 2Th(Dl+Dr) + 2ThDl + 4T topk;
                      mma 2Ph(Dl+Dr) + 2PhDl, vec 4Ph                          KV gather: P / tile entries x entry
                                                                                bytes (1152 bf16, 656 SFA-C8), every
                                                                                query row its own (sfa_kv)
indexer_score         keys Kc = sum_i (ctx+i) (causal) x query share;           2T IH ID + 4T IH; key cache read
                      mma 2 Kc IH ID (bf16, int8 with LI-C8),                   once per tile of 8 query rows per
                      vec v Kc IH (head weight + head sum; v = 8 bf16 path)     request: ceil(q/8) (ctx+q) key bytes
                                                                                (indexer_cache)
indexer_topk          sort ops 4.36 Kc + 3.32 topk T at the vector sort rate    4 T topk (fused: no launch)
router_topk           vec 4 T E                                                 4 T E + 8 T k
grouped_matmul        rows R = T k; mma 6 R H I; vec 3RI (+4R(H+I) dynamic)     R H a_in + 4 R I + R I a_in + 2RH
                                                                                + W x (1-(1-k/E)^(T x ep)) experts hit
embedding             -                                                         4 T H + 4 T
attention (dense)     mma 4 Kc h d, vec 4 Kc h                                  4 T h d + 4 n (ctx+q) h_kv d
layout (slice/pad)    0                                                         0 (graph-layout op, no launch)
====================  ========================================================  ===============================

Prefill and decode use the same formulas (a decode step is a prefill of 1 + K queries). The
constants of the context-dependent ops come from ``kernel_paths.py`` per cache variant, with
citations in ``docs/long-context-kernels.md``.

Measured-kernel names and keys per class: see ``keys.py`` (they follow the profiler importer in
``measured.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from auditor_kernels import kinds as K
from auditor_kernels.kinds import (ATTN, BMM, EMBED, GMM, IDX_SCORE, IDX_TOPK, LINEAR, NO_CAP, ROUTER_TOPK, SFA,
                                   VEC, ZERO)

from .tokens import Tok
from .quant import Scheme

__all__ = ["Op", "Coll", "NO_CAP", "LINEAR", "BMM", "VEC", "SFA", "IDX_SCORE", "IDX_TOPK", "ROUTER_TOPK", "GMM",
           "EMBED", "ZERO", "ATTN"]

Shape = tuple  # dims; symbols: "T" input tokens, "U" output tokens, "R" token-expert rows (T x k),
               # "K" keys of the longest query (context + queries per request)


@dataclass
class Op:
    """One op of one layer (or of a representative layer with ``layers`` it stands for).
    ``params[slot]`` holds the kind's parameters by the slot names of ``auditor_kernels.kinds``."""

    name: str
    cls: str
    kind: int
    tok: Tok
    tok_out: Tok
    params: tuple[float, ...]
    shapes_in: tuple[Shape, ...]
    shapes_out: tuple[Shape, ...]
    weight: float = 0.0
    dtype: str = "BF16"
    module: str | None = None
    kernel: str = ""
    layers: list[int] = field(default_factory=list)
    mult: int = 0          # 0 always, 1 first MTP pass, 2 each later MTP pass (kinds.MULT_*)
    seq: int = 0           # emission order inside the program (timeline order within a layer)
    e_local: int = 0       # grouped_matmul: experts held on the rank (part of its measured-kernel key)

    @property
    def layout(self) -> str:
        a, b = self.tok.layout, self.tok_out.layout
        return a if a == b else f"{a}->{b}"

    def dtype_code(self) -> int:
        return K.DTYPES[self.dtype]


def _params(slots: dict[int, float]) -> tuple[float, ...]:
    """The parameter tuple of an op from {slot: value} (slot names from ``auditor_kernels.kinds``)."""
    if not slots:
        return ()
    if max(slots) >= K.N_PARAMS:
        raise ValueError(f"parameter slot {max(slots)} beyond kinds.N_PARAMS = {K.N_PARAMS}")
    out = [0.0] * (max(slots) + 1)
    for slot, value in slots.items():
        out[slot] = value
    return tuple(out)


def _scheme_kernel(s: Scheme) -> str:
    return {"FLOAT": "bf16", "W8A8": "w8a8", "W8A8_DYNAMIC": "w8a8_dynamic",
            "W4A8_DYNAMIC": "w4a8_dynamic", "FP8": "fp8"}[s.name]


def linear(name: str, tok: Tok, k: int, n: int, s: Scheme, weight: float, module: str | None,
           out_bytes: float = 2.0, dtype: str | None = None) -> Op:
    """y[T, N] = x[T, K] @ W[K, N]."""
    dt = dtype or s.compute
    kern = "matmul_f32" if dt == "F32" else f"matmul_{_scheme_kernel(s)}"
    p = _params({K.LINEAR_K: k, K.LINEAR_N: n, K.LINEAR_ACT_BYTES: s.act_bytes,
                 K.LINEAR_DYNAMIC: 1.0 if s.dynamic else 0.0, K.LINEAR_OUT_BYTES: out_bytes})
    return Op(name, "linear", LINEAR, tok, tok, p, (("T", k),), (("T", n),), weight, dt, module, kern)


def bmm(name: str, tok: Tok, heads: int, k: int, n: int, weight: float, module: str | None) -> Op:
    """y[T, h, N] = x[T, h, K] @ W[h, K, N], bf16 (the absorbed MLA up-projections)."""
    p = _params({K.BMM_HEADS: heads, K.BMM_K: k, K.BMM_N: n})
    return Op(name, "bmm", BMM, tok, tok, p, (("T", heads, k),), (("T", heads, n),),
              weight, "BF16", module, "bmm_bf16")


def vector(name: str, cls: str, tok: Tok, d: int, tensors: float, ops: float,
           shape_in: tuple[Shape, ...] | None = None, shape_out: tuple[Shape, ...] | None = None) -> Op:
    """Elementwise/normalisation work over [T, D]: ``tensors`` [T, D] bf16 tensors read or written."""
    p = _params({K.VEC_D: d, K.VEC_TENSORS: tensors, K.VEC_OPS: ops})
    return Op(name, cls, VEC, tok, tok, p, shape_in or (("T", d),),
              shape_out or (("T", d),), 0.0, "BF16", None, cls)


def rms_norm(name: str, tok: Tok, d: int) -> Op:
    return vector(name, "rms_norm", tok, d, 2, 4)


def add_rms_norm(name: str, tok: Tok, d: int) -> Op:
    """Residual add fused with the norm: reads x and residual, writes normed and new residual."""
    return vector(name, "add_rms_norm", tok, d, 4, 5, (("T", d), ("T", d)), (("T", d), ("T", d)))


def sfa(name: str, tok: Tok, heads: int, dl: int, dr: int, cap: float, tile: float = 1.0,
        entry_bytes: float | None = None, split: int = 1, ratio: int = 1) -> Op:
    """Sparse flash attention over the latent cache, top-k capped, bf16 inputs (seed §3.6); each
    query row gathers its own selected entries (``tile`` rows share one staged set); ``split``: the
    cache is sharded over that many DCP ranks and each attends all heads over its share."""
    p = _params({K.SFA_HEADS: heads, K.SFA_LATENT: dl, K.SFA_ROPE: dr, K.SFA_CAP: cap, K.SFA_TILE: tile,
                 K.SFA_ENTRY_BYTES: (dl + dr) * 2.0 if entry_bytes is None else entry_bytes,
                 K.SFA_SPLIT: float(split), K.SFA_RATIO: float(ratio)})
    return Op(name, "sfa", SFA, tok, tok, p, (("T", heads, dl + dr),),
              (("T", heads, dl),), 0.0, "BF16", None, "sparse_flash_attention")


def dense_attention(name: str, tok: Tok, heads: int, kv_heads: int, hd: int) -> Op:
    p = _params({K.ATTN_HEADS: heads, K.ATTN_KV_HEADS: kv_heads, K.ATTN_HEAD_DIM: hd})
    return Op(name, "attention", ATTN, tok, tok, p, (("T", heads, hd),),
              (("T", heads, hd),), 0.0, "BF16", None, "flash_attention")


def indexer_score(name: str, tok: Tok, ih: int, d: int, key_bytes: float | None = None, tile: float = 8.0,
                  vec_per_head: float = 8.0, dtype: str = "BF16", ratio: int = 1) -> Op:
    """LightningIndexer: q . k over the causal key range on the Cube (ReLU in its Fixpipe), then
    per-head weights and the sum over index heads on the Vector cores; a request's key cache is
    read once per ``tile`` query rows."""
    p = _params({K.IDX_HEADS: ih, K.IDX_DIM: d, K.IDX_KEY_BYTES: d * 2.0 if key_bytes is None else key_bytes,
                 K.IDX_TILE: tile, K.IDX_VEC_PER_HEAD: vec_per_head, K.IDX_RATIO: float(ratio)})
    return Op(name, "indexer_score", IDX_SCORE, tok, tok, p, (("T", ih, d), ("T", ih)), (("T", "K"),), 0.0, dtype,
              None, "lightning_indexer")


def indexer_topk(name: str, tok: Tok, topk: int, per_key: float = 4.36, per_kept: float = 3.32,
                 ratio: int = 1) -> Op:
    """Exact top-k fused into the indexer kernel: sort/merge on the Vector cores, no launch."""
    return Op(name, "indexer_topk", IDX_TOPK, tok, tok,
              _params({K.TOPK_K: topk, K.TOPK_PER_KEY: per_key, K.TOPK_PER_KEPT: per_kept, K.TOPK_RATIO: float(ratio)}),
              (("T", "K"),),
              (("T", topk),), 0.0, "BF16", None, "indexer_topk")


def router_topk(name: str, tok: Tok, e: int, k: int) -> Op:
    """Sigmoid scores + correction bias + top-k over the routed experts (MoeGatingTopK)."""
    return Op(name, "router_topk", ROUTER_TOPK, tok, tok, _params({K.ROUTER_E: e, K.ROUTER_K: k}),
              (("T", e),), (("T", k), ("T", k)), 0.0, "BF16", None, "moe_gating_topk")


def grouped_matmul(name: str, tok: Tok, h: int, inter: int, k: int, e: int, e_local: int, domain: int,
                   s: Scheme, weight: float, module: str) -> Op:
    """Routed experts: gate_up, SwiGLU, down over T x k token-expert rows (W4A8: int8 unit, half
    the weight bytes). ``domain``: ranks whose tokens reach this rank's experts (EP size, else 1)."""
    p = _params({K.GMM_H: h, K.GMM_I: inter, K.GMM_TOPK: k, K.GMM_E: e, K.GMM_DOMAIN: domain,
                 K.GMM_ACT_BYTES: s.act_bytes, K.GMM_DYNAMIC: 1.0 if s.dynamic else 0.0})
    return Op(name, "grouped_matmul", GMM, tok, tok, p, (("T", h),), (("T", h),), weight, s.compute, module,
              f"grouped_matmul_{_scheme_kernel(s)}", e_local=e_local)


def embedding(name: str, tok: Tok, h: int, v_local: int, weight: float, module: str) -> Op:
    return Op(name, "embedding", EMBED, tok, tok, _params({K.EMBED_H: h}), (("T",),), (("T", h),), weight,
              "BF16", module, "embedding")


def layout_op(name: str, tok: Tok, tok_out: Tok, shapes_in: tuple[Shape, ...],
              shapes_out: tuple[Shape, ...]) -> Op:
    """A graph-layout op (token slice, pad, head slice, row select): no compute, no launch."""
    return Op(name, "layout", ZERO, tok, tok_out, (), shapes_in, shapes_out, 0.0, "BF16", None, "")


@dataclass
class Coll:
    """One collective of the program: kind, group, the token range it moves and what it carries."""

    kind: str               # all_gather | reduce_scatter | all_reduce | all_to_all (kinds.COLL_KINDS)
    group: str              # tp | dp | ep (kinds.GROUPS)
    tok: Tok                # tokens of the input tensor on one rank
    bytes_per_token: float
    const_bytes: float
    tensor: str             # what it carries, e.g. "input_layernorm.out", "o_proj.weight"
    layers: list[int] = field(default_factory=list)
    mult: int = 0
    after: str = ""         # name of the op it follows
    seq: int = 0
    ctx_bytes: float = 0.0  # bytes per cached token of the step's requests (grows with context)

