"""kernels/kinds.py is the one declaration of op kinds, parameter slots and array columns: the
Python side must fill and read the kernel's arrays through those names only."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from auditor_kernels import kinds as K

from auditor.devices.profiles import load_device
from auditor.perf import ops as O
from auditor.perf.api import Workload
from auditor.perf.device import device_vector, group_table
from auditor.perf.keys import op_keys
from auditor.perf.quant import W8A8, W8A8_DYN
from auditor.perf.tokens import Tok
from auditor.parallel import ParallelPlan

KIND_CODES = ["LINEAR", "BMM", "VEC", "SFA", "IDX_SCORE", "IDX_TOPK", "ROUTER_TOPK", "GMM", "EMBED", "ZERO", "ATTN"]
SLOT_PREFIXES = ["LINEAR_", "BMM_", "VEC_", "SFA_", "IDX_", "TOPK_", "ROUTER_", "GMM_", "EMBED_", "ATTN_"]


def test_kind_codes_are_distinct_and_nonzero():
    codes = [getattr(K, n) for n in KIND_CODES]
    assert len(set(codes)) == len(codes) and 0 not in codes    # a zeroed op_i row is no valid op


@pytest.mark.parametrize("prefix", SLOT_PREFIXES)
def test_parameter_slots_of_a_kind_are_distinct_and_fit(prefix):
    slots = {n: getattr(K, n) for n in dir(K) if n.startswith(prefix) and isinstance(getattr(K, n), int)
             and n not in KIND_CODES}      # IDX_SCORE / IDX_TOPK are kind codes, not IDX_ slots
    assert slots, prefix
    assert len(set(slots.values())) == len(slots)
    assert all(0 <= v < K.N_PARAMS for v in slots.values())


def test_output_columns_cover_the_output_rows():
    outs = [K.OUT_TOKENS, K.OUT_MMA, K.OUT_VEC, K.OUT_BYTES, K.OUT_T_COMPUTE, K.OUT_T_MEMORY, K.OUT_TIME,
            K.OUT_COUNT, K.OUT_BOUND, K.OUT_SORT]
    assert sorted(outs) == list(range(K.N_OUT))
    assert sorted([K.CO_BYTES, K.CO_TIME, K.CO_COUNT]) == list(range(K.N_CO_OUT))
    assert K.OPF_WEIGHT >= K.N_PARAMS and K.OPF_COUNT >= K.N_PARAMS     # never overlaps a parameter


def test_linear_factory_fills_named_slots():
    op = O.linear("q_b_proj", Tok(), 2048, 16384, W8A8_DYN, 33.5e6, "self_attn.q_b_proj", out_bytes=4.0)
    p = op.params
    assert (p[K.LINEAR_K], p[K.LINEAR_N]) == (2048, 16384)
    assert p[K.LINEAR_ACT_BYTES] == 1.0 and p[K.LINEAR_DYNAMIC] == 1.0 and p[K.LINEAR_OUT_BYTES] == 4.0
    assert op.kind == K.LINEAR and op.dtype_code() == K.DT_I8


def test_grouped_matmul_e_local_is_a_field_and_keys_use_it():
    assert "e_local" in {f.name for f in dataclasses.fields(O.Op)}
    op = O.grouped_matmul("mlp.experts", Tok(), 6144, 2048, 8, 256, 16, 32, W8A8, 1e9, "mlp.experts")
    assert op.e_local == 16
    assert (op.params[K.GMM_H], op.params[K.GMM_I], op.params[K.GMM_TOPK], op.params[K.GMM_E]) == (6144, 2048, 8, 256)
    out = np.zeros(K.N_OUT)
    out[K.OUT_TOKENS] = 16
    keys = op_keys(op, out, Workload("decode", 1, 0, 16, 0))
    # 16 tokens x top-8 = 128 token-expert rows; gate_up (rows, H, 2I, E_local), down (rows, I, H, E_local)
    assert keys == [(128.0, 6144, 4096, 16.0), (128.0, 2048, 6144, 16.0)]


def test_device_vector_and_group_table_by_name():
    dev = load_device("a3-752t")
    v = device_vector(dev)
    assert v.shape == (K.N_DEV,)
    assert v[K.DEV_HBM] == dev.hbm_bytes_per_s
    assert v[K.DEV_STATIC_COMM] == dev.static_us["comm"] * 1e-6
    assert v[K.DEV_VECTOR_SORT] == 48 * 1.8e9 * 8           # 48 AIV x 1.8 GHz x r_sort 8 (kernel_paths doc)
    # per-step host of program-less consumers: the serving block at the reference step (profiles.py)
    blk = dev.serving
    assert v[K.DEV_HOST_DECODE] == pytest.approx((blk["step_ms"] + 120 * blk["launch_us"] * 1e-3) * 1e-3)
    assert v[K.DEV_HOST_PREFILL] == pytest.approx(
        (blk["step_ms"] + (2600 * blk["launch_us"] + 4096 * blk["prefill_token_us"]) * 1e-3) * 1e-3)
    from auditor.perf.device import kernel_vector
    assert kernel_vector(dev)[K.DEV_HOST_DECODE] == kernel_vector(dev)[K.DEV_HOST_PREFILL] == 0.0
    assert v[K.DEV_MMA_PEAK + K.DT_I8] == dev.mma_flops.get("I8", 0.0)
    g = group_table(dev, ParallelPlan(tp=8, dp=2, ep=16))
    assert (g[K.GROUP_TP, K.GRP_SIZE], g[K.GROUP_DP, K.GRP_SIZE], g[K.GROUP_EP, K.GRP_SIZE]) == (8, 2, 16)
