"""HTTP calls in the request machine: one request per call, tied by call, with the same outcome model as gRPC.

Pure: the golden HTTP captures (tests/data/http) and captures built by tests/data/make_golden.py's
Builder from the real Triton 2.51 exchanges of tests/proxy/triton/data/http (labelled by the proxy's
own HTTP labeller). Only the cancel records are the Builder's: they are what the proxy writes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from replay.capture import events as ev
from replay.machine.outcomes import TrackResult
from replay.machine.tracker import track
from tests.data.make_golden import STREAM, Builder
from tests.proxy.triton.http_wire import exchanges
from tests.support.paths import DATA

HTTP = DATA / "http"

#: golden -> (call, request id, kind, outcome, responses, final, status, error) of each request.
GOLDEN: dict[str, list[tuple[str, str, str, str, int, bool | None, str, str | None]]] = {
    "unary_json": [("c1.1", "req-binary-False", "unary", "completed", 1, None, "200", None)],
    "unary_binary": [("c1.1", "req-binary-True", "unary", "completed", 1, None, "200", None)],
    "generate_stream_completed": [("c1.1", "gs-1", "stream", "completed", 3, True, "200", None)],
    # The client closed mid-stream: the cancel's cause decides, as on gRPC; the 200 is no error.
    "generate_stream_cancelled": [("c1.1", "04a-mid", "stream", "disconnected", 2, False, "200", None)],
    "error_under_200": [
        ("c1.1", "gs-err2", "stream", "error", 3, True, "200", "fail_midstream: backend failure after 2 responses")
    ],
    "error_first": [
        ("c1.1", "gs-err0", "stream", "error", 1, True, "400", "fail_midstream: backend failure after 2 responses")
    ],
    # No event and a clean end: completed with 0 responses (the body's end is the final signal).
    "silent": [("c1.1", "gs-silent", "stream", "completed", 0, True, "200", None)],
    "mixed": [
        ("c1.1", "g1", "stream", "completed", 2, True, "OK", None),
        ("c2.1", "req-binary-False", "unary", "completed", 1, None, "200", None),
        ("c2.2", "gs-1", "stream", "completed", 3, True, "200", None),
    ],
    # The chunks carry the server's id, [DONE] none: tied by call to the request (sent without id).
    "openai_stream": [("c1.1", "", "stream", "completed", 3, True, "200", None)],
}


def _rows(result: TrackResult) -> list[tuple[str, str | None, str, str, int, bool | None, str | None, str | None]]:
    return [(r.call, r.request_id, r.kind, r.outcome, r.responses, r.final, r.status, r.error) for r in result.requests]


@pytest.mark.parametrize("name", list(GOLDEN))
def test_each_http_golden_gives_its_outcome(name: str) -> None:
    """Every golden: the documented outcome per request, every response attributed, no violation, no warning."""
    result = track(HTTP / f"{name}.jsonl")
    assert _rows(result) == GOLDEN[name]
    assert result.ok
    assert not result.unattributable
    assert not result.warnings
    assert result.unlabelled_messages == 0


def test_every_http_golden_is_covered() -> None:
    assert {p.stem for p in Path(HTTP).glob("*.jsonl")} == set(GOLDEN)


def _records(b: Builder) -> TrackResult:
    return track(b.finish().records)


def test_generate_200_with_an_error_json_is_an_error_never_success() -> None:
    """Triton's /generate answers 200 with an error JSON when the model sent two responses or none (real bytes)."""
    for x in (exchanges("03e_generate_nonstreaming")[0], exchanges("03e_generate_nonstreaming")[2]):
        assert x.status == 200
        b = Builder().start(grpc=False, http=True)
        b.http_exchange("c1.1", x)
        (r,) = _records(b).requests
        assert (r.kind, r.outcome, r.status, r.responses) == ("unary", "error", "200", 1)
        assert r.error is not None and r.error.startswith("generate expects model to produce exactly 1 response")
        assert r.notes == ()  # a unary reply has no final flag to miss


def test_generate_one_response_and_generate_on_a_unary_model_complete() -> None:
    for x in (exchanges("03e_generate_nonstreaming")[1], exchanges("03e_generate_nonstreaming")[4]):
        b = Builder().start(grpc=False, http=True)
        b.http_exchange("c1.1", x)
        (r,) = _records(b).requests
        assert (r.kind, r.outcome, r.status, r.error, r.final) == ("unary", "completed", "200", None, None)


@pytest.mark.parametrize("index", range(5))
def test_infer_refusals_are_errors_with_the_reply_error(index: int) -> None:
    """501 decoupled, 404 unknown model / version, 400 missing input, 500 bad JSON: error, the JSON's text."""
    x = exchanges("02_infer_refusals")[index]
    b = Builder().start(grpc=False, http=True)
    b.http_exchange("c1.1", x)
    (r,) = _records(b).requests
    assert (r.outcome, r.status) == ("error", str(x.status))
    assert r.error and r.error in x.reply.decode()


def test_generate_stream_rejected_before_inference_is_an_error() -> None:
    """A plain JSON 404/400 on generate_stream (no event stream): one error reply."""
    for x in exchanges("03f_generate_stream_rejections")[:2]:
        b = Builder().start(grpc=False, http=True)
        b.http_exchange("c1.1", x)
        (r,) = _records(b).requests
        assert (r.outcome, r.status, r.responses) == ("error", str(x.status), 1)


def test_an_error_event_followed_by_more_events_stays_an_error() -> None:
    """Triton's `scripted` model (t, e, t, F): an error without the final flag, then a response and the clean end."""
    x = exchanges("03f_generate_stream_rejections")[2]
    b = Builder().start(grpc=False, http=True)
    b.http_exchange("c1.1", x)
    result = _records(b)
    (r,) = result.requests
    assert (r.outcome, r.status, r.final) == ("error", "200", True)
    assert r.responses == 3 and r.error == "scripted: error 1"
    assert result.ok  # what Triton does: no violation


def test_a_cut_stream_with_no_event_is_never_completed() -> None:
    """A zero-event stream completes only when its body ended cleanly: cut by either side it is not."""
    x = exchanges("03d_generate_stream_silent")[0]
    for cause, outcome in (("client_disconnect", "disconnected"), ("upstream_disconnect", "disconnected"),
                           ("proxy_shutdown", "interrupted")):  # fmt: skip
        b = Builder().start(grpc=False, http=True)
        b.http_call("c1.1", x)
        b.http_request("c1.1", x)
        b.http_cancel("c1.1", cause)
        b.http_end("c1.1", x, cause=cause)
        (r,) = _records(b).requests
        assert (r.outcome, r.responses, r.final) == (outcome, 0, False), cause


def test_a_late_cancel_before_the_first_event_ties_to_the_request() -> None:
    """04c: the client closed before B's first event; the proxy's cancel names the in-flight request."""
    x = exchanges("04c_disconnect_before_first_event_steps_serial")[1]
    b = Builder().start(grpc=False, http=True)
    b.http_call("c1.1", x)
    b.http_request("c1.1", x)
    b.http_cancel("c1.1", "client_disconnect")
    b.http_end("c1.1", x, cause="client_disconnect")
    (r,) = _records(b).requests
    assert (r.request_id, r.outcome, r.responses) == ("B-queued", "disconnected", 0)


def test_an_open_http_call_at_the_capture_end_is_incomplete() -> None:
    x = exchanges("03a_generate_stream_completed_keepalive")[0]
    b = Builder().start(grpc=False, http=True)
    b.http_call("c1.1", x)
    b.http_request("c1.1", x)
    (r,) = _records(b).requests
    assert (r.outcome, r.status) == ("incomplete", None)


def test_health_and_metadata_calls_are_calls_not_requests() -> None:
    b = Builder().start(grpc=False, http=True)
    xs = exchanges("05a_health_metadata")
    for i, x in enumerate(xs):
        b.http_exchange(f"c1.{i + 1}", x)
    result = _records(b)
    assert result.requests == ()
    assert len(result.calls) == len(xs)
    assert result.summary()["calls_by_method"]["GET /v2/health/ready"] == 1
    assert result.ok and not result.warnings


def test_mixed_grpc_and_http_keep_their_own_rules() -> None:
    """A gRPC stream and HTTP calls in one capture: the HTTP call's id-less events never go to the gRPC stream."""
    b = Builder().start(http=True)
    b.call("c1.1", STREAM)
    b.request("c1.1", "")
    x = exchanges("03f_generate_stream_rejections")[2]
    b.http_exchange("c2.1", x)
    b.response("c1.1", "", None, final=True)
    b.end("c1.1")
    result = _records(b)
    assert [(r.call, r.outcome, r.responses) for r in result.requests] == [("c1.1", "completed", 1),
                                                                          ("c2.1", "error", 3)]
    assert result.ok


def test_an_undecoded_http_request_is_still_its_calls_request() -> None:
    """A body the labeller could not read (no labels, a decode_error) is tied by its call all the same:
    its reply is its own, never unattributable (written by hand: a relay's label buffer overflow)."""
    from dataclasses import replace

    x = exchanges("02_infer_refusals")[2]  # 400 missing input
    b = Builder().start(grpc=False, http=True)
    b.http_exchange("c1.1", x)
    i = next(i for i, r in enumerate(b.records) if getattr(r, "dir", None) == "c2s")
    b.records[i] = replace(b.records[i], request_id=None, model=None, decode_error="message larger than the label buffer")
    result = _records(b)
    (r,) = result.requests
    assert (r.request_id, r.outcome, r.status, r.responses) == (None, "error", "400", 1)
    assert not result.unattributable
    assert any("tracked by its call" in w for w in result.warnings)


def test_an_openai_call_without_stream_is_unary() -> None:
    """OpenAI's endpoints stream only when asked: a reply with no final flag (one JSON body) makes the
    request unary (scripted from the public format: no such server here)."""
    from replay.capture import events as ev

    start = ev.CallStarted(t_ns=1, call="c1.1", conn="c1", method="POST /v1/chat/completions", peer="p",
                           metadata=[], timeout_ms=None, protocol="http", http_version="1.1")  # fmt: skip
    req = ev.MessageSeen(t_ns=2, call="c1.1", dir="c2s", index=0, size=10, compressed=False, model="llama",
                         request_id="")  # fmt: skip
    reply = ev.MessageSeen(t_ns=3, call="c1.1", dir="s2c", index=0, size=10, compressed=False, model="llama",
                           request_id="chatcmpl-1", outputs=["choices"], finish_reason="stop")  # fmt: skip
    end = ev.CallEnded(t_ns=4, call="c1.1", status="200", details=None, cause="ok", trailers=None,
                       initial_metadata=[], duration_ms=0.003, messages_c2s=1, messages_s2c=1, http_status=200)  # fmt: skip
    (r,) = track([start, req, reply, end]).requests
    assert (r.kind, r.outcome, r.final, r.responses) == ("unary", "completed", None, 1)


def test_an_http_call_answered_after_its_clients_fin_is_unconfirmed_never_completed() -> None:
    """A client's FIN (`half_close`) before the reply, then the reply in full and a clean end: a client
    that timed out and closed (curl -m) sends the same FIN as one that only half-closed, and on HTTP
    closing cancels, so the reply's reading is not on record: `unconfirmed` with the `client_closed_first`
    note (it was `completed`), whether a unary reply, a whole event stream or one with no event. An
    error reply stays an error. The same calls without the FIN complete."""
    from replay.capture.events import HALF_CLOSE_ANSWERED

    cases = [
        (exchanges("01_unary_infer_tritonclient")[0], "unconfirmed"),
        (exchanges("03a_generate_stream_completed_keepalive")[0], "unconfirmed"),
        (exchanges("03d_generate_stream_silent")[0], "unconfirmed"),
        (exchanges("03f_generate_stream_rejections")[0], "error"),
    ]
    for x, outcome in cases:
        for fin in (True, False):
            b = Builder().start(grpc=False, http=True)
            b.http_call("c1.1", x)
            b.http_request("c1.1", x)
            if fin:
                b.half_close("c1.1")
            b.http_reply("c1.1", x)
            b.http_end("c1.1", x)
            if fin:
                end = b.records[-1]
                assert isinstance(end, ev.CallEnded)
                if end.details is None:  # what the proxy writes for a FIN before the reply's end
                    b.records[-1] = dataclasses.replace(end, details=HALF_CLOSE_ANSWERED)
            (r,) = _records(b).requests
            expected = (outcome, ("client_closed_first",) if outcome == "unconfirmed" else ()) if fin else (
                "error" if outcome == "error" else "completed", ())
            assert (r.outcome, r.notes, r.violations) == (*expected, ()), (x.method, fin)
    # A request pipelined behind one still being answered when the client's FIN came: its call began
    # after the FIN (no half_close of its own); the proxy's details at its end say so. Unconfirmed too.
    x = exchanges("01_unary_infer_tritonclient")[0]
    b = Builder().start(grpc=False, http=True)
    for call in ("c1.1", "c1.2"):
        b.http_call(call, x)
        b.http_request(call, x)
        if call == "c1.1":
            b.half_close(call)
        b.http_reply(call, x)
        b.http_end(call, x)
        end = b.records[-1]
        assert isinstance(end, ev.CallEnded)
        b.records[-1] = dataclasses.replace(end, details=HALF_CLOSE_ANSWERED)
    assert [(r.call, r.outcome) for r in _records(b).requests] == [("c1.1", "unconfirmed"), ("c1.2", "unconfirmed")]


@pytest.mark.parametrize("name", ["generate_stream_completed", "error_under_200"])
def test_an_event_streams_request_ends_at_the_clean_end_not_its_last_event(name: str) -> None:
    """Triton ends an event stream after the model's final flag, which may come as a response of its own
    (no event) long after the last event: the client learns the request is complete only at the body's
    clean end. Its duration runs to that end (it stopped at the last event: a server holding streams
    open 1.5 s longer read the same)."""
    from replay.capture.reader import read_capture

    recs = list(read_capture(HTTP / f"{name}.jsonl"))
    (end_at,) = [i for i, (_s, r) in enumerate(recs) if r.kind == "call_end"]
    seq, end = recs[end_at]
    assert isinstance(end, ev.CallEnded)
    last_event = max(r.t_ns for _s, r in recs if isinstance(r, ev.MessageSeen) and r.dir == "s2c")
    recs[end_at] = (seq, dataclasses.replace(end, t_ns=last_event + 1_500_000_000))
    (before,) = track(HTTP / f"{name}.jsonl").requests
    (r,) = track(recs).requests
    assert r.outcome == before.outcome and r.final is True
    assert r.duration_ms is not None and before.duration_ms is not None
    assert r.duration_ms == pytest.approx(before.duration_ms + 1500, abs=1.0)
