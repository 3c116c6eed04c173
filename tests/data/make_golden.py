"""Generates the golden synthetic captures of tests/data (and their README) deterministically.

Run ``python -m tests.data.make_golden`` after changing a scenario; tests/replay/machine/test_golden.py
fails when the checked-in files differ from what this script produces.

Why generated and not hand-written: every ``message`` record is labelled from real protobuf bytes
by :mod:`proxy.triton.labels` (the proxy's own labeller) and encoded by :func:`replay.capture.schema.encode`, so
the goldens are exactly what the proxy would write, and stay so when the schema grows.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from tritonclient.grpc import service_pb2 as pb

from proxy.triton import http_labels, labels, sse
from proxy.triton.inflight import InFlight
from replay.capture import events as ev
from replay.capture import methods
from replay.capture.events import STATUS_NAMES
from replay.capture.methods import MODEL_NAMED
from replay.capture.schema import SCHEMA_VERSION, Encoder
from tests.proxy.triton.http_wire import Exchange, exchanges

HERE = Path(__file__).parent
T0 = 1_780_000_000_000_000_000  # 2026-05-28, fixed so that regeneration is byte-identical
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
INFER = "/inference.GRPCInferenceService/ModelInfer"
LIVE = "/inference.GRPCInferenceService/ServerLive"


def _bytes_tensor(value: bytes) -> bytes:
    return len(value).to_bytes(4, "little") + value


@dataclass
class _CallState:
    method: str
    t0: int
    inflight: InFlight
    c2s: int = 0
    s2c: int = 0


@dataclass
class Builder:
    """Writes one capture as the proxy would, one event at a time, on a synthetic clock."""

    payload: str = "meta"
    t: int = T0
    records: list[Any] = field(default_factory=list)
    calls: dict[str, _CallState] = field(default_factory=dict)

    def tick(self, ms: float = 1.0) -> int:
        self.t += int(ms * 1_000_000)
        return self.t

    def start(self, *, grpc: bool = True, http: bool = False) -> Builder:
        """capture_start of a proxy relaying gRPC, HTTP or both (``listen``/``upstream`` are `""` without gRPC)."""
        self.records.append(
            ev.CaptureStarted(
                t_ns=self.t, proxy_version="0.1.0", listen="127.0.0.1:8011" if grpc else "",
                upstream="127.0.0.1:8001" if grpc else "",
                options={"payload": self.payload, "payload_cap": None, "rotate_mb": None, "gzip_rotated": False,
                         "drain_timeout_s": 10.0, "redact": ["authorization"]},
                http_listen="127.0.0.1:8010" if http else None, http_upstream="127.0.0.1:8000" if http else None,
            )
        )  # fmt: skip
        return self

    def call(self, call: str, method: str = STREAM, timeout_ms: float | None = None) -> None:
        self.tick()
        meta = [[":method", "POST"], [":path", method], ["content-type", "application/grpc"], ["te", "trailers"]]
        if timeout_ms is not None:
            meta.append(["grpc-timeout", f"{int(timeout_ms)}m"])
        self.calls[call] = _CallState(method, self.t, InFlight(unary=method == INFER))
        self.records.append(
            ev.CallStarted(t_ns=self.t, call=call, conn=call.split(".")[0], method=method, peer="127.0.0.1:50000",
                           metadata=meta, timeout_ms=timeout_ms)
        )  # fmt: skip

    def _payload(self, body: bytes) -> dict[str, Any]:
        if self.payload != "full":
            return {}
        return {
            "payload_sha256": hashlib.sha256(body).hexdigest(),
            "payload": base64.b64encode(body).decode("ascii"),
            "payload_truncated": False,
        }

    def request(
        self, call: str, rid: str, *, model: str = "tokens", prompt: str = "hi", max_tokens: int = 3,
        empty_final: bool | None = True, ms: float = 1.0,
    ) -> None:  # fmt: skip
        self.tick(ms)
        r = pb.ModelInferRequest(model_name=model, id=rid)
        r.inputs.add(name="PROMPT", datatype="BYTES", shape=[1])
        r.raw_input_contents.append(_bytes_tensor(prompt.encode()))
        if model != "echo":
            r.inputs.add(name="MAX_TOKENS", datatype="INT32", shape=[1])
            r.raw_input_contents.append(np.array([max_tokens], dtype=np.int32).tobytes())
        if empty_final is not None:
            r.parameters["triton_enable_empty_final_response"].bool_param = empty_final
        body = r.SerializeToString()
        st = self.calls[call]
        fields = labels.request_labels(body, False)
        st.inflight.sent(fields["request_id"])
        self.records.append(
            ev.MessageSeen(t_ns=self.t, call=call, dir="c2s", index=st.c2s, size=len(body), compressed=False,
                           **fields, **self._payload(body))
        )  # fmt: skip
        st.c2s += 1

    def ask(self, call: str, request: Any, answer: Any, ms: float = 1.0) -> None:
        """A non-inference call's request and its answer (protobuf messages of the call's method), labelled as
        the proxy labels them (the model a readiness, metadata or config request names)."""
        st = self.calls[call]
        for direction, message in (("c2s", request), ("s2c", answer)):
            self.tick(ms)
            body = message.SerializeToString()
            fields = labels.model_request_labels(st.method, body) if direction == "c2s" and st.method in MODEL_NAMED else {}
            index = st.c2s if direction == "c2s" else st.s2c
            self.records.append(
                ev.MessageSeen(t_ns=self.t, call=call, dir=direction, index=index, size=len(body), compressed=False,
                               **fields, **self._payload(body))
            )  # fmt: skip
            if direction == "c2s":
                st.c2s += 1
            else:
                st.s2c += 1

    def response(
        self, call: str, rid: str, text: str | None = None, *, final: bool | None = False, error: str | None = None,
        model: str = "tokens", ms: float = 5.0,
    ) -> None:  # fmt: skip
        """A response as Triton 2.51 sends it (empty finals carry model_version "")."""
        self.tick(ms)
        st = self.calls[call]
        r = pb.ModelInferResponse(model_name=model, model_version="1" if text is not None or error else "", id=rid)
        if final is not None:
            r.parameters["triton_final_response"].bool_param = final
        if text is not None:
            r.outputs.add(name="TEXT" if model != "echo" else "OUTPUT", datatype="BYTES", shape=[1])
            r.raw_output_contents.append(_bytes_tensor(text.encode()))
        if st.method == STREAM:
            body = pb.ModelStreamInferResponse(infer_response=r, error_message=error or "").SerializeToString()
            fields = labels.stream_response_labels(body, False)
        else:
            body = r.SerializeToString()
            fields = labels.response_labels(body, False)
        st.inflight.answered(fields["request_id"], fields["final"])
        self.records.append(
            ev.MessageSeen(t_ns=self.t, call=call, dir="s2c", index=st.s2c, size=len(body), compressed=False,
                           **fields, **self._payload(body))
        )  # fmt: skip
        st.s2c += 1

    def infer_message(self, call: str, message: Any, ms: float = 1.0) -> None:
        """An inference message given whole (any inputs, outputs and parameters), labelled as the proxy labels
        it: a ``ModelInferRequest`` (c2s), a ``ModelInferResponse`` (a unary call's answer) or a
        ``ModelStreamInferResponse`` (a stream's)."""
        self.tick(ms)
        st = self.calls[call]
        body = message.SerializeToString()
        request = isinstance(message, pb.ModelInferRequest)
        if request:
            fields = labels.request_labels(body, False)
            st.inflight.sent(fields["request_id"])
        elif st.method == STREAM:
            fields = labels.stream_response_labels(body, False)
            st.inflight.answered(fields["request_id"], fields["final"])
        else:
            fields = labels.response_labels(body, False)
            st.inflight.answered(fields["request_id"], fields["final"])
        index = st.c2s if request else st.s2c
        self.records.append(
            ev.MessageSeen(t_ns=self.t, call=call, dir="c2s" if request else "s2c", index=index, size=len(body),
                           compressed=False, **fields, **self._payload(body))
        )  # fmt: skip
        if request:
            st.c2s += 1
        else:
            st.s2c += 1

    def cut(self, call: str, direction: str, arrived: int, length: int, ms: float = 1.0) -> None:
        """What arrived of a message (``arrived`` of its ``length`` bytes) when the call's end cut it, as the proxy
        records it: never labelled."""
        self.tick(ms)
        st = self.calls[call]
        index = st.c2s if direction == "c2s" else st.s2c
        if direction == "c2s":
            st.c2s += 1
        else:
            st.s2c += 1
        self.records.append(
            ev.MessageSeen(t_ns=self.t, call=call, dir=direction, index=index, size=arrived, compressed=False,  # type: ignore[arg-type]
                           decode_error=f"{ev.MESSAGE_CUT} (after {arrived} of its {length} bytes)")
        )  # fmt: skip

    def half_close(self, call: str, ms: float = 1.0) -> None:
        self.tick(ms)
        self.records.append(ev.HalfClosed(t_ns=self.t, call=call))

    def cancel(self, call: str, cause: str, *, rst_code: int | None = None, ms: float = 1.0) -> None:
        self.tick(ms)
        st = self.calls[call]
        in_flight, responded = st.inflight.snapshot()
        self.records.append(
            ev.CallCancelled(t_ns=self.t, call=call, cause=cause, in_flight=in_flight, responded=responded,  # type: ignore[arg-type]
                             rst_code=rst_code, elapsed_ms=(self.t - st.t0) / 1e6,
                             forwarded_upstream=cause not in ("upstream_disconnect",))
        )  # fmt: skip

    def end(
        self, call: str, status: str = "OK", cause: str = "ok", details: str | None = None, ms: float = 1.0
    ) -> None:
        self.tick(ms)
        st = self.calls[call]
        code = {name: str(c) for c, name in STATUS_NAMES.items()}[status]
        trailers = [["grpc-status", code]] if cause in ("ok", "error") else None
        if trailers is not None and details is not None:
            trailers.append(["grpc-message", details])
        self.records.append(
            ev.CallEnded(t_ns=self.t, call=call, status=status, details=details, cause=cause,  # type: ignore[arg-type]
                         trailers=trailers,
                         initial_metadata=[[":status", "200"], ["content-type", "application/grpc"]],
                         duration_ms=(self.t - st.t0) / 1e6, messages_c2s=st.c2s, messages_s2c=st.s2c)
        )  # fmt: skip

    # -- HTTP calls: the real Triton 2.51 exchanges of tests/proxy/triton/data/http, labelled by the
    # proxy's own HTTP labeller, with the records docs/capture-format.md's *HTTP calls* describes.

    def http_call(self, call: str, x: Exchange, ms: float = 1.0) -> None:
        """call_start of one HTTP exchange: its request line and headers as h11 gives them (names lowercased)."""
        self.tick(ms)
        self.calls[call] = _CallState(x.method, self.t, InFlight(unary=methods.streaming(x.method) is False))
        self.records.append(
            ev.CallStarted(t_ns=self.t, call=call, conn=call.split(".")[0], method=x.method, peer="127.0.0.1:50100",
                           metadata=[[k.decode("latin-1"), v.decode("latin-1")] for k, v in x.headers],
                           timeout_ms=None, protocol="http", http_version="1.1")
        )  # fmt: skip

    def http_request(self, call: str, x: Exchange, ms: float = 0.1) -> None:
        """The request body's message (one per call)."""
        self.tick(ms)
        st = self.calls[call]
        fields = http_labels.request_labels(x.method, x.headers, x.body)
        if fields.get("request_id") is not None:
            st.inflight.sent(fields["request_id"])
        self.records.append(ev.MessageSeen(t_ns=self.t, call=call, dir="c2s", index=0, size=len(x.body),
                                           compressed=http_labels.compressed(x.headers), **fields,
                                           **self._payload(x.body)))  # fmt: skip
        st.c2s = 1

    def http_reply(self, call: str, x: Exchange, ms: float | list[float] = 1.0) -> None:
        """The reply's messages: one per server-sent event (``final`` by the one rule), else one for the body.

        ``ms``: the time before the body (or before each event, a list).
        """
        st = self.calls[call]
        waits = ms if isinstance(ms, list) else [ms]
        assert x.status is not None
        if not http_labels.is_event_stream(x.reply_headers):
            self.tick(waits[0])
            fields = http_labels.reply_labels(x.method, x.status, x.reply_headers, x.reply)
            self.records.append(ev.MessageSeen(t_ns=self.t, call=call, dir="s2c", index=0, size=len(x.reply),
                                               compressed=http_labels.compressed(x.reply_headers), **fields,
                                               **self._payload(x.reply)))  # fmt: skip
            st.s2c = 1
            st.inflight.answered(next(iter(st.inflight.snapshot()[0]), ""), True)
            return
        split = sse.SseSplitter()
        events = [e for piece in x.pieces for e in split.feed(piece)]
        if not events:
            self.tick(waits[0])  # the body's end (its terminator) came then
        at = 0  # each event's bytes as the stream carried them (``--payload full``)
        for i, e in enumerate(events):
            self.tick(waits[min(i, len(waits) - 1)])
            final = http_labels.event_final(x.method, e, last=i == len(events) - 1, clean_end=x.clean_end)
            fields = http_labels.event_labels(x.method, e)
            self.records.append(
                ev.MessageSeen(
                    t_ns=self.t,
                    call=call,
                    dir="s2c",
                    index=i,
                    size=e.size,
                    final=final,
                    **fields,
                    **self._payload(x.reply[at : at + e.size]),
                )
            )
            at += e.size
            # One request per HTTP call: its events are its responses, whatever id (or none) they carry.
            rid = next(iter(st.inflight.snapshot()[0]), "")
            st.inflight.answered(rid, final)
        st.s2c = len(events)

    def http_cancel(self, call: str, cause: str, ms: float = 1.0) -> None:
        """A cancel of an HTTP call: the connection the proxy closed upstream is how Triton learns of it."""
        self.tick(ms)
        st = self.calls[call]
        in_flight, responded = st.inflight.snapshot()
        self.records.append(
            ev.CallCancelled(t_ns=self.t, call=call, cause=cause, in_flight=in_flight, responded=responded,  # type: ignore[arg-type]
                             rst_code=None, elapsed_ms=(self.t - st.t0) / 1e6,
                             forwarded_upstream=cause == "client_disconnect",
                             upstream_rst_us=150.0 if cause == "client_disconnect" else None)
        )  # fmt: skip

    def http_end(
        self, call: str, x: Exchange, cause: str | None = None, ms: float = 0.1, details: str | None = None
    ) -> None:
        """call_end: the status code the client got, the reply's error as details when it is 400 or more, else
        ``details`` (what the proxy says of a client's FIN before the end)."""
        self.tick(ms)
        st = self.calls[call]
        assert x.status is not None
        if x.status >= 400:
            fields = http_labels.reply_labels(x.method, x.status, x.reply_headers, x.reply)
            details = fields.get("error")
            if http_labels.is_event_stream(x.reply_headers):
                (first, *_) = sse.SseSplitter().feed(x.reply)
                details = http_labels.event_labels(x.method, first).get("error")
        if cause is None:
            cause = "ok" if x.status < 400 else "error"
        self.records.append(
            ev.CallEnded(t_ns=self.t, call=call, status=str(x.status), details=details, cause=cause,  # type: ignore[arg-type]
                         trailers=None,
                         initial_metadata=[[k.decode("latin-1"), v.decode("latin-1")] for k, v in x.reply_headers],
                         duration_ms=(self.t - st.t0) / 1e6, messages_c2s=st.c2s, messages_s2c=st.s2c,
                         http_status=x.status)
        )  # fmt: skip

    def http_exchange(self, call: str, x: Exchange, ms: float | list[float] = 1.0) -> None:
        """A whole exchange that ended as its framing says."""
        self.http_call(call, x)
        self.http_request(call, x)
        self.http_reply(call, x, ms)
        self.http_end(call, x)

    def gap(self, dropped: int, reason: str = "queue_full: the capture disk is slower than the traffic") -> None:
        self.tick()
        self.records.append(
            ev.GapRecorded(t_ns=self.t, dropped=dropped, reason=reason, first_t_ns=self.t - 2_000_000,
                           last_t_ns=self.t - 1_000_000)
        )  # fmt: skip

    def finish(self) -> Builder:
        self.tick()
        kinds: dict[str, int] = {}
        for r in self.records:
            kinds[f"records.{r.kind}"] = kinds.get(f"records.{r.kind}", 0) + 1
        self.records.append(ev.CaptureEnded(t_ns=self.t, reason="shutdown", counts={**kinds, "dropped": 0}))
        return self

    def render(self, skip_seqs: tuple[int, ...] = (), dense_version: int | None = None) -> bytes:
        """The file as the proxy writes it (sparse, one Encoder per file), or dense as schema <= 2 wrote it."""
        out = []
        seq = 0
        encoder = Encoder()
        for r in self.records:
            while seq in skip_seqs:
                seq += 1
            out.append(encoder.encode(r, seq) if dense_version is None else _dense(r, seq, dense_version))
            seq += 1
        return b"".join(out)


#: Fields added after schema 2 (optional): a version 1 or 2 writer never wrote them.
_NEWER_FIELDS = ("payload_at", "http_listen", "http_upstream", "protocol", "http_version", "finish_reason",
                 "http_status", "refused")  # fmt: skip


def http_stream_cut_in_second_event(payload: str, keep_bytes: bool, mark: bool) -> tuple[Builder, Exchange, bytes]:
    """A generate_stream the client's disconnect cut inside its second event (a recorder that keeps what
    arrived of it): the builder (not finished), the exchange it was made from, and the bytes of the cut
    event the record holds. ``keep_bytes``: the record's payload is those bytes (``full`` only), without the
    event's blank line; ``mark``: its decode_error says the body was cut (``ev.BODY_CUT``)."""
    (x,) = exchanges("04a_disconnect_after_2_events_tokens")
    b = Builder(payload=payload).start(grpc=False, http=True)
    b.http_call("c1.1", x)
    b.http_request("c1.1", x)
    b.http_reply("c1.1", x, ms=[14, 30])
    b.http_cancel("c1.1", "client_disconnect", ms=0.3)
    b.http_end("c1.1", x, cause="client_disconnect", ms=0.2)
    last = max(i for i, r in enumerate(b.records) if isinstance(r, ev.MessageSeen) and r.dir == "s2c")
    rec = b.records[last]
    assert isinstance(rec, ev.MessageSeen)
    part = b""
    changes: dict[str, Any] = {"decode_error": ev.BODY_CUT} if mark else {}
    if keep_bytes:
        assert rec.payload is not None
        part = base64.b64decode(rec.payload)[:-6]  # the event's head, its blank line never came
        changes.update(size=len(part), payload=base64.b64encode(part).decode(),
                       payload_sha256=hashlib.sha256(part).hexdigest())  # fmt: skip
    b.records[last] = dataclasses.replace(rec, **changes)
    return b, x, part


def _dense(record: Any, seq: int, version: int) -> bytes:
    """A line as schema versions 1 and 2 wrote it: every field they knew, nulls included."""
    fields = orjson.loads(orjson.dumps(record))
    for name in _NEWER_FIELDS:
        fields.pop(name, None)
    return b'{"v":%d,"seq":%d,"kind":"%s",%s\n' % (version, seq, record.kind.encode(), orjson.dumps(fields)[1:])


# -- scenarios ----------------------------------------------------------------------------------


def one_response() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r1", empty_final=None)
    b.response("c1.1", "r1", "hello", final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def many_responses() -> bytes:
    b = Builder(payload="full").start()
    b.call("c1.1")
    b.request("c1.1", "r1", max_tokens=5)
    for i in range(5):
        b.response("c1.1", "r1", f"hi-{i}")
    b.response("c1.1", "r1", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def no_text() -> bytes:
    b = Builder(payload="full").start()
    b.call("c1.1")
    b.request("c1.1", "quiet", model="silent")
    b.response("c1.1", "quiet", None, final=True, model="silent")
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def interleaved() -> bytes:
    b = Builder(payload="full").start()
    b.call("c1.1")
    b.request("c1.1", "a", prompt="a", max_tokens=3)
    b.request("c1.1", "b", prompt="b", max_tokens=2)
    b.response("c1.1", "a", "a-0")
    b.response("c1.1", "b", "b-0")
    b.response("c1.1", "a", "a-1")
    b.response("c1.1", "b", "b-1")
    b.response("c1.1", "b", None, final=True)
    b.response("c1.1", "a", "a-2")
    b.response("c1.1", "a", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def error_midstream() -> bytes:
    b = Builder(payload="full").start()
    b.call("c1.1")
    b.request("c1.1", "f1", model="fail_midstream", prompt="f")
    b.response("c1.1", "f1", "f-0", model="fail_midstream")
    b.response("c1.1", "f1", "f-1", model="fail_midstream")
    b.response(
        "c1.1", "f1", None, final=True, model="fail_midstream",
        error="fail_midstream: backend failure after 2 responses",
    )  # fmt: skip
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def cancelled_mid_response() -> list[Any]:
    """``--payload full``: a stream call with one response, then what arrived of the next when the client's cancel
    cut it (95 of its 2,071 bytes), the cancel and the call's end."""
    b = Builder(payload="full").start()
    b.call("c1.1")
    b.request("c1.1", "r1", prompt="p")
    b.response("c1.1", "r1", "hi-0")
    b.cut("c1.1", "s2c", 95, 2071)
    b.cancel("c1.1", "client_cancel", rst_code=8)
    b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
    return b.records


def response_after_final() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r1")
    b.response("c1.1", "r1", "hi-0")
    b.response("c1.1", "r1", None, final=True)
    b.response("c1.1", "r1", "hi-late")
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def missing_final() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "due", empty_final=True)
    b.request("c1.1", "not-due", empty_final=None)
    b.response("c1.1", "due", "d-0")
    b.response("c1.1", "not-due", "n-0")
    b.response("c1.1", "due", "d-1")
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def stream_cancel(dense_version: int | None = None) -> bytes:
    b = Builder(payload="full").start()
    b.call("c1.1")
    b.request("c1.1", "done", prompt="d", max_tokens=1)
    b.response("c1.1", "done", "d-0")
    b.response("c1.1", "done", None, final=True)
    b.request("c1.1", "a", prompt="a", max_tokens=100)
    b.request("c1.1", "b", prompt="b", max_tokens=100)
    b.response("c1.1", "a", "a-0")
    b.response("c1.1", "a", "a-1")
    b.cancel("c1.1", "client_cancel", rst_code=8, ms=3)
    b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
    return b.finish().render(dense_version=dense_version)


def deadline() -> bytes:
    b = Builder().start()
    b.call("c1.1", timeout_ms=500)
    b.request("c1.1", "slow", max_tokens=100)
    b.response("c1.1", "slow", "s-0", ms=200)
    b.response("c1.1", "slow", "s-1", ms=200)
    b.cancel("c1.1", "deadline", rst_code=8, ms=99)
    b.end("c1.1", "DEADLINE_EXCEEDED", "deadline", ms=0)
    return b.finish().render()


def client_disconnect() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r1", max_tokens=100)
    b.response("c1.1", "r1", "hi-0")
    b.cancel("c1.1", "client_disconnect", ms=10)
    b.end("c1.1", "CANCELLED", "client_disconnect", ms=0)
    return b.finish().render()


def upstream_disconnect() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r1", max_tokens=100)
    b.response("c1.1", "r1", "hi-0")
    b.cancel("c1.1", "upstream_disconnect", ms=10)
    b.end("c1.1", "UNAVAILABLE", "upstream_disconnect", details="triton-tap: upstream connection lost", ms=0)
    return b.finish().render()


def proxy_shutdown() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r1", max_tokens=100)
    b.response("c1.1", "r1", "hi-0")
    b.cancel("c1.1", "proxy_shutdown", ms=10)
    b.end("c1.1", "UNAVAILABLE", "proxy_shutdown", details="triton-tap: proxy shutting down", ms=0)
    return b.finish().render()


def unattributable() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "dup", prompt="x", empty_final=None)
    b.request("c1.1", "dup", prompt="y", empty_final=None)
    b.response("c1.1", "dup", "which?")
    b.response("c1.1", "ghost", "nobody asked")
    b.response("c1.1", "", "no id")
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def stray_error() -> Builder:
    """One stream: r1 answered and final, and between them an error response for an id nobody sent (no data
    file: diff's tests build it)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r1")
    b.response("c1.1", "r1", "x")
    b.response("c1.1", "zz", None, error="no such request", final=True)
    b.response("c1.1", "r1", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish()


def restart_after_cancel() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "job-1", max_tokens=100)
    b.response("c1.1", "job-1", "j-0")
    b.cancel("c1.1", "client_cancel", rst_code=8, ms=3)
    b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
    b.call("c1.3")
    b.request("c1.3", "job-1", max_tokens=1)
    b.response("c1.3", "job-1", "j-0")
    b.response("c1.3", "job-1", None, final=True)
    b.half_close("c1.3")
    b.end("c1.3")
    return b.finish().render()


def unary() -> bytes:
    b = Builder().start()
    b.call("c1.1", method=LIVE)
    b.end("c1.1")
    b.call("c1.3", method=INFER)
    b.request("c1.3", "e1", model="echo", empty_final=None)
    b.response("c1.3", "e1", "hi", final=None, model="echo")
    b.half_close("c1.3", ms=0)
    b.end("c1.3")
    b.call("c1.5", method=INFER)
    b.request("c1.5", "e2", model="nope", empty_final=None)
    b.half_close("c1.5", ms=0)
    b.end("c1.5", "NOT_FOUND", "error", details="Request for unknown model: 'nope' is not found")
    return b.finish().render()


def gaps() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r1", max_tokens=3)
    # The writer's own report of records it dropped: seq numbers stay gap-free around it.
    b.gap(3)
    b.response("c1.1", "r1", "hi-1")
    b.response("c1.1", "r1", "hi-2")
    b.response("c1.1", "r1", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    # Lines lost from the file afterwards (seq 6 and 7 never reach the reader): a seq hole.
    return b.finish().render(skip_seqs=(6, 7))


def lost_request() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", empty_final=None)  # seq 2
    b.response("c1.1", "", "a")  # 3
    # Lines lost from the file (seq 4-6): a second id-less request, a response and a request "x".
    b.response("c1.1", "", "c")  # 7
    b.response("c1.1", "", None, final=True)  # 8
    b.response("c1.1", "", None, final=True)  # 9: the lost request's final, after the first's
    b.response("c1.1", "x", None, final=True)  # 10: the lost request "x"'s
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render(skip_seqs=(4, 5, 6))


def idless_error_finals() -> bytes:
    # Triton's QA shape: 10 requests with tritonclient's default id "" on one stream, each answered
    # by one error response carrying the final flag; the stream ends OK.
    b = Builder().start()
    b.call("c1.1")
    for _ in range(10):
        b.request("c1.1", "", model="scripted", prompt="E", empty_final=None, ms=0.1)
    for _ in range(10):
        b.response("c1.1", "", None, final=True, model="scripted", error="scripted: error 1")
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def idless_mixed_ends() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    for _ in range(10):
        b.request("c1.1", "", model="scripted", empty_final=None, ms=0.1)
    for i in range(10):
        if i % 3 == 1:
            b.response("c1.1", "", None, final=True, model="scripted", error="scripted: error 1")
        else:
            b.response("c1.1", "", "t-0", final=True, model="scripted")
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def idless_interleaved_texts() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", model="scripted", prompt="e,F")
    b.request("c1.1", "", model="scripted", prompt="t,t,F")
    b.response("c1.1", "", "t-0", model="scripted")
    b.response("c1.1", "", None, model="scripted", error="scripted: error 1")
    b.response("c1.1", "", "t-1", model="scripted")
    b.response("c1.1", "", None, final=True, model="scripted")
    b.response("c1.1", "", None, final=True, model="scripted")
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def idless_errors_without_final() -> bytes:
    # Triton QA's decoupled_execute_error / raise_exception shape: two requests with id "" in flight
    # together, each failed: an error response without the final flag apiece, then the stream ends OK.
    b = Builder().start()
    b.call("c1.1")
    for _ in range(2):
        b.request("c1.1", "", model="scripted", prompt="E", empty_final=None, ms=0.1)
    for _ in range(2):
        b.response("c1.1", "", None, final=None, model="scripted", error="scripted: error 1")
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def idless_mixed_ids() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "a", model="scripted", prompt="t,t,F")
    b.request("c1.1", "", model="scripted", prompt="t,F")
    b.request("c1.1", "", model="scripted", prompt="t,F")
    b.response("c1.1", "a", "t-0", model="scripted")
    b.response("c1.1", "", "t-0", model="scripted")
    b.response("c1.1", "", "t-0", model="scripted")
    b.response("c1.1", "a", "t-1", model="scripted")
    b.response("c1.1", "", None, final=True, model="scripted")
    b.response("c1.1", "", None, final=True, model="scripted")
    b.response("c1.1", "a", None, final=True, model="scripted")
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def idless_after_cancel() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", model="scripted", prompt="t,t,t,t,t,F")
    b.response("c1.1", "", "t-0", model="scripted")
    b.cancel("c1.1", "client_cancel", rst_code=8, ms=3)
    b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
    b.call("c1.3")
    b.request("c1.3", "", model="scripted", prompt="t,F")
    b.response("c1.3", "", "t-0", model="scripted")
    b.response("c1.3", "", None, final=True, model="scripted")
    b.half_close("c1.3")
    b.end("c1.3")
    return b.finish().render()


def idless_sequence() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    for _ in range(3):
        b.request("c1.1", "", model="scripted", prompt="t,t,F")
        b.response("c1.1", "", "t-0", model="scripted")
        b.response("c1.1", "", "t-1", model="scripted")
        b.response("c1.1", "", None, final=True, model="scripted")
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def error_then_final() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "ef", model="scripted", prompt="t,e,t,F")
    b.response("c1.1", "ef", "t-0", model="scripted")
    b.response("c1.1", "ef", None, model="scripted", error="scripted: error 1")
    b.response("c1.1", "ef", "t-2", model="scripted")
    b.response("c1.1", "ef", None, final=True, model="scripted")
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def error_without_final(due: bool) -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "en", model="scripted", prompt="t,e", empty_final=True if due else None)
    b.response("c1.1", "en", "t-0", model="scripted")
    b.response("c1.1", "en", None, model="scripted", error="scripted: error 1")
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish().render()


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def truncated_last_line() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r1", max_tokens=1)
    b.response("c1.1", "r1", "hi-0")
    b.response("c1.1", "r1", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    lines = _lines(b.finish().render())
    # The proxy died while writing capture_end: half of the last line made it to disk.
    last = lines[-1]
    return b"".join(lines[:-1]) + last[: len(last) // 2]


def proxy_killed() -> bytes:
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "open", max_tokens=100)
    b.response("c1.1", "open", "o-0")
    b.request("c1.1", "done", max_tokens=1)
    b.response("c1.1", "done", None, final=True)
    return b.render()


def too_new() -> bytes:
    lines = _lines(one_response())
    newer = lines[1].replace(b'{"v":%d,' % SCHEMA_VERSION, b'{"v":%d,' % (SCHEMA_VERSION + 1), 1)
    return b"".join([lines[0], newer, *lines[2:]])


def stream_cancel_v1() -> bytes:
    # What a schema-1 proxy wrote: the cancel record's `responded` was called `executing`.
    return stream_cancel(dense_version=1).replace(b'"responded":', b'"executing":')


def stream_cancel_v2() -> bytes:
    # What a schema-2 proxy wrote: dense lines, every field with its nulls.
    return stream_cancel(dense_version=2)


def garbled_middle() -> bytes:
    lines = _lines(one_response())
    return b"".join([*lines[:2], b'{"v":1,"seq":2,"kind":"message","t_ns":17800000\x00\x00 garbage\n', *lines[3:]])


# -- HTTP captures (tests/data/http): built from what the real Triton 2.51 HTTP port sent -------------
#
# Each exchange is a real one from tests/proxy/triton/data/http (the transcript named in its
# fixture): request line, headers and bodies as Triton's clients sent them and as Triton answered.


def http_unary_json() -> bytes:
    b = Builder().start(grpc=False, http=True)
    b.http_exchange("c1.1", exchanges("01_unary_infer_tritonclient")[0], ms=24)
    return b.finish().render()


def http_unary_binary() -> bytes:
    b = Builder().start(grpc=False, http=True)
    b.http_exchange("c1.1", exchanges("01_unary_infer_tritonclient")[1])
    return b.finish().render()


def http_generate_stream_completed() -> bytes:
    b = Builder().start(grpc=False, http=True)
    b.http_exchange("c1.1", exchanges("03a_generate_stream_completed_keepalive")[0], ms=[4, 200, 200])
    return b.finish().render()


def http_generate_stream_cancelled() -> bytes:
    (x,) = exchanges("04a_disconnect_after_2_events_tokens")
    b = Builder().start(grpc=False, http=True)
    b.http_call("c1.1", x)
    b.http_request("c1.1", x)
    b.http_reply("c1.1", x, ms=[14, 300])
    b.http_cancel("c1.1", "client_disconnect", ms=0.3)
    b.http_end("c1.1", x, cause="client_disconnect", ms=0.2)
    return b.finish().render()


def http_error_under_200() -> bytes:
    b = Builder().start(grpc=False, http=True)
    b.http_exchange("c1.1", exchanges("03c_generate_stream_error_after_first")[0], ms=[3, 200, 200])
    return b.finish().render()


def http_error_first() -> bytes:
    b = Builder().start(grpc=False, http=True)
    b.http_exchange("c1.1", exchanges("03b_generate_stream_error_first")[0], ms=300)
    return b.finish().render()


def http_silent() -> bytes:
    b = Builder().start(grpc=False, http=True)
    b.http_exchange("c1.1", exchanges("03d_generate_stream_silent")[0], ms=500)
    return b.finish().render()


def http_mixed() -> bytes:
    b = Builder().start(grpc=True, http=True)
    b.call("c1.1")
    b.request("c1.1", "g1", max_tokens=1)
    infer, stream = exchanges("01_unary_infer_tritonclient")[0], exchanges("03a_generate_stream_completed_keepalive")[0]
    b.http_call("c2.1", infer)
    b.http_request("c2.1", infer)
    b.response("c1.1", "g1", "hi-0")
    b.http_reply("c2.1", infer, ms=2)
    b.http_end("c2.1", infer)
    b.response("c1.1", "g1", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    b.http_exchange("c2.2", stream, ms=[4, 200, 200])
    return b.finish().render()


#: An OpenAI-compatible stream. No such server runs on these machines: the bodies are written from the
#: public format (OpenAI's API reference; vLLM and Triton's OpenAI frontend send these chunks).
_OPENAI_CHUNK = (b'data: {"id":"cmpl-7","object":"text_completion","created":1780000000,"model":"llama",'
                 b'"choices":[{"index":0,"text":"%s","logprobs":null,"finish_reason":%s}]}\n\n')  # fmt: skip


def http_openai_stream() -> bytes:
    body = b'{"model":"llama","prompt":"Hi","max_tokens":2,"stream":true}'
    chunks = [_OPENAI_CHUNK % (b"Hel", b"null"), _OPENAI_CHUNK % (b"lo", b'"length"'), b"data: [DONE]\n\n"]
    x = Exchange(method="POST /v1/completions",
                 headers=[(b"host", b"127.0.0.1:8010"), (b"content-type", b"application/json"),
                          (b"content-length", b"%d" % len(body))],
                 body=body, status=200,
                 reply_headers=[(b"content-type", b"text/event-stream; charset=utf-8"),
                                (b"transfer-encoding", b"chunked")],
                 reply=b"".join(chunks), clean_end=True, pieces=chunks)  # fmt: skip
    b = Builder().start(grpc=False, http=True)
    b.http_exchange("c1.1", x, ms=[30, 20, 1])
    return b.finish().render()


@dataclass(frozen=True)
class HttpScenario:
    """An HTTP golden file and what it holds. Not yet in ``replay check``'s expectations (SCENARIOS): the
    outcome model of HTTP calls comes with replay/machine's HTTP support."""

    build: Callable[[], bytes]
    about: str


HTTP_SCENARIOS: dict[str, HttpScenario] = {
    "unary_json.jsonl": HttpScenario(
        http_unary_json, "tritonclient.http infer, JSON tensors: request id `req-binary-False`, 200 with one reply"),
    "unary_binary.jsonl": HttpScenario(
        http_unary_binary, "tritonclient.http infer with binary data (Inference-Header-Content-Length both ways): "
        "labels from the JSON part only"),
    "generate_stream_completed.jsonl": HttpScenario(
        http_generate_stream_completed, "generate_stream `gs-1`: 3 events, then the chunked terminator: the last "
        "event final"),
    "generate_stream_cancelled.jsonl": HttpScenario(
        http_generate_stream_cancelled, "generate_stream `04a-mid`: the client closed after 2 events (no "
        "terminator): no final, `cancel` client_disconnect with the request in_flight and responded, call_end "
        "status 200 (the head had reached the client)"),
    "error_under_200.jsonl": HttpScenario(
        http_error_under_200, "generate_stream `gs-err2` (fail_midstream): 200, 2 events, then an error event "
        "and the terminator: the error event is the final one"),
    "error_first.jsonl": HttpScenario(
        http_error_first, "generate_stream `gs-err0`: the error is the first response: 400, still SSE-framed, one "
        "error event (final), call_end `error` with the error as details"),
    "silent.jsonl": HttpScenario(
        http_silent, "generate_stream `gs-silent` (silent): 200 and only the terminator: no event, clean end"),
    "mixed.jsonl": HttpScenario(
        http_mixed, "gRPC ModelStreamInfer on c1 and HTTP infer then generate_stream (keep-alive) on c2, "
        "interleaved: one capture, one seq"),
    "openai_stream.jsonl": HttpScenario(
        http_openai_stream, "OpenAI `/v1/completions` stream (scripted from the public format: no such server "
        "here): 2 chunks then `data: [DONE]`, which is final"),
}


@dataclass(frozen=True)
class Scenario:
    """A golden file: what it exercises and what ``replay check --json`` must say about it."""

    build: Callable[[], bytes]
    about: str
    exit: int
    #: (request_id, outcome, violations) in capture order
    requests: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    unattributable: tuple[str, ...] = ()
    gaps: tuple[str, ...] = ()
    #: for exit 2: the line the one-line error must name
    error_line: int | None = None


SCENARIOS: dict[str, Scenario] = {
    "one_response.jsonl": Scenario(
        one_response,
        "one request answered by one text response carrying final=true (meta payload)",
        0,
        (("r1", "completed", ()),),
    ),
    "many_responses.jsonl": Scenario(
        many_responses,
        "5 text responses then an empty final (full payload: feedable with text)",
        0,
        (("r1", "completed", ()),),
    ),
    "no_text.jsonl": Scenario(
        no_text,
        "`silent`: the empty final is the only response; completed with 0 text responses",
        0,
        (("quiet", "completed", ()),),
    ),
    "interleaved.jsonl": Scenario(
        interleaved,
        "two requests on one stream, responses interleaved, attributed by request id",
        0,
        (("a", "completed", ()), ("b", "completed", ())),
    ),
    "error_midstream.jsonl": Scenario(
        error_midstream,
        "`fail_midstream`: 2 texts then ONE response with error_message and final=true, "
        "stream status OK -> outcome error (a fact, no violation)",
        0,
        (("f1", "error", ()),),
    ),
    "response_after_final.jsonl": Scenario(
        response_after_final,
        "a text response after the request's empty final",
        1,
        (("r1", "completed", ("response_after_final",)),),
    ),
    "missing_final.jsonl": Scenario(
        missing_final,
        "stream ends OK: `due` (empty finals enabled) never got its final -> incomplete + "
        "missing_final; `not-due` (not enabled) -> unconfirmed, no violation",
        1,
        (("due", "incomplete", ("missing_final",)), ("not-due", "unconfirmed", ())),
    ),
    "stream_cancel.jsonl": Scenario(
        stream_cancel,
        "stream-wide client cancel (RST CANCEL) with `a` answering and `b` not yet: both "
        "cancelled; `done`, finished before, stays completed",
        0,
        (("done", "completed", ()), ("a", "cancelled", ()), ("b", "cancelled", ())),
    ),
    "stream_cancel_v1.jsonl": Scenario(
        stream_cancel_v1,
        "stream_cancel as schema version 1 wrote it (the cancel's `responded` named `executing`): read "
        "through the upgrade chain, same outcomes",
        0,
        (("done", "completed", ()), ("a", "cancelled", ()), ("b", "cancelled", ())),
    ),
    "stream_cancel_v2.jsonl": Scenario(
        stream_cancel_v2,
        "stream_cancel as schema version 2 wrote it (dense: every field, nulls included): read through "
        "the upgrade chain, same outcomes",
        0,
        (("done", "completed", ()), ("a", "cancelled", ()), ("b", "cancelled", ())),
    ),
    "deadline.jsonl": Scenario(
        deadline,
        "grpc-timeout 500m reached mid-stream -> deadline",
        0,
        (("slow", "deadline", ()),),
    ),
    "client_disconnect.jsonl": Scenario(
        client_disconnect,
        "the client's connection dropped mid-stream -> disconnected",
        0,
        (("r1", "disconnected", ()),),
    ),
    "upstream_disconnect.jsonl": Scenario(
        upstream_disconnect,
        "Triton's connection dropped mid-stream (client got UNAVAILABLE) -> disconnected",
        0,
        (("r1", "disconnected", ()),),
    ),
    "proxy_shutdown.jsonl": Scenario(
        proxy_shutdown,
        "the proxy's drain timeout ended an open stream -> interrupted",
        0,
        (("r1", "interrupted", ()),),
    ),
    "unattributable.jsonl": Scenario(
        unattributable,
        "two in-flight requests with id `dup` (one id group: its response is counted for the group, "
        "both unconfirmed), a response for an id never sent (unknown_id) and one without id when no "
        "request without id was sent (empty_id): listed as unattributable, never merged",
        1,
        (("dup", "unconfirmed", ()), ("dup", "unconfirmed", ())),
        unattributable=("unknown_id", "empty_id"),
    ),
    "idless_error_finals.jsonl": Scenario(
        idless_error_finals,
        "10 requests with id \"\" on one stream, 10 error responses with final=true, OK end: one id "
        "group whose finals are all errors -> each request error",
        0,
        (("", "error", ()),) * 10,
    ),
    "idless_mixed_ends.jsonl": Scenario(
        idless_mixed_ends,
        "10 requests with id \"\" in flight together, 7 text finals and 3 error finals: each request "
        "`group` (known only for the group: ended 7 completed, 3 error), a warning, exit 0",
        0,
        (("", "group", ()),) * 10,
    ),
    "idless_interleaved_texts.jsonl": Scenario(
        idless_interleaved_texts,
        "two requests with id \"\": texts, an error without final, texts, two finals: the group's "
        "error cannot be placed -> each `group` with the group's counts",
        0,
        (("", "group", ()), ("", "group", ())),
    ),
    "idless_errors_without_final.jsonl": Scenario(
        idless_errors_without_final,
        "two requests with id \"\" in flight together, two error responses without final, OK end (Triton "
        "QA's decoupled_execute_error): whose errors they were the wire cannot say -> each `group`, the "
        "group ended `2 unconfirmed or error`, its 2 responses shown on each row, a warning, exit 0",
        0,
        (("", "group", ()),) * 2,
    ),
    "idless_mixed_ids.jsonl": Scenario(
        idless_mixed_ids,
        "`a` and two requests with id \"\" on one stream: `a` exact; the \"\" group both completed",
        0,
        (("a", "completed", ()), ("", "completed", ()), ("", "completed", ())),
    ),
    "idless_after_cancel.jsonl": Scenario(
        idless_after_cancel,
        "a request with id \"\" cancelled with its stream, then one on a new stream: cancelled, then "
        "completed (exact: alone in flight)",
        0,
        (("", "cancelled", ()), ("", "completed", ())),
    ),
    "idless_sequence.jsonl": Scenario(
        idless_sequence,
        "3 requests with id \"\" sent one at a time on one stream: each attributed exactly, completed",
        0,
        (("", "completed", ()),) * 3,
    ),
    "error_then_final.jsonl": Scenario(
        error_then_final,
        "text, an error response without final, more text, then the final: error, no violation",
        0,
        (("ef", "error", ()),),
    ),
    "error_without_final.jsonl": Scenario(
        lambda: error_without_final(False),
        "an error response without final and nothing more, OK end, empty finals not enabled: error "
        "with the `missing_final` note (Triton drops an empty final: not provably missing), exit 0",
        0,
        (("en", "error", ()),),
    ),
    "error_without_final_due.jsonl": Scenario(
        lambda: error_without_final(True),
        "as error_without_final with empty final responses enabled: the final was due -> error + "
        "missing_final violation, exit 1",
        1,
        (("en", "error", ("missing_final",)),),
    ),
    "restart_after_cancel.jsonl": Scenario(
        restart_after_cancel,
        "`job-1` cancelled on one stream, then sent again on a new stream -> restarted_after_cancel on the new request",
        1,
        (("job-1", "cancelled", ()), ("job-1", "completed", ("restarted_after_cancel",))),
    ),
    "unary.jsonl": Scenario(
        unary,
        "ServerLive (a call, not a request), ModelInfer OK -> completed with final null, "
        "ModelInfer NOT_FOUND without response -> error",
        0,
        (("e1", "completed", ()), ("e2", "error", ())),
    ),
    "gaps.jsonl": Scenario(
        gaps,
        "a `gap` record (the proxy dropped 3 records; seq stays gap-free around it) and 2 seq numbers "
        "missing (lines lost from the file afterwards): both reported, exit 0; r1 was open when the 3 were "
        "dropped, so its outcome is unknown (recorded as completed)",
        0,
        (("r1", "unknown", ()),),
        gaps=("gap_record", "seq_gap"),
    ),
    "lost_request.jsonl": Scenario(
        lost_request,
        "3 records lost from an id-less stream (a second request among them): the request open then is "
        "unknown (recorded as completed); the second final (response_after_final) and a response for an id "
        "never seen are listed as after the loss, not counted: exit 0",
        0,
        (("", "unknown", ()),),
        unattributable=("unknown_id",),
        gaps=("seq_gap",),
    ),
    "proxy_killed.jsonl": Scenario(
        proxy_killed,
        "no capture_end (proxy killed): open request incomplete without violation, the "
        "finished one completed; missing_capture_end reported",
        0,
        (("open", "incomplete", ()), ("done", "completed", ())),
        gaps=("missing_capture_end",),
    ),
    "truncated_last_line.jsonl": Scenario(
        truncated_last_line,
        "the last line (capture_end) cut in half: skipped with a warning, exit 0",
        0,
        (("r1", "completed", ()),),
        gaps=("missing_capture_end",),
    ),
    "too_new.jsonl": Scenario(
        too_new,
        "line 2 written by a newer schema version: exit 2 naming file and line",
        2,
        error_line=2,
    ),
    "garbled_middle.jsonl": Scenario(
        garbled_middle,
        "line 3 is not JSON: exit 2 naming file and line",
        2,
        error_line=3,
    ),
}


def readme() -> str:
    """tests/data/README.md: one line per golden file."""
    lines = [
        "# Golden synthetic captures",
        "",
        "Generated by `python -m tests.data.make_golden` (do not edit by hand; "
        "tests/replay/machine/test_golden.py checks that regeneration gives no diff).",
        "Each line: file, exit code of `replay check`, what it exercises and the expected outcomes.",
        "HTTP captures (schema 4, built from real Triton 2.51 HTTP exchanges) are in `http/`, listed in its README.",
        "",
    ]
    for name, s in SCENARIOS.items():
        outcomes = ", ".join(
            f"{rid or '(no id)'}={outcome}" + (f" [{', '.join(v)}]" if v else "") for rid, outcome, v in s.requests
        )
        extra = ""
        if s.unattributable:
            extra += f"; unattributable: {', '.join(s.unattributable)}"
        if s.gaps:
            extra += f"; gaps: {', '.join(s.gaps)}"
        tail = f" -> {outcomes}{extra}" if outcomes or extra else ""
        lines.append(f"- `{name}` (exit {s.exit}): {s.about}{tail}")
    return "\n".join(lines) + "\n"


def render() -> dict[str, bytes]:
    """Every generated file of tests/data, by name."""
    files = {name: s.build() for name, s in SCENARIOS.items()}
    files["README.md"] = readme().encode()
    return files


def http_readme() -> str:
    """tests/data/http/README.md: one line per HTTP golden file."""
    lines = [
        "# Golden HTTP captures",
        "",
        "Generated by `python -m tests.data.make_golden` (do not edit by hand; "
        "tests/replay/capture/test_http_golden.py checks that regeneration gives no diff).",
        "Each call is a real exchange with tritonserver 2.51's HTTP port (tests/proxy/triton/data/http), labelled "
        "by proxy/triton/http_labels.py; the OpenAI one is scripted from the public format.",
        "What `replay check` says of each: tests/replay/machine/test_http.py and the `http/` cases of "
        "tests/data/check_table.json.",
        "",
    ]
    lines += [f"- `{name}`: {s.about}" for name, s in HTTP_SCENARIOS.items()]
    return "\n".join(lines) + "\n"


def render_http() -> dict[str, bytes]:
    """Every generated file of tests/data/http, by name."""
    files = {name: s.build() for name, s in HTTP_SCENARIOS.items()}
    files["README.md"] = http_readme().encode()
    return files


def main() -> int:
    for name, data in render().items():
        (HERE / name).write_bytes(data)
    (HERE / "http").mkdir(exist_ok=True)
    for name, data in render_http().items():
        (HERE / "http" / name).write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
