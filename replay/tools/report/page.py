"""The self-contained HTML page of a report: the template with the model embedded (pure: bytes out).

Two things are packed on the way in, so that a 1M-record capture stays a page of a few MB:

* the response ticks become little-endian typed arrays in base64 (5 bytes a tick instead of ~25 of
  JSON): per lane a tick count and the time of its first tick, per tick the µs since that first
  tick (int32) and its flags (uint8); the record index of each tick only when the records are
  embedded for hover (small captures);
* the charting library, uPlot, is inlined from the copy vendored from its npm package
  (``vendor/``, with its licence and ``uplot.json``: version, tarball integrity, file hashes), so
  the page needs no network.
"""

from __future__ import annotations

import base64
import re
from importlib import resources
from typing import Any

import numpy as np
import orjson

_VENDOR = ("uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE")


def _resource(name: str) -> str:
    return resources.files("replay.tools.report").joinpath(name).read_text(encoding="utf-8")


def vendored(name: str) -> str:
    """A vendored file (see ``vendor/uplot.json``), as shipped in the package."""
    if name not in _VENDOR:
        raise KeyError(name)
    return _resource(f"vendor/{name}")


def _b64(a: np.ndarray[Any, Any]) -> str:
    return base64.b64encode(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()).decode("ascii")


def pack_ticks(ticks: dict[str, list[int]], n_lanes: int, *, with_ri: bool) -> dict[str, Any]:
    """The model's tick columns (grouped by lane, see the model) as base64 typed arrays."""
    lane = np.asarray(ticks["lane"], dtype=np.int64)
    t = np.asarray(ticks["t"], dtype=np.int64)
    counts = np.bincount(lane, minlength=n_lanes).astype(np.int32) if len(lane) else np.zeros(n_lanes, np.int32)
    first = (np.cumsum(counts) - counts).astype(np.int64)
    base = np.zeros(n_lanes, dtype=np.float64)
    has = counts > 0
    base[has] = t[first[has]]
    # int32 µs: a lane's ticks may spread over ~35 minutes; beyond that they are clamped.
    dt = np.clip(t - base.astype(np.int64)[lane], -(2**31), 2**31 - 1).astype(np.int32)
    return {
        "packed": True,
        "n": len(lane),
        "counts": _b64(counts),
        "base": _b64(base),
        "dt": _b64(dt),
        "flags": _b64(np.asarray(ticks["flags"], dtype=np.uint8)),
        "ri": _b64(np.asarray(ticks["ri"], dtype=np.int32)) if with_ri else None,
    }


def render_html(model: dict[str, Any]) -> bytes:
    """The self-contained page: the template with the model embedded as JSON (no network needed)."""
    embedded = dict(model)
    if "ticks" in model and "lanes" in model:
        embedded["ticks"] = pack_ticks(model["ticks"], len(model["lanes"]["call"]),
                                       with_ri=model.get("record_view") is not None)  # fmt: skip
    data = orjson.dumps(embedded)
    # Inside <script> "</script" or "<!--" could end or confuse the element; "<" occurs in JSON only
    # inside strings, where its escaped form means the same.
    data = data.replace(b"<", b"\\u003c")
    title = str(model.get("title", "triton-tap report")).replace("&", "&amp;").replace("<", "&lt;")
    values = {
        b"__TITLE__": title.encode("utf-8"),
        b"__REPORT_DATA__": data,
        b"__UPLOT_JS__": vendored("uPlot.iife.min.js").encode("utf-8"),
        b"__UPLOT_CSS__": vendored("uPlot.min.css").encode("utf-8"),
    }
    # One pass over the template: a title (or data) containing a placeholder is never substituted again.
    return _PLACEHOLDER.sub(lambda m: values[m.group(0)], _resource("template.html").encode("utf-8"))


_PLACEHOLDER = re.compile(rb"__TITLE__|__REPORT_DATA__|__UPLOT_JS__|__UPLOT_CSS__")
