"""Evidence: the engine's own public deployments and what they measured, against audit's prediction.

``published.json`` (next to this file) holds one row per deployment, written from the public sources
each row cites: the launch in audit's flags (and vLLM's), the device, and what was observed (runs;
optionally the engine's weights / activation / non-torch / graph / KV figures, or its breakdown line).
``evaluate`` predicts every row with the HBM budget (``runtime.budget.rank_budget``, the same path
``audit memory`` takes, weights from ``runtime.weights.plan_weights``) and compares; ``render`` prints
ONE table (``audit evidence``). Tests assert each row's tolerance from the same file, so they never
need files outside the project.
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..context import DeploymentContext
from ..errors import AuditInputError
from ..units import GiB

CORPUS = Path(__file__).with_name("published.json")
#: tolerances the tests hold every row to
WEIGHTS_REL_TOL = 0.02
KV_AVAILABLE_REL_TOL = 0.10

_INT_FLAGS = {"--tp": "tp", "--dp": "dp", "--ep": "ep", "--pp": "pp", "--dcp": "dcp",
              "--max-model-len": "max_model_len", "--max-num-batched-tokens": "max_num_batched_tokens",
              "--max-num-seqs": "max_num_seqs", "--mtp": "mtp", "--hccl-buffsize": "hccl_buffsize_mb",
              "--fused-mc2": "fused_mc2"}
_STR_FLAGS = {"--recipe": "recipe", "--device": "device", "--role": "role", "--kv-cache-dtype": "kv_cache_dtype",
              "--engine": "engine", "--finegrained-tp": "finegrained_tp"}
_BOOL_FLAGS = {"--sp": ("sp", True), "--no-sp": ("sp", False), "--dsa-cp": ("dsa_cp", True),
               "--no-dsa-cp": ("dsa_cp", False)}


#: the plausibility cap (auditor.limits) each integer flag is held to; --fused-mc2 is vLLM-Ascend's 0/1/2
_INT_CAPS = {"--tp": "--tp", "--dp": "--dp", "--ep": "--ep", "--pp": "--pp", "--dcp": "--dcp",
             "--max-model-len": "--max-model-len", "--max-num-batched-tokens": "--max-num-batched-tokens",
             "--max-num-seqs": "--max-num-seqs", "--mtp": "--mtp", "--hccl-buffsize": "--hccl-buffsize"}
MAX_ROWS = 1_000                # rows of one evidence file (the project's: 24); each is one budget
#: observed figures in GiB a row may give (total and graph are recorded, not compared): (smallest, largest); only
#: the available KV may be negative
OBSERVED_GIB = {"weights_gib": (0.0, 16384.0), "activation_gib": (0.0, 16384.0), "non_torch_gib": (0.0, 16384.0),
                "kv_available_gib": (-16384.0, 16384.0), "total_gib": (0.0, 16384.0), "graph_gib": (0.0, 16384.0)}


def _flag_value(t: str, v: str, where: str) -> Any:
    """One flag's value, typed and within audit's plausibility caps (as the same option on the command line)."""
    import math

    from ..limits import FLOAT_OPTION_CAPS, OPTION_CAPS
    if t in _STR_FLAGS:
        return v
    if len(v) > 40 or not v.strip().lstrip("+-").replace(".", "", 1).isdigit() or not v.isascii():
        raise AuditInputError(where, f"{t} {v[:40]!r} is not a number")
    if t == "--gpu-memory-utilization":
        lo, hi = FLOAT_OPTION_CAPS[t]
        x = float(v)
        if not (math.isfinite(x) and lo < x <= hi):
            raise AuditInputError(where, f"{t} {v} is outside ({lo:g}, {hi:g}]")
        return x
    try:
        n = int(v)
    except ValueError:
        raise AuditInputError(where, f"{t} {v!r} is not a whole number") from None
    lo, hi = (0, 2) if t == "--fused-mc2" else (OPTION_CAPS[_INT_CAPS[t]].lo, OPTION_CAPS[_INT_CAPS[t]].hi)
    if not lo <= n <= hi:
        raise AuditInputError(where, f"{t} {v} is outside audit's plausible range {lo:,}..{hi:,}")
    return n


def parse_flags(text: str, where: str = "flags") -> dict[str, Any]:
    """audit's launch flags (the subset a deployment needs) -> a dict of values, each ranged as the
    same option on the command line."""
    try:
        toks = shlex.split(text)
    except ValueError as exc:
        raise AuditInputError(where, f"cannot split flags: {exc}") from None
    out: dict[str, Any] = {}
    i = 0
    while i < len(toks):
        t = toks[i]
        if t in _BOOL_FLAGS:
            key, val = _BOOL_FLAGS[t]
            out[key] = val
            i += 1
            continue
        if t in ("--gpu-memory-utilization",) or t in _INT_FLAGS or t in _STR_FLAGS:
            if i + 1 >= len(toks):
                raise AuditInputError(where, f"{t} needs a value")
            v = toks[i + 1]
            key = "util" if t == "--gpu-memory-utilization" else _INT_FLAGS.get(t) or _STR_FLAGS[t]
            out[key] = _flag_value(t, v, where)
            i += 2
            continue
        raise AuditInputError(where, f"unknown flag {t[:40]!r}")
    return out


@dataclass
class Row:
    id: str
    source: str
    model: str | None
    engine: str
    flags: dict[str, Any]
    vllm: str
    observed: dict[str, Any]
    hf_overrides: dict[str, Any] = field(default_factory=dict)
    engine_config: dict[str, Any] = field(default_factory=dict)
    breakdown: str | None = None
    weights_from_log: str | None = None      # why the logged weights replace audit's (the reason)


def load_corpus(path: str | Path | None = None) -> list[Row]:
    """The rows of an evidence file (default: the project's ``published.json``); bad input: one line
    naming the file."""
    from ..inputs import load_json
    path = Path(path) if path is not None else CORPUS
    doc = load_json(path, "evidence file", cap=8 << 20)
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise AuditInputError(path, "expected an object with a 'rows' list")
    if len(rows) > MAX_ROWS:
        raise AuditInputError(path, f"{len(rows):,} rows, over audit's cap of {MAX_ROWS:,} (each row is one budget)")
    out = []
    for n, r in enumerate(rows):
        where = f"{path}: rows[{n}]"
        if not isinstance(r, dict) or not isinstance(r.get("id"), str) or not isinstance(r.get("flags"), str):
            raise AuditInputError(where, "each row needs an 'id' and a 'flags' string")
        for key in ("model", "breakdown", "weights_from_log"):
            if r.get(key) is not None and not isinstance(r[key], str):
                raise AuditInputError(where, f"'{key}' must be a string")
        for key in ("source", "engine", "vllm"):
            if not isinstance(r.get(key, ""), str):
                raise AuditInputError(where, f"'{key}' must be a string")
        obs = r.get("observed", {})
        if not isinstance(obs, dict):
            raise AuditInputError(where, "'observed' must be an object")
        _check_observed(obs, where)
        for key in ("hf_overrides", "engine_config"):
            if not isinstance(r.get(key, {}), dict):
                raise AuditInputError(where, f"'{key}' must be an object")
        out.append(Row(r["id"], str(r.get("source", "")), r.get("model"), str(r.get("engine", "main")),
                       parse_flags(r["flags"], f"{where} ({r['id']}) flags"), str(r.get("vllm", "")), obs,
                       dict(r.get("hf_overrides", {})), dict(r.get("engine_config", {})), r.get("breakdown"),
                       r.get("weights_from_log")))
    return out


def _check_observed(obs: dict, where: str) -> None:
    """What a row says was observed: 'runs' a boolean, the GiB figures finite numbers in range, nothing else."""
    for key, v in obs.items():
        if key == "runs":
            if not isinstance(v, bool):
                raise AuditInputError(where, "observed.runs must be true or false")
            continue
        if key not in OBSERVED_GIB:
            raise AuditInputError(where, f"observed.{key[:40]} is not an observed figure audit knows (runs, "
                                         f"{', '.join(OBSERVED_GIB)})")
        lo, hi = OBSERVED_GIB[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise AuditInputError(where, f"observed.{key} must be a number of GiB")
        if not lo <= v <= hi:
            raise AuditInputError(where, f"observed.{key} {v:g} is outside the plausible range [{lo:g}, {hi:g}] GiB")


def predict(row: Row) -> dict[str, Any] | None:
    """audit's budget for a row's launch (None for a row audit does not predict: its model or version is not
    modelled, the row's ``model`` is null and its source says why)."""
    if row.model is None:
        return None
    from ..devices.profiles import load_device
    from ..engines.registry import as_engine
    from ..model.config import apply_hf_overrides, spec_from_config
    from ..model.presets import preset_config
    from ..model.recipes import DEFAULT_RECIPE
    from ..parallel import ParallelPlan
    from ..runtime.budget import rank_budget
    from ..runtime.weights import plan_weights

    f = row.flags
    cfg = preset_config(row.model)
    if row.hf_overrides:
        cfg = apply_hf_overrides(cfg, row.hf_overrides)
    spec = spec_from_config(cfg, name=row.model, where=f"evidence {row.id}")
    eng = as_engine(row.engine)
    recipe = f.get("recipe") or DEFAULT_RECIPE.get(row.model, "bf16")
    mtp = int(f.get("mtp", 0))
    T = int(f.get("max_num_batched_tokens", 8192))
    plan = ParallelPlan(tp=f.get("tp", 1), dp=f.get("dp", 1), ep=f.get("ep", 1), pp=f.get("pp", 1),
                        sp=f.get("sp", False), dsa_cp=f.get("dsa_cp"), role=f.get("role", "mixed"), mtp=mtp > 0,
                        max_num_batched_tokens=T, fused_mc2=f.get("fused_mc2", 0))
    if f.get("finegrained_tp"):
        from dataclasses import replace as _replace

        from ..finegrained import parse
        plan = _replace(plan, finegrained_tp=parse(f["finegrained_tp"], f"{row.id}: --finegrained-tp"))
    device = load_device(f.get("device", "a3-752t"))
    W = plan_weights(DeploymentContext(spec, plan, eng, recipe))
    if row.weights_from_log and row.observed.get("weights_gib"):
        W = float(row.observed["weights_gib"]) * GiB
    b = rank_budget(spec, plan, eng, weights_bytes=W, device=device, util=f.get("util", 0.9), recipe=recipe,
                    max_model_len=f.get("max_model_len"), max_num_seqs=f.get("max_num_seqs", 256),
                    max_num_batched_tokens=T, kv_cache_dtype=f.get("kv_cache_dtype", "bf16"), dcp=f.get("dcp", 1),
                    hccl_buffsize_mb=f.get("hccl_buffsize_mb", 200), mtp=mtp,
                    dsa_cp=f.get("dsa_cp") if f.get("dsa_cp") is not None else None,
                    prefill_mc2=bool(row.engine_config.get("enable_prefill_mc2", False)))
    unc = b.uncertainty()
    return {"fits": b.fits, "verdict": unc["verdict"], "weights_gib": b.weights_bytes / GiB,
            "activation_gib": b.activation_peak_bytes / GiB, "non_torch_gib": b.non_torch_bytes / GiB,
            "graph_gib": b.graph_deducted_bytes / GiB, "kv_available_gib": b.kv_available_bytes / GiB,
            "kv_available_low_gib": unc["kv_available_low_bytes"] / GiB,
            "kv_available_high_gib": unc["kv_available_high_bytes"] / GiB,
            "kv_tokens": b.kv_tokens, "max_concurrency": b.max_concurrency, "headroom_gib": b.headroom_bytes / GiB,
            "engine": eng.name, "recipe": recipe, "error": b.error()}


def check_breakdown(row: Row) -> dict[str, Any] | None:
    """A row's breakdown line: parsed, its own arithmetic (requested - W - A - N [- G] = KV), and audit's
    non-torch magnitude for the row's plan (only the groups a TP1/ALLGATHER profile run touches)."""
    if not row.breakdown:
        return None
    from ..engines.registry import as_engine
    from ..parallel import ParallelPlan

    eng = as_engine(row.engine)
    p = eng.parse_breakdown(row.breakdown)
    if p is None:
        raise AuditInputError(f"evidence {row.id}", "breakdown line not recognised")
    f = row.flags
    plan = ParallelPlan(tp=f.get("tp", 1), dp=f.get("dp", 1), ep=f.get("ep", 1))
    nt = eng.minimal_profile_non_torch_bytes(plan, hccl_buffsize_mb=f.get("hccl_buffsize_mb", 200)) / GiB
    kv = p["requested_gib"] - p["weights_gib"] - p["activation_gib"] - p["non_torch_gib"]
    return {"parsed": p, "kv_from_terms_gib": kv, "non_torch_gib": nt}


def evaluate(rows: list[Row] | None = None) -> list[dict[str, Any]]:
    """Prediction, observation and error of every row."""
    rows = load_corpus() if rows is None else rows
    out = []
    for r in rows:
        pred = predict(r)
        obs = dict(r.observed)
        err: dict[str, float] = {}
        if pred is not None:
            if "runs" in obs:
                err["fits_matches"] = float(pred["fits"] == bool(obs["runs"]))
            for key in ("weights_gib", "kv_available_gib"):
                if key == "weights_gib" and r.weights_from_log:
                    continue
                if obs.get(key):
                    err[key.replace("_gib", "_rel")] = pred[key] / obs[key] - 1
            for key in ("activation_gib", "non_torch_gib"):
                if obs.get(key) is not None:
                    err[key.replace("_gib", "_abs_gib")] = pred[key] - obs[key]
        bd = check_breakdown(r)
        if bd is not None:
            err["kv_arithmetic_gib"] = bd["kv_from_terms_gib"] - obs.get("kv_available_gib", bd["kv_from_terms_gib"])
            err["non_torch_abs_gib"] = bd["non_torch_gib"] - bd["parsed"]["non_torch_gib"]
        out.append({"id": r.id, "source": r.source, "model": r.model, "engine": r.engine, "predicted": pred,
                    "breakdown": bd, "observed": obs, "error": err})
    return out


def _g(x: Any) -> str:
    return "-" if x is None else f"{x:.2f}"


#: the table's width when stdout is not a terminal (a pipe, a file, the docs): one a reader's editor shows whole
DEFAULT_WIDTH = 100
#: narrower than this the columns cannot wrap any further (each wrappable column keeps ~6 characters)
MIN_WIDTH = 60


def table_width() -> int:
    """The terminal's width when stdout is one, else ``DEFAULT_WIDTH`` (so pipes, files and the generated
    docs are the same on every machine)."""
    import shutil
    import sys
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):
        tty = False
    cols = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns if tty else DEFAULT_WIDTH
    return max(MIN_WIDTH, cols)


def _wrap_cell(text: str, cap: int | None, hyphens: bool = False) -> str:
    import textwrap
    if cap is None or len(text) <= cap:
        return text
    return "\n".join(textwrap.wrap(text, cap, break_on_hyphens=hyphens)) or text


def _fit_table(body: list[list[str]], head: list[str], width: int, wrap: set[int]) -> str:
    """``tabulate`` with the wrappable columns narrowed (cells wrapped at spaces into lines of their own,
    no word broken; headers first, then the widest column a character at a time, so the long ones
    share what is left) until every line fits ``width``: at their natural widths the columns were 255
    characters wide. A table that cannot fit without breaking words is left wider."""
    import tabulate as tabulate_module
    from tabulate import tabulate

    cells = [[head[i]] + [str(r[i]) for r in body] for i in range(len(head))]

    def wrapped(i: int, cap: int | None) -> list[str]:
        return [_wrap_cell(c, cap, hyphens=(k == 0)) for k, c in enumerate(cells[i])]

    def col_width(i: int, cap: int | None) -> int:
        return max(len(ln) for c in wrapped(i, cap) for ln in c.split("\n"))

    # headers wrap before any cell does (a header may break after a hyphen: non-|torch)
    head_floor = {i: max(len(w) for w in re.split(r"(?<=-)|\s", head[i]) if w) for i in wrap}
    caps = {i: max([len(c) for c in cells[i][1:]] + [head_floor[i]]) for i in wrap}
    floor = {i: max([len(w) for c in cells[i][1:] for w in c.split()] + [head_floor[i]]) for i in wrap}
    widths = [col_width(i, caps.get(i)) for i in range(len(head))]
    while sum(widths) + 2 * (len(head) - 1) > width:
        shrinkable = [i for i in caps if widths[i] > floor[i]]
        if not shrinkable:
            return _records(body, head, width)
        i = max(shrinkable, key=lambda k: (widths[k], k))
        caps[i] = max(floor[i], min(caps[i], widths[i]) - 1)
        widths[i] = col_width(i, caps[i])
    rows = [[_wrap_cell(str(c), caps.get(i)) for i, c in enumerate(r)] for r in body]
    padding, tabulate_module.MIN_PADDING = tabulate_module.MIN_PADDING, 0      # no 2 spaces more per header
    try:
        return tabulate(rows, headers=[_wrap_cell(h, caps.get(i), hyphens=True) for i, h in enumerate(head)],
                        tablefmt="simple", disable_numparse=True)
    finally:
        tabulate_module.MIN_PADDING = padding


def _records(body: list[list[str]], head: list[str], width: int) -> str:
    """The rows as records, for a terminal too narrow for the table without breaking words: the row id,
    then ``column: value`` fields wrapped at the fields' separators under a hanging indent."""
    import textwrap
    ids = max(len(r[0]) for r in body)
    out = []
    for r in body:
        fields = [f"{h}: {v}".replace(" ", "\u00a0") for h, v in zip(head[1:], r[1:]) if h] + [r[-1]]
        text = textwrap.wrap(" | ".join(fields), width, initial_indent=f"{r[0]:<{ids}}  ",
                             subsequent_indent=" " * (ids + 2), break_on_hyphens=False)
        out += [ln.replace("\u00a0", " ") for ln in text]
    return "\n".join(out)


def _sources(results: list[dict[str, Any]], width: int) -> list[str]:
    """Each row's source in full on its own line(s), wrapped at spaces under a hanging indent."""
    import textwrap
    ids = max((len(r["id"]) for r in results), default=0)
    out = ["sources:"]
    for r in results:
        out += textwrap.wrap(r["source"], width=width, initial_indent=f"  {r['id']:<{ids}}  ",
                             subsequent_indent=" " * (ids + 4), break_on_hyphens=False) or [f"  {r['id']}"]
    return out


def render(results: list[dict[str, Any]], fmt: str = "table", width: int | None = None) -> str:
    """ONE table: row, prediction (fits, W/rank, activation, non-torch, KV available, KV tokens,
    concurrency, verdict over the UNCONFIRMED ranges), observed, error; every row's source in full
    below it. Long cells wrap so every line fits ``width`` (default: ``table_width()``)."""
    if fmt == "json":
        return json.dumps(results, indent=2, default=str) + "\n"
    width = table_width() if width is None else max(MIN_WIDTH, width)
    body = []
    for r in results:
        p, o, e, bd = r["predicted"], r["observed"], r["error"], r["breakdown"]
        obs = "runs" if o.get("runs") else "fails"
        # observed figures (GiB) under the error column's names: W, act, nt, KV
        nums = [f"{name} {o[k]:g}" for k, name in (("weights_gib", "W"), ("activation_gib", "act"),
                                                    ("non_torch_gib", "nt"), ("kv_available_gib", "KV"))
                if o.get(k) is not None]
        if nums:
            obs += "; " + ", ".join(nums)
        errs = []
        if "weights_rel" in e:
            errs.append(f"W {e['weights_rel']:+.1%}")
        if "kv_available_rel" in e:
            errs.append(f"KV {e['kv_available_rel']:+.1%}")
        if "activation_abs_gib" in e:
            errs.append(f"act {e['activation_abs_gib']:+.2f}")
        if "non_torch_abs_gib" in e:
            errs.append(f"nt {e['non_torch_abs_gib']:+.2f}")
        if "kv_arithmetic_gib" in e:
            errs.append(f"line arith {e['kv_arithmetic_gib']:+.2f}")
        if p is None:
            pred = ["(not modelled)", "-", "-", _g(bd["non_torch_gib"]) if bd else "-", "-", "-", "-"]
            ok = "ok" if abs(e.get("non_torch_abs_gib", 0)) < 0.2 else "off"
        else:
            pred = ["fits" if p["fits"] else "DOES NOT FIT", _g(p["weights_gib"]), _g(p["activation_gib"]),
                    _g(p["non_torch_gib"]), f"{p['kv_available_gib']:.2f} ({p['kv_available_low_gib']:.1f}-"
                    f"{p['kv_available_high_gib']:.1f})", f"{p['kv_tokens']:,}", f"{p['max_concurrency']:.2f}x"]
            ok = "ok" if e.get("fits_matches", 1.0) == 1.0 and abs(e.get("weights_rel", 0)) <= WEIGHTS_REL_TOL \
                and abs(e.get("kv_available_rel", 0)) <= KV_AVAILABLE_REL_TOL else "MISS"
        body.append([r["id"], *pred, obs, ", ".join(errs) or "-", ok])
    head = ["row", "audit", "W GiB/rank", "act", "non-torch", "KV avail (range)", "KV tokens", "conc",
            "observed", "error", ""]
    n_ok = sum(1 for b in body if b[-1] == "ok")
    table = _fit_table(body, head, width, wrap={1, 2, 4, 5, 6, 8, 9})
    summary = (f"{n_ok}/{len(body)} rows within tolerance (fits = runs; weights within {WEIGHTS_REL_TOL:.0%}, "
               f"KV available within {KV_AVAILABLE_REL_TOL:.0%} where logged)")
    import textwrap
    return "\n".join([table, "", *textwrap.wrap(summary, width), "", *_sources(results, width)]) + "\n"
