"""``audit align`` details: parallel sizes from worker prefixes, discrepancies folded over layers,
and the NZ-mode dimension skipped when no shape of the model can be padded by it."""
from __future__ import annotations

import json

from auditor.align.evidence.logs import parse_log_text
from auditor.align.run import AlignRequest, infer_plan
from auditor.align.time_fit import fold_layers
from auditor.cli import main
from auditor.model.presets import preset_config
from auditor.parallel import ParallelPlan

GiB = 2 ** 30


def _weights_log(prefixes: list[str], gb: float = 38.2) -> str:
    return "\n".join(f"{p} INFO 05-20 09:50:58 [model_runner_v1.py:3150] Loading model weights took {gb} GB"
                     for p in prefixes)


def test_infer_plan_from_worker_prefixes_when_flags_are_absent():
    # DP0-1 x TP0-3 with EP ranks 0-7: TP4 DP2, EP = DP x TP = 8
    prefixes = [f"(Worker_DP{d}_TP{t}_EP{d * 4 + t} pid={10 + d * 4 + t})" for d in range(2) for t in range(4)]
    req = AlignRequest(model="glm-5.1", recipe=None, plan=ParallelPlan(), engine="vllm-ascend@main", pinned={})
    plan, notes = infer_plan(req, parse_log_text(_weights_log(prefixes)))
    assert (plan.tp, plan.dp, plan.ep, plan.pp) == (4, 2, 8, 1)
    assert notes and "worker prefixes" in notes[0]
    # PP1 of two stages, TP0-3, no DP/EP tags: TP4 PP2, EP stays off
    prefixes = [f"(Worker_PP{p}_TP{t} pid={20 + p * 4 + t})" for p in range(2) for t in range(4)]
    plan, _ = infer_plan(req, parse_log_text(_weights_log(prefixes)))
    assert (plan.tp, plan.dp, plan.ep, plan.pp) == (4, 1, 1, 2)
    # a flag the user gave wins over the prefixes
    pinned = AlignRequest(model="glm-5.1", recipe=None, plan=ParallelPlan(tp=8), engine="vllm-ascend@main",
                          pinned={"tp": 8})
    plan, _ = infer_plan(pinned, parse_log_text(_weights_log(
        [f"(Worker_DP{d}_TP{t}_EP{d * 4 + t} pid=1)" for d in range(2) for t in range(4)])))
    assert (plan.tp, plan.dp) == (8, 2)


def test_discrepancies_fold_identical_layers_into_a_range():
    rows = [{"layer": L, "scope": "layer", "class": "grouped_matmul", "predicted_us": 100.0, "measured_us": 150.0,
             "delta_us": 50.0} for L in range(3, 78)]
    rows += [{"layer": L, "scope": "layer", "class": "linear", "predicted_us": 10.0, "measured_us": 12.0,
              "delta_us": 2.0} for L in (0, 1, 2, 5)]
    rows += [{"layer": 4, "scope": "layer", "class": "linear", "predicted_us": 10.0, "measured_us": 20.0,
              "delta_us": 10.0},
             {"layer": None, "scope": "outside layers", "class": "linear", "predicted_us": 1.0, "measured_us": 4.0,
              "delta_us": 3.0}]
    out = {(r["class"], r["layer"]): r for r in fold_layers(rows)}
    assert set(out) == {("grouped_matmul", "3-77"), ("linear", "0-2,5"), ("linear", "4"), ("linear", None)}
    g = out[("grouped_matmul", "3-77")]
    assert g["layers"] == 75 and g["delta_us"] == 50.0 and g["total_delta_us"] == 75 * 50.0
    assert out[("linear", "0-2,5")]["layers"] == 4 and out[("linear", None)]["layers"] == 1


def _align(tmp_path, model: str, *extra: str) -> tuple[dict, str]:
    log = tmp_path / "w.log"
    log.write_text(_weights_log([f"(Worker_DP{r // 16}_TP{r % 16}_EP{r} pid={100 + r})" for r in range(32)]) + "\n")
    out = tmp_path / "t"
    assert main(["align", model, "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--engine", "vllm-ascend@main",
                 "--role", "mixed", "--log", str(log), "--output-dir", str(out), "--no-png", *extra]) == 0
    return json.loads((out / "ticket.json").read_text()), (out / "ticket.md").read_text()


def test_nz_mode_is_not_searched_when_no_shape_can_be_padded(tmp_path):
    """GLM-5.1's tensors whose NZ layout depends on the mode (W8A8 linears int8 [K, N], bf16 linears
    [N, K]) have dims 6144, 2048, 16384/TP, 4096, 576, 512, 32x128...: every one a multiple of 16
    rows and 32 bytes, so nz_mode 0/1/2 cannot differ and the ticket says why it did not search it."""
    t, md = _align(tmp_path, "glm-5.1")
    s = t["memory"]["search"]
    assert "nz_mode" not in s["dimensions"] and [x["dimension"] for x in s["skipped"]] == ["nz_mode"]
    assert "Not searched: nz_mode, because no resident tensor" in md
    assert any(a.startswith("nz_mode not searched") for a in t["assumptions"])
    assert all(c["options"]["nz_mode"] == 1 for c in t["memory"]["candidates"])


def test_nz_mode_is_searched_when_a_shape_is_unaligned(tmp_path):
    """The same structure with q_lora_rank 1000: the W8A8 q_b_proj weight is int8 [1000, heads x 256]
    and 1000 rows are not a multiple of 16, so NZ pads it (to 1008) and the mode matters."""
    cfg = preset_config("glm-5.1")
    cfg["q_lora_rank"] = 1000
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    t, md = _align(tmp_path, str(d), "--recipe", "w8a8")
    s = t["memory"]["search"]
    assert "nz_mode" in s["dimensions"] and not s["skipped"]
    assert "Not searched: nz_mode" not in md
    assert {c["options"]["nz_mode"] for c in t["memory"]["candidates"]} > {1}
