"""Hostile input at the CLI level (issue 8, classes 4 config values, 8 outputs, 9 permissions,
10 flags, plus help text): a fixed regression set of named cases.

Every case runs ``auditor.cli.main(argv)`` in process (a representative subset also runs as
``python -m auditor`` out of process) and asserts the contract in ``hostile_harness``: exit 0/2/3,
one ``audit: error:`` line on error, no traceback, no hang, the model directory untouched.
The documented caps (docs/options.md, bad input) come from ``auditor.limits``; the cases read them from there only to build the
first value past each cap, never to decide whether the answer is right.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import click
import pytest

from auditor.limits import CONFIG_INT_CAPS, SYNTH_MAX_FILES
from hostile_harness import (DENSE_CONFIG, DSA_CONFIG, check_contract, fingerprint, run_in_process,
                             run_out_of_process, tiny_checkpoint, write_config)


@dataclass
class Case:
    build: Callable[[Path], list[str]]        # tmp dir -> argv; the model directory is tmp/"model"
    expect: str = "error"                     # error | ok | budget | any
    needles: tuple[str, ...] = ()
    setup: Callable | None = None             # (tmp, monkeypatch) -> None, for simulated failures


CASES: dict[str, Case] = {}


def case(name: str, build, expect="error", needles=(), setup=None) -> None:
    assert name not in CASES, name
    CASES[name] = Case(build, expect, tuple(needles), setup)


def model_dir(tmp: Path, cfg: dict | str | None = None) -> Path:
    return write_config(tmp / "model", DENSE_CONFIG if cfg is None else cfg)


def checkpoint(tmp: Path) -> Path:
    return tiny_checkpoint(tmp / "model")


# ============================================================================ 4. config values
BAD_INT_SPELLINGS = {
    "string": '"abc"', "numeric-string": '"12"', "list": "[1]", "object": "{}", "float": "1.5",
    "inf-1e309": "1e309", "minus-inf": "-1e309", "nan": "NaN", "bool": "true", "negative": "-1",
    "1e30": str(10 ** 30), "float-1e30": "1e30",
}


def _config_text(key: str, spelling: str, base: dict = DSA_CONFIG) -> str:
    """The base config with ``key`` set to a raw JSON spelling (dotted keys go into the sub-object)."""
    cfg = json.loads(json.dumps(base))
    parent, _, leaf = key.rpartition(".")
    target = cfg.setdefault(parent, {}) if parent else cfg
    target[leaf] = "@@VALUE@@"
    return json.dumps(cfg).replace('"@@VALUE@@"', spelling)


for _key, _cap in CONFIG_INT_CAPS.items():
    for _label, _spelling in BAD_INT_SPELLINGS.items():
        case(f"config-{_key}-{_label}",
             lambda t, k=_key, s=_spelling: ["memory", model_dir(t, _config_text(k, s))], needles=(f"'{_key}'",))
    case(f"config-{_key}-past-cap", lambda t, k=_key, c=_cap: ["memory", model_dir(t, _config_text(k, str(c.hi + 1)))],
         needles=(f"'{_key}'", "plausible"))
    if _cap.lo > 0:
        case(f"config-{_key}-below-{_cap.lo}",
             lambda t, k=_key, c=_cap: ["memory", model_dir(t, _config_text(k, str(c.lo - 1)))], needles=(f"'{_key}'",))

# the values the adversarial run reported, by name
for _name, _key, _spelling in [("num_hidden_layers-1e9", "num_hidden_layers", str(10 ** 9)),
                               ("num_hidden_layers-1e6", "num_hidden_layers", str(10 ** 6)),
                               ("vocab_size-1e30", "vocab_size", str(10 ** 30)),
                               ("n_routed_experts-1e6", "n_routed_experts", str(10 ** 6)),
                               ("hidden_size-2e6", "hidden_size", str(2 * 10 ** 6))]:
    for _cmd in ("memory", "inventory", "perf"):
        case(f"config-seen-{_name}-{_cmd}", lambda t, k=_key, s=_spelling, c=_cmd: [c, model_dir(t, _config_text(k, s))],
             needles=(f"'{_key}'",))

for _label, _spelling in {"string": '"4"', "list": "[4]", "zero": "0", "negative": "-2", "inf": "1e309",
                          "nan": "NaN", "bool": "true", "past-cap": "1025", "object": "{}"}.items():
    case(f"config-rope_scaling.factor-{_label}", lambda t, s=_spelling: ["memory", model_dir(t, _config_text(
        "rope_scaling.factor", s))], needles=("'rope_scaling.factor'",))
for _label, _spelling in {"string": '"yarn"', "list": "[1]", "number": "4"}.items():
    case(f"config-rope_scaling-{_label}", lambda t, s=_spelling: ["memory", model_dir(t, _config_text(
        "rope_scaling", s))], needles=("'rope_scaling'",))
for _key, _spelling in [("model_type", "5"), ("torch_dtype", "[1]"), ("dtype", "{}"), ("topk_method", "1"),
                        ("tie_word_embeddings", '"false"'), ("tie_word_embeddings", "1"),
                        ("indexer_rope_interleave", '"yes"'), ("indexer_types", '"full"'),
                        ("indexer_types", "[1, 2, 3, 4]"), ("mlp_layer_types", "{}"), ("mlp_layer_types", "[null]")]:
    case(f"config-{_key}-{_spelling.strip(chr(34)) or 'empty'}-type",
         lambda t, k=_key, s=_spelling: ["memory", model_dir(t, _config_text(k, s))], needles=(f"'{_key}'",))
case("config-expert-layers-product", lambda t: ["memory", model_dir(t, {**DSA_CONFIG, "num_hidden_layers": 1024,
                                                                         "n_routed_experts": 128})],
     needles=("expert-layers",))
case("config-topk-more-than-experts", lambda t: ["memory", model_dir(t, {**DSA_CONFIG, "num_experts_per_tok": 9})],
     needles=("'num_experts_per_tok'",))
case("config-not-an-object", lambda t: ["memory", model_dir(t, "[1, 2]")], needles=("JSON object",))
case("config-text_config-bad", lambda t: ["memory", model_dir(t, {"text_config": {**DENSE_CONFIG, "vocab_size": "x"}})],
     needles=("'vocab_size'",))
case("config-no-max-position-memory", lambda t: ["memory", model_dir(t, {k: v for k, v in DENSE_CONFIG.items()
                                                                        if k != "max_position_embeddings"})],
     needles=("max_position_embeddings", "--max-model-len"))
case("config-no-max-position-with-flag", lambda t: ["memory", model_dir(t, {k: v for k, v in DENSE_CONFIG.items()
                                                                            if k != "max_position_embeddings"}),
                                                    "--max-model-len", "1024"], expect="ok")
case("config-hidden-smaller-than-heads", lambda t: ["memory", model_dir(t, {**DENSE_CONFIG, "hidden_size": 1})],
     needles=("'head_dim'",))
case("config-kv-heads-not-dividing", lambda t: ["memory", model_dir(t, {**DENSE_CONFIG, "num_key_value_heads": 3})],
     needles=("'num_key_value_heads'",))
case("config-kv-heads-more-than-heads", lambda t: ["memory", model_dir(t, {**DENSE_CONFIG, "num_key_value_heads": 8})],
     needles=("'num_key_value_heads'",))
case("config-missing-required", lambda t: ["memory", model_dir(t, {"hidden_size": 64})], needles=("missing",))

# accepted: the largest plausible values, integral floats, explicit nulls
for _key, _value in [("vocab_size", CONFIG_INT_CAPS["vocab_size"].hi), ("num_hidden_layers", 1024),
                     ("max_position_embeddings", CONFIG_INT_CAPS["max_position_embeddings"].hi),
                     ("index_topk", CONFIG_INT_CAPS["index_topk"].hi), ("hidden_size", 64.0),
                     ("num_nextn_predict_layers", 16), ("rope_scaling", None), ("index_topk", 2048.0)]:
    case(f"config-accept-{_key}-{_value}", lambda t, k=_key, v=_value: ["memory", model_dir(t, {**DSA_CONFIG, k: v}),
                                                                        "--format", "json"], expect="ok")
case("config-accept-rope-factor-1024", lambda t: ["memory", model_dir(t, {**DSA_CONFIG, "rope_scaling": {
    "factor": 1024, "original_max_position_embeddings": 4096}})], expect="ok")
for _cmd in ("memory", "inventory", "perf"):
    case(f"config-accept-dsa-{_cmd}", lambda t, c=_cmd: [c, model_dir(t, DSA_CONFIG)], expect="ok")
    case(f"config-accept-dense-{_cmd}", lambda t, c=_cmd: [c, model_dir(t, DENSE_CONFIG)], expect="ok")


# ============================================================================ 8. outputs
def _details(t: Path) -> Path:
    p = t / "kernel_details.csv"
    p.write_text("Step Id,Name,Type,OP State,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim,"
                 "Input Shapes,Input Data Types,Input Formats\n"
                 '1,op0,MatMulV2,dynamic,AI_CORE,1000.0,7.5,0.1,24,"4,6144;128,6144",INT8;INT8;FLOAT,ND;ND\n')
    return p


def _scenarios(t: Path) -> Path:
    p = t / "measured.csv"
    p.write_text("scenario,phase,query_len,context_len,measured_ms\n"
                 "a,prefill,3500,0,1500\nb,decode,4,3500,70\nc,prefill,32000,0,2300\n")
    return p


def _plan(t: Path) -> list:
    return ["plan", model_dir(t), "--ttft-ms", "1000", "--tpot-ms", "50", "--isl", "100", "--osl", "100", "--dies", "8"]


OUTPUT_OPTIONS: dict[str, Callable[[Path, str], list[str]]] = {
    "memory--output": lambda t, o: ["memory", model_dir(t), "--output", o],
    "memory--png": lambda t, o: ["memory", model_dir(t), "--png", o],
    "memory--hbm-png": lambda t, o: ["memory", model_dir(t), "--hbm-png", o],
    "plan--output": lambda t, o: [*_plan(t), "--output", o],
    "plan--png": lambda t, o: [*_plan(t), "--png", o],
    "plan--csv": lambda t, o: [*_plan(t), "--csv", o],
    "inventory--output": lambda t, o: ["inventory", checkpoint(t), "--output", o],
    "perf--output": lambda t, o: ["perf", model_dir(t), "--phase", "decode", "--output", o],
    "perf--trace": lambda t, o: ["perf", model_dir(t), "--phase", "decode", "--trace", o],
    "perf--png": lambda t, o: ["perf", model_dir(t), "--phase", "decode", "--png", o],
    "sweep--output": lambda t, o: ["sweep", model_dir(t), "--tp", "1", "--dp", "1", "--output", o],
    "sweep--csv": lambda t, o: ["sweep", model_dir(t), "--tp", "1", "--dp", "1", "--csv", o],
    "calibrate-o": lambda t, o: ["calibrate", _scenarios(t), "--tp", "16", "--ep", "16", "--fit", "memory",
                                 "--no-loo", "-o", o],
    "kernels-import-o": lambda t, o: ["kernels", "import", _details(t), "-o", o],
    "synth-OUT_DIR": lambda t, o: ["synth", o, "--model", model_dir(t)],
    "align--output-dir": lambda t, o: ["align", model_dir(t), "--log", t / "engine.log", "--output-dir", o],
}
WITH_MODEL = {"memory--output", "memory--png", "memory--hbm-png", "plan--output", "plan--png", "plan--csv", "inventory--output", "perf--output", "perf--trace", "perf--png",
              "sweep--output", "sweep--csv"}


def _file_parent(t: Path) -> str:
    (t / "afile").write_text("x")
    return str(t / "afile" / "out")


def _loop(t: Path) -> str:
    os.symlink("loop", t / "loop")
    return str(t / "loop")


def _fifo(t: Path) -> str:
    os.mkfifo(t / "fifo")
    return str(t / "fifo")


def _readonly_setup(t: Path, monkeypatch) -> None:
    """Simulated read-only directory: the tests run as root, whom chmod does not stop, so
    os.access answers "no" for t/ro (a real one runs as uid nobody in test_real_readonly_dir)."""
    ro = str(t / "ro")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if os.fspath(p).rstrip("/") == ro
                        else real_access(p, mode, **kw))


BAD_TARGETS: dict[str, tuple[Callable[[Path], str], tuple[str, ...], Callable | None]] = {
    "dev-full": (lambda t: "/dev/full", ("/dev/full",), None),
    "parent-is-file": (_file_parent, ("Not a directory",), None),
    "symlink-loop": (_loop, ("symbolic links",), None),
    "missing-parent": (lambda t: str(t / "nope" / "out"), ("does not exist",), None),
    "proc-new": (lambda t: "/proc/audit-hostile-out", ("pseudo-filesystem",), None),
    "proc-existing": (lambda t: "/proc/self/comm", ("pseudo-filesystem",), None),
    "sys-new": (lambda t: "/sys/audit-hostile-out", ("pseudo-filesystem",), None),
    "sys-existing": (lambda t: "/sys/kernel/profiling", ("pseudo-filesystem",), None),
    "readonly-dir": (lambda t: (t / "ro").mkdir() or str(t / "ro" / "out"), ("not writable",), _readonly_setup),
    "fifo-no-reader": (_fifo, ("fifo",), None),
    "is-directory": (lambda t: str(t), (), None),
}

for _opt, _argv in OUTPUT_OPTIONS.items():
    for _tname, (_target, _needles, _setup) in BAD_TARGETS.items():
        if _opt in ("synth-OUT_DIR", "align--output-dir") and _tname in ("proc-existing", "sys-existing", "dev-full"):
            _needles = ()                      # click's own "is a file" (OUT_DIR must be a directory) comes first
        case(f"output-{_opt}-{_tname}", lambda t, a=_argv, g=_target: a(t, g(t)), needles=_needles, setup=_setup)
    if _opt in WITH_MODEL:
        case(f"output-{_opt}-into-model-dir", lambda t, a=_argv: a(t, str(t / "model" / "report.out")),
             needles=("model directory",))
        case(f"output-{_opt}-into-model-subdir", lambda t, a=_argv: a(t, str(t / "model" / "sub" / "r.out")))

# accepted writes
case("output-new-file", lambda t: ["memory", model_dir(t), "-o", t / "r.txt"], expect="ok")
case("output-dev-null", lambda t: ["memory", model_dir(t), "-o", "/dev/null", "--png", "/dev/null"], expect="ok")
case("output-synth-new-dir", lambda t: ["synth", t / "new", "--model", model_dir(t)], expect="ok")
case("output-kernels-import-new", lambda t: ["kernels", "import", _details(t), "-o", t / "k.csv"], expect="ok")


# ============================================================================ 9. permissions (simulated)
def _deny_listdir(path_of: Callable[[Path], Path]):
    """Simulated unlistable directory (root ignores chmod): os.listdir/os.scandir raise EACCES."""
    def setup(t: Path, monkeypatch) -> None:
        target = str(path_of(t))
        real_listdir, real_scandir = os.listdir, os.scandir

        def listdir(p="."):
            if os.path.abspath(os.fspath(p)) == target:
                raise PermissionError(13, "Permission denied", os.fspath(p))
            return real_listdir(p)

        def scandir(p="."):
            if os.path.abspath(os.fspath(p)) == target:
                raise PermissionError(13, "Permission denied", os.fspath(p))
            return real_scandir(p)
        monkeypatch.setattr(os, "listdir", listdir)
        monkeypatch.setattr(os, "scandir", scandir)
    return setup


def _deny_open(name: str):
    """Simulated unreadable file (root ignores chmod): os.open raises EACCES for it."""
    def setup(t: Path, monkeypatch) -> None:
        target = str(t / "model" / name)
        real_open = os.open

        def fake_open(p, flags, *a, **kw):
            if os.path.abspath(os.fspath(p)) == target:
                raise PermissionError(13, "Permission denied", os.fspath(p))
            return real_open(p, flags, *a, **kw)
        monkeypatch.setattr(os, "open", fake_open)
    return setup


for _cmd in ("memory", "inventory", "perf"):
    case(f"perm-unlistable-dir-{_cmd}", lambda t, c=_cmd: [c, checkpoint(t)], needles=("cannot list",),
         setup=_deny_listdir(lambda t: t / "model"))
    case(f"perm-unreadable-shard-{_cmd}", lambda t, c=_cmd: [c, checkpoint(t)],
         needles=("model-00001-of-00002.safetensors", "Permission denied"),
         setup=_deny_open("model-00001-of-00002.safetensors"))
    case(f"perm-unreadable-config-{_cmd}", lambda t, c=_cmd: [c, checkpoint(t)],
         needles=("config.json", "Permission denied"), setup=_deny_open("config.json"))


# ============================================================================ 10. flags
def _synth_base(t):
    return ["synth", t / "out", "--model", model_dir(t)]


COMMANDS: dict[str, tuple[click.Command, Callable[[Path], list[str]]]] = {}


def _commands() -> None:
    from auditor.cli import cli
    kernels = cli.commands["kernels"]
    COMMANDS.update({
        "memory": (cli.commands["memory"], lambda t: ["memory", model_dir(t)]),
        "inventory": (cli.commands["inventory"], lambda t: ["inventory", checkpoint(t)]),
        "synth": (cli.commands["synth"], _synth_base),
        "perf": (cli.commands["perf"], lambda t: ["perf", model_dir(t)]),
        "sweep": (cli.commands["sweep"], lambda t: ["sweep", model_dir(t)]),
        "calibrate": (cli.commands["calibrate"], lambda t: ["calibrate", _scenarios(t), "-o", t / "dev.json"]),
        "kernels-import": (kernels.commands["import"], lambda t: ["kernels", "import", _details(t), "-o", t / "k.csv"]),
        "plan": (cli.commands["plan"], _plan),
        "align": (cli.commands["align"], lambda t: ["align", model_dir(t), "--log", t / "engine.log",
                                                    "--output-dir", t / "ticket"]),
        "kernels-lookup": (kernels.commands["lookup"], lambda t: ["kernels", "lookup", t / "nope.csv", "mm", "1,2"]),
    })


_commands()
SIZE_OPTIONS = {"--observed", "--budget", "--shard-size"}
GRID_OPTIONS = {"--tp", "--dp", "--tokens", "--context", "--batch", "--mtp", "--dies"}
BAD_SIZES = {"empty": "", "blank": "   ", "400-nines": "9" * 400 + "GiB", "1e309": "1e309GiB", "negative": "-1GiB",
             "no-unit": "12", "bad-unit": "12XB", "nan": "nan GiB", "past-1EiB": "9" * 30 + "TiB", "words": "lots"}
BAD_INTS = {"word": "abc", "float": "1.5", "empty": "", "400-nines": "9" * 400, "hex": "0x10"}
BAD_GRIDS = {"empty": "", "commas": ",,", "words": "a,b", "zero-or-negative": "-1", "huge": "99999999999",
             "float": "1.5"}

for _cname, (_cmd, _base) in COMMANDS.items():
    case(f"flags-{_cname}-unknown-option", lambda t, b=_base: [*b(t), "--no-such-option"], needles=("--no-such-option",))
    case(f"flags-{_cname}-extra-argument", lambda t, b=_base: [*b(t), "extra1", "extra2"])
    case(f"flags-{_cname}-help", lambda t, b=_base: [*b(t), "--help"], expect="ok")
    for _p in _cmd.params:
        if not isinstance(_p, click.Option) or _p.is_flag or _p.name in ("help",):
            continue
        _o = _p.opts[0]
        if isinstance(_p.type, (click.types.IntParamType,)) or isinstance(_p.type, click.IntRange):
            for _lab, _val in BAD_INTS.items():
                case(f"flags-{_cname}{_o}-{_lab}", lambda t, b=_base, o=_o, v=_val: [*b(t), o, v], needles=(_o,))
            if isinstance(_p.type, click.IntRange):
                if _p.type.min is not None:
                    case(f"flags-{_cname}{_o}-below-min", lambda t, b=_base, o=_o, v=_p.type.min - 1: [*b(t), o, v],
                         needles=(_o,))
                if _p.type.max is not None:
                    case(f"flags-{_cname}{_o}-past-max", lambda t, b=_base, o=_o, v=_p.type.max + 1: [*b(t), o, v],
                         needles=(_o,))
        elif isinstance(_p.type, click.Choice):
            for _lab, _val in {"bogus": "bogus", "empty": ""}.items():
                case(f"flags-{_cname}{_o}-choice-{_lab}", lambda t, b=_base, o=_o, v=_val: [*b(t), o, v], needles=(_o,))
        elif _o in SIZE_OPTIONS:
            for _lab, _val in BAD_SIZES.items():
                case(f"flags-{_cname}{_o}-size-{_lab}", lambda t, b=_base, o=_o, v=_val: [*b(t), o, v], needles=(_o,))
        elif isinstance(_p.type, click.FloatRange):
            for _lab, _val in {"word": "abc", "empty": "", "nan": "nan", "inf": "inf", "zero": "0", "negative": "-1",
                               "huge": "1e309"}.items():
                case(f"flags-{_cname}{_o}-{_lab}", lambda t, b=_base, o=_o, v=_val: [*b(t), o, v], needles=(_o,))
        elif _cname in ("sweep", "plan") and _o in GRID_OPTIONS:
            for _lab, _val in BAD_GRIDS.items():
                case(f"flags-{_cname}{_o}-grid-{_lab}", lambda t, b=_base, o=_o, v=_val: [*b(t), o, v], needles=(_o,))

# missing arguments and required options
case("flags-align-no-evidence", lambda t: ["align", model_dir(t), "--output-dir", t / "ticket"], needles=("--log",))
case("flags-align-tolerance-words", lambda t: ["align", model_dir(t), "--log", t / "x.log", "--output-dir", t / "tk",
                                              "--tolerance", "lots"], needles=("--tolerance",))
case("flags-synth-missing-out-dir", lambda t: ["synth"], needles=("OUT_DIR",))
case("flags-calibrate-missing-csv", lambda t: ["calibrate", "-o", t / "x.json"], needles=("MEASUREMENTS",))
case("flags-calibrate-missing-output", lambda t: ["calibrate", _scenarios(t)], needles=("--output",))
case("flags-kernels-import-missing-output", lambda t: ["kernels", "import", _details(t)], needles=("--output",))
case("flags-kernels-lookup-missing-key", lambda t: ["kernels", "lookup", t / "x.csv", "mm"], needles=("KEY",))
case("flags-option-missing-value", lambda t: ["memory", model_dir(t), "--tp"], needles=("--tp",))
case("flags-unknown-command", lambda t: ["memroy"], needles=("memroy",))
case("flags-unknown-kernels-command", lambda t: ["kernels", "export"], needles=("export",))
case("flags-top-level-help", lambda t: ["--help"], expect="ok")
case("flags-no-arguments", lambda t: [], expect="ok")
case("flags-version", lambda t: ["--version"], expect="ok")

# the named flag cases
case("flags-max-num-batched-tokens-0", lambda t: ["memory", model_dir(t), "--max-num-batched-tokens", "0"],
     needles=("--max-num-batched-tokens",))
case("flags-max-num-batched-tokens-negative", lambda t: ["memory", model_dir(t), "--max-num-batched-tokens", "-5"],
     needles=("--max-num-batched-tokens",))
case("flags-perf-max-num-batched-tokens-0", lambda t: ["perf", model_dir(t), "--max-num-batched-tokens", "0"],
     needles=("--max-num-batched-tokens",))
case("flags-memory-pp-past-layers", lambda t: ["memory", model_dir(t), "--pp", "3"], needles=("--pp", "2 decoder layers"))
case("flags-perf-pp-past-layers", lambda t: ["perf", model_dir(t), "--pp", "3"], needles=("--pp",))
case("flags-memory-pp-preset-79", lambda t: ["memory", "glm-5.1", "--pp", "79"], needles=("--pp", "78 decoder layers"))
case("flags-memory-pp-equal-layers", lambda t: ["memory", model_dir(t), "--pp", "2"], expect="ok")
case("flags-budget-empty", lambda t: ["memory", model_dir(t), "--budget", ""], needles=("--budget", "empty"))
case("flags-observed-empty", lambda t: ["memory", model_dir(t), "--observed", ""], needles=("--observed",))
case("flags-budget-zero", lambda t: ["memory", model_dir(t), "--budget", "0GiB"], needles=("--budget",))
case("flags-budget-exceeded", lambda t: ["memory", model_dir(t), "--budget", "1KiB"], expect="budget")
case("flags-budget-met", lambda t: ["memory", model_dir(t), "--budget", "1TiB"], expect="ok")
case("flags-size-400-nines-observed", lambda t: ["memory", model_dir(t), "--observed", "9" * 400 + "GiB"],
     needles=("--observed",))
case("flags-synth-shard-size-1KiB", lambda t: ["synth", t / "out", "--shard-size", "1KiB"],
     needles=("--allow-many-files", f"{SYNTH_MAX_FILES:,}"))
case("flags-synth-shard-size-zero", lambda t: ["synth", t / "out", "--shard-size", "0B"], needles=("--shard-size",))
case("flags-ep-not-dp-x-tp", lambda t: ["memory", model_dir(t), "--tp", "2", "--ep", "3"], needles=("--ep",))
case("flags-world-past-cap", lambda t: ["memory", model_dir(t), "--tp", "65536", "--dp", "2"], needles=("--tp",))
case("flags-sweep-grid-past-cap", lambda t: ["sweep", model_dir(t), "--tokens", ",".join(map(str, range(1, 201))),
                                            "--context", ",".join(map(str, range(200))), "--batch",
                                            ",".join(map(str, range(1, 301)))], needles=("configurations",))
case("flags-layer-sharding-bogus", lambda t: ["memory", model_dir(t), "--layer-sharding", "bogus"],
     needles=("--layer-sharding",))
case("flags-device-unknown", lambda t: ["perf", model_dir(t), "--device", "nosuch"], needles=("--device",))
case("flags-device-not-json", lambda t: ["perf", model_dir(t), "--device", _details(t)], needles=("kernel_details",))
case("flags-measured-missing", lambda t: ["perf", model_dir(t), "--measured", t / "nope.csv"], needles=("--measured",))
case("flags-calibrate-fit-bogus", lambda t: ["calibrate", _scenarios(t), "--fit", "bogus", "-o", t / "d.json"],
     needles=("--fit",))
case("flags-calibrate-model-unknown", lambda t: ["calibrate", _scenarios(t), "--model", "nosuch", "-o", t / "d.json"],
     needles=("nosuch",))
case("flags-kernels-map-bad", lambda t: ["kernels", "import", _details(t), "-o", t / "k.csv", "--map", "novalue"],
     needles=("--map",))
case("flags-kernels-lookup-key-words", lambda t: ["kernels", "lookup", _details(t), "mm", "a,b"], needles=("KEY",))
case("flags-model-missing-dir", lambda t: ["memory", t / "nope" / "model"], needles=("no such directory",))
case("flags-model-is-file", lambda t: ["memory", _details(t)], needles=("not a directory",))
case("flags-model-unknown-preset", lambda t: ["memory", "glm-9"], needles=("glm-9",))
case("flags-mtp-without-drafter", lambda t: ["perf", model_dir(t), "--mtp", "1", "--no-mtp-drafter"], needles=("--mtp",))


# ============================================================================ the runner
def test_case_count() -> None:
    """The regression set is at least 400 named cases (issue 8's 'done when')."""
    assert len(CASES) >= 400, len(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_cli(name: str, tmp_path: Path, capfd, monkeypatch) -> None:
    c = CASES[name]
    argv = c.build(tmp_path)
    model = tmp_path / "model"
    before = fingerprint(model)
    if c.setup is not None:
        c.setup(tmp_path, monkeypatch)
    run = run_in_process(argv, capfd)
    monkeypatch.undo()
    check_contract(run, c.expect, c.needles)
    assert fingerprint(model) == before, f"the model directory changed: {argv}"


# ---------------------------------------------------------------------------- written results
def test_output_replaces_atomically_and_keeps_mode(tmp_path: Path, capfd) -> None:
    model = model_dir(tmp_path)
    out = tmp_path / "r.json"
    out.write_text("old")
    os.chmod(out, 0o640)
    run = run_in_process(["memory", model, "--format", "json", "-o", out], capfd)
    check_contract(run, "ok")
    assert json.loads(out.read_text())["tool"] == "audit memory"
    assert oct(out.stat().st_mode & 0o777) == oct(0o640)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []     # no temp file left


def test_output_through_symlink_writes_the_target(tmp_path: Path, capfd) -> None:
    model = model_dir(tmp_path)
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    check_contract(run_in_process(["memory", model, "-o", link], capfd), "ok")
    assert link.is_symlink() and real.read_text().startswith("audit memory")


def test_failed_write_leaves_old_file(tmp_path: Path, capfd, monkeypatch) -> None:
    """ENOSPC in the middle of a write (simulated: fsync fails) leaves the old report whole."""
    model = model_dir(tmp_path)
    out = tmp_path / "r.txt"
    out.write_text("old report\n")

    def no_space(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", no_space)
    run = run_in_process(["memory", model, "-o", out], capfd)
    monkeypatch.undo()
    check_contract(run, "error", ("No space left on device", str(out)))
    assert out.read_text() == "old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "r.txt"]


def test_png_to_dev_full_is_not_reported_as_written(tmp_path: Path, capfd) -> None:
    run = run_in_process(["memory", model_dir(tmp_path), "--png", "/dev/full"], capfd)
    check_contract(run, "error", ("/dev/full", "No space left"))
    assert "wrote" not in run.err


def test_synth_file_cap_and_confirmation(tmp_path: Path) -> None:
    """The cap counts files before any is written; max_files=None (--allow-many-files) lifts it."""
    from auditor.errors import AuditInputError
    from auditor.synth import synthesize
    model = model_dir(tmp_path)
    with pytest.raises(AuditInputError, match="--allow-many-files"):
        synthesize(tmp_path / "a", str(model), "bf16", shard_bytes=1024, max_files=3)
    assert not (tmp_path / "a").exists()
    res = synthesize(tmp_path / "b", str(model), "bf16", shard_bytes=1024, max_files=None)
    assert len(res.files) > 3


# ---------------------------------------------------------------------------- help
def _walk(cmd: click.Command, path: str):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _walk(sub, f"{path} {name}")


def test_every_option_has_help() -> None:
    from auditor.cli import cli
    missing = [f"{path} {p.opts[0]}" for path, cmd in _walk(cli, "audit") for p in cmd.params
               if isinstance(p, click.Option) and not (p.help or "").strip()]
    assert missing == []


def test_command_list_shows_whole_summaries(capfd) -> None:
    """`audit --help` lists every command with its full one-line summary: click cuts a summary it
    derives from the docstring at ~45 characters with '...'."""
    from auditor.cli import cli
    for path, cmd in [("audit", cli), ("audit kernels", cli.commands["kernels"])]:
        run = run_in_process([*path.split()[1:], "--help"], capfd)
        listing = run.out.split("Commands:", 1)[1]
        assert run.rc == 0 and "..." not in listing, run.out
        for name, sub in cmd.commands.items():
            assert sub.short_help, f"{path} {name} has no short_help"
            line = next(l for l in run.out.splitlines() if l.strip().startswith(name + " "))
            assert line.split(None, 1)[1].strip() == sub.short_help, line


# ---------------------------------------------------------------------------- out of process
OOP_CASES = ["config-index_topk-string", "config-rope_scaling.factor-list", "config-seen-num_hidden_layers-1e9-memory",
             "output-memory--png-dev-full", "output-memory--output-symlink-loop", "output-synth-OUT_DIR-proc-new",
             "flags-memory--tp-word", "flags-memory--role-choice-bogus", "flags-synth-missing-out-dir",
             "flags-memory-unknown-option", "flags-size-400-nines-observed", "flags-budget-empty",
             "flags-synth-shard-size-1KiB", "flags-budget-exceeded", "config-accept-dsa-memory"]


@pytest.mark.parametrize("name", OOP_CASES)
def test_hostile_cli_out_of_process(name: str, tmp_path: Path) -> None:
    c = CASES[name]
    assert c.setup is None
    argv = c.build(tmp_path)
    before = fingerprint(tmp_path / "model")
    run = run_out_of_process(argv)
    check_contract(run, c.expect, c.needles)
    assert fingerprint(tmp_path / "model") == before


# ---------------------------------------------------------------------------- real permissions
NOBODY = 65534


def _can_switch_user() -> bool:
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


@pytest.fixture
def world_dir():
    """A directory uid nobody can reach (pytest's tmp_path is root-only)."""
    d = Path(tempfile.mkdtemp(prefix="audit-perm-"))
    os.chmod(d, 0o755)
    yield d
    for p in d.rglob("*"):
        if p.is_dir() and not p.is_symlink():
            os.chmod(p, 0o755)
    shutil.rmtree(d, ignore_errors=True)


PERM_CASES = {
    # name: (mode changes {relpath: mode}, command, needles)
    "dir-000": ({"model": 0o000}, "inventory", ("cannot list",)),
    "dir-search-only": ({"model": 0o311}, "inventory", ("cannot list",)),      # -wx: config readable, not listable
    "dir-list-only": ({"model": 0o444}, "inventory", ("Permission denied",)),
    "shard-000": ({"model/model-00001-of-00002.safetensors": 0o000}, "inventory",
                  ("model-00001-of-00002.safetensors", "Permission denied")),
    "config-000": ({"model/config.json": 0o000}, "memory", ("config.json", "Permission denied")),
    "shard-000-memory": ({"model/model-00002-of-00002.safetensors": 0o000}, "memory",
                         ("model-00002-of-00002.safetensors",)),
}


@pytest.mark.skipif(not _can_switch_user(), reason="needs root and setpriv to run as uid nobody")
@pytest.mark.parametrize("name", sorted(PERM_CASES))
def test_real_permissions(name: str, world_dir: Path) -> None:
    """Real EACCES: the command runs as uid nobody on a root-owned checkpoint with modes removed
    (chmod does not stop root, so in-process cases above can only simulate it)."""
    modes, cmd, needles = PERM_CASES[name]
    tiny_checkpoint(world_dir / "model")
    for rel, mode in modes.items():
        os.chmod(world_dir / rel, mode)
    run = run_out_of_process([cmd, world_dir / "model"], user=NOBODY, cwd=Path("/"))
    check_contract(run, "error", needles)
    assert "SYNTHESIZED" not in run.out


@pytest.mark.skipif(not _can_switch_user(), reason="needs root and setpriv to run as uid nobody")
@pytest.mark.parametrize("what", ["--output", "--png", "synth"])
def test_real_readonly_dir(what: str, world_dir: Path) -> None:
    """A directory uid nobody may not write (root-owned 0755): one line, nothing written."""
    ro = world_dir / "ro"
    ro.mkdir()
    os.chmod(ro, 0o755)
    argv = ["synth", ro / "out", "--model", "dense-32b"] if what == "synth" else ["memory", what, ro / "r.out"]
    run = run_out_of_process(argv, user=NOBODY, cwd=Path("/"))
    check_contract(run, "error", ("not writable",))
    assert list(ro.iterdir()) == []
