"""`triton-tap report` rendered in a real headless Chromium (Debian's `chromium`, started by the test).

What is pinned: the page renders without console errors or page errors, draws the expected lanes
of a known golden capture with the cancel's in-flight set highlighted, a screenshot is produced
(written to the CI artifact directory), and a 100k-record capture gives a bounded file and a small
DOM (ticks are drawn on a canvas, the request table is paged).
"""

from __future__ import annotations

import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import main as triton_tap_main
from tests.data.make_golden import Builder
from tests.support.paths import DATA, ROOT

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("TRITON_TAP_ARTIFACTS", ROOT / "artifacts"))
TRITON_TAP = Path(sys.executable).parent / "triton-tap"

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (apt-get install -y chromium; .ci/run installs it)"
)

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--enable-logging=stderr", "--v=0", "--window-size=1400,1000",
]  # fmt: skip


def chromium(page: Path, tmp_path: Path, *action: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium once on ``page`` with a fresh profile; it exits by itself."""
    profile = tmp_path / f"profile-{time.monotonic_ns()}"
    try:
        return subprocess.run(
            [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *action, page.as_uri()],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        shutil.rmtree(profile, ignore_errors=True)


class _Dom(html.parser.HTMLParser):
    """Element count and the attributes of the elements the test reads."""

    def __init__(self) -> None:
        super().__init__()
        self.elements = 0
        self.attrs: dict[str, dict[str, str | None]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements += 1
        d = dict(attrs)
        key = d.get("id") or tag
        if key in ("body", "tl", "errors"):
            self.attrs[key] = d


def rendered(page: Path, tmp_path: Path) -> tuple[_Dom, str, str]:
    """The DOM after the page's scripts ran, plus Chromium's stderr (console messages are logged there)."""
    proc = chromium(page, tmp_path, "--dump-dom", "--virtual-time-budget=5000")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = _Dom()
    dom.feed(proc.stdout)
    return dom, proc.stdout, proc.stderr


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def assert_clean(dom: _Dom, stderr: str) -> None:
    body = dom.attrs["body"]
    assert body.get("data-render") == "ok", body
    assert body.get("data-errors") == "0", body
    assert console_lines(stderr) == []


@needs_chromium
def test_error_detection_sees_a_broken_page(tmp_path: Path) -> None:
    """Control: the checks used below do catch a page error and a console error."""
    page = tmp_path / "broken.html"
    page.write_text('<html><body data-render="pending"><script>console.error("boom"); nope();</script></body></html>')
    dom, _, stderr = rendered(page, tmp_path)
    assert dom.attrs["body"].get("data-render") == "pending"
    assert any("boom" in line for line in console_lines(stderr))
    assert any("nope is not defined" in line for line in console_lines(stderr))


@needs_chromium
def test_golden_capture_renders_expected_lanes_and_screenshot(tmp_path: Path) -> None:
    """stream_cancel + deadline + unary: lanes in order, in-flight sets highlighted, no errors, a PNG."""
    page = tmp_path / "report.html"
    captures = ["stream_cancel.jsonl", "deadline.jsonl", "interleaved.jsonl", "error_midstream.jsonl", "unary.jsonl"]
    assert triton_tap_main(["report", *(str(DATA / c) for c in captures), "-o", str(page)]) == 0
    dom, text, stderr = rendered(page, tmp_path)
    assert_clean(dom, stderr)
    drawn = json.loads(dom.attrs["tl"]["data-drawn-lanes"] or "[]")
    assert drawn == [
        "c1 · c1.1 · done", "c1 · c1.1 · a", "c1 · c1.1 · b",
        "2:c1 · 2:c1.1 · slow",
        "3:c1 · 3:c1.1 · a", "3:c1 · 3:c1.1 · b",
        "4:c1 · 4:c1.1 · f1",
        "5:c1 · 5:c1.1 · ServerLive", "5:c1 · 5:c1.3 · e1", "5:c1 · 5:c1.5 · e2",
    ]  # fmt: skip
    # The in-flight sets of both cancels (client_cancel: a, b; deadline: slow); `done` had finished.
    lit = json.loads(dom.attrs["tl"]["data-highlighted-lanes"] or "[]")
    assert lit == ["c1 · c1.1 · a", "c1 · c1.1 · b", "2:c1 · 2:c1.1 · slow"]
    for cell in ("client_cancel", "deadline", "fail_midstream", "completed", "cancelled"):
        assert cell in text
    shot = ARTIFACTS / "report.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    shot.unlink(missing_ok=True)
    proc = chromium(page, tmp_path, f"--screenshot={shot}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.stat().st_size > 20_000  # a drawn page, not a blank one
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_chromium
def test_a_cancel_of_id_less_requests_lists_them_as_quoted_empty_ids(tmp_path: Path) -> None:
    """Two id-less requests in flight at a client's cancel: the cancels table names them `"", ""` (as `check`
    shows an id-less request), where it showed a lone `, `."""
    from tests.data.make_golden import Builder

    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", prompt="a", empty_final=True)
    b.response("c1.1", "", "t-0")
    b.request("c1.1", "", prompt="b", empty_final=True)
    b.cancel("c1.1", "client_cancel", rst_code=8)
    b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
    capture = tmp_path / "idless_cancel.jsonl"
    capture.write_bytes(b.finish().render())
    page = tmp_path / "report.html"
    assert triton_tap_main(["report", str(capture), "-o", str(page)]) == 0
    dom, text, stderr = rendered(page, tmp_path)
    assert_clean(dom, stderr)
    assert "<td>client_cancel</td><td>8</td><td>\"\", \"\"</td>" in text, text[text.find("cancels"):][:3000]


@needs_chromium
def test_captures_with_holes_render_and_list_them(tmp_path: Path) -> None:
    """Dropped records, missing seq numbers, a killed proxy, a cut last line: drawn and listed, no errors;
    a request open where records were lost is unknown, a violation after the loss named so; an id
    group's responses are in its rows."""
    page = tmp_path / "holes.html"
    captures = ["gaps.jsonl", "proxy_killed.jsonl", "truncated_last_line.jsonl", "unattributable.jsonl",
                "lost_request.jsonl", "idless_mixed_ends.jsonl"]  # fmt: skip
    assert triton_tap_main(["report", *(str(DATA / c) for c in captures), "-o", str(page)]) == 0
    dom, text, stderr = rendered(page, tmp_path)
    assert_clean(dom, stderr)
    for hole in ("gap_record at", "seq_gap at", "missing_capture_end at", "last line cut short"):
        assert hole in text
    drawn = json.loads(dom.attrs["tl"]["data-drawn-lanes"] or "[]")
    assert "4:c1 · 4:c1.1 · (unattributed)" in drawn
    assert ">unknown<" in text and "response_after_final (after records were lost)" in text
    assert ">group 10 (7)<" in text


def big_capture(path: Path) -> int:
    """~100k records: 520 streams on 50 connections, 4 requests x 48 responses each, every 7th cancelled."""
    b = Builder().start()
    for s in range(520):
        call = f"c{s % 50 + 1}.{2 * (s // 50) + 1}"
        b.call(call)
        ids = [f"s{s}-r{k}" for k in range(4)]
        for rid in ids:
            b.request(call, rid, ms=0.2)
        cancel = s % 7 == 3
        for j in range(48):
            if cancel and j > 30:
                break
            for rid in ids:
                b.response(call, rid, "tok", final=False, ms=0.05)
        if cancel:
            b.cancel(call, "client_cancel", rst_code=8)
            b.end(call, "CANCELLED", "client_cancel")
            continue
        for rid in ids:
            b.response(call, rid, None, final=True, ms=0.05)
        b.half_close(call)
        b.end(call)
    b.finish()
    path.write_bytes(b.render())
    return len(b.records)


@needs_chromium
def test_100k_record_capture_stays_small_in_file_and_dom(tmp_path: Path) -> None:
    """A 100k-record capture: the page is < 8 MB, renders without errors, < 2500 DOM elements."""
    capture = tmp_path / "big.jsonl"
    n = big_capture(capture)
    assert n >= 100_000
    page = tmp_path / "big.html"
    t = time.monotonic()
    proc = subprocess.run([str(TRITON_TAP), "report", str(capture), "-o", str(page)],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    built_s = time.monotonic() - t
    assert proc.returncode == 0, proc.stderr
    assert f"{n} records, 2080 lanes" in proc.stderr
    size = page.stat().st_size
    assert size < 8_000_000, size
    dom, _, stderr = rendered(page, tmp_path)
    assert_clean(dom, stderr)
    assert dom.elements < 2500, dom.elements
    drawn = json.loads(dom.attrs["tl"]["data-drawn-lanes"] or "[]")
    assert 0 < len(drawn) < 100  # only the visible window of 2080 lanes is drawn
    print(f"100k report: {n} records -> {size / 1e6:.2f} MB in {built_s:.1f} s, {dom.elements} DOM elements")


def test_report_of_a_missing_capture_is_one_line(tmp_path: Path) -> None:
    """A capture path that does not exist: one line on stderr, exit 2, no page written."""
    out = tmp_path / "r.html"
    proc = subprocess.run([str(TRITON_TAP), "report", str(tmp_path / "nope.jsonl"), "-o", str(out)],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "no such file" in proc.stderr
    assert not out.exists()


def test_report_to_an_unwritable_path_is_one_line(tmp_path: Path) -> None:
    """An output in a directory that does not exist: one line naming it, exit 2."""
    out = tmp_path / "no" / "dir" / "r.html"
    proc = subprocess.run([str(TRITON_TAP), "report", str(DATA / "one_response.jsonl"), "-o", str(out)],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "cannot write" in proc.stderr


class DevTools:
    """One headless Chromium driven over the DevTools protocol (websocket-client); closed by the test."""

    def __init__(self, tmp_path: Path) -> None:
        import urllib.request

        import websocket

        self.profile = tmp_path / "cdp-profile"
        self.proc = subprocess.Popen(
            [str(CHROMIUM), *FLAGS, "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            active = self.profile / "DevToolsActivePort"
            deadline = time.monotonic() + 60
            while not (active.exists() and active.read_text().count("\n") >= 1):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise AssertionError("chromium did not open its DevTools port")
                time.sleep(0.05)
            port = int(active.read_text().splitlines()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
                targets = json.loads(resp.read())
            url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        except BaseException:
            self.close()
            raise
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                assert "error" not in msg, msg
                result: dict[str, Any] = msg["result"]
                return result
            self.events.append(msg)

    def wait_event(self, method: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            assert time.monotonic() < deadline, f"no {method}"
            self.events.append(json.loads(self.ws.recv()))

    def eval(self, expression: str) -> Any:
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in out, out
        return out["result"].get("value")

    def hover(self, point: dict[str, float]) -> str:
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=point["x"], y=point["y"])
        # the tooltip is set synchronously in the mousemove handler
        return str(self.eval("document.getElementById('tip').style.display === 'block' ? "
                             "document.getElementById('tip').textContent : ''"))  # fmt: skip

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(20)
        shutil.rmtree(self.profile, ignore_errors=True)


@needs_chromium
def test_hover_shows_the_record_and_click_selects_a_cancel(tmp_path: Path) -> None:
    """Through the DevTools protocol: hovering a tick shows its capture record, hovering the cancel
    shows the cancel record, clicking the cancel's row highlights exactly its in-flight set."""
    page = tmp_path / "report.html"
    assert triton_tap_main(["report", str(DATA / "stream_cancel.jsonl"), "-o", str(page)]) == 0
    dt = DevTools(tmp_path)
    try:
        dt.call("Page.enable")
        dt.call("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1, mobile=False)
        dt.call("Page.navigate", url=page.as_uri())
        dt.wait_event("Page.loadEventFired")
        assert dt.eval("document.body.dataset.render") == "ok"
        tip = dt.hover(dt.eval("tritonTapReport.tickPoint(0)"))
        record = json.loads(tip)
        assert (record["kind"], record["seq"], record["request_id"], record["dir"]) == ("message", 3, "done", "s2c")
        assert "omitted" in record["payload"]  # tensor bytes are not shown
        tip = dt.hover(dt.eval("tritonTapReport.cancelPoint(0)"))
        cancel = json.loads(tip)
        assert (cancel["kind"], cancel["cause"], cancel["in_flight"]) == ("cancel", "client_cancel", ["a", "b"])
        dt.hover({"x": 5, "y": 5})
        assert dt.eval("document.getElementById('tip').style.display") == "none"
        dt.eval("document.querySelector('#cancels tbody tr').click()")
        assert dt.eval("document.querySelector('#cancels tbody tr').className") == "sel"
        lit = json.loads(dt.eval("document.getElementById('tl').dataset.highlightedLanes"))
        assert lit == ["c1 · c1.1 · a", "c1 · c1.1 · b"]
        assert dt.eval("window.__errors.length") == 0
    finally:
        dt.close()


@needs_chromium
def test_an_id_groups_rows_show_the_groups_first_response_and_end_as_check_does(tmp_path: Path) -> None:
    """idless_mixed_ends: 10 id-less requests that got their responses together. Each row's first response and
    duration are the group's, marked `group ...` as in check's table (the first-response cell was blank, the
    duration shown as the request's own)."""
    page = tmp_path / "report.html"
    assert triton_tap_main(["report", str(DATA / "idless_mixed_ends.jsonl"), "-o", str(page)]) == 0
    dom, text, stderr = rendered(page, tmp_path)
    assert_clean(dom, stderr)
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", text[text.find('id="reqs"'):])
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows if "<td" in row]
    assert len(cells) == 10
    # columns: conn, call, id, model, outcome, responses, first, inter p50, inter p99, duration, violations
    assert all(c[6].startswith("group ") and c[9].startswith("group ") for c in cells), cells[:2]
