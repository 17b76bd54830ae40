"""config.json -> ModelSpec. Structure comes from which keys exist, not from model_type."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import AuditInputError
from ..inputs import read_input_bytes
from ..inputs import CONFIG_CAP, CONFIG_MAX_DEPTH, json_depth
from ..limits import CONFIG_INT_CAPS, MAX_EXPERT_LAYERS, MAX_ROPE_FACTOR
from ..dtypes import TORCH_DTYPE_TO_ST
from .spec import ModelSpec

REQUIRED_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read config.json as a JSON object, with one-line errors for every failure."""
    path = Path(path)
    raw = read_input_bytes(path, "config", CONFIG_CAP)
    depth = json_depth(raw)
    if depth > CONFIG_MAX_DEPTH:       # json would recurse (RecursionError) long before the end
        raise AuditInputError(path, f"config nests {depth} levels deep, more than the {CONFIG_MAX_DEPTH} allowed")
    try:
        cfg = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise AuditInputError(path, "config is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise AuditInputError(path, f"config is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(cfg, dict):
        raise AuditInputError(path, "config must be a JSON object")
    # multimodal wrappers keep the language model under text_config
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], "model_type": cfg.get("model_type", cfg["text_config"].get("model_type"))}
    return cfg


def _shown(val: Any) -> str:
    """A config value as an error message shows it: short, whatever its size."""
    text = repr(val)
    return text if len(text) <= 40 else text[:37] + "..."


def _int(cfg: dict, key: str, where: str, default: int | None = None, positive: bool = False) -> int:
    """An integer config value within its plausibility cap (limits.CONFIG_INT_CAPS), or one line
    naming the key. Integral floats (``4096.0``) are read as integers; nothing else is coerced."""
    val = cfg.get(key.rpartition(".")[2])
    if val is None:
        if default is None:
            raise AuditInputError(where, f"missing required key '{key}'")
        return default
    if isinstance(val, float) and math.isfinite(val) and val.is_integer():
        val = int(val)
    if isinstance(val, bool) or not isinstance(val, int):
        raise AuditInputError(where, f"key '{key}' must be an integer, got {_shown(val)}")
    if positive and val <= 0:
        raise AuditInputError(where, f"key '{key}' must be positive, got {val}")
    if val < 0:
        raise AuditInputError(where, f"key '{key}' must not be negative, got {_shown(val)}")
    cap = CONFIG_INT_CAPS.get(key)
    if cap is not None and not cap.lo <= val <= cap.hi:
        raise AuditInputError(where, f"key '{key}' = {_shown(val)} is outside the plausible range "
                                     f"{cap.lo:,}..{cap.hi:,}")
    return val


def _typed(cfg: dict, key: str, where: str, types: tuple[type, ...], what: str) -> Any:
    """A config value that must have one of ``types`` when present (None = absent)."""
    val = cfg.get(key)
    if val is not None and (not isinstance(val, types) or (bool not in types and isinstance(val, bool))):
        raise AuditInputError(where, f"key '{key}' must be {what}, got {_shown(val)}")
    return val


def _rope(cfg: dict, where: str) -> tuple[float, int]:
    """rope_scaling.factor (a finite number in (0, MAX_ROPE_FACTOR]) and its original context."""
    rope_cfg = _typed(cfg, "rope_scaling", where, (dict,), "an object") or {}
    factor = rope_cfg.get("factor")
    if factor is None:
        factor = 1.0
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise AuditInputError(where, f"key 'rope_scaling.factor' must be a number, got {_shown(factor)}")
    if not (math.isfinite(factor) and 0 < factor <= MAX_ROPE_FACTOR):
        raise AuditInputError(where, f"key 'rope_scaling.factor' = {_shown(factor)} is outside the plausible "
                                     f"range (0, {MAX_ROPE_FACTOR:g}]")
    orig = _int(rope_cfg, "rope_scaling.original_max_position_embeddings", where, default=0)
    return float(factor), orig


def _layer_list(cfg: dict, key: str, where: str) -> list | None:
    vals = _typed(cfg, key, where, (list,), "a list of strings")
    if vals is not None and not all(isinstance(v, str) for v in vals):
        raise AuditInputError(where, f"key '{key}' must be a list of strings")
    return vals


def _topk_shared(cfg: dict, where: str, layers: int) -> tuple[bool, ...]:
    """Per main layer: its top-k is reused from the previous full layer (vllm-ascend
    ``patch/worker/patch_deepseek_v2.py:199-227``@182b75ea): ``index_topk_pattern`` ("S" = shared)
    when given, else ``max(layer - index_skip_topk_offset + 1, 0) % index_topk_freq != 0`` with the
    engine's defaults freq 1 and offset 2."""
    freq = _int(cfg, "index_topk_freq", where, default=1)
    if freq < 1:
        raise AuditInputError(where, f"key 'index_topk_freq' must be at least 1, got {freq}")
    offset = _int(cfg, "index_skip_topk_offset", where, default=2)
    pattern = cfg.get("index_topk_pattern")
    if pattern is not None:
        if isinstance(pattern, str):
            pattern = list(pattern)
        if not isinstance(pattern, list) or not all(isinstance(p, str) for p in pattern):
            raise AuditInputError(where, "key 'index_topk_pattern' must be a string or a list of strings")
        return tuple(i < len(pattern) and pattern[i] == "S" for i in range(layers))
    return tuple(max(i - offset + 1, 0) % freq != 0 for i in range(layers))


#: hf_overrides keys audit reads (vLLM ``--hf-overrides`` JSON); others are accepted and ignored
HF_OVERRIDE_KEYS = ("use_index_cache", "index_topk_freq", "index_skip_topk_offset", "index_topk_pattern",
                    "indexer_types", "max_position_embeddings")


def apply_hf_overrides(cfg: dict[str, Any], overrides: dict[str, Any], where: str = "--hf-overrides") -> dict[str, Any]:
    """config.json with vLLM's ``--hf-overrides`` applied (a shallow update, as vLLM's
    ``hf_overrides`` dict updates the HF config's attributes). Returns a new dict; the types of the
    keys audit reads are checked when the spec is built. Not a dict: AuditInputError."""
    if not isinstance(overrides, dict):
        raise AuditInputError(where, f"must be a JSON object, got {_shown(overrides)}")
    for key, val in overrides.items():
        if not isinstance(key, str):
            raise AuditInputError(where, "keys must be strings")
        if key == "use_index_cache" and not isinstance(val, bool):
            raise AuditInputError(where, f"'use_index_cache' must be true or false, got {_shown(val)}")
    out = dict(cfg)
    out.update(overrides)
    return out


def parse_hf_overrides(text: str | None, where: str = "--hf-overrides") -> dict[str, Any]:
    """The ``--hf-overrides`` option's JSON text -> dict (empty when None)."""
    if text is None or not str(text).strip():
        return {}
    from ..inputs import JSON_MAX_DEPTH, parse_json_text
    val = parse_json_text(str(text), where, "the JSON", max_depth=JSON_MAX_DEPTH, cap=64 << 10)
    if not isinstance(val, dict):
        raise AuditInputError(where, f"must be a JSON object, got {_shown(val)}")
    return val


#: config keys that declare structure the default (MLA / GQA) family does not model, and what each
#: declares. A family module (``model.families``) that claims the config reads its own keys; any other
#: config with one of them set is refused by name instead of being read as the simpler model its other keys
#: describe (a DeepSeek-V4 config read that way is a 1-KV-head attention with head_dim 512: 12.6x
#: its real KV cache).
UNMODELLED_STRUCTURE: dict[str, str] = {
    "compress_ratios": "per-layer compressed attention",
    "hc_mult": "hyper-connections",
    "o_groups": "grouped output projection",
    "o_lora_rank": "grouped output projection",
    "num_hash_layers": "hash-routed MoE",
    "dspark_target_layer_ids": "DSpark drafter",
    "full_attention_interval": "hybrid linear attention",
    "linear_num_value_heads": "linear attention",
    "attention_chunk_size": "chunked local attention",
}
#: values of ``layer_types`` entries that are plain full attention
_FULL_ATTENTION_TYPES = ("full_attention", "attention", "full")


def unmodelled_structure(cfg: dict[str, Any]) -> list[str]:
    """The structure keys of ``cfg`` audit does not model (set to something other than off/empty),
    each with what it declares."""
    out = [f"{k} ({what})" for k, what in UNMODELLED_STRUCTURE.items() if cfg.get(k) not in (None, 0, False, [], "")]
    window = cfg.get("sliding_window")
    if window not in (None, 0, False) and cfg.get("use_sliding_window", True) is not False:
        out.append("sliding_window (sliding-window attention)")
    types = cfg.get("layer_types")
    if isinstance(types, list) and any(str(t) not in _FULL_ATTENTION_TYPES for t in types):
        kinds = sorted({str(t) for t in types} - set(_FULL_ATTENTION_TYPES))
        out.append(f"layer_types ({', '.join(kinds)} layers)")
    return out


def spec_from_config(cfg: dict[str, Any], name: str = "model", where: str = "config.json") -> ModelSpec:
    """Detect MLA, DSA indexer, MoE and MTP structure from config keys and build a ModelSpec."""
    missing = [k for k in REQUIRED_KEYS if cfg.get(k) is None]
    if missing:
        raise AuditInputError(where, f"missing required key{'s' if len(missing) > 1 else ''} "
                                     f"{', '.join(repr(k) for k in missing)}")
    for key in CONFIG_INT_CAPS:          # every known integer key is checked when present, used or not
        if "." not in key:
            _int(cfg, key, where, default=0)
    from .families import family_for_config        # a family with per-layer kinds reads its own keys
    fam = family_for_config(cfg)
    if fam is not None:
        return fam.spec_from_config(cfg, name=name, where=where)
    unmodelled = unmodelled_structure(cfg)
    if unmodelled:
        raise AuditInputError(where, "structure audit does not model: " + ", ".join(unmodelled)
                              + "; refused rather than read as a simpler model")
    H = _int(cfg, "hidden_size", where, positive=True)
    Lyr = _int(cfg, "num_hidden_layers", where, positive=True)
    NH = _int(cfg, "num_attention_heads", where, positive=True)
    V = _int(cfg, "vocab_size", where, positive=True)
    for key in ("model_type", "dtype", "torch_dtype", "topk_method"):
        _typed(cfg, key, where, (str,), "a string")
    for key in ("tie_word_embeddings", "indexer_rope_interleave"):
        _typed(cfg, key, where, (bool,), "true or false")
    dt = str(cfg.get("dtype") or cfg.get("torch_dtype") or "bfloat16")
    pd = TORCH_DTYPE_TO_ST.get(dt, "BF16")
    notes: list[str] = []
    if dt not in TORCH_DTYPE_TO_ST:
        notes.append(f"unknown model dtype {dt!r}; assuming bf16")

    # --- attention: MLA when a kv LoRA rank exists
    mla = cfg.get("kv_lora_rank") not in (None, 0)
    NKV = _int(cfg, "num_key_value_heads", where, default=NH)
    if NKV > NH or NH % NKV:
        raise AuditInputError(where, f"key 'num_key_value_heads' = {NKV} must divide num_attention_heads = {NH}")
    head_dim = _int(cfg, "head_dim", where, default=H // NH) if not mla else 0
    if not mla and head_dim == 0:
        raise AuditInputError(where, f"hidden_size {H} / num_attention_heads {NH} leaves no head_dim; "
                                     "give key 'head_dim'")
    Qr = _int(cfg, "q_lora_rank", where, default=0) if mla else 0
    Lkv = _int(cfg, "kv_lora_rank", where, default=0) if mla else 0
    Dn = _int(cfg, "qk_nope_head_dim", where, positive=True) if mla else 0
    Dr = _int(cfg, "qk_rope_head_dim", where, positive=True) if mla else 0
    Dv = _int(cfg, "v_head_dim", where, positive=True) if mla else 0

    # --- DSA indexer: index_topk, or topk_limit together with index_n_heads
    has_topk = cfg.get("index_topk") is not None or (
        cfg.get("topk_limit") is not None and cfg.get("index_n_heads") is not None)
    dsa = bool(mla and has_topk)
    IH = _int(cfg, "index_n_heads", where, default=0) if dsa else 0
    ID = _int(cfg, "index_head_dim", where, default=0) if dsa else 0
    topk_tokens = (_int(cfg, "index_topk", where, default=0) or _int(cfg, "topk_limit", where, default=0)) if dsa else 0
    if dsa and (IH <= 0 or ID <= 0):
        raise AuditInputError(where, "DSA indexer keys present but 'index_n_heads'/'index_head_dim' missing")
    indexer_types = _layer_list(cfg, "indexer_types", where)
    if indexer_types is not None and len(indexer_types) != Lyr:
        raise AuditInputError(where, f"key 'indexer_types' has {len(indexer_types)} entries, "
                                     f"num_hidden_layers is {Lyr}")
    if dsa and indexer_types is not None:
        kinds = tuple("shared" if t.lower() == "shared" else "full" for t in indexer_types)
    else:
        kinds = tuple(["full"] * Lyr) if dsa else ()
    indexer_layers = tuple(k == "full" for k in kinds) if dsa else tuple([False] * Lyr)
    topk_shared = _topk_shared(cfg, where, Lyr) if dsa else ()

    # --- MLP / MoE
    E = _int(cfg, "n_routed_experts", where, default=_int(cfg, "num_experts", where, default=0))
    moe = E > 0
    Id = _int(cfg, "intermediate_size", where, default=0)
    I = _int(cfg, "moe_intermediate_size", where, default=0) if moe else 0
    S = _int(cfg, "n_shared_experts", where, default=0) if moe else 0
    topk_experts = _int(cfg, "num_experts_per_tok", where, default=0) if moe else 0
    if moe and I <= 0:
        raise AuditInputError(where, "MoE model (n_routed_experts > 0) without 'moe_intermediate_size'")
    if Lyr * E > MAX_EXPERT_LAYERS:
        raise AuditInputError(where, f"num_hidden_layers x n_routed_experts = {Lyr:,} x {E:,} is past the plausible "
                                     f"{MAX_EXPERT_LAYERS:,} expert-layers")
    if topk_experts > E:
        raise AuditInputError(where, f"key 'num_experts_per_tok' = {topk_experts} is more than the "
                                     f"{E} routed experts")
    mlp_types = _layer_list(cfg, "mlp_layer_types", where)
    if moe and isinstance(mlp_types, list) and len(mlp_types) == Lyr:
        moe_layers = tuple(str(t) in ("sparse", "moe") for t in mlp_types)
    elif moe:
        kd = _int(cfg, "first_k_dense_replace", where, default=0)
        freq = _int(cfg, "moe_layer_freq", where, default=1) or 1
        moe_layers = tuple(i >= kd and i % freq == 0 for i in range(Lyr))
    else:
        moe_layers = tuple([False] * Lyr)
    if (not moe or not all(moe_layers)) and Id <= 0:
        raise AuditInputError(where, "dense MLP layers need 'intermediate_size'")

    factor, orig = _rope(cfg, where)

    return ModelSpec(
        name=name,
        model_type=str(cfg.get("model_type", "unknown")),
        H=H, NH=NH, Lyr=Lyr, V=V, pd=pd,
        NKV=NKV, head_dim=head_dim,
        mla=mla, Qr=Qr, Lkv=Lkv, Dn=Dn, Dr=Dr, Dv=Dv,
        dsa=dsa, IH=IH, ID=ID, topk_tokens=topk_tokens, indexer_layers=indexer_layers,
        indexer_kinds=kinds, topk_shared=topk_shared,
        Id=Id, moe=moe, E=E, I=I, S=S, topk_experts=topk_experts, moe_layers=moe_layers,
        router_bias=str(cfg.get("topk_method", "")) == "noaux_tc",
        mtp_layers=_int(cfg, "num_nextn_predict_layers", where, default=0),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position=_int(cfg, "max_position_embeddings", where, default=0),
        rope_scaling_factor=factor, rope_original_max=orig,
        indexer_rope_interleave=bool(cfg.get("indexer_rope_interleave", False)),
        notes=tuple(notes),
    )


def load_spec(config_path: str | Path, name: str | None = None) -> ModelSpec:
    path = Path(config_path)
    cfg = load_config_file(path)
    return spec_from_config(cfg, name=name or path.parent.name or "model", where=str(path))
