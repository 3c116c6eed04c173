"""``triton-tap report``: read captures (with progress), build the model, write the HTML page."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

import orjson

from replay.capture.reader import read_capture
from replay.cli.progress import with_progress
from replay.errors import UserError
from replay.tools.report.model import ReportBuilder


def _template() -> str:
    return resources.files("replay.tools.report").joinpath("template.html").read_text(encoding="utf-8")


def render_html(model: dict[str, Any]) -> bytes:
    """The self-contained page: the template with the model embedded as JSON (no network needed)."""
    data = orjson.dumps(model)
    # Inside <script> "</script" or "<!--" could end or confuse the element; "<" occurs in JSON only
    # inside strings, where its escaped form means the same.
    data = data.replace(b"<", b"\\u003c")
    title = str(model.get("title", "triton-tap report")).replace("&", "&amp;").replace("<", "&lt;")
    values = {b"__TITLE__": title.encode("utf-8"), b"__REPORT_DATA__": data}
    # One pass over the template: a title (or data) containing a placeholder is never substituted again.
    return _PLACEHOLDER.sub(lambda m: values[m.group(0)], _template().encode("utf-8"))


_PLACEHOLDER = re.compile(rb"__TITLE__|__REPORT_DATA__")


def _default_title(paths: Sequence[str]) -> str:
    # `caps/meta-A/` names the directory meta-A, not "" (os.path.basename of a trailing slash).
    names = [Path(p).name or str(p) for p in paths]
    return f"triton-tap report: {', '.join(names)}"


def _check_output(paths: Sequence[str], output: Path) -> None:
    """Refuse to write the page over a capture (a typo in -o must not destroy evidence)."""
    if output.name.endswith((".jsonl", ".jsonl.gz")):
        raise UserError(f"-o {str(output)!r} looks like a capture file (*.jsonl, *.jsonl.gz): choose an .html name")
    try:
        target = output.resolve()
    except OSError:
        return
    for p in paths:
        if target == Path(p).resolve():
            raise UserError(f"-o {str(output)!r} is one of the input captures: choose another output file")


def _write_atomically(output: Path, page: bytes) -> None:
    """Write ``page`` next to ``output`` and rename it over: a failed write leaves no half page."""
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(page)
        os.replace(tmp, output)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def build_report(paths: Sequence[str], output: Path, *, err: TextIO | None = None, title: str | None = None) -> dict[str, Any]:
    """Read ``paths``, write the page to ``output``; returns the model (raises CaptureError/UserError)."""
    err = err or sys.stderr
    _check_output(paths, output)
    reader = read_capture(list(paths))
    builder = ReportBuilder()
    for seq, record in with_progress(reader, err):
        builder.feed(seq, record)
    for w in reader.warnings:
        print(f"triton-tap: warning: {w}", file=err)
    model = builder.finish(files=[str(p) for p in reader.files], gaps=reader.gaps, warnings=reader.warnings,
                           title=title or _default_title(paths))  # fmt: skip
    page = render_html(model)
    try:
        _write_atomically(output, page)
    except OSError as e:
        raise UserError(f"cannot write {str(output)!r}: {e.strerror or e}") from None
    size = f"{len(page) / 1e6:.1f} MB" if len(page) >= 1e6 else f"{len(page) / 1e3:.0f} kB"
    print(f"wrote {output} ({size}): {model['records']} records, "
          f"{len(model['lanes']['call'])} lanes, {len(model['ticks']['t'])} response ticks", file=err)  # fmt: skip
    return model
