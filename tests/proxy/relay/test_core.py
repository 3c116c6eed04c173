"""The HTTP/2 protocol core, fed bytes: bytes out, records and commands, no event loop and no sleeps.

A real h2 client and h2 server around a bare :class:`proxy.relay.core.H2Core` (``CoreRig``: the test
is its shell); raw frames where a real peer would not send them. Each test pins a behaviour of the
relay: calls, cancels, deadlines, disconnects, GOAWAY, a refused or broken upstream, flow control,
late frames, CONTINUATION, and the defects found in review of the verbatim relay (memory a peer could
pin or grow, causes, frame order and GOAWAY rules of RFC 9113, peer input that must never become
proxy_error).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import h2.events
import pytest
from tritonclient.grpc import service_pb2 as pb

from proxy.relay import core
from proxy.relay.call import LABEL_KEEP
from proxy.relay.contract import ArmTimer, Close
from proxy.relay.core import ENHANCE_YOUR_CALM, LINGER_S
from proxy.relay.lifecycle import Upstream
from proxy.relay.options import REDACTED, RelayOptions
from proxy.wire import frames as wire
from proxy.wire.messages import Assembler
from replay.capture import events as ev
from tests.support.h2conv import (
    INFER,
    RESPONSE_HEADERS,
    STREAM,
    CoreRig,
    grpc,
    infer_request,
    infer_response,
    request_headers,
    stream_response,
    unary_large,
)

REQ = request_headers()


def _frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    out, i = [], 0
    while i + 9 <= len(data):
        n = int.from_bytes(data[i : i + 3], "big")
        out.append((data[i + 3], data[i + 4], int.from_bytes(data[i + 5 : i + 9], "big"), data[i + 9 : i + 9 + n]))
        i += 9 + n
    return out


def _types(data: bytes) -> list[int]:
    return [f[0] for f in _frames(data)]


def _goaways(data: bytes) -> list[tuple[int, int]]:
    return [(int.from_bytes(p[:4], "big"), int.from_bytes(p[4:8], "big")) for t, _, _, p in _frames(data) if t == wire.GOAWAY]


def _kinds(rig: CoreRig) -> list[str]:
    return [r.kind for r in rig.records]


def _of(rig: CoreRig, kind: str) -> list[Any]:
    return [r for r in rig.records if r.kind == kind]


def _stream_call(rig: CoreRig, *rids: str) -> int:
    rig.pump()
    sid = rig.open_call(request_headers(STREAM))
    for rid in rids:
        rig.client.send_data(sid, infer_request(rid))
    rig.pump()
    assert rig.server is not None
    rig.server.send_headers(sid, RESPONSE_HEADERS)
    rig.pump()
    return sid


# --- calls ------------------------------------------------------------------------------------------


def test_a_unary_call_is_recorded_and_its_bytes_go_on_verbatim() -> None:
    rig = CoreRig()
    rig.pump()
    sid = rig.open_call()
    rig.client.send_data(sid, infer_request("u1"), end_stream=True)
    sent = rig.client.data_to_send()
    rig.down(sent)
    # One read, one verbatim write of exactly its bytes (written first); the recording step after it
    # asks for nothing more (no step of its own).
    (write,) = [s for s in rig.steps if s[0] == rig.step]
    assert write[1:] == (sent, b"", []) and rig.core.resume is not None
    assert _kinds(rig) == ["call_start", "message", "half_close"]
    rig.pump()
    assert rig.server is not None
    rig.server.send_headers(sid, RESPONSE_HEADERS)
    rig.server.send_data(sid, infer_response("u1"))
    rig.server.send_headers(sid, [(b"grpc-status", b"0")], end_stream=True)
    rig.pump()
    assert _kinds(rig) == ["call_start", "message", "half_close", "message", "call_end"]
    start, req, _, resp, end = rig.records
    assert (start.call, start.method, start.peer) == ("c1.1", "/inference.GRPCInferenceService/ModelInfer", "127.0.0.1:40000")
    assert (req.dir, req.request_id, resp.dir, resp.request_id) == ("c2s", "u1", "s2c", "u1")
    assert (end.status, end.cause, end.messages_c2s, end.messages_s2c) == ("OK", "ok", 1, 1)
    assert rig.shared.open_calls == 0 and not rig.core.calls


def test_a_stream_records_each_response_and_the_final_flags() -> None:
    rig = CoreRig()
    sid = _stream_call(rig, "r0")
    assert rig.server is not None
    for final in (False, False, True):
        rig.server.send_data(sid, stream_response("r0", final))
    rig.pump()  # three responses in one read
    msgs = [r for r in _of(rig, "message") if r.dir == "s2c"]
    assert [(m.index, m.request_id, m.final) for m in msgs] == [(0, "r0", False), (1, "r0", False), (2, "r0", True)]


# --- cancels and the cancel record's in-flight set ------------------------------------------------------


def test_a_client_reset_is_a_cancel_written_before_the_rest_of_its_read() -> None:
    """DATA of call A, the reset of call B and the HEADERS of call C in one read: the step that writes
    B's reset upstream ends there (Triton sees it first; its latency is measured to the socket), C
    goes in the next step; the cancel record says the reset was forwarded, with the client's code."""
    rig = CoreRig()
    rig.pump()
    a = rig.open_call(request_headers(STREAM))
    b = rig.open_call(request_headers(STREAM))
    rig.pump()
    rig.client.send_data(a, infer_request("a0"))
    rig.client.reset_stream(b, wire.CANCEL)
    rig.open_call(end_stream=True)
    rig.down(rig.client.data_to_send())
    steps = [s for s in rig.steps if s[0] == rig.step]
    assert _types(steps[0][1]) == [wire.DATA, wire.RST_STREAM] and _types(steps[1][1]) == [wire.HEADERS]
    (cancel,) = _of(rig, "cancel")
    assert (cancel.call, cancel.cause, cancel.rst_code, cancel.forwarded_upstream) == (f"c1.{b}", "client_cancel", 8, True)
    assert cancel.upstream_rst_us is not None and cancel.upstream_rst_us >= 0
    assert _kinds(rig)[-4:] == ["cancel", "call_end", "call_start", "half_close"]


def test_the_cancel_in_flight_set_leaves_out_requests_whose_final_response_passed() -> None:
    """Three requests on one stream: ``done`` got its final response, ``run`` a non-final one, ``wait``
    none. The cancel lists ``run`` and ``wait`` in flight and only ``run`` as responded."""
    rig = CoreRig()
    sid = _stream_call(rig, "done", "run", "wait")
    assert rig.server is not None
    rig.server.send_data(sid, stream_response("done", True))
    rig.server.send_data(sid, stream_response("run", False))
    rig.pump()
    rig.client.reset_stream(sid, wire.CANCEL)
    rig.pump()
    (cancel,) = _of(rig, "cancel")
    assert cancel.in_flight == ["run", "wait"] and cancel.responded == ["run"]


@pytest.mark.parametrize(
    ("code", "status"),
    [(wire.CANCEL, "CANCELLED"), (wire.NO_ERROR, "CANCELLED"), (ENHANCE_YOUR_CALM, "RESOURCE_EXHAUSTED"),
     (wire.INTERNAL_ERROR, "INTERNAL")],
)  # fmt: skip
def test_a_client_reset_ends_the_call_with_the_status_its_code_gives(code: int, status: str) -> None:
    """A gRPC client that refuses a response over its receive limit (tritonclient's default 4 MiB) ends
    with RESOURCE_EXHAUSTED and resets the stream mid-response with ENHANCE_YOUR_CALM: still the client's
    own ending (``client_cancel``), but the status it got is RESOURCE_EXHAUSTED, not CANCELLED. Its reset
    goes upstream as it came (Triton sees the client's code)."""
    rig = CoreRig()
    sid = _stream_call(rig, "big")
    assert rig.server is not None
    rig.server.send_data(sid, stream_response("big", False))
    rig.pump()
    rig.client.reset_stream(sid, code)
    rig.pump()
    (cancel,) = _of(rig, "cancel")
    (end,) = _of(rig, "call_end")
    assert (cancel.cause, cancel.rst_code, cancel.responded) == ("client_cancel", code, ["big"])
    assert (end.cause, end.status) == ("client_cancel", status)
    resets = [(e.stream_id, e.error_code) for e in rig.server_events if isinstance(e, h2.events.StreamReset)]
    assert resets == [(sid, code)]


def test_frames_after_a_cancel_are_late_records_and_still_reach_the_client() -> None:
    rig = CoreRig()
    sid = _stream_call(rig, "run")
    rig.client.reset_stream(sid, wire.CANCEL)
    rig.pump()
    late = wire.frame(wire.DATA, 0, sid, stream_response("run", False))
    trailers = wire.headers_frames(sid, wire.encode_block([(b"grpc-status", b"0"), (b"grpc-message", b"late")]), True, 16384)
    rig.up(late + trailers)
    assert rig.take("client") == late + trailers  # passed on: HPACK and flow control stay in step
    recs = _of(rig, "late")
    assert [(r.frame, r.request_id, r.error) for r in recs] == [("message", "run", None), ("trailers", None, "0 late")]
    (end,) = _of(rig, "call_end")
    assert end.messages_s2c == 0  # nothing late counts as a message of the call


# --- deadlines --------------------------------------------------------------------------------------------


def test_a_reset_after_the_timeout_is_a_deadline_and_so_is_deadline_exceeded_from_upstream() -> None:
    rig = CoreRig()
    rig.pump()
    a = rig.open_call(request_headers(b"/x.Y/Z", (b"grpc-timeout", b"1n")), end_stream=True)
    rig.pump()
    rig.client.reset_stream(a, wire.CANCEL)
    b = rig.open_call(request_headers(b"/x.Y/Z", (b"grpc-timeout", b"1n")), end_stream=True)
    rig.pump()
    assert rig.server is not None
    rig.server.send_headers(b, [*RESPONSE_HEADERS, (b"grpc-status", b"4")], end_stream=True)
    rig.pump()
    cancels = _of(rig, "cancel")
    assert [(c.cause, c.forwarded_upstream) for c in cancels] == [("deadline", True), ("deadline", False)]
    assert [(e.cause, e.status) for e in _of(rig, "call_end")] == [("deadline", "DEADLINE_EXCEEDED")] * 2


@pytest.mark.parametrize("timeout", [b"\xb2m", b"1" * 5000 + b"m", b"-5S", b"5 S"])
def test_malformed_grpc_timeout_is_no_timeout(timeout: bytes) -> None:
    """A grpc-timeout that is not ASCII digits and a unit, or beyond any float, is recorded as no timeout, never a
    proxy error (more digits than gRPC's 8 are read, as Triton's gRPC server reads them)."""
    rig = CoreRig()
    rig.pump()
    rig.open_call([*REQ, (b"grpc-timeout", timeout)], end_stream=True)
    rig.pump()
    (start,) = _of(rig, "call_start")
    assert start.timeout_ms is None and not _of(rig, "call_end")


# --- disconnects ----------------------------------------------------------------------------------------


def test_a_lost_client_resets_each_call_upstream_and_closes_the_upstream() -> None:
    rig = CoreRig()
    one = _stream_call(rig, "x")
    two = _stream_call(rig, "y")
    rig.lose("client")
    steps = [s for s in rig.steps if s[0] == rig.step]
    # one step per forwarded reset (each written, then recorded), the upstream closed last
    assert [_frames(s[1]) for s in steps if s[1]] == [[(wire.RST_STREAM, 0, one, b"\0\0\0\x08")],
                                                      [(wire.RST_STREAM, 0, two, b"\0\0\0\x08")]]  # fmt: skip
    assert steps[-1][3] == [Close("upstream")]
    assert [(r.kind, r.cause) for r in rig.records if r.kind in ("cancel", "call_end")] == [
        ("cancel", "client_disconnect"), ("call_end", "client_disconnect")] * 2  # fmt: skip


def test_a_lost_upstream_fails_calls_with_a_status_of_the_proxy_then_goaway_and_linger() -> None:
    rig = CoreRig()
    sid = _stream_call(rig, "x")
    rig.lose("upstream", ConnectionResetError())
    sent = rig.take("client")
    assert _types(sent) == [wire.HEADERS, wire.GOAWAY] and _goaways(sent) == [(sid, 0)]
    (end,) = _of(rig, "call_end")
    assert (end.cause, end.status, end.details) == ("upstream_disconnect", "UNAVAILABLE", "triton-tap: upstream connection lost")
    assert rig.armed == {"linger": LINGER_S}
    rig.fire_timers()
    assert rig.closes == ["client"]


def test_a_lost_client_cancels_the_linger() -> None:
    rig = CoreRig()
    rig.pump()
    rig.shutdown()
    assert rig.armed == {"linger": LINGER_S}
    rig.lose("client")
    assert rig.armed == {}


# --- GOAWAY ---------------------------------------------------------------------------------------------


def test_crossing_call_after_upstream_goaway_survives_the_linger() -> None:
    """A call sent before the client read the upstream's GOAWAY(2^31-1) runs to its end; the connection closes after."""
    rig = CoreRig()
    rig.pump()
    rig.up(wire.goaway(2**31 - 1, wire.NO_ERROR))
    assert rig.armed == {"linger": LINGER_S}
    sid = rig.open_call(end_stream=True)
    rig.pump(client_reads=False)
    rig.fire_timers()  # the linger fires with the call still open: nothing closes
    assert not rig.closes and list(rig.core.calls) == [sid] and not rig.armed
    assert rig.server is not None
    rig.server.send_headers(sid, [(b":status", b"200"), (b"grpc-status", b"0")], end_stream=True)
    rig.pump(client_reads=False)
    assert rig.armed == {"linger": LINGER_S}  # the call's end arms it again
    rig.fire_timers()
    assert rig.closes == ["client"]
    (end,) = _of(rig, "call_end")
    assert end.cause == "ok"


def test_upstream_goaway_refuses_calls_above_its_last_stream_id() -> None:
    rig = CoreRig()
    rig.pump()
    one = rig.open_call()
    three = rig.open_call()
    rig.pump()
    rig.up(wire.goaway(one, wire.NO_ERROR))
    sent = rig.take("client")
    assert [(t, sid, p) for t, _, sid, p in _frames(sent) if t == wire.RST_STREAM] == [(wire.RST_STREAM, three, b"\0\0\0\x07")]
    assert _goaways(sent) == [(one, 0)]
    (end,) = _of(rig, "call_end")
    assert (end.call, end.status, end.upstream_rst_code) == (f"c1.{three}", "UNAVAILABLE", wire.REFUSED_STREAM)
    assert end.cause == "upstream_disconnect"  # (it was `error`: the upstream sent no status, its GOAWAY refused it)
    assert end.refused  # (so send does not send it again: its client may have retried it)


def _error_goaway(last: int | None = None) -> tuple[CoreRig, int, int]:
    """Calls 1 and 3 open, then the upstream's GOAWAY(ENHANCE_YOUR_CALM, too_many_pings) naming ``last``
    (default 3), as Triton's gRPC server answers a client's PING flood."""
    rig = CoreRig()
    rig.pump()
    one = rig.open_call(request_headers(STREAM))
    three = rig.open_call()
    rig.pump()
    rig.take("client")
    rig.up(wire.goaway(three if last is None else last, ENHANCE_YOUR_CALM, b"too_many_pings"))
    return rig, one, three


def test_upstream_error_goaway_lets_the_upstream_end_its_calls() -> None:
    """After an error GOAWAY the upstream still ends the open calls (gRPC C-core: each gets its status, then
    the connection closes): the client gets those frames, the capture the upstream's statuses; the violation is
    the client's as the upstream judged it; the client is left to close itself, as after a clean GOAWAY."""
    rig, one, three = _error_goaway()
    assert _goaways(rig.take("client")) == [(three, ENHANCE_YOUR_CALM)]
    assert not rig.closed("client") and not rig.closed("upstream")
    assert rig.core.up is Upstream.ENDING
    assert rig.armed == {"upstream_end": LINGER_S}
    (violation,) = _of(rig, "protocol_error")
    assert violation.side == "client" and violation.error_code == ENHANCE_YOUR_CALM
    assert "GOAWAY ENHANCE_YOUR_CALM (too_many_pings)" in violation.error
    assert violation.open_calls == [f"c1.{one}", f"c1.{three}"]
    assert rig.server is not None
    status = [(b"grpc-status", b"14"), (b"grpc-message", b"Too many pings")]
    for sid in (one, three):
        rig.server.send_headers(sid, [*RESPONSE_HEADERS, *status], end_stream=True)
        rig.server.reset_stream(sid, wire.NO_ERROR)
    rig.pump(client_reads=False)
    sent = _frames(rig.take("client"))
    assert [(t, sid) for t, _, sid, _ in sent] == [(wire.HEADERS, one), (wire.RST_STREAM, one), (wire.HEADERS, three),
                                                  (wire.RST_STREAM, three)]  # fmt: skip
    ends = _of(rig, "call_end")
    assert [(e.call, e.status, e.details, e.cause) for e in ends] == [
        (f"c1.{one}", "UNAVAILABLE", "Too many pings", "error"), (f"c1.{three}", "UNAVAILABLE", "Too many pings", "error")]  # fmt: skip
    assert not _of(rig, "cancel")
    assert "linger" in rig.armed
    rig.lose("upstream")
    assert rig.core.up is Upstream.LOST and len(_of(rig, "call_end")) == 2
    rig.fire_timers()
    assert rig.closed("client")


def test_upstream_error_goaway_then_close_ends_what_is_left_as_upstream_disconnect() -> None:
    """A call the upstream did not end before it closed: upstream_disconnect, the proxy's UNAVAILABLE to the client."""
    rig, one, three = _error_goaway()
    rig.take("client")
    rig.lose("upstream")
    sent = rig.take("client")
    assert [(t, sid) for t, _, sid, _ in _frames(sent) if t == wire.HEADERS] == [(wire.HEADERS, one), (wire.HEADERS, three)]
    assert b"upstream connection lost" in sent
    assert [(r.kind, r.cause) for r in rig.records if r.kind in ("cancel", "call_end")] == [
        ("cancel", "upstream_disconnect"), ("call_end", "upstream_disconnect")] * 2  # fmt: skip
    assert not any(r.forwarded_upstream for r in _of(rig, "cancel"))


def test_upstream_error_goaway_without_a_close_is_closed_by_its_timer() -> None:
    """An upstream that sent an error GOAWAY must close the connection (RFC 9113 5.4.1); one that does not is
    closed after the linger, and its calls end as upstream_disconnect."""
    rig, _, _ = _error_goaway()
    rig.fire_timers()
    assert rig.closed("upstream") and not rig.closed("client")
    rig.lose("upstream")
    assert {e.cause for e in _of(rig, "call_end")} == {"upstream_disconnect"}


def test_upstream_error_goaway_refuses_calls_above_its_last_stream_id_and_forwards_nothing_more() -> None:
    """Call 3 above the error GOAWAY's last id (1) never ran: REFUSED_STREAM. A cancel of call 1 after it is
    recorded but not sent to an upstream that is ending the connection; new calls are refused."""
    rig, one, three = _error_goaway(last=1)
    sent = rig.take("client")
    assert [(sid, p) for t, _, sid, p in _frames(sent) if t == wire.RST_STREAM] == [(three, b"\0\0\0\x07")]
    (refused,) = _of(rig, "call_end")
    assert (refused.call, refused.refused, refused.cause) == (f"c1.{three}", True, "upstream_disconnect")
    rig.take("upstream")
    rig.down(wire.rst_stream(one, wire.CANCEL) + wire.frame(wire.PING, 0, 0, bytes(8)))
    assert rig.take("upstream") == b""
    (cancel,) = _of(rig, "cancel")
    assert (cancel.call, cancel.cause, cancel.forwarded_upstream) == (f"c1.{one}", "client_cancel", False)


def test_a_second_upstream_error_goaway_never_raises_the_last_stream_id() -> None:
    """The client is told the error again under the lower last stream id it was given; one violation only."""
    rig, one, _ = _error_goaway(last=1)
    rig.take("client")
    rig.up(wire.goaway(7, wire.INTERNAL_ERROR, b"again"))
    assert _goaways(rig.take("client")) == [(one, wire.INTERNAL_ERROR)]
    assert len(_of(rig, "protocol_error")) == 1 and rig.core.up is Upstream.ENDING


def _crossing_the_shutdown_goaway() -> tuple[CoreRig, int]:
    """A call on stream 1, the shutdown's GOAWAY(1), then stream 3 opened by a client that had not read it yet."""
    rig = CoreRig()
    rig.pump()
    rig.open_call(end_stream=True)
    rig.pump()
    rig.shutdown()
    s3 = rig.client.get_next_available_stream_id()
    rig.client.send_headers(s3, REQ, end_stream=True)
    rig.down(rig.client.data_to_send())
    return rig, s3


def test_goaway_last_stream_id_never_increases() -> None:
    """After the shutdown GOAWAY(1) and a refused crossing stream 3, a protocol error's GOAWAY still names 1."""
    rig, _ = _crossing_the_shutdown_goaway()
    rig.down(wire.frame(wire.PING, 0, 0, b"1234"))  # a framing error: PING of 4 bytes
    assert _goaways(rig.take("client")) == [(1, wire.NO_ERROR), (1, wire.FRAME_SIZE_ERROR)]


def test_streams_opened_after_goaway_are_kept_back_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream opened after the shutdown GOAWAY is refused and never reaches the upstream; its DATA's
    flow-control credit goes back to the client; one that keeps opening them is cut off (ENHANCE_YOUR_CALM)."""
    monkeypatch.setattr(core, "KEPT_BACK_LIMIT", 5)
    rig = CoreRig()
    rig.pump()
    rig.shutdown()
    rig.take("client")
    rig.take("upstream")
    block = wire.encode_block(REQ)
    rig.down(wire.frame(wire.HEADERS, wire.END_HEADERS, 1, block) + wire.frame(wire.DATA, 0, 1, bytes(100)))
    assert rig.take("upstream") == b""
    assert (wire.WINDOW_UPDATE, 0, 0, (100).to_bytes(4, "big")) in _frames(rig.take("client"))
    for i in range(1, 7):
        rig.down(wire.frame(wire.HEADERS, wire.END_HEADERS | wire.END_STREAM, 2 * i + 1, block))
    (violation,) = _of(rig, "protocol_error")
    assert violation.error_code == ENHANCE_YOUR_CALM and rig.closed("client")
    assert len(_of(rig, "call_end")) == 5


# --- a refused or broken upstream -------------------------------------------------------------------------


def test_an_unreachable_upstream_gets_every_call_unavailable_with_the_reason() -> None:
    rig = CoreRig(server=False, connect=False)
    rig.connect_failed("triton-tap: upstream 127.0.0.1:1 unreachable: Connection refused")
    rig.pump()
    rig.open_call(end_stream=True)
    rig.pump(client_reads=False)
    events = rig.client.receive_data(rig.take("client")) if rig.out["client"] else []
    del events
    (end,) = _of(rig, "call_end")
    assert (end.cause, end.status, end.details) == ("upstream_disconnect", "UNAVAILABLE",
                                                   "triton-tap: upstream 127.0.0.1:1 unreachable: Connection refused")  # fmt: skip


def test_refuser_after_its_goaway_takes_a_ping_without_a_protocol_error() -> None:
    """Upstream unreachable, then shutdown: a client PING afterwards is not a protocol violation."""
    rig = CoreRig(server=False, connect=False)
    rig.connect_failed("triton-tap: upstream 127.0.0.1:1 unreachable")
    rig.pump()
    rig.shutdown()
    rig.take("client")
    rig.down(wire.frame(wire.PING, 0, 0, b"12345678"))
    assert not _of(rig, "protocol_error") and not rig.closes


def test_proxy_speaks_settings_first_when_the_upstream_never_did() -> None:
    """Upstream lost before its SETTINGS: the client gets an empty SETTINGS before the proxy's status; its ACK stays here."""
    rig = CoreRig(server=False)
    sid = rig.client.get_next_available_stream_id()
    rig.client.send_headers(sid, REQ, end_stream=True)
    rig.down(rig.client.data_to_send())
    rig.take("upstream")
    rig.lose("upstream", ConnectionResetError())
    sent = rig.take("client")
    assert _types(sent) == [wire.SETTINGS, wire.HEADERS, wire.GOAWAY]
    rig.client.receive_data(sent)  # a valid server preface for h2: no error
    rig.down(rig.client.data_to_send())  # the client's SETTINGS ACK
    assert rig.take("upstream") == b""  # the ACK of the proxy's SETTINGS never reaches the upstream
    (end,) = _of(rig, "call_end")
    assert end.cause == "upstream_disconnect"


def test_upstream_closing_before_http2_gives_calls_the_reason() -> None:
    """Upstream closes before its SETTINGS (e.g. mTLS rejected us) and no call yet: each call gets UNAVAILABLE with why."""
    rig = CoreRig(server=False)
    got: list[Any] = []
    rig.down(rig.client.data_to_send())  # the client's preface and SETTINGS, forwarded
    rig.lose("upstream")
    sid = rig.open_call(end_stream=True)
    rig.down(rig.client.data_to_send())
    got.extend(rig.client.receive_data(rig.take("client")))
    (headers,) = [e for e in got if isinstance(e, h2.events.ResponseReceived) and e.stream_id == sid]
    trailers = dict(headers.headers)
    assert trailers[b"grpc-status"] == b"14" and b"before speaking HTTP/2" in trailers[b"grpc-message"]
    (end,) = _of(rig, "call_end")
    assert end.cause == "upstream_disconnect" and "before speaking HTTP/2" in end.details


@pytest.mark.parametrize("client_saw_settings", [True, False])
def test_upstream_breaking_http2_before_any_call_gives_calls_the_reason(client_saw_settings: bool) -> None:
    """Upstream sends its SETTINGS, then a frame no HTTP/2 peer may send, before the client's first call.

    Whether or not the client already read the upstream's SETTINGS, its call gets UNAVAILABLE with
    the reason, never a GOAWAY saying no call was processed: gRPC retries such calls on a new
    connection without limit, which met the same upstream each time until the call's deadline.
    """
    rig = CoreRig()
    server = rig.server
    assert server is not None
    got: list[Any] = []
    rig.down(rig.client.data_to_send())  # the client's preface and SETTINGS, forwarded
    server.receive_data(rig.take("upstream"))
    # SETTINGS, then DATA on stream 0 in the same read: a connection error for any client.
    rig.up(server.data_to_send() + wire.frame(wire.DATA, 0, 0, b"junk"))
    assert rig.closes == ["upstream"] and _goaways(rig.take("upstream")) == [(0, wire.PROTOCOL_ERROR)]
    if client_saw_settings:
        got.extend(rig.client.receive_data(rig.take("client")))
    rig.lose("upstream")  # the upstream connection the proxy closed is gone
    rig.open_call(end_stream=True)
    rig.down(rig.client.data_to_send())
    got.extend(rig.client.receive_data(rig.take("client")))
    assert not [e for e in got if isinstance(e, h2.events.ConnectionTerminated) and e.last_stream_id == 0], got
    (headers,) = [e for e in got if isinstance(e, h2.events.ResponseReceived)]
    trailers = dict(headers.headers)
    assert trailers[b"grpc-status"] == b"14" and b"upstream broke HTTP/2" in trailers[b"grpc-message"]
    (violation,) = _of(rig, "protocol_error")
    assert violation.side == "upstream"
    (end,) = _of(rig, "call_end")
    assert end.cause == "upstream_disconnect" and "frame type 0 on stream 0" in end.details


def test_a_client_using_the_credit_a_broken_upstream_gave_it_is_refused_not_blamed() -> None:
    """The upstream's SETTINGS and WINDOW_UPDATE reach the client unchanged (a 1 MiB window, 1 MiB frames), then
    the upstream breaks HTTP/2 before any call. The proxy's own h2, refusing the calls, must take what the client
    may send by that grant: one 128 KiB DATA frame was a flow-control and frame-size violation to a fresh h2,
    told as the client's protocol_error and a GOAWAY instead of the call's UNAVAILABLE and its reason."""
    from h2.settings import SettingCodes

    rig = CoreRig()
    server = rig.server
    assert server is not None
    rig.down(rig.client.data_to_send())
    server.receive_data(rig.take("upstream"))
    server.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20, SettingCodes.MAX_FRAME_SIZE: 1 << 20})
    server.increment_flow_control_window((1 << 20) - 65535)
    rig.up(server.data_to_send() + wire.frame(wire.DATA, 0, 0, b"junk"))
    got: list[Any] = list(rig.client.receive_data(rig.take("client")))
    rig.lose("upstream")
    sid = rig.open_call()
    rig.client.send_data(sid, b"\0" * (128 << 10), end_stream=True)
    rig.down(rig.client.data_to_send())
    got.extend(rig.client.receive_data(rig.take("client")))
    assert [v.side for v in _of(rig, "protocol_error")] == ["upstream"]
    (headers,) = [e for e in got if isinstance(e, h2.events.ResponseReceived)]
    assert dict(headers.headers)[b"grpc-status"] == b"14"
    assert [e.error_code for e in got if isinstance(e, h2.events.ConnectionTerminated)] == [wire.NO_ERROR]
    (end,) = _of(rig, "call_end")
    assert end.cause == "upstream_disconnect" and "upstream broke HTTP/2" in end.details


def test_upstream_breaking_http2_after_a_call_ends_the_calls_when_it_is_lost() -> None:
    """With a call open, an upstream that breaks HTTP/2 is told (GOAWAY) and closed; its calls end as
    upstream_disconnect with a status of the proxy's own once it is gone, and the client gets GOAWAY."""
    rig = CoreRig()
    sid = _stream_call(rig, "x")
    rig.up(wire.frame(wire.PING, 0, 0, b"1234"))
    assert rig.closes == ["upstream"] and not _of(rig, "call_end")
    rig.lose("upstream")
    (end,) = _of(rig, "call_end")
    assert (end.call, end.cause, end.status) == (f"c1.{sid}", "upstream_disconnect", "UNAVAILABLE")
    assert _goaways(rig.take("client"))[-1] == (sid, 0)


def test_upstream_closing_cleanly_before_any_call_sends_the_client_elsewhere() -> None:
    """Upstream spoke HTTP/2, then closed (a restart, an idle timeout) before the client's first call.

    The client is told to open its calls on a new connection (GOAWAY), not failed: its next call
    may well reach a Triton that is back.
    """
    rig = CoreRig()
    got: list[Any] = []
    rig.pump()
    rig.lose("upstream")
    got.extend(rig.client.receive_data(rig.take("client")))
    (goaway,) = [e for e in got if isinstance(e, h2.events.ConnectionTerminated)]
    assert goaway.last_stream_id == 0 and goaway.error_code == 0
    assert not _of(rig, "call_end") and not _of(rig, "protocol_error")


def test_huge_grpc_status_is_unknown_not_a_proxy_error() -> None:
    """An upstream grpc-status of 5000 digits ends the call as an error with status UNKNOWN."""
    rig = CoreRig()
    rig.pump()
    sid = rig.open_call(end_stream=True)
    rig.pump()
    assert rig.server is not None
    rig.server.send_headers(sid, [(b":status", b"200"), (b"grpc-status", b"1" * 5000)], end_stream=True)
    rig.pump()
    (end,) = _of(rig, "call_end")
    assert (end.cause, end.status) == ("error", "UNKNOWN")


# --- framing, flow control, header blocks ---------------------------------------------------------------


def test_bad_data_padding_is_never_forwarded() -> None:
    """A DATA frame whose padding exceeds it is a client protocol error and never reaches the upstream."""
    rig = CoreRig()
    rig.pump()
    sid = rig.open_call()
    rig.pump()
    rig.down(wire.frame(wire.DATA, wire.PADDED, sid, b"\x09abc"))
    assert wire.DATA not in _types(rig.take("upstream"))
    (violation,) = _of(rig, "protocol_error")
    assert violation.side == "client" and violation.error_code == wire.PROTOCOL_ERROR
    assert rig.closes == ["client"]


def test_lowered_max_frame_size_binds_no_frame_already_in_flight() -> None:
    """Upstream lowers SETTINGS_MAX_FRAME_SIZE: a larger client frame sent before the ACK is passed on, not an error."""
    rig = CoreRig(server=False)

    def settings(value: int) -> bytes:
        return wire.frame(wire.SETTINGS, 0, 0, wire.SETTINGS_MAX_FRAME_SIZE.to_bytes(2, "big") + value.to_bytes(4, "big"))

    rig.down(wire.PREFACE + wire.frame(wire.SETTINGS, 0, 0))
    rig.up(settings(1 << 20))
    rig.down(wire.frame(wire.SETTINGS, wire.ACK, 0))
    rig.up(settings(16384))
    rig.take("upstream")
    rig.down(wire.frame(wire.DATA, 0, 1, bytes(65536)))
    assert not _of(rig, "protocol_error")
    assert len(rig.take("upstream")) == 9 + 65536


def test_window_updates_pass_both_ways_unchanged() -> None:
    """Flow control is end to end: a 300 kB request and response (h2conv's ``unary_large``) need the peers'
    WINDOW_UPDATEs, which the relay passes on as they are (the call completes only if they arrive)."""
    rig = CoreRig()
    unary_large(rig)
    up = [f for _, c2s, _, _ in rig.steps for f in _frames(c2s)]
    down = [f for _, _, s2c, _ in rig.steps for f in _frames(s2c)]
    assert wire.WINDOW_UPDATE in [f[0] for f in up]  # the client's credit reached the server (for the response)
    assert wire.WINDOW_UPDATE in [f[0] for f in down]  # the server's credit reached the client (for the request)
    assert [e for e in rig.server_events if isinstance(e, h2.events.StreamEnded)]
    assert [e for e in rig.client_events if isinstance(e, h2.events.StreamEnded)]
    request, response = _of(rig, "message")
    assert request.size == len(infer_request("big", 300_000)) - 5 and request.request_id == "big"
    assert response.size == len(infer_response("big", 300_000)) - 5
    (end,) = _of(rig, "call_end")
    assert end.status == "OK"


def test_header_blocks_across_continuation_are_recorded_whole_and_passed_on() -> None:
    rig = CoreRig()
    rig.pump()
    sid = rig.open_call(request_headers(b"/x.Y/Z", (b"x-big", b"v" * 40_000), (b"authorization", b"secret")), end_stream=True)
    sent = rig.client.data_to_send()
    rig.down(sent)
    (step,) = [s for s in rig.steps if s[0] == rig.step]
    assert wire.CONTINUATION in _types(sent) and step[1] == sent
    assert rig.server is not None
    rig.pump()
    rig.server.send_headers(sid, [*RESPONSE_HEADERS, (b"x-meta", b"m" * 40_000)])
    rig.server.send_headers(sid, [(b"grpc-status", b"0")], end_stream=True)
    rig.pump()
    (start,) = _of(rig, "call_start")
    assert ["x-big", "v" * 40_000] in start.metadata and ["authorization", REDACTED] in start.metadata
    (end,) = _of(rig, "call_end")
    assert ["x-meta", "m" * 40_000] in end.initial_metadata and end.status == "OK"


def test_a_rewritten_authority_goes_upstream_re_encoded() -> None:
    """``--upstream-server-name``: every request block goes upstream re-encoded with that ``:authority``."""
    rig = CoreRig({"options": RelayOptions(), "upstream_server_name": "triton.internal"})
    rig.pump()
    sid = rig.open_call(end_stream=True)
    rig.pump()
    (received,) = [e for e in rig.server_events if isinstance(e, h2.events.RequestReceived)]
    assert (b":authority", b"triton.internal") in received.headers and received.stream_id == sid


def test_calls_repeating_a_header_block_are_recorded_alike() -> None:
    """What a request block says is read once per block (proxy.wire.headers.Block): calls sending the same
    block get the same method, metadata and redaction, and a call whose block differs (another deadline)
    gets its own."""
    rig = CoreRig()
    secret = [*REQ, (b"authorization", b"Bearer s3cret")]
    for headers in (secret, secret, secret, [*secret, (b"grpc-timeout", b"250m")], secret):
        rig.pump()
        rig.open_call(headers, end_stream=True)
        rig.pump()
    starts = _of(rig, "call_start")
    assert [s.timeout_ms for s in starts] == [None, None, None, 250.0, None]
    assert all(s.method == "/inference.GRPCInferenceService/ModelInfer" for s in starts)
    assert [s.metadata for s in starts[:3]] == [starts[4].metadata] * 3
    assert starts[0].metadata[-1] == ["authorization", REDACTED]
    assert starts[3].metadata[-2:] == [["authorization", REDACTED], ["grpc-timeout", "250m"]]
    # the later blocks of the same headers were remembered (hpack indexes them), so the cache was used
    assert starts[1].metadata is starts[2].metadata


def test_message_fragments_are_copied_not_views_of_the_read() -> None:
    """A partial message keeps copies of its bytes, never a view that pins the whole read buffer."""
    asm = Assembler(LABEL_KEEP, False)
    read = bytes(5) + b"\x00\x00\x03\xe8" + b"x" * 10 + bytes(200_000)  # one read, message cut short
    asm.feed(memoryview(read)[5:19])
    assert asm._parts and all(type(p) is bytes for p in asm._parts)


# --- the core's own failures, and the shutdown ------------------------------------------------------------


def test_a_bug_of_the_core_costs_one_connection_and_is_recorded_as_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    rig = CoreRig()
    sid = _stream_call(rig, "victim")

    def broken(call: Any, direction: int, data: Any) -> None:
        raise RuntimeError("injected relay bug")

    monkeypatch.setattr(rig.core, "_record", broken)
    assert rig.server is not None
    rig.server.send_data(sid, stream_response("victim", False))
    rig.up(rig.server.data_to_send())
    (cancel,) = _of(rig, "cancel")
    assert cancel.cause == "proxy_error" and cancel.in_flight == ["victim"]
    (end,) = _of(rig, "call_end")
    assert (end.status, end.cause) == ("INTERNAL", "proxy_error")
    assert [log.event for log in rig.logs] == ["relay_internal_error"] and rig.closes == ["upstream"]


def test_a_call_refused_at_the_proxys_shutdown_is_the_shutdowns_not_the_upstreams_error() -> None:
    """Stream 3 crosses the shutdown GOAWAY(1): refused with REFUSED_STREAM, it never reached the upstream. Its
    call_end was `error` with `upstream_rst_code` 7, as if Triton had refused it (check counted an error, and send
    re-sent it); it is `proxy_shutdown`, with no upstream reset."""
    rig, s3 = _crossing_the_shutdown_goaway()
    assert (wire.RST_STREAM, 0, s3, b"\0\0\0\x07") in _frames(rig.take("client"))
    end = next(e for e in _of(rig, "call_end") if e.call == f"c1.{s3}")
    assert (end.cause, end.status, end.upstream_rst_code, end.refused) == ("proxy_shutdown", "UNAVAILABLE", None, True)


def test_a_call_crossing_the_goaway_of_an_idle_connection_at_shutdown_is_refused_not_told_upstream_lost() -> None:
    """At shutdown an idle connection is aborted: its upstream closed at once, the client told GOAWAY and given
    2 s to close. A call that crossed that GOAWAY got a final UNAVAILABLE "upstream connection lost" (gRPC does
    not retry it) and was recorded `upstream_disconnect`; it is refused (REFUSED_STREAM: the client retries it
    elsewhere), `proxy_shutdown`."""
    rig = CoreRig()
    rig.pump()
    rig.abort("proxy_shutdown")
    rig.lose("upstream")  # (the shell's report of the close the abort asked for)
    rig.take("client")
    sid = rig.client.get_next_available_stream_id()
    rig.client.send_headers(sid, REQ, end_stream=True)
    rig.down(rig.client.data_to_send())
    sent = rig.take("client")
    assert (wire.RST_STREAM, 0, sid, b"\0\0\0\x07") in _frames(sent) and wire.HEADERS not in _types(sent)
    (end,) = _of(rig, "call_end")
    assert (end.cause, end.status, end.upstream_rst_code, end.refused) == ("proxy_shutdown", "UNAVAILABLE", None, True)


def test_abort_ends_every_call_and_closes_the_upstream() -> None:
    rig = CoreRig()
    _stream_call(rig, "p")
    _stream_call(rig, "q")
    rig.abort("proxy_shutdown")
    assert [(r.cause, r.forwarded_upstream) for r in _of(rig, "cancel")] == [("proxy_shutdown", True)] * 2
    # Ended in flight, not refused: their requests had reached the upstream.
    assert [(e.status, e.cause, e.refused) for e in _of(rig, "call_end")] == [("UNAVAILABLE", "proxy_shutdown", False)] * 2
    assert rig.closes == ["upstream"] and rig.armed == {"linger": LINGER_S}
    assert ArmTimer("linger", LINGER_S) in rig.steps[-1][3]


# --- frames after the upstream ended a call -----------------------------------------------------------------


def _deadline_ending(sid: int) -> bytes:
    """What Triton 2.51 sends, once, when a call's deadline passes: trailers (literal header block) and
    RST_STREAM(NO_ERROR). It sends this four times in one write (tests/e2e/test_deadline_repeats_e2e.py
    shows it against the real server); here it is scripted, to feed the core reads split at will."""
    block = wire.encode_block([(b"grpc-status", b"4"), (b"grpc-message", b"Deadline Exceeded")])
    return wire.headers_frames(sid, block, True, 16384) + wire.rst_stream(sid, wire.NO_ERROR)


@pytest.mark.parametrize("reads", [1, 4], ids=["one_read", "a_read_each"])
def test_an_ending_the_upstream_repeats_passes_verbatim_and_its_repeats_are_late_after_end(reads: int) -> None:
    rig = CoreRig()
    rig.pump()
    sid = rig.open_call(request_headers(STREAM, (b"grpc-timeout", b"1n")))
    rig.client.send_data(sid, infer_request("d0"), end_stream=True)
    rig.pump()
    assert rig.server is not None
    rig.server.send_headers(sid, RESPONSE_HEADERS)
    rig.server.send_data(sid, stream_response("d0", False))
    rig.pump()
    ending = _deadline_ending(sid)
    sent = b""
    for chunk in [ending * 4] if reads == 1 else [ending] * 4:
        rig.up(chunk)
        sent += rig.take("client")
    assert sent == ending * 4  # transparent: the client gets exactly what the upstream sent
    assert [r.kind for r in rig.records if r.kind in ("cancel", "call_end")] == ["cancel", "call_end"]
    (cancel,) = _of(rig, "cancel")
    (end,) = _of(rig, "call_end")
    assert (cancel.cause, cancel.forwarded_upstream, end.cause, end.status) == (
        "deadline", False, "deadline", "DEADLINE_EXCEEDED"
    )
    late = _of(rig, "late")
    # The first RST_STREAM(NO_ERROR) right after the complete response is allowed (RFC 9113 8.1): not recorded.
    assert [(r.after, r.frame, r.error, r.rst_code, r.call) for r in late] == [
        ("end", "trailers", "4 Deadline Exceeded", None, end.call), ("end", "rst", None, 0, end.call)
    ] * 3
    assert all(r.since_cancel_ms >= 0 for r in late)
    assert not _of(rig, "protocol_error") and rig.core.up is Upstream.OPEN


def test_a_healthy_ending_records_nothing_late() -> None:
    """Trailers then one RST_STREAM(NO_ERROR), as RFC 9113 8.1 allows: no late record (no wolf cried)."""
    rig = CoreRig()
    sid = _stream_call(rig, "ok")
    rig.up(_deadline_ending(sid))
    assert rig.take("client")
    assert _of(rig, "call_end") and not _of(rig, "late")


def test_frames_after_an_upstream_reset_are_late_after_end() -> None:
    rig = CoreRig()
    sid = _stream_call(rig, "r")
    reset = wire.rst_stream(sid, wire.CANCEL)
    data = wire.frame(wire.DATA, 0, sid, stream_response("r", True))
    rig.up(reset + data + reset)
    assert rig.take("client") == reset + data + reset
    (end,) = _of(rig, "call_end")
    assert end.cause == "error" and end.upstream_rst_code == wire.CANCEL
    assert [(r.after, r.frame, r.request_id, r.rst_code) for r in _of(rig, "late")] == [
        ("end", "message", "r", None), ("end", "rst", None, wire.CANCEL)
    ]


def test_late_records_after_end_stop_at_the_per_call_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.relay import recording

    monkeypatch.setattr(recording, "LATE_RECORDS", 3)
    rig = CoreRig()
    sid = _stream_call(rig, "x")
    rig.up(_deadline_ending(sid) * 10)
    assert [r.frame for r in _of(rig, "late")] == ["trailers", "rst", "trailers", "overflow"]


def _compressed(message: bytes, encoding: str) -> bytes:
    """A gRPC message of ``grpc(...)`` sent compressed (flag 1), as grpc compresses it for that encoding."""
    import gzip
    import zlib

    body = message[5:]
    packed = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    return b"\1" + len(packed).to_bytes(4, "big") + packed


@pytest.mark.parametrize(
    ("encoding", "mangle", "want"),
    [
        ("gzip", False, ("z1", None)),
        ("deflate", False, ("z1", None)),
        ("snappy", False, (None, "compressed message (grpc-encoding snappy): not decoded")),
        ("gzip", True, (None, "not a valid request: Error -3 while decompressing data: incorrect header check")),
    ],
)
def test_a_compressed_request_is_labelled_from_its_bytes_decompressed(encoding: str, mangle: bool,
                                                                      want: tuple[str | None, str | None]) -> None:  # fmt: skip
    """tritonclient's compression_algorithm: the request message is compressed (grpc-encoding gzip or deflate).
    Its labels, and the in-flight set of a cancel, come from it decompressed; the record keeps its size and
    flag as on the wire. An encoding grpc does not define, or bytes that do not inflate, are said so."""
    rig = CoreRig()
    rig.pump()
    sid = rig.open_call(request_headers(STREAM, (b"grpc-encoding", encoding.encode())))
    packed = _compressed(infer_request("z1", size=4096), "gzip" if encoding == "snappy" else encoding)
    if mangle:
        packed = packed[:5] + b"\0\0" + packed[7:]
    rig.client.send_data(sid, packed)
    rig.pump()
    (req,) = [m for m in _of(rig, "message") if m.dir == "c2s"]
    assert (req.request_id, req.decode_error) == want
    assert req.compressed and req.size == len(packed) - 5
    rig.client.reset_stream(sid, 8)
    rig.pump()
    (cancel,) = _of(rig, "cancel")
    assert cancel.in_flight == ([want[0]] if want[0] else [])


@pytest.mark.parametrize(
    ("method", "body", "want"),
    [
        (b"ModelReady", pb.ModelReadyRequest(name="tokens", version="2").SerializeToString(), ("tokens", "2", None)),
        (b"ModelMetadata", pb.ModelMetadataRequest(name="echo").SerializeToString(), ("echo", "", None)),
        (b"RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="tokens").SerializeToString(),
         ("tokens", None, None)),
        (b"ModelStatistics", b"", (None, "", None)),  # (every model's statistics)
        (b"ModelReady", b"\x0a\xff", (None, None, "not a valid request: Error parsing message")),
        (b"ServerReady", b"", (None, None, None)),  # names no model
    ],
)
def test_a_request_naming_a_model_is_labelled_with_it(method: bytes, body: bytes,
                                                      want: tuple[str | None, str | None, str | None]) -> None:  # fmt: skip
    """A readiness, metadata or config request's record says which model it asked about (in a meta capture
    nothing else does: serve answered one model's ModelReady with another's, diff counted them as one)."""
    rig = CoreRig()
    rig.pump()
    sid = rig.open_call(request_headers(b"/inference.GRPCInferenceService/" + method))
    rig.client.send_data(sid, grpc(body), end_stream=True)
    rig.pump()
    (req,) = [m for m in _of(rig, "message") if m.dir == "c2s"]
    assert (req.model, req.model_version, req.decode_error and req.decode_error[:42]) == want


# --- a message the call's end cut ---------------------------------------------------------------------


def _cut_request(options: RelayOptions | None = None) -> tuple[CoreRig, bytes]:
    """A client 30,000 bytes into a 100 kB request when Triton ends the call at its deadline."""
    rig = CoreRig({"options": options or RelayOptions()})
    rig.pump()
    sid = rig.open_call(request_headers(INFER, (b"grpc-timeout", b"1u")))  # (past by the time it ends)
    rig.pump()
    message = infer_request("big", 100_000)
    rig.down(wire.frame(wire.DATA, 0, sid, message[:15_000]) + wire.frame(wire.DATA, 0, sid, message[15_000:30_000]))
    assert rig.server is not None
    rig.server.send_headers(sid, [*RESPONSE_HEADERS, (b"grpc-status", b"4"), (b"grpc-message", b"Deadline Exceeded")],
                            end_stream=True)  # fmt: skip
    rig.pump(client_reads=False)
    return rig, message


def test_a_request_the_calls_end_cut_is_recorded_as_far_as_it_came() -> None:
    """Triton ends the call while the client is still sending its request: the bytes that arrived are one
    `partial body` message record (never labelled: Triton never had the request whole), counted by call_end."""
    rig, message = _cut_request()
    (cut,) = _of(rig, "message")
    assert (cut.dir, cut.index, cut.size, cut.request_id, cut.model) == ("c2s", 0, 30_000 - 5, None, None)
    assert cut.decode_error == f"{ev.MESSAGE_CUT} (after 29995 of its {len(message) - 5} bytes)"
    assert ev.partial_body(cut.decode_error) and cut.payload is None and cut.payload_sha256 is None
    (end,) = _of(rig, "call_end")
    assert (end.messages_c2s, end.status, end.cause) == (1, "DEADLINE_EXCEEDED", "deadline")
    assert _kinds(rig)[-3:] == ["message", "cancel", "call_end"]  # (a reader takes the first end record as the end)


def test_a_cut_request_keeps_its_bytes_with_payload_full_and_none_under_redaction() -> None:
    rig, message = _cut_request(RelayOptions(payload="full", payload_store="inline"))
    (cut,) = _of(rig, "message")
    arrived = message[5:30_000]
    assert base64.b64decode(cut.payload) == arrived and cut.payload_truncated
    assert cut.payload_sha256 == hashlib.sha256(arrived).hexdigest()
    rig, _ = _cut_request(RelayOptions(payload="full", redact_inputs=frozenset({"INPUT"}), redact_key=b"k"))
    (cut,) = _of(rig, "message")
    assert cut.payload is None and cut.payload_at is None and cut.payload_sha256 is None and cut.size == 29995


def test_a_length_prefix_the_calls_end_cut_is_a_message_of_no_bytes() -> None:
    rig = CoreRig()
    rig.pump()
    sid = rig.open_call()
    rig.pump()
    rig.down(wire.frame(wire.DATA, 0, sid, b"\0\0\0"))
    rig.down(wire.rst_stream(sid, wire.CANCEL))
    (cut,) = _of(rig, "message")
    assert (cut.size, cut.decode_error) == (0, f"{ev.MESSAGE_CUT} (inside its 5-byte length prefix)")
    assert _kinds(rig)[-3:] == ["message", "cancel", "call_end"]


def _response_cut(end: str, options: RelayOptions | None = None) -> tuple[CoreRig, bytes]:
    """A stream call whose first response arrived whole and whose second is 100 bytes in when ``end`` comes: the
    upstream resets the stream, the upstream connection is lost, or the client cancels."""
    rig = CoreRig({"options": options or RelayOptions()})
    sid = _stream_call(rig, "a", "b")
    second = stream_response("b", True, b"x" * 2000)
    rig.up(wire.frame(wire.DATA, 0, sid, stream_response("a", True) + second[:100]))
    if end == "upstream reset":
        rig.up(wire.rst_stream(sid, wire.INTERNAL_ERROR))
    elif end == "upstream lost":
        rig.lose("upstream", ConnectionResetError())
    else:
        rig.client.reset_stream(sid, wire.CANCEL)
        rig.pump()
    return rig, second


@pytest.mark.parametrize(("end", "kinds", "cause"), [
    ("upstream reset", ["message", "call_end"], "error"),
    ("upstream lost", ["message", "cancel", "call_end"], "upstream_disconnect"),
    ("client cancel", ["message", "cancel", "call_end"], "client_cancel"),
])  # fmt: skip
def test_a_response_the_calls_end_cut_is_recorded_as_far_as_it_came(end: str, kinds: list[str], cause: str) -> None:
    """The call ends while a response is arriving: the bytes that came of it are one `s2c` record (never labelled:
    no client had it whole), before the records that end the call, and counted by call_end. Before, nothing."""
    rig, second = _response_cut(end)
    first, cut = _of(rig, "message")[-2:]
    assert (first.dir, first.request_id, first.decode_error) == ("s2c", "a", None)
    assert (cut.dir, cut.index, cut.size, cut.request_id, cut.final) == ("s2c", 1, 95, None, None)
    assert cut.decode_error == f"{ev.MESSAGE_CUT} (after 95 of its {len(second) - 5} bytes)"
    assert _kinds(rig)[-len(kinds) :] == kinds
    (call_end,) = _of(rig, "call_end")
    assert (call_end.cause, call_end.messages_s2c) == (cause, 2)


def test_the_rest_of_a_response_a_cancel_cut_is_late_and_whole() -> None:
    """After the client's cancel, the upstream still sends the rest of the response it had begun: the late watch
    reads it from where the cut record left off (one late message, the whole response, its labels read)."""
    rig, second = _response_cut("client cancel")
    sid = int(_of(rig, "call_end")[0].call.rsplit(".", 1)[1])
    rig.up(wire.frame(wire.DATA, 0, sid, second[100:]))
    (late,) = _of(rig, "late")
    assert (late.frame, late.size, late.request_id, late.final) == ("message", len(second) - 5, "b", True)
    assert _kinds(rig)[-4:] == ["message", "cancel", "call_end", "late"]


def test_a_cut_response_keeps_its_bytes_with_payload_full() -> None:
    rig, second = _response_cut("upstream reset", RelayOptions(payload="full", payload_store="inline"))
    cut = _of(rig, "message")[-1]
    arrived = second[5:100]
    assert base64.b64decode(cut.payload) == arrived and cut.payload_truncated
    assert cut.payload_sha256 == hashlib.sha256(arrived).hexdigest()


def test_what_a_client_sends_while_the_upstream_is_ending_is_no_message_relayed() -> None:
    """Nothing goes to an upstream that sent an error GOAWAY: the client's bytes after it are no message Triton
    got, and the request Triton had part of is recorded as far as it got when the call ends."""
    rig = CoreRig()
    rig.pump()
    sid = rig.open_call(request_headers(STREAM))
    rig.pump()
    first = infer_request("a", 1000)
    rig.down(wire.frame(wire.DATA, 0, sid, first[:100]))
    rig.take("upstream")
    rig.up(wire.goaway(sid, ENHANCE_YOUR_CALM, b"too_many_pings"))
    rig.down(wire.frame(wire.DATA, 0, sid, first[100:]) + wire.frame(wire.DATA, wire.END_STREAM, sid, infer_request("b")))
    assert rig.take("upstream") == b""
    assert not _of(rig, "message") and not _of(rig, "half_close")
    assert rig.server is not None
    rig.server.send_headers(sid, [*RESPONSE_HEADERS, (b"grpc-status", b"14"), (b"grpc-message", b"Too many pings")],
                            end_stream=True)  # fmt: skip
    rig.pump(client_reads=False)
    (cut,) = _of(rig, "message")
    assert cut.size == 95 and cut.decode_error == f"{ev.MESSAGE_CUT} (after 95 of its {len(first) - 5} bytes)"
    (end,) = _of(rig, "call_end")
    assert (end.messages_c2s, end.details) == (1, "Too many pings")


def test_a_long_cut_request_goes_to_the_side_file_in_its_pieces() -> None:
    """A cut request of 1 MiB or more with ``--payload full`` (side file, no cap) is handed to the writer as the
    pieces it came in, as a whole one is: never joined on the event loop."""
    rig = CoreRig({"options": RelayOptions(payload="full")})
    rig.pump()
    sid = rig.open_call()
    rig.pump()
    message = infer_request("big", 3 * LABEL_KEEP)
    sent = 5 + LABEL_KEEP + 10
    rig.down(b"".join(wire.frame(wire.DATA, 0, sid, message[i : min(i + 16384, sent)]) for i in range(0, sent, 16384)))
    rig.down(wire.rst_stream(sid, wire.CANCEL))
    (cut,) = _of(rig, "message")
    assert cut.size == LABEL_KEEP + 10 and cut.payload is None and cut.payload_truncated
    pieces = cut.payload_at
    assert isinstance(pieces, list) and len(pieces) > 1 and b"".join(pieces) == message[5:sent]
    assert cut.payload_sha256 == hashlib.sha256(message[5:sent]).hexdigest()


def test_a_call_opened_while_the_upstream_is_ending_is_refused_for_its_client_to_retry() -> None:
    """Below the error GOAWAY's last stream id a client may still open calls; none reaches an upstream that is
    ending the connection: REFUSED_STREAM (gRPC retries such a call on a new connection), ``refused``."""
    rig, _, _ = _error_goaway(last=2**31 - 1)
    rig.take("client")
    rig.take("upstream")
    five = rig.open_call()
    rig.pump(client_reads=False)
    assert rig.take("upstream") == b""
    sent = rig.take("client")
    assert [(sid, p) for t, _, sid, p in _frames(sent) if t == wire.RST_STREAM] == [(five, b"\0\0\0\x07")]
    (end,) = _of(rig, "call_end")
    assert (end.call, end.refused, end.status, end.cause) == (f"c1.{five}", True, "UNAVAILABLE", "upstream_disconnect")
    assert "GOAWAY with an error" in end.details


def test_the_refusals_words_are_the_proxys_own() -> None:
    """What send and diff tell a refusal by in captures from before ``refused``: each begins as every status of
    the proxy's own does."""
    from proxy.relay.contract import OWN_ANSWER

    for words in (ev.REFUSED_AT_SHUTDOWN, ev.REFUSED_ABOVE_UPSTREAM_GOAWAY, ev.REFUSED_UPSTREAM_ENDING):
        assert words.startswith(OWN_ANSWER)
