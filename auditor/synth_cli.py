"""``audit synth``: write a sparse, header-exact stand-in checkpoint (no tensor bytes on disk).

Kept apart from commands.py so the lead can register it with ``cli.add_command(synth_command)``.
"""
from __future__ import annotations

import re
from pathlib import Path

import click

from .errors import AuditInputError
from .model.config import load_config_file
from .model.layout import RECIPES, WRITERS
from .model.presets import DEFAULT_RECIPE
from .synth import synthesize

_UNITS = {"": 1, "b": 1, "k": 10 ** 3, "kb": 10 ** 3, "m": 10 ** 6, "mb": 10 ** 6, "g": 10 ** 9,
          "gb": 10 ** 9, "t": 10 ** 12, "tb": 10 ** 12, "kib": 2 ** 10, "mib": 2 ** 20,
          "gib": 2 ** 30, "tib": 2 ** 40}


def parse_size(text: str) -> int:
    """'5GiB' -> 5368709120, '4GB' -> 4000000000, '2000000' -> 2000000 (as the writers count)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise AuditInputError("--shard-size", f"cannot read size {text!r} (e.g. 5GiB, 4GB, 2000000)")
    value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise AuditInputError("--shard-size", f"must be positive, got {text!r}")
    return value


@click.command("synth")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--model", "-m", default="glm-5.1", show_default=True,
              help="preset name or a directory holding config.json")
@click.option("--recipe", type=click.Choice(RECIPES), default=None,
              help="quantization recipe (default: the preset's usual one, else w8a8)")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              default=None, help="config.json to use instead of the model's")
@click.option("--writer", type=click.Choice(WRITERS), default=None,
              help="which tool's output to imitate (default: the recipe's writer)")
@click.option("--shard-size", default="5GiB", show_default=True, help="maximum tensor bytes per shard")
@click.option("--mtp/--no-mtp", "include_mtp", default=True, show_default=True,
              help="write the MTP layer (writers that ship it)")
@click.option("--overwrite", is_flag=True, help="write into a non-empty directory")
def synth_command(out_dir: Path, model: str, recipe: str | None, config_path: Path | None,
                  writer: str | None, shard_size: str, include_mtp: bool, overwrite: bool) -> None:
    """Write a checkpoint whose headers are exact and whose tensor data are sparse holes.

    A full-size GLM-5.1 W8A8 (~720 GiB logical) takes a few seconds and ~50 MiB of disk;
    reading any tensor returns zeros.
    """
    config = load_config_file(config_path) if config_path else None
    recipe = recipe or DEFAULT_RECIPE.get(model.lower(), "w8a8")
    result = synthesize(out_dir, model, recipe, config=config, shard_bytes=parse_size(shard_size),
                        include_mtp=include_mtp, writer=writer, overwrite=overwrite)
    click.echo(result.summary())
