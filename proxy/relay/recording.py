"""Per-call recording, as objects given an emit function: every gRPC message, and late frames.

:class:`MessageRecorder` cuts, labels and records the messages of a call's DATA (the hot path: one
pass per DATA payload); :class:`LateWatch` records what the upstream still sends on a stream after
the proxy forwarded its cancel, or after the upstream ended the call itself. Neither writes anywhere: records leave through the emit function
they were given (the capture writer, through the metrics observer or not), so the protocol core
(:mod:`proxy.relay.core`) and its tests use them alike.
"""

from __future__ import annotations

import base64
import hashlib
import time
import zlib
from collections.abc import Callable
from typing import Any, Final, Literal

from proxy.relay.call import LABEL_KEEP, Call
from proxy.relay.contract import C2S, S2C
from proxy.relay.options import RelayOptions
from proxy.relay.records import make_message
from proxy.triton import labels, pieces
from proxy.triton.redact import redact_request
from proxy.wire.headers import grpc_status, header
from proxy.wire.messages import Assembler
from replay.capture import events as ev
from replay.capture.methods import MODEL_NAMED

#: ``--payload-store side``: messages with fewer stored bytes stay base64 in their line. Below ~1 KiB the
#: side file saves nothing (measured: +0.2-0.9 us per 76-byte message in the writer thread, against
#: -6 us at 1 KiB and -20 us at 4 KiB), and small messages (token streams) compress well inside the
#: zstd frame of their batch, while side-file bytes are stored raw (bench/README.md, issue 18).
SIDE_MIN_BYTES: Final = 1024

#: ``--payload none`` keeps that a response carried an in-band error, not its text.
NONE_ERROR_TEXT: Final = ev.NONE_ERROR_TEXT

_time_ns: Final = time.time_ns

#: Cancelled upstream streams per connection still watched for late frames (oldest forgotten first);
#: as many again of the streams the upstream ended itself.
LATE_WATCH: Final = 256
#: ``late`` records per watched call; then one ``overflow`` record and the call is no longer watched.
LATE_RECORDS = 64


class MessageRecorder:
    """The ``message`` records of one connection's calls, given to ``emit``."""

    __slots__ = ("emit", "opts")

    def __init__(self, opts: RelayOptions, emit: Callable[[Any], None]) -> None:
        self.opts = opts
        self.emit = emit

    def record(self, call: Call, direction: int, data: memoryview) -> None:
        """Cut, label and record every complete message in ``data`` of ``direction`` (``C2S`` or
        ``S2C``, :mod:`proxy.relay.contract`): the hot path's one pass."""
        asm = call.c2s_asm if direction == C2S else call.s2c_asm
        done = asm.feed(data)
        if not done:
            return
        mkind = call.mkind
        payload = self.opts.payload
        t_ns = _time_ns()
        dname: ev.Direction = "c2s" if direction == C2S else "s2c"  # (a Final tuple is built anew, compiled)
        label: Labeler = _LABELERS[mkind][direction] if mkind else _no_labels
        index = call.index
        emit = self.emit
        for flag, length, kept, truncated, digest in done:
            idx = index[direction]
            index[direction] = idx + 1
            fields: dict[str, Any] = {}
            # A long message in pieces (--payload full, side file): labels read its head, as meta does.
            parts: list[bytes] | None
            if isinstance(kept, list):
                parts, body = kept, _head(kept)
            else:
                parts, body = None, kept
            if mkind:
                try:
                    if flag:  # compressed (tritonclient's compression_algorithm): labels read it inflated
                        fields = label(*_inflated(call, direction, body, truncated))
                    elif parts is None:
                        fields = label(body, truncated)
                    else:
                        head = _head_labels(mkind, direction, body, parts)
                        if head is None:  # the head does not say it all: the whole message, as before
                            body, parts = b"".join(parts), None
                            fields = label(body, truncated)
                        else:
                            fields = head
                    if direction == C2S:
                        call.inflight.sent(fields["request_id"])
                    else:
                        call.inflight.answered(fields["request_id"], fields["final"])
                except Exception as e:  # (one handler: mypyc's `except NotDecoded` rejects other exceptions)
                    why = str(e) if type(e) is NotDecoded else f"not a valid {'request' if direction == C2S else 'response'}: {e}"
                    fields = {"decode_error": why}
            elif direction == C2S and not flag and not truncated and call.method in MODEL_NAMED:
                fields = _model_named(call.method, body)
            if payload != "meta":  # (the default mode records the labels as they are)
                if payload == "none":
                    if fields:
                        # Ids, finals, model and "there was an error" drive the request state machine
                        # and the in-flight evidence of cancels; tensor specs and error texts are what
                        # none leaves out.
                        fields.pop("inputs", None)
                        fields.pop("output_tensors", None)
                        if fields.get("error"):
                            fields["error"] = NONE_ERROR_TEXT
                else:  # full: the bytes (or where they go) and their hash
                    opts = self.opts
                    cut, withheld = truncated, False
                    if direction == C2S and mkind and opts.redact_inputs:
                        body, parts, digest, cut, withheld = self._redacted(fields, body, parts, digest, flag, truncated)
                    self._store(fields, body, parts, digest, cut, withheld)
            # Not ev.MessageSeen(...): its frozen __init__ costs ~10x (proxy/relay/records.py).
            emit(make_message(t_ns, call.id, dname, idx, length, bool(flag), fields))

    def _store(
        self, fields: dict[str, Any], body: bytes, parts: list[bytes] | None, digest: str | None, cut: bool,
        withheld: bool,
    ) -> None:  # fmt: skip
        """``--payload full``: the message's bytes (or where they go, up to the byte cap) and their hash."""
        opts = self.opts
        cap = opts.payload_cap
        fields["payload_sha256"] = digest
        shown = body if cap is None else body[:cap]
        if withheld:
            pass
        elif parts is not None:
            fields["payload_at"] = parts  # written with one writev, never joined
        elif len(shown) >= SIDE_MIN_BYTES and opts.payload_store == "side":
            # The bytes ride in payload_at to the writer thread, which puts them in the side
            # file and writes [offset, length] instead (proxy/capture/sidefile.py): no base64.
            fields["payload_at"] = shown
        else:
            fields["payload"] = base64.b64encode(shown).decode("ascii")
        fields["payload_truncated"] = cut or len(shown) < len(body)

    def cut_unfinished(self, call: Call) -> None:
        """The call ended with a message unfinished (a request still uploading, a response still arriving): one
        record of the bytes that arrived (``size``) for each, never labelled, since neither did the upstream have
        the request whole nor the client the response. (The rest of a response that comes after a cancel is the
        late watch's to read: it goes on from a copy, see :meth:`LateWatch.watch`.)"""
        self._cut(call, C2S, call.c2s_asm.take_unfinished())
        self._cut(call, S2C, call.s2c_asm.take_unfinished())

    def _cut(self, call: Call, direction: int, got: tuple[int, int | None, int, list[bytes], str | None] | None) -> None:
        if got is None:
            return
        flag, length, arrived, kept, digest = got
        idx = call.index[direction]
        call.index[direction] = idx + 1
        said = "inside its 5-byte length prefix" if length is None else f"after {arrived} of its {length} bytes"
        fields: dict[str, Any] = {"decode_error": f"{ev.MESSAGE_CUT} ({said})"}
        opts = self.opts
        if opts.payload == "full":
            if direction == C2S and opts.redact_inputs:
                # Withheld: a cut request cannot be proven free of the named tensors.
                self._store(fields, b"", None, None, True, True)
            elif arrived >= LABEL_KEEP and len(kept) > 1 and opts.payload_cap is None and opts.payload_store == "side":
                self._store(fields, b"", kept, digest, True, False)  # to the side file as it came, never joined
            else:
                self._store(fields, b"".join(kept), None, digest, True, False)
        emit = self.emit
        emit(make_message(_time_ns(), call.id, "c2s" if direction == C2S else "s2c", idx, arrived, bool(flag), fields))

    def _redacted(
        self, fields: dict[str, Any], body: bytes, parts: list[bytes] | None, digest: str | None, flag: int,
        truncated: bool,
    ) -> tuple[bytes, None, str | None, bool, bool]:
        """``--redact-input``: a request's bytes with the named tensors cut out (and their hash), or none
        at all when that cannot be proven: (body, parts, digest, cut, withheld)."""
        opts = self.opts
        if parts is not None:
            body = b"".join(parts)  # redaction reads the whole request
        red = None if flag or truncated else redact_request(body, opts.redact_inputs, opts.redact_key)
        if red is None:
            # Cannot prove the named tensors are out of it: store no bytes at all.
            fields.setdefault("decode_error", "payload withheld: cannot redact a cut, compressed or undecodable request")
            return b"", None, None, True, True
        if red[0] is not body:
            body = red[0]
            digest = hashlib.sha256(body).hexdigest()
            fields["inputs"] = red[1]
        return body, None, digest, truncated, False

class NotDecoded(Exception):
    """A message the labels cannot read, and why (its ``decode_error``)."""


def _inflated(call: Call, direction: int, body: bytes, truncated: bool) -> tuple[bytes, bool]:
    """A compressed message's first ``LABEL_KEEP`` bytes inflated, and whether they are a head only (the record
    keeps the bytes as they crossed the wire). gzip and deflate (zlib's format, as grpc writes it) are read;
    another ``grpc-encoding`` is :class:`NotDecoded`. Bounded: a small message may inflate to any size."""
    headers = call.req_headers if direction == C2S else call.resp_headers
    encoding = header(headers, b"grpc-encoding") if headers is not None else None
    name = encoding.decode("latin-1") if encoding is not None else "none"
    if name not in ("gzip", "deflate"):
        raise NotDecoded(f"compressed message (grpc-encoding {name}): not decoded")
    inflate = zlib.decompressobj(31 if name == "gzip" else 15)
    plain = inflate.decompress(body, LABEL_KEEP)  # (zlib.error: bytes that do not inflate, said as any bad message)
    return plain, truncated or bool(inflate.unconsumed_tail) or not inflate.eof


def _model_named(method: str, body: bytes) -> dict[str, Any]:
    """A readiness, metadata or config request's labels: the model it names (it is no inference request)."""
    try:
        return labels.model_request_labels(method, body)
    except Exception as e:
        return {"decode_error": f"not a valid request: {e}"}


def _labels(mkind: int, direction: int, body: bytes, truncated: bool) -> dict[str, Any]:
    """The Triton labels of one message (raises when it does not decode)."""
    return _LABELERS[mkind][direction](body, truncated)


def _no_labels(body: bytes, truncated: bool) -> dict[str, Any]:
    """Never called: messages of other methods are not labelled (the loop tests the method first)."""
    raise AssertionError("not an inference method")


Labeler = Callable[[bytes, bool], dict[str, Any]]

#: Method kind -> (the labels of a request, of a response): looked up once per read, not per message.
_LABELERS: Final[dict[int, tuple[Labeler, Labeler]]] = {
    labels.UNARY_INFER: (labels.request_labels, labels.response_labels),
    labels.STREAM: (labels.request_labels, labels.stream_response_labels),
}


def _head_labels(mkind: int, direction: int, head: bytes, parts: list[bytes]) -> dict[str, Any] | None:
    """The labels of a long message kept in ``parts``, read from its ``head``; None when the head may
    not hold all of them (the caller then decodes the whole message: labels never depend on how the
    bytes were kept). Streamed responses (labels nested in ``infer_response``) are always decoded whole."""
    if direction == C2S:
        raw = 7  # ModelInferRequest.raw_input_contents
    elif mkind == labels.UNARY_INFER:
        raw = 6  # ModelInferResponse.raw_output_contents
    else:
        return None
    prefix, lost = labels.complete_prefix(head, raw)
    if lost or not pieces.only_field_from(parts, len(prefix), raw):
        return None
    try:
        fields = _labels(mkind, direction, head, True)
    except Exception:
        return None
    return None if "decode_error" in fields else fields


def _head(parts: list[bytes]) -> bytes:
    """The first pieces of a message, joined, up to at least ``LABEL_KEEP`` bytes (what labels read)."""
    n = 0
    for i, p in enumerate(parts):
        n += len(p)
        if n >= LABEL_KEEP:
            return b"".join(parts[: i + 1])
    return b"".join(parts)


class Late:
    """A call watched for frames the upstream still sends: after the proxy forwarded its cancel
    (``after`` ``"cancel"``), or after the upstream ended it itself (``"end"``)."""

    __slots__ = ("after", "asm", "call_id", "mkind", "records", "rst_ok", "t_rst")

    def __init__(
        self, call_id: str, mkind: int, asm: Assembler | None = None, after: Literal["cancel", "end"] = "cancel",
        t_ns: int = 0, rst_ok: bool = False,
    ) -> None:  # fmt: skip
        self.call_id = call_id
        self.mkind = mkind
        self.after = after
        #: (monotonic) when the cancel went upstream, or when the call ended
        self.t_rst = t_ns or time.monotonic_ns()
        self.asm = asm if asm is not None else Assembler(LABEL_KEEP, False)
        self.records = 0
        #: One RST_STREAM(NO_ERROR) still passes unrecorded: RFC 9113 8.1 lets a server send it right
        #: after a complete response (a healthy server does; it is no evidence of anything).
        self.rst_ok = rst_ok


class LateWatch:
    """One connection's cancelled and ended calls, watched for frames the upstream still sends: ``late`` records."""

    __slots__ = ("conn_id", "emit", "ended", "ended_before", "watched")

    def __init__(self, emit: Callable[[Any], None], conn_id: str = "") -> None:
        self.emit = emit
        #: The connection's id: a call's id is ``{conn_id}.{stream id}`` (:class:`Call`).
        self.conn_id = conn_id
        #: upstream stream id -> cancelled call still watched (insertion = age order)
        self.watched: dict[int, Late] = {}
        #: upstream stream id -> one int, (monotonic ns of its end << 3) | (method kind << 1) | (1 if it
        #: ended with a complete response), of the last calls the upstream ended itself. One int because
        #: every call ends and this is on its path: no tuple, no Call kept alive (a dict of ints is not
        #: tracked by the garbage collector; keeping the Calls cost ~5 % per unary call). A :class:`Late`
        #: is made only if a frame comes after the end (Triton 2.51 sends a deadline's trailers and
        #: RST_STREAM four times).
        self.ended: dict[int, int] = {}
        #: The previous ``ended`` (a generation: at most LATE_WATCH..2*LATE_WATCH are remembered). Every
        #: call ends, so forgetting goes by whole generations: no eviction per call.
        self.ended_before: dict[int, int] = {}

    def watch(self, call: Call) -> None:
        """The call's cancel went upstream: frames on its stream from now on are late."""
        if len(self.watched) >= LATE_WATCH:
            # Triton usually sends nothing after our RST: old entries would otherwise live as long
            # as the connection.
            del self.watched[next(iter(self.watched))]
        # A message cut by the cancel: its tail arrives late and must not be read as a new one. (A copy: the call
        # records what arrived of it before the cancel, as cut, and forgets it.)
        self.watched[call.sid] = Late(call.id, call.mkind, call.s2c_asm.detached(LABEL_KEEP) if call.s2c_asm.partial else None)

    def end(self, call: Call, complete: bool, t_end: int) -> None:
        """The upstream ended the call at ``t_end`` (monotonic ns; ``complete``: with END_STREAM, else
        with RST_STREAM): frames on its stream from now on are late, ``after: end``. (The core does
        this inline for trailers, the way every call ends.)"""
        ended = self.ended
        if len(ended) >= LATE_WATCH:
            ended = self.next_generation()
        ended[call.sid] = t_end << 3 | call.mkind << 1 | complete

    def next_generation(self) -> dict[int, int]:
        """``ended`` is full: it becomes ``ended_before`` (the older one forgotten); the new, empty one."""
        self.ended_before, self.ended = self.ended, {}
        return self.ended

    def knows(self, sid: int) -> bool:
        """Whether frames on the upstream stream ``sid`` are late (it is watched, or ended recently)."""
        return sid in self.watched or sid in self.ended or sid in self.ended_before

    def frame(self, sid: int, kind: str, data: Any, end_stream: bool) -> None:
        """A frame the upstream sent on a watched stream: recorded as ``late``.

        It is passed on like every frame (the client's HTTP/2 stack discards frames on a stream it
        reset, RFC 9113 5.1, and counts them for flow control; a header block must reach it for
        HPACK's sake).
        """
        late = self.watched.get(sid)
        if late is None:
            end = self.ended.pop(sid, None)
            if end is None:
                end = self.ended_before.pop(sid)
            late = Late(f"{self.conn_id}.{sid}", end >> 1 & 3, None, "end", end >> 3, bool(end & 1))
            if len(self.watched) >= LATE_WATCH:
                del self.watched[next(iter(self.watched))]
            self.watched[sid] = late
        if late.rst_ok:
            late.rst_ok = False
            if kind == "rst" and data == 0:  # NO_ERROR, right after the complete response: allowed
                return
        since = (time.monotonic_ns() - late.t_rst) / 1e6
        if kind == "data":
            for flag, length, kept, truncated, _ in late.asm.feed(data):
                body = b"".join(kept) if isinstance(kept, list) else kept
                fields: dict[str, Any] = {}
                if late.mkind and not flag:
                    try:
                        if late.mkind == labels.STREAM:
                            got = labels.stream_response_labels(body, truncated)
                        else:
                            got = labels.response_labels(body, truncated)
                        fields = {"request_id": got["request_id"], "final": got["final"], "error": got.get("error")}
                    except Exception:
                        # A late message that does not decode is still recorded, by size.
                        pass
                self._emit(sid, late, "message", length, since, **fields)
        elif kind == "headers":
            headers: list[tuple[bytes, bytes]] = data
            size = sum(len(k) + len(v) for k, v in headers)
            error = None
            status, details = grpc_status(headers)
            if status is not None:
                error = status.decode("latin-1") + (" " + details if details else "")
            self._emit(sid, late, "trailers" if end_stream else "headers", size, since, error=error)
        else:
            self._emit(sid, late, "rst", 0, since, rst_code=int(data))
        if end_stream and late.after == "cancel":
            # The upstream's answer to the cancel is complete. (A call it ended itself stays watched:
            # what repeats its end is what this evidence is for.)
            self.watched.pop(sid, None)

    def _emit(self, sid: int, late: Late, frame: str, size: int, since: float, **fields: Any) -> None:
        if sid not in self.watched:
            return
        late.records += 1
        if late.records > LATE_RECORDS:
            frame, size, fields = "overflow", 0, {}
            del self.watched[sid]
        self.emit(
            ev.LateFrameSeen(t_ns=time.time_ns(), call=late.call_id, frame=frame, size=size,  # type: ignore[arg-type]
                             since_cancel_ms=since, after=late.after, **fields)
        )  # fmt: skip
