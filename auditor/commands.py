"""The memory-side commands: memory, inventory, synth."""
from __future__ import annotations

import click


def register_memory_commands(group: click.Group) -> None:
    """Filled in as the memory pipeline lands."""
