"""Every code and column index the perf kernel and its Python side share, declared once.

Why one module: an op is described to the numba kernel as rows of plain arrays, so its kind, its
parameters and its outputs are numbers. Naming those numbers here (and only here) lets
``auditor.perf.ops`` fill a parameter slot, ``auditor.perf.keys`` read it, ``auditor.perf.api``
read an output column and ``kernels/perf_core.py`` compute with it without anyone counting
positions. Plain module-level ints: numba freezes them as compile-time constants, and importing
this module costs nothing (no numba, no numpy).

Adding an op kind: give it a code and its parameter slots below, a factory in
``auditor/perf/ops.py``, its FLOP/byte formula in ``perf_core.op_work`` and its measured-kernel key
in ``auditor/perf/keys.py``. Changing a value here invalidates numba's on-disk cache only when
``perf_core.py`` itself changes: clear ``__pycache__`` (or touch perf_core.py) after editing.
"""
from __future__ import annotations

# -- op kinds (op_i[:, OPI_KIND]) --------------------------------------------------------------
LINEAR = 1        # y[T, N] = x[T, K] @ W[K, N]
BMM = 2           # batched per-head matmul (absorbed MLA up-projections)
VEC = 3           # elementwise / normalisation work on the vector unit
SFA = 4           # sparse (top-k capped) flash attention over the latent cache
IDX_SCORE = 5     # lightning indexer q.k scores
IDX_TOPK = 6      # indexer top-k selection
ROUTER_TOPK = 7   # MoE gating top-k
GMM = 8           # routed experts: grouped matmul gate_up + SwiGLU + down
EMBED = 9         # embedding lookup
ZERO = 10         # graph-layout op (slice, pad, select): no work, no launch
ATTN = 11         # dense causal flash attention (non-MLA models)
#: kinds whose cost grows with the cached context (everything else depends only on token counts,
#: so a sweep evaluates it once per (tokens, batch, mtp)); reports mark them "grows"
CONTEXT_KINDS = (SFA, IDX_SCORE, IDX_TOPK, ATTN)


# -- parameter slots per kind (op_f[:, slot]; at most N_PARAMS) --------------------------------
N_PARAMS = 8
LINEAR_K, LINEAR_N, LINEAR_ACT_BYTES, LINEAR_DYNAMIC, LINEAR_OUT_BYTES = range(5)
BMM_HEADS, BMM_K, BMM_N = range(3)
VEC_D, VEC_TENSORS, VEC_OPS = range(3)          # D, [T, D] tensors read+written, ops per element
# sfa: local heads, latent and rope dims, top-k cap, query rows sharing one staged KV gather,
# bytes of one cached entry (latent + rope, as stored), ranks the cached entries are split over (DCP
# decode: each rank attends all heads over its 1/dcp share of the selected entries; 0 or 1 = no split)
# ``SFA_RATIO``: the attended cache holds one row per that many tokens (compressed attention; 0 or 1 = a
# row per token), so a query at key position L sees min(L / ratio, cap) rows
SFA_HEADS, SFA_LATENT, SFA_ROPE, SFA_CAP, SFA_TILE, SFA_ENTRY_BYTES, SFA_SPLIT, SFA_RATIO = range(8)
# indexer_score: index heads, index head dim, bytes of one cached key (+ its scale), query rows
# sharing one read of a request's key cache, vector ops per (query, key, head) after the Cube
IDX_HEADS, IDX_DIM, IDX_KEY_BYTES, IDX_TILE, IDX_VEC_PER_HEAD, IDX_RATIO = range(6)   # ratio: keys per token 1/r
# indexer_topk (fused into the indexer kernel: no launch of its own): top-k kept, vector
# sort/merge element ops per candidate key and per kept entry
TOPK_K, TOPK_PER_KEY, TOPK_PER_KEPT, TOPK_RATIO = range(4)
ROUTER_E, ROUTER_K = range(2)
GMM_H, GMM_I, GMM_TOPK, GMM_E, GMM_DOMAIN, GMM_ACT_BYTES, GMM_DYNAMIC = range(7)
EMBED_H = 0
ATTN_HEADS, ATTN_KV_HEADS, ATTN_HEAD_DIM = range(3)

NO_CAP = 1e18     # SFA_CAP of attention without a top-k cap (dense MLA)
CAPPED = 1e17     # a cap below this is a real top-k

# -- op rows: op_i[n, N_OPI] int64, op_f[n, N_OPF] float64, op_m[n] int64 ------------------------
OPI_KIND, OPI_STREAM, OPI_EXP, OPI_DPMUL, OPI_DTYPE = range(5)
N_OPI = 5
OPF_WEIGHT = N_PARAMS          # weight bytes streamed (resident on the rank)
OPF_COUNT = N_PARAMS + 1       # layers the row stands for
N_OPF = N_PARAMS + 2

# multiplicity modes (op_m, co_m)
MULT_ALWAYS, MULT_FIRST_MTP, MULT_LATER_MTP = range(3)

# -- collective rows: co_i[m, N_COI] int64, co_f[m, N_COF] float64, co_m[m] int64 -----------------
COI_KIND, COI_GROUP, COI_STREAM, COI_EXP, COI_DPMUL = range(5)
N_COI = 5
#: COF_CTX_BYTES: bytes per cached token of the step's requests (context + new tokens), for a
#: collective that moves the KV cache itself (the DCP prefill gather)
COF_BYTES_PER_TOKEN, COF_CONST_BYTES, COF_COUNT, COF_CTX_BYTES = range(4)
N_COF = 4

# collective kinds
ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL = range(4)
COLL_KINDS = {"all_reduce": ALL_REDUCE, "all_gather": ALL_GATHER, "reduce_scatter": REDUCE_SCATTER,
              "all_to_all": ALL_TO_ALL}

# communication groups (rows of the group table grp[N_GROUPS, N_GRP])
GROUP_TP, GROUP_DP, GROUP_EP = range(3)
GROUPS = {"tp": GROUP_TP, "dp": GROUP_DP, "ep": GROUP_EP}
N_GROUPS = 3
GRP_SIZE, GRP_BW, GRP_LATENCY = range(3)       # ranks, effective bytes/s, latency s
N_GRP = 3

# -- mma dtype codes (op_i[:, OPI_DTYPE]; offsets into the device vector's mma peaks) -----------
DT_F32, DT_BF16, DT_F16, DT_I8, DT_F8 = range(5)
DTYPES = {"F32": DT_F32, "BF16": DT_BF16, "F16": DT_F16, "I8": DT_I8, "F8": DT_F8}

# -- device vector (dev[N_DEV]) ------------------------------------------------------------------
DEV_HBM, DEV_ETA_MEMORY, DEV_ETA_COMPUTE, DEV_ETA_SFA_KV, DEV_ETA_INDEXER_CACHE = range(5)
DEV_STATIC_MMA, DEV_STATIC_GP, DEV_STATIC_COMM, DEV_VECTOR_PEAK = range(5, 9)
DEV_VECTOR_SORT = 9            # vector sort/merge element ops per second (top-k selection)
DEV_HOST_PREFILL, DEV_HOST_DECODE = 10, 11     # host overhead per forward step, seconds
DEV_MMA_PEAK = 12              # + dtype code: mma peak FLOP/s of that dtype (0 = absent -> BF16)
N_DEV = DEV_MMA_PEAK + len(DTYPES)

# -- stream table (st[N_STREAMS, N_ST]) ----------------------------------------------------------
STREAM_MAIN, STREAM_MTP_LATER, STREAM_ROWS, STREAM_DRAFT_BLOCK = range(4)
N_STREAMS = 4
ST_REQUESTS, ST_QUERIES, ST_CONTEXT, ST_DECODE = range(4)
N_ST = 4

# random-access byte kinds of op_work (which efficiency scales them)
RND_NONE, RND_SFA_KV, RND_INDEXER_CACHE = range(3)

# -- outputs: op_out[n, N_OUT], co_out[m, N_CO_OUT] ------------------------------------------------
(OUT_TOKENS, OUT_MMA, OUT_VEC, OUT_BYTES, OUT_T_COMPUTE, OUT_T_MEMORY, OUT_TIME, OUT_COUNT,
 OUT_BOUND, OUT_SORT) = range(10)   # OUT_BOUND: 1.0 compute-bound, 0.0 memory-bound; OUT_SORT: sort ops
N_OUT = 10
CO_BYTES, CO_TIME, CO_COUNT = range(3)
N_CO_OUT = 3
