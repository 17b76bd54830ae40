"""YAML files of other projects (vLLM-Ascend's nightly CI configs) read with caps, never as PyYAML builds them.

Why: PyYAML's safe loader builds an alias by reference, so a 1 kB "billion laughs" document is a graph that
any walk over it (a reader, an error message's ``repr``) expands to gigabytes; its composer and constructor
recurse, so 50,000 nested brackets are a RecursionError; it converts a 100,000-digit integer (quadratic
time) and constructs implicit timestamps (``2026-13-45`` is a ValueError). Here the document is built from
the parser's events in one loop, with every cap checked while it is built: nesting depth, entries of one
list or mapping (a shell launch's 4,096 words), characters of one scalar, characters of a number, aliases,
and the size of the document with every alias expanded (nodes and characters). A timestamp is read as the
text it is; a tag the safe loader would not build plainly (``!!binary``, ``!!set``, ``!custom``) is refused.
A key written twice is refused (PyYAML silently keeps the last). Merge keys (``<<: *anchor``) follow
PyYAML: explicit keys win, then earlier merges over later ones. Every error is one short line naming the
file and the line, and never shows a value longer than a few words.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..errors import AuditInputError
from ..inputs import read_text_capped
from ..limits import MAX_COMMAND_WORDS

MAX_DEPTH = 32                  # nesting of lists and mappings (real nightly configs: 5)
MAX_ITEMS = MAX_COMMAND_WORDS   # entries of one list or mapping: a shell launch's cap on one command's words
MAX_SCALAR = 64 << 10           # characters of one scalar (a folded server_cmd: a few kB)
MAX_NUMBER_CHARS = 40           # characters of an int or float, as in every evidence file (auditor.inputs)
MAX_ALIASES = 1024              # alias uses in one document (real: < 20)
MAX_NODES = 100_000             # scalars, lists and mappings with every alias expanded (real: < 2,000)
MAX_EXPANDED_CHARS = 4 << 20    # scalar characters with every alias expanded (real: < 30 kB)

_T = "tag:yaml.org,2002:"
_PLAIN_COLLECTIONS = {None, "!", _T + "map", _T + "seq"}


def _short(text: str, width: int = 40) -> str:
    text = " ".join(str(text).replace(_T, "!!").split())
    return repr(text if len(text) <= width else text[:width - 3] + "...")


class _Builder:
    """The document of one event stream; a frame per open list or mapping."""

    def __init__(self, where: str):
        import yaml
        self.where = where
        self.resolver = yaml.resolver.Resolver()
        self.constructor = yaml.constructor.SafeConstructor()
        self.anchors: dict[str, tuple[Any, int, int] | None] = {}   # None: still open (an alias to it recurses)
        self.aliases = 0
        self.nodes = 0
        self.chars = 0
        self.stack: list[dict] = []

    def fail(self, event, problem: str) -> AuditInputError:
        mark = getattr(event, "start_mark", None)
        at = f"line {mark.line + 1}: " if mark is not None else ""
        return AuditInputError(self.where, at + problem)

    def count(self, event, nodes: int, chars: int) -> None:
        self.nodes += nodes
        self.chars += chars
        if self.nodes > MAX_NODES:
            raise self.fail(event, f"the document expands to more than {MAX_NODES:,} values (aliases of aliases: "
                                   "a 'billion laughs' document?)")
        if self.chars > MAX_EXPANDED_CHARS:
            raise self.fail(event, f"the document expands to more than {MAX_EXPANDED_CHARS >> 20} MiB of text "
                                   "(aliases of aliases: a 'billion laughs' document?)")

    # -- values
    def scalar(self, ev) -> Any:
        import yaml
        value = ev.value
        if len(value) > MAX_SCALAR:
            raise self.fail(ev, f"a value of {len(value):,} characters, over audit's cap of {MAX_SCALAR >> 10} KiB")
        tag = ev.tag
        if tag is None or tag == "!":
            tag = self.resolver.resolve(yaml.ScalarNode, value, ev.implicit)
        if tag == _T + "str" or tag == _T + "timestamp":        # a date is read as the text it is
            return value
        if tag == _T + "null":
            return None
        if tag == _T + "merge":
            return _Merge
        if tag in (_T + "bool", _T + "int", _T + "float"):
            if len(value) > MAX_NUMBER_CHARS and tag != _T + "bool":
                raise self.fail(ev, f"a number of {len(value):,} characters, over audit's cap of {MAX_NUMBER_CHARS}")
            node = yaml.ScalarNode(tag, value, ev.start_mark, ev.end_mark)
            try:
                v = self.constructor.yaml_constructors[tag](self.constructor, node)
            except (yaml.YAMLError, ValueError, TypeError, KeyError):
                raise self.fail(ev, f"{_short(value)} is not a {tag[len(_T):]}") from None
            if isinstance(v, float) and not math.isfinite(v):
                raise self.fail(ev, f"{_short(value)} is not a finite number")
            return v
        raise self.fail(ev, f"a value tagged {_short(tag)}, which audit does not read (plain YAML values only)")

    def add(self, ev, value: Any, nodes: int, chars: int) -> None:
        """Put a finished value into the open list or mapping (or make it the document)."""
        if not self.stack:
            self.doc = value
            return
        top = self.stack[-1]
        top["nodes"] += nodes
        top["chars"] += chars
        if top["kind"] == "seq":
            if len(top["value"]) >= MAX_ITEMS:
                raise self.fail(ev, f"a list of more than {MAX_ITEMS:,} entries (audit's cap, as for the words of a "
                                    "shell launch)")
            top["value"].append(value)
            return
        if top["key"] is _NoKey:
            if isinstance(value, (list, dict)):
                raise self.fail(ev, "a list or mapping as a mapping key (audit reads plain keys only)")
            top["key"], top["key_line"] = value, ev
            return
        key, top["key"] = top["key"], _NoKey
        if key is _Merge:
            merged = value if isinstance(value, list) else [value]
            if not all(isinstance(m, dict) for m in merged):
                raise self.fail(ev, "a merge key (<<) takes a mapping or a list of mappings")
            top["merges"].extend(merged)
            return
        if key in top["value"]:
            raise self.fail(top["key_line"], f"key {_short(key)} is written twice in one mapping")
        if len(top["value"]) >= MAX_ITEMS:
            raise self.fail(ev, f"a mapping of more than {MAX_ITEMS:,} keys (audit's cap)")
        top["value"][key] = value

    def open(self, ev, kind: str) -> None:
        if ev.tag not in _PLAIN_COLLECTIONS:
            raise self.fail(ev, f"a {'list' if kind == 'seq' else 'mapping'} tagged {_short(ev.tag)}, which audit "
                                "does not read (plain YAML values only)")
        if len(self.stack) >= MAX_DEPTH:
            raise self.fail(ev, f"lists and mappings nested more than {MAX_DEPTH} levels deep (audit's cap)")
        if ev.anchor is not None:
            self.anchors[ev.anchor] = None
        self.count(ev, 1, 0)
        self.stack.append({"kind": kind, "value": [] if kind == "seq" else {}, "key": _NoKey, "key_line": ev,
                           "merges": [], "anchor": ev.anchor, "nodes": 1, "chars": 0})

    def close(self, ev) -> None:
        top = self.stack.pop()
        value = top["value"]
        if top["kind"] == "map" and top["merges"]:
            flat: dict = {}
            for m in reversed(top["merges"]):        # PyYAML: earlier merges win over later ones ...
                flat.update(m)
            flat.update(value)                       # ... and the mapping's own keys over every merge
            if len(flat) > MAX_ITEMS:
                raise self.fail(ev, f"a mapping of more than {MAX_ITEMS:,} keys (audit's cap)")
            value = flat
        if top["anchor"] is not None:
            self.anchors[top["anchor"]] = (value, top["nodes"], top["chars"])
        self.add(ev, value, top["nodes"], top["chars"])

    def alias(self, ev) -> None:
        self.aliases += 1
        if self.aliases > MAX_ALIASES:
            raise self.fail(ev, f"more than {MAX_ALIASES:,} aliases (audit's cap)")
        if ev.anchor not in self.anchors:
            raise self.fail(ev, f"alias *{_short(ev.anchor)[1:-1]} names no anchor before it")
        got = self.anchors[ev.anchor]
        if got is None:
            raise self.fail(ev, f"alias *{_short(ev.anchor)[1:-1]} is inside the value it names (a recursive "
                                "document)")
        value, nodes, chars = got
        self.count(ev, nodes, chars)
        self.add(ev, value, nodes, chars)


class _NoKey:
    """A mapping frame waiting for its next key."""


class _Merge:
    """The merge key ``<<``."""


def loads(text: str, where: str | Path) -> Any:
    """The one YAML document in ``text`` as plain values (dict, list, str, int, float, bool, None), or one
    AuditInputError naming ``where`` and the line. An empty document is None."""
    import yaml
    loader_cls = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    b = _Builder(str(where))
    b.doc = None
    docs = 0
    loader = loader_cls(text)
    try:
        while loader.check_event():
            ev = loader.get_event()
            if isinstance(ev, yaml.ScalarEvent):
                if ev.anchor is not None:
                    b.anchors[ev.anchor] = None
                b.count(ev, 1, len(ev.value))
                value = b.scalar(ev)
                if ev.anchor is not None:
                    b.anchors[ev.anchor] = (value, 1, len(ev.value))
                b.add(ev, value, 1, len(ev.value))
            elif isinstance(ev, yaml.SequenceStartEvent):
                b.open(ev, "seq")
            elif isinstance(ev, yaml.MappingStartEvent):
                b.open(ev, "map")
            elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                b.close(ev)
            elif isinstance(ev, yaml.AliasEvent):
                b.alias(ev)
            elif isinstance(ev, yaml.DocumentStartEvent):
                docs += 1
                if docs > 1:
                    raise b.fail(ev, "more than one YAML document (audit reads one)")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}: " if mark is not None else ""
        raise AuditInputError(where, f"{at}not valid YAML ({getattr(exc, 'problem', None) or 'parse error'})") from None
    finally:
        loader.dispose()
    return b.doc


def load_file(path: str | Path, what: str, cap: int, list_caps: dict[str, int] | None = None) -> Any:
    """The YAML document of the regular file ``path`` (at most ``cap`` bytes of UTF-8, through the one
    opener), read by :func:`loads`; ``list_caps`` caps the entries of top-level lists by key (e.g. the nodes
    of a deployment)."""
    doc = loads(read_text_capped(path, what, cap), path)
    if isinstance(doc, dict):
        for key, most in (list_caps or {}).items():
            v = doc.get(key)
            if isinstance(v, list) and len(v) > most:
                raise AuditInputError(path, f"{key} has {len(v):,} entries, over audit's cap of {most:,}")
    return doc
