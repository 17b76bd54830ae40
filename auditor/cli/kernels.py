"""``audit kernels``: turn profiler traces into our measured kernel table and query it.

The profiler parsing itself lives in ``auditor.perf.measured``.
"""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import AuditInputError
from ..outputs import check_output_path
from ..engines.registry import DEFAULT_FAMILY, as_engine
from ..perf.measured import import_kernel_details, load_kernel_table


def _default_mapping() -> dict[str, str]:
    """The default engine's profiler kernel types -> our kernel names (its profiler module owns them)."""
    return dict(as_engine(DEFAULT_FAMILY + "@main").profiler.DEFAULT_MAPPING)


@click.group("kernels", short_help="Measured kernel tables: import profiler traces, look up times.")
def kernels_group() -> None:
    """Measured kernel tables (import Ascend profiler traces, look up times)."""


def _parse_map(items: tuple[str, ...]) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in items:
        typ, sep, name = item.partition("=")
        if not sep or not typ.strip() or not name.strip():
            raise AuditInputError("--map", f"expected Type=kernel_name, got {item!r}")
        mapping[typ.strip()] = name.strip()
    return mapping


@kernels_group.command("import", short_help="Convert a profiler kernel_details.csv into a measured-kernel table.")
@click.argument("kernel_details", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="kernel table CSV to write")
@click.option("--map", "maps", multiple=True, metavar="TYPE=KERNEL",
              help="map a profiler kernel Type to our kernel name (repeatable; default: "
                   + ", ".join(f"{k}={v}" for k, v in _default_mapping().items()) + ")")
def import_command(kernel_details: Path, output: Path, maps: tuple[str, ...]) -> None:
    """Import an Ascend profiler kernel_details.csv into a kernel table (duplicates averaged)."""
    check_output_path(output, "--output")
    mapping = _parse_map(maps) if maps else _default_mapping()
    stats: dict = {}
    table = import_kernel_details(kernel_details, mapping, stats)
    table.write(output)
    click.echo(f"{kernel_details}: {stats['used']} kernel rows used, {stats['skipped']} of other types skipped; "
               f"{len(table)} table rows written to {output}", err=True)


@kernels_group.command("lookup", short_help="Look up KERNEL at KEY in a measured-kernel table.")
@click.argument("table", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("kernel")
@click.argument("key")
def lookup_command(table: Path, kernel: str, key: str) -> None:
    """Look up KERNEL at KEY (comma-separated numbers, e.g. 16,6144,2048) in TABLE."""
    try:
        k = tuple(float(v) for v in key.split(","))
    except ValueError:
        raise AuditInputError("KEY", f"expected comma-separated numbers, got {key!r}") from None
    hit = load_kernel_table(table).lookup(kernel, k)
    if hit is None:
        click.echo(f"{kernel} {key}: no measurement covers this key (analytic model would be used)")
    else:
        click.echo(f"{kernel} {key}: {hit[0]:.3f} us ({hit[1]})")
