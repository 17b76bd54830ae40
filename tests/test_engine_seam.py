"""The engine seam: a toy engine family registered from a test runs through memory, perf, plan and
align without any generic module knowing it. It differs from vLLM-Ascend where a second engine
would (block size, KV entry bytes, the weights log line, the launch command); every expectation is
derived by hand from those differences."""
from __future__ import annotations

import dataclasses
import json
import re
import types

import pytest

from auditor.cli import main
from auditor.engines import registry
from auditor.engines.vllm_ascend import VllmAscend
from auditor.engines.vllm_ascend import loglines as ascend_lines
from auditor.engines.vllm_ascend.versions import PROFILES
from auditor.model.presets import preset_spec

TOY_BLOCK = 16
TOY_LATENT_ENTRY = 600          # bytes per cached latent token (vLLM-Ascend: (512 + 64) x 2 = 1152)


def _toy_lines():
    lines = types.SimpleNamespace(**{k: getattr(ascend_lines, k) for k in dir(ascend_lines) if not k.startswith("__")})
    lines.weights_line = lambda b: "toy: weights resident %.3f GiB" % (b / 2**30)
    return lines


class ToyEngine(VllmAscend):
    family = "toy"
    profiles = {"toy@1.0": dataclasses.replace(PROFILES["vllm-ascend@main"], name="toy@1.0", label="Toy engine 1.0",
                                               version="1.0")}
    aliases = {}
    block_size = TOY_BLOCK
    _lines = _toy_lines()

    def kv_spec(self, spec, plan, **kw):
        kv = super().kv_spec(spec, plan, **kw)
        return dataclasses.replace(kv, mla_bytes=TOY_LATENT_ENTRY)

    @property
    def loglines(self):
        return self._lines

    @classmethod
    def weights_patterns(cls):
        return ((re.compile(r"toy: weights resident ([0-9.]{1,20}) (GiB)"), "toy", "toy:"),)

    def launch(self, model, instance, *, quantized=False):
        args = [f"toyserve {model}", f"--shards {instance.tp * instance.dp}"]
        return {"args": args, "env": {}, "command": " ".join(args)}


@pytest.fixture
def toy():
    registry.register(ToyEngine)
    yield ToyEngine
    registry.unregister("toy")


def _memory_json(engine, capsys):
    args = ["memory", "glm-5.1", "--tp", "16", "--ep", "16", "--max-model-len", "8192", "--engine", engine,
            "--format", "json"]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_registry_resolves_the_toy_family(toy):
    eng = registry.as_engine("toy@1.0")
    assert isinstance(eng, ToyEngine) and eng.label == "Toy engine 1.0"
    assert registry.as_engine("toy@1.0.3").key == "toy@1.0"            # a patch release: its minor's row
    assert registry.as_engine("main").family == "vllm-ascend"         # the default family is untouched


def test_memory_runs_through_the_toy_engine(toy, capsys):
    ascend = _memory_json("vllm-ascend@main", capsys)["runtime"]
    mine = _memory_json("toy@1.0", capsys)
    rt = mine["runtime"]
    spec = preset_spec("glm-5.1")
    layers = spec.Lyr                         # no drafter: every main layer holds both caches
    idx_entry = spec.ID * 2                   # indexer keys stay bf16 (the toy changes only the latent)
    assert rt["block_size"] == TOY_BLOCK and ascend["block_size"] == 128
    assert rt["kv_spec"]["page_block_bytes"] == TOY_BLOCK * layers * (TOY_LATENT_ENTRY + idx_entry)
    assert rt["kv_bytes_per_token"] == layers * (TOY_LATENT_ENTRY + idx_entry)
    # the same weights and budget terms, so the pool differs only by the page size
    assert rt["weights_bytes"] == ascend["weights_bytes"]
    assert rt["kv_available_bytes"] == ascend["kv_available_bytes"]
    assert rt["num_blocks"] == rt["kv_available_bytes"] // rt["kv_spec"]["page_block_bytes"]
    text_args = ["memory", "glm-5.1", "--tp", "16", "--ep", "16", "--max-model-len", "8192", "--engine", "toy@1.0"]
    assert main(text_args) == 0
    out = capsys.readouterr().out
    assert "toy: weights resident" in out and "Loading model weights took" not in out


def test_perf_runs_through_the_toy_engine(toy, capsys):
    assert main(["perf", "--tp", "16", "--ep", "16", "--engine", "toy@1.0", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine"] == "toy@1.0"
    assert doc["hbm"]["runtime"]["block_size"] == TOY_BLOCK


def test_plan_launch_is_the_toy_engines_command(toy, capsys):
    args = ["plan", "--engine", "toy@1.0", "--dies", "16", "--isl", "2048", "--osl", "256", "--ttft-ms", "20000",
            "--tpot-ms", "500", "--tp", "8,16", "--batch", "1,4", "--mtp", "0", "--no-disagg", "--format", "json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    launches = doc["launch"]
    assert launches and all(inst["command"].startswith("toyserve ") for inst in launches)


def test_align_reads_the_toy_engines_log_line(toy, tmp_path, capsys):
    """The toy's own weights line (printed by memory above) is read back by align's log reader and
    explained by the toy engine's ledger of the same plan."""
    plan = ["--tp", "16", "--ep", "16", "--max-model-len", "8192"]
    assert main(["memory", "glm-5.1", *plan, "--engine", "toy@1.0", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    line = next(x for x in doc["vllm_log_lines"] if x.startswith("toy: weights resident"))
    log = tmp_path / "toy.log"
    log.write_text("INFO starting\n" + line + "\n")
    out = tmp_path / "ticket"
    code = main(["align", "glm-5.1", *plan, "--engine", "toy@1.0", "--log", str(log), "--output-dir", str(out),
                 "--no-png"])
    capsys.readouterr()
    assert code == 0
    ticket = json.loads((out / "ticket.json").read_text())
    text = json.dumps(ticket)
    shown = float(line.split()[-2])
    assert f"{shown:.3f}" in (out / "ticket.md").read_text()
    assert "toy@1.0" in text


def test_deployment_context_resolves_once_and_hashes_by_key():
    """A context built from '0.23.0rc1' and one built from the resolved engine are the same key (the
    rc is its release's row), so caches keyed on it are shared; another version or device is not."""
    from auditor.context import DeploymentContext
    from auditor.devices.profiles import load_device
    from auditor.parallel import ParallelPlan
    spec, plan = preset_spec("glm-5.1"), ParallelPlan(tp=16, ep=16)
    a = DeploymentContext(spec, plan, "vllm-ascend@0.23.0rc1", "w8a8", load_device("a3-752t"))
    b = DeploymentContext(spec, plan, registry.as_engine("vllm-ascend@0.23"), "w8a8", load_device("a3-752t"))
    c = DeploymentContext(spec, plan, "vllm-ascend@0.18", "w8a8", load_device("a3-752t"))
    d = DeploymentContext(spec, plan, "vllm-ascend@0.23", "w8a8", load_device("a2-313t"))
    assert a == b and hash(a) == hash(b) and a.engine.key == "vllm-ascend@0.23"
    assert a != c and a != d
    from auditor.runtime.weights import plan_weights
    assert plan_weights(a) == plan_weights(b)
