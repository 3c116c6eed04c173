"""The self-contained HTML page of a report: the template with the model embedded (pure: bytes out)."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import orjson


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
