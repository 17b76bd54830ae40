"""The linear modules of a decoder layer, declared once: what each holds, its shapes and TP role.

Why: the layer structure was written in several walkers (the engine's materializer, the adapters
that fold resident rows into perf's per-module weight keys, the writer's tensor list) held together
by module-name strings. A ``Linear`` here names the engine module (the merged linear vLLM builds),
the stored linears it is made of with each one's output width, its input width and its default
tensor-parallel role; the materializer emits from it and the memory adapters split fused modules
by the same widths. Engine behaviour (replication under DSA-CP, MLAPO, pools) stays in the engine's
folder; which layers hold which modules stays in ``ModelSpec`` (``layer_has_indexer``,
``layer_is_moe``), so per-layer variation such as GLM-5.2's 21 indexer layers of 78 needs no
change here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .spec import ModelSpec

Width = Callable[[ModelSpec], int]


@dataclass(frozen=True)
class Part:
    """A stored linear (its checkpoint module name under ``model.layers.N.``) and its output width."""

    name: str
    width: Width


@dataclass(frozen=True)
class Linear:
    """An engine linear module built from one or more stored linears (concatenated on the output)."""

    name: str
    parts: tuple[Part, ...]
    inp: Width
    role: str                      # column | row | replicated: the default TP split (the naive estimate's)

    @property
    def members(self) -> list[str]:
        return [p.name for p in self.parts]

    @property
    def fused(self) -> bool:
        return len(self.parts) > 1

    def out(self, spec: ModelSpec) -> int:
        return sum(p.width(spec) for p in self.parts)

    def split(self, spec: ModelSpec) -> list[tuple[str, int]]:
        """(stored member, output width) of each part: how the module's bytes divide among them."""
        return [(p.name, p.width(spec)) for p in self.parts]


def _one(name: str, out: Width, inp: Width, role: str) -> Linear:
    return Linear(name, (Part(name, out),), inp, role)


def _hd(s: ModelSpec) -> int:
    return s.head_dim or s.H // max(s.NH, 1)


def _kv_a(s: ModelSpec) -> int:
    return s.Lkv + s.Dr


def _idx_k(s: ModelSpec) -> int:
    return s.ID


def _idx_w(s: ModelSpec) -> int:
    return s.IH


# --- MLA attention (DeepSeek-V3/V3.2, GLM-5.x)
QKV_A = Linear("self_attn.fused_qkv_a_proj", (Part("self_attn.q_a_proj", lambda s: s.Qr),
                                              Part("self_attn.kv_a_proj_with_mqa", _kv_a)),
               lambda s: s.H, "replicated")
Q_B = _one("self_attn.q_b_proj", lambda s: s.NH * s.Dq, lambda s: s.Qr, "column")
Q = _one("self_attn.q_proj", lambda s: s.NH * s.Dq, lambda s: s.H, "column")            # no q LoRA
KV_A = _one("self_attn.kv_a_proj_with_mqa", _kv_a, lambda s: s.H, "replicated")
O_MLA = _one("self_attn.o_proj", lambda s: s.H, lambda s: s.NH * s.Dv, "row")
# --- DSA lightning indexer
IDX_WQ_B = _one("self_attn.indexer.wq_b", lambda s: s.IH * s.ID, lambda s: s.Qr, "replicated")
IDX_WK_WEIGHTS = Linear("self_attn.indexer.wk_weights_proj",
                        (Part("self_attn.indexer.wk", _idx_k), Part("self_attn.indexer.weights_proj", _idx_w)),
                        lambda s: s.H, "replicated")
IDX_WK = _one("self_attn.indexer.wk", _idx_k, lambda s: s.H, "replicated")
IDX_WEIGHTS = _one("self_attn.indexer.weights_proj", _idx_w, lambda s: s.H, "replicated")
# --- plain (GQA) attention
GQA_QKV = Linear("self_attn.qkv_proj", (Part("self_attn.q_proj", lambda s: s.NH * _hd(s)),
                                         Part("self_attn.k_proj", lambda s: s.NKV * _hd(s)),
                                         Part("self_attn.v_proj", lambda s: s.NKV * _hd(s))),
                 lambda s: s.H, "column")
GQA_O = _one("self_attn.o_proj", lambda s: s.H, lambda s: s.NH * _hd(s), "row")
# --- MLPs
MLP_GATE_UP = Linear("mlp.gate_up_proj", (Part("mlp.gate_proj", lambda s: s.Id), Part("mlp.up_proj", lambda s: s.Id)),
                     lambda s: s.H, "column")
MLP_DOWN = _one("mlp.down_proj", lambda s: s.H, lambda s: s.Id, "row")
SHARED_GATE_UP = Linear("mlp.shared_experts.gate_up_proj",
                        (Part("mlp.shared_experts.gate_proj", lambda s: s.I * s.S),
                         Part("mlp.shared_experts.up_proj", lambda s: s.I * s.S)),
                        lambda s: s.H, "column")
SHARED_DOWN = _one("mlp.shared_experts.down_proj", lambda s: s.H, lambda s: s.I * s.S, "row")
# --- MTP drafter
EH_PROJ = _one("eh_proj", lambda s: s.H, lambda s: 2 * s.H, "replicated")

LINEARS: tuple[Linear, ...] = (QKV_A, Q_B, Q, KV_A, O_MLA, IDX_WQ_B, IDX_WK_WEIGHTS, IDX_WK, IDX_WEIGHTS, GQA_QKV,
                               GQA_O, MLP_GATE_UP, MLP_DOWN, SHARED_GATE_UP, SHARED_DOWN, EH_PROJ)
#: fused engine modules whose parts perf times as separate ops (the MLPs' gate/up run as one op)
SPLIT_FOR_PERF: tuple[Linear, ...] = (QKV_A, IDX_WK_WEIGHTS, GQA_QKV)

# stored linears of the MLA family by name (GQA's q_proj / o_proj share names with MLA's and are
# read from GQA_QKV / GQA_O directly)
_STORED: dict[str, tuple[Width, Width]] = {}
for _mod in LINEARS:
    if _mod in (GQA_QKV, GQA_O):
        continue
    for _p in _mod.parts:
        assert _p.name not in _STORED or _STORED[_p.name][0] is _p.width, f"two shapes for {_p.name}"
        _STORED.setdefault(_p.name, (_p.width, _mod.inp))


def stored_shape(spec: ModelSpec, name: str) -> tuple[int, int]:
    """[out, in] of a stored linear (``self_attn.q_a_proj``, ``mlp.down_proj``, ...) as a checkpoint
    writer saves it: the shape the engine modules above are built from."""
    out, inp = _STORED[name]
    return out(spec), inp(spec)


# ---------------------------------------------------------------- declared modules (families with per-layer kinds)

@dataclass(frozen=True)
class ModuleDecl:
    """One engine module of a layer as a family declares it, for the materializer's declared walk.

    ``kind``: ``linear`` (``shape`` = [out, in] of the engine module, ``members`` the stored linears
    it is built from, ``role`` its TP split: column | row | replicated), ``norm`` (``shape`` = [dim]),
    ``param`` (a parameter that is no linear: stored ``suffix`` of module ``name``, held as ``dtype``;
    ``role`` ``heads`` splits its first dimension over the TP heads), ``router`` (the gate: ``shape``
    [E, H]; ``hash`` = a token-id -> experts table instead of a score bias), ``experts`` (the routed
    experts), ``vocab`` (a vocabulary table: ``group`` embedding | lmhead).

    ``replicated_by``: the placement decision that replicates a TP-split linear (a ``Placement``
    attribute, e.g. ``qb_kvb_replicated`` under DSA-CP, ``shared_experts_replicated``); ``switch``:
    the engine may gather the full weight on prefill steps (DSA-CP's TP weight switch); ``float_only``:
    the engine builds it unquantized whatever the checkpoint says (``quant_config=None``).

    ``recipe_class``: the class of linear a family's recipes give a scheme by (DeepSeek-V4's
    ``RECIPE_SCHEMES``: attn, mlp, lowrank; a ``float_only`` linear is written FLOAT), so the
    checkpoint layout is read from the same declaration.
    """

    kind: str
    name: str
    shape: tuple[int, ...] = ()
    block: str = "attention"
    role: str = "replicated"
    members: tuple[str, ...] = ()
    suffix: str = "weight"
    dtype: str = "stored"
    replicated_by: str = ""
    switch: bool = False
    float_only: bool = False
    hash: bool = False
    group: str = ""
    recipe_class: str = ""

    @property
    def stored(self) -> tuple[str, ...]:
        return self.members or (self.name,)
