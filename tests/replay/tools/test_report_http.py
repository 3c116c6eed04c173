"""The report on HTTP and mixed gRPC + HTTP captures (tests/data/http: real Triton 2.51 exchanges)."""

from __future__ import annotations

from replay.tools.report.model import ERROR, FINAL, TEXT
from replay.tools.report.page import render_html
from tests.replay.tools.test_report_model import lane_names, model_of


def test_http_calls_get_request_lanes_with_events_as_ticks() -> None:
    """mixed: the gRPC stream, the HTTP infer and the HTTP generate_stream each a lane, ticks by call."""
    m = model_of("http/mixed.jsonl")
    assert lane_names(m) == [("c1.1", "g1", "completed"), ("c2.1", "req-binary-False", "completed"),
                             ("c2.2", "gs-1", "completed")]  # fmt: skip
    assert m["calls"]["method"] == ["ModelStreamInfer", "HTTP infer", "HTTP generate_stream"]
    ticks = m["ticks"]
    assert [(lane, f) for lane, f in zip(ticks["lane"], ticks["flags"], strict=True) if lane == 2] == [
        (2, TEXT), (2, TEXT), (2, TEXT | FINAL)]  # fmt: skip
    # The end mark of a call is a success by its own protocol's status: gRPC OK, HTTP 200.
    assert m["calls"]["status"] == ["OK", "200", "200"]
    assert m["calls"]["ok"] == [True, True, True]
    assert {s["model"]: s["requests"] for s in m["models"]} == {"tokens": 2, "echo": 1}


def test_a_client_disconnect_marks_the_http_requests_lane() -> None:
    m = model_of("http/generate_stream_cancelled.jsonl")
    (cancel,) = m["cancels"]
    assert cancel["cause"] == "client_disconnect"
    assert [m["lanes"]["rid"][i] for i in cancel["lanes"]] == ["04a-mid"]
    assert [m["lanes"]["rid"][i] for i in cancel["responded_lanes"]] == ["04a-mid"]
    assert m["lanes"]["outcome"] == ["disconnected"]


def test_http_errors_are_marked_and_not_ok() -> None:
    """A 400 is not a successful end; an error event under 200 is an error tick on an error lane."""
    first = model_of("http/error_first.jsonl")
    assert first["calls"]["ok"] == [False]
    assert first["ticks"]["flags"] == [ERROR | FINAL]
    under = model_of("http/error_under_200.jsonl")
    assert under["calls"]["ok"] == [True]
    assert under["lanes"]["outcome"] == ["error"]
    assert under["ticks"]["flags"] == [TEXT, TEXT, ERROR | FINAL]


def test_the_page_renders_http_captures() -> None:
    page = render_html(model_of("http/mixed.jsonl", "http/silent.jsonl"))
    assert b"HTTP generate_stream" in page


def test_an_event_no_client_got_is_drawn_as_cut_and_counted_as_no_response() -> None:
    """An event stream whose last bytes no blank line ended: an SSE client discards them, so `check` counts one
    response. The report drew them as an ordinary text tick and counted two, in the overview's responses too."""
    from replay.tools.report.model import ReportBuilder
    from replay.tools.report.overview import CUT
    from tests.proxy.relay.http1_wire import drive

    head = b"POST /v2/models/m/generate_stream HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n"
    body = b'data: {"id":"r","OUT":"a"}\n\ndata: {"id":"r","OUT":"b"}'
    sse = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
           + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")  # fmt: skip
    run = drive([("c2s", head + b'{"id":"r"}'), ("s2c", sse)])
    b = ReportBuilder()
    for seq, rec in enumerate(run.records()):
        b.feed(seq, rec)
    m = b.finish()
    assert m["ticks"]["flags"] == [TEXT, TEXT | CUT]
    assert m["lanes"]["responses"] == [1]
    assert sum(m["overview"]["responses"]) == 1
