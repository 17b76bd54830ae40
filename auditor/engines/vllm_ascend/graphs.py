"""The ACL graphs a launch captures: the largest decode step (tokens per DP rank) replayed from a
graph when the launch names no capture sizes.

vLLM-Ascend injects the default before upstream's ``_set_cudagraph_sizes`` runs
(``vllm_ascend/platform.py:1275-1312``@182b75ea, ``_get_default_max_cudagraph_capture_size``):
``min(max_num_seqs x (1 + K), 512)``, upstream's rule without its trailing ``x 2``; upstream then caps
it by ``max_num_batched_tokens`` (``vllm/config/vllm.py`` ``_set_cudagraph_sizes``). A decode step
above it runs eager (``cudagraph_dispatcher`` returns NONE above the largest size).
"""
from __future__ import annotations

#: the default's ceiling (platform.py:1312)
MAX_DEFAULT_CAPTURE = 512


def default_graph_tokens(max_num_seqs: int, mtp: int, max_num_batched_tokens: int) -> int:
    """The largest captured decode step of a launch without ``cudagraph_capture_sizes``."""
    return int(min(max_num_seqs * (1 + mtp), MAX_DEFAULT_CAPTURE, max_num_batched_tokens))
