"""The documentation holds together: links resolve, every docs page is reachable, the README stays short.

README.md is the front door and docs/*.md the reference; a moved file or a renamed heading must
not leave a dead link behind. Links are checked as GitHub renders them: relative paths from the
page's folder, ``#anchor`` against the target's headings by GitHub's slug rule, nothing inside
fenced code blocks.
"""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path

import pytest

from tests.support.paths import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 220

_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...


def _pages() -> list[Path]:
    """Every page whose links are checked."""
    return [README, *sorted(DOCS.glob("*.md")), ROOT / "bench" / "README.md", ROOT / "deploy" / "README.md"]


def _prose(text: str) -> list[str]:
    """The page's lines outside fenced code blocks (code is not rendered as links or headings)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower-cased, punctuation dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = re.sub(r"<[^>]+>", "", text).lower()  # inline HTML renders as nothing
    text = re.sub(r"[^\w\- ]", "", text)  # \w is Unicode-aware like GitHub's rule; keeps '_' and '-'
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The ``#anchor``s a page offers (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path.read_text()):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    """The link and image targets of a page, outside code."""
    return [m.group(1) for line in _prose(path.read_text()) for m in _LINK.finditer(line)]


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_links(path: Path) -> list[str]:
    """Relative links of ``path`` that point at no file, or at no heading of an existing page."""
    bad = []
    for target in links(path):
        if _EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{target}: no such file {_shown(dest)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with anchor #{anchor} in {_shown(dest)}")
    return bad


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    """Every relative link (and #anchor) of the page points at an existing file (and heading)."""
    assert page.exists(), page
    assert broken_links(page) == []


def test_every_docs_page_is_reachable_from_the_readme() -> None:
    """Following links from README.md (through other docs pages too) reaches every docs/*.md page."""
    reached, todo = {README.resolve()}, deque([README.resolve()])
    while todo:
        page = todo.popleft()
        for target in links(page):
            file_part = target.partition("#")[0]
            if _EXTERNAL.match(target) or not file_part.endswith(".md"):
                continue
            dest = (page.parent / file_part).resolve()
            if dest.exists() and dest not in reached:
                reached.add(dest)
                todo.append(dest)
    pages = {p.resolve() for p in DOCS.glob("*.md")}
    assert pages, "no docs pages found"
    assert sorted(str(p.relative_to(ROOT)) for p in pages - reached) == []


def test_readme_stays_a_front_door() -> None:
    """README.md stays short: the reference lives in docs/."""
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}); move detail to docs/"


def test_ci_runs_the_readme_test_command_exactly_then_the_other_pythons() -> None:
    """.ci/run has the README's test command as one line of its own, before its runs on 3.12 and 3.13, and
    docs/testing.md quotes the same command (what CI runs is what a user is told to run)."""
    command = next(line for line in README.read_text().splitlines() if line.endswith("/bin/python -m pytest"))
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert command in ci and ci.index(command) < ci.index("for version in 3.12 3.13; do")
    assert command in (DOCS / "testing.md").read_text().splitlines()


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("Two commands (fresh machine, Python 3.11+)", "two-commands-fresh-machine-python-311"),
        (
            "`triton-tap serve`: a mock Triton answering from captures",
            "triton-tap-serve-a-mock-triton-answering-from-captures",
        ),
        ("Did the work stop? `check-cancel`", "did-the-work-stop-check-cancel"),
        ("Metrics, logs and a config file", "metrics-logs-and-a-config-file"),
        (
            "tensor spec (items of `inputs` and `output_tensors`): Name",
            "tensor-spec-items-of-inputs-and-output_tensors-name",
        ),
        ("See [Replay](replay.md) — **now**", "see-replay--now"),
    ],
)
def test_slug_follows_github(heading: str, expected: str) -> None:
    """Anchors are computed as GitHub computes them (a wrong rule would pass dead anchors or fail good ones)."""
    assert slug(heading) == expected


def test_a_dead_link_is_caught(tmp_path: Path) -> None:
    """The checker reports a missing file, a missing heading, and ignores links inside code."""
    (tmp_path / "other.md").write_text("# Other\n\n## A section\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#a-section) [self](#page) [web](https://example.com/x)\n"
        "[gone](missing.md) [no anchor](other.md#nope)\n\n```\n[in code](nowhere.md)\n```\n"
    )
    assert broken_links(page) == [
        f"missing.md: no such file {tmp_path / 'missing.md'}",
        "other.md#nope: no heading with anchor #nope in " + str(tmp_path / "other.md"),
    ]
