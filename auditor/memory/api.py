"""Library entry points other parts of audit use: the resident weight bytes per (layer, module) of one
rank, for the performance model, so perf and memory can never disagree about what an op reads.

For a recipe (no checkpoint) the stored view is synthesized from the layout generator with ONE routed
expert per layer and scaled to E: every expert of a layer is identical, so the result equals the
full 177,000-tensor inventory at a few percent of the cost.
"""
from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..engines.materialize import Materializer
from ..engines.profiles import get_profile
from ..engines.resolve import resolve_placement
from ..engines.stored import StoredIndex
from ..inventory.quantdesc import QuantDescription
from ..inventory.table import TensorTable
from ..model.classify import classify
from ..model.expected import expected_description, expected_tensors
from ..model.spec import ModelSpec
from ..parallel import ParallelPlan
from .ledger import build_ledger

# engine module -> perf module keys, with the share of the bytes each key gets
_SPLITS = {
    "self_attn.fused_qkv_a_proj": lambda s: [("self_attn.q_a_proj", s.Qr), ("self_attn.kv_a_proj_with_mqa", s.Lkv + s.Dr)],
    "self_attn.indexer.wk_weights_proj": lambda s: [("self_attn.indexer.wk", s.ID), ("self_attn.indexer.weights_proj", s.IH)],
    "self_attn.qkv_proj": lambda s: [("self_attn.q_proj", s.NH), ("self_attn.k_proj", s.NKV), ("self_attn.v_proj", s.NKV)],
}
_RENAME = {
    "mlp.shared_experts.gate_up_proj": "mlp.shared_experts", "mlp.shared_experts.down_proj": "mlp.shared_experts",
    "mlp.gate_up_proj": "mlp", "mlp.down_proj": "mlp", "model.embed_tokens": "embed_tokens",
}
# not weights an op streams: norms, MLAPO's fused copies (read instead of, not besides, the originals),
# the shared gather pool and process buffers (perf counts the gather itself)
_SKIP_PREFIXES = ("input_layernorm", "post_attention_layernorm", "self_attn.q_a_layernorm", "self_attn.kv_a_layernorm",
                  "self_attn.indexer.k_norm", "self_attn.mlapo", "enorm", "hnorm", "shared_head", "model.norm",
                  "buffers", "o_proj_full_pool", "embed_tokens", "rot")


@functools.lru_cache(maxsize=8)
def synthesized_stored(spec: ModelSpec, recipe: str) -> tuple[StoredIndex, QuantDescription | None]:
    """StoredIndex of a recipe's checkpoint, built from one expert per layer and scaled to E."""
    small = replace(spec, E=1) if spec.moe else spec
    table = TensorTable.from_rows(expected_tensors(small, recipe))
    doc = expected_description(small, recipe)
    desc = QuantDescription.from_dict(doc, Path("<synthesized>")) if doc is not None else None
    stored = StoredIndex(classify(table, spec.Lyr, desc))
    if spec.moe:
        for (_, module), sm in stored.modules.items():
            if module.startswith("mlp.experts.") or module == "mlp.gate":   # both linear in E
                sm.bytes_by_suffix = {k: v * spec.E for k, v in sm.bytes_by_suffix.items()}
                sm.count_by_suffix = {k: v * spec.E for k, v in sm.count_by_suffix.items()}
                if module.startswith("mlp.experts."):
                    sm.n_experts = spec.E
    return stored, desc


@functools.lru_cache(maxsize=64)
def module_bytes(spec: ModelSpec, plan: ParallelPlan, engine: str, recipe: str,
                 rank: int = 0) -> dict[tuple[int, str], int]:
    """Resident bytes per (layer, module) on ``rank`` for a recipe; layer -1 holds embed_tokens and
    lm_head, "self_attn.kv_b_proj" holds W_UK_T + W_UV, "mlp.experts" all local experts of the layer.
    The MTP layer is included whenever the config has one (perf runs it with --mtp K)."""
    if spec.mtp_layers and not plan.mtp:
        plan = replace(plan, mtp=True)
    prof = get_profile(engine)
    layout = resolve_placement(spec, plan, prof)
    stored, desc = synthesized_stored(spec, recipe)
    mat = Materializer(spec, plan, prof, layout, stored, desc).run()
    ledger = build_ledger(mat, spec, plan, layout, ranks=np.array([rank]))   # one column: what perf reads
    col = ledger.mult[:, 0]
    out: dict[tuple[int, str], float] = {}
    for i in np.flatnonzero(col):
        row = mat.rows[i]
        module = row.module
        if module.startswith(_SKIP_PREFIXES) and module != "model.embed_tokens":
            continue
        b = row.bytes * col[i]
        module = _RENAME.get(module, module)
        if module in _SPLITS:
            parts = _SPLITS[module](spec)
            total = sum(w for _, w in parts)
            for name, w in parts:
                out[(row.layer, name)] = out.get((row.layer, name), 0) + b * w / total
        else:
            out[(row.layer, module)] = out.get((row.layer, module), 0) + b
    return {k: int(round(v)) for k, v in out.items()}
