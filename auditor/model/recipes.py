"""The one quantization vocabulary: recipe names and the scheme each class of linear gets.

Why one table: the checkpoint generator (``expected.py``), the memory ledger and the perf model
all speak of the same recipes (msModelSlim GLM-5 best practice, engine spec §1.4); keeping the
scheme choice here means ``--recipe w8a8`` means the same thing to every command.

Linear classes: ``attn`` (q_a, kv_a, q_b, o_proj, indexer wq_b, q/k/v), ``mlp`` (dense MLP and
shared experts), ``expert`` (routed experts). kv_b_proj, indexer wk / weights_proj, the router,
eh_proj, embeddings and lm_head are always FLOAT, except that DeepSeek's FP8 release also ships
kv_b_proj and wk in FP8.
"""
from __future__ import annotations

from typing import Any, Iterable

from ..errors import AuditInputError

RECIPES = ("bf16", "w8a8", "w8a8-dynamic", "w4a8", "fp8-block")

#: recipe -> linear class -> scheme name
RECIPE_SCHEMES: dict[str, dict[str, str]] = {
    "bf16": {"attn": "FLOAT", "mlp": "FLOAT", "expert": "FLOAT"},
    "w8a8": {"attn": "W8A8", "mlp": "W8A8_DYNAMIC", "expert": "W8A8_DYNAMIC"},
    "w8a8-dynamic": {"attn": "W8A8_DYNAMIC", "mlp": "W8A8_DYNAMIC", "expert": "W8A8_DYNAMIC"},
    "w4a8": {"attn": "W8A8_DYNAMIC", "mlp": "W8A8_DYNAMIC", "expert": "W4A8_DYNAMIC"},
    "fp8-block": {"attn": "FP8", "mlp": "FP8", "expert": "FP8"},
}

#: recipes written by msModelSlim: its GLM-5.1 recipes exclude the MTP layer (model.layers.{Lyr}.*)
MTP_FLOAT_RECIPES = frozenset({"w8a8", "w8a8-dynamic", "w4a8"})

#: the usual recipe of each built-in preset: the one vLLM-Ascend's tutorials serve (DeepSeek-V3.2:
#: W8A8, docs/source/tutorials/models/DeepSeek-V3.2.md; its fp8-block release cannot start on the SFA
#: backend, which asserts an unquantized kv_b_proj)
DEFAULT_RECIPE = {"glm-5.1": "w8a8", "glm-5": "w8a8", "glm-5.2": "w8a8", "deepseek-v3.2": "w8a8", "dense-32b": "bf16",
                  # the msModelSlim checkpoints vLLM-Ascend's DeepSeek-V4 tutorials serve (model-deepseek-v4.md §2.2)
                  "deepseek-v4-flash": "w8a8", "deepseek-v4-pro": "w4a8",
                  # Eco-Tech/DeepSeek-V4-Flash-0731-w8a8, the A3 DSpark tutorials' checkpoint (§2.2)
                  "deepseek-v4-flash-0731": "w8a8"}


def check_recipe(name: str, option: str = "--recipe") -> str:
    """Normalise a recipe name ('W8A8_dynamic' -> 'w8a8-dynamic') or raise a one-line error."""
    key = str(name).lower().replace("_", "-")
    if key not in RECIPE_SCHEMES:
        raise AuditInputError(option, f"unknown recipe {name!r} (known: {', '.join(RECIPES)})")
    return key


def linear_scheme(recipe: str, cls: str, mtp_layer: bool = False) -> str:
    """Scheme name of one linear class under a recipe; class ``float`` is always FLOAT."""
    if cls == "float":
        return "FLOAT"
    recipe = check_recipe(recipe)
    if mtp_layer and recipe in MTP_FLOAT_RECIPES:
        return "FLOAT"
    return RECIPE_SCHEMES[recipe][cls]


def guess_recipe(description_values: Iterable[str] | None, config: dict[str, Any] | None = None) -> str:
    """The recipe a checkpoint was made with, from its quant description's scheme values or, with
    no description, from config.json's ``quantization_config`` (DeepSeek's FP8 block release)."""
    values = set(description_values or ())
    if "W4A8_DYNAMIC" in values:
        return "w4a8"
    if "W8A8" in values:
        return "w8a8"
    if "W8A8_DYNAMIC" in values:
        return "w8a8-dynamic"
    qc = (config or {}).get("quantization_config")
    if isinstance(qc, dict) and str(qc.get("quant_method", "")).lower() == "fp8":
        return "fp8-block"
    return "bf16"
