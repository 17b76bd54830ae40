"""Op classes of the layer program (GenZ style): each knows its shapes, its parameters for the
cost kernel, the weight it streams and the measured-kernel key it can be looked up under.

FLOP and byte formulas are implemented once, in ``kernels/perf_core.py::op_work``; they are
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
                      mma 2Ph(Dl+Dr) + 2PhDl, vec 4Ph                          KV: prefill 2P(Dl+Dr) streamed,
                                                                                decode ceil(q/64) min(ctx+q,topk)
                                                                                entries per request, paged (sfa_kv)
indexer_score         keys Kc = sum_i (ctx+i) (causal) x query share;           2T IH ID + 4T IH; cache: prefill
                      mma 2 Kc IH ID, vec 3 Kc IH (relu x weight, head sum)     ceil(q/128) (ctx+q) ID 2 per request,
                                                                                decode q (ctx+q) ID 2 (indexer_cache)
indexer_topk          vec Kc                                                    4 T topk
router_topk           vec 4 T E                                                 4 T E + 8 T k
grouped_matmul        rows R = T k; mma 6 R H I; vec 3RI (+4R(H+I) dynamic)     R H a_in + 4 R I + R I a_in + 2RH
                                                                                + W x (1-(1-k/E)^(T x ep)) experts hit
embedding             -                                                         4 T H + 4 T
attention (dense)     mma 4 Kc h d, vec 4 Kc h                                  4 T h d + 4 n (ctx+q) h_kv d
layout (slice/pad)    0                                                         0 (graph-layout op, no launch)
====================  ========================================================  ===============================

Measured-kernel names and keys per class: see ``keys.py`` (they follow the profiler importer in
``measured.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .tokens import Tok
from .quant import DTYPE_CODE, Scheme

# kind codes, mirrored in kernels/perf_core.py
LINEAR, BMM, VEC, SFA, IDX_SCORE, IDX_TOPK, ROUTER_TOPK, GMM, EMBED, ZERO, ATTN = range(1, 12)
NO_CAP = 1e18   # attention without a top-k cap (dense MLA)

Shape = tuple  # dims; symbols: "T" input tokens, "U" output tokens, "R" token-expert rows (T x k),
               # "K" keys of the longest query (context + queries per request)


@dataclass
class Op:
    """One op of one layer (or of a representative layer with ``layers`` it stands for)."""

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
    mult: int = 0          # 0 always, 1 first MTP pass, 2 each later MTP pass
    seq: int = 0           # emission order inside the program (timeline order within a layer)

    @property
    def layout(self) -> str:
        a, b = self.tok.layout, self.tok_out.layout
        return a if a == b else f"{a}->{b}"

    def dtype_code(self) -> int:
        return DTYPE_CODE[self.dtype]


def _scheme_kernel(s: Scheme) -> str:
    return {"FLOAT": "bf16", "W8A8": "w8a8", "W8A8_DYNAMIC": "w8a8_dynamic",
            "W4A8_DYNAMIC": "w4a8_dynamic", "FP8": "fp8"}[s.name]


def linear(name: str, tok: Tok, k: int, n: int, s: Scheme, weight: float, module: str | None,
           out_bytes: float = 2.0, dtype: str | None = None) -> Op:
    """y[T, N] = x[T, K] @ W[K, N]."""
    dt = dtype or s.compute
    kern = "matmul_f32" if dt == "F32" else f"matmul_{_scheme_kernel(s)}"
    return Op(name, "linear", LINEAR, tok, tok, (k, n, s.act_bytes, 1.0 if s.dynamic else 0.0, out_bytes),
              (("T", k),), (("T", n),), weight, dt, module, kern)


def bmm(name: str, tok: Tok, heads: int, k: int, n: int, weight: float, module: str | None) -> Op:
    """y[T, h, N] = x[T, h, K] @ W[h, K, N], bf16 (the absorbed MLA up-projections)."""
    return Op(name, "bmm", BMM, tok, tok, (heads, k, n), (("T", heads, k),), (("T", heads, n),),
              weight, "BF16", module, "bmm_bf16")


def vector(name: str, cls: str, tok: Tok, d: int, tensors: float, ops: float,
           shape_in: tuple[Shape, ...] | None = None, shape_out: tuple[Shape, ...] | None = None) -> Op:
    """Elementwise/normalisation work over [T, D]: ``tensors`` [T, D] bf16 tensors read or written."""
    return Op(name, cls, VEC, tok, tok, (d, tensors, ops), shape_in or (("T", d),),
              shape_out or (("T", d),), 0.0, "BF16", None, cls)


def rms_norm(name: str, tok: Tok, d: int) -> Op:
    return vector(name, "rms_norm", tok, d, 2, 4)


def add_rms_norm(name: str, tok: Tok, d: int) -> Op:
    """Residual add fused with the norm: reads x and residual, writes normed and new residual."""
    return vector(name, "add_rms_norm", tok, d, 4, 5, (("T", d), ("T", d)), (("T", d), ("T", d)))


def sfa(name: str, tok: Tok, heads: int, dl: int, dr: int, cap: float) -> Op:
    """Sparse flash attention over the latent cache, top-k capped, bf16 inputs (seed §3.6)."""
    return Op(name, "sfa", SFA, tok, tok, (heads, dl, dr, cap), (("T", heads, dl + dr),),
              (("T", heads, dl),), 0.0, "BF16", None, "sparse_flash_attention")


def dense_attention(name: str, tok: Tok, heads: int, kv_heads: int, hd: int) -> Op:
    return Op(name, "attention", ATTN, tok, tok, (heads, kv_heads, hd), (("T", heads, hd),),
              (("T", heads, hd),), 0.0, "BF16", None, "flash_attention")


def indexer_score(name: str, tok: Tok, ih: int, d: int) -> Op:
    """q . k over the causal key range, relu, per-head weights, sum over index heads."""
    return Op(name, "indexer_score", IDX_SCORE, tok, tok, (ih, d), (("T", ih, d), ("T", ih)),
              (("T", "K"),), 0.0, "BF16", None, "lightning_indexer")


def indexer_topk(name: str, tok: Tok, topk: int) -> Op:
    return Op(name, "indexer_topk", IDX_TOPK, tok, tok, (topk,), (("T", "K"),), (("T", topk),),
              0.0, "BF16", None, "indexer_topk")


def router_topk(name: str, tok: Tok, e: int, k: int) -> Op:
    """Sigmoid scores + correction bias + top-k over the routed experts (MoeGatingTopK)."""
    return Op(name, "router_topk", ROUTER_TOPK, tok, tok, (e, k), (("T", e),), (("T", k), ("T", k)),
              0.0, "BF16", None, "moe_gating_topk")


def grouped_matmul(name: str, tok: Tok, h: int, inter: int, k: int, e: int, e_local: int, domain: int,
                   s: Scheme, weight: float, module: str) -> Op:
    """Routed experts: gate_up, SwiGLU, down over T x k token-expert rows (W4A8: int8 unit, half
    the weight bytes)."""
    op = Op(name, "grouped_matmul", GMM, tok, tok,
            (h, inter, k, e, domain, s.act_bytes, 1.0 if s.dynamic else 0.0),
            (("T", h),), (("T", h),), weight, s.compute, module, f"grouped_matmul_{_scheme_kernel(s)}")
    op.e_local = e_local  # type: ignore[attr-defined]
    return op


def embedding(name: str, tok: Tok, h: int, v_local: int, weight: float, module: str) -> Op:
    return Op(name, "embedding", EMBED, tok, tok, (h,), (("T",),), (("T", h),), weight, "BF16",
              module, "embedding")


def layout_op(name: str, tok: Tok, tok_out: Tok, shapes_in: tuple[Shape, ...],
              shapes_out: tuple[Shape, ...]) -> Op:
    """A graph-layout op (token slice, pad, head slice, row select): no compute, no launch."""
    return Op(name, "layout", ZERO, tok, tok_out, (), shapes_in, shapes_out, 0.0, "BF16", None, "")


@dataclass
class Coll:
    """One collective of the program: kind, group, the token range it moves and what it carries."""

    kind: str               # all_gather | reduce_scatter | all_reduce | all_to_all
    group: str              # tp | dp | ep
    tok: Tok                # tokens of the input tensor on one rank
    bytes_per_token: float
    const_bytes: float
    tensor: str             # what it carries, e.g. "input_layernorm.out", "o_proj.weight"
    layers: list[int] = field(default_factory=list)
    mult: int = 0
    after: str = ""         # name of the op it follows
    seq: int = 0


COLL_KIND = {"all_reduce": 0, "all_gather": 1, "reduce_scatter": 2, "all_to_all": 3}
GROUP = {"tp": 0, "dp": 1, "ep": 2}
