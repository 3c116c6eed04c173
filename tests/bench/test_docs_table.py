"""docs/benchmarks.md opens with a table rendered from a committed results file, and cannot drift from it.

The page names the file in the marker above the table; the text between the markers must be what
``python -m bench --render FILE`` prints for it. Every results file in bench/runs/ is linked from the
page (an earlier run is a file, not prose), renders, and the notebooks' links resolve.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness.tables import render
from tests.support.paths import ROOT
from tests.test_docs import broken_links, links

PAGE = ROOT / "docs" / "benchmarks.md"
RUNS = ROOT / "bench" / "runs"
BLOCK = re.compile(r"<!-- bench-table: (\S+) .*?-->\n(.*?)<!-- /bench-table -->\n", re.S)


def _block(text: str) -> tuple[Path, str]:
    found = BLOCK.findall(text)
    assert len(found) == 1, "docs/benchmarks.md must hold exactly one <!-- bench-table: FILE ... --> block"
    name, table = found[0]
    return ROOT / name, table


def test_the_page_shows_what_its_results_file_renders() -> None:
    results, shown = _block(PAGE.read_text())
    assert results.parent == RUNS and results.exists(), f"{results} is not a committed results file"
    expected = render(json.loads(results.read_text()))
    assert shown == expected, (
        f"docs/benchmarks.md's table is not what `python -m bench --render {results.relative_to(ROOT)}` prints; "
        "paste its output between the markers"
    )


def test_the_render_command_prints_the_same(tmp_path: Path) -> None:
    """``python -m bench --render`` is what the page tells people to run: it prints exactly that block."""
    results, shown = _block(PAGE.read_text())
    proc = subprocess.run([sys.executable, "-m", "bench", "--render", str(results)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    proc = subprocess.run([sys.executable, "-m", "bench", "--render", str(bad)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("results", sorted(RUNS.glob("*.json")), ids=lambda p: p.name)
def test_every_run_renders_says_when_and_is_linked_from_the_page(results: Path) -> None:
    data = json.loads(results.read_text())
    assert data.get("started") and data.get("scenarios"), results.name
    table = render(data)
    assert "| measurement | target | proxy | nginx | floor | met |" in table
    linked = {(PAGE.parent / t.partition("#")[0]).resolve() for t in links(PAGE)}
    assert results.resolve() in linked, f"docs/benchmarks.md does not link {results.relative_to(ROOT)}"


@pytest.mark.parametrize("notebook", sorted(RUNS.glob("*.md")), ids=lambda p: p.name)
def test_the_notebooks_links_resolve_and_the_page_links_them(notebook: Path) -> None:
    assert broken_links(notebook) == []
    linked = {(PAGE.parent / t.partition("#")[0]).resolve() for t in links(PAGE)}
    assert notebook.resolve() in linked
