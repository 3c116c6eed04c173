"""`triton-tap report` as a command: what it refuses to overwrite, how it writes, its title."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import orjson
import pytest

from replay.cli.report import build_report
from replay.errors import UserError
from replay.tools.report.page import render_html
from tests.support.paths import DATA


def test_report_refuses_to_overwrite_an_input_capture(tmp_path: Path) -> None:
    """-o naming one of the inputs: UserError, and the capture is untouched."""
    cap = tmp_path / "u2.jsonl"
    shutil.copy(DATA / "unary.jsonl", cap)
    before = cap.read_bytes()
    with pytest.raises(UserError, match="capture"):
        build_report([str(cap)], cap, err=io.StringIO())
    assert cap.read_bytes() == before


@pytest.mark.parametrize(
    "name", ["other.jsonl", "other.jsonl.gz", "capture-20261206T101010-7-0002.jsonl.zst",
             "capture-20261206T101010-7-0002.payload"],
)  # fmt: skip
def test_report_refuses_a_capture_like_output_name(tmp_path: Path, name: str) -> None:
    """-o naming a capture file, of any compression (zstd is the default one), or a side file, is refused even
    when it is not an input; a file there is left as it was (it was overwritten with the page, exit 0)."""
    (tmp_path / name).write_bytes(b"recorded")
    with pytest.raises(UserError, match=r"looks like a capture file"):
        build_report([str(DATA / "unary.jsonl")], tmp_path / name, err=io.StringIO())
    assert (tmp_path / name).read_bytes() == b"recorded"


def test_report_writes_through_a_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page appears by rename: a write that fails leaves the old page and no temporary file behind."""
    out = tmp_path / "r.html"
    out.write_text("old page")

    def broken(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(UserError, match="No space left"):
        build_report([str(DATA / "unary.jsonl")], out, err=io.StringIO())
    assert out.read_text() == "old page" and os.listdir(tmp_path) == ["r.html"]
    monkeypatch.undo()
    build_report([str(DATA / "unary.jsonl")], out, err=io.StringIO())
    assert out.read_bytes().startswith(b"<!") and os.listdir(tmp_path) == ["r.html"]


def test_default_title_names_a_directory_given_with_a_trailing_slash(tmp_path: Path) -> None:
    """`report caps/meta-A/`: the title names meta-A, not an empty string."""
    d = tmp_path / "meta-A"
    d.mkdir()
    shutil.copy(DATA / "unary.jsonl", d / "capture-20260101T000000-1.jsonl")
    model = build_report([f"{d}/"], tmp_path / "r.html", err=io.StringIO())
    assert model["title"] == "triton-tap report: meta-A"


def test_a_title_holding_a_placeholder_is_not_substituted() -> None:
    """--title '__REPORT_DATA__' shows as text: the data is embedded once, in its script element only."""
    model = {"title": "__REPORT_DATA__ and __TITLE__", "records": 0, "marker": "__TITLE__"}
    page = render_html(model).decode()
    data = orjson.dumps(model).decode()
    assert "<title>__REPORT_DATA__ and __TITLE__</title>" in page
    assert page.count(data) == 1
