"""The report at production scale, in a real headless Chromium (issue 19): the overview, window
selection, lane virtualisation and the rule that a call-level ending marks only the lanes it cut.

Pages are built in-process from records (``ReportBuilder`` + ``render_html``, the same code the
command runs) and driven through the DevTools protocol with real mouse events.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.captures import runs_records as perf_like_records
from replay.capture import events as ev
from replay.tools.report.model import ReportBuilder
from replay.tools.report.page import render_html
from tests.data.make_golden import Builder
from tests.replay.tools.test_report_browser import DevTools, needs_chromium


def build(records: Iterable[ev.Record], page: Path) -> dict[str, Any]:
    b = ReportBuilder()
    for seq, rec in enumerate(records):
        b.feed(seq, rec)
    model = b.finish(title="overview test")
    page.write_bytes(render_html(model))
    return model


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[DevTools]:
    dt = DevTools(tmp_path)
    try:
        dt.call("Page.enable")
        dt.call("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1, mobile=False)
        yield dt
    finally:
        dt.close()


def open_page(dt: DevTools, page: Path) -> None:
    dt.events.clear()
    dt.call("Page.navigate", url=page.as_uri())
    dt.wait_event("Page.loadEventFired", timeout=120)
    assert dt.eval("document.body.dataset.render") == "ok"
    assert dt.eval("window.__errors") == []


def click(dt: DevTools, point: dict[str, float]) -> None:
    # Whole pixels: Chromium truncates fractional coordinates, which could land in the previous bin.
    point = {"x": round(point["x"]), "y": round(point["y"])}
    for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
        dt.call("Input.dispatchMouseEvent", type=kind, x=point["x"], y=point["y"], button="left", clickCount=1)


def drag(dt: DevTools, a: dict[str, float], b: dict[str, float]) -> None:
    a, b = ({"x": round(p["x"]), "y": round(p["y"])} for p in (a, b))
    dt.call("Input.dispatchMouseEvent", type="mouseMoved", x=a["x"], y=a["y"])
    dt.call("Input.dispatchMouseEvent", type="mousePressed", x=a["x"], y=a["y"], button="left", clickCount=1)
    for k in range(1, 6):
        x = a["x"] + (b["x"] - a["x"]) * k / 5
        dt.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=a["y"], button="left", buttons=1)
    dt.call("Input.dispatchMouseEvent", type="mouseReleased", x=b["x"], y=a["y"], button="left", clickCount=1)


def overlapping(model: dict[str, Any], a: int, z: int) -> list[int]:
    """Lanes whose span meets [a, z] µs, as the page should select them."""
    lanes, span = model["lanes"], model["span_us"]
    return [i for i in range(len(lanes["call"]))
            if (lanes["start"][i] or 0) <= z and (span if lanes["end"][i] is None else lanes["end"][i]) >= a]  # fmt: skip


@needs_chromium
def test_overview_counts_match_the_model_and_filter(tmp_path: Path, browser: DevTools) -> None:
    """The charts hold every started request, response, final, error and cancel; a filter narrows them."""
    page = tmp_path / "r.html"
    model = build(perf_like_records(12_000, runs=2, concurrency=3), page)
    open_page(browser, page)
    assert browser.eval("document.querySelectorAll('.charts .uplot').length") == 4
    assert browser.eval("document.querySelectorAll('.hists .uplot').length") == 3
    ov = browser.eval("tritonTapReport.overview()")
    lanes, ticks = model["lanes"], model["ticks"]
    requests = sum(1 for r in lanes["rid"] if r is not None)
    assert round(ov["started"]) == requests == model["summary"]["requests"]
    assert round(ov["responses"]) == len(ticks["t"])
    assert round(ov["finals"]) == sum(1 for f in ticks["flags"] if f & 2)
    assert ov["errors"] == sum(1 for f in ticks["flags"] if f & 4) > 0
    causes = {c["cause"] for c in model["cancels"]}
    assert dict(ov["cancels"]) == {c: sum(1 for k in model["cancels"] if k["cause"] == c) for c in causes}
    assert ov["hist_ttfr"] == sum(1 for v in lanes["ttfr_ms"] if v is not None)
    assert ov["hist_nresp"] == requests
    assert any(v is not None and v > 0 for v in ov["ttfr_p50"])
    # Filter: only the error outcome.
    browser.eval("var s = document.getElementById('f-outcome'); s.value = 'error'; s.onchange()")
    ov = browser.eval("tritonTapReport.overview()")
    errors = sum(1 for o in lanes["outcome"] if o == "error")
    assert round(ov["started"]) == errors > 0
    assert browser.eval("document.body.dataset.viewLanes") == str(errors)
    assert browser.eval("window.__errors") == []


@needs_chromium
def test_click_a_bin_and_drag_a_range_select_the_lanes(tmp_path: Path, browser: DevTools) -> None:
    """A click selects one bin's window, a drag a range; the lanes drawn are exactly those meeting it."""
    page = tmp_path / "r.html"
    model = build(perf_like_records(12_000, runs=2, concurrency=3), page)
    open_page(browser, page)
    ov = model["overview"]
    width, nbins = ov["bin_us"], ov["nbins"]
    started = [sum(ov["started"][g * nbins + k] for g in range(len(ov["groups"]["model"]))) for k in range(nbins)]
    b = next(k for k in range(nbins // 4, nbins) if started[k])  # a busy bin
    click(browser, browser.eval(f"tritonTapReport.binPoint(0, {b})"))
    assert browser.eval("document.body.dataset.window") == f"{b * width},{(b + 1) * width}"
    view = browser.eval("tritonTapReport.view()")
    assert view == overlapping(model, b * width, (b + 1) * width)
    assert 0 < len(view) < len(model["lanes"]["call"])
    drawn = json.loads(browser.eval("document.getElementById('tl').dataset.drawnLanes"))
    assert 0 < len(drawn) <= len(view)
    # A drag over bins a..z on another chart selects their whole span.
    a = next(k for k in range(nbins // 2, nbins) if started[k])
    z = a + 6
    drag(browser, browser.eval(f"tritonTapReport.binPoint(3, {a})"), browser.eval(f"tritonTapReport.binPoint(3, {z})"))
    lo, hi = (int(v) for v in browser.eval("document.body.dataset.window").split(","))
    assert lo == a * width and hi in ((z + 1) * width, z * width)
    assert browser.eval("tritonTapReport.view()") == overlapping(model, lo, hi)
    assert browser.eval("window.__errors") == []


def many_unary_calls(n: int) -> Iterator[ev.Record]:
    """``n`` ModelInfer calls, one lane each, 1 ms apart (a capture too big for the all-lanes view)."""
    t0 = 1_780_000_000_000_000_000
    method = "/inference.GRPCInferenceService/ModelInfer"
    yield ev.CaptureStarted(t_ns=t0, proxy_version="t", listen="a:1", upstream="b:2", options={})
    for i in range(n):
        t, call = t0 + i * 1_000_000, f"c{i // 100}.{2 * (i % 100) + 1}"
        yield ev.CallStarted(t_ns=t, call=call, conn=call.split(".")[0], method=method, peer="p:1", metadata=[],
                             timeout_ms=None)  # fmt: skip
        yield ev.MessageSeen(t_ns=t + 1000, call=call, dir="c2s", index=0, size=10, compressed=False, model="echo",
                             request_id=f"u{i}")  # fmt: skip
        yield ev.MessageSeen(t_ns=t + 300_000, call=call, dir="s2c", index=0, size=10, compressed=False, model="echo",
                             request_id=f"u{i}", final=True, outputs=["OUTPUT"])  # fmt: skip
        yield ev.CallEnded(t_ns=t + 301_000, call=call, status="OK", details=None, cause="ok", trailers=None,
                           initial_metadata=None, duration_ms=0.3, messages_c2s=1, messages_s2c=1)  # fmt: skip


@needs_chromium
def test_100k_lanes_are_drawn_on_demand_and_virtualised(tmp_path: Path, browser: DevTools) -> None:
    """100k lanes: none drawn until a window is chosen; the whole capture then scrolls drawing only the
    rows in view, the right ones, with a DOM that does not grow with the lanes."""
    page = tmp_path / "r.html"
    model = build(many_unary_calls(100_000), page)
    assert len(model["lanes"]["call"]) == 100_000
    open_page(browser, page)
    assert browser.eval("document.body.dataset.viewLanes") == "0"
    assert "select a window" in browser.eval("document.getElementById('lanehint').textContent")
    browser.eval("document.getElementById('wclear').click()")
    assert browser.eval("document.body.dataset.viewLanes") == "100000"
    for row in (0, 54_321, 99_990):
        browser.eval(f"tritonTapReport.scroll({row})")
        drawn = json.loads(browser.eval("document.getElementById('tl').dataset.drawnLanes"))
        assert 0 < len(drawn) < 80
        if row < 99_000:
            assert drawn[0].endswith(f"· u{row}")
        else:  # the scroller stops at the last lane
            assert drawn[-1].endswith("· u99999")
    assert browser.eval("document.getElementsByTagName('*').length") < 2500
    assert browser.eval("window.__errors") == []


def disconnect_after_completion() -> list[ev.Record]:
    """Two streams, as perf_analyzer leaves them: c1.1's requests p, q complete and r is still in flight
    when the client disconnects; c2.1's requests all completed ~12 s before its disconnect."""
    b = Builder().start()
    b.call("c1.1")
    for rid in ("p", "q", "r"):
        b.request("c1.1", rid)
    for rid in ("p", "q"):
        b.response("c1.1", rid, "t")
        b.response("c1.1", rid, None, final=True)
    b.response("c1.1", "r", "t")
    b.cancel("c1.1", "client_disconnect")
    b.end("c1.1", "CANCELLED", "client_disconnect")
    b.call("c2.1")
    for rid in ("x", "y"):
        b.request("c2.1", rid)
        b.response("c2.1", rid, "t")
        b.response("c2.1", rid, None, final=True)
    b.cancel("c2.1", "client_disconnect", ms=12_000)
    b.end("c2.1", "CANCELLED", "client_disconnect")
    b.finish()
    return list(b.records)


@needs_chromium
def test_a_call_level_ending_marks_only_the_lanes_it_cut(tmp_path: Path, browser: DevTools) -> None:
    """client_disconnect: the cancel mark is on r (in flight) only; both calls carry the call's flag;
    completed lanes show neither the cancel nor the failed call end when hovered at that instant."""
    page = tmp_path / "r.html"
    model = build(disconnect_after_completion(), page)
    assert model["lanes"]["outcome"] == ["completed", "completed", "disconnected", "completed", "completed"]
    open_page(browser, page)
    marks = json.loads(browser.eval("document.getElementById('tl').dataset.cancelMarks"))
    assert marks == ["c1 · c1.1 · r @client_disconnect"]
    flags = json.loads(browser.eval("document.getElementById('tl').dataset.callFlags"))
    assert flags == ["c1.1 @client_disconnect", "c2.1 @client_disconnect"]
    cancel_t = [c["t"] for c in model["cancels"]]
    tip = browser.hover(browser.eval(f"tritonTapReport.point({cancel_t[0]}, 2)"))
    assert json.loads(tip)["cause"] == "client_disconnect"
    for lane, t in ((0, cancel_t[0]), (3, cancel_t[1]), (4, cancel_t[1])):
        tip = browser.hover(browser.eval(f"tritonTapReport.point({t}, {lane})"))
        assert "client_disconnect" not in tip and "call_end" not in tip
    assert browser.eval("window.__errors") == []


@needs_chromium
def test_a_capture_without_calls_renders_an_empty_overview(tmp_path: Path, browser: DevTools) -> None:
    """No calls, no lanes, no ticks: the overview and the lanes render empty, without errors."""
    page = tmp_path / "r.html"
    model = build([ev.CaptureStarted(t_ns=1, proxy_version="t", listen="a:1", upstream="b:2", options={}),
                   ev.CaptureEnded(t_ns=2, reason="shutdown", counts={})], page)  # fmt: skip
    assert model["lanes"]["call"] == [] and model["ticks"]["t"] == []
    open_page(browser, page)
    assert browser.eval("tritonTapReport.overview().started") == 0
    assert browser.eval("document.body.dataset.viewLanes") == "0"
