"""Click options shared by every command (parallel plan, engine, recipe, output format) and the
one place a report is written."""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Callable

import click

from ..engines.registry import DEFAULT_ENGINE, as_engine, engine_help
from ..errors import AuditInputError
from ..limits import FLOAT_OPTION_CAPS, OPTION_CAPS
from ..model.recipes import RECIPES
from ..outputs import check_output_path, when_written, write_output
from ..parallel import ParallelPlan
from ..switches import BY_FIELD, SWITCHES, Switch
from .vocabulary import ExpertParallel, Length, ep_size

FORMATS = ("table", "markdown", "json", "csv")


class FiniteFloatRange(click.FloatRange):
    """A real-valued option in (lo, hi], refusing nan and inf (which every comparison lets through)."""

    def convert(self, value, param, ctx):
        import math
        v = super().convert(value, param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return v


class NonEmptyPath(click.Path):
    """A path option that refuses the empty string (``pathlib.Path("")`` is the current directory: an
    ``--output-dir ''`` would write the ticket into wherever the command runs)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail("empty path", param, ctx)
        return super().convert(value, param, ctx)


def capped_float(option: str) -> click.FloatRange:
    """A real-valued option within (lo, hi] (auditor.limits.FLOAT_OPTION_CAPS)."""
    lo, hi = FLOAT_OPTION_CAPS[option]
    return FiniteFloatRange(lo, hi, min_open=True)


def capped(option: str) -> click.IntRange:
    """An integer option within its plausibility cap (auditor.limits.OPTION_CAPS)."""
    cap = OPTION_CAPS[option]
    return click.IntRange(cap.lo, cap.hi)


#: vLLM's default --max-num-batched-tokens where a command does not search it (ParallelPlan's own)
DEFAULT_BATCHED_TOKENS = ParallelPlan.max_num_batched_tokens


def switch_option(sw: Switch, **override: Any) -> Callable[[Callable], Callable]:
    """The click option of one deployment switch, from its one declaration (``auditor.switches``).
    ``override`` is a command's own reading (plan's ``--dcp`` defaults to "searched"); the help-walking
    test lists every override."""
    kw: dict[str, Any] = {"default": sw.default, "help": sw.help, "show_default": sw.show_default}
    if sw.kind == "size":
        kw["type"] = capped(sw.option)
    elif sw.kind == "range":
        kw["type"] = click.IntRange(*sw.lo_hi)
    elif sw.kind == "length":
        kw["type"] = Length(sw.option)
    elif sw.kind == "ep":
        kw["type"] = ExpertParallel()
    if sw.metavar:
        kw["metavar"] = sw.metavar
    kw.update(override)
    decls = [f"{sw.option}/--no-{sw.option[2:]}"] if sw.kind in ("flag", "tristate") else [sw.option]
    return click.option(*decls, sw.field, **kw)


def batched_tokens_option() -> Callable[[Callable], Callable]:
    """``--max-num-batched-tokens`` for a command that takes it outside ``plan_options`` (``sweep``)."""
    return switch_option(BY_FIELD["max_num_batched_tokens"])


def plan_options(f: Callable) -> Callable:
    """--tp --dp --ep --pp --sp --dsa-cp --engine --role --mtp ... -> kwargs['plan'], kwargs['engine'].
    The deployment switches come from ``auditor.switches`` (group "plan"), in its order."""
    switches = [switch_option(sw) for sw in SWITCHES if sw.group == "plan"]
    at = [sw.field for sw in SWITCHES if sw.group == "plan"].index("dsa_cp") + 1
    opts = switches[:at] + [
        engine_option(),
        click.option("--role", type=click.Choice(["mixed", "prefill", "decode"]), default="mixed",
                     show_default=True, help="prefill = kv_producer, decode = kv_consumer, mixed = no kv transfer"),
        click.option("--mtp-drafter/--no-mtp-drafter", "mtp_drafter", default=None,
                     help="MTP drafter loaded (memory: default off; perf: on when --mtp K > 0)"),
        # what a launch's --speculative-config method was (cli.deployment writes it): checked against the
        # checkpoint's drafter (parallel.check_drafter); hidden, a launch's own spelling
        click.option("--speculative-method", "speculative_method", type=click.Choice(["mtp", "dspark"]),
                     default=None, hidden=True,
                     help="a launch's --speculative-config method (mtp or dspark), checked against the "
                          "checkpoint's own drafter"),
    ] + switches[at:]

    @functools.wraps(f)
    def wrapper(*args, **kw):
        given = {sw.field: kw.pop(sw.field) for sw in SWITCHES if sw.group == "plan"}
        given["layer_sharding"] = tuple(x.strip() for x in given["layer_sharding"].split(",") if x.strip())
        given["ep"] = ep_size(given["ep"], given["tp"], given["dp"])
        method = kw.pop("speculative_method")
        plan = ParallelPlan(**given, role=kw.pop("role"), mtp=bool(kw.get("mtp_drafter")),
                            extra={"speculative_method": method} if method else {})
        kw["plan"] = plan
        return f(*args, **kw)

    for opt in reversed(opts):
        wrapper = opt(wrapper)
    return wrapper


def _check_engine(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Validate ``--engine`` now (one-line error) and say on stderr which profile a version
    resolves to; the text itself is passed on, so the report can carry the same note."""
    eng = as_engine(value)
    if eng.note:
        click.echo(f"audit: note: {eng.note}", err=True)
    return eng


class LazyHelpOption(click.Option):
    """An option whose help text is computed when read: ``--engine``'s lists every family's profiles,
    which would import every engine folder at start-up for a command that runs one engine."""

    def __init__(self, *args: Any, help_text: Callable[[], str], **kw: Any) -> None:
        self._help_text = help_text
        super().__init__(*args, **kw)

    @property
    def help(self) -> str:                # type: ignore[override]
        return self._help_text()

    @help.setter
    def help(self, value: Any) -> None:   # click's constructor assigns it; the text is computed instead
        pass


def engine_option() -> Callable[[Callable], Callable]:
    """``--engine vllm-ascend@X.Y[.Z][rcN] | main`` (resolution: ``engines.registry``): the resolved Engine is passed down."""
    return click.option("--engine", default=DEFAULT_ENGINE, show_default=True, callback=_check_engine,
                        metavar="FAMILY@VERSION", cls=LazyHelpOption, help_text=engine_help)


#: per-draft MTP acceptance where no public measurement exists for a model family (auditor.perf.acceptance)
DEFAULT_ACCEPTANCE = 0.7


class AcceptanceValue(click.ParamType):
    """``A`` (per-draft acceptance) or ``p1,p2,...`` (acceptance rate per draft position)."""

    name = "A|P1,P2,..."

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if not isinstance(value, str):
            return value
        lo, hi = FLOAT_OPTION_CAPS["--mtp-acceptance"]
        try:
            parts = [float(p) for p in value.split(",")]
        except ValueError:
            self.fail(f"{value[:40]!r} is not a number or a comma list of numbers", param, ctx)
        if len(parts) > 16 or any(not (lo < p <= hi) for p in parts):
            self.fail(f"{value[:40]!r}: each value must be in ({lo:g}, {hi:g}] (at most 16)", param, ctx)
        return parts[0] if len(parts) == 1 else tuple(parts)


def acceptance_option(f: Callable) -> Callable:
    """``--mtp-acceptance A | P1,P2,...``: one name and range for perf, sweep, plan and bench; the default is
    the model family's published measurement (``auditor.perf.acceptance``)."""
    return click.option("--mtp-acceptance", "acceptance", type=AcceptanceValue(), default=None,
                        help="MTP acceptance: one per-draft a (a step yields 1 + a + ... + a^K tokens) or the "
                             "rate per draft position p1,p2,... (1 + p1 + ... + pK); default: the engine's public "
                             "measurement for the model family, split geometrically: GLM on vllm-ascend 3.16 "
                             "tokens/step at MTP 3 (vLLM-Ascend #9803), GLM on vllm (CUDA) 1.64 at MTP 3 "
                             "(vllm-project/recipes GLM5.md, GPU-19); else 0.7 per draft")(f)


def output_options(f: Callable) -> Callable:
    """``--format``, ``--output`` and ``--quiet`` (every command that writes a report takes all three)."""
    return formats_options(FORMATS)(f)


def formats_options(formats: tuple[str, ...]) -> Callable[[Callable], Callable]:
    """``output_options`` for a command that renders only ``formats`` (it lists no format it cannot write)."""
    def deco(f: Callable) -> Callable:
        from .feedback import quiet_option
        f = quiet_option(f)
        f = click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
                         help="write the report to FILE instead of stdout ('-': stdout)")(f)
        return click.option("--format", "fmt", type=click.Choice(formats), default="table", show_default=True,
                            help="report format")(f)
    return deco


def is_stdout(output: Path | None) -> bool:
    """``--output -`` (or none) means stdout, as everywhere on the command line."""
    return output is None or str(output) == "-"


def emit(text: str, output: Path | None) -> None:
    """Print a report or write it to --output (never into a model directory by accident: the
    path is the user's explicit choice)."""
    if is_stdout(output):
        click.echo(text, nl=not text.endswith("\n"))
    else:
        write_output(output, text if text.endswith("\n") else text + "\n", "--output")
        when_written(lambda: click.echo(f"wrote {output}", err=True))


def _is_dir(path: str) -> bool:
    try:
        return Path(path).is_dir()
    except OSError:
        return False


def recipe_option(help_text: str) -> Callable[[Callable], Callable]:
    """``--recipe`` (one vocabulary for every command; ``--quant`` is kept as an alias)."""
    return click.option("--recipe", "--quant", "recipe", type=click.Choice(RECIPES), default=None, help=help_text)


def guard_output(output: Path | None, model: str | None, what: str = "--output") -> None:
    """Check an output target before any work: writable (auditor.outputs rules), and never inside
    the model directory (audit is read-only on checkpoints)."""
    if is_stdout(output) and what == "--output":
        return
    if output is None:
        return
    check_output_path(output, what)
    refuse_model_dir(output, model)


def refuse_model_dir(output: Path, model: str | None) -> None:
    """audit is read-only on checkpoints: nothing it writes may land inside the model directory."""
    if model is None or not _is_dir(model):
        return
    out = output.resolve()
    mdir = Path(model).resolve()
    if mdir == out.parent or mdir in out.parents:
        raise AuditInputError(output, "refusing to write into the model directory (audit never modifies a "
                                      "checkpoint); choose another --output")


def async_option(f: Any) -> Any:
    """``--async-scheduling``: vLLM's async scheduler, the per-step host work overlapped (bench, perf)."""
    return click.option("--async-scheduling/--no-async-scheduling", "async_scheduling", default=False,
                        help="vLLM --async-scheduling: each step's scheduling and input preparation (step_ms) "
                             "overlap the device step by the profile's async_overlap share (bench, perf)")(f)


def draft_eager_option(f: Any) -> Any:
    """``--draft-eager``: the MTP drafter runs eager behind a replayed decode graph (bench, perf)."""
    return click.option("--draft-eager/--no-draft-eager", "draft_eager", default=False,
                        help="the MTP drafter runs eager (speculative_config enforce_eager: true, read from a launch): "
                             "a graph decode step also launches the drafter's kernels one by one (bench, perf; "
                             "GLM's drafter is eager either way from vLLM-Ascend v0.23)")(f)


def graph_option(f: Any) -> Any:
    """``--graph-max-tokens``: the largest decode step replayed from a captured ACL graph (bench, perf)."""
    return click.option(
        "--graph-max-tokens", "graph_tokens", type=click.IntRange(-1, 1 << 20), default=-1, show_default=True,
        help="largest decode step (tokens per DP rank) replayed from a captured graph: vLLM's max of "
             "cudagraph_capture_sizes (read from --compilation-config); a larger decode step runs eager and "
             "pays the eager host cost; 0 = --enforce-eager; -1 = the engine's default when a launch names no "
             "sizes (vLLM-Ascend: min(max_num_seqs x (1 + K), 512, max_num_batched_tokens))")(f)


def finegrained_option(f: Callable) -> Callable:
    """``--finegrained-tp lmhead=16[,embedding=N]``: vLLM-Ascend's finegrained_tp_config on the plan
    (``auditor.finegrained``). Put it under ``@plan_options``: it edits ``kwargs['plan']``."""
    from dataclasses import replace

    @functools.wraps(f)
    def wrapper(*args, **kw):
        from ..finegrained import check, parse
        text = kw.pop("finegrained_tp")
        if text:
            sizes = parse(text)
            check(sizes, kw["plan"].dp, True)
            kw["plan"] = replace(kw["plan"], finegrained_tp=sizes)
        return f(*args, **kw)
    return switch_option(BY_FIELD["finegrained_tp"])(wrapper)


# ------------------------------------------------------------------ the benchmark client (bench)

#: audit's spelling of a client setting -> ``vllm bench serve``'s spelling of the same setting: both fill one
#: field of the bench workload, so a command line written for vLLM's client gives the report audit's gives
CLIENT_SPELLINGS: tuple[tuple[str, str], ...] = (
    ("--concurrency", "--max-concurrency"), ("--isl", "--random-input-len"), ("--osl", "--random-output-len"))

#: ``vllm bench serve --dataset-name`` values audit can model: the random dataset's fixed-length prompts
MODELLED_DATASETS = ("random",)


class RequestRate(click.ParamType):
    """``--request-rate``: ``inf`` (vLLM's default: every request at time 0, bounded by the concurrency) or a
    positive finite number of requests per second, at most 1e9. ``nan`` and numbers that overflow to
    infinity (``1e400``) are refused: only the word ``inf`` means all at once."""

    name = "inf|R"
    CAP = 1e9

    def convert(self, value, param, ctx):
        import math
        if isinstance(value, float):
            return value
        text = str(value).strip().lower()
        if text in ("inf", "+inf", "infinity", "+infinity"):
            return float("inf")
        try:
            v = float(text)
        except ValueError:
            self.fail(f"{str(value)[:40]!r} is not inf or a number of requests per second", param, ctx)
        if not math.isfinite(v):
            self.fail(f"{str(value)[:40]!r} is not a finite number (all at once is 'inf')", param, ctx)
        if not 0.0 < v <= self.CAP:
            self.fail(f"{v:g} is not in (0, {self.CAP:g}] requests/s (all at once is 'inf')", param, ctx)
        return v


def _one_setting(kw: dict, audit_name: str, vllm_name: str, what: str, required: bool) -> Any:
    """The value of one client setting given in audit's and/or vLLM's spelling (the same value if both)."""
    ours, theirs = kw.pop(_param_name(audit_name)), kw.pop(_param_name(vllm_name))
    if ours is not None and theirs is not None and ours != theirs:
        raise AuditInputError(f"{audit_name}/{vllm_name}",
                              f"{audit_name} {ours} and {vllm_name} {theirs} are both the {what}: give one value")
    value = ours if ours is not None else theirs
    if value is None and required:
        raise AuditInputError(audit_name, f"missing: the {what}; give {audit_name} or vllm bench serve's {vllm_name}")
    return value


def _param_name(option: str) -> str:
    return option[2:].replace("-", "_")


def client_options(f: Callable) -> Callable:
    """What the benchmark client sends, in audit's spellings or ``vllm bench serve``'s (``CLIENT_SPELLINGS``):
    -> kwargs ``concurrency``, ``isl``, ``osl``, ``num_prompts``, ``request_rate`` (None: inf). vLLM's
    ``--dataset-name`` is taken when it is ``random`` (fixed-length prompts: what bench models) and
    ``--random-range-ratio`` when it is 0 (every request exactly ``--isl``/``--osl`` tokens); any other value
    is refused by name, not modelled as something it is not."""
    what = {"--concurrency": "client's concurrency (requests in flight)",
            "--isl": "input tokens per request", "--osl": "output tokens per request"}
    opts = [
        click.option("--concurrency", type=capped("--concurrency"), default=None,
                     help="requests in flight at once (required; vLLM's spelling --max-concurrency)"),
        click.option("--max-concurrency", type=capped("--concurrency"), default=None,
                     help="vllm bench serve's name for --concurrency"),
        click.option("--isl", type=Length("--isl"), default=None,
                     help="input tokens per request (4096, 64k, 128K; required; vLLM's spelling --random-input-len)"),
        click.option("--random-input-len", type=Length("--isl"), default=None,
                     help="vllm bench serve's name for --isl"),
        click.option("--osl", type=Length("--osl"), default=None,
                     help="output tokens per request (ignore_eos; required; vLLM's spelling --random-output-len)"),
        click.option("--random-output-len", type=Length("--osl"), default=None,
                     help="vllm bench serve's name for --osl"),
        click.option("--num-prompts", type=capped("--num-prompts"), default=None,
                     help="requests (default: 4 x concurrency; vllm bench serve's own default is 1000)"),
        click.option("--request-rate", type=RequestRate(), default=None,
                     help="Poisson requests/s, or inf (default: all at once, bounded by --concurrency)"),
        click.option("--dataset-name", default="random", show_default=True,
                     help="vllm bench serve's dataset: only random (fixed-length random prompts) is modelled"),
        click.option("--random-range-ratio", type=FiniteFloatRange(0.0, 1.0, max_open=True), default=0.0,
                     show_default=True,
                     help="vllm bench serve's length spread: only 0 (every request exactly --isl/--osl tokens) is "
                          "modelled"),
    ]

    @functools.wraps(f)
    def wrapper(*args, **kw):
        for ours, theirs in CLIENT_SPELLINGS:
            kw[_param_name(ours)] = _one_setting(kw, ours, theirs, what[ours], required=True)
        dataset = kw.pop("dataset_name")
        if dataset not in MODELLED_DATASETS:
            shown = dataset if re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", dataset) else repr(dataset[:40])
            raise AuditInputError(f"--dataset-name {shown}", "audit models only the random dataset")
        ratio = kw.pop("random_range_ratio")
        if ratio != 0.0:
            raise AuditInputError(f"--random-range-ratio {ratio:g}",
                                  "audit models fixed lengths only (0: every request exactly --isl input and "
                                  "--osl output tokens)")
        return f(*args, **kw)

    for opt in reversed(opts):
        wrapper = opt(wrapper)
    return wrapper
