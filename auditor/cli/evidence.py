"""``audit evidence``: audit's HBM budget against the engine's own public deployments, one table."""
from __future__ import annotations

from pathlib import Path

import click

from .feedback import quiet_option
from .options import emit


@click.command("evidence", short_help="Published deployments: predicted against what was observed.")
@click.option("--corpus", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="evidence JSON file (default: the project's auditor/evidence/published.json)")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="one table, or every row with its prediction, observation and error as JSON")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write the table to FILE instead of stdout ('-': stdout)")
@quiet_option
def evidence_command(corpus, fmt, output) -> None:
    """Every row of the evidence corpus: audit's prediction (fits?, weights per rank, activation,
    non-torch, KV available with its range, KV tokens, concurrency), what was observed, the error."""
    from ..evidence import evaluate, load_corpus, render

    emit(render(evaluate(load_corpus(corpus)), fmt), output)
