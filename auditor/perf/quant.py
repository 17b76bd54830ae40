"""Quantization schemes as the perf model sees them: which unit a linear runs on, how many bytes
its weight and input activation take, and whether it pays a per-token dynamic quantization.

Why separate from the memory ledger: memory needs every scale tensor; the roofline needs only
the compute dtype and the streamed bytes. Recipes follow the msModelSlim GLM-5 recipes
(engine spec §1.4): ``w8a8`` = attention linears W8A8 static, MLP/shared/routed experts
W8A8_DYNAMIC; ``w8a8-dynamic`` = every quantizable linear W8A8_DYNAMIC; ``w4a8`` = routed experts
W4A8_DYNAMIC, other linears W8A8_DYNAMIC; the MTP layer is FLOAT in all three (as msModelSlim's
GLM-5.1 output shows), matching the memory ledger's recipes. kv_b_proj (W_UK_T/W_UV), the indexer
wk/weights_proj, the router, eh_proj, embeddings and lm_head are always float, and SFA inputs
are bf16 whatever the linear scheme (seed §3.6).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..model.recipes import linear_scheme


@dataclass(frozen=True)
class Scheme:
    name: str            # W8A8, W8A8_DYNAMIC, W4A8_DYNAMIC, FLOAT, FP8
    weight_bytes: float  # bytes per weight element
    compute: str         # mma dtype key (auditor_kernels.kinds.DTYPES)
    act_bytes: float     # bytes per input activation element
    dynamic: bool        # per-token activation quantization inside the op

    @property
    def quantized(self) -> bool:
        return self.name != "FLOAT"


FLOAT = Scheme("FLOAT", 2.0, "BF16", 2.0, False)
W8A8 = Scheme("W8A8", 1.0, "I8", 1.0, False)
W8A8_DYN = Scheme("W8A8_DYNAMIC", 1.0, "I8", 1.0, True)
W4A8_DYN = Scheme("W4A8_DYNAMIC", 0.5, "I8", 1.0, True)
FP8 = Scheme("FP8", 1.0, "F8", 1.0, True)

SCHEMES = {s.name: s for s in (FLOAT, W8A8, W8A8_DYN, W4A8_DYN, FP8)}


def scheme(recipe: str, cls: str, mtp_layer: bool = False) -> Scheme:
    """The perf-side Scheme of one linear class under a recipe (``model.recipes`` decides which)."""
    return SCHEMES[linear_scheme(recipe, cls, mtp_layer)]
