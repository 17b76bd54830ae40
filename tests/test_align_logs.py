"""Engine log reader: every line shape of issue 10 / runtime spec §3.5, written here from the
format strings (no real log is copied). Sizes: engine "GB" is bytes / 2^30 (spec §3.1 step 3)."""
from __future__ import annotations

import pytest
from hypothesis import example, given, settings, strategies as st

from auditor.align.evidence.logs import config_fields, parse_log_text, read_logs
from auditor.align.evidence.workers import split_prefix
from auditor.errors import AuditInputError

GiB = 2 ** 30
MiB = 2 ** 20


@pytest.mark.parametrize("prefix, expect", [
    ("(Worker_DP0_TP3_EP3 pid=123) ", dict(process="Worker", dp=0, tp=3, ep=3, pid=123)),
    ("(Worker_TP0 pid=9) ", dict(process="Worker", tp=0, dp=None, pid=9)),
    ("(Worker_TP2_EP2 pid=9) ", dict(process="Worker", tp=2, ep=2)),
    ("(Worker_PP1_TP3 pid=9) ", dict(process="Worker", pp=1, tp=3)),
    ("(EngineCore_DP0 pid=9) ", dict(process="EngineCore", dp=0, tp=None)),
    ("(EngineCore pid=9) ", dict(process="EngineCore", dp=None)),
    ("(APIServer pid=9) ", dict(process="APIServer")),
    ("(VllmWorker rank=7 pid=9) ", dict(process="VllmWorker", rank=7, tp=None)),
    ("(VllmWorkerProcess pid=9) ", dict(process="VllmWorkerProcess", rank=None)),
    ("(NPURayWorkerWrapper pid=9, ip=10.1.2.3) ", dict(process="NPURayWorkerWrapper", ip="10.1.2.3")),
    ("vllm-1  | (Worker_DP1_TP15_EP31 pid=4) ", dict(container="vllm-1", dp=1, tp=15, ep=31)),
])
def test_worker_prefixes(prefix, expect):
    w, rest = split_prefix(prefix + "INFO 05-20 09:50:58 [x.py:1] hello")
    assert w is not None
    for k, v in expect.items():
        assert getattr(w, k) == v, k
    assert rest.startswith("INFO 05-20")
    assert w.is_worker == (w.process not in ("EngineCore", "APIServer"))


def test_container_prefix_without_process_and_no_prefix():
    w, rest = split_prefix("vllm-1  | INFO 05-20 GPU KV cache size: 1 tokens")
    assert w is None and rest.startswith("INFO")
    w, rest = split_prefix("INFO plain line")
    assert w is None and rest == "INFO plain line"


def test_weights_forms():
    text = "\n".join([
        "(Worker_DP0_TP3_EP3 pid=123) INFO 05-20 09:50:58 [model_runner_v1.py:3150] Loading model weights took 31.4655 GB",
        "(Worker_TP0 pid=5) INFO 05-20 10:00:00 [gpu_model_runner.py:1] Model loading took 11.55 GiB memory and 1940.360672 seconds",
        "(VllmWorkerProcess pid=6) INFO 05-20 10:00:00 [model_runner.py:1] Model loading took 19.5904 GB and 724.575245 seconds",
        "(Worker_TP1 pid=7) INFO 05-20 10:00:00 [default_loader.py:1] Loading weights took 5.59 seconds",
    ])
    ev = parse_log_text(text, "l.txt")
    assert [w.form for w in ev.weights] == ["ascend-v1", "upstream", "upstream-old"]
    # engine "GB" is GiB: 31.4655 * 2^30 bytes
    assert ev.weights[0].bytes == round(31.4655 * GiB)
    assert ev.weights[0].worker.tp == 3 and ev.weights[0].worker.dp == 0
    assert ev.weights[1].bytes == round(11.55 * GiB) and ev.weights[1].seconds == pytest.approx(1940.360672)
    assert ev.weights[2].bytes == round(19.5904 * GiB) and ev.weights[2].seconds == pytest.approx(724.575245)
    assert str(ev.weights[0].where) == "l.txt:1"
    # "Loading weights took 5.59 seconds" is a time, not a weights figure
    assert len(ev.weights) == 3


def test_kv_lines():
    text = "\n".join([
        "(Worker_DP0_TP0 pid=1) INFO [worker.py:1] Available KV cache memory: 28.73 GiB",
        "(Worker_DP0_TP1 pid=2) INFO [worker.py:1] Available KV cache memory: -1.25 GiB",
        "INFO [worker_v1.py:1] Available memory: 51114070016, total memory: 65452113920",
        "(EngineCore_DP0 pid=3) INFO [kv_cache_utils.py:1] GPU KV cache size: 15,872 tokens",
        "(EngineCore_DP0 pid=3) INFO [kv_cache_utils.py:1] Maximum concurrency for 8,192 tokens per request: 101.55x",
        "(EngineCore_DP0 pid=3) INFO [kv_cache_utils.py:1] Maximum concurrency for 8,192 tokens per request: 101.55x",
    ])
    ev = parse_log_text(text)
    assert [k.bytes for k in ev.kv_available] == [round(28.73 * GiB), round(-1.25 * GiB), 51114070016]
    assert ev.kv_available[2].total_bytes == 65452113920 and ev.kv_available[2].form == "available-memory"
    assert ev.kv_tokens[0].tokens == 15872
    assert len(ev.concurrency) == 2     # the line may repeat
    assert ev.concurrency[0].tokens_per_request == 8192 and ev.concurrency[0].factor == pytest.approx(101.55)


def test_kv_shortfall_with_engine_typo():
    line = ("(EngineCore_DP0 pid=3) ERROR [core.py:1] ValueError: To serve at least one request with the models's "
            "max seq len (131072), (13.58 GiB KV cache is needed, which is larger than the available KV cache "
            "memory (1.25 GiB). Based on the available memory, the estimated maximum model length is 12032. "
            "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
    ev = parse_log_text(line)
    (s,) = ev.shortfalls
    assert (s.max_seq_len, s.estimated_max_len) == (131072, 12032)
    assert s.needed_bytes == round(13.58 * GiB) and s.available_bytes == round(1.25 * GiB)
    # the spelling without the typo and without the estimate also reads
    ev = parse_log_text("ValueError: To serve at least one request with the model's max seq len (4096), "
                        "(2.00 GiB KV cache is needed, which is larger than the available KV cache memory (1.00 GiB).")
    assert ev.shortfalls[0].estimated_max_len is None and ev.shortfalls[0].needed_bytes == 2 * GiB


def test_npu_oom_plain_and_after_torch_npu_prefix():
    a = ("(Worker_DP0_TP3_EP3 pid=1) ERROR torch.OutOfMemoryError: NPU out of memory. Tried to allocate 450.00 MiB "
         "(NPU 3; 60.96 GiB total capacity; 60.30 GiB already allocated; 60.31 GiB current active; 98.00 MiB free; "
         "60.80 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb")
    b = ("[ERROR] 2026-05-20-09:50:58 (PID:1, Device:5, RankID:-1) torch_npu.memory: [ERROR] NPU out of memory. "
         "Tried to allocate 2.00 GiB (NPU 5; 61.27 GiB total capacity; 59.00 GiB already allocated; 59.10 GiB current "
         "active; 1.10 GiB free; 60.00 GiB reserved in total by PyTorch)If reserved memory is >> allocated memory")
    ev = parse_log_text(a + "\n" + b)
    o1, o2 = ev.ooms
    assert o1.tried_bytes == 450 * MiB and o1.device == 3 and o1.total_bytes == round(60.96 * GiB)
    assert o1.allocated_bytes == round(60.30 * GiB) and o1.free_bytes == 98 * MiB
    assert o1.reserved_bytes == round(60.80 * GiB) and o1.worker.tp == 3
    assert o2.tried_bytes == 2 * GiB and o2.device == 5 and o2.reserved_bytes == 60 * GiB
    assert o2.worker is None


def test_breakdown_line():
    line = ("(Worker_DP0_TP0 pid=1) INFO [worker.py:1] Free memory on device (60.5/61.27 GiB) on startup. Desired GPU "
            "memory utilization is (0.9, 55.14 GiB). Actual usage: 31.5 GiB for weights, 2.0 GiB for peak activation, "
            "2.1 GiB for non-torch memory, 0.44 GiB for NPU graph memory. Replace gpu_memory_utilization with "
            "`--kv-cache-memory=1` (1 GiB) to fit into requested memory, or `--kv-cache-memory=2` (2 GiB) to fully "
            "utilize NPU free memory. Current KV cache memory: 19.54 GiB. After warmup: torch reserved memory 50 GiB, "
            "torch allocated memory 49 GiB.")
    (b,) = parse_log_text(line).breakdowns
    assert b.weights_bytes == round(31.5 * GiB) and b.activation_bytes == 2 * GiB
    assert b.non_torch_bytes == round(2.1 * GiB) and b.graph_bytes == round(0.44 * GiB)
    assert b.kv_bytes == round(19.54 * GiB) and b.utilization == pytest.approx(0.9)
    assert b.total_bytes == round(61.27 * GiB)


def test_engine_config_line():
    line = ("(EngineCore_DP0 pid=1) INFO [core.py:1] Initializing a V1 LLM engine (v0.18.0) with config: "
            "model='/models/GLM-5.1-w8a8', speculative_config=None, tokenizer='/models/GLM-5.1-w8a8', "
            "dtype=torch.bfloat16, max_seq_len=131072, tensor_parallel_size=16, pipeline_parallel_size=1, "
            "data_parallel_size=2, quantization=ascend, compilation_config={\"level\": 3, \"sizes\": [1, 2]}")
    (c,) = parse_log_text(line).configs
    assert c.version == "v0.18.0"
    assert c.fields["tensor_parallel_size"] == "16" and c.fields["data_parallel_size"] == "2"
    assert c.fields["model"] == "/models/GLM-5.1-w8a8"
    assert c.fields["compilation_config"].startswith("{") and "sizes" in c.fields["compilation_config"]
    assert config_fields("a=1, b=(2, 3), c='x,y'") == {"a": "1", "b": "(2, 3)", "c": "x,y"}


def test_npu_smi_rows():
    text = "\n".join([
        "+---------------------------+---------------+----------------------------------------------------+",
        "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |",
        "+===========================+===============+====================================================+",
        "| 2       0                 | 577786        | VLLMWorker_DP            | 59217                   |",
        "| 3       0                 | 577787        | VLLMWorker_DP            | 59221                   |",
    ])
    rows = parse_log_text(text).npu_smi
    assert [(r.npu, r.chip, r.pid, r.name) for r in rows] == [(2, 0, 577786, "VLLMWorker_DP"),
                                                             (3, 0, 577787, "VLLMWorker_DP")]
    assert rows[0].memory_bytes == 59217 * MiB


def test_read_logs_errors(tmp_path):
    p = tmp_path / "empty.log"
    p.write_text("nothing to see\n")
    with pytest.raises(AuditInputError, match="no engine memory lines"):
        read_logs([p])
    with pytest.raises(AuditInputError, match="cannot read log"):
        read_logs([tmp_path / "missing.log"])


# ------------------------------------------------------------------ property-based
_tags = st.fixed_dictionaries({}, optional={"DP": st.integers(0, 63), "PP": st.integers(0, 7),
                                            "TP": st.integers(0, 63), "EP": st.integers(0, 511)})


@settings(max_examples=200, deadline=None)
@given(tags=_tags, pid=st.integers(1, 10 ** 7), gib=st.integers(0, 10 ** 6), container=st.booleans(),
       noise=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), max_size=30))
def test_weights_roundtrip(tags, pid, gib, container, noise):
    """Any worker prefix and any 4-decimal figure read back exactly; unknown text around it is ignored."""
    order = [k for k in ("DP", "PP", "TP", "EP") if k in tags]
    name = "Worker" + "".join(f"_{k}{tags[k]}" for k in order)
    value = gib / 10 ** 4
    line = (("vllm-2  | " if container else "") + f"({name} pid={pid}) INFO 05-20 09:50:58 [m.py:1] "
            f"Loading model weights took {value:.4f} GB")
    ev = parse_log_text(noise + "\n" + line)
    w = ev.weights[-1]
    assert w.bytes == round(float(f"{value:.4f}") * GiB)
    for k in ("DP", "PP", "TP", "EP"):
        assert getattr(w.worker, k.lower()) == tags.get(k)
    assert w.worker.pid == pid


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_never_raises(text):
    """Any text: read, or one AuditInputError (an implausible number on a recognised line); lines are
    counted on "\n" only (a form feed or U+2028 does not start a line)."""
    try:
        ev = parse_log_text(text)
    except AuditInputError:
        return
    assert ev.lines == (text.count("\n") + (0 if text.endswith("\n") or not text else 1))


@settings(max_examples=100, deadline=None)
@given(tokens=st.integers(0, 10 ** 9), req=st.integers(1, 10 ** 7), conc=st.integers(0, 10 ** 6))
def test_kv_numbers_with_separators(tokens, req, conc):
    text = (f"GPU KV cache size: {tokens:,} tokens\n"
            f"Maximum concurrency for {req:,} tokens per request: {conc / 100:.2f}x")
    ev = parse_log_text(text)
    assert ev.kv_tokens[0].tokens == tokens
    assert ev.concurrency[0].tokens_per_request == req
    assert ev.concurrency[0].factor == pytest.approx(conc / 100)


# ------------------------------------------------------------------ config-line numbers (issue 31)
CONFIG_LINE = ("(EngineCore_DP0 pid=1) INFO [core.py:1] Initializing a V1 LLM engine (v0.18.0) with config: "
               "model='/models/GLM-5.1-w8a8', speculative_config=None, max_seq_len={mml}, "
               "tensor_parallel_size={tp}, pipeline_parallel_size=1, data_parallel_size=2, quantization=ascend")
NON_DEFAULT = "(APIServer pid=1) INFO [utils.py:233] non-default args: {{'model': '/m', {body}}}"


@pytest.mark.parametrize("tp, mml, needle", [
    ("0", "131072", "tensor_parallel_size: 0 is outside"),
    ("-4", "131072", "tensor_parallel_size: -4 is outside"),
    ("16", "1" + "0" * 30, "max_seq_len: 1" + "0" * 30 + " is outside"),
    ("16", "1e30", "max_seq_len: 1e30 is outside"),
    ("nan", "131072", "tensor_parallel_size: not a number: 'nan'"),
    ("inf", "131072", "tensor_parallel_size: not a number: 'inf'"),
    ("2.5", "131072", "tensor_parallel_size: expected a whole number"),
    ("sixteen", "131072", "tensor_parallel_size: not a number"),
    ("65537", "131072", "tensor_parallel_size: 65537 is outside"),
])
def test_config_line_absurd_numbers_are_refused(tp, mml, needle):
    """A config line's TP / max_seq_len outside the options' caps is one error naming the file, the line
    and the value, not a recognised engine config."""
    text = "nothing\n" + CONFIG_LINE.format(tp=tp, mml=mml)
    with pytest.raises(AuditInputError) as e:
        parse_log_text(text, "run3.log")
    msg = str(e.value)
    assert msg.startswith("run3.log: line 2: engine config ") and needle in msg, msg


@pytest.mark.parametrize("body, needle", [
    ("'gpu_memory_utilization': 7.0", "gpu_memory_utilization: 7.0 is outside the plausible range (0, 1]"),
    ("'gpu_memory_utilization': 0", "gpu_memory_utilization: 0 is outside"),
    ("'gpu_memory_utilization': -0.5", "gpu_memory_utilization: -0.5 is outside"),
    ("'gpu_memory_utilization': nan", "gpu_memory_utilization: not a number: 'nan'"),
    ("'tensor_parallel_size': True", "tensor_parallel_size: not a number: 'True'"),
    ("'tensor_parallel_size': 0", "tensor_parallel_size: 0 is outside"),
    ("'data_parallel_size': " + "9" * 25, "data_parallel_size: " + "9" * 25 + " is outside"),
    ("'max_model_len': -1", "max_model_len: -1 is outside"),
    ("'max_num_seqs': 100000", "max_num_seqs: 100000 is outside"),
    ("'speculative_config': {'method': 'deepseek_mtp', 'num_speculative_tokens': 99999}",
     "num_speculative_tokens: 99999 is outside"),
    ("'speculative_config': {'num_speculative_tokens': -1}", "num_speculative_tokens: -1 is outside"),
])
def test_non_default_args_absurd_numbers_are_refused(body, needle):
    with pytest.raises(AuditInputError) as e:
        parse_log_text(NON_DEFAULT.format(body=body), "serve.log")
    msg = str(e.value)
    assert msg.startswith("serve.log: line 1: non-default args ") and needle in msg, msg


def test_config_numbers_in_range_are_read_and_normalized():
    ev = parse_log_text(CONFIG_LINE.format(tp="16.0", mml="131072") + "\n" + NON_DEFAULT.format(
        body="'gpu_memory_utilization': 1, 'max_num_seqs': 'None', 'speculative_config': "
             "{'method': 'deepseek_mtp', 'num_speculative_tokens': 3}"))
    (c,) = ev.configs
    assert c.fields["tensor_parallel_size"] == "16" and c.fields["max_seq_len"] == "131072"
    (nd,) = ev.non_default
    assert nd.args["gpu_memory_utilization"] == 1.0 and nd.args["max_num_seqs"] == "None"


# what a recognised value may be (docs/options.md, bad input: the options' caps), restated here
_RANGES = {"tensor_parallel_size": (1, 65_536), "data_parallel_size": (1, 65_536), "pipeline_parallel_size": (1, 1_024),
           "decode_context_parallel_size": (1, 65_536), "max_model_len": (1, 1 << 24), "max_seq_len": (1, 1 << 24),
           "max_num_seqs": (1, 65_536), "max_num_batched_tokens": (1, 1 << 24)}
_VALUES = st.one_of(
    st.integers(-10, 70_000), st.integers(-2 ** 100, 2 ** 100), st.sampled_from([0, 10 ** 30, 2 ** 63]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([7.0, -0.0, 1e-320, 0.92, 1.0000001]),
    st.sampled_from(["nan", "inf", "-inf", "1e30", "1E400", "-1e400", "True", "None", "", "0x10", "1_000", "16,384",
                     "１６"]),
    st.text(alphabet="0123456789.-+eE ,'\"=:{}()", max_size=12),
)


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(sorted(_RANGES) + ["gpu_memory_utilization", "num_speculative_tokens"]),
       value=_VALUES, config_line=st.booleans())
@example(key="data_parallel_size", value="1E400", config_line=False)      # inf: int() raised OverflowError
def test_config_line_values_never_traceback_nor_out_of_range(key, value, config_line):
    """Any value of a number audit reads, on the config line or the non-default args line: one
    AuditInputError naming the file, or a recognised value within its range; the align readers built
    on them (TP/DP/PP sizes, the KV settings) then see only in-range numbers."""
    from types import SimpleNamespace

    from auditor.align.kv import kv_settings
    from auditor.align.ranks import sizes_from_config
    text = value if isinstance(value, str) else repr(value)
    if key == "num_speculative_tokens":
        item = (f"speculative_config=SpeculativeConfig(method='mtp', num_spec_tokens={text})" if config_line
                else f"'speculative_config': {{'method': 'mtp', 'num_speculative_tokens': {text}}}")
    else:
        item = f"{key}={text}" if config_line else f"'{key}': {text}"
    line = (CONFIG_LINE.format(tp=8, mml=4096).replace("quantization=ascend", item) if config_line
            else NON_DEFAULT.format(body=item))
    try:
        ev = parse_log_text("Loading model weights took 30.0 GB\n" + line, "hostile.log")
    except AuditInputError as e:
        assert str(e).startswith("hostile.log: line 2: "), str(e)
        return
    got = [c.fields for c in ev.configs] + [nd.args for nd in ev.non_default]
    for fields in got:
        for k, (lo, hi) in _RANGES.items():
            v = fields.get(k)
            if v is not None and v != "None" and v != "":
                assert not isinstance(v, bool) and lo <= int(v) <= hi and str(int(v)) == str(v), (k, v)
        u = fields.get("gpu_memory_utilization")
        if u is not None and u != "None" and u != "":
            assert 0 < float(u) <= 1, u
    for name, v in sizes_from_config(ev).items():
        assert 1 <= v <= 65_536, (name, v)
    spec = SimpleNamespace(max_position=4096)
    out, _ = kv_settings(spec, SimpleNamespace(mtp=True, max_num_batched_tokens=8192), ev)
    assert 1 <= out["max_model_len"] <= 1 << 24 and 0 < out["util"] <= 1 and 0 <= out["mtp"] <= 16
    assert 1 <= out["max_num_seqs"] <= 65_536 and out.get("dcp", 1) >= 1
