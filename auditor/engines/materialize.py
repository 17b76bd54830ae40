"""Apply the engine rules to every engine module of the model: the resident tensors of one rank
class, with per-holder bytes, a placement that says which ranks hold them, the naive bytes the
plain estimate would count for the same thing, and the cause of any difference (the bridge).

Engine modules come from the model structure (ModelSpec); the checkpoint supplies each module's
scheme, stored dtype and stored bytes (StoredIndex). A module the checkpoint lacks is modelled from
the config and reported as a finding.
"""
from __future__ import annotations

import copy
import functools
import math
import re
from dataclasses import dataclass, field, fields
from typing import Any

from ..inventory.quantdesc import QuantDescription
from ..model import blueprint as B
from ..model.families import declared as declared_family
from ..model.names import spellings
from ..model.classify import OFFSET_SUFFIXES, SCALE_SUFFIXES, Finding
from ..dtypes import DTYPE_BYTES
from ..model.spec import ModelSpec
from ..parallel import ParallelPlan, stage_layers
from .bridge import C_BUFFERS, C_DTYPE, C_KVB, C_LSHARD, C_MTPSHARE, C_OREP, C_PAD, C_QB, C_SCALES, C_SHARED
from .stored import StoredIndex, StoredModule

@dataclass
class Resident:
    """One resident tensor (or a naive-only counterpart) for the ranks its placement names."""
    layer: int                  # -1 outside decoder layers
    block: str
    module: str
    tensor: str
    category: str
    dtype: str
    shape: tuple[int, ...]
    bytes: int                  # per holder (per expert for placement "expert")
    naive: int                  # what the naive estimate counts for this row, per holder
    placement: str              # stage | expert | owner | first | last | all
    owner: int = -1
    cause: str | None = None
    source: str = "stored"
    note: str = ""
    nz: str = "never"           # the rule's FRACTAL_NZ switch (rules.Rule.nz): which NZ modes pad it


@dataclass
class Materialization:
    rows: list[Resident]
    findings: list[Finding] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    stage_of_layer: dict[int, int] = field(default_factory=dict)


_RESIDENT_FIELDS = tuple(f.name for f in fields(Resident))


def astuple_shallow(r: Resident) -> tuple:
    """The field values of ``r`` in declaration order (no deep copy, unlike dataclasses.astuple)."""
    return tuple(getattr(r, f) for f in _RESIDENT_FIELDS)


_EXPR_GLOBALS = {"cdiv": lambda a, b: -(-a // b), "__builtins__": {}}


@functools.lru_cache(maxsize=None)
def _compiled(expr: str):
    return compile(f"({expr},)", "<rule shape>", "eval")


def _shard_expr(expr: str, env: dict) -> tuple[int, ...]:
    """Evaluate a rule's shape expression (our own data, see rules.py) for one module."""
    return tuple(int(v) for v in eval(_compiled(expr), _EXPR_GLOBALS, env))


def nz_nbytes(shape: tuple[int, ...], itemsize: float) -> int:
    """FRACTAL_NZ storage: [..., m, n] -> [..., ceil(n/C0), ceil(m/16)*16, C0], C0 = 32 B / itemsize."""
    if len(shape) < 2:
        return int(math.prod(shape) * itemsize)
    c0 = max(int(32 // itemsize), 1) if itemsize >= 1 else 64
    lead = math.prod(shape[:-2])
    m, n = shape[-2], shape[-1]
    return int(lead * (-(-n // c0) * c0) * (-(-m // 16) * 16) * itemsize)


@dataclass(frozen=True)
class _LayerCopy:
    """What one decoder layer's walk emitted, to emit again for another layer of the same signature: its rows
    without the index, and its findings and missing modules named by the layer (``model.layers.N.``)."""

    rows: list[tuple]
    findings: list[tuple[str, str | None, str]]
    missing: list[str]
    owned: tuple[int, ...]       # rows of placement "owner" (layer sharding: their owner is layer % ranks)
    ranks: int

    @staticmethod
    def of(layer: int, rows: list[Resident], findings: list[Finding], missing: list[str], ranks: int
           ) -> "_LayerCopy | None":
        """The copy, or None when the walk emitted what renaming cannot move to another layer: a row of
        another layer, an owner other than ``layer % ranks`` (the layer-sharding rule), or a finding that
        names the layer other than by its ``model.layers.N.`` prefix."""
        own = f"model.layers.{layer}."
        mention = re.compile(rf"(?<![\w.]){layer}(?![\w])")
        if any(r.layer != layer or (r.placement == "owner") != (r.owner >= 0) or
               (r.placement == "owner" and r.owner != layer % ranks) for r in rows):
            return None
        out = []
        for f in findings:
            where = f.tensor or ""
            if not where.startswith(own) or mention.search(where[len(own):]) or mention.search(f.message):
                return None
            out.append((f.severity, where[len(own):], f.message))
        if any(not m.startswith(own) for m in missing):
            return None
        owned = tuple(i for i, r in enumerate(rows) if r.placement == "owner")
        return _LayerCopy([astuple_shallow(r)[1:] for r in rows], out, [m[len(own):] for m in missing], owned,
                          ranks)

    def emit_as(self, m: "Materializer", layer: int) -> None:
        own = f"model.layers.{layer}."
        new = [Resident(layer, *f) for f in self.rows]
        for i in self.owned:
            new[i].owner = layer % self.ranks
        m.rows.extend(new)
        m.findings.extend([Finding(sev, own + rest, msg) for sev, rest, msg in self.findings])
        m._missing.extend([own + name for name in self.missing])


class Materializer:
    """Walks the model's modules and emits every resident tensor of a rank through the engine's rules.

    The walk (attention, MLP, experts, MTP, globals) is the engine-independent part; an engine
    subclass supplies ``R`` (its rules module: LINEAR, NORM, KV_B, ROUTER, MOE, EMBEDDING, ...) and
    overrides the hooks below for what only it creates (fused copies, pools, buffers)."""

    #: the engine's rule tables (a module or namespace); set by the engine's subclass
    R: Any = None
    #: what a scheme without a rule means for this engine (a warning: modelled as stored; or an error:
    #: the engine cannot load it) and the words that say so
    UNRULED_SEVERITY: str = "warning"
    UNRULED_NOTE: str = "modelled as stored FLOAT"
    #: scheme-name prefix -> (severity, finding) the engine says once when a checkpoint uses that scheme
    SCHEME_NOTES: dict[str, tuple[str, str]] = {}

    def __init__(self, spec: ModelSpec, plan: ParallelPlan, prof: Any, layout: Any,
                 stored: StoredIndex, desc: QuantDescription | None, row_cache: dict | None = None):
        self.spec, self.plan, self.prof, self.layout, self.stored = spec, plan, prof, layout, stored
        self.rows: list[Resident] = []
        self.findings: list[Finding] = []
        self.assumptions: list[str] = []
        self.desc = desc
        desc_globals = self.desc_globals = desc.globals if desc is not None else {}
        self.norm_bias = desc is not None and desc.any_key_contains("norm.bias")
        self.c8 = bool(desc_globals.get("indexer_quant_type"))
        self.rot_used = bool(desc_globals.get("is_rot_used"))
        self.has_desc = desc is not None
        self._missing: list[str] = []                # every lookup that missed, in order (``_LayerCopy``)
        self._o_pool_schemes: set[str] = set()
        self._fp8_noted = False
        self._switch_pools: dict[tuple[str, str], tuple[int, ...]] = {}
        # rows per module signature; a caller may share one across passes whose engine key agrees
        self._emitted: dict[tuple, tuple] = row_cache if row_cache is not None else {}

    # ---------------------------------------------------------------- helpers
    def dtype(self, tok: str, stored: str) -> str:
        if tok == "pd":
            return self.spec.pd
        if tok == "deq":
            return "F32" if self.spec.pd == "BF16" else "I64"
        if tok == "gate":
            return "F32" if self.gate_in_fp32() else self.spec.pd
        if tok == "stored":
            return stored or self.spec.pd
        return tok

    def nbytes(self, shape: tuple[int, ...], dtype: str, nz: str) -> int:
        item = DTYPE_BYTES[dtype]
        use_nz = (nz == "always" or (nz == "quant" and self.plan.nz_mode >= 1)
                  or (nz == "bf16" and self.plan.nz_mode == 2))
        if use_nz and dtype not in ("F32",):
            return nz_nbytes(shape, item)
        return int(math.prod(shape) * item)

    def lookup(self, layer: int, module: str) -> StoredModule | None:
        sm = self.stored.get(layer, module)
        if sm is None:
            self._missing.append(f"{'model.layers.%d.' % layer if layer >= 0 else ''}{module}")
        return sm

    def emit(self, rule_set, *, layer: int, block: str, module: str, env: dict, stored: list[StoredModule | None],
             placement: str, naive_shard: int | None, module_cause: str | None, conditions: dict,
             owner: int = -1, skip: tuple[str, ...] = (), only: tuple[str, ...] = ()) -> None:
        """Emit the resident rows of one engine module.

        The naive estimate counts each stored float / low-bit tensor of the module at its stored dtype
        divided by ``naive_shard`` (None: the caller accounts for it); scales and offsets count 0.
        Naive bytes of stored tensors no resident rule takes become a "(not resident)" row.
        """
        # Every layer of a model repeats the same modules: the rows depend on the layer only
        # through ``layer`` itself, so they are computed once per signature and copied.
        key = (id(rule_set), block, module, tuple(env.items()), placement, naive_shard, module_cause,
               tuple(conditions.items()), owner, skip, only,
               tuple((s.weight_dtype, tuple(s.bytes_by_suffix.items())) if s is not None else None
                     for s in stored))
        hit = self._emitted.get(key)
        if hit is not None:
            self.rows.extend([Resident(layer, *fields) for fields in hit[1]])
            return
        start = len(self.rows)
        self._emit(rule_set, layer=layer, block=block, module=module, env=env, stored=stored, placement=placement,
                   naive_shard=naive_shard, module_cause=module_cause, conditions=conditions, owner=owner,
                   skip=skip, only=only)
        # keep rule_set alive with its rows, so its id() cannot be reused by another tuple
        self._emitted[key] = (rule_set, [astuple_shallow(r)[1:] for r in self.rows[start:]])

    def _emit(self, rule_set, *, layer: int, block: str, module: str, env: dict, stored: list[StoredModule | None],
              placement: str, naive_shard: int | None, module_cause: str | None, conditions: dict,
              owner: int, skip: tuple[str, ...], only: tuple[str, ...]) -> None:
        stored_dtype = next((s.weight_dtype for s in stored if s is not None and s.weight_dtype), "")
        naive_left: dict[str, int] = {}
        if naive_shard:
            for s in stored:
                if s is None:
                    continue
                for suf, b in s.bytes_by_suffix.items():
                    if suf not in SCALE_SUFFIXES and suf not in OFFSET_SUFFIXES:
                        naive_left[suf] = naive_left.get(suf, 0) + b // naive_shard
        for rule in rule_set:
            if rule.when and not conditions.get(rule.when, False):
                continue
            if rule.tensor in skip or (only and rule.tensor not in only):
                continue
            shape = _shard_expr(rule.shape, env)
            dt = self.dtype(rule.dtype, stored_dtype)
            nb = self.nbytes(shape, dt, rule.nz)
            naive = naive_left.pop(rule.from_suffix, 0) if rule.source == "stored" else 0
            if rule.source in ("allocated", "created"):
                cause = rule.cause
                # a parameter the checkpoint does carry is just a stored scale/offset
                if rule.source == "allocated" and any(s is not None and rule.from_suffix in s.bytes_by_suffix
                                                      for s in stored):
                    cause = C_SCALES
            elif rule.category in ("scale", "offset"):
                cause = C_SCALES
            elif module_cause and nb != naive:
                cause = module_cause
            elif nb != naive:
                cause = C_DTYPE if dt != stored_dtype and stored_dtype else C_PAD
            else:
                cause = None
            self.rows.append(Resident(layer, block, module, rule.tensor, rule.category, dt, shape, nb, naive,
                                      placement, owner, cause, rule.source, rule.note, rule.nz))
        for suf, naive in naive_left.items():
            if naive:
                self.rows.append(Resident(layer, block, module, f"{suf} (not resident)", "float", stored_dtype, (),
                                          0, naive, placement, owner, module_cause or C_DTYPE, "stored",
                                          "counted by the naive estimate, not held by the engine"))

    def naive_of(self, sms: list[StoredModule | None], shard: int) -> int:
        return sum(s.weight_bytes for s in sms if s) // shard

    def scheme_of(self, sms: list[StoredModule | None], name: str, layer: int) -> str:
        schemes = [s.scheme for s in sms if s is not None]
        if not schemes:
            return "FLOAT"
        non_float = [x for x in schemes if x != "FLOAT"]
        if non_float and len(non_float) != len(schemes):
            self.findings.append(Finding("error", f"model.layers.{layer}.{name}",
                                         "fused module mixes FLOAT and quantized shards (engine raises)"))
        if len(set(non_float)) > 1:
            self.findings.append(Finding("error", f"model.layers.{layer}.{name}",
                                         f"fused shards disagree on scheme: {sorted(set(non_float))}"))
        return non_float[0] if non_float else "FLOAT"

    # ---------------------------------------------------------------- linears
    def linear(self, layer: int, block: str, name: str, members: list[str], Nf: int, Kf: int, kind: str,
               replicated: bool, module_cause: str | None = None, force_float: bool = False,
               layer_shard_owner: int = -1) -> str:
        """kind: column | row | replicated (default-TP role, used for the naive estimate)."""
        sms = [self.lookup(layer, m) for m in members]
        scheme = "FLOAT" if force_float else self.scheme_of(sms, name, layer)
        rules = self.R.LINEAR.get(scheme)
        note = next((n for prefix, n in self.SCHEME_NOTES.items() if scheme.startswith(prefix)), None)
        if note and not self._fp8_noted:
            self._fp8_noted = True
            self.findings.append(Finding(note[0], None, note[1]))
        if rules is None:
            self.findings.append(Finding(self.UNRULED_SEVERITY, f"model.layers.{layer}.{name}",
                                         f"scheme {scheme} has no engine rule; {self.UNRULED_NOTE}"))
            rules = self.R.LINEAR["FLOAT"]
        tp = self.plan.tp
        naive_shard = 1 if kind == "replicated" else tp
        shard = 1 if replicated else naive_shard
        N = Nf // shard if kind == "column" else Nf
        K = Kf // shard if kind == "row" else Kf
        env = {"N": N, "K": K, "Nf": Nf, "Kf": Kf}
        if layer_shard_owner >= 0:
            # §3.4: only .weight is distributed by layer; scales, offsets, aclnn_* stay on every rank
            self.emit(rules, layer=layer, block=block, module=name, env=env, stored=sms, placement="owner",
                      naive_shard=None, module_cause=C_LSHARD, conditions={}, owner=layer_shard_owner,
                      only=("weight",))
            self.emit(rules, layer=layer, block=block, module=name, env=env, stored=sms, placement="stage",
                      naive_shard=naive_shard, module_cause=C_LSHARD, conditions={}, skip=("weight",))
        else:
            self.emit(rules, layer=layer, block=block, module=name, env=env, stored=sms, placement="stage",
                      naive_shard=naive_shard, module_cause=module_cause, conditions={})
        return scheme

    def module(self, layer: int, block: str, mod: B.Linear, replicated: bool, *, Nf: int | None = None,
               **kw) -> str:
        """Emit a blueprint linear: members, shapes and default TP role from ``model.blueprint``
        (``Nf`` overrides the output width where the engine pads it, e.g. replicated KV heads)."""
        s = self.spec
        return self.linear(layer, block, mod.name, mod.members, mod.out(s) if Nf is None else Nf, mod.inp(s),
                           mod.role, replicated, **kw)

    def norm(self, layer: int, block: str, name: str, dim: int, placement: str = "stage") -> None:
        sms = [self.lookup(layer, name)]
        self.emit(self.R.NORM, layer=layer, block=block, module=name, env={"dim": dim}, stored=sms,
                  placement=placement, naive_shard=1, module_cause=None,
                  conditions={"norm_bias": self.norm_bias})

    # ---------------------------------------------------------------- blocks
    def attention(self, layer: int, mtp: bool) -> None:
        s, L = self.spec, self.layout
        blk = "mtp" if mtp else "attention"
        if not s.mla:
            hd = s.head_dim
            kv_local = max(1, s.NKV // self.plan.tp) * self.plan.tp
            Nf = s.NH * hd + 2 * min(s.NKV, kv_local) * hd
            self.module(layer, blk, B.GQA_QKV, False, Nf=Nf)
            self.module(layer, blk, B.GQA_O, False)
            return
        if s.Qr:
            qkv = self.module(layer, blk, B.QKV_A, True)
            self.norm(layer, blk, "self_attn.q_a_layernorm", s.Qr)
            sharded_qb = "q_b_proj" in L.layer_sharding and not mtp
            self.module(layer, blk, B.Q_B, L.qb_kvb_replicated, module_cause=C_QB if L.qb_kvb_replicated else None,
                        layer_shard_owner=layer % self.plan.ranks_per_stage if sharded_qb else -1)
        else:
            qkv = "FLOAT"
            self.module(layer, blk, B.Q, L.qb_kvb_replicated, module_cause=C_QB if L.qb_kvb_replicated else None)
            self.module(layer, blk, B.KV_A, True)
        self.norm(layer, blk, "self_attn.kv_a_layernorm", s.Lkv)
        self.kv_b(layer, blk)
        self.o_proj(layer, blk, mtp)
        if self._mlapo_applies(qkv, layer):
            env = {"Lkv": s.Lkv, "Dr": s.Dr, "Qr": s.Qr, "H": s.H, "Hl": L.heads_local, "Dq": s.Dq}
            self.emit(self.R.MLAPO, layer=layer, block=blk, module="self_attn.mlapo", env=env, stored=[],
                      placement="stage", naive_shard=None, module_cause=None, conditions={})
            self.mlapo_drops(layer)
        # IndexCache per version row: a "shared" layer holds no Indexer from v0.23.0rc1 on
        if s.layer_has_indexer(layer, self.index_cache()):
            self.indexer(layer, "mtp" if mtp else "indexer")

    def kv_b(self, layer: int, blk: str) -> None:
        s, L = self.spec, self.layout
        sms = [self.lookup(layer, "self_attn.kv_b_proj")]
        sm = sms[0]
        if sm is not None and sm.scheme not in ("FLOAT", "") and s.dsa:
            self.findings.append(Finding("error", f"model.layers.{layer}.self_attn.kv_b_proj.weight",
                                         f"kv_b_proj is {sm.scheme}; the SFA backend asserts an unquantized "
                                         "kv_b_proj (engine refuses to start)"))
        env = {"Hl": L.heads_local, "Dn": s.Dn, "Dv": s.Dv, "Lkv": s.Lkv}
        self.emit(self.R.KV_B, layer=layer, block=blk, module="self_attn.kv_b_proj", env=env, stored=sms,
                  placement="stage", naive_shard=None, module_cause=None, conditions={})
        naive = self.naive_of(sms, self.plan.tp)
        if naive:
            self.rows.append(Resident(layer, blk, "self_attn.kv_b_proj", "weight (disposed)", "float",
                                      sm.weight_dtype if sm else s.pd, (0,), 0, naive, "stage", -1, C_KVB,
                                      "stored", "dispose_layer leaves 0-element tensors"))

    def indexer(self, layer: int, blk: str) -> None:
        s = self.spec
        self.module(layer, blk, B.IDX_WQ_B, True)
        for m in ("self_attn.indexer.wk", "self_attn.indexer.weights_proj"):
            sm = self.stored.get(layer, m)
            if sm is not None and sm.scheme not in ("FLOAT", ""):
                self.findings.append(Finding("warning", f"model.layers.{layer}.{m}.weight",
                                             f"stored as {sm.scheme}, but the engine builds this projection with "
                                             "quant_config=None (bf16)"))
        if self.indexer_fused_wk():
            self.module(layer, blk, B.IDX_WK_WEIGHTS, True, force_float=True)
        else:
            self.module(layer, blk, B.IDX_WK, True, force_float=True)
            self.module(layer, blk, B.IDX_WEIGHTS, True, force_float=True)
        sms = [self.lookup(layer, "self_attn.indexer.k_norm")]
        self.emit(self.R.LAYERNORM_FP32, layer=layer, block=blk, module="self_attn.indexer.k_norm", env={"dim": s.ID},
                  stored=sms, placement="stage", naive_shard=1, module_cause=None,
                  conditions={})
        self.indexer_extras(layer, blk)

    def mlp(self, layer: int, mtp: bool) -> None:
        s, L = self.spec, self.layout
        if not s.layer_is_moe(layer):
            blk = "mtp" if mtp else "dense_mlp"
            self.module(layer, blk, B.MLP_GATE_UP, False)
            self.module(layer, blk, B.MLP_DOWN, False)
            return
        # router
        sms = [self.lookup(layer, "mlp.gate")]
        self.emit(self.R.ROUTER, layer=layer, block="mtp" if mtp else "router", module="mlp.gate",
                  env={"E": s.E, "H": s.H}, stored=sms, placement="stage", naive_shard=1,
                  module_cause=None, conditions={"router_bias": s.router_bias})
        self.experts(layer, "mtp" if mtp else "routed_experts")
        if s.S:
            blk = "mtp" if mtp else "shared_experts"
            rep = L.shared_experts_replicated
            cause = C_SHARED if rep else None
            self.module(layer, blk, B.SHARED_GATE_UP, rep, module_cause=cause)
            self.module(layer, blk, B.SHARED_DOWN, rep, module_cause=cause)

    def experts(self, layer: int, blk: str) -> None:
        s, L, plan = self.spec, self.layout, self.plan
        sms = [self.lookup(layer, f"mlp.experts.{p}") for p in ("gate_proj", "up_proj", "down_proj")]
        scheme = self.scheme_of(sms, "mlp.experts", layer)
        rules = self.R.MOE.get(scheme)
        if rules is None:
            self.findings.append(Finding(self.UNRULED_SEVERITY, f"model.layers.{layer}.mlp.experts",
                                         f"MoE scheme {scheme} has no engine rule; {self.UNRULED_NOTE}"))
            rules = self.R.MOE["FLOAT"]
        n_stored = max((sm.n_experts for sm in sms if sm), default=0)
        if n_stored and n_stored != s.E:
            self.findings.append(Finding("error", f"model.layers.{layer}.mlp.experts",
                                         f"checkpoint holds {n_stored} experts, config says {s.E}"))
        if plan.ep_on:
            env = {"El": 1, "Ip": L.I_p, "H": s.H}
            placement, div = "expert", max(n_stored, 1)     # bytes per expert; the ledger multiplies
        else:
            env = {"El": L.experts_local, "Ip": L.I_p, "H": s.H}
            placement, div = "stage", L.moe_tp
        start = len(self.rows)
        self.emit(rules, layer=layer, block=blk, module="mlp.experts", env=env, stored=sms, placement=placement,
                  naive_shard=None, module_cause=None, conditions={"fused_mc2": plan.fused_mc2})
        # naive: the stored gate+up weights against w13, down against w2
        naive = {"w13_weight": sum(sm.weight_bytes for sm in sms[:2] if sm) // div,
                 "w2_weight": (sms[2].weight_bytes if sms[2] else 0) // div}
        for r in self.rows[start:]:
            if r.tensor in naive:
                r.naive = naive[r.tensor]
                r.cause = (C_DTYPE if r.dtype != sms[0].weight_dtype else C_PAD) if (sms[0] and r.bytes != r.naive) \
                    else None

    def mtp_extras(self, layer: int) -> None:
        s = self.spec
        for n in ("enorm", "hnorm", "shared_head.norm"):
            self.norm(layer, "mtp", n, s.H)
        self.module(layer, "mtp", B.EH_PROJ, True, force_float=True)
        for m, group in (("shared_head.head", "lmhead"), ("embed_tokens", "embedding")):
            self.vocab(layer, B.ModuleDecl("vocab", m, (s.V_padded, s.H), "mtp", group=group))
        if self.rot_used:
            self.rows.append(Resident(layer, "mtp", "rot", "weight", "float", s.pd, (s.H, s.H),
                                      s.H * s.H * DTYPE_BYTES[s.pd], 0, "stage", -1, C_BUFFERS, "created",
                                      "QuaRot rotation (is_rot_used)"))

    # ---------------------------------------------------------------- globals
    def globals_(self) -> None:
        s, plan = self.spec, self.plan
        from ..finegrained import module_tp
        # finegrained_tp_config shards each vocabulary table over its own group of DP ranks instead of TP
        # (AscendVocabParallelEmbedding, ops/vocab_parallel_embedding.py:64-73@182b75ea; auditor.finegrained)
        for module, block, placement, group in (("model.embed_tokens", "embedding", "first", "embedding"),
                                                ("lm_head", "lm_head", "last", "lmhead")):
            sms = [self.lookup(-1, module)]
            if module == "lm_head" and s.tie_embeddings and sms[0] is None:
                continue
            g = module_tp(plan, group)
            self.emit(self.R.EMBEDDING, layer=-1, block=block, module=module, env={"Vp": s.V_padded, "T": g, "H": s.H},
                      stored=sms, placement=placement, naive_shard=g, module_cause=None, conditions={})
            if self.has_desc and sms[0] is not None and not any(n in self.desc for n in spellings(f"{module}.weight")):
                self.findings.append(Finding("error", f"{module}.weight",
                                             "missing from quant_model_description.json: the engine raises KeyError"))
        self.norm(-1, "norm", "model.norm", s.H, placement="last")
        self.buffers()

    # ---------------------------------------------------------------- engine hooks (defaults)
    def gate_in_fp32(self) -> bool:
        """The router gate's weight is held in fp32 (rule dtype ``gate``); default: the model dtype."""
        return False

    def index_cache(self) -> bool:
        """A layer whose top-k is shared drops its indexer (IndexCache); default: yes."""
        return True

    def indexer_fused_wk(self) -> bool:
        """The indexer's wk and weights_proj are one fused linear; default: two."""
        return False

    def _mlapo_applies(self, qkv_scheme: str, layer: int) -> bool:
        """Whether the engine keeps fused MLA-preprocess copies of this layer (none by default)."""
        return False

    def o_proj(self, layer: int, blk: str, mtp: bool) -> None:
        """o_proj: a row-parallel linear, replicated where the placement says so."""
        L = self.layout
        self.module(layer, blk, B.O_MLA, L.o_proj_replicated, module_cause=C_OREP if L.o_proj_replicated else None)

    def mlapo_drops(self, layer: int) -> None:
        """Originals the engine releases once its MLAPO copies exist (none by default)."""

    def indexer_extras(self, layer: int, blk: str) -> None:
        """Engine-created tensors of an indexer besides its projections (none by default)."""

    def buffers(self) -> None:
        """Model-wide buffers the engine creates (none by default)."""

    def layer_sharding_windows(self) -> None:
        """Prefetch windows of layer-sharded series (none by default)."""

    # ---------------------------------------------------------------- declared walk (model families)
    #: the bridge cause of a TP-split module the placement replicates, by the placement decision
    _REPLICATED_CAUSE = {"qb_kvb_replicated": C_QB, "shared_experts_replicated": C_SHARED}

    def walk_declared(self, fam: Any, layers: list[int]) -> None:
        """Emit every module a family declares (``model.families``: ``layer_modules``, ``global_modules``)
        through the engine's rules; the engine's hooks add what only it creates."""
        s = self.spec
        def walk(layer: int) -> None:
            for d in fam.layer_modules(s, layer):
                self.declared(layer, d)

        memo: dict[tuple, _LayerCopy | None] = {}
        for layer in layers:
            self._walk_once(layer, memo, walk)
        for d in fam.global_modules(s):
            self.declared(-1, d)
        self.globals_()

    def declared(self, layer: int, d: B.ModuleDecl) -> None:
        if d.kind == "linear":
            split = d.role != "replicated"
            rep = not split or (bool(d.replicated_by) and bool(getattr(self.layout, d.replicated_by)))
            cause = self._REPLICATED_CAUSE.get(d.replicated_by) if (split and rep) else None
            scheme = self.linear(layer, d.block, d.name, list(d.stored), d.shape[0], d.shape[1], d.role, rep,
                                 module_cause=cause, force_float=d.float_only)
            if d.float_only:
                sm = self.stored.get(layer, d.name)
                if sm is not None and sm.scheme not in ("FLOAT", ""):
                    self.findings.append(Finding("warning", f"model.layers.{layer}.{d.name}.weight",
                                                 f"stored as {sm.scheme}, but the engine builds this projection "
                                                 "unquantized (quant_config=None)"))
            if d.switch:
                self.tp_switch(layer, d, scheme)
        elif d.kind == "norm":
            self.norm(layer, d.block, d.name, d.shape[0], placement="stage" if layer >= 0 else "all")
        elif d.kind == "param":
            self.param(layer, d)
        elif d.kind == "router":
            self.router(layer, d)
        elif d.kind == "experts":
            self.experts(layer, d.block)
        elif d.kind == "vocab":
            self.vocab(layer, d)
        else:
            raise ValueError(f"module kind {d.kind!r}")

    def param(self, layer: int, d: B.ModuleDecl) -> None:
        """A parameter that is no linear (mixing weights, sinks, position embeddings), held as ``d.dtype``;
        ``role`` ``heads`` splits it over the TP heads (whole under DSA-CP, which keeps every head)."""
        sm = self.lookup(layer, d.name)
        stored = sm.bytes_by_suffix.get(d.suffix, 0) if sm is not None else 0
        shape = d.shape
        tp = self.plan.tp
        heads = d.role == "heads"
        if heads and not self.layout.dsa_cp:
            shape = (shape[0] // tp, *shape[1:])
        dt = self.dtype(d.dtype, "")
        nb = int(math.prod(shape) * DTYPE_BYTES[dt])
        naive = stored // tp if heads else stored
        cause = None if nb == naive else (C_QB if heads else C_DTYPE)
        self.rows.append(Resident(layer, d.block, d.name or "layer", d.suffix, "float", dt, shape, nb, naive,
                                  "stage" if layer >= 0 else "all", -1, cause, "stored", ""))

    def router_rules(self) -> Any:
        """The gate's rule table (the engine's ``ROUTER`` unless its model code builds the gate otherwise)."""
        return self.R.ROUTER

    def router(self, layer: int, d: B.ModuleDecl) -> None:
        """The gate [E, H] and its score bias, or its token-id -> experts table (hash routing)."""
        s = self.spec
        sms = [self.lookup(layer, d.name)]
        self.emit(self.router_rules(), layer=layer, block=d.block, module=d.name, env={"E": s.E, "H": s.H}, stored=sms,
                  placement="stage", naive_shard=1, module_cause=None,
                  conditions={"router_bias": s.router_bias and not d.hash})
        if d.hash:
            self.emit(self.R.HASH_TABLE, layer=layer, block=d.block, module=d.name,
                      env={"V": s.V, "K": s.topk_experts}, stored=sms, placement="stage", naive_shard=None,
                      module_cause=None, conditions={})

    def vocab(self, layer: int, d: B.ModuleDecl) -> None:
        """A layer's own vocabulary table (an MTP layer's embedding / head), or none where the drafter
        shares the target's (``mtp_shares_vocab``)."""
        from ..finegrained import module_tp
        sm = self.stored.get(layer, d.name)
        g = module_tp(self.plan, d.group)
        if self.mtp_shares_vocab():
            naive = sm.weight_bytes // g if sm else 0
            if naive:
                self.rows.append(Resident(layer, d.block, d.name, "weight (shared with target)", "float",
                                          sm.weight_dtype, (0,), 0, naive, "stage", -1, C_MTPSHARE, "stored",
                                          "_maybe_share_embeddings / _maybe_share_lm_head"))
            return
        self.emit(self.R.EMBEDDING, layer=layer, block=d.block, module=d.name,
                  env={"Vp": d.shape[0], "T": g, "H": d.shape[1]}, stored=[self.lookup(layer, d.name)],
                  placement="stage", naive_shard=g, module_cause=None, conditions={})

    def mtp_shares_vocab(self) -> bool:
        """Whether the MTP drafter uses the target's embedding and LM head (vLLM's proposer shares them)."""
        return True

    def tp_switch(self, layer: int, d: B.ModuleDecl, scheme: str) -> None:
        """What the engine adds for a module it may gather whole on prefill steps (none by default)."""

    # ---------------------------------------------------------------- driver
    def run(self) -> Materialization:
        self.walk_layers()
        return self.finish()

    def walk_layers(self) -> "Materializer":
        """The first part of ``run``: every decoder (and MTP) layer's modules, and a declared family's
        global modules; ``finish`` adds the model-wide tensors (embedding, head, final norm, buffers,
        layer-sharding windows). Only ``finish`` reads the plan's ``max_num_batched_tokens`` (the buffers);
        the walk reads it only through the placement decisions (``Engine.materializer_plan_key``), so a
        walk serves every value whose placement key is equal (``memory.materialized``, ``fork``). A declared
        family's walk (``walk_declared``) includes the model-wide tensors: it serves its own plan only."""
        s, plan = self.spec, self.plan
        stages = stage_layers(s.Lyr, plan.pp)
        stage_of = {l: i for i, r in enumerate(stages) for l in r}
        layers = list(range(s.Lyr))
        if plan.mtp and s.mtp_layers:
            for k in range(s.mtp_layers):
                stage_of[s.Lyr + k] = plan.pp - 1
                layers.append(s.Lyr + k)
        elif plan.mtp:
            self.findings.append(Finding("warning", None, "MTP drafter requested but config has no "
                                                          "num_nextn_predict_layers"))
        self._stage_of = stage_of
        fam = self._family = declared_family(s)
        if fam is not None:
            self.walk_declared(fam, layers)
            return self
        memo: dict[tuple, _LayerCopy | None] = {}
        for layer in layers:
            self._walk_once(layer, memo, self._walk_layer)
        return self

    def _walk_layer(self, layer: int) -> None:
        """Every module of one decoder (or MTP) layer, in the engine's order."""
        s = self.spec
        mtp = layer >= s.Lyr
        self.norm(layer, "mtp" if mtp else "norm", "input_layernorm", s.H)
        self.norm(layer, "mtp" if mtp else "norm", "post_attention_layernorm", s.H)
        self.attention(layer, mtp)
        self.mlp(layer, mtp)
        if mtp:
            self.mtp_extras(layer)

    def _walk_once(self, layer: int, memo: dict, walk: Any) -> None:
        """``walk(layer)``, unless a layer of the same signature was walked: then its emissions copied.
        ``memo`` holds what the first layer of each signature emitted (None: it emitted what a copy could not
        rename, so every layer of that signature is walked)."""
        sig = self.layer_signature(layer)
        copy_ = memo.get(sig) if sig is not None else None
        if copy_ is not None:
            copy_.emit_as(self, layer)
            return
        start, n_findings, n_missing = len(self.rows), len(self.findings), len(self._missing)
        walk(layer)
        if sig is not None and sig not in memo:
            memo[sig] = _LayerCopy.of(layer, self.rows[start:], self.findings[n_findings:],
                                      self._missing[n_missing:], self.plan.ranks_per_stage)

    def layer_signature(self, layer: int) -> tuple | None:
        """What decoder layer ``layer``'s rows depend on besides its index, or None (walk it): the stored
        modules and whether it is MoE and holds an indexer (its owner under layer sharding is the index's
        ``layer % ranks``, which the copy sets: ``_LayerCopy``). Why: a walk visited all ~78 layers module by
        module (~25 ms), though they come in a handful of kinds, and plan and align walk hundreds of plans.
        An engine whose hooks read the layer otherwise extends this."""
        s = self.spec
        if layer >= s.Lyr:
            return None                             # MTP / DSpark layers: walked
        kind = s.layer_kind(layer)
        if kind is not None:
            # a declared family's main layer: its modules are a function of its kind (``layer_modules``)
            return (kind, self.stored.layer_signature(layer))
        return (s.layer_is_moe(layer), s.layer_has_indexer(layer, self.index_cache()),
                self.stored.layer_signature(layer))

    def finish(self) -> Materialization:
        """The rest of ``run`` after ``walk_layers``."""
        if self._family is not None:          # ``walk_declared`` ran ``globals_`` itself: nothing is left
            return self._done(self._stage_of)
        self.globals_()
        self.layer_sharding_windows()
        return self._done(self._stage_of)

    def fork(self, plan: ParallelPlan, layout: Any) -> "Materializer":
        """A copy of this walked materializer for ``plan`` and its ``layout``, to ``finish`` on its own: every
        list, set and dict it has built is copied, the shared row cache is not. The rows themselves are
        shared: the walk changes a row only while emitting it (``experts``' naive bytes), and ``finish``
        only appends rows, so no fork's tail touches another's."""
        other = copy.copy(self)
        for k, v in vars(self).items():
            if k != "_emitted" and isinstance(v, (list, set, dict)):
                setattr(other, k, copy.copy(v))
        other.plan, other.layout = plan, layout
        return other

    def _done(self, stage_of: dict[int, int]) -> Materialization:
        missing = set(self._missing)
        if missing:
            sample = sorted(missing)[:3]
            self.findings.append(Finding("warning", None, f"{len(missing)} engine modules have no stored "
                                                          f"tensors (e.g. {', '.join(sample)}); modelled from config"))
        return Materialization(self.rows, self.findings, self.assumptions, stage_of)
