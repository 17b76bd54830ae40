"""``audit synth``: write a sparse, header-exact stand-in checkpoint (no tensor bytes on disk)."""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import AuditInputError
from ..limits import SYNTH_MAX_FILES
from ..model.expected import WRITERS
from ..model.recipes import DEFAULT_RECIPE
from .feedback import quiet_option, stage
from .options import NonEmptyPath, recipe_option

@click.command("synth", short_help="Write a header-exact checkpoint with sparse-hole tensor data.")
@click.argument("out_dir", type=NonEmptyPath(file_okay=False, path_type=Path))
@click.option("--model", "-m", default="glm-5.1", show_default=True,
              help="preset name or a directory holding config.json")
@recipe_option("quantization recipe (default: the preset's usual one, else w8a8)")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              default=None, help="config.json to use instead of the model's")
@click.option("--writer", type=click.Choice(WRITERS), default=None,
              help="which tool's output to imitate (default: the recipe's writer)")
@click.option("--shard-size", default="5GiB", show_default=True, help="maximum tensor bytes per shard")
@click.option("--mtp/--no-mtp", "include_mtp", default=True, show_default=True,
              help="write the MTP layer (writers that ship it)")
@click.option("--overwrite", is_flag=True, help="write into a non-empty directory")
@click.option("--allow-many-files", is_flag=True,
              help=f"write more than {SYNTH_MAX_FILES:,} files (a tiny --shard-size); refused otherwise")
@quiet_option
def synth_command(out_dir: Path, model: str, recipe: str | None, config_path: Path | None,
                  writer: str | None, shard_size: str, include_mtp: bool, overwrite: bool,
                  allow_many_files: bool) -> None:
    """Write a checkpoint whose headers are exact and whose tensor data are sparse holes.

    A full-size GLM-5.1 W8A8 (~720 GiB logical) takes a few seconds and ~50 MiB of disk;
    reading any tensor returns zeros.
    """
    from ..model.config import load_config_file
    from ..units import parse_size
    from ..synth import synthesize

    config = load_config_file(config_path) if config_path else None
    recipe = recipe or DEFAULT_RECIPE.get(model.lower(), "w8a8")
    shard_bytes = parse_size(shard_size, "--shard-size")
    if shard_bytes <= 0:
        raise AuditInputError("--shard-size", f"must be positive, got {shard_size!r}")
    with stage(f"synth: writing {model} {recipe} to {out_dir}"):
        result = synthesize(out_dir, model, recipe, config=config, shard_bytes=shard_bytes,
                            include_mtp=include_mtp, writer=writer, overwrite=overwrite,
                            max_files=None if allow_many_files else SYNTH_MAX_FILES)
    click.echo(result.summary())
