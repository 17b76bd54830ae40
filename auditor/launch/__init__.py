"""Reading a vLLM launch (a ``vllm serve`` command line or a launch shell script) into audit's
deployment options: ``read_launch`` / ``parse_launch_text`` (script.py), then ``to_options``
(flags.py)."""
from __future__ import annotations

from .flags import RULES, names, to_options
from .records import DeploymentOptions, Launch, Note, Setting
from .script import parse_launch_text, read_launch

__all__ = ["DeploymentOptions", "Launch", "Note", "RULES", "Setting", "names", "parse_launch_text", "read_launch",
           "to_options"]
