"""HTTP labels against what the real Triton 2.51 HTTP port sent (tests/proxy/triton/data/http), and the SSE splitter."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.triton import http_labels as hl
from proxy.triton.http_labels import event_final, event_labels, reply_labels, request_labels
from proxy.triton.sse import SseEvent, SseSplitter
from replay.capture import events as ev
from replay.capture import schema
from tests.proxy.triton.http_wire import Exchange, exchanges


def _message(labels: dict[str, Any], direction: ev.Direction = "s2c") -> ev.MessageSeen:
    """The record the HTTP core writes with these labels, through the encoder and decoder and back."""
    rec = ev.MessageSeen(t_ns=1, call="c1.1", dir=direction, index=0, size=1, **labels)
    assert schema.decode(orjson_line(rec))[1] == rec
    return rec


def orjson_line(rec: ev.MessageSeen) -> Any:
    import orjson

    return orjson.loads(schema.encode(rec, 3))


def _req(x: Exchange) -> dict[str, Any]:
    out = request_labels(x.method, x.headers, x.body)
    _message(out, "c2s")
    return out


def _rep(x: Exchange) -> dict[str, Any]:
    assert x.status is not None
    out = reply_labels(x.method, x.status, x.reply_headers, x.reply)
    _message(out)
    return out


def _events(x: Exchange) -> tuple[list[SseEvent], SseSplitter]:
    assert hl.is_event_stream(x.reply_headers)
    split = SseSplitter()
    got = [e for piece in x.pieces for e in split.feed(piece)]
    return got, split


def _stream(x: Exchange) -> list[dict[str, Any]]:
    """Each event's labels with its final, as the HTTP core records them."""
    got, _ = _events(x)
    out = []
    for i, e in enumerate(got):
        labels = event_labels(x.method, e) | {"final": event_final(x.method, e, last=i == len(got) - 1, clean_end=x.clean_end)}
        _message(labels)
        out.append(labels)
    return out


def test_unary_json_infer_request_and_reply() -> None:
    """tritonclient.http, JSON tensors: model from the path, the JSON id, inputs; the reply's echoed id and outputs."""
    x = exchanges("01_unary_infer_tritonclient")[0]
    assert _req(x) == {
        "model": "echo", "model_version": "", "request_id": "req-binary-False",
        "inputs": [ev.TensorSpec(name="INPUT", datatype="UINT8", shape=[5])],
    }  # fmt: skip
    assert _rep(x) == {
        "model": "echo", "model_version": "1", "request_id": "req-binary-False", "error": None,
        "outputs": ["OUTPUT"], "output_tensors": [ev.TensorSpec(name="OUTPUT", datatype="UINT8", shape=[5])],
    }  # fmt: skip


def test_binary_infer_reads_only_the_json_part() -> None:
    """Binary data: the JSON part is Inference-Header-Content-Length bytes; the tensor bytes after it are never
    parsed (the whole body is not JSON at all), whatever they hold."""
    x = exchanges("01_unary_infer_tritonclient")[1]
    assert x.body.endswith(b"\x00\x01\x02\x03\x04")
    req = _req(x)
    assert (req["request_id"], req["inputs"]) == (
        "req-binary-True",
        [ev.TensorSpec(name="INPUT", datatype="UINT8", shape=[5])],
    )
    assert request_labels(x.method, x.headers, x.body[:-5] + b'{"id"') == req  # other tensor bytes: same labels
    rep = _rep(x)
    assert (rep["request_id"], rep["outputs"], rep["error"]) == ("req-binary-True", ["OUTPUT"], None)
    # Without the header the same body is not JSON: the header is what makes it readable.
    plain = [(k, v) for k, v in x.headers if k != b"inference-header-content-length"]
    assert "not JSON" in request_labels(x.method, plain, x.body)["decode_error"]


def test_binary_infer_cut_before_the_end_of_its_json_part() -> None:
    """A kept head shorter than the JSON part: unknown labels said so, nothing guessed."""
    x = exchanges("01_unary_infer_tritonclient")[1]
    out = request_labels(x.method, x.headers, x.body[:50], truncated=True)
    assert out["decode_error"] == "message larger than the label buffer: some fields are unknown"
    assert "inputs" not in out and out["model"] == "echo"
    cut = request_labels(x.method, x.headers, x.body[:50])
    assert cut["decode_error"].startswith("body shorter than Inference-Header-Content-Length")


def test_gzip_reply_of_tritonclient_aio_is_labelled_after_gunzip() -> None:
    """tritonclient.http.aio asks for gzip: Triton compresses the reply, and its header counts the uncompressed JSON."""
    for x in exchanges("01c_unary_infer_tritonclient_aio"):
        assert hl.header(x.reply_headers, "Content-Encoding") == "gzip"
        rep = _rep(x)
        assert hl.compressed(x.reply_headers) and rep["model"] == "echo" and rep["outputs"] == ["OUTPUT"]
        assert rep["request_id"].startswith("aio-") and "decode_error" not in rep


def test_compressed_request_bodies() -> None:
    """gzip and deflate request bodies are read; a body that is not what its Content-Encoding says, or br,
    gets a decode_error (Triton refused both)."""
    gz, deflate, accept, bad, br = exchanges("05b_compressed_request_bodies")
    assert (_req(gz)["request_id"], hl.compressed(gz.headers)) == ("gz-1", True)
    assert (_req(deflate)["request_id"], hl.compressed(deflate.headers)) == ("deflate-1", True)
    assert not hl.compressed(accept.headers) and _rep(accept)["request_id"] == "gz-accept"
    assert _req(bad)["decode_error"].startswith("gzip body does not decompress")
    assert _req(br)["decode_error"] == "Content-Encoding 'br': body not decoded"
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    rawdeflate = raw.compress(b'{"id":"raw"}') + raw.flush()
    assert request_labels(deflate.method, deflate.headers, rawdeflate)["request_id"] == "raw"


def test_decompression_is_capped() -> None:
    """A gzip bomb costs at most the label cap: beyond it, a decode_error and no labels."""
    bomb = gzip.compress(b'{"id":"' + b"x" * (hl.LABEL_CAP + 10) + b'"}')
    out = request_labels("POST /v2/models/echo/infer", [(b"content-encoding", b"gzip")], bomb)
    assert out["decode_error"] == "message larger than the label buffer: some fields are unknown"
    assert "request_id" not in out  # unread: unknown, not the "" of a body without one


def test_an_unreadable_request_body_has_no_request_id() -> None:
    """Its id is unknown: none, not the ``""`` of a body without an id (which Triton reads as no id)."""
    out = request_labels("POST /v2/models/m/infer", [], b'not json {"id":"x"}')
    assert out["decode_error"].startswith("body is not JSON") and "request_id" not in out
    assert "request_id" not in request_labels("POST /v2/models/m/infer", [], b"[1]")
    assert request_labels("POST /v2/models/m/infer", [], b"{}")["request_id"] == ""
    assert request_labels("POST /v2/models/m/infer", [], b"")["request_id"] == ""


def test_an_id_that_is_not_a_string_is_unknown_not_absent() -> None:
    """``{"id": 5}`` (Triton refuses it: "Unable to parse 'id'"): the wire had an id, just not a string, so
    the record's is null (unknown), never the ``""`` of a body without one; an id-less body's is ``""``."""
    for rid in (b"5", b"null", b'["a"]'):
        req = request_labels("POST /v2/models/echo/infer", [], b'{"id":' + rid + b',"inputs":[]}')
        assert "request_id" in req and req["request_id"] is None, rid
        rep = reply_labels("POST /v2/models/echo/infer", 200, [], b'{"id":' + rid + b',"model_name":"echo"}')
        assert rep["request_id"] is None, rid
        chunk = reply_labels("POST /v1/completions", 200, [], b'{"id":' + rid + b',"choices":[]}')
        assert chunk["request_id"] is None, rid
    assert request_labels("POST /v2/models/echo/infer", [], b'{"inputs":[]}')["request_id"] == ""
    assert reply_labels("POST /v2/models/echo/infer", 200, [], b'{"model_name":"echo"}')["request_id"] == ""
    assert reply_labels("POST /v1/completions", 200, [], b'{"choices":[]}')["request_id"] == ""


def test_refusals_carry_their_error() -> None:
    """Route-level errors are JSON sent as text/plain: labelled all the same; no id in them, so `""`."""
    got = [(_rep(x)["error"], _rep(x).get("request_id")) for x in exchanges("02_infer_refusals")]
    assert got == [
        ("HTTP end point doesn't support models with decoupled transaction policy", ""),
        ("Request for unknown model: 'nosuch' is not found", ""),
        ("[request id: r-400] expected number of inputs between 1 and 2 but got 0 inputs for model 'echo'. Got "
         "input(s) [], but missing required input(s) ['INPUT']. Please provide all required input(s).", ""),
        ("Request for unknown model: 'echo' version 7 is not found", ""),
        ("failed to parse the request JSON buffer: Invalid value. at 6", ""),
        ("Not Found", None),  # not an inference endpoint: no request
    ]  # fmt: skip
    ver = exchanges("02_infer_refusals")[3]
    assert (_req(ver)["model"], _req(ver)["model_version"]) == ("echo", "7")
    assert _req(exchanges("02_infer_refusals")[4])["decode_error"].startswith("body is not JSON")
    nonsense = exchanges("02_infer_refusals")[5]
    assert _req(nonsense) == {"model": None, "model_version": None}


def test_generate_stream_completed() -> None:
    """3 events then the chunked terminator: the last is final; a stream without a request id has `""`."""
    first, second = exchanges("03a_generate_stream_completed_keepalive")
    assert _req(first) == {"model": "tokens", "model_version": "", "request_id": "gs-1"}
    assert _stream(first) == [
        {"model": "tokens", "model_version": "1", "request_id": "gs-1", "error": None, "outputs": ["TEXT"],
         "final": i == 2}
        for i in range(3)
    ]  # fmt: skip
    assert [(e["request_id"], e["final"]) for e in _stream(second)] == [("", False), ("", True)]
    got, split = _events(first)
    assert [e.size for e in got] == [len(p) for p in first.pieces] and split.pending == 0


def test_generate_stream_error_first_and_after_first() -> None:
    """400 SSE-framed with one error event (final); 200 with an error event after two events, then the end."""
    (first,) = exchanges("03b_generate_stream_error_first")
    assert first.status == 400
    assert _stream(first) == [{"model": None, "model_version": None, "request_id": "",
                               "error": "fail_midstream: backend failure after 2 responses", "outputs": [],
                               "final": True}]  # fmt: skip
    (after,) = exchanges("03c_generate_stream_error_after_first")
    got = _stream(after)
    assert [(e["outputs"], e["error"], e["final"]) for e in got] == [
        (["TEXT"], None, False), (["TEXT"], None, False),
        ([], "fail_midstream: backend failure after 2 responses", True),
    ]  # fmt: skip


def test_an_error_event_is_not_final_when_more_events_follow() -> None:
    """`scripted` t,e,t,F: an error event and the stream goes on; final is the body's end, never the error."""
    x = exchanges("03f_generate_stream_rejections")[2]
    got = _stream(x)
    assert [(e["error"], e["final"]) for e in got] == [(None, False), ("scripted: error 1", False), (None, True)]


def test_silent_model_gives_no_event() -> None:
    """200 with only the chunked terminator: no event, nothing pending."""
    (x,) = exchanges("03d_generate_stream_silent")
    got, split = _events(x)
    assert (x.status, x.clean_end, got, split.pending) == (200, True, [], 0)


def test_stream_cut_by_a_client_disconnect_has_no_final() -> None:
    """04a: the client closed after 2 events, the body has no terminator: no event is final."""
    (x,) = exchanges("04a_disconnect_after_2_events_tokens")
    assert not x.clean_end
    assert [(e["request_id"], e["final"]) for e in _stream(x)] == [("04a-mid", False), ("04a-mid", False)]


def test_stream_rejected_before_inference_is_a_plain_json_reply() -> None:
    """404/400 before inference: plain JSON with Content-Length, not an event stream: one reply message."""
    nosuch, missing, _ = exchanges("03f_generate_stream_rejections")
    assert not hl.is_event_stream(nosuch.reply_headers)
    assert _rep(nosuch) == {"model": None, "model_version": None, "request_id": "",
                            "error": "Request for unknown model: 'nosuch' is not found", "outputs": []}  # fmt: skip
    assert _rep(missing)["error"].startswith("[request id: gs-400] expected number of inputs")


def test_non_streaming_generate() -> None:
    """/generate: one JSON reply (chunked, no SSE): its tensors by name; an error under 200 is still its error."""
    two, one, silent, err, echo = exchanges("03e_generate_nonstreaming")
    assert _rep(one) == {"model": "tokens", "model_version": "1", "request_id": "g-one",
                         "error": None, "outputs": ["TEXT"]}  # fmt: skip
    assert two.status == 200 and _rep(two)["error"].startswith("generate expects model to produce exactly 1 response")
    assert silent.status == 200 and _rep(silent)["error"] == _rep(two)["error"]
    assert err.status == 400 and _rep(err)["error"] == "fail_midstream: backend failure after 2 responses"
    assert (_rep(echo)["outputs"], _rep(echo)["request_id"]) == (["OUTPUT"], "g-echo")


def test_other_endpoints_have_the_model_of_their_path_and_no_other_label() -> None:
    """Health, metadata, config, stats, repository: calls, not inference; a 404's error is kept."""
    by = {x.method: x for x in exchanges("05a_health_metadata")}
    assert _req(by["GET /v2/health/ready"]) == {"model": None, "model_version": None}
    assert _req(by["GET /v2/models/echo/config"]) == {"model": "echo", "model_version": ""}
    assert _rep(by["GET /v2/models/echo/config"]) == {}  # 1106 bytes of config, not read
    assert _rep(by["GET /v2/models/nosuch"]) == {
        "error": "Request for unknown model: 'nosuch' is not found",
    }


# -- OpenAI-compatible streams ------------------------------------------------------------------
#
# No OpenAI-compatible server runs on these machines: these bodies are written from the public
# format (OpenAI's API reference; vLLM and Triton's OpenAI frontend send the same chunks).

_CHUNK = (b'data: {"id":"cmpl-7","object":"text_completion","created":1,"model":"llama",'
          b'"choices":[{"index":0,"text":"%s","finish_reason":%s}]}\n\n')  # fmt: skip
OPENAI_BODY = _CHUNK % (b"Hel", b"null") + _CHUNK % (b"lo", b'"stop"') + b"data: [DONE]\n\n"


def test_openai_stream_labels_and_done() -> None:
    """Request: the body's model, no client id. Chunks: the server's id, model, finish_reason; [DONE] is final
    even when the body was then cut."""
    method = "POST /v1/completions"
    req = request_labels(method, [], b'{"model":"llama","prompt":"Hi","stream":true}')
    assert req == {"model": "llama", "model_version": None, "request_id": ""}
    split = SseSplitter()
    got = split.feed(OPENAI_BODY)
    labels = [
        event_labels(method, e) | {"final": event_final(method, e, last=i == 2, clean_end=False)} for i, e in enumerate(got)
    ]
    for one in labels:
        _message(one)
    assert labels == [
        {"model": "llama", "request_id": "cmpl-7", "outputs": ["choices"], "error": None, "finish_reason": None,
         "final": False},
        {"model": "llama", "request_id": "cmpl-7", "outputs": ["choices"], "error": None, "finish_reason": "stop",
         "final": False},
        {"request_id": "", "outputs": [], "final": True},
    ]  # fmt: skip
    err = split.feed(b'data: {"error":{"message":"boom","type":"server_error"}}\n\n')
    assert event_labels("POST /v1/chat/completions", err[0])["error"] == "boom"


def test_event_final_rule() -> None:
    """final: an OpenAI stream's [DONE], or the last event of a clean body; never the last of a cut one.
    On Triton's generate_stream `[DONE]` is no end (Triton sends none): data, read as such."""
    e, done = SseEvent(data="{}", size=10), SseEvent(data="[DONE]", size=14, done=True)
    stream, openai = "POST /v2/models/m/generate_stream", "POST /v1/chat/completions"
    for method in (stream, openai):
        assert [event_final(method, e, last=last, clean_end=clean) for last in (False, True)
                for clean in (False, True)] == [False, False, False, True]  # fmt: skip
    assert event_final(openai, done, last=False, clean_end=False)
    assert not event_final(stream, done, last=False, clean_end=False)
    assert not event_final(stream, done, last=True, clean_end=False)  # cut after it: not the end
    assert event_final(stream, done, last=True, clean_end=True)  # the body's clean end is
    assert event_labels(stream, done)["decode_error"].startswith("event data is not JSON")


def test_an_event_of_type_error_is_an_error_whatever_its_data() -> None:
    """`event: error` (SSE's own way to say it; Triton's error events are `data: {"error"}`): the event is
    an error, with its data's error text when it names one, else its data; and the tracker makes the
    request an error, never completed with it (a scripted stream: no server here sends one)."""
    import dataclasses

    from replay.machine.tracker import track
    from tests.data.make_golden import Builder

    split = SseSplitter()
    events = split.feed(b'event: error\ndata: {"message":"overloaded"}\n\nevent: error\ndata: {"error":"boom"}\n\n'
                        b"event: error\ndata: not json\n\nevent: error\n\n")  # fmt: skip
    stream, openai = "POST /v2/models/m/generate_stream", "POST /v1/completions"
    assert [event_labels(m, e).get("error") for m in (stream, openai) for e in events[:3]] == [
        '{"message":"overloaded"}', "boom", "not json"] * 2  # fmt: skip
    (ping,) = SseSplitter().feed(b"event: error\ndata: \n\n")  # data-less blocks are no events: an empty one is
    assert event_labels(stream, ping)["error"] == "an event of type error, without data"
    assert event_labels(stream, SseSplitter().feed(b'event: token\ndata: {"id":"a"}\n\n')[0])["error"] is None
    b = Builder().start(grpc=False, http=True)
    x = exchanges("03a_generate_stream_completed_keepalive")[0]
    err = b'event: error\ndata: {"message":"overloaded"}\n\n'
    b.http_exchange("c1.1", dataclasses.replace(x, reply=x.reply + err, pieces=[*x.pieces, err]))
    (r,) = track(b.records).requests
    assert (r.outcome, r.error) == ("error", '{"message":"overloaded"}')


def test_event_data_that_is_not_json() -> None:
    (e,) = SseSplitter().feed(b"data: {nope\n\n")
    assert event_labels("POST /v2/models/m/generate_stream", e)["decode_error"].startswith("event data is not JSON")


# -- the SSE splitter ---------------------------------------------------------------------------


def test_sse_rules() -> None:
    """Multi-line data joined by newlines, CRLF / CR / LF, comments, event type, a data-less block, BOM."""
    body = (b"\xef\xbb\xbf: keep-alive\r\n\r\nevent: x\rdata: a\r\ndata:b\n\ndata\n\n"
            b"id: 1\n\ndata: last")  # fmt: skip
    split = SseSplitter()
    got = split.feed(body)
    assert [(e.data, e.event) for e in got] == [("a\nb", "x"), ("", None)]
    assert sum(e.size for e in got) + split.pending == len(body)
    assert split.pending == len(b"id: 1\n\ndata: last")


def test_sse_cap() -> None:
    """An event longer than the cap keeps its head, marked truncated; the splitter goes on after it."""
    split = SseSplitter(cap=8)
    got = split.feed(b"data: " + b"x" * 100 + b"\n\ndata: ok\n\n")
    assert [(e.data, e.truncated) for e in got] == [("x" * 8, True), ("ok", False)]
    assert event_labels("POST /v2/models/m/generate_stream", got[0])["decode_error"].startswith("message larger")


_LINES = st.sampled_from([b"data: {\"TEXT\":\"t\"}", b"data:x", b"data: [DONE]", b": c", b"event: e", b"", b"id: 1",
                          b"data: \xc3\xa9", b"retry: 5", b"data"])  # fmt: skip
_EOLS = st.sampled_from([b"\n", b"\r\n", b"\r"])


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.tuples(_LINES, _EOLS), max_size=30), cuts=st.lists(st.integers(0, 400), max_size=12))
@example(lines=[(b"data: a", b"\r\n"), (b"", b"\r\n"), (b"data: b", b"\r\n"), (b"", b"\r\n")], cuts=[10])
@example(lines=[(b"data: a", b"\n"), (b"", b"\n"), (b"data: b", b"")], cuts=[])
def test_any_split_of_the_bytes_gives_the_same_events(lines: list[tuple[bytes, bytes]], cuts: list[int]) -> None:
    """The same events, sizes and pending bytes whatever the read boundaries (a CRLF split between reads
    too: the split blank line's LF is its event's), and at the end every byte is in an event."""
    body = b"".join(line + eol for line, eol in lines)
    whole = SseSplitter()
    expected = whole.feed(body)
    pieced = SseSplitter()
    got: list[SseEvent] = []
    at = 0
    for cut in sorted({min(c, len(body)) for c in cuts}):
        got += pieced.feed(body[at:cut])
        at = cut
    got += pieced.feed(body[at:])
    assert got == expected
    assert pieced.pending == whole.pending
    assert sum(e.size for e in got) + whole.pending == len(body)
    got += pieced.finish()
    assert got == expected + whole.finish()
    assert sum(e.size for e in got) == len(body) and pieced.pending == 0
    assert all(not e.unterminated for e in got[:-1])


def test_bytes_after_the_last_event_are_an_unterminated_one() -> None:
    """At the body's end, bytes after the last blank line: an ``unterminated`` event (an SSE client
    discards it), labelled when its data parses, never final."""
    split = SseSplitter()
    assert [e.size for e in split.feed(b'data: {"id":"r","OUT":"a"}\n\ndata: {"id":"r","OUT":"b"}')] == [28]
    [last] = split.finish()
    assert (last.size, last.unterminated, last.data) == (26, True, '{"id":"r","OUT":"b"}')
    labels = event_labels("POST /v2/models/m/generate_stream", last)
    assert (labels["request_id"], labels["outputs"], labels["decode_error"]) == ("r", ["OUT"], ev.EVENT_UNTERMINATED)
    assert not event_final("POST /v2/models/m/generate_stream", last, last=True, clean_end=True)
    assert split.finish() == []  # nothing twice
    done = SseSplitter()
    done.feed(b"data: [DONE]")
    assert not event_final("POST /v1/completions", done.finish()[0], last=True, clean_end=True)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_real_stream_split_anywhere(data: st.DataObject) -> None:
    """The real 03c body (events and an error event), cut at any byte: the same 3 events as Triton's chunks."""
    (x,) = exchanges("03c_generate_stream_error_after_first")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(x.reply)), max_size=8)))
    split = SseSplitter()
    got: list[SseEvent] = []
    at = 0
    for cut in [*cuts, len(x.reply)]:
        got += split.feed(x.reply[at:cut])
        at = cut
    assert [e.size for e in got] == [len(p) for p in x.pieces]
    assert [e.data for e in got] == [p.decode()[len("data: ") : -2] for p in x.pieces]


@pytest.mark.parametrize("n", [0, 1, 2])
def test_every_event_of_a_cut_real_stream_is_a_complete_one(n: int) -> None:
    """04c B-queued: the headers and first event arrived after the client left; nothing half-read is an event."""
    x = exchanges("04c_disconnect_before_first_event_steps_serial")[1]
    split = SseSplitter()
    got = split.feed(x.reply[: len(x.reply) - n])
    assert len(got) == (1 if n == 0 else 0) and split.pending == len(x.reply) - n - sum(e.size for e in got)


def test_sequence_and_empty_final_parameters_are_recorded_raw() -> None:
    """KServe v2 request `parameters` (as tritonclient.http writes them for sequences): recorded as sent."""
    body = (b'{"id":"s1","parameters":{"sequence_id":7,"sequence_start":true,"sequence_end":0,'
            b'"triton_enable_empty_final_response":true},"inputs":[{"name":"INPUT","shape":[1],"datatype":"INT32",'
            b'"data":[1]}]}')  # fmt: skip
    out = request_labels("POST /v2/models/acc/infer", [], body)
    assert {k: out[k] for k in ("sequence_id", "sequence_start", "sequence_end", "enable_empty_final")} == {
        "sequence_id": 7, "sequence_start": True, "sequence_end": 0, "enable_empty_final": True}  # fmt: skip
    _message(out, "c2s")
    cut = request_labels("POST /v2/models/acc/infer", [], body[:20], truncated=True)
    assert cut["decode_error"].startswith("message larger than the label buffer") and "sequence_id" not in cut
