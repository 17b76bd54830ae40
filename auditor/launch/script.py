"""Reading a vLLM launch: a ``vllm serve`` command line or a tutorial-style launch shell script.

Why: deployments are written down as launch scripts (exports, then one ``vllm serve``), and audit
should take them as they are instead of making users retype the flags as audit options.

What is read, the way bash would: comments, blank lines, backslash continuations, single and double
quotes (JSON in single quotes spanning lines), ``$VAR`` / ``${VAR}`` / ``${VAR:-default}`` from the
script's own assignments (``export A=1 B=2``, ``A=1``, ``VAR=value vllm serve``, ``env A=1``),
``unset``, ``set -a``, here-documents (skipped), redirections (``> log 2>&1``), ``;`` ``&&`` ``|``
``&`` between commands, and wrappers such as ``nohup``/``exec``/``numactl``. Nothing is run:
command substitution and unknown or positional variables are left as text with a finding. Exactly
one launch command (``vllm serve MODEL ...`` or ``python -m vllm.entrypoints.openai.api_server
--model MODEL ...``) must be present.

How: one linear scan over the text (``_Scanner``) resolves quoting, expansion and line structure
and renders each command for ``shlex``, which does the final tokenizing. Every shell word is
capped (``WORD_CAP``) because shlex builds a token one character at a time (quadratic in the
length of one token); with the cap the whole read is linear in the file size. Expansion is capped
too (``EXPANDED_CAP``): ``A=$A$A`` repeated must not grow without bound. The scanner stops after
each simple command (at a newline, ``;``, ``&&``, ``|`` ...) so that its assignments are applied
before the next one is expanded, as in bash; within one command they take effect at its end
(``A=1 B=$A`` sees the old ``A``, unlike bash).
"""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from ..errors import AuditInputError
from ..inputs import read_text_capped
from ..limits import MAX_COMMAND_WORDS
from .flags import ENV_RULES, split_model
from .records import Launch, Note

LAUNCH_CAP = 1 << 20            # a launch script: real ones are a few KB
WORD_CAP = 16 << 10             # one shell word as rendered for shlex (real JSON configs: < 4 KB)
EXPANDED_CAP = 2 << 20          # all variable values substituted into the script, together
COMMAND_WORDS_CAP = MAX_COMMAND_WORDS   # words of one command (real launches: < 200)

_OP_CHARS = ";&|()<>"
_SPECIAL = re.compile(r"[\s\\'\"$`;&|()<>#]")      # one character class: what ends a plain run
_DQ_SPECIAL = re.compile(r'["\\$`]')
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_PARAM_OPS = (":-", ":=", ":+", "-", "=", "+")
_RESERVED = frozenset({"if", "then", "elif", "else", "do", "while", "until", "!", "{", "time"})
_WRAPPERS = frozenset({"nohup", "exec", "env", "time", "numactl", "taskset", "stdbuf", "sudo", "command",
                       "nice", "ionice", "setsid", "timeout", "chrt"})
_API_SERVER = "vllm.entrypoints.openai.api_server"
_CLI_MAIN = "vllm.entrypoints.cli.main"


def read_launch(path: str | Path) -> Launch:
    """The launch in the script (or one-line command file) ``path``, read through the project's
    one opener (a FIFO, device or directory is refused without blocking; at most 1 MiB; UTF-8)."""
    text = read_text_capped(path, "launch script", LAUNCH_CAP)
    return parse_launch_text(text, str(path))


def parse_launch_text(text: str, where: str) -> Launch:
    """The launch in ``text`` (a script or a command line); ``where`` names it in every error
    (``AuditInputError(where, "line N: ...")``) and finding."""
    if len(text) > LAUNCH_CAP:
        raise AuditInputError(where, f"launch script is {len(text):,} characters, over the {LAUNCH_CAP >> 20} MiB cap")
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise AuditInputError(where, f"binary data, not a launch script: NUL at line {line}")
    notes: list[Note] = []
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
        notes.append(Note("info", 0, "CRLF line ends read as LF (bash itself would keep the CR in every last word)"))
    return _Reader(text, where, notes).run()


class _Scanner:
    """Walks the text once; ``next_command`` returns the tokens of one simple command (continuations
    joined, up to a newline or a separator such as ``;``), each rendered for shlex as
    (text, is_operator, line), with quoting resolved and variables expanded from ``vars`` as it is
    at that moment."""

    def __init__(self, text: str, where: str, variables: dict[str, str], notes: list[Note]):
        self.s, self.n, self.where, self.vars, self.notes = text, len(text), where, variables, notes
        self.i, self.line, self.expanded = 0, 1, 0
        self.heredocs: list[tuple[str, bool, int]] = []

    def fail(self, line: int, problem: str) -> None:
        raise AuditInputError(self.where, f"line {line}: {problem}")

    # --- the word being built
    def _reset_word(self) -> None:
        self.word: list[str] = []
        self.word_len = 0
        self.word_line = self.line
        self.word_started = False
        self.word_digits = True         # raw, unquoted digits only (an fd number before > or <)
        self.word_assign = False        # begins NAME=: expansions in it are not split (as in bash)

    def _add(self, rendered: str, digits: bool = False) -> None:
        if not self.word_started:
            self.word_started, self.word_line = True, self.line
        self.word.append(rendered)
        self.word_len += len(rendered)
        self.word_digits = self.word_digits and digits
        if self.word_len > WORD_CAP:
            self.fail(self.word_line, f"a shell word longer than {WORD_CAP >> 10} KiB (audit's cap for one argument)")

    def _end_word(self) -> None:
        if self.word_started:
            self.tokens.append(("".join(self.word), False, self.word_line))
            if len(self.tokens) > COMMAND_WORDS_CAP:
                self.fail(self.tokens[0][2], f"a command of more than {COMMAND_WORDS_CAP:,} words (audit's cap)")
        self._reset_word()

    # --- one simple command
    def next_command(self) -> list[tuple[str, bool, int]] | None:
        """The tokens of the next simple command that has any, or None at the end of the text."""
        s, n = self.s, self.n
        self.tokens: list[tuple[str, bool, int]] = []
        self.cut = False
        self._reset_word()
        while self.i < n:
            if self.cut and self.tokens:
                return self.tokens
            self.cut = False
            c = s[self.i]
            if c == "\n":
                self._end_word()
                self.i += 1
                self.line += 1
                if self.heredocs:
                    self._skip_heredocs()
                if self.tokens:
                    return self.tokens
            elif c in " \t\r\f\v":
                self._end_word()
                self.i += 1
            elif c == "#" and not self.word_started:
                j = s.find("\n", self.i)
                self.i = n if j < 0 else j
            elif c == "\\":
                nxt = s[self.i + 1] if self.i + 1 < n else ""
                if nxt == "\n":                                  # continuation: the word goes on
                    self.i += 2
                    self.line += 1
                else:
                    self._add(shlex.quote(nxt or "\\"))
                    self.i += 2 if nxt else 1
            elif c == "'":
                start = self.line
                j = s.find("'", self.i + 1)
                if j < 0:
                    self.fail(start, "unterminated single quote (no closing ' before the end of the script)")
                body = s[self.i + 1:j]
                self._add(shlex.quote(body))
                self.line += body.count("\n")
                self.i = j + 1
            elif c == '"':
                self._double()
            elif c == "$":
                self._unquoted(self._dollar(quoted=False))
            elif c == "`":
                self._unquoted(self._backtick())
            elif c in _OP_CHARS:
                self._operator()
            else:
                m = _SPECIAL.search(s, self.i + 1)
                j = m.start() if m else n
                run = s[self.i:j]
                if not self.word_started and _ASSIGN.match(run):
                    self.word_assign = True
                self._add(run, digits=run.isdigit())
                self.i = j
        self._end_word()
        if self.heredocs:
            self._skip_heredocs()
        return self.tokens or None

    def _operator(self) -> None:
        s, n = self.s, self.n
        if s[self.i] in "<>" and self.word_started and self.word_digits:
            self._reset_word()                                   # "2>&1": the 2 is an fd number, not a word
        self._end_word()
        j = self.i
        while j < n and s[j] in _OP_CHARS:
            j += 1
        op = s[self.i:j]
        if len(op) > 3:                                          # ;;;; |||: bash refuses these too
            self.fail(self.line, f"unexpected operator {_short(op, 12)!r} (a shell syntax error)")
        self.tokens.append((op, True, self.line))
        self.i = j
        if op.endswith("<<") and not op.endswith("<<<"):
            self._heredoc_start()
        elif "<" not in op and ">" not in op:
            self.cut = True                                      # a separator: the command ends here

    def _heredoc_start(self) -> None:
        s, n = self.s, self.n
        strip = self.i < n and s[self.i] == "-"
        if strip:
            self.i += 1
        while self.i < n and s[self.i] in " \t":
            self.i += 1
        j = self.i
        while j < n and s[j] not in " \t\n;&|()<>":     # the delimiter word, quotes included ('EOF')
            j += 1
        raw = s[self.i:j]
        delim = raw.replace("'", "").replace('"', "").replace("\\", "")
        if not delim:
            self.fail(self.line, "here-document without a delimiter word after <<")
        self.tokens.append((shlex.quote(delim), False, self.line))
        self.heredocs.append((delim, strip, self.line))
        self.i = j

    def _skip_heredocs(self) -> None:
        s, n = self.s, self.n
        for delim, strip, line in self.heredocs:
            while True:
                if self.i >= n:
                    self.notes.append(Note("warning", line, f"here-document ending at '{delim}' is not terminated "
                                                             "(bash reads it to the end of the script)"))
                    break
                j = s.find("\n", self.i)
                j = n if j < 0 else j
                body = s[self.i:j]
                self.i = min(j + 1, n)
                self.line += 1
                if (body.lstrip("\t") if strip else body) == delim:
                    break
        self.heredocs = []

    def _double(self) -> None:
        s, n = self.s, self.n
        start = self.line
        self.i += 1
        buf: list[str] = []
        size = 0
        while True:
            m = _DQ_SPECIAL.search(s, self.i)
            if m is None:
                self.fail(start, 'unterminated double quote (no closing " before the end of the script)')
            j = m.start()
            chunk = s[self.i:j]
            buf.append(chunk)
            size += len(chunk)
            self.line += chunk.count("\n")
            c = s[j]
            if c == '"':
                self.i = j + 1
                break
            if c == "\\":
                nxt = s[j + 1] if j + 1 < n else ""
                if nxt == "\n":
                    self.line += 1
                    self.i = j + 2
                elif nxt and nxt in '$`"\\':
                    buf.append(nxt)
                    self.i = j + 2
                else:
                    buf.append("\\")
                    self.i = j + 1
                continue
            self.i = j
            text, _ = self._dollar(quoted=True) if c == "$" else self._backtick()
            buf.append(text)
            size += len(text)
            if size > WORD_CAP:
                self.fail(start, f"a shell word longer than {WORD_CAP >> 10} KiB (audit's cap for one argument)")
        self._add(shlex.quote("".join(buf)))

    def _unquoted(self, expansion: tuple[str, bool]) -> None:
        """Add an expansion outside quotes: a variable's value is split into words on blanks
        (not in NAME=value words); text left as is (unknown variables) stays one piece."""
        value, is_value = expansion
        if not is_value or self.word_assign:
            if value:
                self._add(shlex.quote(value))
            return
        fields = value.split()
        if value[:1].isspace():
            self._end_word()
        for k, f in enumerate(fields):
            if k:
                self._end_word()
            self._add(shlex.quote(f))
        if value[-1:].isspace() and fields:
            self._end_word()

    def _take(self, value: str) -> tuple[str, bool]:
        self.expanded += len(value)
        if self.expanded > EXPANDED_CAP:
            self.fail(self.line, f"variable expansion past {EXPANDED_CAP >> 20} MiB in all (a self-referencing "
                                 "assignment such as A=$A$A?)")
        return value, True

    def _unset(self, text: str, name: str) -> tuple[str, bool]:
        self.notes.append(Note("warning", self.line, f"{text} is not set in the script; left as the text {text!r}"
                               + (" (a positional parameter: the script's arguments are unknown)"
                                  if name[:1].isdigit() or name in ("@", "*", "#") else "")))
        return text, False

    def _dollar(self, quoted: bool) -> tuple[str, bool]:
        """At a '$': (text, is_value) of the expansion; self.i moves past it. ``quoted``: inside
        double quotes (where $'...' and $"..." are not special)."""
        s, n, i = self.s, self.n, self.i
        nxt = s[i + 1] if i + 1 < n else ""
        if nxt == "{":
            j = s.find("}", i + 2)
            if j < 0:
                self.fail(self.line, "unterminated ${ (no closing } before the end of the script)")
            self.i = j + 1
            return self._braced(s[i + 2:j], s[i:j + 1])
        m = _NAME.match(s, i + 1)
        if m:
            self.i = m.end()
            name = m.group(0)
            return self._take(self.vars[name]) if name in self.vars else self._unset("$" + name, name)
        if nxt and (nxt.isdigit() or nxt in "@*#?$!-"):
            self.i = i + 2
            return self._unset("$" + nxt, nxt)
        if nxt == "(":
            return self._substitution(i)
        if nxt == "'" and not quoted:
            return self._ansi_c(i)
        self.i = i + 1
        if nxt == '"' and not quoted:           # $"...": a translatable string, read as "..."
            return "", False
        return "$", False

    def _braced(self, inner: str, whole: str) -> tuple[str, bool]:
        m = _NAME.match(inner)
        if not m:
            return self._unset(whole, inner[:1])
        name, rest = m.group(0), inner[m.end():]
        if not rest:
            return self._take(self.vars[name]) if name in self.vars else self._unset(whole, name)
        op = next((o for o in _PARAM_OPS if rest.startswith(o)), None)
        if op is None:
            self.notes.append(Note("warning", self.line, f"{whole}: this expansion form is not evaluated; left as text"))
            return whole, False
        word = rest[len(op):]
        if "$" in word or "`" in word:
            self.notes.append(Note("warning", self.line, f"{whole}: the default is taken literally (no nested expansion)"))
        is_set = name in self.vars
        full = is_set and (self.vars[name] != "" or ":" not in op)
        if op.endswith("+"):
            return self._take(word if full else "")
        if full:
            return self._take(self.vars[name])
        if op.endswith("="):
            self.vars[name] = word
        return self._take(word)

    def _substitution(self, i: int) -> tuple[str, bool]:
        s, n = self.s, self.n
        depth, j, start = 0, i + 1, self.line
        while j < n:
            c = s[j]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    break
            elif c == "'":
                k = s.find("'", j + 1)
                j = n if k < 0 else k
            j += 1
        if j >= n:
            self.fail(start, "unterminated $( (no closing ) before the end of the script)")
        return self._kept_as_text(i, j, start)

    def _backtick(self) -> tuple[str, bool]:
        s, i, start = self.s, self.i, self.line
        j = s.find("`", i + 1)
        if j < 0:
            self.fail(start, "unterminated ` (no closing backquote before the end of the script)")
        return self._kept_as_text(i, j, start)

    def _kept_as_text(self, i: int, j: int, start: int) -> tuple[str, bool]:
        """A command substitution s[i..j] kept as text (never run), with a note; the cursor moves past it."""
        text = self.s[i:j + 1]
        self.line += text.count("\n")
        self.i = j + 1
        self.notes.append(Note("warning", start, f"command substitution {_short(text)} is not run; left as text"))
        return text, False

    def _ansi_c(self, i: int) -> tuple[str, bool]:
        s, n = self.s, self.n
        j, out = i + 2, []
        simple = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"', "r": "\r", "a": "\a", "e": "\x1b"}
        while j < n and s[j] != "'":
            if s[j] == "\\" and j + 1 < n:
                out.append(simple.get(s[j + 1], "\\" + s[j + 1]))
                j += 2
            else:
                out.append(s[j])
                j += 1
        if j >= n:
            self.fail(self.line, "unterminated $' quote (no closing ' before the end of the script)")
        text = "".join(out)
        self.line += s.count("\n", i, j)
        self.i = j + 1
        return text, False


def _short(text: str, width: int = 40) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[:width - 3] + "..."


def _tokenize(tokens: list[tuple[str, bool, int]], where: str) -> list[tuple[str, bool, int]]:
    """shlex does the final tokenizing of the rendered command; the scanner's own split says which
    tokens are operators and on which line each starts."""
    lx = shlex.shlex(" ".join(t for t, _, _ in tokens), posix=True, punctuation_chars=_OP_CHARS)
    lx.whitespace_split = True
    lx.commenters = ""
    try:
        words = list(lx)
    except ValueError as exc:                   # not reached: quoting is resolved before shlex
        raise AuditInputError(where, f"line {tokens[0][2]}: {exc}") from None
    if len(words) != len(tokens):               # not reached: one rendered word is one shlex token
        raise AuditInputError(where, f"line {tokens[0][2]}: could not split this line into words")
    return [(w, op, line) for w, (_, op, line) in zip(words, tokens)]


def _simple_commands(tokens: list[tuple[str, bool, int]]) -> list[list[tuple[str, int]]]:
    """Split a line at ; & && || | ( ) and drop redirections (an operator with < or >, and its
    target word)."""
    out: list[list[tuple[str, int]]] = [[]]
    skip = False
    for w, op, line in tokens:
        if op:
            if "<" in w or ">" in w:
                skip = True
            else:
                out.append([])
                skip = False
        elif skip:
            skip = False
        else:
            out[-1].append((w, line))
    return [c for c in out if c]


class _Reader:
    def __init__(self, text: str, where: str, notes: list[Note]):
        self.where, self.notes = where, notes
        self.vars: dict[str, str] = {}
        self.var_lines: dict[str, int] = {}
        self.exported: set[str] = set()
        self.allexport = False
        self.scanner = _Scanner(text, where, self.vars, notes)
        self.launch: Launch | None = None
        self.not_run: dict[str, int] = {}

    def run(self) -> Launch:
        while True:
            tokens = self.scanner.next_command()
            if tokens is None:
                break
            for cmd in _simple_commands(_tokenize(tokens, self.where)):
                self._command(cmd)
        if self.launch is None:
            raise AuditInputError(self.where, "no vLLM launch found: expected one 'vllm serve MODEL ...' (or 'python -m "
                                              f"{_API_SERVER} --model MODEL ...') command")
        if self.not_run:
            names = ", ".join(f"{k} (line {v})" for k, v in list(self.not_run.items())[:10])
            more = f" and {len(self.not_run) - 10} more" if len(self.not_run) > 10 else ""
            self.notes.append(Note("info", 0, f"commands not run by audit (it reads assignments, export/unset and "
                                              f"the launch only): {names}{more}"))
        launch = self.launch
        return Launch(where=launch.where, model=launch.model, env=launch.env, argv=launch.argv,
                      arg_lines=launch.arg_lines, env_lines=launch.env_lines, line=launch.line,
                      program=launch.program, notes=tuple(self.notes) + launch.notes)

    def _assign(self, word: str, line: int, export: bool) -> None:
        name, _, value = word.partition("=")
        self.vars[name] = value
        self.var_lines[name] = line
        if export or self.allexport:
            self.exported.add(name)

    def _command(self, cmd: list[tuple[str, int]]) -> None:
        k = 0
        while k < len(cmd) and cmd[k][0] in _RESERVED:
            k += 1
        prefix: list[tuple[str, int]] = []
        while k < len(cmd) and _ASSIGN.match(cmd[k][0]):
            prefix.append(cmd[k])
            k += 1
        words = cmd[k:]
        if not words:
            for w, line in prefix:
                self._assign(w, line, export=False)
            return
        name = words[0][0]
        if name in ("export", "declare", "typeset", "readonly"):
            exporting = name == "export" or any(w.startswith("-") and "x" in w for w, _ in words[1:])
            for w, line in words[1:]:
                if w.startswith("-"):
                    continue
                if _ASSIGN.match(w):
                    self._assign(w, line, export=exporting)
                elif exporting and _NAME.fullmatch(w):
                    self.exported.add(w)
                    self.var_lines.setdefault(w, line)
            return
        if name == "unset":
            for w, _ in words[1:]:
                self.vars.pop(w, None)
                self.exported.discard(w)
            return
        if name == "set":
            flags = [w for w, _ in words[1:]]
            if "-a" in flags or ("-o" in flags and "allexport" in flags):
                self.allexport = True
            if "+a" in flags or ("+o" in flags and "allexport" in flags):
                self.allexport = False
            return
        if name in ("source", "."):
            self.notes.append(Note("warning", words[0][1], f"'{name} {words[1][0] if len(words) > 1 else ''}' is not "
                                   "followed: variables it sets are unknown here"))
            return
        found = _launch_start(words)
        if found is None:
            self.not_run.setdefault(name, words[0][1])
            return
        self._launch(prefix, words, *found)

    def _launch(self, prefix: list[tuple[str, int]], words: list[tuple[str, int]], at: int, start: int,
                program: str) -> None:
        line = words[at][1]
        if self.launch is not None:
            raise AuditInputError(self.where, f"two vLLM launch commands (lines {self.launch.line} and {line}); audit "
                                              "reads exactly one: keep one per script")
        env = {k: self.vars[k] for k in self.exported if k in self.vars}
        env_lines = {k: self.var_lines.get(k, 0) for k in env}
        inline = list(prefix)
        notes: list[Note] = []
        for w, ln in words[:at]:                 # env A=1 ... / nohup env -i A=1 ...
            if _ASSIGN.match(w):
                inline.append((w, ln))
            elif w in ("-i", "--ignore-environment", "-") and any(x == "env" for x, _ in words[:at]):
                env, env_lines = {}, {}
                notes.append(Note("warning", ln, "env -i: the launch starts from an empty environment"))
        wrappers = " ".join(w for w, _ in words[:at] if w not in ("nohup", "exec", "env") and not _ASSIGN.match(w))
        if wrappers:
            notes.append(Note("info", line, f"launched under '{_short(wrappers)}' (not modelled)"))
        for w, ln in inline:
            k, _, v = w.partition("=")
            env[k], env_lines[k] = v, ln
        for name in sorted(set(ENV_RULES) & (set(self.vars) - set(env))):
            notes.append(Note("warning", self.var_lines.get(name, 0),
                              f"{name} is assigned but not exported: the engine does not see it"))
        args = words[start:]
        model, argv, arg_lines, model_notes = split_model([w for w, _ in args], [ln for _, ln in args],
                                                          positional=program == "vllm serve", where=self.where,
                                                          line=line)
        self.launch = Launch(where=self.where, model=model, env=env, argv=tuple(argv), arg_lines=tuple(arg_lines),
                             env_lines=env_lines, line=line, program=program, notes=tuple(notes + model_notes))


def _launch_start(words: list[tuple[str, int]]) -> tuple[int, int, str] | None:
    """(index of the program word, index of its first argument, program) when the command is a
    vLLM launch, run directly or under a wrapper (nohup, env, numactl ...); None otherwise."""
    w = [x for x, _ in words]
    if w[0] not in _WRAPPERS and not _is_vllm(w[0]) and not _is_python(w[0]):
        return None
    for k, x in enumerate(w):
        if _is_vllm(x) and k + 1 < len(w) and w[k + 1] == "serve":
            return k, k + 2, "vllm serve"
        if _is_python(x) and k + 2 < len(w) and w[k + 1] == "-m":
            if w[k + 2] == _API_SERVER:
                return k, k + 3, f"python -m {_API_SERVER}"
            if w[k + 2] == _CLI_MAIN and k + 3 < len(w) and w[k + 3] == "serve":
                return k, k + 4, "vllm serve"
    return None


def _is_vllm(word: str) -> bool:
    return os.path.basename(word) == "vllm"


def _is_python(word: str) -> bool:
    base = os.path.basename(word)
    return base.startswith("python") and all(c.isdigit() or c == "." for c in base[6:])
