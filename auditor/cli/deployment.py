"""Deployment commands read a deployment the way vLLM writes it: its serve flags and ``--launch FILE``.

Why here and not in each command: everyone already has the deployment written down in vLLM's own
words (a ``vllm serve`` line in a launch script). Before click parses a deployment command, its
arguments are rewritten: ``--launch FILE`` and every vLLM spelling audit does not itself declare
(``--tensor-parallel-size 16``, ``--enable-expert-parallel``, ``--speculative-config '{...}'``,
``--additional-config '{...}'``, ``--kv-transfer-config '{...}'``, ...) are read by
``auditor.launch`` into audit's own options, placed before the user's own, so the report is
byte-identical to the one the equivalent short options give, and an option typed on the command
line wins over the script. A positional MODEL wins over the script's model path. The engine's
environment variables (``HCCL_BUFFSIZE``, ``VLLM_ASCEND_ENABLE_FLASHCOMM1``, ...) count when the
script exports them or the shell has them set. Settings that change neither memory nor time are
listed once on stderr; settings that would and are not modelled are named.
"""
from __future__ import annotations

import os
from typing import Any

import click

from ..errors import AuditInputError
from ..switches import SWITCHES

#: DeploymentOptions field -> (audit option, how its value is written): the deployment switches from their
#: one declaration (``auditor.switches``), then the runtime settings a launch also carries
_RENDER: tuple[tuple[str, str, str], ...] = tuple((sw.field, sw.option, sw.render) for sw in SWITCHES) + (
    ("role", "--role", "str"), ("mtp_drafter", "--mtp-drafter", "flag"),
    ("balance_scheduling", "--balance-scheduling", "flag"),
    ("util", "--gpu-memory-utilization", "float"), ("max_model_len", "--max-model-len", "int"),
    ("max_num_seqs", "--max-num-seqs", "int"), ("kv_cache_dtype", "--kv-cache-dtype", "str"),
    ("hccl_buffsize", "--hccl-buffsize", "int"), ("mtp", "--mtp", "int"),
    ("hf_overrides", "--hf-overrides", "json"), ("graph_tokens", "--graph-max-tokens", "int"),
    ("async_scheduling", "--async-scheduling", "flag"), ("draft_eager", "--draft-eager", "flag"),
    # hidden (plan_options): the method, checked against the checkpoint's drafter; never listed as unused
    ("speculative_method", "--speculative-method", "str"),
    # vLLM's --[no-]enable-prefix-caching: bench's client hits (an instance string's, read by bench per role)
    ("prefix_caching", "--prefix-caching", "flag"),
)
#: fields a command that has no option for them leaves out without a "not used" note: the method is
#: checked elsewhere, and prefix caching changes no memory or op time (only bench's hits)
_QUIET_WHERE_UNTAKEN = ("speculative_method", "prefix_caching")


def _declared(command: click.Command) -> dict[str, click.Parameter]:
    out: dict[str, click.Parameter] = {}
    for p in command.params:
        for name in list(getattr(p, "opts", [])) + list(getattr(p, "secondary_opts", [])):
            out[name] = p
    return out


#: options consumed before click parses (their values select from the --launch file)
_PICKS = ("--case", "--node")


def _split(args: list[str], command: click.Command) -> tuple[list[str], list[str], str | None, dict[str, str]]:
    """(audit's own arguments, vLLM-spelled arguments, the --launch path, --case / --node values)."""
    from ..launch.flags import RULES, canonical_flag
    declared = _declared(command)
    own: list[str] = []
    vllm: list[str] = []
    launch: str | None = None
    picks: dict[str, str] = {}
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--":
            own += args[i:]
            break
        head = tok.split("=", 1)[0]
        if head == "--launch" or head in _PICKS:
            if "=" in tok:
                value = tok.split("=", 1)[1]
            elif i + 1 < len(args):
                value = args[i + 1]
                i += 1
            else:
                raise AuditInputError(head, "needs a launch script or a file holding a vllm serve command"
                                      if head == "--launch" else "needs a value")
            if head == "--launch":
                launch = value
            else:
                picks[head] = value
            i += 1
            continue
        if tok.startswith("-") and head not in declared and len(tok) > 1 and not tok[1:2].isdigit():
            name, _ = canonical_flag(head)
            base = "--" + name[5:] if name.startswith("--no-") else name      # --no-X is X's boolean off
            rule = RULES.get(name) or RULES.get(base)
            if rule is not None:
                vllm.append(tok)
                takes_value = rule.kind not in ("bool",) and "=" not in tok and not name.startswith("--no-")
                if takes_value and i + 1 < len(args):
                    vllm.append(args[i + 1])
                    i += 1
                if rule.kind == "list" and "=" not in tok:       # further values up to the next flag
                    while i + 1 < len(args) and not args[i + 1].startswith("-"):
                        vllm.append(args[i + 1])
                        i += 1
                i += 1
                continue
        own.append(tok)
        i += 1
    return own, vllm, launch, picks


def _render(opts: Any, declared: dict[str, click.Parameter], skipped: list[str] | None = None) -> list[str]:
    """audit's own options for what the launch set; ``skipped`` collects what this command does not take."""
    import json
    out: list[str] = []
    skipped = [] if skipped is None else skipped
    for field, option, how in _RENDER:
        if field not in opts.explicit:
            continue
        value = getattr(opts, field)
        if how == "flag":
            if value is None:
                continue
            name = option if value else "--no-" + option[2:]
            if name in declared:
                out.append(name)
            elif field not in _QUIET_WHERE_UNTAKEN:
                skipped.append(name)
            continue
        if value is None:
            continue
        if option not in declared:
            if field not in _QUIET_WHERE_UNTAKEN:
                skipped.append(option)
            continue
        if how == "list":
            if value:
                out += [option, ",".join(value)]
        elif how == "json":
            if value:
                out += [option, json.dumps(value, sort_keys=True)]
        elif how == "pairs":
            if value:
                from ..finegrained import render
                out += [option, render(value)]
        else:
            out += [option, f"{value:g}" if how == "float" else str(value)]
    return out


def _engine_env() -> dict[str, str]:
    """The engine's environment variables the shell has set (the table's env rows)."""
    from ..launch.flags import ENV_RULES
    return {k: os.environ[k] for k in ENV_RULES if k in os.environ}


def _engine_arg(args: list[str]) -> str:
    """The --engine the command will run (click takes the last one given), else the default."""
    from .options import DEFAULT_ENGINE
    return _option_value(args, "--engine") or DEFAULT_ENGINE


def expand(args: list[str], command: click.Command) -> tuple[list[str], str | None]:
    """``args`` with --launch and vLLM spellings replaced by audit's options; and the launch's model."""
    if any(a in ("-h", "--help") for a in args):
        return args, None
    own, vllm, path, picks = _split(list(args), command)
    env = _engine_env()
    if path is not None:
        from ..launch.nightly import is_nightly      # the YAML reader: only for a --launch file
        if is_nightly(path):
            return _expand_nightly(own, vllm, path, picks, command, env)
    if picks:
        flag = next(iter(picks))
        raise AuditInputError(flag, "selects from a vLLM-Ascend nightly config: give --launch FILE.yaml")
    if not vllm and path is None and not env:
        return own, None
    from ..launch.records import Launch
    from ..launch.script import read_launch
    from ..launch.flags import to_options
    script = read_launch(path) if path is not None else None
    argv = tuple(script.argv if script else ()) + tuple(vllm)
    lines = tuple(script.arg_lines if script else ()) + (0,) * len(vllm)
    merged_env = dict(env)
    if script is not None:
        merged_env.update(script.env)
    where = str(path) if path is not None else "command line"
    launch = Launch(where=where, model=script.model if script else "", env=merged_env, argv=argv,
                    arg_lines=lines, env_lines=dict(script.env_lines) if script else {},
                    line=script.line if script else 0, program=script.program if script else "vllm serve",
                    notes=tuple(script.notes) if script else ())
    opts = to_options(launch, _engine_arg(own))
    _report(opts, where, sorted(set(env) - set(script.env if script else {})))
    skipped: list[str] = []
    rendered = _render(opts, _declared(command), skipped)
    if skipped:
        click.echo(f"audit: note: {where}: not used by `audit {command.name}`: {', '.join(skipped)}", err=True)
    return rendered + own, (opts.model or None)


_ROLE_NAMES = {"mixed": "aggregated", "prefill": "prefill", "decode": "decode"}


def _expand_nightly(own: list[str], vllm: list[str], path: str, picks: dict[str, str], command: click.Command,
                    env: dict[str, str]) -> tuple[list[str], str | None]:
    """A nightly config: each instance (aggregated, or prefill + decode) from its nodes' launches, and
    for a command with a client (bench) the performance case as its workload options."""
    import shlex
    from dataclasses import replace

    from ..launch.flags import to_options
    from ..launch.nightly import read_nightly
    cfg, case_name = read_nightly(path).select(picks.get("--case"), client="--concurrency" in _declared(command))
    for n in cfg.notes:
        click.echo(f"audit: note: {path}: {n}", err=True)
    engine = _engine_arg(own)
    nodes = [replace(n, env={**env, **n.env}, argv=n.argv + tuple(vllm), arg_lines=n.arg_lines + (0,) * len(vllm))
             for n in cfg.nodes]
    opts = [to_options(n, engine) for n in nodes]
    if "--node" in picks:
        try:
            k = int(picks["--node"])
        except ValueError:
            raise AuditInputError("--node", f"must be a node number, got {picks['--node']!r}") from None
        if not 0 <= k < len(opts):
            raise AuditInputError("--node", f"{path} has nodes 0-{len(opts) - 1}, got {k}")
        chosen = {opts[k].role: k}
    else:
        roles: dict[str, list[int]] = {}
        for i, o in enumerate(opts):
            roles.setdefault(o.role, []).append(i)
        # nodes of one instance run its DP ranks in lockstep and each its own KV budget: the node with the
        # smallest gpu-memory-utilization binds (the last such node on a tie)
        chosen = {r: min(ix, key=lambda i: (opts[i].util, -i)) for r, ix in roles.items()}
        for r, ix in roles.items():
            _note_differences(path, r, ix, opts, chosen[r])
    declared = _declared(command)
    if set(chosen) == {"prefill", "decode"}:
        if "--prefill" not in declared:
            desc = "; ".join(f"{r}: node {', '.join(str(i) for i, o in enumerate(opts) if o.role == r)}"
                             for r in ("prefill", "decode"))
            raise AuditInputError(path, f"a P/D config ({desc}): give --node N to audit one node's instance")
        inst = _declared(getattr(command, "instance_command", command))
        rendered = []
        for r in ("prefill", "decode"):
            o = opts[chosen[r]]
            _report(o, nodes[chosen[r]].where, [])
            rendered += [f"--{r}", shlex.join(_render(o, inst))]
        # --hf-overrides changes the model both instances serve: a command option, not an instance's
        hf = opts[chosen["prefill"]].hf_overrides
        if hf and "--hf-overrides" in declared and "--hf-overrides" not in inst:
            import json
            rendered += ["--hf-overrides", json.dumps(hf, sort_keys=True)]
    elif len(chosen) == 1:
        (r, k), = chosen.items()
        _report(opts[k], nodes[k].where, [])
        skipped: list[str] = []
        rendered = _render(opts[k], declared, skipped)
        if skipped:
            click.echo(f"audit: note: {nodes[k].where}: not used by `audit {command.name}`: {', '.join(skipped)}",
                       err=True)
    else:
        raise AuditInputError(path, f"nodes of roles {', '.join(sorted(chosen))}: give --node N")
    if "--concurrency" in declared:
        rendered += _unless_given(_case_options(cfg, case_name, [opts[k] for k in chosen.values()]), own)
    elif case_name is not None:
        click.echo(f"audit: note: --case: the performance case {case_name!r} is not used by `audit {command.name}` "
                   "(it has no client); its test case's launch is", err=True)
    rendered += _device_for(cfg, path, own, declared)
    recipe = _recipe_in_name(cfg.model)
    if recipe and "--recipe" in declared and not any(a == "--recipe" or a.startswith("--recipe=") for a in own):
        click.echo(f"audit: note: {path}: recipe {recipe} from the config's model name {cfg.model} (--recipe "
                   "overrides)", err=True)
        rendered += ["--recipe", recipe]
    return rendered + own, (_config_model(cfg.model, path, nodes[next(iter(chosen.values()))].env)
                            if cfg.model else None)


def _option_value(args: list[str], flag: str) -> str | None:
    """The last value ``args`` give ``flag`` (``--flag V`` or ``--flag=V``), as click would take it."""
    value = None
    for i, tok in enumerate(args):
        if tok == flag and i + 1 < len(args):
            value = args[i + 1]
        elif tok.startswith(flag + "="):
            value = tok.split("=", 1)[1]
    return value


def _device_for(cfg: Any, path: str, own: list[str], declared: dict[str, click.Parameter]) -> list[str]:
    """The device a nightly config's Ascend generation implies. The CI runs A2 and A3 suites and names
    which in the file (``...-A2-dual-nodes.yaml``, ``test_name``, ``ASCEND_A3_ENABLE``); audit's default
    die is A3's, so an A2 config read without --device is modelled on the A2 profile (said on stderr), and a
    --device of the other generation, or names of both, get one warning line naming what was used."""
    if "--device" not in declared:
        return []
    from ..devices.profiles import DEFAULT_DEVICE, GENERATION_DEVICES, generation_of
    stated = cfg.generations()
    gens = sorted({g for g, _ in stated})
    if not gens:
        return []
    given = _option_value(own, "--device")

    def said(gen: str) -> str:
        return ", ".join(w for g, w in stated if g == gen)
    if len(gens) > 1:
        click.echo(f"audit: warning: {path}: the config names both A2 ({said('A2')}) and A3 ({said('A3')}); "
                   f"audit models device {given or DEFAULT_DEVICE} ({'--device' if given else 'the default; give --device'})",
                   err=True)
        return []
    gen = gens[0]
    if given is None:
        dev = GENERATION_DEVICES[gen]
        if dev == DEFAULT_DEVICE:
            return []
        click.echo(f"audit: note: {path}: the config is for {gen} ({said(gen)}): audit models device {dev} "
                   "(--device overrides)", err=True)
        return ["--device", dev]
    own_gen = generation_of(given)
    users_profile = own_gen is None and (given.endswith(".json") or os.sep in given)
    if own_gen != gen and not users_profile:
        kind = f"an {own_gen}" if own_gen else "not an Ascend"
        click.echo(f"audit: warning: {path}: the config is for {gen} ({said(gen)}), but --device {given} is {kind} "
                   f"profile; audit models device {given}", err=True)
    return []


class ConfigModel(str):
    """A nightly config's model name, with the preset its name implies for when the checkpoint cannot be
    read (the CI pulls it from a hub audit may not reach)."""

    fallback: str | None = None
    where: str = ""


def _config_model(model: str, path: str, env: dict[str, str]) -> ConfigModel:
    """The config's model as audit opens it: ``ms://`` when the node sets ``VLLM_USE_MODELSCOPE`` (vLLM then
    downloads from ModelScope, ``vllm/envs.py`` VLLM_USE_MODELSCOPE), with its implied preset as fallback."""
    from ..launch.nightly import implied_preset
    from ..remote.refs import scheme_of
    name = model
    if env.get("VLLM_USE_MODELSCOPE", "").strip().lower() in ("1", "true", "yes") and scheme_of(model) is None \
            and model.count("/") == 1:
        name = "ms://" + model
    out = ConfigModel(name)
    out.fallback, out.where = implied_preset(model), path
    return out


def _open_or_fallback(model: ConfigModel) -> str:
    """``model`` when audit can read it; else the preset its name implies, said on stderr (or the read's
    own error when the name implies none)."""
    from ..source import open_model
    try:
        open_model(str(model), tables=False)
        return str(model)
    except AuditInputError as exc:
        if model.fallback is None:
            raise
        click.echo(f"audit: note: {model.where}: model {model} is not readable here ({str(exc)[:400]}); audit "
                   f"models the preset {model.fallback}, which the name implies (give MODEL to choose)", err=True)
        return model.fallback


def _recipe_in_name(model: str) -> str | None:
    """The msModelSlim recipe a hub name spells (``Eco-Tech/GLM-5.1-w8a8c8``, ``...-W4A8``): the nightly
    configs name their checkpoints so, and a preset given as MODEL would otherwise take its own default."""
    import re
    m = re.search(r"(?:^|[-_/])(w8a8|w4a8)(?:c8)?(?:$|[-_])", model.lower())
    return m.group(1) if m else None


def _note_differences(path: str, role: str, nodes: list[int], opts: list[Any], chosen: int) -> None:
    if len(nodes) < 2:
        return
    diff = []
    values = [opts[i].values() for i in nodes]
    for name in values[0]:
        if name == "dp_local":          # where a node sits in its instance, not what the instance is
            continue
        v = [x[name] for x in values]
        if any(x != v[0] for x in v):
            diff.append(f"{name} " + " / ".join(f"node {i}: {x}" for i, x in zip(nodes, v)))
    if diff:
        click.echo(f"audit: note: {path}: the {_ROLE_NAMES.get(role, role)} nodes differ ({'; '.join(diff)}); "
                   f"audit models node {chosen} (the smallest gpu-memory-utilization binds)", err=True)


def _case_options(cfg: Any, name: str | None, instances: list[Any]) -> list[str]:
    """The client of one aisbench performance case as bench options (the user's own come after and win)."""
    if name is None and not cfg.cases:
        click.echo(f"audit: note: {cfg.where}: no performance case; give --concurrency, --isl and --osl", err=True)
        return []
    case = cfg.performance_case(name)
    out = ["--concurrency", str(case.concurrency), "--isl", str(case.isl), "--osl", str(case.osl),
           "--num-prompts", str(case.num_prompts)]
    if case.request_rate is not None:
        out += ["--request-rate", f"{case.request_rate:g}"]
    if case.prefix_ratio:
        out += ["--prefix-ratio", f"{case.prefix_ratio:g}", "--prefix-warm-ranks", str(case.warm_prompts)]
    # prefix hits are the prompt-computing instance's; a decode node's own --no-enable-prefix-caching
    # (DeepSeek-V4-Pro's 1M P/D) leaves the prefill node's cache on, and that D node holds no prefix: every
    # prompt's whole KV is pulled (mooncake_hybrid_connector.py:1350-1356@182b75ea)
    computing = [o for o in instances if o.role != "decode"] or list(instances)
    if any(o.prefix_caching is False for o in computing):
        out += ["--no-prefix-caching"]
    if any(o.role == "decode" and o.prefix_caching is False for o in instances):
        out += ["--no-decode-prefix-caching"]
    base = f", baseline {case.baseline:g} output tok/s (aisbench, whole deployment)" if case.baseline else ""
    click.echo(f"audit: note: {cfg.where}: case {case.name}: {case.dataset}, concurrency {case.concurrency}, "
               f"{case.num_prompts} prompts{base}", err=True)
    return out


def _unless_given(case: list[str], own: list[str]) -> list[str]:
    """The case's client options without those the user's own arguments set, in audit's spelling or
    ``vllm bench serve``'s (``options.CLIENT_SPELLINGS``): the user's value wins over the case's either way,
    as an option typed on the command line wins over a launch (the case's and the user's would otherwise be
    two spellings of one setting that disagree)."""
    from .options import CLIENT_SPELLINGS
    twins = {a: b for a, b in CLIENT_SPELLINGS} | {b: a for a, b in CLIENT_SPELLINGS}
    given = {tok.split("=", 1)[0] for tok in own if tok.startswith("--")}
    out, i = [], 0
    while i < len(case):
        name = case[i]
        takes_value = i + 1 < len(case) and not case[i + 1].startswith("--")
        if name in given or twins.get(name) in given:
            i += 2 if takes_value else 1
            continue
        out += case[i:i + (2 if takes_value else 1)]
        i += 2 if takes_value else 1
    return out


def _report(opts: Any, where: str, from_shell: list[str]) -> None:
    if from_shell:
        click.echo(f"audit: note: from the environment: {', '.join(from_shell)}", err=True)
    for note in opts.notes:
        click.echo(f"audit: note: {note.text(where)}", err=True)
    if opts.ignored:
        names = sorted({s.name for s in opts.ignored})
        click.echo(f"audit: note: {where}: ignored (no effect on memory or time): {', '.join(names)}", err=True)
    if opts.unmodelled:
        names = sorted({f"{s.name}={s.value}" for s in opts.unmodelled})
        click.echo(f"audit: note: {where}: NOT modelled (would change memory or time): {', '.join(names)}",
                   err=True)
    if opts.unknown:
        names = sorted({s.name for s in opts.unknown})
        click.echo(f"audit: note: {where}: unknown to audit, ignored: {', '.join(names)}", err=True)


class DeploymentCommand(click.Command):
    """A click command whose arguments may be a vLLM launch: see the module docstring."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        new_args, model = expand(list(args), self)
        rest = super().parse_args(ctx, new_args)
        if model and "model" in ctx.params and ctx.params["model"] is None:
            ctx.params["model"] = _open_or_fallback(model) if isinstance(model, ConfigModel) else model
        return rest


def launch_option(f: Any) -> Any:
    """``--launch FILE``, ``--case`` and ``--node`` in the help text (their values are consumed by
    ``DeploymentCommand``)."""
    f = click.option("--node", "launch_node", default=None, metavar="N", expose_value=False,
                     help="with a nightly config: audit node N's instance only")(f)
    f = click.option("--case", "launch_case", default=None, metavar="NAME", expose_value=False,
                     help="with a nightly config: the aisbench performance case that sets the client (bench; "
                          "default: the one with a baseline)")(f)
    return click.option("--launch", "launch_file", default=None, metavar="FILE", expose_value=False,
                        help="a launch script (exports + vllm serve ...), a file with a vllm serve command, or a "
                             "vLLM-Ascend nightly config (.yaml): audited as exactly that deployment; vLLM's own "
                             "flags are accepted too")(f)
