"""The one dtype table (bits per element of every safetensors dtype) and torch names -> safetensors
names: the bottom floor, read by the header readers, the model spec, synth and the ledger."""
from __future__ import annotations

# Bits per element of every dtype the installed safetensors library (0.8) accepts, and nothing
# else: the ONE dtype table. The header reader accepts exactly these names (a test checks the set
# against the library), synth and the ledger size tensors with them.
DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
    "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
    "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
DTYPE_BYTES = {k: b // 8 if b % 8 == 0 else b / 8 for k, b in DTYPE_BITS.items()}

TORCH_DTYPE_TO_ST = {
    "bfloat16": "BF16", "float16": "F16", "float32": "F32", "half": "F16", "float": "F32",
}
