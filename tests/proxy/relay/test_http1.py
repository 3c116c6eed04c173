"""The HTTP/1.1 core with no event loop: real Triton 2.51 transcripts in, bytes/records/commands out.

Every transcript in ``data/http1`` is a real exchange (clients nobody here wrote, or raw sockets
where exact bytes mattered) recorded by a TCP relay in front of tritonserver 2.51's HTTP port
(/work/notes/http-facts.md). ``08e``'s second connection is cut to its first 64 KiB read (the real
one sent 200 KB of header, one line, which Triton closes on).
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest

from proxy.relay.contract import CLIENT, UPSTREAM, Close
from proxy.relay.http1 import MAX_HEAD
from proxy.relay.options import RelayOptions
from replay.capture.events import BODY_CUT
from tests.proxy.relay.http1_wire import Shared, drive, drive_file, reads, transcript


def kinds(run: Any) -> list[str]:
    return [r.kind for r in run.records()]


def one(run: Any, kind: str) -> Any:
    got = run.records(kind)
    assert len(got) == 1, got
    return got[0]


def c2s_in(name: str, conn: int = 0) -> bytes:
    return b"".join(d for dd, d in reads(transcript(name)["connections"][conn]) if dd == "c2s" and d)


@pytest.mark.parametrize("name", ["01_unary_infer_tritonclient.json", "03a_generate_stream_completed_keepalive.json",
                                  "06a_pipelined_unary.json", "08a_expect_100_continue.json"])  # fmt: skip
def test_bytes_pass_verbatim(name: str) -> None:
    run = drive_file(name)
    assert bytes(run.c2s) == c2s_in(name)
    s2c = b"".join(d for dd, d in reads(transcript(name)["connections"][0]) if dd == "s2c" and d)
    assert bytes(run.s2c) == s2c


def test_unary_json_and_binary_keep_alive() -> None:
    run = drive_file("01_unary_infer_tritonclient.json")
    starts = run.records("call_start")
    assert [s.call for s in starts] == ["c1.1", "c1.2", "c1.3"]
    assert {(s.method, s.protocol, s.http_version) for s in starts} == {("POST /v2/models/echo/infer", "http", "1.1")}
    msgs = run.records("message")
    assert [(m.call, m.dir, m.request_id) for m in msgs] == [
        ("c1.1", "c2s", "req-binary-False"), ("c1.1", "s2c", "req-binary-False"),
        ("c1.2", "c2s", "req-binary-True"), ("c1.2", "s2c", "req-binary-True"),
        ("c1.3", "c2s", "req-default-outputs"), ("c1.3", "s2c", "req-default-outputs"),
    ]  # fmt: skip
    # Binary data: labels from the JSON part only (Inference-Header-Content-Length).
    assert msgs[3].output_tensors[0].name == "OUTPUT" and msgs[3].decode_error is None
    ends = run.records("call_end")
    assert [(e.status, e.cause, e.http_status, e.messages_c2s, e.messages_s2c) for e in ends] == [("200", "ok", 200, 1, 1)] * 3
    assert run.shared.open_calls == 0


def test_generate_stream_completed_last_event_final() -> None:
    run = drive_file("03a_generate_stream_completed_keepalive.json")
    s2c = [m for m in run.records("message") if m.dir == "s2c"]
    assert [(m.call, m.index, m.final) for m in s2c] == [
        ("c1.1", 0, False), ("c1.1", 1, False), ("c1.1", 2, True), ("c1.2", 0, False), ("c1.2", 1, True),
    ]  # fmt: skip
    assert [m.size for m in s2c[:3]] == [77, 77, 77]
    assert [(e.call, e.cause, e.status) for e in run.records("call_end")] == [("c1.1", "ok", "200"), ("c1.2", "ok", "200")]
    end = run.records("call_end")[0]
    assert ["content-type", "text/event-stream; charset=utf-8"] in end.initial_metadata


def test_generate_stream_error_first_is_400_with_details() -> None:
    run = drive_file("03b_generate_stream_error_first.json")
    m = [m for m in run.records("message") if m.dir == "s2c"]
    assert [(x.final, x.error) for x in m] == [(True, "fail_midstream: backend failure after 2 responses")]
    end = one(run, "call_end")
    assert (end.status, end.cause, end.http_status, end.details) == (
        "400", "error", 400, "fail_midstream: backend failure after 2 responses")


def test_generate_stream_error_after_first_under_200() -> None:
    run = drive_file("03c_generate_stream_error_after_first.json")
    m = [m for m in run.records("message") if m.dir == "s2c"]
    assert [(x.final, bool(x.error)) for x in m] == [(False, False), (False, False), (True, True)]
    end = one(run, "call_end")
    assert (end.status, end.cause, end.details) == ("200", "ok", None)


def test_generate_stream_silent_clean_end_no_event() -> None:
    run = drive_file("03d_generate_stream_silent.json")
    assert kinds(run) == ["call_start", "message", "call_end"]
    end = one(run, "call_end")
    assert (end.status, end.cause, end.messages_s2c) == ("200", "ok", 0)


def test_client_disconnect_mid_stream() -> None:
    run = drive_file("04a_disconnect_after_2_events_tokens.json")
    s2c = [m for m in run.records("message") if m.dir == "s2c"]
    # The second event's record waited for what followed it: the cut body, so not final.
    assert [m.final for m in s2c] == [False, False]
    cancel = one(run, "cancel")
    assert (cancel.cause, cancel.in_flight, cancel.responded, cancel.forwarded_upstream) == (
        "client_disconnect", ["04a-mid"], ["04a-mid"], True)
    end = one(run, "call_end")
    assert (end.status, end.cause, end.http_status) == ("200", "client_disconnect", 200)
    # Closing the upstream connection is how Triton learns of it.
    assert Close(UPSTREAM) in run.commands


def test_client_disconnect_before_first_event() -> None:
    run = drive_file("04c_disconnect_before_first_event_steps_serial.json", conn=1)
    cancel = one(run, "cancel")
    assert (cancel.cause, cancel.in_flight, cancel.responded, cancel.forwarded_upstream) == (
        "client_disconnect", ["B-queued"], [], True)
    end = one(run, "call_end")
    assert (end.status, end.cause, end.http_status) == ("CANCELLED", "client_disconnect", None)


def test_pipelined_unary_answered_in_order() -> None:
    run = drive_file("06a_pipelined_unary.json")
    assert [(m.call, m.dir, m.request_id) for m in run.records("message")] == [
        ("c1.1", "c2s", "p1"), ("c1.1", "s2c", "p1"), ("c1.2", "c2s", "p2"), ("c1.2", "s2c", "p2")]
    assert [e.cause for e in run.records("call_end")] == ["ok", "ok"]


def test_pipelined_behind_generate_stream_cut_by_triton() -> None:
    """Triton closes the connection when a request arrives behind an open generate_stream: the stream
    is cut (upstream_disconnect) and the queued request is a call that was never answered."""
    run = drive_file("06b_pipelined_generate_stream.json")
    ends = run.records("call_end")
    assert [(e.call, e.cause) for e in ends] == [("c1.1", "upstream_disconnect"), ("c1.2", "upstream_disconnect")]
    assert ends[1].status == "UNAVAILABLE" and ends[1].messages_s2c == 0
    assert [c.in_flight for c in run.records("cancel")] == [["ps1"], ["ps2"]]
    assert Close(CLIENT) in run.commands


def test_expect_100_continue_is_not_the_reply() -> None:
    run = drive_file("08a_expect_100_continue.json")
    s2c = [m for m in run.records("message") if m.dir == "s2c"]
    assert len(s2c) == 1 and s2c[0].request_id == "e100"
    assert one(run, "call_end").status == "200"


def test_connection_close_and_http10() -> None:
    close = drive_file("08b_connection_close_and_http10.json", conn=0)
    assert one(close, "call_end").cause == "ok"
    http10 = drive_file("08b_connection_close_and_http10.json", conn=1)
    assert one(http10, "call_start").http_version == "1.0"
    assert (one(http10, "call_end").status, one(http10, "call_end").cause) == ("200", "ok")
    assert not http10.records("protocol_error")


def test_not_http_is_a_client_protocol_error() -> None:
    run = drive_file("08e_not_http_and_big_header.json", conn=0)
    err = one(run, "protocol_error")
    assert (err.side, err.error_code) == ("client", 0) and "illegal request line" in err.error
    assert Close(CLIENT) in run.commands and Close(UPSTREAM) in run.commands


def test_oversized_header_block_is_refused() -> None:
    """A head still unfinished past MAX_HEAD, in 64 KiB reads (as the shell reads): refused. Triton
    takes heads of any size, so one just under the limit passes, as a call."""
    def head(size: int) -> bytes:
        lines = b"".join(b"X-H%d: %s\r\n" % (i, b"a" * 1000) for i in range(size // 1010 + 1))
        return b"GET /v2/health/ready HTTP/1.1\r\nHost: tap\r\n" + lines

    def in_reads(data: bytes) -> list[tuple[str, bytes | None]]:
        return [("c2s", data[i : i + 65536]) for i in range(0, len(data), 65536)]

    run = drive(in_reads(head(MAX_HEAD + 70000)))
    err = one(run, "protocol_error")
    assert err.side == "client" and "too long" in err.error
    assert not run.records("call_start")
    assert Close(CLIENT) in run.commands
    under = drive(in_reads(head(MAX_HEAD - 70000) + b"\r\n"))
    assert not under.records("protocol_error")
    assert one(under, "call_start").method == "GET /v2/health/ready"


def test_http2_prior_knowledge_is_refused() -> None:
    run = drive_file("08d_h2c_upgrade_and_prior_knowledge.json", conn=1)
    err = one(run, "protocol_error")
    assert err.error == "HTTP/2.0 is not HTTP/1.x"
    assert not [c for c in run.commands if getattr(c, "level", None) == "exception"]


def test_request_body_cut_short_by_the_client() -> None:
    run = drive_file("10b_request_body_cut_short.json")
    c2s = one(run, "message")
    assert (c2s.dir, c2s.size) == ("c2s", 82)  # what arrived of the 132 announced
    assert c2s.decode_error is not None and c2s.decode_error.startswith(BODY_CUT)  # and it says so
    cancel = one(run, "cancel")
    assert cancel.cause == "client_disconnect" and cancel.forwarded_upstream
    assert one(run, "call_end").status == "CANCELLED"


def test_malformed_chunk_from_the_upstream_keeps_earlier_records() -> None:
    """A real 03a exchange whose second event's chunk size is made non-hex (no real Triton sends
    one: that is the fault under test)."""
    events = reads(transcript("03a_generate_stream_completed_keepalive.json")["connections"][0])
    broken: list[tuple[str, bytes | None]] = []
    bad = False
    for d, data in events:
        if d == "s2c" and data is not None and not bad and data.startswith(b"4d\r\n") and broken[-1][0] == "s2c":
            data, bad = b"zz\r\n" + data[4:], True
        broken.append((d, data))
    assert bad
    run = drive(broken)
    err = one(run, "protocol_error")
    assert err.side == "upstream" and err.open_calls == ["c1.1"]
    s2c = [m for m in run.records("message") if m.dir == "s2c"]
    assert [m.final for m in s2c] == [False]  # the event before the bad chunk, not final
    cancel = one(run, "cancel")
    assert (cancel.cause, cancel.in_flight, cancel.responded) == ("upstream_disconnect", ["gs-1"], ["gs-1"])
    assert one(run, "call_end").cause == "upstream_disconnect"


def test_unreachable_upstream_answers_502_with_the_reason() -> None:
    from proxy.relay.http1 import Http1Core
    from tests.proxy.relay.http1_wire import Run, Shared

    shared = Shared()
    run = Run(Http1Core(shared, "c7"), shared)  # type: ignore[arg-type]
    run.perform(run.core.connect_failed("triton-tap: upstream 127.0.0.1:1 unreachable: refused"))
    run.perform(run.core.receive_c2s(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"))
    assert run.c2s == b""
    assert run.s2c.startswith(b"HTTP/1.1 502 ")
    end = one(run, "call_end")
    # As gRPC's refusal: Triton said nothing, so no message claims it did; the client got the 502.
    assert (end.status, end.http_status, end.cause) == ("502", 502, "upstream_disconnect")
    assert "unreachable" in (end.details or "")
    assert kinds(run) == ["call_start", "call_end"] and (end.messages_c2s, end.messages_s2c) == (0, 0)


def test_payload_full_stores_bodies_and_events() -> None:
    run = drive_file("03a_generate_stream_completed_keepalive.json", options=RelayOptions(payload="full"))
    s2c = [m for m in run.records("message") if m.dir == "s2c"]
    assert s2c[0].payload is not None and s2c[0].payload_sha256
    import base64

    assert base64.b64decode(s2c[0].payload).startswith(b"data: {")
    assert len(base64.b64decode(s2c[0].payload)) == s2c[0].size


def test_redacted_request_headers() -> None:
    req = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n\r\n"
    run = drive([("c2s", req), ("s2c", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")])
    start = one(run, "call_start")
    assert ["authorization", "<redacted>"] in start.metadata
    assert one(run, "call_end").cause == "ok"


def test_redact_input_cuts_http_request_inputs() -> None:
    """JSON and binary-data infer bodies, and generate_stream fields: the named input's data is out of the
    stored bytes, its spec carries size and keyed hash, payload_sha256 is the stored bytes' hash."""
    opts = RelayOptions(payload="full", redact_inputs=frozenset({"INPUT", "PROMPT"}), redact_key=b"k")
    run = drive_file("01_unary_infer_tritonclient.json", options=opts)
    c2s = [m for m in run.records("message") if m.dir == "c2s"]
    assert len(c2s) == 3
    for m in c2s:
        stored = base64.b64decode(m.payload)
        assert m.decode_error is None and not m.payload_truncated and b"triton_tap_redacted" in stored
        assert m.payload_sha256 == hashlib.sha256(stored).hexdigest()
        (spec,) = m.inputs
        assert (spec.name, spec.datatype, spec.shape) == ("INPUT", "UINT8", [5]) and spec.size and spec.hmac_sha256
    assert b'"binary_data_size":0' in base64.b64decode(c2s[1].payload) and c2s[1].inputs[0].size == 5
    s2c = [m for m in run.records("message") if m.dir == "s2c"]
    assert all(m.payload is not None for m in s2c)
    run = drive_file("03a_generate_stream_completed_keepalive.json", options=opts)
    sent = [m for m in run.records("message") if m.dir == "c2s"]
    for m, prompt in zip(sent, (b'"hi"', b'"again"'), strict=True):  # the transcript's two prompts
        stored = base64.b64decode(m.payload)
        assert prompt not in stored and list(json.loads(stored)["triton_tap_redacted"]) == ["PROMPT"]
        assert [(t.name, t.size) for t in m.inputs] == [("PROMPT", len(prompt))]


def test_redact_input_withholds_what_it_cannot_read_whole() -> None:
    """A body cut short, and one longer than what --payload-cap keeps: no byte stored, a decode_error says why."""
    opts = RelayOptions(payload="full", redact_inputs=frozenset({"INPUT"}), payload_cap=1 << 20)
    cut = [m for m in drive_file("10b_request_body_cut_short.json", options=opts).records("message") if m.dir == "c2s"]
    assert cut and all(m.payload is None and m.payload_at is None and m.payload_truncated for m in cut)
    body = b'{"inputs":[{"name":"INPUT","shape":[1],"datatype":"BYTES","data":["' + b"s" * (1 << 21) + b'"]}]}'
    req = (b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(body)).encode()
           + b"\r\n\r\n" + body)  # fmt: skip
    run = drive([("c2s", req), ("s2c", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")], options=opts)
    (m,) = [m for m in run.records("message") if m.dir == "c2s"]
    assert m.payload is None and m.payload_at is None and m.payload_truncated
    assert m.decode_error.endswith("; payload withheld: cannot redact a request body longer than --payload-cap")


def test_client_fin_is_passed_on_and_recorded_on_the_open_call() -> None:
    """A client's FIN while a call is open: a ``half_close`` record on the call and ``WriteEof``
    upstream (Triton decides what follows); the reply after it is relayed and recorded. A FIN on an
    idle connection records nothing (it is the connection's end, not a call's)."""
    from proxy.relay.contract import WriteEof

    request = b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n{\"id\":\"f\"}"
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{\"id\":\"f\"}"
    run = drive([("c2s", request)])
    run.perform(run.core.eof(CLIENT))
    assert WriteEof(UPSTREAM) in run.commands and Close(CLIENT) not in run.commands
    assert kinds(run)[-1] == "half_close" and one(run, "half_close").call == one(run, "call_start").call
    run.perform(run.core.receive_s2c(reply))
    assert kinds(run)[-2:] == ["message", "call_end"] and one(run, "call_end").cause == "ok"

    idle = drive([])
    idle.perform(idle.core.eof(CLIENT))
    assert not idle.records("half_close")


def test_a_fin_that_cuts_a_stream_marks_where_the_evidence_log_starts() -> None:
    """``record --evidence log=``: Triton takes a client's FIN mid generate_stream for the cancel, so the FIN
    passed on is the moment its log is read from (``before_cancel``, called before the core hands the shell
    the FIN to write), as for a reset; the cancel that follows then has an offset (its evidence said the log
    was unreadable)."""
    from proxy.relay.contract import WriteEof

    marks: list[str] = []
    shared = Shared(before_cancel=marks.append)
    request = (b"POST /v2/models/tokens/generate_stream HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n"
               b'{"id":"f"}')  # fmt: skip
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    run = drive([("c2s", request), ("s2c", head + b"12\r\ndata: {\"id\":\"f\"}\n\n\r\n")], shared=shared)
    assert marks == []
    run.perform(run.core.eof(CLIENT))
    (call,) = [r.call for r in run.records("call_start")]
    assert marks == [call] and WriteEof(UPSTREAM) in run.commands
    run.perform(run.core.lost(UPSTREAM, None))  # Triton cuts the stream and closes
    (cancel,) = run.records("cancel")
    assert cancel.cause == "client_disconnect" and cancel.forwarded_upstream and marks == [call]


def test_what_came_before_the_clients_fin_is_recorded_before_its_half_close() -> None:
    """Records follow the wire: an event read before the client's FIN, held until what follows decides
    its final, is written before the FIN's ``half_close`` (which keeps its own time); a request body
    the FIN cut is recorded at the FIN, cut, not after it when Triton closes."""
    event = b'data: {"id":"e","text_output":"a"}\n\n'
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    run = drive([("c2s", _request(b'{"id":"e"}', GENERATE_STREAM)),
                 ("s2c", head + b"%x\r\n" % len(event) + event + b"\r\n")])  # fmt: skip
    run.perform(run.core.eof(CLIENT))
    run.perform(run.core.lost(UPSTREAM, None))  # Triton cuts the stream after the FIN
    assert kinds(run) == ["call_start", "message", "message", "half_close", "cancel", "call_end"]
    s2c, fin = run.records("message")[1], one(run, "half_close")
    assert s2c.dir == "s2c" and s2c.t_ns < fin.t_ns and s2c.final is False
    body = b'{"id":"b","inputs":[]}' + b" " * 50
    cut = drive([("c2s", _request(body)[:-30])])
    cut.perform(cut.core.eof(CLIENT))
    assert kinds(cut) == ["call_start", "message", "half_close"]
    assert cut.records("message")[0].decode_error.startswith(BODY_CUT)
    cut.perform(cut.core.lost(UPSTREAM, None))  # Triton closes on the body cut short: nothing recorded twice
    assert kinds(cut) == ["call_start", "message", "half_close", "cancel", "call_end"]


def test_done_on_triton_generate_stream_is_no_end_when_the_body_is_then_cut() -> None:
    """`data: [DONE]` ends an OpenAI stream only: on Triton's generate_stream (which never sends one) it is
    an event like any, so a body reset after it, without its terminator, is a disconnected request,
    not a completed one."""
    from replay.machine.tracker import track

    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    body = b'data: {"id":"d","text_output":"a"}\n\ndata: [DONE]\n\n'
    run = drive([("c2s", _request(b'{"id":"d"}', GENERATE_STREAM)), ("s2c", head + b"%x\r\n" % len(body) + body + b"\r\n")])
    run.perform(run.core.lost(UPSTREAM, None))  # reset: no terminating chunk
    assert [m.final for m in run.records("message") if m.dir == "s2c"] == [False, False]
    (r,) = track(list(enumerate(run.records()))).requests
    assert (r.outcome, r.responses, r.final) == ("disconnected", 2, False)


# --- truthful records of what did not go by the book ------------------------------------------------
# Scripted byte sequences below: the replies are shaped as Triton 2.51's (its head and JSON); the
# reads' order and the ends are what each test is about (a real server cannot be made to time them).

INFER = b"POST /v2/models/m/infer HTTP/1.1\r\nhost: x\r\n"
GENERATE_STREAM = b"POST /v2/models/m/generate_stream HTTP/1.1\r\nhost: x\r\n"


def _request(body: bytes, head: bytes = INFER, extra: bytes = b"") -> bytes:
    return head + extra + b"content-length: %d\r\n\r\n" % len(body) + body


def _reply(body: bytes, status: bytes = b"200 OK", extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 %s\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n" % (status, extra, len(body))
            + body)  # fmt: skip


def _sse(body: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"


def test_early_reply_comes_after_the_request_so_far_and_is_its_own() -> None:
    """Triton answers before the request body ended: the request's record (the bytes so far, marked)
    precedes the reply's, the rest is a record of its own, and the tracker ties the reply to it."""
    from replay.capture.events import BODY_BEFORE_REPLY, BODY_REST
    from replay.machine.tracker import track

    body = b'{"id":"r1","inputs":[]}' + b" " * 100
    full = _request(body)
    run = drive([("c2s", full[:-80]), ("s2c", _reply(b'{"error":"bad request"}', b"400 Bad Request")),
                 ("c2s", full[-80:])])  # fmt: skip
    msgs = run.records("message")
    assert [(m.dir, m.index, m.size, m.decode_error) for m in msgs] == [
        ("c2s", 0, len(body) - 80, BODY_BEFORE_REPLY), ("s2c", 0, 23, None), ("c2s", 1, 80, BODY_REST),
    ]  # fmt: skip
    assert msgs[0].request_id == "r1"  # its JSON had arrived whole
    result = track(list(enumerate(run.records())))
    assert not result.unattributable and not result.warnings
    assert [(r.outcome, r.responses, r.error) for r in result.requests] == [("error", 1, "bad request")]


def test_expect_100_refused_then_the_client_closes() -> None:
    """``Expect: 100-continue`` answered 404 (no 100), then the client goes: the request (no byte of
    its body came) is recorded before the reply, which is its own. Scripted: Triton 2.51 sends
    ``100 Continue`` to an unknown model (seen through the proxy); a final status instead of the 100
    is any server's right (RFC 9110 10.1.1), and a proxy in front of Triton may answer so."""
    from replay.capture.events import BODY_BEFORE_REPLY
    from replay.machine.tracker import track

    head = b"POST /v2/models/nosuch/infer HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 23\r\n\r\n"
    reply = b"HTTP/1.1 404 Not Found\r\ncontent-length: 37\r\ncontent-type: text/plain\r\n\r\n"
    run = drive([("c2s", head), ("s2c", reply + b'{"error":"Request for unknown model"}'), ("c2s", None)])
    assert kinds(run) == ["call_start", "message", "message", "cancel", "call_end"]
    c2s, s2c = run.records("message")
    assert (c2s.dir, c2s.size, c2s.decode_error, s2c.dir) == ("c2s", 0, BODY_BEFORE_REPLY, "s2c")
    result = track(list(enumerate(run.records())))
    assert not result.unattributable
    assert [(r.responses, r.error) for r in result.requests] == [(1, "Request for unknown model")]


def test_unterminated_last_event_is_a_record_of_its_own_never_final() -> None:
    """Bytes after the last blank line at the body's clean end: recorded (counted, labelled, marked);
    an SSE client discards them, so neither it nor the event before it is final, and they are no
    response of the request (noted `event_cut`); an event a reset cut mid-way neither."""
    from replay.capture.events import EVENT_UNTERMINATED
    from replay.machine.tracker import track

    body = b'data: {"id":"r","OUT":"a"}\n\ndata: {"id":"r","OUT":"b"}'
    run = drive([("c2s", _request(b'{"id":"r"}', GENERATE_STREAM)), ("s2c", _sse(body))])
    s2c = [m for m in run.records("message") if m.dir == "s2c"]
    assert [(m.size, m.final, m.outputs, m.decode_error) for m in s2c] == [
        (28, False, ["OUT"], None), (len(body) - 28, False, ["OUT"], EVENT_UNTERMINATED),
    ]  # fmt: skip
    assert one(run, "call_end").cause == "ok"
    [r] = track(list(enumerate(run.records()))).requests
    assert (r.outcome, r.responses, r.notes) == ("unconfirmed", 1, ("event_cut",))
    only = drive([("c2s", _request(b'{"id":"r"}', GENERATE_STREAM)), ("s2c", _sse(b'data: {"id":"r"}'))])
    [r] = track(list(enumerate(only.records()))).requests
    # Never "completed": the clean end of a body with no event is the final signal, bytes were not none.
    assert (r.outcome, r.responses, r.notes) == ("unconfirmed", 0, ("event_cut",))
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    reset = drive([("c2s", _request(b'{"id":"r"}', GENERATE_STREAM)), ("s2c", head + b"30\r\n" + body[:48])])
    reset.perform(reset.core.lost(UPSTREAM, None))
    assert [(m.decode_error or "").startswith(BODY_CUT) for m in reset.records("message") if m.dir == "s2c"] == [
        False, True,
    ]  # fmt: skip
    [r] = track(list(enumerate(reset.records()))).requests
    assert (r.outcome, r.responses, r.notes) == ("disconnected", 1, ("event_cut",))


def test_reply_cut_mid_body_is_recorded_as_cut() -> None:
    """The upstream closes 23 bytes into a 100-byte reply: those bytes are a record, marked cut."""
    reply = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n"
    run = drive([("c2s", _request(b'{"id":"r"}')), ("s2c", reply + b'{"id":"r","outputs":[]}'), ("s2c", None)])
    s2c = [m for m in run.records("message") if m.dir == "s2c"]
    assert [m.size for m in s2c] == [23]
    assert s2c[0].decode_error is not None and s2c[0].decode_error.startswith(BODY_CUT)
    end = one(run, "call_end")
    assert (end.cause, end.messages_s2c, end.http_status) == ("upstream_disconnect", 1, 200)


def test_http10_keep_alive_goes_on_as_triton_keeps_it() -> None:
    """HTTP/1.0 with ``Connection: keep-alive`` (ApacheBench -k): Triton 2.51 answers ``HTTP/1.0`` with
    ``Connection: keep-alive`` and serves the next request on the connection (seen on a raw socket,
    these reply bytes); h11 alone would call the second request a client protocol error."""
    def req(rid: bytes) -> bytes:
        body = b'{"id":"%s"}' % rid
        return b"POST /v2/models/m/infer HTTP/1.0\r\nhost: x\r\nconnection: keep-alive\r\ncontent-length: %d\r\n\r\n" % (
            len(body)) + body  # fmt: skip

    err = b'{"error":"[request id: a] inference input \'INPUT\' data-type is \'BYTES\', but model \'echo\' expects \'UINT8\'"}'
    resp = b"HTTP/1.0 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n" % (
        len(err)) + err  # fmt: skip
    for reads_ in ([("c2s", req(b"a")), ("s2c", resp), ("c2s", req(b"b")), ("s2c", resp)],
                   [("c2s", req(b"a") + req(b"b")), ("s2c", resp + resp)]):  # fmt: skip
        run = drive(reads_)
        assert not run.records("protocol_error")
        assert [(e.call, e.status) for e in run.records("call_end")] == [("c1.1", "400"), ("c1.2", "400")]
        assert [m.request_id for m in run.records("message") if m.dir == "c2s"] == ["a", "b"]


def test_pipelined_requests_forwarded_always_become_calls() -> None:
    """A request pipelined behind the open call went to Triton: when the client goes, or Triton ends
    the connection after a ``Connection: close`` reply, it is a call all the same, ended so."""
    r1, r2 = _request(b'{"id":"p1"}'), _request(b'{"id":"p2"}')
    lost = drive([("c2s", r1 + r2), ("s2c", _reply(b'{"id":"p1","outputs":[]}')[:-10]), ("c2s", None)])
    assert bytes(lost.c2s) == r1 + r2
    assert [(e.call, e.cause) for e in lost.records("call_end")] == [("c1.1", "client_disconnect"), ("c1.2", "client_disconnect")]
    assert [(m.call, m.request_id) for m in lost.records("message") if m.dir == "c2s"] == [("c1.1", "p1"), ("c1.2", "p2")]
    closed = drive([("c2s", r1 + r2), ("s2c", _reply(b'{"id":"p1","outputs":[]}', extra=b"connection: close\r\n")),
                    ("s2c", None)])  # fmt: skip
    assert not closed.records("protocol_error")
    assert [(e.call, e.cause) for e in closed.records("call_end")] == [("c1.1", "ok"), ("c1.2", "upstream_disconnect")]


def test_a_request_after_the_clients_own_connection_close_leaves_the_answer_it_was_owed() -> None:
    """The client asks to close, then pipelines another request all the same (RFC 9112 9.6 forbids it). Triton
    2.51 answers the first and closes, the second unanswered (curl, directly). The proxy took the second for the
    client's protocol error and closed both sides at once: the client never got the first answer, recorded as
    its cancel. Now the first is relayed whole and `ok`; the second is a call Triton never answered; the log
    says the client sent bytes after its close."""
    r1 = _request(b'{"id":"p1"}', extra=b"connection: close\r\n")
    r2 = _request(b'{"id":"p2"}')
    reply = _reply(b'{"id":"p1","outputs":[]}', extra=b"connection: close\r\n")
    run = drive([("c2s", r1 + r2), ("s2c", reply), ("s2c", None)])
    assert not run.records("protocol_error")
    assert bytes(run.s2c) == reply and bytes(run.c2s) == r1 + r2  # (forwarded as read: Triton got both, as directly)
    assert [(e.call, e.cause) for e in run.records("call_end")] == [("c1.1", "ok"), ("c1.2", "upstream_disconnect")]
    logs = [c for c in run.commands if type(c).__name__ == "Log" and c.event == "http1_client_bytes_after_close"]
    assert [c.fields for c in logs] == [{"bytes": len(r2)}], run.commands  # (the shell adds the connection)


def test_requests_queued_when_the_client_half_closed_are_cut_by_its_fin_as_the_open_call_is() -> None:
    """Three requests pipelined, then the client's FIN; Triton answers the first and closes. The second (open)
    and the third (queued behind it) were both left by Triton for the client's FIN: both `client_disconnect`,
    forwarded upstream. The queued one was `upstream_disconnect`, not forwarded, as if Triton had dropped it."""
    r1, r2, r3 = _request(b'{"id":"p1"}'), _request(b'{"id":"p2"}'), _request(b'{"id":"p3"}')
    run = drive([("c2s", r1 + r2 + r3)])
    run.perform(run.core.eof(CLIENT))
    run.perform(run.core.receive_s2c(_reply(b'{"id":"p1","outputs":[]}')))
    run.perform(run.core.eof(UPSTREAM))
    run.perform(run.core.lost(UPSTREAM, None))
    assert [(e.call, e.cause) for e in run.records("call_end")] == [
        ("c1.1", "ok"), ("c1.2", "client_disconnect"), ("c1.3", "client_disconnect")]  # fmt: skip
    assert [(c.call, c.forwarded_upstream) for c in run.records("cancel")] == [("c1.2", True), ("c1.3", True)]


def test_a_head_reply_with_a_body_anyway_is_recorded_whole_and_the_connection_goes_on() -> None:
    """Triton 2.51 answers HEAD with its error JSON as a body, which HTTP forbids; its client reads on and gets the
    next reply. The proxy took those bytes for the next reply's status line and closed the connection as Triton's
    protocol error (the next call `upstream_disconnect`, though its reply had been relayed). Now the HEAD reply's
    body is recorded (30 bytes) and the next exchange goes on. A HEAD reply that keeps HTTP's rule is unchanged."""
    head = b"HEAD /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n"
    get = b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n"
    error = b'{"error":"Method Not Allowed"}'
    refused = b"HTTP/1.1 405 Method Not Allowed\r\nContent-Type: application/json\r\nContent-Length: 30\r\n\r\n"
    ready = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nContent-Type: text/plain\r\n\r\n"
    for body in (error, b""):
        run = drive([("c2s", head), ("s2c", refused + body), ("c2s", get), ("s2c", ready)])
        assert not run.records("protocol_error") and Close(CLIENT) not in run.commands, run.records("protocol_error")
        assert [(e.call, e.status, e.cause) for e in run.records("call_end")] == [
            ("c1.1", "405", "error"), ("c1.2", "200", "ok")]  # fmt: skip
        assert [(m.call, m.size) for m in run.records("message") if m.dir == "s2c"] == [("c1.1", len(body)), ("c1.2", 0)]
        assert bytes(run.s2c) == refused + body + ready


def test_shutdown_closes_the_connection_after_its_call_in_flight() -> None:
    """Shutdown began during a call: when it ends, both sides close; nothing more goes to Triton."""
    run = drive([("c2s", _request(b'{"id":"a"}'))])
    run.perform(run.core.goaway())
    assert not run.commands
    run.perform(run.core.receive_s2c(_reply(b'{"id":"a","outputs":[]}')))
    assert Close(CLIENT) in run.commands and Close(UPSTREAM) in run.commands
    sent = bytes(run.c2s)
    run.perform(run.core.receive_c2s(_request(b'{"id":"b"}')))
    assert bytes(run.c2s) == sent
    assert [(e.call, e.cause) for e in run.records("call_end")] == [("c1.1", "ok")]


def test_shutdown_ends_requests_pipelined_behind_the_call_in_flight_as_proxy_shutdown() -> None:
    """Shutdown during a call with requests pipelined behind it (forwarded already): the close after
    the call drops them, each a call ended ``proxy_shutdown``, one still arriving included."""
    r2 = _request(b'{"id":"b"}')
    run = drive([("c2s", _request(b'{"id":"a"}') + r2 + _request(b'{"id":"c"}')[:-3])])
    run.perform(run.core.goaway())
    run.perform(run.core.receive_s2c(_reply(b'{"id":"a","outputs":[]}')))
    run.perform(run.core.lost(CLIENT, None))
    run.perform(run.core.lost(UPSTREAM, None))
    assert [(e.call, e.cause) for e in run.records("call_end")] == [
        ("c1.1", "ok"), ("c1.2", "proxy_shutdown"), ("c1.3", "proxy_shutdown"),
    ]  # fmt: skip
    c2s = [m for m in run.records("message") if m.dir == "c2s"]
    assert [(m.call, m.request_id, m.decode_error is None) for m in c2s] == [
        ("c1.1", "a", True), ("c1.2", "b", True), ("c1.3", None, False),
    ]  # fmt: skip
    assert c2s[2].decode_error.startswith(BODY_CUT)


def test_an_event_held_back_is_stamped_with_the_read_that_brought_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each event's record waits for what follows it (the next event, or the body's clean end, decides its final
    flag), but its time is when its last byte was read: event 0 came at 2 us, event 1 at 5 us, the end at 9 us
    (each read's time set by the test). Stamped when written, a stream's time to first token read as the gap
    between its first two tokens."""
    from proxy.relay import http1
    from proxy.relay.http1 import Http1Core
    from tests.proxy.relay.http1_wire import Run, Shared

    now = [0]
    monkeypatch.setattr(http1, "_time_ns", lambda: now[0])
    shared = Shared(options=RelayOptions())
    run = Run(Http1Core(shared, "c1", "127.0.0.1:5"), shared)  # type: ignore[arg-type]
    run.perform(run.core.connected())
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    events = [b'data: {"id":"r","OUT":"a"}\n\n', b'data: {"id":"r","OUT":"b"}\n\n']
    reads_at = [(1_000, CLIENT, _request(b'{"id":"r"}', GENERATE_STREAM)),
                (2_000, UPSTREAM, head + b"%x\r\n" % len(events[0]) + events[0] + b"\r\n"),
                (5_000, UPSTREAM, b"%x\r\n" % len(events[1]) + events[1] + b"\r\n"),
                (9_000, UPSTREAM, b"0\r\n\r\n")]  # fmt: skip
    for t, side, data in reads_at:
        now[0] = t
        run.perform(run.core.receive_c2s(data) if side == CLIENT else run.core.receive_s2c(data))
    s2c = [m for m in run.records("message") if m.dir == "s2c"]
    assert [(m.t_ns, m.final) for m in s2c] == [(2_000, False), (5_000, True)]


def test_a_reply_whose_body_runs_to_triton_s_close_ends_whole_at_the_close() -> None:
    """HTTP/1.0: Triton 2.51 answers a health check with a 200 of neither Content-Length nor Transfer-Encoding,
    then closes; the close ends that body, and curl reads a whole reply. The call is `ok`, its (empty) reply
    recorded; it was cancelled `upstream_disconnect` with no reply, a healthy server read as failing. A reply
    of stated length cut by the close is still cut."""
    from proxy.relay.contract import Close

    request = b"GET /v2/health/live HTTP/1.0\r\nHost: t\r\n\r\n"
    run = drive([("c2s", request), ("s2c", b"HTTP/1.1 200 OK\r\n\r\n")])
    run.perform(run.core.eof(UPSTREAM))
    assert Close(UPSTREAM) in run.commands
    run.perform(run.core.lost(UPSTREAM, None))
    end = one(run, "call_end")
    assert (end.cause, end.status, end.messages_s2c) == ("ok", "200", 1), end
    assert not run.records("cancel") and not run.records("protocol_error")

    cut = drive([("c2s", request), ("s2c", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab")])
    cut.perform(cut.core.eof(UPSTREAM))
    cut.perform(cut.core.lost(UPSTREAM, None))
    assert one(cut, "call_end").cause == "upstream_disconnect" and not cut.records("protocol_error")
