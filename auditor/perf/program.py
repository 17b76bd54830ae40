"""The layer program: for every decoder layer (dense, MoE, MTP) an ordered list of ops and
collectives with their token layout, following the seed RFC.

Prefill with SP and DSA-CP (§3.2-3.3.1): the residual stream stays local-token; the input norm
runs local and only its normalized output is all-gathered (TP group) to full tokens. The engine
then slices each rank's share back and runs the whole attention on it with all heads: MLA
preprocessing, the indexer (keys and the top-k query side, §3.3), SFA, v_up and the full-weight
o_proj (no feature all-reduce); only the new tokens' cache entries are all-gathered so every rank
writes the full cache (vllm-ascend sfa_cp.py@182b75ea; the seed's "full-token attention" is the
graph boundary, not where the FLOPs run). Norm, gate, top-k, routed and shared experts run local.
DSA-CP without SP and in decode shards the attention the same way (see ``attention``). Without SP
the normal TP path applies: TP-sharded heads, all_reduce after o_proj and after the (TP-sharded) MLP/shared
experts. Decode (§3.8): the gate runs on the full packed-local tokens, then hidden states and
router logits are padded to a multiple of TP and TP-sliced before top-k and dispatch; the MoE
finalize all-gathers the routed output back.

MTP (documented choice): the drafter runs its layer once per speculative token K. The first pass
sees the tokens of the main forward (prefill: the prompt, with the prefill layout; decode: the
1+K verified tokens per request, as vLLM's proposer does), every later pass one token per
request. Each pass embeds, applies enorm/hnorm and eh_proj, runs the decoder layer, the shared
head norm and the (shared) lm_head.

Two graph forms are built: ``expanded`` (every layer, the layout state threaded explicitly from
layer to layer) and ``repetition`` (one representative per distinct layer kind with a repeat
count, seed §3.3.2). A representative must leave the layer-boundary State unchanged (region
markers are layout-transparent); otherwise a ContractError is raised.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from auditor_kernels import kinds as K

from ..context import DeploymentContext
from ..engines.placement import Placement
from ..model import blueprint as B
from ..errors import AuditInputError
from ..engines.registry import as_engine
from ..model.spec import ModelSpec
from ..parallel import ParallelPlan
from . import ops as O
from .tokens import MAIN, MTP_LATER, ROWS, ContractError, State, Tok, require_same
from .quant import FLOAT, scheme
from .weights import weight_bytes

GRAPHS = ("expanded", "repetition")


@dataclass
class Program:
    """Ops and collectives of one phase, as objects (for reports) and arrays (for the kernel)."""

    phase: str
    graph: str
    tp: int
    ops: list[O.Op] = field(default_factory=list)
    colls: list[O.Coll] = field(default_factory=list)
    layout: Placement | None = None
    weight_source: str = "scheme"
    #: ranks a step's tokens are split over (DSA-CP: each TP rank runs its padded share of the step's
    #: tokens through the whole layer, sfa_cp.py:147-153@182b75ea); 1 when every rank sees all tokens
    token_split: int = 1
    #: the drafter the program times ("mtp": K sequential passes; "dspark": one block pass, perf.dspark)
    drafter: str = "mtp"
    _arrays: tuple | None = None

    def arrays(self) -> tuple[np.ndarray, ...]:
        """(op_i, op_f, op_m, co_i, co_f, co_m) in the layout kernels/perf_core.py documents
        (column names in kernels/kinds.py)."""
        if self._arrays is None:
            n, m = len(self.ops), len(self.colls)
            op_i = np.zeros((n, K.N_OPI), np.int64)
            op_f = np.zeros((n, K.N_OPF), np.float64)
            op_m = np.zeros(n, np.int64)
            for i, op in enumerate(self.ops):
                op_i[i, K.OPI_KIND] = op.kind
                op_i[i, K.OPI_STREAM] = op.tok.stream
                op_i[i, K.OPI_EXP] = op.tok.exp
                op_i[i, K.OPI_DPMUL] = op.tok.mul
                op_i[i, K.OPI_DTYPE] = op.dtype_code()
                op_f[i, :len(op.params)] = op.params
                op_f[i, K.OPF_WEIGHT] = op.weight
                op_f[i, K.OPF_COUNT] = len(op.layers) if op.layers else 1
                op_m[i] = op.mult
            co_i = np.zeros((m, K.N_COI), np.int64)
            co_f = np.zeros((m, K.N_COF), np.float64)
            co_m = np.zeros(m, np.int64)
            for j, c in enumerate(self.colls):
                co_i[j, K.COI_KIND] = K.COLL_KINDS[c.kind]
                co_i[j, K.COI_GROUP] = K.GROUPS[c.group]
                co_i[j, K.COI_STREAM] = c.tok.stream
                co_i[j, K.COI_EXP] = c.tok.exp
                co_i[j, K.COI_DPMUL] = c.tok.mul
                co_f[j, K.COF_BYTES_PER_TOKEN] = c.bytes_per_token
                co_f[j, K.COF_CONST_BYTES] = c.const_bytes
                co_f[j, K.COF_COUNT] = len(c.layers) if c.layers else 1
                co_f[j, K.COF_CTX_BYTES] = c.ctx_bytes
                co_m[j] = c.mult
            self._arrays = (op_i, op_f, op_m, co_i, co_f, co_m)
        return self._arrays


@dataclass(frozen=True)
class LayerKind:
    moe: bool
    indexer: bool           # the layer holds an indexer: k side + cache write run
    first: bool
    topk: bool = True       # it computes its own score + top-k (IndexCache shares it otherwise)


def _share(first: B.Linear, second: B.Linear, spec: ModelSpec) -> float:
    """``first``'s part of the parameters of two linears that perf reads as one weight key."""
    a = first.out(spec) * first.inp(spec)
    return a / (a + second.out(spec) * second.inp(spec))


def token_split(spec: ModelSpec, plan: ParallelPlan, lay: Placement, phase: str) -> int:
    """TP ranks a step's tokens are split over: DSA-CP shards them in prefill, and in decode unless DCP
    takes the decode path (its own query all-gather); 1 when every rank runs every token."""
    cp = lay.dsa_cp and spec.dsa and plan.tp > 1 and (phase == "prefill" or plan.dcp <= 1)
    return plan.tp if cp else 1


class _Builder:
    """Emits ops/collectives for one phase; decoder layers are built by ``layer``."""

    def __init__(self, dep: DeploymentContext, phase: str, lay: Placement, weights: dict[tuple[int, str], int],
                 path: Any):
        spec, plan, eng = dep.spec, dep.plan, dep.engine
        self.spec, self.plan, self.recipe, self.phase, self.lay = spec, plan, dep.recipe, phase, lay
        self.path = path
        self.prof = eng.profile
        # the engine's KV spec of this cache variant: the one definition of what a cached token takes
        # (cache writes write it, SFA gathers it, the indexer reads its keys)
        self.kv = eng.kv_spec(spec, plan, variant=path.name, arch=getattr(path, "arch", ""))
        self.w = weights
        self._topk = True
        self.tp = plan.tp
        self.ops: list[O.Op] = []
        self.colls: list[O.Coll] = []
        self.layers: list[int] = []     # layers the op being emitted stands for
        self.mult = K.MULT_ALWAYS

    @staticmethod
    def _write_tensors(d: int, entry_bytes: int) -> float:
        """A cache write reads the [T, d] bf16 vector and writes one cache entry per token: in units of
        [T, d] bf16 tensors, 1 + entry / (2 d) (2 when the cache is bf16)."""
        return 1.0 + entry_bytes / (2.0 * d)

    # -- emission -------------------------------------------------------------------------
    def op(self, op: O.Op) -> O.Op:
        named = getattr(self.path, "kernel_for", None)      # an engine that names its own kernels
        if named is not None:
            op.kernel = named(op.cls, op.dtype, layout=self.kv.variant, ep=self.plan.ep_on) or op.kernel
        op.layers = list(self.layers)
        op.mult = self.mult
        op.seq = len(self.ops) + len(self.colls)
        self.ops.append(op)
        return op

    def coll(self, kind: str, group: str, tok: Tok, bpt: float, tensor: str, const: float = 0.0,
             group_size: int | None = None, ctx_bytes: float = 0.0) -> None:
        size = group_size or {"tp": self.tp, "dp": self.plan.dp, "ep": self.plan.ep}[group]
        if size <= 1:
            return
        after = self.ops[-1].name if self.ops else ""
        self.colls.append(O.Coll(kind, group, tok, bpt, const, tensor, list(self.layers), self.mult, after,
                                 len(self.ops) + len(self.colls), ctx_bytes))

    def wb(self, layer: int, module: str) -> float:
        return float(self.w.get((layer, module), 0))

    # -- model-level pieces ---------------------------------------------------------------
    def embed(self, prefix: str, tok: Tok, shard: bool) -> Tok:
        s = self.spec
        self.op(O.embedding(f"{prefix}embed_tokens", tok, s.H, s.V_padded // self.tp,
                            self.wb(-1, "embed_tokens"), "embed_tokens"))
        if self.tp > 1 and shard:
            self.coll("reduce_scatter", "tp", tok, s.H * 2, f"{prefix}embed_tokens.out")
            return tok.sliced()
        self.coll("all_reduce", "tp", tok, s.H * 2, f"{prefix}embed_tokens.out")
        return tok

    def head(self, prefix: str, st: State, rows: Tok, norm_name: str) -> None:
        s = self.spec
        x = st.hidden
        if st.residual is not None:
            require_same(x, st.residual, f"{prefix}{norm_name}")
            self.op(O.add_rms_norm(f"{prefix}{norm_name}", x, s.H))
        else:
            self.op(O.rms_norm(f"{prefix}{norm_name}", x, s.H))
        if x.exp < 0:
            self.coll("all_gather", "tp", x, s.H * 2, f"{prefix}{norm_name}.out")
            x = x.gathered()
        self.op(O.layout_op(f"{prefix}logits.select", x, rows, (("T", s.H),), (("U", s.H),)))
        vl = s.V_padded // self.tp
        self.op(O.linear(f"{prefix}lm_head", rows, s.H, vl, FLOAT, self.wb(-1, "lm_head"), "lm_head"))
        self.coll("all_gather", "tp", rows, vl * 2, f"{prefix}lm_head.out")

    # -- decoder layer ---------------------------------------------------------------------
    def layer(self, L: int, kind: LayerKind, st: State, shard: bool, mtp_layer: bool = False) -> State:
        """One decoder layer; ``shard`` = sequence parallel applies (prefill with SP, TP > 1)."""
        s = self.spec
        if s.layer_kinds:           # a family with per-layer kinds (model.spec.LayerKind): its own program
            from .families import program_of
            return program_of(s.family).layer(self, L, kind, st, shard, mtp_layer)
        x = st.hidden
        if st.residual is None:
            self.op(O.rms_norm("input_layernorm", x, s.H))
        else:
            require_same(x, st.residual, f"layer {L} input_layernorm")
            self.op(O.add_rms_norm("input_layernorm", x, s.H))
        res = x
        h = x
        if h.exp < 0:   # local-token -> full-token on the normalized output only
            self.coll("all_gather", "tp", h, s.H * 2, "input_layernorm.out")
            h = h.gathered()
        a = self.attention(L, kind, h, shard, mtp_layer)
        require_same(a, res, f"layer {L} post_attention_layernorm")
        self.op(O.add_rms_norm("post_attention_layernorm", a, s.H))
        if kind.moe:
            out = self.moe(L, a, mtp_layer)
        else:
            out = self.dense_mlp(L, a, mtp_layer)
        require_same(out, res, f"layer {L} output")
        return State(out, res)

    def attention(self, L: int, kind: LayerKind, h: Tok, shard: bool, mtp_layer: bool) -> Tok:
        """Attention on ``h`` (full-token); returns the o_proj output token layout."""
        s, lay = self.spec, self.lay
        sa = scheme(self.recipe, "attn", mtp_layer)
        if not s.mla:
            return self.gqa(L, h, shard, sa)
        hl = lay.heads_local
        q_in = s.Qr or s.H
        full = h
        # (decode with DCP keeps its own query all-gather path below, unchanged)
        cp = token_split(s, self.plan, lay, self.phase) > 1
        if cp:
            # DSA-CP shards the step's tokens over the TP group (prefill and decode alike: fused
            # preprocessing is refused under DSA-CP, so every step takes the native path): each rank
            # slices its padded share of the (gathered) tokens and runs the whole attention on it with
            # all heads -- projections, indexer, SFA, v_up; only the new tokens' latent and indexer keys
            # are all-gathered so that every rank writes the full cache (vllm-ascend sfa_cp.py:257-272
            # _prepare_native_hidden_states, :249-252 refused fused types, :314-348
            # _prepare_kv_for_parallel, :160-196 local query/key lengths @182b75ea; the same slicing in
            # v0.18.0 sfa_v1.py:242-312, 1049-1140)
            h = full.sliced()
            self.op(O.layout_op("self_attn.token_slice", full, h, (("T", s.H),), (("U", s.H),)))
        qkv_a = B.QKV_A if s.Qr else B.KV_A          # the down projections, one matmul (model.blueprint)
        self.op(O.linear("self_attn.fused_qkv_a_proj", h, s.H, qkv_a.out(s), sa,
                         sum(self.wb(L, m) for m in qkv_a.members), "+".join(qkv_a.members)))
        if s.Qr:
            self.op(O.rms_norm("self_attn.q_a_layernorm", h, s.Qr))
        self.op(O.rms_norm("self_attn.kv_a_layernorm", h, s.Lkv))
        if not s.Qr:
            q_in = s.H
        self.op(O.linear("self_attn.q_b_proj", h, q_in, hl * s.Dq, sa, self.wb(L, "self_attn.q_b_proj"),
                         "self_attn.q_b_proj"))
        self.op(O.vector("self_attn.rope", "rope", h, hl * s.Dr + s.Dr, 2, 4,
                         (("T", hl, s.Dr), ("T", s.Dr)), (("T", hl, s.Dr), ("T", s.Dr))))
        if cp:
            # the fused [k_pe | k_nope (| indexer k)] of the local tokens, all-gathered in cache layout
            idx = float(self.kv.indexer_entry_bytes) if kind.indexer else 0.0
            self.coll("all_gather", "tp", h, float(self.kv.main_entry_bytes) + idx, "self_attn.fused_kv")
        self.op(O.vector("self_attn.kv_cache_write", "cache_write", full, s.Lkv + s.Dr,
                         self._write_tensors(s.Lkv + s.Dr, self.kv.main_entry_bytes), 0))
        if kind.indexer:
            self._topk = kind.topk
            self.indexer(L, h, full, sa, q_in)
        kvb = self.wb(L, "self_attn.kv_b_proj")
        uk = kvb * s.Dn / (s.Dn + s.Dv)
        self.op(O.bmm("self_attn.q_absorb", h, hl, s.Dn, s.Lkv, uk, "self_attn.kv_b_proj(W_UK_T)"))
        cap = float(s.topk_tokens) if s.dsa else K.NO_CAP
        kp = self.path
        hq = self._query_rows(h)
        if self.phase == "prefill" and s.dsa and self.plan.dcp > 1:
            # SFA DCP, a step with prefill: every rank index-selects its share of the KV blocks of the
            # step's requests (their whole context) and all-gathers them over the DCP group, then attends
            # its own queries over the complete cache (sfa_cp.py:699-711 compact gather metadata,
            # :849-887 _record_dcp_kv_gather_context, :1141-1170 @182b75ea); the main cache only (the
            # indexer cache is replicated)
            self.coll("all_gather", "tp", h, 0.0, "self_attn.dcp_kv", group_size=self.plan.dcp,
                      ctx_bytes=float(self.kv.main_entry_bytes) / self.plan.dcp)
        dcp = self.plan.dcp if self.phase == "decode" and s.dsa else 1
        if dcp not in (1, self.tp):
            raise AuditInputError("--dcp", f"SFA context parallel needs DCP = TP ({self.tp}), got {dcp} "
                                           "(vLLM-Ascend context_parallel.md:74-76)")
        if dcp > 1:
            # SFA DCP (replicated indexer; research serving-facts §5, vLLM-Ascend sfa_cp.py:1127-1215): the
            # query [ql_nope | q_pe] is all-gathered over the DCP group (along heads natively,
            # sfa_v1.py:1326-1328; along tokens with DSA-CP, sfa_cp.py:254-255): each rank brings 1/dcp
            # of the step's T x H queries, and then attends all H heads over its 1/dcp of the KV
            self.coll("all_gather", "tp", h, s.NH / dcp * (s.Lkv + s.Dr) * 2.0, "self_attn.dcp_query",
                      group_size=dcp)
        att = O.sfa("self_attn.sfa", hq, s.NH if dcp > 1 else hl, s.Lkv, s.Dr, cap, kp.sfa_tile_rows,
                    float(self.kv.main_entry_bytes), split=dcp)
        if not s.dsa:
            # MLA without an indexer (DeepSeek-V3/R1): the engine runs FusedInferAttentionScore over the
            # latent cache, not SparseFlashAttention (research kernel-types.md §1.4, op_mapping L575-593);
            # same cost formula (uncapped), named as the attention it is so `align` compares like with like
            att = dataclasses.replace(att, name="self_attn.attention", cls="attention",
                                      kernel="fused_infer_attention_score")
        self.op(att)
        if dcp > 1:
            # each rank attended all heads over its KV shard: the partial outputs [T, H, Lkv] and their
            # LSE [T, H, 1] go back by all-to-all over heads and are merged by a softmax over the dcp LSEs
            # (_merge_dcp_outputs, sfa_cp.py:987-1042); LSE fp32 (UNCONFIRMED, serving-facts §8)
            self.coll("all_to_all", "tp", h, s.NH * (s.Lkv * 2.0 + 4.0) * (dcp - 1) / dcp,
                      "self_attn.dcp_out_lse", group_size=dcp)
            self.op(O.vector("self_attn.dcp_merge", "dcp_merge", h, s.NH // dcp * s.Lkv, dcp + 1, 4))
        self.op(O.bmm("self_attn.v_up", h, hl, s.Lkv, s.Dv, kvb - uk, "self_attn.kv_b_proj(W_UV)"))
        return self.o_proj(L, h, hl, s.Dv, shard, sa, local=cp)

    def gqa(self, L: int, h: Tok, shard: bool, sa) -> Tok:
        """Plain (non-MLA) attention: TP-sharded q/k/v heads, causal flash attention."""
        s, tp = self.spec, self.tp
        hl = s.NH // tp
        kvh = max(s.NKV // tp, 1)
        wqkv = sum(self.wb(L, f"self_attn.{m}_proj") for m in "qkv")
        self.op(O.linear("self_attn.qkv_proj", h, s.H, (hl + 2 * kvh) * s.head_dim, sa, wqkv,
                         "self_attn.q_proj+k_proj+v_proj"))
        self.op(O.vector("self_attn.rope", "rope", h, (hl + kvh) * s.head_dim, 2, 4))
        self.op(O.vector("self_attn.kv_cache_write", "cache_write", h, 2 * kvh * s.head_dim,
                         self._write_tensors(2 * kvh * s.head_dim, self.kv.main_entry_bytes), 0))
        self.op(O.dense_attention("self_attn.attention", h, hl, kvh, s.head_dim))
        self.op(O.linear("self_attn.o_proj", h, hl * s.head_dim, s.H, sa, self.wb(L, "self_attn.o_proj"),
                         "self_attn.o_proj"))
        return self._reduce_tp(h, shard, "self_attn.o_proj.out")

    def _query_rows(self, t: Tok) -> Tok:
        """The rows an attention kernel (indexer score / top-k, SFA) really attends with: in the drafter's
        passes 2..K one query per request at the end of the step (``attn_update_stack_num_spec_norm``:
        max_query_len 1), although the pass runs its other ops on the padded pass-1 rows."""
        if self.mult == K.MULT_LATER_MTP and t.stream == MAIN:
            return Tok(MTP_LATER, t.exp, t.mul)
        return t

    def _reduce_tp(self, t: Tok, shard: bool, tensor: str) -> Tok:
        """Feature partial sums over TP: reduce_scatter to local tokens under SP, else all_reduce."""
        if self.tp <= 1:
            return t
        if shard and t.exp == 0:
            self.coll("reduce_scatter", "tp", t, self.spec.H * 2, tensor)
            return t.sliced()
        self.coll("all_reduce", "tp", t, self.spec.H * 2, tensor)
        return t

    def indexer(self, L: int, h: Tok, full: Tok, sa, q_in: int) -> None:
        """DSA indexer on the attention's tokens ``h`` (the local shard under DSA-CP, seed §3.3's
        local top-k query side); only its cache write covers every token of the step (``full``)."""
        s = self.spec
        self.op(O.linear("self_attn.indexer.wk", h, s.H, s.ID, FLOAT, self.wb(L, "self_attn.indexer.wk"),
                         "self_attn.indexer.wk"))
        self.op(O.vector("self_attn.indexer.k_norm", "layer_norm", h, s.ID, 2, 6))
        self.op(O.vector("self_attn.indexer.k_rope", "rope", h, s.Dr, 2, 4))
        self.op(O.vector("self_attn.indexer.cache_write", "cache_write", full, s.ID,
                         self._write_tensors(s.ID, self.kv.indexer_entry_bytes), 0))
        if not self._topk:
            return          # IndexCache: this layer reuses the previous full layer's top-k
        q = h
        self.op(O.linear("self_attn.indexer.wq_b", q, q_in, s.IH * s.ID, sa,
                         self.wb(L, "self_attn.indexer.wq_b"), "self_attn.indexer.wq_b"))
        self.op(O.vector("self_attn.indexer.q_rope", "rope", q, s.IH * s.Dr, 2, 4))
        self.op(O.linear("self_attn.indexer.weights_proj", q, s.H, s.IH, FLOAT,
                         self.wb(L, "self_attn.indexer.weights_proj"), "self_attn.indexer.weights_proj"))
        kp = self.path
        q = self._query_rows(q)
        self.op(O.indexer_score("self_attn.indexer.score", q, s.IH, s.ID,
                                float(self.kv.indexer_entry_bytes),
                                kp.indexer_tile(s.IH), kp.indexer_vec_per_head_total(s.IH), kp.indexer_dtype))
        self.op(O.indexer_topk("self_attn.indexer.topk", q, s.topk_tokens, kp.topk_per_key, kp.topk_per_kept))

    def o_proj(self, L: int, h: Tok, hl: int, dv: int, shard: bool, sa, local: bool = False) -> Tok:
        s, lay, tp = self.spec, self.lay, self.tp
        w = self.wb(L, "self_attn.o_proj")
        if local:
            loc = h                 # DSA-CP: the attention already ran on this rank's token shard
            if self.phase == "decode" and not lay.o_proj_replicated:
                # decode keeps the TP o_proj (no full-weight switch outside prefill): the local tokens'
                # all-head outputs go back to all tokens x this rank's heads by one all_to_all, then the
                # row-parallel o_proj and its all_reduce (sfa_cp.py:447-501 _finalize_o_proj)
                self.coll("all_to_all", "tp", loc, s.NH * dv * 2.0 * (tp - 1) / tp, "self_attn.o_proj.in")
                full = loc.gathered()
                self.op(O.linear("self_attn.o_proj", full, hl // tp * dv, s.H, sa, w, "self_attn.o_proj"))
                return self._reduce_tp(full, shard, "self_attn.o_proj.out")
            if not lay.o_proj_replicated:
                # TP shard + full-size gather pool: the weight is all-gathered before the full-weight op
                self.coll("all_gather", "tp", loc, 0.0, "self_attn.o_proj.weight", const=w)
                w = w * tp
            self.op(O.linear("self_attn.o_proj", loc, hl * dv, s.H, sa, w, "self_attn.o_proj"))
            if shard:
                return loc          # SP: the residual stream is local-token too
            # no SP: the output is all-gathered back to the full-token residual (sfa_cp.py:470-478)
            self.coll("all_gather", "tp", loc, s.H * 2, "self_attn.o_proj.out")
            return loc.gathered()
        if hl == s.NH and lay.o_proj_replicated:
            self.op(O.linear("self_attn.o_proj", h, hl * dv, s.H, sa, w, "self_attn.o_proj"))
            return h
        if hl == s.NH and tp > 1:
            self.op(O.layout_op("self_attn.head_slice", h, h, (("T", hl, dv),), (("T", hl // tp, dv),)))
            hl = hl // tp
        self.op(O.linear("self_attn.o_proj", h, hl * dv, s.H, sa, w, "self_attn.o_proj"))
        return self._reduce_tp(h, shard, "self_attn.o_proj.out")

    def dense_mlp(self, L: int, a: Tok, mtp_layer: bool) -> Tok:
        s, tp = self.spec, self.lay.dense_tp
        sm = scheme(self.recipe, "mlp", mtp_layer)
        x = a
        if x.exp < 0:
            self.coll("all_gather", "tp", x, s.H * 2, "post_attention_layernorm.out")
            x = x.gathered()
        di = s.Id // tp
        w = self.wb(L, "mlp")
        up = _share(B.MLP_GATE_UP, B.MLP_DOWN, s)      # gate_up's part of the MLP's bytes, from the blueprint
        self.op(O.linear("mlp.gate_up_proj", x, s.H, 2 * di, sm, w * up, "mlp"))
        self.op(O.vector("mlp.act", "swiglu", x, di, 3, 4, (("T", 2 * di),), (("T", di),)))
        self.op(O.linear("mlp.down_proj", x, di, s.H, sm, w * (1 - up), "mlp"))
        if a.exp < 0:
            self.coll("reduce_scatter", "tp", x, s.H * 2, "mlp.out")
            return x.sliced()
        if self.tp > 1:
            self.coll("all_reduce", "tp", x, s.H * 2, "mlp.out")
        return x

    def moe(self, L: int, a: Tok, mtp_layer: bool) -> Tok:
        s, lay, tp, plan = self.spec, self.lay, self.tp, self.plan
        se = scheme(self.recipe, "expert", mtp_layer)
        k = s.topk_experts
        gate_dt = "F32" if self.prof.gate_dtype == "F32" else "BF16"
        self.op(O.linear("mlp.gate", a, s.H, s.E, FLOAT, self.wb(L, "mlp.gate"), "mlp.gate",
                         out_bytes=4.0, dtype=gate_dt))
        routed_in = a
        sliced = False
        if plan.ep_on and a.exp == 0 and tp > 1:
            # §3.8: pad both hidden states and router logits to a multiple of TP, then TP-slice
            padded = a.sliced().times(tp)
            self.op(O.layout_op("mlp.pad", a, padded, (("T", s.H), ("T", s.E)), (("U", s.H), ("U", s.E))))
            routed_in = a.sliced()
            self.op(O.layout_op("mlp.tp_slice", padded, routed_in, (("T", s.H), ("T", s.E)),
                                (("U", s.H), ("U", s.E))))
            sliced = True
        self.op(O.router_topk("mlp.topk", routed_in, s.E, k))
        w_exp = self.wb(L, "mlp.experts")
        if plan.ep_on:
            scale = 4.0 if se.quantized else 0.0
            self.coll("all_to_all", "ep", routed_in, k * (s.H * se.act_bytes + scale), "mlp.dispatch")
            self.op(O.grouped_matmul("mlp.experts", routed_in, s.H, lay.I_p, k, s.E, lay.experts_local,
                                     plan.ep, se, w_exp, "mlp.experts"))
            self.coll("all_to_all", "ep", routed_in, k * s.H * 2, "mlp.combine")
            routed_out = routed_in
            if sliced:
                self.coll("all_gather", "tp", routed_in, s.H * 2, "mlp.finalize")
                routed_out = a
        else:
            g = routed_in
            if g.exp < 0:
                self.coll("all_gather", "tp", g, s.H * 2, "mlp.experts.in")
                g = g.gathered()
            if plan.dp > 1:
                self.coll("all_gather", "dp", g, s.H * 2, "mlp.experts.in")
                g = g.times(plan.dp)
            self.op(O.grouped_matmul("mlp.experts", g, s.H, lay.I_p, k, s.E, lay.experts_local, 1, se,
                                     w_exp, "mlp.experts"))
            if plan.dp > 1:
                self.coll("reduce_scatter", "dp", g, s.H * 2, "mlp.experts.out")
                g = Tok(g.stream, g.exp, g.mul // plan.dp)
            if routed_in.exp < 0:
                self.coll("reduce_scatter", "tp", g, s.H * 2, "mlp.experts.out")
            elif tp > 1:
                self.coll("all_reduce", "tp", g, s.H * 2, "mlp.experts.out")
            routed_out = routed_in
        if s.S:
            sm = scheme(self.recipe, "mlp", mtp_layer)
            si = s.I * s.S // (1 if lay.shared_experts_replicated else tp)
            w = self.wb(L, "mlp.shared_experts")
            up = _share(B.SHARED_GATE_UP, B.SHARED_DOWN, s)
            self.op(O.linear("mlp.shared_experts.gate_up_proj", a, s.H, 2 * si, sm, w * up,
                             "mlp.shared_experts"))
            self.op(O.vector("mlp.shared_experts.act", "swiglu", a, si, 3, 4, (("T", 2 * si),), (("T", si),)))
            self.op(O.linear("mlp.shared_experts.down_proj", a, si, s.H, sm, w * (1 - up), "mlp.shared_experts"))
            if not lay.shared_experts_replicated and tp > 1:
                # feature reduction on the same (possibly local) token range (seed §3.3.1)
                self.coll("all_reduce", "tp", a, s.H * 2, "mlp.shared_experts.out")
            require_same(routed_out, a, f"layer {L} routed + shared merge")
            self.op(O.vector("mlp.add_shared", "add", a, s.H, 3, 1))
        return routed_out


def layer_kinds(spec: ModelSpec, prof: Any = None) -> list[LayerKind]:
    """Per layer kind; IndexCache (the version row's ``index_cache``) drops the indexer of "shared"
    layers and the score/top-k of every layer that reuses a top-k."""
    ic = getattr(prof, "index_cache", True)
    return [LayerKind(spec.layer_is_moe(i), spec.layer_has_indexer(i, ic), i == 0, spec.layer_computes_topk(i, ic))
            for i in range(spec.Lyr)]


def check_timeable(spec: ModelSpec, engine: Any = None) -> None:
    """The op program has MLA / GQA layers, and the layers of the families ``perf.families`` has a
    program for (DeepSeek-V4's compressed attention: ``perf.compressed``); any other family is refused in
    one line instead of timed as a simpler model. With ``engine``: also what that engine does not time
    (``Engine.untimed``)."""
    if spec.layer_kinds:
        from .families import program_of
        if program_of(spec.family) is None:
            raise AuditInputError(spec.name, f"the {spec.family} family has no op program (perf.families)")
    if spec.drafter != "mtp" and _drafter_step(spec) is None:
        # a drafter that is not the MTP step the op program prices is refused rather than timed as MTP
        raise AuditInputError(spec.name, f"the {spec.drafter} drafter has no op program for the {spec.family} "
                                         "family (perf.families): perf, sweep, plan and bench do not time its step")
    if engine is not None:
        reason = as_engine(engine).untimed(spec)
        if reason:
            raise AuditInputError("--engine", reason)


def _drafter_step(spec: ModelSpec) -> Any:
    """The family's program of a drafter other than MTP (``FamilyProgram.drafters``), or None."""
    if not spec.layer_kinds:
        return None
    from .families import program_of
    fam = program_of(spec.family)
    return fam.drafters.get(spec.drafter) if fam is not None else None


def kernel_path_of(engine: Any, cache: Any, device: Any) -> Any:
    """The engine's kernel path of ``cache`` (a ``--kv-cache-dtype`` value) on ``device``'s generation
    (``Engine.kernel_path_on``); a path object passes through. What ``build_program`` takes as ``cache``."""
    if not isinstance(cache, str):
        return cache
    eng = as_engine(engine)
    return eng.kernel_path_on(cache, eng.soc(device))


def build_program(dep: DeploymentContext, phase: str, graph: str = "expanded", mtp_enabled: bool = True,
                  cache: Any = "bf16") -> Program:
    """Build the op program of one phase ("prefill" or "decode") in one graph form; ``cache`` is the
    KV/indexer cache variant (``--kv-cache-dtype``), which picks the attention kernels' path."""
    if graph not in GRAPHS:
        raise ValueError(f"graph must be one of {GRAPHS}")
    spec, plan, eng = dep.spec, dep.plan, dep.engine
    check_timeable(spec, eng)
    lay = dep.placement()
    weights, wsrc = weight_bytes(dep)
    path = eng.kernel_path(cache) if isinstance(cache, str) else cache      # the engine's kernel constants
    b = _Builder(dep, phase, lay, weights, path)
    shard = phase == "prefill" and plan.sp and plan.tp > 1
    main = Tok(MAIN)
    b.layers = []
    st = State(b.embed("", main, shard), None)
    kinds = list(spec.layer_kinds[:spec.Lyr]) if spec.layer_kinds else layer_kinds(spec, eng.profile)
    if graph == "expanded":
        for L, kind in enumerate(kinds):
            b.layers = [L]
            st = b.layer(L, kind, st, shard)
    else:
        groups: dict[LayerKind, list[int]] = {}
        for L, kind in enumerate(kinds):
            groups.setdefault(kind, []).append(L)
        for kind, layers in groups.items():
            b.layers = layers
            entry = st
            st = b.layer(layers[0], kind, st, shard)
            if len(layers) > 1 and st != entry:
                raise ContractError(f"repeated region (layers {layers[0]}..{layers[-1]}) is not "
                                    f"layout-transparent: {entry} -> {st}")
    b.layers = []
    if spec.layer_kinds and spec.residual_mult > 1:
        # the head's mHC reduction over the hc copies, plain torch (model.py:837-844)
        b.op(O.vector("hc_head", "hc_head", st.hidden, spec.residual_mult * spec.H, 2, 4))
    b.head("", st, Tok(ROWS), "norm")
    if spec.mtp_layers and mtp_enabled and spec.drafter != "mtp":
        _drafter_step(spec)(b, shard)          # a block drafter's whole step (check_timeable found it)
    elif spec.mtp_layers and mtp_enabled:
        for j in range(spec.mtp_layers):
            L = spec.Lyr + j
            kind = spec.layer_kinds[L] if spec.layer_kinds else LayerKind(spec.layer_is_moe(L),
                                                                           spec.layer_has_indexer(L), True)
            # passes 2..K run the drafter on the pass-1 row count (input_batch_size = num_input_tokens for
            # method "mtp", llm_base_proposer.py:1215-1270@182b75ea): every op on the padded rows except
            # the attention kernels, whose metadata has one query per request (``attention``)
            for mode, stream, sh in ((K.MULT_FIRST_MTP, MAIN, shard), (K.MULT_LATER_MTP, MAIN, False)):
                b.mult = mode
                b.layers = [L]
                p = f"mtp{j}." if spec.mtp_layers > 1 else "mtp."
                tok = b.embed(p, Tok(stream), sh)
                fam_inputs = None
                if spec.layer_kinds:
                    from .families import program_of
                    fam_inputs = program_of(spec.family).mtp_inputs
                if fam_inputs is not None:
                    fam_inputs(b, p, tok, L)
                else:
                    b.op(O.rms_norm(f"{p}enorm", tok, spec.H))
                    b.op(O.rms_norm(f"{p}hnorm", tok, spec.H))
                    b.op(O.linear(f"{p}eh_proj", tok, 2 * spec.H, spec.H, FLOAT, b.wb(L, "eh_proj"), "eh_proj"))
                out = b.layer(L, kind, State(tok, None), sh, mtp_layer=True)
                b.head(p, out, Tok(MTP_LATER), "shared_head.norm")
        b.mult = K.MULT_ALWAYS
    return Program(phase, graph, plan.tp, b.ops, b.colls, lay, wsrc,
                   token_split=token_split(spec, plan, lay, phase), drafter=spec.drafter)
