"""An engine family built on the generic ``Engine`` base alone (no vLLM-Ascend class, no HCCL, NZ or
DSA-CP): its own placement, tensor rules, KV dtype and block, budget formula, log lines and launch.
memory, perf, plan, bench and align run through it; every expected figure is worked by hand from the
dense-32b preset (H 5120, 64 layers, 64 heads of 128, 8 KV heads, intermediate 25600, vocab 151936, bf16).
"""
from __future__ import annotations

import json
import math
import types
from dataclasses import dataclass

import pytest

from auditor.cli import main
from auditor.engines import registry
from auditor.engines.base import Engine
from auditor.engines.bridge import Rule
from auditor.engines.kv_interface import KVSpec
from auditor.engines.materialize import Materializer
from auditor.engines.placement import KV_ROLE, Placement
from auditor.parallel import stage_layers

GiB, MiB = 2 ** 30, 2 ** 20
H, L, NH, NKV, HD, ID_, V = 5120, 64, 64, 8, 128, 25600, 151936
BLOCK = 32
RUNTIME = 300 * MiB           # the bare engine's non-torch memory
RESERVE = 1 * GiB             # its budget keeps this back from the KV cache
GRAPH = 512 * MiB


@dataclass(frozen=True)
class BareProfile:
    name: str = "bare@1.0"
    label: str = "Bare engine 1.0"
    version: str = "1.0"
    gate_dtype: str = "pd"
    indexer_fused_wk: bool = False
    index_cache: bool = True
    notes: tuple = ()


#: the bare engine's tensor rules: every stored tensor held as stored
RULES = types.SimpleNamespace(
    LINEAR={"FLOAT": (Rule("weight", "pd", "N,K", "float", from_suffix="weight"),)},
    NORM=(Rule("weight", "pd", "dim", "float", from_suffix="weight"),),
    EMBEDDING=(Rule("weight", "pd", "Vp/T,H", "float", from_suffix="weight"),),
    MOE={}, ROUTER=(), KV_B=(), LAYERNORM_FP32=(),
)


class BareMaterializer(Materializer):
    R = RULES


_LINES = types.SimpleNamespace(
    weights_line=lambda b: f"bare: weights {b / GiB:.3f} GiB",
    available_kv_line=lambda b: f"bare: kv {b / GiB:.3f} GiB",
    kv_cache_size_line=lambda t: f"bare: {t:,} kv tokens",
    max_concurrency_line=lambda length, c: f"bare: {c:.2f} x {length:,}",
    no_memory_error=lambda: "bare: no memory for the KV cache",
    shortfall_error=lambda length, need, avail, est: f"bare: {length} does not fit (largest {est})",
)


class BarePath:
    name = "bf16"
    indexer_dtype = "bf16"
    topk_per_key = topk_per_kept = 0.0
    sfa_tile_rows = 1.0

    def indexer_tile(self, heads):
        return 1.0

    def indexer_vec_per_head_total(self, heads):
        return 0.0


class BareEngine(Engine):
    family = "bare"
    profiles = {"bare@1.0": BareProfile()}
    aliases = {}

    def placement(self, spec, plan):
        plan.validate()
        return Placement(dsa_cp=False, heads_local=spec.NH // plan.tp, qb_kvb_replicated=False,
                         o_proj_replicated=False, o_proj_gather_pool=False, shared_experts_replicated=False,
                         moe_tp=plan.tp, experts_local=0, I_p=0, dense_tp=plan.tp, layer_sharding=(),
                         kv_role=KV_ROLE[plan.role])

    def materializer(self, spec, plan, layout, stored, desc, row_cache=None):
        return BareMaterializer(spec, plan, self.profile, layout, stored, desc, row_cache)

    def kv_spec(self, spec, plan, *, variant="bf16", dcp=1, mtp=False, stage=None, arch=""):
        own = stage_layers(spec.Lyr, plan.pp)[plan.pp - 1 if stage is None else stage]
        heads = max(1, spec.NKV // plan.tp)
        return KVSpec(variant, "gqa", BLOCK, 1, "divided", 2 * heads * spec.head_dim * 2, 0, len(own), 0, 0, 2)

    def activation_terms(self, spec, *, tokens, seqs, mtp=0, **kw):
        return {"hidden": tokens * spec.H * 2 * 3}          # three [T, H] bf16 tensors

    def activation_peak(self, terms):
        return terms["hidden"]

    def non_torch_terms(self, plan, *, hccl_buffsize_mb=0, dcp=1, **state):
        return {"runtime": RUNTIME}

    def graph_deducted_bytes(self):
        return GRAPH

    def kv_available(self, requested, weights, activation, non_torch, graph):
        return requested - weights - activation - non_torch - graph - RESERVE

    @property
    def loglines(self):
        return _LINES

    @classmethod
    def weights_patterns(cls):
        import re
        return ((re.compile(r"bare: weights ([0-9.]{1,20}) (GiB)"), "bare", "bare:"),)

    def launch(self, model, instance, *, quantized=False):
        args = [f"bareserve {model}", f"--shards {instance.tp}x{instance.dp}"]
        return {"args": args, "env": {}, "command": " ".join(args)}

    def kernel_path(self, variant):
        return BarePath()


@pytest.fixture
def bare():
    registry.register(BareEngine)
    yield BareEngine
    registry.unregister("bare")


def _weights_by_hand(tp):
    qkv = (NH * HD + 2 * NKV * HD) * H * 2 // tp
    o = H * NH * HD * 2 // tp
    mlp = 3 * ID_ * H * 2 // tp
    norms = 2 * H * 2
    return L * (qkv + o + mlp + norms) + 2 * (V // tp) * H * 2 + H * 2


def test_memory_through_the_bare_engine(bare, capsys):
    tp = 4
    assert main(["memory", "dense-32b", "--tp", str(tp), "--engine", "bare@1.0", "--device", "a3-752t",
                 "--max-model-len", "32768", "--max-num-batched-tokens", "8192", "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    rt = rep["runtime"]
    w = _weights_by_hand(tp)
    assert rep["worst_rank"]["bytes"] == w == rt["weights_bytes"]
    # the bare engine's own formula: util x total - weights - peak - non-torch - graph - reserve
    total = rt["total_bytes"]
    act = 8192 * H * 2 * 3
    assert rt["activation_peak_bytes"] == act and rt["non_torch_bytes"] == RUNTIME
    assert rt["kv_available_bytes"] == int(total * 0.9) - w - act - RUNTIME - GRAPH - RESERVE
    # its KV: K and V of 8 / 4 = 2 heads of 128, bf16, per layer; blocks of 32 tokens
    page = BLOCK * L * 2 * 2 * HD * 2
    assert rt["block_size"] == BLOCK and rt["kv_spec"]["page_block_bytes"] == page
    assert rt["num_blocks"] == rt["kv_available_bytes"] // page
    assert rt["kv_bytes_per_request"] == math.ceil(32768 / BLOCK) * page
    lines = rep["vllm_log_lines"]
    assert lines[0] == f"bare: weights {w / GiB:.3f} GiB" and lines[2].startswith("bare: ")
    assert not any("HCCL" in a or "hccl" in a for a in rep["assumptions"])


def test_perf_through_the_bare_engine(bare, capsys):
    assert main(["perf", "dense-32b", "--tp", "4", "--engine", "bare@1.0", "--device", "a3-752t",
                 "--max-model-len", "32768", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine"] == "bare@1.0"
    assert doc["hbm"]["runtime"]["block_size"] == BLOCK
    assert doc["hbm"]["runtime"]["weights_bytes"] == _weights_by_hand(4)


def test_plan_launches_the_bare_engine(bare, capsys):
    args = ["plan", "dense-32b", "--engine", "bare@1.0", "--device", "a3-752t", "--dies", "8", "--isl", "2048",
            "--osl", "256", "--ttft-ms", "60000", "--tpot-ms", "2000", "--tp", "4,8", "--batch", "1,4", "--mtp", "0",
            "--no-disagg", "--format", "json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["launch"] and all(inst["command"].startswith("bareserve ") for inst in doc["launch"])


def test_bench_through_the_bare_engine(bare, capsys):
    """bench's simulation runs on the bare engine's own pool: its blocks per rank are memory's."""
    flags = ["dense-32b", "--tp", "4", "--engine", "bare@1.0", "--device", "a3-752t", "--max-model-len", "32768",
             "--max-num-seqs", "8"]
    assert main(["memory", *flags, "--format", "json"]) == 0
    mem = json.loads(capsys.readouterr().out)["runtime"]
    assert main(["bench", *flags, "--concurrency", "4", "--isl", "1024", "--osl", "64", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    inst = doc["instances"][0]
    assert inst["kv_blocks_per_rank"] == mem["num_blocks"] and inst["weights_bytes"] == _weights_by_hand(4)
    assert doc["output_throughput"] > 0



def test_align_reads_the_bare_engines_weights_line(bare, tmp_path, capsys):
    """The bare engine's own weights line, read back by align's log reader, is explained by its ledger."""
    flags = ["dense-32b", "--tp", "4", "--engine", "bare@1.0", "--device", "a3-752t", "--max-model-len", "32768"]
    assert main(["memory", *flags, "--format", "json"]) == 0
    line = json.loads(capsys.readouterr().out)["vllm_log_lines"][0]
    log = tmp_path / "bare.log"
    log.write_text("INFO start\n" + line + "\n")
    assert main(["align", *flags, "--log", str(log), "--output-dir", str(tmp_path / "t"), "--no-png"]) == 0
    capsys.readouterr()
    ticket = json.loads((tmp_path / "t" / "ticket.json").read_text())
    best = ticket["memory"]["candidates"][0]
    assert best["engine"] == "bare@1.0" and best["max_rel_residual"] < 1e-3
    # the bare engine searches only its own space: the role and the drafter
    assert set(ticket["memory"]["search"]["dimensions"]) <= {"recipe", "dp", "engine", "role", "mtp"}
