"""The HTTP/1.1 protocol core (Triton's HTTP port): sans-IO, speaking :mod:`proxy.relay.contract`.

Bytes pass verbatim: every read is written to the other side in the first step of its input, and
parsed and recorded in the next (``more``), so forwarding never waits for recording and nothing
h11 parsed is ever serialized again. h11 is a participant, not an observer, so the core runs one
``h11.Connection`` per direction as an observer: a SERVER-role one fed the client's bytes, a
CLIENT-role one fed the upstream's, each parsed event mirrored into the other role's ``send`` (its
output discarded) so both state machines move as the real peers' do, and both drained after
``start_next_cycle`` (a read may hold the end of one response and the start of the next).

One exchange at a time is a call (``<conn>.<n>``); pipelined requests wait in h11's buffer (their
bytes went upstream at once: Triton answers them in order, and cuts an open ``generate_stream``
when one arrives behind it, which is what the capture then shows). Bodies are never held whole:
only the head a label reads (``http_labels.LABEL_CAP``, or the ``--payload full`` cap), hashed as
it passes. An event stream's events are recorded one by one; an event's record waits for the next
event or the body's end, which decides its ``final`` (:func:`proxy.triton.http_labels.event_final`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

import h11

from proxy.relay.contract import CLIENT, OWN_ANSWER, UPSTREAM, Close, Log, Output, Shared, WriteEof
from proxy.relay.http1_lifecycle import Exchange, ExchangeInput, exchange_after
from proxy.relay.lifecycle import (
    CLIENT_LIVE,
    UPSTREAM_LIVE,
    Client,
    ClientInput,
    Upstream,
    UpstreamInput,
    client_after,
    upstream_after,
)
from proxy.relay.options import REDACTED
from proxy.relay.recording import NONE_ERROR_TEXT, SIDE_MIN_BYTES
from proxy.relay.records import make_call_end, make_call_start, make_half_close, make_message
from proxy.triton import http_labels, http_redact
from proxy.triton.sse import SseEvent, SseSplitter
from replay.capture import events as ev
from replay.capture.events import (
    BODY_BEFORE_REPLY,
    BODY_CUT,
    BODY_REST,
    HALF_CLOSE_ANSWERED,
    HALF_CLOSE_DETAILS,
)

#: Most bytes of an unfinished request or response head (or chunk header) the parser holds; a head
#: still unfinished beyond it is a protocol_error of its sender (docs/recording.md). Triton 2.51 takes
#: a head of any size (8 MiB of 1 KiB lines answered; only a single line of 8 KiB or more makes it
#: close): the limit bounds the proxy's memory per connection at far beyond what real clients send,
#: rather than refusing heads Triton would serve (h11's default, 16 KiB, did).
MAX_HEAD = 1 << 20

#: The HTTP versions the port speaks (h11 parses ``PRI * HTTP/2.0`` as a request: refused here).
_VERSIONS = (b"1.0", b"1.1")

_time_ns = time.time_ns


def _text(b: bytes) -> str:
    return b.decode("latin-1")


class _Body:
    """One body (or event) of a call as it passes: its size, the head labels read, its hash."""

    __slots__ = ("digest", "keep", "kept", "size")

    def __init__(self, keep: int, hashing: bool) -> None:
        self.keep = keep
        self.kept = bytearray()
        self.size = 0
        self.digest: Any = hashlib.sha256() if hashing else None

    def feed(self, data: bytes) -> None:
        self.size += len(data)
        room = self.keep - len(self.kept)
        if room > 0:
            self.kept += data[:room]
        if self.digest is not None:
            self.digest.update(data)

    @property
    def truncated(self) -> bool:
        return self.size > len(self.kept)


class Http1Call:
    """One request/response exchange."""

    __slots__ = (
        "body_c2s", "body_s2c", "early", "events", "final_seen", "first_error", "half_close", "has_body", "head_body",
        "id", "index", "keep10", "method", "pending", "raw_events", "req_headers", "request_id", "resp_headers", "resp_keep", "responded", "sse",
        "status", "t0", "trailers",
    )  # fmt: skip

    def __init__(self, call_id: str, method: str, req_headers: list[tuple[bytes, bytes]]) -> None:
        self.id = call_id
        self.method = method
        self.req_headers = req_headers
        self.t0 = time.monotonic_ns()
        self.index = [0, 0]
        self.body_c2s: _Body | None = None
        self.body_s2c: _Body | None = None
        self.has_body = False
        #: The request body's start was recorded before the body ended (Triton answered early):
        #: ``body_c2s`` then holds only the rest.
        self.early = False
        #: An HTTP/1.0 request asking for keep-alive (h11 never keeps 1.0 alive; Triton 2.51 does).
        self.keep10 = False
        #: The response leaves the connection open (no ``Connection: close``; HTTP/1.1 or ``keep-alive``).
        self.resp_keep = False
        #: A HEAD reply that came with a body all the same, this long (:meth:`Http1Core._head_reply_body`).
        self.head_body = 0
        self.request_id = ""
        self.resp_headers: list[tuple[bytes, bytes]] | None = None
        self.status: int | None = None
        self.sse: SseSplitter | None = None
        #: The event seen last, not yet recorded (the next event or the body's end decides its final).
        #: (event, its raw bytes under ``--payload full``, cut short by the connection's end)
        #: The event held back (until what follows it is known), its bytes, whether it was cut, and when its
        #: last byte was read: its record's time.
        self.pending: tuple[SseEvent, bytes | None, bool, int] | None = None
        #: The client's FIN (its ``half_close`` record), held while ``pending`` is: the event came first.
        self.half_close: ev.HalfClosed | None = None
        #: ``--payload full``: raw bytes of the event stream not yet given to an event.
        self.raw_events: bytearray | None = None
        self.events = 0
        self.responded = False
        self.final_seen = False
        self.trailers: list[tuple[bytes, bytes]] | None = None
        #: The error of the first reply or event (``details`` when the status is 400 or more).
        self.first_error: str | None = None

    def elapsed_ms(self) -> float:
        return (time.monotonic_ns() - self.t0) / 1e6

    @property
    def inflight(self) -> Http1Call:
        """What the admin service reads of a call's requests (a gRPC call's ``inflight``): this call itself."""
        return self

    def snapshot(self) -> tuple[list[str], list[str]]:
        """``(in_flight, responded)`` as :meth:`proxy.triton.inflight.InFlight.snapshot` says them: the one
        request of the exchange until its final response (its id, ``""`` when it has none; none before its
        body ended), and it again once it had a response."""
        if self.final_seen or self.index[0] == 0:
            return [], []
        return [self.request_id], [self.request_id] if self.responded else []


class Http1Core:
    """One client connection to Triton's HTTP port and the upstream connection opened for it."""

    def __init__(
        self,
        shared: Shared,
        conn_id: str,
        peer: str = "",
        client_subject: str | None = None,
        buffered: Callable[[], int] = lambda: 0,
    ) -> None:
        self.shared = shared
        self.emit = shared.emit
        self.emit_message = shared.emit_message
        self.opts = shared.options
        self.conn_id = conn_id
        self.peer = peer
        self.client_subject = client_subject
        self._buffered = buffered
        #: The client's side, parsed as a server would (fed the client's bytes).
        self.c_srv = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        #: The upstream's side, parsed as a client would (fed the upstream's bytes).
        self.u_cli = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self.up = Upstream.CONNECTING
        self.client = Client.OPEN
        self.x = Exchange.IDLE
        #: The open call, by its ordinal (the admin service lists ``calls``).
        self.calls: dict[int, Any] = {}
        self.call: Http1Call | None = None
        self._n = 0
        self._out = Output()
        #: The read of the current input, written already, still to parse (direction, bytes).
        self._parse: tuple[str, bytes] | None = None
        self._refusing: str | None = None
        #: The client shut its writing half and the proxy passed that on to Triton: microseconds from
        #: reading the FIN to asking for it upstream, else None.
        self._client_eof_us: float | None = None
        #: Reads pipelined requests Triton will never answer, once the connection is ending
        #: (:meth:`_never_answered`), and how they end: (cause, forwarded upstream).
        self._dropped: h11.Connection | None = None
        self._dropped_cause = ("upstream_disconnect", False)
        self._dropped_us: float | None = None  # when their ending went upstream (the client's FIN): that long after it was read
        self._after_close = False  # the client sent bytes after its own last request (said once in the log)
        full = self.opts.payload == "full"
        self._keep = max(http_labels.LABEL_CAP, self.opts.payload_cap or (1 << 62)) if full else http_labels.LABEL_CAP
        self._hashing = full

    # --- inputs ---------------------------------------------------------------------------------

    def _begin(self) -> Output:
        out = self._out
        out.c2s = out.s2c = None
        out.commands = []
        out.more = False
        return out

    def receive_c2s(self, data: bytes) -> Output:
        """A read from the client: written upstream at once, parsed in the next step."""
        out = self._begin()
        if self.client not in CLIENT_LIVE:
            return out
        if self.up in UPSTREAM_LIVE:
            out.c2s = data
        self._parse = (CLIENT, data)
        out.more = True
        return out

    def receive_s2c(self, data: bytes) -> Output:
        """A read from the upstream: written to the client at once, parsed in the next step."""
        out = self._begin()
        if self.up not in UPSTREAM_LIVE:
            return out
        if self.client in CLIENT_LIVE:
            out.s2c = data
        self._parse = (UPSTREAM, data)
        out.more = True
        return out

    def resume(self) -> Output | None:
        """The parsing and recording step of the read just written."""
        parse, self._parse = self._parse, None
        if parse is None:
            return None
        out = self._begin()
        side, data = parse
        try:
            if side == CLIENT and self._dropped is not None:
                cause, forwarded = self._dropped_cause
                self._never_answered(cause, forwarded=forwarded, data=data)
            elif side == CLIENT:
                self.c_srv.receive_data(data)
            else:
                self.u_cli.receive_data(data)
            self._drain()
        except Exception as e:  # a bug of ours costs one connection, never the proxy
            self._internal_error(e)
        return out if (out.commands or out.s2c is not None) else None

    def connected(self) -> Output:
        out = self._begin()
        self.up = upstream_after(self.up, UpstreamInput.CONNECTED)
        return out

    def connect_failed(self, reason: str) -> Output:
        """The upstream cannot be reached: the client's next request is answered 502 with the reason."""
        out = self._begin()
        self.up = upstream_after(self.up, UpstreamInput.CONNECT_FAILED)
        self._refusing = reason
        return out

    def lost(self, side: str, exc: Exception | None) -> Output:
        out = self._begin()
        try:
            if side == CLIENT:
                self._client_lost()
            else:
                self._upstream_lost(exc)
        except Exception as e:
            self._internal_error(e)
        return out

    def eof(self, side: str) -> Output:
        """A peer shut its writing half (TCP FIN).

        The client's is passed on to Triton, reading and relaying go on: Triton answers a unary
        request it already holds in full and then closes; it cuts an event stream and closes; it
        closes on a request body cut short. Its close then ends the connection; a call it leaves
        unanswered is the client's doing (``client_disconnect``: a FIN is all a closing client sends
        too, so a close and a half-close look alike until a write to the client fails). Triton's FIN
        is the connection's end.
        """
        learned = time.monotonic_ns()
        out = self._begin()
        if side == CLIENT and self.client in CLIENT_LIVE and self.up in UPSTREAM_LIVE:
            call = self.call
            if call is not None and self.shared.before_cancel is not None:
                # Triton may take the FIN for the call's cancel (it cuts an event stream): where its log
                # ends before it goes on, as for a cancel the proxy forwards.
                self.shared.before_cancel(call.id)
            out.commands.append(WriteEof(UPSTREAM))
            self._client_eof_us = (time.monotonic_ns() - learned) / 1e3
            if call is not None:
                # On the wire when it happened, tied to the open call: what follows (Triton's answer,
                # or its close) is recorded after it, and what came before it before: the request
                # body so far (no more of it can come: cut), and an event held until its final is
                # known (the FIN's record waits for it, with its own time).
                if call.body_c2s is not None:
                    self._record_request(call, BODY_CUT)
                record = make_half_close(_time_ns(), call.id, {})
                if call.pending is not None:
                    call.half_close = record
                else:
                    self.emit(record)
        else:
            if side == UPSTREAM:
                self._close_ends_reply()
            out.commands.append(Close(side))
        return out

    def _close_ends_reply(self) -> None:
        """Triton's FIN ends a reply whose body runs to the close (neither Content-Length nor Transfer-Encoding:
        HTTP/1.0's framing, which Triton 2.51 uses for its empty 200s to an HTTP/1.0 client): the reply is
        whole, as the client read it, and its call ends so. Told to h11, which ends such a body only at the
        close; any other reply still open is cut by the close (``lost`` then says so)."""
        call = self.call
        if call is None or self.u_cli.their_state is not h11.SEND_BODY or not _runs_to_close(call.resp_headers):
            return
        try:
            self.u_cli.receive_data(b"")
            self._drain()
        except Exception as e:
            self._internal_error(e)

    def timer(self, name: str) -> Output:
        return self._begin()  # the core arms no timer

    def goaway(self) -> Output:
        """Shutdown: an idle connection is closed; a call in flight goes on (its connection closes after it)."""
        out = self._begin()
        if self.x is Exchange.IDLE and self.client in CLIENT_LIVE:
            self._client_input(ClientInput.CLOSE)
            out.commands += [Close(CLIENT), Close(UPSTREAM)]
        else:
            self._client_input(ClientInput.GOAWAY)
        return out

    def abort(self, cause: str) -> Output:
        out = self._begin()
        call = self.call
        if call is not None:
            self._cancel(call, cause, forwarded=self.up in UPSTREAM_LIVE)
        self._exchange(ExchangeInput.LOST)
        out.commands += [Close(CLIENT), Close(UPSTREAM)]
        return out

    # --- parsing ----------------------------------------------------------------------------------

    def _drain(self) -> None:
        """Handle every event both parsers hold, cycling when both exchanges are done."""
        while not self._closed():
            moved = self._drain_client()
            if self._closed():
                return
            moved = self._drain_upstream() or moved
            c, u = self.c_srv, self.u_cli
            if _both_done(c) and _both_done(u):
                c.start_next_cycle()
                u.start_next_cycle()
                moved = True
            if not moved:
                return

    def _closed(self) -> bool:
        return self.x is Exchange.CLOSED

    def _drain_client(self) -> bool:
        moved = False
        if self._keep10_ended():
            return moved
        parser = self.c_srv
        if self._client_said_close(parser):
            return moved
        while True:
            try:
                event = parser.next_event()
            except h11.RemoteProtocolError as e:
                self._protocol_error("client", str(e))
                return moved
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return moved
            moved = True
            if type(event) is h11.Request:
                if event.http_version not in _VERSIONS:
                    self._protocol_error("client", f"HTTP/{_text(event.http_version)} is not HTTP/1.x")
                    return moved
                self._request(event)
            elif type(event) is h11.Data:
                call = self.call
                if call is not None and call.body_c2s is not None:
                    call.body_c2s.feed(event.data)
                self._mirror_c2s(h11.Data(data=event.data))
            elif type(event) is h11.EndOfMessage:
                self._mirror_c2s(h11.EndOfMessage())
                self._request_end()
                if self._keep10_ended() or self.c_srv is not parser or self._closed() or self._client_said_close(parser):
                    return moved
            elif type(event) is h11.ConnectionClosed:
                # Not fed: the client's FIN (a close or a half-close) is an input of its own, eof().
                return moved

    def _client_said_close(self, parser: h11.Connection) -> bool:
        """The client's last request is over (``Connection: close``, or HTTP/1.0 without keep-alive): a byte after it
        breaks HTTP/1.1 (RFC 9112 9.6), and Triton 2.51 answers that request and closes, the rest unread. So does
        the proxy: those bytes are left unparsed (h11 would take them for a protocol error, and the proxy closed
        the connection before the answer the client was owed), and the log says they came."""
        if parser.their_state is not h11.MUST_CLOSE:
            return False
        rest, _ = parser.trailing_data
        if rest and not self._after_close:
            self._after_close = True
            self._out.commands.append(Log("warning", "http1_client_bytes_after_close", {"bytes": len(rest)}))
        return True

    def _keep10_ended(self) -> bool:
        """An HTTP/1.0 keep-alive request ended: what follows waits for the next exchange's parser
        (this one, h11, takes any byte after it for a protocol error: HTTP/1.0 is never kept alive to it)."""
        call = self.call
        return call is not None and call.keep10 and self.c_srv.their_state is h11.MUST_CLOSE

    def _drain_upstream(self) -> bool:
        moved = False
        parser = self.u_cli
        while True:
            try:
                event = parser.next_event()
            except h11.RemoteProtocolError as e:
                self._protocol_error("upstream", str(e))
                return moved
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return moved
            moved = True
            if type(event) is h11.InformationalResponse:
                self._mirror_s2c(h11.InformationalResponse(status_code=event.status_code, headers=event.headers,
                                                           reason=event.reason))  # fmt: skip
            elif type(event) is h11.Response:
                self._response(event)
            elif type(event) is h11.Data:
                self._response_data(event.data)
                self._mirror_s2c(h11.Data(data=event.data))
            elif type(event) is h11.EndOfMessage:
                self._mirror_s2c(h11.EndOfMessage())
                self._response_end(list(event.headers.raw_items()) if event.headers else None)
                if self.u_cli is not parser or self._closed():
                    return moved  # fresh parsers (HTTP/1.0 keep-alive): the next request is read first
            elif type(event) is h11.ConnectionClosed:
                return moved

    def _mirror_c2s(self, event: Any) -> None:
        # (Not mirrored when the request never went to h11's upstream side: the proxy is refusing.)
        if self.u_cli.our_state is h11.SEND_BODY:
            self.u_cli.send(event)

    def _mirror_s2c(self, event: Any) -> None:
        if self.c_srv.our_state in (h11.IDLE, h11.SEND_RESPONSE, h11.SEND_BODY):
            self.c_srv.send(event)

    # --- calls ------------------------------------------------------------------------------------

    def _exchange(self, inp: ExchangeInput) -> None:
        self.x = exchange_after(self.x, inp)

    def _client_input(self, inp: ClientInput) -> None:
        self.client = client_after(self.client, inp)

    def _request(self, event: h11.Request) -> None:
        self._exchange(ExchangeInput.REQUEST_HEAD)
        headers, names = self._open_call(event)
        if self._refusing is not None:
            return
        # Mirrored as HTTP/1.1 with a Host: h11 sends nothing else (the bytes went verbatim already).
        mirrored = headers if b"host" in names else [(b"host", b"upstream"), *headers]
        self.u_cli.send(h11.Request(method=event.method, target=event.target, headers=mirrored, http_version="1.1"))

    def _open_call(self, event: h11.Request) -> tuple[list[tuple[bytes, bytes]], set[bytes]]:
        """A request head: its call and ``call_start`` (the call's headers and their names)."""
        self._n += 1
        target = _text(event.target)
        method = f"{_text(event.method)} {target}"
        headers = list(event.headers.raw_items())
        call = Http1Call(f"{self.conn_id}.{self._n}", method, headers)
        names = {k.lower() for k, _ in headers}
        call.has_body = b"content-length" in names or b"transfer-encoding" in names
        call.body_c2s = _Body(self._keep, self._hashing)
        call.keep10 = event.http_version == b"1.0" and b"keep-alive" in _tokens(headers, b"connection")
        self.call = call
        self.calls[self._n] = call
        self.shared.open_calls += 1
        opts = self.opts
        meta = [[_text(k).lower(), REDACTED if opts.redacts(_text(k).lower()) else _text(v)] for k, v in headers]
        self.emit(
            make_call_start(_time_ns(), call.id, self.conn_id, method, self.peer, meta, None, self.client_subject,
                            {"protocol": "http", "http_version": _text(event.http_version)})
        )  # fmt: skip
        return headers, names

    def _request_end(self) -> None:
        call = self.call
        if call is None:
            return
        self._exchange(ExchangeInput.REQUEST_END)
        self._record_request(call, None)
        if self._refusing is not None:
            self._refuse(call)
        elif self.x is Exchange.IDLE:
            self._call_end(call)
            self._after_call(call)

    def _record_request(self, call: Http1Call, partial: str | None) -> None:
        """The request body's ``c2s`` message, once: whole when ``partial`` is None, else only the bytes
        that arrived, ``partial`` (a :data:`~replay.capture.events.PARTIAL_BODY` text) saying so.

        After an early reply recorded the body's start, what remains is the rest: recorded when any
        came, so every byte is counted once and no record claims a byte that did not arrive."""
        body = call.body_c2s
        call.body_c2s = None
        if body is None:
            return
        compressed = http_labels.compressed(call.req_headers)
        if call.early:
            if body.size:
                why = BODY_REST if partial is None else f"{BODY_REST}, cut short by the connection's end"
                self._message(call, 0, body.size, compressed, {"decode_error": why}, body, cut=True)
            return
        if not (call.has_body or body.size):
            return
        fields = http_labels.request_labels(call.method, call.req_headers, bytes(body.kept), truncated=body.truncated)
        if partial is not None:
            known = fields.get("decode_error")
            fields["decode_error"] = partial if not known else f"{partial}; {known}"
        call.request_id = fields.get("request_id") or ""
        self._message(call, 0, body.size, compressed, fields, body, cut=partial is not None)

    def _response(self, event: h11.Response) -> None:
        call = self.call
        if call is None:
            return
        self._exchange(ExchangeInput.RESPONSE_HEAD)
        self._mirror_s2c(h11.Response(status_code=event.status_code, headers=event.headers, reason=event.reason))
        call.status = event.status_code
        call.resp_headers = list(event.headers.raw_items())
        tokens = _tokens(call.resp_headers, b"connection")
        call.resp_keep = b"close" not in tokens and (event.http_version == b"1.1" or b"keep-alive" in tokens)
        if http_labels.is_event_stream(call.resp_headers):
            call.sse = SseSplitter()
            if self._hashing:
                call.raw_events = bytearray()
        else:
            call.body_s2c = _Body(self._keep, self._hashing)

    def _response_data(self, data: bytes) -> None:
        call = self.call
        if call is None:
            return
        if call.sse is not None:
            if call.raw_events is not None:
                call.raw_events += data
            self._events(call, call.sse.feed(data))
        elif call.body_s2c is not None:
            call.body_s2c.feed(data)

    def _events(self, call: Http1Call, events: list[SseEvent], cut: bool = False) -> None:
        """Events just cut from the body: each held back until the next (or the body's end) is known.
        ``cut``: the connection's end cut the body (an unterminated event then says so)."""
        if not events:
            return
        raw = call.raw_events
        t_ns = _time_ns()  # the read that completed them: their records are written later, stamped now
        for event in events:
            piece = None
            if raw is not None:
                piece = bytes(raw[: event.size])
                del raw[: event.size]
            call.responded = True
            self._flush_event(call, last=False, clean=False)
            call.pending = (event, piece, cut and event.unterminated, t_ns)

    def _flush_event(self, call: Http1Call, *, last: bool, clean: bool) -> None:
        """Record the event held back, now that what follows it is known."""
        pending = call.pending
        if pending is None:
            return
        call.pending = None
        event, piece, cut, t_ns = pending
        fields = http_labels.event_labels(call.method, event)
        if cut:
            known = fields.get("decode_error")
            fields["decode_error"] = f"{BODY_CUT}; {known}" if known else BODY_CUT
        final = http_labels.event_final(call.method, event, last=last, clean_end=clean)
        fields["final"] = final
        if final:
            call.final_seen = True
        body = None
        if piece is not None:
            body = _Body(len(piece), True)
            body.feed(piece)
        self._message(call, 1, event.size, False, fields, body, t_ns=t_ns)
        if call.half_close is not None:
            self.emit(call.half_close)
            call.half_close = None

    def _response_end(self, trailers: list[tuple[bytes, bytes]] | None) -> None:
        call = self.call
        if call is None:
            return
        self._head_reply_body(call)
        self._exchange(ExchangeInput.RESPONSE_END)
        call.trailers = trailers
        headers = call.resp_headers or []
        if call.sse is not None:
            self._events(call, call.sse.finish())
            self._flush_event(call, last=True, clean=True)
        elif call.body_s2c is not None:
            body = call.body_s2c
            fields = http_labels.reply_labels(call.method, call.status or 0, headers, bytes(body.kept),
                                              truncated=body.truncated)  # fmt: skip
            call.responded = call.final_seen = True
            self._message(call, 1, body.size, http_labels.compressed(headers), fields, body)
            call.body_s2c = None
        call.final_seen = True
        if self.x is Exchange.IDLE:
            self._call_end(call)
            self._after_call(call)

    def _head_reply_body(self, call: Http1Call) -> None:
        """Triton 2.51 answers HEAD with a body (its 404/405 error JSON), which HTTP forbids. h11, told HEAD, reads
        none, and took those bytes for the next reply's status line: the connection was closed as Triton's
        protocol error, where Triton and its client go on. When the bytes read after the head are the announced
        length of something that is not a reply's start, they are that body: recorded, and left out of the next
        exchange's parser (:meth:`_after_call`). A server that keeps HTTP's rule sends no such bytes."""
        if not call.method.startswith("HEAD ") or call.body_s2c is None or call.resp_headers is None:
            return
        lengths = [v for k, v in call.resp_headers if k.lower() == b"content-length"]
        n = int(lengths[0]) if len(lengths) == 1 and lengths[0].strip().isdigit() else 0
        rest, _ = self.u_cli.trailing_data
        if n and len(rest) >= n and bytes(rest[:5]) != b"HTTP/":
            call.body_s2c.feed(bytes(rest[:n]))
            call.head_body = n

    def _after_call(self, call: Http1Call) -> None:
        """The exchange ended cleanly: does the connection carry another?

        Not when shutdown began (the client was told to go: both sides close now), nor when HTTP/1.x
        ends it (``Connection: close``, HTTP/1.0 without keep-alive: Triton closes it). Requests
        pipelined behind it went to Triton already: each is a call it never answers. An HTTP/1.0
        keep-alive exchange goes on as Triton 2.51 keeps it (h11 would not: fresh parsers take over,
        fed what the old ones held)."""
        c, u = self.c_srv, self.u_cli
        if self.client is Client.GOAWAY:
            self._never_answered("proxy_shutdown", forwarded=True)
            self._exchange(ExchangeInput.LOST)
            self._client_input(ClientInput.CLOSE)
            self._out.commands += [Close(CLIENT), Close(UPSTREAM)]
        elif call.head_body and call.resp_keep and _both_done(c) and _both_done(u):
            self.c_srv = _fresh(h11.SERVER, c)
            self.u_cli = _fresh(h11.CLIENT, u, skip=call.head_body)
        elif _both_done(c) and _both_done(u):
            return
        elif call.keep10 and call.resp_keep:
            self.c_srv = _fresh(h11.SERVER, c)
            self.u_cli = _fresh(h11.CLIENT, u)
        else:
            self._never_answered("upstream_disconnect", forwarded=False)
            self._exchange(ExchangeInput.LOST)

    def _message(self, call: Http1Call, d: int, size: int, compressed: bool, fields: dict[str, Any],
                 body: _Body | None, cut: bool = False, t_ns: int | None = None) -> None:  # fmt: skip
        """One ``message`` record (``cut``: a request body that never ended, or part of one; ``t_ns``: when its
        last byte was read, if not now)."""
        if d == 1:
            if call.index[0] == 0 and not call.early and call.body_c2s is not None:
                # Triton answered before the request body ended: the request's record comes first
                # (what had arrived, marked so), as on the wire; the rest gets a record of its own.
                self._record_request(call, BODY_BEFORE_REPLY)
                call.early = True
                call.body_c2s = _Body(self._keep, self._hashing)
            call.events += 1
            if call.index[1] == 0 and fields.get("error"):
                call.first_error = fields["error"]
        payload = self.opts.payload
        if payload == "none":
            fields.pop("inputs", None)
            fields.pop("output_tensors", None)
            if fields.get("error"):
                fields["error"] = NONE_ERROR_TEXT
        elif payload == "full" and body is not None and body.digest is not None:
            self._store(call, d, fields, body, cut)
        idx = call.index[d]
        call.index[d] = idx + 1
        when = _time_ns() if t_ns is None else t_ns
        self.emit_message(make_message(when, call.id, "c2s" if d == 0 else "s2c", idx, size, compressed, fields))

    def _store(self, call: Http1Call, d: int, fields: dict[str, Any], body: _Body, cut: bool) -> None:
        """``--payload full``: the body's bytes (after ``--redact-input``, cut at ``--payload-cap``) and their hash."""
        kept = bytes(body.kept)
        digest = body.digest.hexdigest()
        if d == 0 and self.opts.redact_inputs:
            red = self._redacted(call, kept, body, cut)
            if isinstance(red, http_redact.Withheld):
                # Cannot prove the named inputs are out of it: store none of its bytes.
                known = fields.get("decode_error")
                fields["decode_error"] = red.why if not known else f"{known}; {red.why}"
                fields["payload_truncated"] = True
                return
            if red.body is not kept:
                kept = red.body
                digest = hashlib.sha256(kept).hexdigest()
                fields["inputs"] = red.inputs
        cap = self.opts.payload_cap
        shown = kept if cap is None else kept[:cap]
        fields["payload_sha256"] = digest
        if len(shown) >= SIDE_MIN_BYTES and self.opts.payload_store == "side":
            fields["payload_at"] = shown
        else:
            fields["payload"] = base64.b64encode(shown).decode("ascii")
        fields["payload_truncated"] = len(shown) < len(kept) or body.truncated

    def _redacted(self, call: Http1Call, kept: bytes, body: _Body, cut: bool
                  ) -> http_redact.Redacted | http_redact.Withheld:  # fmt: skip
        """``--redact-input`` on a request body, which must be whole: the named inputs' data is cut out of it."""
        if cut:
            return http_redact.Withheld("payload withheld: cannot redact a request body that never ended")
        if body.truncated:
            return http_redact.Withheld("payload withheld: cannot redact a request body longer than --payload-cap")
        return http_redact.redact_http_request(call.method, call.req_headers, kept, self.opts.redact_inputs,
                                               self.opts.redact_key)  # fmt: skip

    def _call_end(self, call: Http1Call, cause: str | None = None) -> None:
        """The call's end record (``cause`` None: its response ended cleanly)."""
        if self.call is not call:
            return
        self.call = None
        self.calls.pop(self._n, None)
        self.shared.open_calls -= 1
        status = call.status
        if status is not None and cause is None:
            cause = "ok" if status < 400 else "error"
        details = call.first_error if status is not None and status >= 400 else None
        if details is None and self._client_eof_us is not None:
            if cause == "client_disconnect":
                details = HALF_CLOSE_DETAILS
            elif cause in ("ok", "error"):
                details = HALF_CLOSE_ANSWERED
        if status is not None and (cause in ("ok", "error") or self._reached_client(call)):
            text = str(status)
        else:
            text = ev.STATUS_FOR_CAUSE.get(cause or "", "UNKNOWN")
        resp = call.resp_headers
        headers = [[_text(k).lower(), _text(v)] for k, v in resp] if resp is not None else None
        trailers = [[_text(k).lower(), _text(v)] for k, v in call.trailers] if call.trailers else None
        undelivered = 0 if self.client not in CLIENT_LIVE or not self._buffered() else None
        self.emit(
            make_call_end(_time_ns(), call.id, text, details, cause, trailers, headers, call.elapsed_ms(),
                          call.index[0], call.index[1], None, undelivered,
                          {"http_status": status if self._reached_client(call) else None})
        )  # fmt: skip

    def _reached_client(self, call: Http1Call) -> bool:
        # The head went to the client in the same step it was read (verbatim), unless it was gone.
        return call.status is not None

    def _cancel(self, call: Http1Call, cause: str, *, forwarded: bool, forwarded_us: float | None = None) -> None:
        """The call ends by a cancel-like event (a side went away): recorded, then its end.
        ``forwarded_us``: the ending went upstream already (the client's FIN), that long after it was read."""
        learned = time.monotonic_ns()
        if forwarded and forwarded_us is None and self.shared.before_cancel is not None:
            self.shared.before_cancel(call.id)
        # What arrived of bodies the end cut short is still recorded, marked so: the request's first.
        self._record_request(call, BODY_CUT)
        if call.sse is not None:
            self._events(call, call.sse.finish(), cut=True)
            self._flush_event(call, last=True, clean=False)
        elif call.body_s2c is not None:
            body = call.body_s2c
            call.body_s2c = None
            if body.size:
                headers = call.resp_headers or []
                fields = http_labels.reply_labels(call.method, call.status or 0, headers, bytes(body.kept),
                                                  truncated=body.truncated)  # fmt: skip
                known = fields.get("decode_error")
                fields["decode_error"] = BODY_CUT if not known else f"{BODY_CUT}; {known}"
                call.responded = True
                self._message(call, 1, body.size, http_labels.compressed(headers), fields, body)
        in_flight = [] if call.final_seen else [call.request_id]
        responded = [call.request_id] if in_flight and call.responded else []
        self.emit(
            ev.CallCancelled(
                t_ns=_time_ns(), call=call.id, cause=cause, in_flight=in_flight, responded=responded,  # type: ignore[arg-type]
                rst_code=None, elapsed_ms=call.elapsed_ms(), forwarded_upstream=forwarded,
                upstream_rst_us=(forwarded_us if forwarded_us is not None else (time.monotonic_ns() - learned) / 1e3)
                if forwarded else None,
            )
        )  # fmt: skip
        self._call_end(call, cause)

    # --- how connections end ----------------------------------------------------------------------

    def _client_lost(self) -> None:
        self._client_input(ClientInput.LOST)
        call = self.call
        forwarded = self.up in UPSTREAM_LIVE
        # A connection already ending keeps its cause (the proxy's shutdown, or Triton's close): its
        # open call is a request pipelined behind the last exchange.
        cause = self._dropped_cause[0] if self._dropped is not None else "client_disconnect"
        if call is not None:
            # Closing the upstream connection is how Triton learns of an HTTP cancel.
            self._cancel(call, cause, forwarded=forwarded)
        if forwarded:
            self._never_answered(cause, forwarded=True, ending=True)
        self._exchange(ExchangeInput.LOST)
        self._out.commands.append(Close(UPSTREAM))

    def _upstream_lost(self, exc: Exception | None) -> None:
        if self.up is Upstream.CONNECTING or self.up is Upstream.REFUSING:
            return
        self.up = upstream_after(self.up, UpstreamInput.LOST)
        call = self.call
        if call is not None and self._dropped is not None:
            self._cancel(call, self._dropped_cause[0], forwarded=self._dropped_cause[1])
        elif call is not None and self._client_eof_us is not None:
            # Triton closed after the client's FIN, which the proxy passed on: it cut the call for that.
            self._cancel(call, "client_disconnect", forwarded=True, forwarded_us=self._client_eof_us)
        elif call is not None:
            self._cancel(call, "upstream_disconnect", forwarded=False)
        if self.client in CLIENT_LIVE or self._dropped is not None:
            # (Not after the client broke HTTP/1.x: what it sent after that is no request.)
            if self._dropped is None and self._client_eof_us is not None:
                # Queued behind the call the client's FIN cut, and gone upstream before that FIN: cut by it too.
                self._dropped_cause, self._dropped_us = ("client_disconnect", True), self._client_eof_us
            cause, forwarded = self._dropped_cause  # (upstream_disconnect, not forwarded) unless ending already
            self._never_answered(cause, forwarded=forwarded, ending=True)
        self._exchange(ExchangeInput.LOST)
        if self.client in CLIENT_LIVE:
            self._client_input(ClientInput.CLOSE)
            self._out.commands.append(Close(CLIENT))

    def _never_answered(self, cause: str, *, forwarded: bool, ending: bool = False, data: bytes = b"") -> None:
        """Requests pipelined behind the last call, gone to Triton already, that it never answers: the
        connection ends (``cause``). Each is a call of its own, ended so (Triton drops them when it cuts
        a stream, or closes after ``Connection: close``; the proxy's close drops them when a side is
        lost). Bytes the client sends until the end (``data``) are read the same way; ``ending``: the
        end is now, so a request still arriving ends too, its body cut."""
        parser = self._dropped
        if parser is None:
            parser = self._dropped = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
            rest, _ = self.c_srv.trailing_data
            data = bytes(rest) + data
        self._dropped_cause = (cause, forwarded)
        if data:
            parser.receive_data(data)
        while True:
            try:
                event = parser.next_event()
            except h11.RemoteProtocolError:
                break
            if type(event) is h11.Request:
                self._open_call(event)
            elif type(event) is h11.Data:
                if self.call is not None and self.call.body_c2s is not None:
                    self.call.body_c2s.feed(event.data)
            elif type(event) is h11.EndOfMessage:
                call = self.call
                if call is None:
                    break
                self._record_request(call, None)
                self._cancel(call, cause, forwarded=forwarded, forwarded_us=self._dropped_us)
                if parser.our_state is h11.SEND_RESPONSE:
                    # The parser waits for a response that never comes: pretend one for the next request.
                    parser.send(h11.Response(status_code=503, headers=[(b"content-length", b"0")]))
                    parser.send(h11.EndOfMessage())
                    if not _both_done(parser):
                        break
                    parser.start_next_cycle()
            else:
                break
        if ending and self.call is not None:
            self._cancel(self.call, cause, forwarded=forwarded, forwarded_us=self._dropped_us)

    def _refuse(self, call: Http1Call) -> None:
        """The upstream was unreachable: the proxy answers 502 with the reason and closes."""
        reason = self._refusing or OWN_ANSWER + "upstream unreachable"
        body = ('{"error":' + _json_str(reason) + "}").encode()
        head = (f"HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
                "connection: close\r\n\r\n").encode()  # fmt: skip
        out = self._out
        out.s2c = head + body
        call.status = 502
        call.resp_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                             (b"connection", b"close")]  # fmt: skip
        # As gRPC's refusal: no message (Triton sent none; the proxy's own answer is no evidence of it),
        # the reason in details, the status the client got kept.
        call.first_error = reason
        self._call_end(call, "upstream_disconnect")
        self._exchange(ExchangeInput.LOST)
        self._client_input(ClientInput.CLOSE)
        out.commands.append(Close(CLIENT))

    def _protocol_error(self, side: str, error: str) -> None:
        """A peer broke HTTP/1.x: recorded, its connection closed; the open call ends when it is lost."""
        self._out.commands.append(Log("warning", "http1_protocol_error", {"side": side, "error": error}))
        self.emit(
            ev.ProtocolViolated(
                t_ns=_time_ns(), conn=self.conn_id, side=side,  # type: ignore[arg-type]
                error=error, error_code=0, open_calls=[c.id for c in self.calls.values()],
            )
        )  # fmt: skip
        if side == "upstream":
            if self.up in UPSTREAM_LIVE:
                self.up = upstream_after(self.up, UpstreamInput.VIOLATION)
                call = self.call
                if call is not None:
                    self._cancel(call, "upstream_disconnect", forwarded=True)
                self._exchange(ExchangeInput.LOST)
            self._out.commands.append(Close(UPSTREAM))
            if self.client in CLIENT_LIVE:
                self._client_input(ClientInput.CLOSE)
                self._out.commands.append(Close(CLIENT))
        else:
            # Nothing more it sends is an exchange.
            self._exchange(ExchangeInput.LOST)
            if self.client in CLIENT_LIVE:
                self._client_input(ClientInput.CLOSE)
            self._out.commands.append(Close(CLIENT))
            # Its loss ends the open call (client_disconnect) and closes the upstream.

    def _internal_error(self, e: Exception) -> None:
        self._out.commands.append(Log("exception", "http1_core_error", {"error": repr(e)}, e))
        call = self.call
        if call is not None:
            try:
                self._cancel(call, "proxy_error", forwarded=self.up in UPSTREAM_LIVE)
            except Exception:  # the record of the bug must not raise again
                pass
        self.x = Exchange.CLOSED
        self._out.commands += [Close(CLIENT), Close(UPSTREAM)]


def _both_done(conn: h11.Connection) -> bool:
    return conn.our_state is h11.DONE and conn.their_state is h11.DONE


def _fresh(role: type[h11.CLIENT] | type[h11.SERVER], old: h11.Connection, skip: int = 0) -> h11.Connection:
    """A new parser for the next exchange, holding the bytes ``old`` had not parsed yet (but the first ``skip``)."""
    conn = h11.Connection(role, max_incomplete_event_size=MAX_HEAD)
    rest, _ = old.trailing_data
    rest = rest[skip:]
    if rest:
        conn.receive_data(bytes(rest))
    return conn


def _tokens(headers: list[tuple[bytes, bytes]], name: bytes) -> set[bytes]:
    """The comma-separated tokens of every ``name`` header, lowercased."""
    return {t.strip().lower() for k, v in headers if k.lower() == name for t in v.split(b",")}


def _json_str(s: str) -> str:
    return json.dumps(s)


def _runs_to_close(headers: list[tuple[bytes, bytes]] | None) -> bool:
    """A reply (its head read) whose body ends only at the connection's close (RFC 9112 6.3: no length)."""
    return headers is not None and not any(k.lower() in (b"content-length", b"transfer-encoding") for k, _ in headers)
