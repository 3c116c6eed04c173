"""The pure side of `replay send`: captured calls -> scripts, what cannot be sent, selection, schedule."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from proxy.resend.plan import (
    CUT,
    CUT_SHORT,
    CUT_SHORT_CHUNKED,
    HTTP_10,
    NO_BYTES,
    REDACTED_INPUT,
    SHM_CALL,
    SHM_INFER,
    CallScript,
    Message,
    parse_headers,
    parse_only,
    prepare,
    remodel,
    scripts,
    selected,
)
from proxy.resend.schedule import MAX, Lag, parse_speed, plan_starts, span_ns
from replay.capture import events as ev
from replay.capture.methods import INFER, STREAM_INFER
from replay.capture.reader import read_capture
from replay.errors import UserError
from tests.support.paths import DATA

T0 = 1_780_000_000_000_000_000
MS = 1_000_000


def _request(model: str = "tokens", rid: str = "r") -> bytes:
    return bytes(pb.ModelInferRequest(model_name=model, id=rid).SerializeToString())


def _records(*msgs: ev.MessageSeen, metadata: list[list[str]] | None = None, end: str = "ok",
             rst_code: int = 8) -> list[tuple[int, ev.Record]]:  # fmt: skip
    recs: list[ev.Record] = [
        ev.CaptureStarted(t_ns=T0, proxy_version="0", listen="l", upstream="u", options={"payload": "full"}),
        ev.CallStarted(t_ns=T0 + MS, call="c1.1", conn="c1", method=STREAM_INFER, peer="p",
                       metadata=metadata or [[":method", "POST"], [":path", STREAM_INFER]], timeout_ms=None),
        *msgs,
        ev.HalfClosed(t_ns=T0 + 9 * MS, call="c1.1"),
    ]  # fmt: skip
    if end != "ok":
        recs.append(ev.CallCancelled(t_ns=T0 + 11 * MS, call="c1.1", cause=end, in_flight=[], responded=[],  # type: ignore[arg-type]
                                     rst_code=rst_code, elapsed_ms=10.0, forwarded_upstream=True))  # fmt: skip
    recs.append(ev.CallEnded(t_ns=T0 + 12 * MS, call="c1.1", status="OK", details=None, cause=end,  # type: ignore[arg-type]
                             trailers=None, initial_metadata=None, duration_ms=11.0, messages_c2s=1, messages_s2c=0))  # fmt: skip
    return list(enumerate(recs))


def _msg(body: bytes | None = None, **kw: object) -> ev.MessageSeen:
    body = _request() if body is None else body
    fields: dict[str, object] = {"payload": base64.b64encode(body).decode(), "payload_truncated": False, "model": "tokens"}
    fields.update(kw)
    return ev.MessageSeen(t_ns=T0 + 3 * MS, call="c1.1", dir="c2s", index=0, size=len(body), compressed=False,
                          **fields)  # type: ignore[arg-type]  # fmt: skip


def test_a_captured_stream_cancel_becomes_a_script() -> None:
    """Messages with their offsets and exact bytes, the half-close, and the cancel after 4 responses."""
    (call,) = scripts(read_capture(DATA / "stream_cancel.jsonl"))
    assert (call.id, call.conn, call.method) == ("c1.1", "c1", STREAM_INFER)
    assert [pb.ModelInferRequest.FromString(m.body).id for m in call.messages] == ["done", "a", "b"]
    assert call.messages == sorted(call.messages, key=lambda m: m.at_ns)
    assert call.ending is not None and (call.ending.cause, call.ending.responses) == ("client_cancel", 4)
    assert call.ending.at_ns > call.messages[-1].at_ns
    assert call.recorded_cause == "client_cancel" and call.unsendable is None


@pytest.mark.parametrize("code", [8, 11])
def test_a_client_cancel_keeps_the_code_of_its_reset(code: int) -> None:
    """A client that refused a response over its receive limit reset with ENHANCE_YOUR_CALM (11): the
    script keeps the cancel record's code through the call_end after it, so send resets with it too."""
    (call,) = scripts(_records(_msg(), end="client_cancel", rst_code=code))
    assert call.ending is not None and (call.ending.cause, call.ending.rst_code) == ("client_cancel", code)


def test_a_response_the_calls_end_cut_is_not_counted_among_those_before_the_cancel() -> None:
    """send compares how many responses came before the client's cancel: what arrived of one the cancel cut is
    none (no client had it)."""
    cut = ev.MessageSeen(t_ns=T0 + 10 * MS, call="c1.1", dir="s2c", index=0, size=95, compressed=False,
                         decode_error=f"{ev.MESSAGE_CUT} (after 95 of its 2071 bytes)")  # fmt: skip
    whole = dataclasses.replace(cut, index=0, size=2071, decode_error=None, request_id="r", final=False)
    (call,) = scripts(_records(_msg(), whole, dataclasses.replace(cut, index=1), end="client_cancel"))
    assert call.ending is not None and call.ending.responses == 1


def test_hop_by_hop_headers_are_dropped_and_redacted_values_left_out_unless_given() -> None:
    meta = [[":method", "POST"], [":path", STREAM_INFER], ["connection", "x"], ["te", "trailers"],
            ["authorization", "<redacted>"], ["x-trace", "1"]]  # fmt: skip
    (call,) = scripts(_records(_msg(), metadata=meta))
    assert call.headers == [(":method", "POST"), (":path", STREAM_INFER), ("te", "trailers"), ("x-trace", "1")]
    assert call.redacted == ["authorization"]
    (sent,), _ = prepare([call], filters=[], model_map={}, headers=parse_headers(["Authorization=Bearer t"]),
                         skip_unsendable=False)  # fmt: skip
    assert sent.headers[-1] == ("authorization", "Bearer t") and sent.redacted == []


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (_msg(payload=None, payload_truncated=None), NO_BYTES),
        (_msg(payload_truncated=True), CUT),
        (_msg(body=_request()[:20], payload_truncated=True, model=None, decode_error=f"{ev.MESSAGE_CUT} (after 20 of its 90 bytes)"),
         CUT_SHORT),
        (_msg(inputs=[ev.TensorSpec(name="PROMPT", datatype="BYTES", shape=[1], size=9, hmac_sha256="ab")]), REDACTED_INPUT),
    ],
)
def test_unsendable_calls_fail_in_one_line_or_are_skipped(message: ev.MessageSeen, why: str) -> None:
    calls = scripts(_records(message))
    assert calls[0].unsendable == why
    with pytest.raises(UserError, match=r"^1 of 1 call\(s\) cannot be sent: 1 with .*--skip-unsendable"):
        prepare(calls, filters=[], model_map={}, headers={}, skip_unsendable=False)
    assert prepare(calls, filters=[], model_map={}, headers={}, skip_unsendable=True) == ([], {why: 1})


def test_a_meta_capture_cannot_be_sent() -> None:
    calls = scripts(read_capture(DATA / "deadline.jsonl"))
    with pytest.raises(UserError, match="no request bytes"):
        prepare(calls, filters=[], model_map={}, headers={}, skip_unsendable=False)
    assert calls[0].ending is not None and calls[0].ending.cause == "deadline" and calls[0].timeout_ms == 500


def test_model_map_rewrites_model_name_only() -> None:
    body = _request("tokens", "x")
    out = pb.ModelInferRequest.FromString(remodel(body, INFER, {"tokens": "tokens_v2"}))
    assert (out.model_name, out.id) == ("tokens_v2", "x")
    assert remodel(body, INFER, {"other": "y"}) == body
    assert remodel(body, "/inference.GRPCInferenceService/ServerLive", {"tokens": "y"}) == body


def test_only_selects_by_model_method_call_and_conn() -> None:
    c = CallScript(id="c1.1", conn="c1", method=INFER, t_start=0, headers=[], timeout_ms=None,
                   messages=[Message(at_ns=0, body=b"", compressed=False, model="echo")])  # fmt: skip
    assert selected(c, parse_only(["model=echo"])) and selected(c, parse_only(["method=ModelInfer,model=a|echo"]))
    assert not selected(c, parse_only(["model=echo,method=ModelStreamInfer"]))
    assert selected(c, parse_only(["model=x", "conn=c1"]))  # repeated: any of them
    assert selected(c, [])
    for bad in ("model", "colour=red", ""):
        with pytest.raises(UserError):
            parse_only([bad])


def _call(cid: str, start_ms: int, last_ms: int = 0) -> CallScript:
    return CallScript(id=cid, conn=cid.split(".")[0], method=INFER, t_start=T0 + start_ms * MS, headers=[],
                      timeout_ms=None, messages=[Message(at_ns=last_ms * MS, body=b"", compressed=False, model=None)])  # fmt: skip


def test_schedule_keeps_offsets_scaled_by_speed_and_loops_after_the_span() -> None:
    calls = [_call("c2.1", 100, last_ms=50), _call("c1.1", 0)]
    assert span_ns(calls) == 150 * MS
    starts = plan_starts(calls, 2.0, 2)
    got = [(s.call.id, s.loop, round(s.at_s, 6), s.conn) for s in starts]
    assert got == [("c1.1", 0, 0.0, "0/c1"), ("c2.1", 0, 0.05, "0/c2"), ("c1.1", 1, 0.075, "1/c1"), ("c2.1", 1, 0.125, "1/c2")]
    assert [s.at_s for s in plan_starts(calls, MAX, 1)] == [0.0, 0.0]
    assert [s.call.id for s in plan_starts(calls, MAX, 1)] == ["c1.1", "c2.1"]


def _timed(cid: str, conn: str, start_ms: int, end_ms: int | None) -> CallScript:
    c = _call(cid, start_ms)
    c.conn = conn
    c.t_end = None if end_ms is None else T0 + end_ms * MS
    return c


def test_a_call_started_after_others_ended_waits_for_them_on_any_connection() -> None:
    """Connection c1: a (0-10 ms), b (5-40 ms, overlapping a), c (50-60 ms), d (55 ms, its end not recorded);
    c2: e (45-46 ms, after a and b ended: a second client going on where the first stopped); c3: f (3-70 ms,
    overlapping all). By captured end: a, b, e, c, f. e waits for a's and b's ends (another connection's: it
    waited for nothing, and went out among c1's calls once those had drifted later), plus the captured 5 ms
    pause after b's; c waits for a, b and e, then 4 ms; d for the same 3 (c was still open); f for nothing."""
    calls = [_timed("a", "c1", 0, 10), _timed("b", "c1", 5, 40), _timed("c", "c1", 50, 60), _timed("d", "c1", 55, None),
             _timed("e", "c2", 45, 46), _timed("f", "c3", 3, 70)]  # fmt: skip
    want = {"a": (0, 0, 0.0), "b": (1, 0, 0.0), "e": (2, 2, 0.0025), "c": (3, 3, 0.002), "d": (None, 3, 0.0045),
            "f": (4, 0, 0.0)}  # fmt: skip
    starts = plan_starts(calls, 2.0, 2)
    for loop in (0, 1):  # each pass alike, ranks within the pass
        got = {s.call.id: (s.rank, s.after, round(s.pause_s, 6)) for s in starts if s.loop == loop}
        assert got == want, loop
    # An end stamped at its own start (the wall clock stepped back): it never waits for itself, and a call of
    # another connection after it waits for it.
    clock = [_timed("g", "c4", 0, 0), _timed("h", "c5", 10, 20)]
    assert [(s.rank, s.after) for s in plan_starts(clock, 1.0, 1)] == [(0, 0), (1, 1)]
    # --speed max: no waiting at all.
    assert {s.call.id: s.after for s in plan_starts(calls, MAX, 1)} == dict.fromkeys("abcdef", 0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 60), st.one_of(st.none(), st.integers(-5, 60))),
                min_size=1, max_size=12))  # fmt: skip
def test_each_call_waits_for_exactly_the_calls_that_ended_before_it_began(spans: list[tuple[int, int, int | None]]) -> None:
    """Against the rule written out call by call: a call waits for every call of its pass, on any connection, whose
    end was recorded at or before its start, and for no other; those are the first ones by captured end; the
    pause runs from the last of them. Except that a call never waits for itself or for a call that ended after it
    (an end stamped before its start), so no two calls wait for each other and every wait ends."""
    calls = [_timed(f"c{conn}.{i}", f"c{conn}", start, None if d is None else start + d)
             for i, (conn, start, d) in enumerate(spans)]  # fmt: skip
    starts = plan_starts(calls, 1.0, 1)
    by_rank = {s.rank: s.call for s in starts if s.rank is not None}
    for s in starts:
        c = s.call
        want = {d.id for d in calls if d.t_end is not None and d.t_end <= c.t_start and d is not c
                and (s.rank is None or next(x.rank for x in starts if x.call is d) < s.rank)}  # type: ignore[operator]
        assert {by_rank[r].id for r in range(s.after)} == want, c.id
        if s.after:
            assert s.pause_s == pytest.approx((c.t_start - by_rank[s.after - 1].t_end) / 1e9)  # type: ignore[operator]
        if s.rank is not None:
            assert s.after <= s.rank


def test_speed_parsing_and_lag() -> None:
    assert parse_speed("2") == 2.0 and parse_speed("MAX") == math.inf
    for bad in ("0", "-1", "nan", "inf", "fast"):
        with pytest.raises(UserError):
            parse_speed(bad)
    lag = Lag()
    for late in (0.01, -0.5, 0.03):
        lag.add(late)
    assert (lag.count, lag.worst, round(lag.mean, 6)) == (3, 0.03, round(0.04 / 3, 6))


# -- HTTP request bodies the client never finished --------------------------------------------------------

_BODY = b'{"id":"r","inputs":[{"name":"I","datatype":"INT32","shape":[3],"data":[1,2,3]}]}'
_INFER = b"POST /v2/models/m/infer HTTP/1.1\r\nhost: x\r\n"
_REPLY = b'{"id":"r","model_name":"m","model_version":"1","outputs":[]}'


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def _by_length(body: bytes, length: int | None = None) -> bytes:
    return _INFER + b"content-length: %d\r\n\r\n" % (len(body) if length is None else length) + body


def _answer() -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(_REPLY) + _REPLY


def _recorded(*reads: tuple[str, bytes | None]) -> list[CallScript]:
    """What the recorder's own HTTP/1.1 core writes for these reads (client and Triton sides), as scripts."""
    from proxy.relay.options import RelayOptions
    from tests.proxy.relay.http1_wire import drive

    run = drive(list(reads), options=RelayOptions(payload="full"))
    return scripts(list(enumerate(run.records())))


@pytest.mark.parametrize(
    ("sent", "why"),
    [
        (_INFER + b"transfer-encoding: chunked\r\n\r\n" + _chunk(_BODY[:40]), CUT_SHORT),  # the recorder's mark
        (_by_length(_BODY)[:-40], CUT_SHORT),
        (_by_length(_BODY)[: -len(_BODY)], CUT_SHORT),  # the head alone: no body byte arrived
    ],
    ids=["chunked", "content-length", "head-only"],
)
def test_a_request_body_its_client_never_finished_is_unsendable(sent: bytes, why: str) -> None:
    """The client left mid-body: sending the body whole (h11 adds the chunked terminator) would give Triton
    a request nobody sent, and a Content-Length body short of its length cannot be framed at all."""
    (call,) = _recorded(("c2s", sent), ("c2s", None))
    assert call.unsendable == why
    with pytest.raises(UserError, match=r"1 of 1 call\(s\) cannot be sent: 1 with a .*request body its client"):
        prepare([call], filters=[], model_map={}, headers={}, skip_unsendable=False)


def test_the_other_calls_of_the_connection_are_sent() -> None:
    """A keep-alive connection: one request answered, then one cut short (the client left mid-body)."""
    answered, cut = _recorded(("c2s", _by_length(_BODY)), ("s2c", _answer()), ("c2s", _by_length(_BODY)[:-40]),
                              ("c2s", None))  # fmt: skip
    assert (answered.unsendable, cut.unsendable) == (None, CUT_SHORT)
    out, skipped = prepare([answered, cut], filters=[], model_map={}, headers={}, skip_unsendable=True)
    assert [c.id for c in out] == [answered.id] and skipped == {CUT_SHORT: 1}
    assert b"".join(m.body for m in out[0].messages) == _BODY


def test_a_whole_body_whose_client_left_before_the_reply_is_sent() -> None:
    """Content-Length reached: the body was whole, whatever the client did after (it gave up waiting)."""
    (call,) = _recorded(("c2s", _by_length(_BODY)), ("c2s", None))
    assert call.ending is not None and call.ending.cause == "client_disconnect"
    assert call.unsendable is None and b"".join(m.body for m in call.messages) == _BODY


def test_the_recorders_cut_short_mark_is_enough() -> None:
    """A chunked body the upstream's end cut (no client ending to go by): the recorder's mark says it."""
    meta = [["host", "x"], ["transfer-encoding", "chunked"]]
    msg = ev.MessageSeen(t_ns=T0 + MS, call="c1.1", dir="c2s", index=0, size=40, model="m",
                         payload=base64.b64encode(_BODY[:40]).decode(), payload_truncated=False,
                         decode_error=ev.BODY_CUT)  # fmt: skip
    start = ev.CallStarted(t_ns=T0, call="c1.1", conn="c1", method="POST /v2/models/m/infer", peer="127.0.0.1:5",
                           metadata=meta, timeout_ms=None)  # fmt: skip
    end = ev.CallEnded(t_ns=T0 + 2 * MS, call="c1.1", status="UNAVAILABLE", details=None, cause="upstream_disconnect",
                       trailers=None, initial_metadata=None, duration_ms=2.0, messages_c2s=1, messages_s2c=0)  # fmt: skip
    recs: list[ev.Record] = [start, msg, end]
    (call,) = scripts(list(enumerate(recs)))
    assert call.unsendable == CUT_SHORT
    (whole,) = scripts(list(enumerate([recs[0], dataclasses.replace(msg, decode_error=None), recs[2]])))
    assert whole.unsendable is None


def test_a_chunked_body_without_the_mark_whose_client_left_before_any_reply_is_unsendable() -> None:
    """A capture from before the recorder marked cut bodies: a chunked body cannot be measured against a
    length, so a client that left before any reply may have left it unfinished: refused, and said so."""
    meta = [["host", "x"], ["transfer-encoding", "chunked"]]
    start = ev.CallStarted(t_ns=T0, call="c1.1", conn="c1", method="POST /v2/models/m/infer", peer="127.0.0.1:5",
                           metadata=meta, timeout_ms=None)  # fmt: skip
    msg = ev.MessageSeen(t_ns=T0 + MS, call="c1.1", dir="c2s", index=0, size=40, model="m",
                         payload=base64.b64encode(_BODY[:40]).decode(), payload_truncated=False)  # fmt: skip
    cancel = ev.CallCancelled(t_ns=T0 + 2 * MS, call="c1.1", cause="client_disconnect", in_flight=["r"],
                              responded=[], rst_code=None, elapsed_ms=2.0, forwarded_upstream=True)  # fmt: skip
    end = ev.CallEnded(t_ns=T0 + 2 * MS, call="c1.1", status="CANCELLED", details=None, cause="client_disconnect",
                       trailers=None, initial_metadata=None, duration_ms=2.0, messages_c2s=1, messages_s2c=0)  # fmt: skip
    (call,) = scripts(list(enumerate([start, msg, cancel, end])))
    assert call.unsendable == CUT_SHORT_CHUNKED


@pytest.mark.parametrize(("version", "why"), [("1.0", HTTP_10), ("1.1", None), (None, None)])
def test_an_http_10_request_is_unsendable_not_sent_as_11(version: str | None, why: str | None) -> None:
    """h11's client writes HTTP/1.1 whatever was recorded: a 1.0 request sent so is not the recorded one (and
    without a Host header, which 1.0 may omit, not sendable at all), so it is refused, and says why."""
    start = ev.CallStarted(t_ns=T0, call="c1.1", conn="c1", method="POST /v2/models/m/infer", peer="127.0.0.1:5",
                           metadata=[["content-length", "40"]], timeout_ms=None, http_version=version)  # fmt: skip
    msg = ev.MessageSeen(t_ns=T0 + MS, call="c1.1", dir="c2s", index=0, size=40, model="m",
                         payload=base64.b64encode(_BODY[:40]).decode(), payload_truncated=False)  # fmt: skip
    (call,) = scripts(list(enumerate([start, msg])))
    assert call.unsendable == why


# -- shared memory -------------------------------------------------------------------------------


def _shm_request(*, inputs: str | None = "in0", outputs: str | None = "out0", data: bytes = b"") -> bytes:
    """A ModelInferRequest as tritonclient writes it with ``set_shared_memory`` on its input and/or output."""
    r = pb.ModelInferRequest(model_name="echo", id="s")
    t = r.inputs.add(name="INPUT", datatype="UINT8", shape=[16])
    if inputs is not None:
        t.parameters["shared_memory_region"].string_param = inputs
        t.parameters["shared_memory_byte_size"].int64_param = 16
    else:
        r.raw_input_contents.append(data or bytes(16))
    o = r.outputs.add(name="OUTPUT")
    if outputs is not None:
        o.parameters["shared_memory_region"].string_param = outputs
        o.parameters["shared_memory_byte_size"].int64_param = 16
        o.parameters["shared_memory_offset"].int64_param = 0
    return bytes(r.SerializeToString())


def _one_call(method: str, *bodies: bytes | None, compressed: bool = False) -> CallScript:
    """One captured call of ``method`` with these request messages (None: not captured, a meta capture)."""
    start = ev.CallStarted(t_ns=T0, call="c1.1", conn="c1", method=method, peer="127.0.0.1:5",
                           metadata=[[":method", "POST"]], timeout_ms=None)  # fmt: skip
    msgs = [ev.MessageSeen(t_ns=T0 + (i + 1) * MS, call="c1.1", dir="c2s", index=i, size=len(b or b"xx"),
                           compressed=compressed, model="echo", request_id="s",
                           payload=base64.b64encode(b).decode() if b is not None else None,
                           payload_truncated=False if b is not None else None)
            for i, b in enumerate(bodies)]  # fmt: skip
    end = ev.CallEnded(t_ns=T0 + 9 * MS, call="c1.1", status="OK", details=None, cause="ok", trailers=None,
                       initial_metadata=None, duration_ms=9.0, messages_c2s=len(msgs), messages_s2c=0)  # fmt: skip
    (call,) = scripts(list(enumerate([start, *msgs, end])))
    return call


@pytest.mark.parametrize(
    ("method", "bodies"),
    [
        (INFER, [_shm_request()]),
        (INFER, [_shm_request(inputs=None)]),  # the output alone: Triton would write into the target's region
        (INFER, [_shm_request(outputs=None)]),
        (STREAM_INFER, [_request(), _shm_request(), _request()]),  # one request of the stream is enough
        ("POST /v2/models/echo/infer", [b'{"id":"s","inputs":[{"name":"INPUT","shape":[16],"datatype":"UINT8",'
                                        b'"parameters":{"shared_memory_region":"in_http","shared_memory_byte_size":16}}]}']),
        ("POST /v2/models/echo/versions/1/infer", [b'{"inputs":[],"outputs":[{"name":"OUTPUT","parameters":'
                                                   b'{"binary_data":false,"shared_memory_region":"o"}}]}']),
    ],
    ids=["grpc-both", "grpc-output", "grpc-input", "stream", "http-input", "http-output"],
)  # fmt: skip
def test_an_inference_request_naming_a_shared_memory_region_is_unsendable(method: str, bodies: list[bytes]) -> None:
    """Its tensor data was in the recording client's memory, not in the capture: sent, Triton would read the
    target host's region of that name and write the outputs into it (another process's memory)."""
    call = _one_call(method, *bodies)
    assert call.unsendable == SHM_INFER
    with pytest.raises(UserError, match=r"^1 of 1 call\(s\) cannot be sent: 1 with an inference request whose tensors "
                                        r"are in shared memory .*--skip-unsendable"):  # fmt: skip
        prepare([call], filters=[], model_map={}, headers={}, skip_unsendable=False)
    assert prepare([call], filters=[], model_map={}, headers={}, skip_unsendable=True) == ([], {SHM_INFER: 1})


def test_a_compressed_request_is_read_for_shared_memory_too() -> None:
    assert _one_call(INFER, gzip.compress(_shm_request()), compressed=True).unsendable == SHM_INFER
    assert _one_call(INFER, gzip.compress(_request()), compressed=True).unsendable is None


def test_tensor_data_that_spells_the_parameter_is_not_shared_memory() -> None:
    """The bytes ``shared_memory_region`` inside an input's data are data: the request's fields say what it names."""
    call = _one_call(INFER, _shm_request(inputs=None, outputs=None, data=b"shared_memory_region"))
    assert call.unsendable is None
    http = _one_call("POST /v2/models/echo/infer", b'{"inputs":[{"name":"T","shape":[1],"datatype":"BYTES",'
                                                   b'"data":["shared_memory_region"]}]}')  # fmt: skip
    assert http.unsendable is None


@pytest.mark.parametrize(
    "method",
    [*(f"/inference.GRPCInferenceService/{k}SharedMemory{a}" for k in ("System", "Cuda") for a in ("Register", "Unregister", "Status")),
     "POST /v2/systemsharedmemory/region/out_http/register", "POST /v2/systemsharedmemory/unregister",
     "POST /v2/systemsharedmemory/region/x/unregister", "GET /v2/systemsharedmemory/status",
     "GET /v2/systemsharedmemory/region/x/status", "POST /v2/cudasharedmemory/region/c/register",
     "GET /v2/cudasharedmemory/status"],
)  # fmt: skip
@pytest.mark.parametrize("captured", [True, False], ids=["full", "meta"])
def test_shared_memory_register_unregister_and_status_calls_are_unsendable(method: str, captured: bool) -> None:
    """A registration names the recording host's shared-memory key: sent again, it maps whatever the target's
    host holds under that key. Said so even where the bytes are not captured (the method tells)."""
    call = _one_call(method, b'{"key":"/k","offset":0,"byte_size":16}' if captured else None)
    assert call.unsendable == SHM_CALL
    with pytest.raises(UserError, match=r"1 with a shared-memory register, unregister or status call"):
        prepare([call], filters=[], model_map={}, headers={}, skip_unsendable=False)


def test_the_calls_beside_shared_memory_ones_are_sent_with_skip_unsendable() -> None:
    calls = [_one_call("/inference.GRPCInferenceService/SystemSharedMemoryRegister", b"\n\x01x"),
             _one_call(INFER, _shm_request()), _one_call(INFER, _request(model="echo")),
             _one_call("GET /v2/models/echo/ready", b"")]  # fmt: skip
    out, skipped = prepare(calls, filters=[], model_map={}, headers={}, skip_unsendable=True)
    assert [c.method for c in out] == [INFER, "GET /v2/models/echo/ready"]
    assert skipped == {SHM_CALL: 1, SHM_INFER: 1}


@pytest.mark.parametrize(
    ("details", "refused"),
    [(ev.REFUSED_ABOVE_UPSTREAM_GOAWAY, True), (ev.REFUSED_AT_SHUTDOWN, True), ("triton-tap: upstream connection lost", False)],
)
def test_a_refusal_by_a_proxy_from_before_the_refused_field_is_told_by_its_words(details: str, refused: bool) -> None:
    """Captures from before ``call_end.refused`` recorded a refused call as the upstream's ``error`` with the
    proxy's own words: send leaves it out all the same (its client may have sent it again)."""
    recs = [r for _, r in _records(_msg()) if not isinstance(r, ev.CallEnded | ev.CallCancelled)]
    recs.append(ev.CallEnded(t_ns=T0 + 12 * MS, call="c1.1", status="UNAVAILABLE", details=details, cause="error",
                             trailers=None, initial_metadata=None, duration_ms=11.0, messages_c2s=1, messages_s2c=0,
                             upstream_rst_code=7))  # fmt: skip
    (call,) = scripts(list(enumerate(recs)))
    assert call.refused is refused
