"""``python -m bench.probes.report_build``: what ``triton-tap report`` costs at production scale.

    python -m bench.probes.report_build                      # 100k and 1M records: build time, size, first paint
    python -m bench.probes.report_build --sizes 100000 --keep /tmp/rep

For each size: a synthetic perf_analyzer-like capture (:mod:`bench.captures`, its ``runs`` shape) is written to
a temporary directory (never committed), then

* read: the capture reader alone (``read_capture`` into a list), records/s;
* build: the report builder's own time on those records (``ReportBuilder.feed`` + ``finish``), and
  the page rendering (``render_html``): the reader's speed is measured apart
  (``bench.probes.readers``);
* command: the whole ``python -m replay report CAPTURE -o PAGE`` as a user runs it (a child
  process: start-up, streaming read, build, write), wall and CPU seconds: what the 10 s target is about;
* size: of the written page;
* first paint: headless Chromium (``/usr/bin/chromium``) opens the page through the DevTools
  protocol; the page stamps ``data-render-ms`` (``performance.now()`` when its script has drawn the
  overview and the lanes, i.e. since navigation start), and the first-contentful-paint entry is read;
  console messages and page errors are collected and must be none.

Targets: 1M records -> the command done in <= 10 s, page <= 20 MB, first paint <= 3 s, no console
errors. They are reported, not asserted (a shared 2-core machine is too noisy for a gate).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.captures import write as write_capture
from replay.capture.reader import read_capture
from replay.tools.report.model import ReportBuilder
from replay.tools.report.page import render_html

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1400,1000"]  # fmt: skip


def first_paint(page: Path, workdir: Path, timeout: float = 120) -> dict[str, Any]:
    """Open ``page`` in headless Chromium; the page's own render time, FCP and any console errors."""
    import websocket

    profile = Path(tempfile.mkdtemp(prefix="profile-", dir=workdir))
    proc = subprocess.Popen([str(CHROMIUM), *FLAGS, "--remote-debugging-port=0", f"--user-data-dir={profile}",
                             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (active.exists() and active.read_text().count("\n") >= 1):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.05)
        port = int(active.read_text().splitlines()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            url = next(t["webSocketDebuggerUrl"] for t in json.loads(resp.read()) if t["type"] == "page")
        ws = websocket.create_connection(url, timeout=timeout, suppress_origin=True)
        events: list[dict[str, Any]] = []
        ids = iter(range(1, 1_000_000))

        def call(method: str, **params: Any) -> dict[str, Any]:
            i = next(ids)
            ws.send(json.dumps({"id": i, "method": method, "params": params}))
            while True:
                msg = json.loads(ws.recv())
                if msg.get("id") == i:
                    return dict(msg.get("result", {}))
                events.append(msg)

        def value(expr: str) -> Any:
            return call("Runtime.evaluate", expression=expr, returnByValue=True)["result"].get("value")

        call("Runtime.enable")
        call("Page.enable")
        t = time.monotonic()
        call("Page.navigate", url=page.as_uri())
        while value("document.body && document.body.dataset.render") not in ("ok",):
            if time.monotonic() - t > timeout:
                raise RuntimeError("the page did not render")
            time.sleep(0.05)
        wall = time.monotonic() - t
        fcp = value("(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime || null")
        errors = value("window.__errors.length")
        console = [e for e in events if e.get("method") in ("Runtime.exceptionThrown", "Runtime.consoleAPICalled")
                   and (e["method"] == "Runtime.exceptionThrown" or e["params"].get("type") in ("error", "warning"))]  # fmt: skip
        out = {"render_ms": int(value("+document.body.dataset.renderMs")), "fcp_ms": fcp, "wall_s": round(wall, 2),
               "page_errors": errors, "console_errors": len(console)}  # fmt: skip
        ws.close()
        return out
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(20)
        shutil.rmtree(profile, ignore_errors=True)


def _command(capture: Path, page: Path) -> tuple[float, float]:
    """``(wall s, CPU s)`` of ``python -m replay report`` on ``capture``, as a user runs it."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "replay", "report", str(capture), "-o", str(page)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    stderr = proc.stderr.read() if proc.stderr is not None else b""
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"replay report failed: {stderr.decode(errors='replace').strip()}")
    return wall, usage.ru_utime + usage.ru_stime


def measure(n: int, workdir: Path) -> dict[str, Any]:
    """One size: capture, read, build, render, write, open."""
    found = sorted((workdir / f"capture-{n}").glob("capture-*"))
    capture = found[0] if found else write_capture(workdir / f"capture-{n}", n, shape="runs")
    command_s, command_cpu_s = _command(capture, workdir / f"report-cli-{n}.html")
    t = time.perf_counter()
    reader = read_capture([capture])
    records = list(reader)
    read_s = time.perf_counter() - t
    # The command streams records through; holding 1M of them in a list here would make every
    # garbage collection of the build walk them all, which the command never pays.
    gc.freeze()
    t, cpu = time.perf_counter(), time.process_time()
    builder = ReportBuilder()
    for seq, rec in records:
        builder.feed(seq, rec)
    feed_s = time.perf_counter() - t
    t = time.perf_counter()
    model = builder.finish(files=[str(capture)], gaps=reader.gaps, warnings=reader.warnings)
    finish_s = time.perf_counter() - t
    t = time.perf_counter()
    page = render_html(model)
    render_s = time.perf_counter() - t
    # CPU time too: on a shared machine the wall clock also counts other people's work.
    build_cpu_s = time.process_time() - cpu
    del records
    gc.unfreeze()
    out = workdir / f"report-{n}.html"
    out.write_bytes(page)
    row: dict[str, Any] = {
        "records": model["records"], "requests": model["summary"]["requests"], "ticks": len(model["ticks"]["t"]),
        "read_s": round(read_s, 2), "read_records_per_s": round(model["records"] / read_s),
        "feed_s": round(feed_s, 2), "finish_s": round(finish_s, 2), "render_s": round(render_s, 2),
        "build_s": round(feed_s + finish_s + render_s, 2), "build_cpu_s": round(build_cpu_s, 2), "page_mb": round(len(page) / 1e6, 2),
        "bins": model["overview"]["nbins"], "command_s": round(command_s, 2), "command_cpu_s": round(command_cpu_s, 2),
    }  # fmt: skip
    if CHROMIUM.exists():
        row.update(first_paint(out, workdir))
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.probes.report_build", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100000,1000000", help="comma-separated record counts")
    p.add_argument("--keep", type=Path, default=None, help="work in this directory and keep captures and pages")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    a = p.parse_args(argv)
    work = a.keep or Path(tempfile.mkdtemp(prefix="bench-report-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for n in (int(s) for s in a.sizes.split(",")):
            row = measure(n, work)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'records':>9} {'command s (cpu)':>15} {'read s':>7} {'build s':>8} (feed/finish/render) {'cpu s':>6} {'MB':>6} "
          f"{'render ms':>9} {'FCP ms':>7} errors")  # fmt: skip
    for r in rows:
        command = f"{r['command_s']} ({r['command_cpu_s']})"
        print(f"{r['records']:>9} {command:>15} {r['read_s']:>7} {r['build_s']:>8} ({r['feed_s']}/{r['finish_s']}/{r['render_s']})"
              f" {r['build_cpu_s']:>6} {r['page_mb']:>6} {r.get('render_ms', '-'):>9} {r.get('fcp_ms') or '-':>7} "
              f"{r.get('page_errors', 0) + r.get('console_errors', 0)}")  # fmt: skip
    print("targets at 1M records: command <= 10 s, page <= 20 MB, first paint <= 3000 ms, 0 errors")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
