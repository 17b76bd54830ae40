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

#: DeploymentOptions field -> (audit option, how its value is written)
_RENDER: tuple[tuple[str, str, str], ...] = (
    ("tp", "--tp", "int"), ("dp", "--dp", "int"), ("ep", "--ep", "int"), ("pp", "--pp", "int"),
    ("sp", "--sp", "flag"), ("dsa_cp", "--dsa-cp", "flag"), ("role", "--role", "str"),
    ("mtp_drafter", "--mtp-drafter", "flag"), ("layer_sharding", "--layer-sharding", "list"),
    ("nz_mode", "--nz-mode", "int"), ("shared_expert_dp", "--shared-expert-dp", "flag"),
    ("redundant_experts", "--redundant-experts", "int"),
    ("max_num_batched_tokens", "--max-num-batched-tokens", "int"), ("fused_mc2", "--fused-mc2", "int"),
    ("util", "--gpu-memory-utilization", "float"), ("max_model_len", "--max-model-len", "int"),
    ("max_num_seqs", "--max-num-seqs", "int"), ("kv_cache_dtype", "--kv-cache-dtype", "str"),
    ("dcp", "--dcp", "int"), ("hccl_buffsize", "--hccl-buffsize", "int"), ("mtp", "--mtp", "int"),
    ("hf_overrides", "--hf-overrides", "json"), ("graph_tokens", "--graph-max-tokens", "int"),
)


def _declared(command: click.Command) -> dict[str, click.Parameter]:
    out: dict[str, click.Parameter] = {}
    for p in command.params:
        for name in list(getattr(p, "opts", [])) + list(getattr(p, "secondary_opts", [])):
            out[name] = p
    return out


def _split(args: list[str], command: click.Command) -> tuple[list[str], list[str], str | None]:
    """(audit's own arguments, vLLM-spelled arguments, the --launch path)."""
    from ..launch.flags import RULES, canonical_flag
    declared = _declared(command)
    own: list[str] = []
    vllm: list[str] = []
    launch: str | None = None
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--":
            own += args[i:]
            break
        head = tok.split("=", 1)[0]
        if head == "--launch":
            if "=" in tok:
                launch = tok.split("=", 1)[1]
            elif i + 1 < len(args):
                launch = args[i + 1]
                i += 1
            else:
                raise AuditInputError("--launch", "needs a launch script or a file holding a vllm serve command")
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
    return own, vllm, launch


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
            else:
                skipped.append(name)
            continue
        if value is None:
            continue
        if option not in declared:
            skipped.append(option)
            continue
        if how == "list":
            if value:
                out += [option, ",".join(value)]
        elif how == "json":
            if value:
                out += [option, json.dumps(value, sort_keys=True)]
        else:
            out += [option, f"{value:g}" if how == "float" else str(value)]
    return out


def _engine_env() -> dict[str, str]:
    """The engine's environment variables the shell has set (the table's env rows)."""
    from ..launch.flags import ENV_RULES
    return {k: os.environ[k] for k in ENV_RULES if k in os.environ}


def _engine_arg(args: list[str]) -> str:
    for i, tok in enumerate(args):
        if tok == "--engine" and i + 1 < len(args):
            return args[i + 1]
        if tok.startswith("--engine="):
            return tok.split("=", 1)[1]
    from .options import DEFAULT_ENGINE
    return DEFAULT_ENGINE


def expand(args: list[str], command: click.Command) -> tuple[list[str], str | None]:
    """``args`` with --launch and vLLM spellings replaced by audit's options; and the launch's model."""
    if any(a in ("-h", "--help") for a in args):
        return args, None
    own, vllm, path = _split(list(args), command)
    env = _engine_env()
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
            ctx.params["model"] = model
        return rest


def launch_option(f: Any) -> Any:
    """``--launch FILE`` in the help text (the value is consumed by ``DeploymentCommand``)."""
    return click.option("--launch", "launch_file", default=None, metavar="FILE", expose_value=False,
                        help="a launch script (exports + vllm serve ...) or a file with a vllm serve command: "
                             "audited as exactly that deployment; vLLM's own flags are accepted too")(f)
