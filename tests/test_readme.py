"""The README and the docs/ pages cannot go stale: every example output in them is what the tool
prints today, the README's quick start is what CI runs, the README stays a front page that links
every page, and no relative link points at nothing."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from auditor import docs

from conftest import SHARED_SKIP_REASON

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = docs.pages()
DOCS_PAGES = sorted((ROOT / "docs").glob("*.md"))
_ids = [str(p.relative_to(ROOT)) for p in PAGES]


def test_pages_are_the_readme_and_every_docs_page():
    assert PAGES[0] == ROOT / "README.md" and PAGES[1:] == DOCS_PAGES and len(DOCS_PAGES) >= 10


#: every example of every page, one test each (the README's align and calibrate examples alone took ~16 s,
#: and one test per page kept them on one worker)
EXAMPLES = [(page, i) for page in PAGES for i in range(len(docs.examples(page.read_text(encoding="utf-8"))))]


def test_the_readme_has_generated_examples():
    assert len(docs.examples(README)) >= 4, "the README lost its generated examples"


@pytest.mark.parametrize("page,i", EXAMPLES, ids=[f"{p.relative_to(ROOT)}-{i}" for p, i in EXAMPLES])
def test_every_example_is_what_the_tool_prints(page, i):
    text = page.read_text(encoding="utf-8")
    ex = docs.examples(text)[i]
    if "../shared" in ex.command and not (ROOT.parent / "shared").is_dir():
        pytest.skip("the example reads the reference data: " + SHARED_SKIP_REASON)
    assert text[ex.start:ex.end] == docs.run_example(ex.command), (
        f"stale example in {page.name} (run `python -m auditor.docs`): {ex.command}")


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_no_hand_pasted_tool_output(page):
    """A fenced block that shows an `$ audit` run must sit under an example marker."""
    text = page.read_text(encoding="utf-8")
    covered = {text[ex.start:ex.end] for ex in docs.examples(text)}
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```\n", text, re.M | re.S)
    pasted = [b.splitlines()[0] for b in blocks if b.startswith("$ audit") and b not in covered]
    assert not pasted, f"{page.name} blocks with tool output but no example marker: {pasted}"


def test_readme_is_a_front_page():
    n = len(README.splitlines())
    assert n <= 300, f"README.md has {n} lines: move the detail to a docs/ page and link it"


def _prose(text: str) -> str:
    """The text outside fenced blocks (tool output may hold '# ...' lines and brackets)."""
    return re.sub(r"^```.*?^```$", "", text, flags=re.M | re.S)


def _links(text: str) -> list[str]:
    return re.findall(r"\[[^\]\n]*\]\(([^)\s]+)\)", _prose(text))


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / link.split("#", 1)[0]).resolve() for link in _links(README)}
    unlinked = [p.name for p in DOCS_PAGES if p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to '-', repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#+ (.+)$", _prose(text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_relative_links_point_at_what_exists(page):
    """Every relative link names an existing file, and its #anchor a heading of that page."""
    broken = []
    for link in _links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", link):                  # https:, mailto:
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(link)
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target.read_text(encoding="utf-8")):
            broken.append(link)
    assert not broken, f"{page.name}: links to nothing: {broken}"


def test_quick_start_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    quick = README.split("## Quick start", 1)[1].split("##", 1)[0]
    test_line = next(ln for ln in quick.splitlines() if "pytest" in ln)
    command = test_line.split("#")[0].strip()
    assert command in ci, f"README test command {command!r} is not what .ci/run calls"


def test_filters_and_exit_codes(tmp_path):
    body = docs.run_example("memory glm-5.1 --tp 16 --budget 1GiB | head 2")
    lines = body.splitlines()
    assert lines[0] == "$ audit memory glm-5.1 --tp 16 --budget 1GiB"
    assert len(lines) == 4 and lines[-1] == "(exit code 3)"      # 2 lines kept + the command + exit code
    grep = docs.run_example("memory glm-5.1 --tp 16 | grep ^worst rank")
    assert grep.splitlines()[1].startswith("worst rank")
    full = docs.run_example("memory glm-5.1 --tp 16 | head 6").splitlines()
    dropped = docs.run_example("memory glm-5.1 --tp 16 | head 6 | drop ^(NOTE|plan):").splitlines()
    assert dropped == [ln for ln in full if not ln.startswith(("NOTE", "plan:"))] and len(dropped) == len(full) - 2
    tail = docs.run_example("memory glm-5.1 --tp 16 | head 6 | from ^plan:").splitlines()
    assert tail[1:] == full[full.index(next(ln for ln in full if ln.startswith("plan:"))):]


def test_file_filter_shows_what_the_command_wrote():
    body = docs.run_example("synth $TMP/m --model dense-32b --recipe bf16 | file m/config.json | head 3")
    lines = body.splitlines()
    assert lines[0] == "$ audit synth /tmp/m --model dense-32b --recipe bf16"
    assert lines[1] == "{" and len(lines) == 4       # the written config.json, not synth's summary line
