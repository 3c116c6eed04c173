"""The HTTP/2 relay's protocol core: bytes of one read in, what to write to each side out. No I/O.

Design (sans-IO, the shape of python-hyper/h2's ``H2Connection`` and of mitmproxy's layers):

- :class:`H2Core` is one client connection, its upstream connection and the calls between them.
  The shell (:mod:`proxy.relay.shell`) owns the sockets and feeds it *inputs*: the bytes of one
  read (:meth:`H2Core.receive_c2s` for the client's, :meth:`H2Core.receive_s2c` for the upstream's),
  the upstream connected or unreachable, a side lost, a timer fired, shutdown, abort. Each input
  returns an :class:`Output`: the bytes to write to the upstream (``c2s``) and to the client
  (``s2c``), at most one write per side, and *commands* (close a side, arm or cancel a timer, a
  log line). Records leave through the emit functions the core is given; it imports no asyncio,
  socket, ssl or threading (an import-linter contract), so its tests feed bytes and read bytes,
  records and commands without an event loop.
- An input may take more than one *step*: ``Output.more`` asks the shell to write, then call
  :meth:`H2Core.resume`. Two things need it. A read whose frames all go on verbatim is written
  before its recording work (labels, records), for latency: step one is the write, step two the
  recording. And a forwarded cancel is written before anything after it is handled: Triton must
  see it first, and ``upstream_rst_us`` is measured to the socket. Inside the
  core a step boundary is a ``yield`` of a job (a generator), so the code reads straight through.
- The lifecycle is explicit: one state per side (:mod:`proxy.relay.lifecycle`), moved only
  through its transition tables, which are tested over every (state, input) pair.
- One decision per read: ``_verbatim_c2s`` / ``_verbatim_s2c`` classify all frames of a read once,
  beside the handlers that drop, rewrite or re-send frames (``_c2s_frame``, ``_s2c_frame``). A verbatim
  read is one slice of the bytes read, written whole; otherwise each handler queues what goes on.
- Per-call recording is done by objects given an emit function (:mod:`proxy.relay.recording`):
  :class:`~proxy.relay.recording.MessageRecorder` (every gRPC message) and
  :class:`~proxy.relay.recording.LateWatch` (frames after a forwarded cancel, or after the upstream
  ended the call: RFC 9113 forbids those, Triton 2.51 sends them at every deadline; passed on verbatim).
- Directions are ``c2s`` (client to server, what the client sends) and ``s2c`` everywhere.

Why frames verbatim and not a gRPC proxy: see :mod:`proxy.relay`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any, Final

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import h2.windows

from proxy.relay.call import Call
from proxy.relay.contract import (
    C2S,
    CLIENT,
    OWN_ANSWER,
    S2C,
    UPSTREAM,
    ArmTimer,
    CancelTimer,
    Close,
    Log,
    Output,
    Shared,
)
from proxy.relay.lifecycle import (
    CLIENT_LIVE,
    Client,
    ClientInput,
    Upstream,
    UpstreamInput,
    client_after,
    upstream_after,
)
from proxy.relay.options import REDACTED
from proxy.relay.recording import LATE_WATCH, LateWatch, MessageRecorder
from proxy.relay.records import make_call_end, make_call_start, make_half_close
from proxy.triton import causes
from proxy.wire import frames as wire
from proxy.wire.headers import Block, grpc_status, header, pairs, status_trailers
from replay.capture import events as ev

#: How long a client may take to close the connection itself after its last call ended.
LINGER_S = 2.0
#: Streams a client may open after the GOAWAY it got (each refused) before that counts as abuse.
KEPT_BACK_LIMIT = 1024
ENHANCE_YOUR_CALM = int(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
_ERROR_NAMES = {int(c): c.name for c in h2.errors.ErrorCodes}

#: Causes for which the proxy itself gives the client a status (the upstream cannot): code, message.
PROXY_ANSWERS: dict[str, tuple[int, str]] = {
    "upstream_disconnect": (14, OWN_ANSWER + "upstream connection lost"),
    "proxy_shutdown": (14, OWN_ANSWER + "proxy shutting down"),
    "proxy_error": (13, OWN_ANSWER + "internal error (see the proxy's log)"),
}

# The states the hot path tests, as globals (an enum member looked up on its class costs ~0.1 us).
_U_OPEN: Final = Upstream.OPEN
_U_ENDING: Final = Upstream.ENDING
_monotonic_ns = time.monotonic_ns
# Frame types and flags the per-frame handlers test (Final: compiled, each is its value in the code).
_DATA: Final = wire.DATA
_HEADERS: Final = wire.HEADERS
_RST_STREAM: Final = wire.RST_STREAM
_SETTINGS: Final = wire.SETTINGS
_PUSH_PROMISE: Final = wire.PUSH_PROMISE
_GOAWAY: Final = wire.GOAWAY
_END_STREAM: Final = wire.END_STREAM
_ACK: Final = wire.ACK
_PADDED: Final = wire.PADDED
# The frame types a handler never passes on unchanged, whatever the state: from the upstream GOAWAY
# (``_up_goaway``: passed on, or lowered, or answered) and PUSH_PROMISE (an error); from the client
# RST_STREAM (a cancel, written before the rest of its read) and PUSH_PROMISE (an error).
_HANDLED_S2C: Final = frozenset({wire.GOAWAY, wire.PUSH_PROMISE})
_HANDLED_C2S: Final = frozenset({wire.RST_STREAM, wire.PUSH_PROMISE})

#: A frame as :meth:`proxy.wire.frames.FrameReader.feed` returns it: type, flags, stream id, payload, raw bytes.
Frame = tuple[int, int, int, Any, memoryview]
#: A multi-step piece of work: each ``yield`` ends a step (its writes go out before it goes on).
Job = Generator[None, None, None]


# --- the core ---------------------------------------------------------------------------------


class H2Core:
    """A client connection, its upstream connection, and the calls between them: HTTP/2, no I/O."""

    __slots__ = (
        "_buffered",
        "_c2s_q",
        "_c2s_w",
        "_client_settings",
        "_cut_unfinished_of",
        "_job",
        "_kept_back",
        "_late",
        "_linger",
        "_out",
        "_out_verbatim_c2s",
        "_out_verbatim_s2c",
        "_own_settings_acks",
        "_read_ns",
        "_reading",
        "_record",
        "_recording",
        "_recording_s2c",
        "_rest",
        "_s2c_q",
        "_s2c_w",
        "_t_end",
        "_then_error",
        "_up_error",
        "_verbatim",
        "c2s",
        "calls",
        "client",
        "client_live",
        "client_subject",
        "conn_id",
        "emit",
        "goaway_cause",
        "goaway_last",
        "last_sid",
        "opts",
        "peer",
        "reencode_c2s",
        "refuser",
        "s2c",
        "shared",
        "up",
    )  # fmt: skip

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
        self.opts = shared.options
        self.conn_id = conn_id
        self.peer = peer
        #: Subject of the verified client certificate (``--tls-client-ca``), else None.
        self.client_subject = client_subject
        # Bytes the client's socket has not taken yet (``s2c_undelivered_bytes`` is known only at 0).
        self._buffered = buffered
        self.c2s = wire.FrameReader(expect_preface=True)
        self.s2c = wire.FrameReader(expect_preface=False)
        #: Open calls by stream id (a call leaves when it ends).
        self.calls: dict[int, Call] = {}
        self.up = Upstream.CONNECTING
        self.client = Client.OPEN
        #: Whether bytes still go to the client (its state is one of CLIENT_LIVE); set with the state
        #: by _client_input only: the hot path tests this instead of the state.
        self.client_live = True
        #: Last stream id of the GOAWAY the client got (from us or passed on), or None.
        self.goaway_last: int | None = None
        #: Why the client got it: the proxy's shutdown (or abort), or the upstream going away. A call the client
        #: opens above it is refused for that reason: it never reaches the upstream.
        self.goaway_cause = "upstream_disconnect"
        #: The highest stream id the client opened a call on.
        self.last_sid = 0
        # Header blocks go upstream re-encoded (never verbatim) once the proxy rewrites one
        # (``:authority``) or keeps one back: the upstream's HPACK table then no longer mirrors
        # the client's, and literal-only blocks are valid against any table state.
        self.reencode_c2s = shared.authority is not None
        recorder = MessageRecorder(self.opts, shared.emit_message)
        self._record = recorder.record
        self._cut_unfinished_of = recorder.cut_unfinished
        self._late = LateWatch(shared.emit, conn_id)
        # (monotonic) when the last call ended: _end reads the clock once, for its record and LateWatch
        self._t_end = 0
        # when the current client read arrived: the start of a cancel's way upstream
        self._read_ns = 0
        # queued bytes of the current step (c2s: to the upstream; s2c: to the client), and those
        # already committed to its write (see _flush)
        self._c2s_q: list[Any] = []
        self._s2c_q: list[Any] = []
        self._c2s_w: list[Any] = []
        self._s2c_w: list[Any] = []
        self.refuser: Refuser | None = None
        # True while the frames being handled were written already (a verbatim read)
        self._verbatim = False
        self._linger = False
        # The client must see a SETTINGS frame first (RFC 9113 3.4): the upstream's, or, when the
        # proxy must speak before the upstream did, an empty one of the proxy's, whose ACK the
        # client then sends is not the upstream's to see.
        self._client_settings = False
        self._own_settings_acks = 0
        #: The HTTP/2 violation the upstream committed, if that is how its connection ended.
        self._up_error: str | None = None
        #: Streams whose HEADERS the proxy kept back (refused after its GOAWAY): the upstream never
        #: heard of them, so nothing else of theirs may reach it.
        self._kept_back: set[int] = set()
        self._out = Output()
        # The first step of a verbatim read: its one write, then ``more`` (the recording step).
        self._out_verbatim_c2s, self._out_verbatim_s2c = Output(), Output()
        self._out_verbatim_c2s.more = self._out_verbatim_s2c.more = True
        # the job a step ended in, the frames of a read still to handle, the error that ends them
        self._job: Job | None = None
        self._rest: tuple[int, list[Frame], int] | None = None
        # the frames of a verbatim read, written already, to record in the next step (and whose)
        self._recording: list[Frame] | None = None
        self._recording_s2c = False
        self._then_error: tuple[int, wire.FrameError] | None = None
        self._reading = C2S

    # --- inputs ---------------------------------------------------------------------------------

    def receive_c2s(self, data: bytes) -> Output:
        """The bytes of one read from the client."""
        if not self.client_live:
            return self._begin()  # being closed (protocol error): nothing more from it counts
        if self.refuser is not None:
            self._begin()
            self._guarded_feed(data)
            return self._finish()
        self._read_ns = time.monotonic_ns()
        reader = self.c2s
        try:
            frames = reader.feed(data)
            if not frames or not self._verbatim_c2s(frames):
                return self._handled(C2S, frames)
        except Exception as e:
            return self._read_failed(C2S, e)
        # Latency: every frame of this read goes on unchanged, so it is written (this step)
        # before the recording work (the next step) instead of after it.
        out = self._out_verbatim_c2s
        span = reader.span
        out.c2s = span if span is not None else _joined(frames)
        self._recording = frames
        self._recording_s2c = False
        return out

    def receive_s2c(self, data: bytes) -> Output:
        """The bytes of one read from the upstream (the same steps as :meth:`receive_c2s`)."""
        if self.up is not _U_OPEN and self.up is not _U_ENDING:
            return self._begin()
        reader = self.s2c
        try:
            frames = reader.feed(data)
            if not frames or not self._verbatim_s2c(frames):
                return self._handled(S2C, frames)
        except Exception as e:
            return self._read_failed(S2C, e)
        out = self._out_verbatim_s2c
        if self.client_live:
            span = reader.span
            out.s2c = span if span is not None else _joined(frames)
        else:
            out.s2c = None
        self._recording = frames
        self._recording_s2c = True
        return out

    def _handled(self, d: int, frames: list[Frame]) -> Output:
        """A read that is not verbatim: each frame's handler queues what goes on."""
        self._begin()
        self._rest = (d, frames, 0)
        self._drive()
        return self._finish()

    def _read_failed(self, d: int, e: Exception) -> Output:
        self._begin()
        if isinstance(e, wire.FrameError):
            # What the frames before the bad one said did happen: handled, then the error.
            self._rest = (d, e.before, 0)
            self._then_error = (d, e)
            self._drive()
        else:
            self._internal_error(e)
        return self._finish()

    def resume(self) -> Output | None:
        """The next step of the input whose output said ``more``; None when that step asks nothing."""
        frames = self._recording
        if frames is None:
            self._begin()
            self._drive()
            return self._finish()
        # The recording step of a verbatim read (its bytes are written): the hot path, one plain
        # loop. Nothing of a verbatim read starts a job or queues bytes (no cancel, no GOAWAY, no
        # frame of the proxy's own: what _verbatim_c2s/_s2c let through), so only commands can come
        # of it (a call's end may arm the linger).
        self._recording = None
        out = self._out
        if out.commands:
            out.commands = []
        self._verbatim = True
        try:
            # Arguments spelled out, not handle(*f): a method called with exact arguments stays in
            # the interpreter's loop (CPython 3.11 inlines it), a call with ``*`` does not.
            if self._recording_s2c:
                for ftype, flags, sid, payload, raw in frames:
                    self._s2c_frame(ftype, flags, sid, payload, raw)
            else:
                for ftype, flags, sid, payload, raw in frames:
                    self._c2s_frame(ftype, flags, sid, payload, raw)
        except Exception as e:
            self._verbatim = False
            self._begin()
            self._internal_error(e)
            return self._finish()
        self._verbatim = False
        if out.commands:
            out.c2s = out.s2c = None
            out.more = False
            return self._finish()
        return None

    def connected(self) -> Output:
        """The upstream connection is made."""
        self._begin()
        self.up = upstream_after(self.up, UpstreamInput.CONNECTED)
        return self._finish()

    def connect_failed(self, reason: str) -> Output:
        """The upstream cannot be reached: someone must speak HTTP/2 to the client to give it a
        status (``reason``), a small h2 server."""
        self._begin()
        self.up = upstream_after(self.up, UpstreamInput.CONNECT_FAILED)
        self.refuser = Refuser(self, reason)
        return self._finish()

    def lost(self, side: str, exc: Exception | None) -> Output:
        """A side's connection is gone."""
        self._begin()
        if side == CLIENT:
            self._start(self._client_lost())
        else:
            self._upstream_lost(exc)
        return self._finish()

    def timer(self, name: str) -> Output:
        """A timer the core armed fired: ``linger``, close the client if it has not closed itself;
        ``upstream_end``, close an upstream that sent an error GOAWAY and did not close itself.

        Not at once after the last call: gRPC C-core clients drop bytes that arrive in the same read
        as the connection's end (TCP FIN, or RST when we close with their last frames unread);
        closing right after the final trailers made the client report "Socket closed (GOAWAY
        received)" instead of the status we sent, about one run in five. A client that got GOAWAY
        and has no calls left closes on its own.
        """
        self._begin()
        if name == "upstream_end":
            if self.up is Upstream.ENDING:
                self._out.commands.append(Close(UPSTREAM))  # its loss ends the calls it left open
            return self._finish()
        self._linger = False
        if not self.calls and self.client_live:
            # (A call that crossed the GOAWAY, legal below its last stream id, arms it again as it ends.)
            self._client_input(ClientInput.CLOSE)
            self._out.commands.append(Close(CLIENT))
        return self._finish()

    def eof(self, side: str) -> Output:
        """A side's peer shut its writing half: over HTTP/2 that ends the connection (its loss follows),
        as it always has; a gRPC call's own end is END_STREAM, never the TCP connection's."""
        self._begin()
        self._out.commands.append(Close(side))
        return self._finish()

    def goaway(self) -> Output:
        """Shutdown: tell the client to open no new calls on this connection; open calls go on."""
        self._begin()
        self._goaway_client("proxy_shutdown")
        return self._finish()

    def abort(self, cause: str) -> Output:
        """End every open call with ``cause`` and close both connections."""
        self._begin()
        self._start(self._abort(cause))
        return self._finish()

    # --- steps ----------------------------------------------------------------------------------

    def _begin(self) -> Output:
        out = self._out
        out.c2s = out.s2c = None
        if out.commands:
            out.commands = []
        out.more = False
        return out

    def _flush(self) -> None:
        """What is queued so far goes out in this step's write, whatever this step does next (a
        side it closes still gets the bytes queued before; nothing queued after)."""
        if self._c2s_q:
            q, self._c2s_q = self._c2s_q, []
            if self.up is Upstream.OPEN:
                self._c2s_w += q
        if self._s2c_q:
            q, self._s2c_q = self._s2c_q, []
            if self.client_live:
                self._s2c_w += q

    def _finish(self) -> Output:
        self._flush()
        out = self._out
        w = self._c2s_w
        if w:
            self._c2s_w = []
            out.c2s = w[0] if len(w) == 1 else b"".join(w)
        w = self._s2c_w
        if w:
            self._s2c_w = []
            out.s2c = w[0] if len(w) == 1 else b"".join(w)
        out.more = self._job is not None or self._rest is not None or self._then_error is not None
        return out

    def _start(self, job: Job) -> None:
        """Run ``job`` to its first step boundary (the rest runs in the next steps), or to its end."""
        try:
            next(job)
        except StopIteration:
            return
        self._job = job

    def _drive(self) -> None:
        """Go on with what the last step left: its job, then the rest of a read's frames."""
        try:
            while True:
                job = self._job
                if job is not None:
                    try:
                        next(job)
                        return
                    except StopIteration:
                        self._job = None
                rest = self._rest
                if rest is not None:
                    self._rest = None
                    self._frames(*rest)
                    if self._job is not None:
                        return
                    continue
                failed = self._then_error
                if failed is not None:
                    self._then_error = None
                    raise failed[1]
                return
        except wire.FrameError as bad:  # (its own name: compiled, one name is one type in a function)
            self._job = self._rest = self._then_error = None
            self._flush()
            self._protocol_error(self._reading, bad.code, str(bad), goaway=True)
        except Exception as e:
            self._internal_error(e)

    def _internal_error(self, e: Exception) -> None:
        """A bug of ours must cost one connection, never the proxy, and be recorded as ours."""
        self._job = self._rest = self._then_error = self._recording = None
        self._out.commands.append(Log("exception", "relay_internal_error", {}, e))
        self._start(self._abort("proxy_error"))

    def _frames(self, d: int, frames: list[Frame], i: int) -> None:
        """Handle a read's frames from ``i`` on; a handler that starts a job ends the step there."""
        self._reading = d
        handle = self._c2s_frame if d == C2S else self._s2c_frame
        n = len(frames)
        while i < n:
            handle(*frames[i])
            i += 1
            if self._job is not None:
                if i < n:
                    self._rest = (d, frames, i)
                return

    # --- the one decision per read ---------------------------------------------------------------

    def _verbatim_s2c(self, frames: list[Frame]) -> bool:
        """Whether every frame of an upstream read goes on verbatim (the one decision per read).

        Beside the handlers that drop, rewrite or answer frames: a change to one of them that stops
        passing a frame on unchanged changes this too, or frames go twice or are lost."""
        handled = _HANDLED_S2C
        for f in frames:
            if f[0] in handled:
                return False
        return True

    def _verbatim_c2s(self, frames: list[Frame]) -> bool:
        """Whether every frame of a client read goes on verbatim (the one decision per read): not
        when header blocks are re-encoded or may be refused (GOAWAY given, upstream gone), while the
        ACK of the proxy's own SETTINGS is due (dropped), nor for frames of streams kept back."""
        if (
            self.reencode_c2s or self.goaway_last is not None or self.up is not _U_OPEN
            or self._own_settings_acks
        ):  # fmt: skip
            return False
        handled = _HANDLED_C2S
        kept = self._kept_back
        for f in frames:
            if f[0] in handled or (kept and f[2] in kept):
                return False
        return True

    # --- client -> upstream -----------------------------------------------------------------------

    def _c2s_frame(self, ftype: int, flags: int, sid: int, payload: Any, raw: memoryview) -> None:
        if self._kept_back and sid in self._kept_back:
            self._kept_back_frame(ftype, flags, sid, payload)
            return
        if ftype == _DATA:
            call = self.calls.get(sid)
            if call is not None and self.up is _U_OPEN:
                # (Not while the upstream is ending the connection: those bytes never reach it, and a request
                # it had part of is recorded as far as it got, when the call ends. Nor does the client get
                # flow-control credit for them then: its connection is in GOAWAY and closes within two
                # lingers, and holding the credit back stops it pushing more bytes nowhere.)
                self._record(call, C2S, wire.data_payload(flags, payload))
                if flags & _END_STREAM:
                    self.emit(make_half_close(time.time_ns(), call.id, {}))
            if not self._verbatim:
                self._c2s_q.append(raw)
        elif ftype == _HEADERS:
            self._c2s_headers(flags, sid, payload, raw)
        elif ftype == _RST_STREAM:
            call = self.calls.get(sid)
            if call is None:
                self._c2s_q.append(raw)
                return
            code = int.from_bytes(payload, "big")
            cause = causes.client_reset_cause(call.timeout_ms, call.elapsed_ms(), code)
            # The client's own RST goes upstream (the cause's clock started with this read). Its code
            # says the status the client ended with: not CANCEL when it refused a response (too large).
            self._start(self._cancel(call, cause, code, raw, self._read_ns))
        elif ftype == _SETTINGS:
            if not flags & _ACK:
                self.s2c.receiver_settings(payload)
            elif self._own_settings_acks:
                # The ACK of the proxy's own SETTINGS (see _own_s2c): the upstream never sent it.
                self._own_settings_acks -= 1
                return
            if not self._verbatim:
                self._c2s_q.append(raw)
        elif ftype == _PUSH_PROMISE:
            raise wire.FrameError(wire.PROTOCOL_ERROR, "PUSH_PROMISE from a client")
        elif not self._verbatim:
            # PING, WINDOW_UPDATE, PRIORITY, GOAWAY, the preface and unknown extension frames:
            # end to end, like everything else.
            self._c2s_q.append(raw)

    def _kept_back_frame(self, ftype: int, flags: int, sid: int, payload: Any) -> None:
        """A frame on a stream the upstream never heard of: dropped, its flow-control credit returned.

        (A header block was decoded already, which keeps HPACK in step, and every later block goes
        upstream re-encoded.)"""
        if ftype == wire.DATA:
            if len(payload):
                self._own_s2c(wire.window_update(0, len(payload)))
            if flags & wire.END_STREAM:
                self._kept_back.discard(sid)
        elif ftype == wire.RST_STREAM:
            self._kept_back.discard(sid)

    def _c2s_headers(self, flags: int, sid: int, headers: list[tuple[bytes, bytes]], raw: memoryview) -> None:
        end = bool(flags & wire.END_STREAM)
        call = self.calls.get(sid)
        if call is None and sid & 1 and sid > self.last_sid:
            if self.goaway_last is not None and sid > self.goaway_last and len(self._kept_back) >= KEPT_BACK_LIMIT:
                raise wire.FrameError(ENHANCE_YOUR_CALM, "client kept opening streams after GOAWAY")
            call = self._request(sid, headers)
            if self.goaway_last is not None and sid > self.goaway_last:
                # Above the last stream id of the GOAWAY the client got (the proxy's at shutdown,
                # or the upstream's passed on): never processed, so it must not reach the upstream
                # (the client may retry it elsewhere). Its header block is kept back. Tested before the
                # upstream's state: at shutdown an idle connection's upstream is closed at once, and the
                # call that crossed the GOAWAY is still the GOAWAY's to refuse, not an upstream lost.
                self.reencode_c2s = True
                self._kept_back.add(sid)
                self._refuse(call, ev.REFUSED_AT_SHUTDOWN, self.goaway_cause)
                return
            if self.up is not Upstream.OPEN:
                self._kept_back.add(sid)
                if self.up is Upstream.ENDING:
                    # Opened after the upstream's error GOAWAY (below its last stream id): it never reaches an
                    # upstream that is ending the connection, so the client may retry it elsewhere.
                    self._refuse(call, ev.REFUSED_UPSTREAM_ENDING, "upstream_disconnect")
                    return
                self._fail_c2s(call, "upstream_disconnect", *PROXY_ANSWERS["upstream_disconnect"])
                return
            self._forward_headers(sid, headers, end, raw)
        else:
            # Trailers from the client, or a stream the upstream will judge (closed, even id).
            self._forward_headers(sid, headers, end, raw)
        if end and call is not None and not call.ended:
            self.emit(make_half_close(time.time_ns(), call.id, {}))

    def _forward_headers(self, sid: int, headers: list[tuple[bytes, bytes]], end: bool, raw: memoryview) -> None:
        if not self.reencode_c2s:
            if not self._verbatim:
                self._c2s_q.append(raw)
            return
        authority = self.shared.authority
        if authority is not None:
            headers = [(k, authority) if k == b":authority" else (k, v) for k, v in headers]
        # Each block starts with a dynamic table size update to 0: valid whatever the upstream
        # advertised (RFC 7541 4.2), and the literal-only blocks never need its table.
        block = b"\x20" + wire.encode_block(headers)
        self._c2s_q.append(wire.headers_frames(sid, block, end, self.c2s.max_frame))

    def _request(self, sid: int, headers: list[tuple[bytes, bytes]]) -> Call:
        self.last_sid = sid
        # A client's calls repeat their header block: what it says is read once per block (Block).
        got = headers.derived.get("request") if type(headers) is Block else None
        if got is None or got[0] is not self.opts:
            got = self._read_request(headers)
        _, method, timeout_ms, meta = got
        call = Call(f"{self.conn_id}.{sid}", sid, method, timeout_ms, self.opts)
        call.req_headers = headers
        self.calls[sid] = call
        self.shared.open_calls += 1
        self.emit(
            make_call_start(time.time_ns(), call.id, self.conn_id, method, self.peer, meta, timeout_ms,
                            self.client_subject, {})
        )  # fmt: skip
        return call

    def _read_request(self, headers: list[tuple[bytes, bytes]]) -> tuple[Any, str, float | None, list[list[str]]]:
        """(options, method, timeout in ms, metadata as recorded) of a request header block."""
        path = header(headers, b":path") or b""
        timeout = header(headers, b"grpc-timeout")
        timeout_ms = causes.parse_grpc_timeout(timeout.decode("latin-1")) if timeout else None
        meta = [[k, REDACTED if self.opts.redacts(k) else v] for k, v in pairs(headers)]
        got = (self.opts, path.decode("latin-1"), timeout_ms, meta)
        if type(headers) is Block:
            headers.derived["request"] = got
        return got

    def _refuse(self, call: Call, reason: str, cause: str, rst: int | None = None) -> None:
        """REFUSED_STREAM to the client: never processed, so the client may retry it itself. ``cause``: why (the
        proxy's shutdown, the upstream going away); ``rst``: the upstream's refusal, when it was the upstream's."""
        self._own_s2c(wire.rst_stream(call.sid, wire.REFUSED_STREAM))
        self._end(call, cause, "UNAVAILABLE", reason, None, rst=rst, refused=True)

    # --- upstream -> client -----------------------------------------------------------------------

    def _s2c_frame(self, ftype: int, flags: int, sid: int, payload: Any, raw: memoryview) -> None:
        if ftype == _DATA:
            call = self.calls.get(sid)
            if call is not None:
                # Once per streamed response: data_payload inline (a call less a frame).
                self._record(call, S2C, payload if not flags & _PADDED else wire.data_payload(flags, payload))
                if not self._verbatim:
                    self._s2c_q.append(raw)
                if flags & _END_STREAM:
                    self._end(call, "error", "INTERNAL", "upstream ended the stream without a grpc-status", None)
                    self._late.end(call, True, self._t_end)
                return
            if self._late.knows(sid):
                self._late.frame(sid, "data", wire.data_payload(flags, payload), bool(flags & _END_STREAM))
            if not self._verbatim:
                self._s2c_q.append(raw)
        elif ftype == _HEADERS:
            if not self._verbatim:
                self._s2c_q.append(raw)
            call = self.calls.get(sid)
            if call is None:
                if self._late.knows(sid):
                    self._late.frame(sid, "headers", payload, bool(flags & _END_STREAM))
            elif flags & _END_STREAM:
                self._end_with_status(call, payload)
                # Frames on its stream from now on are late (Triton 2.51 repeats a deadline's end four
                # times): LateWatch.end inline, as every call passes here.
                ended = self._late.ended
                if len(ended) >= LATE_WATCH:
                    ended = self._late.next_generation()
                ended[sid] = self._t_end << 3 | call.mkind << 1 | 1
            elif call.resp_headers is None:
                call.resp_headers = payload
        elif ftype == _RST_STREAM:
            if not self._verbatim:
                self._s2c_q.append(raw)
            code = int.from_bytes(payload, "big")
            call = self.calls.get(sid)
            if call is not None:
                status = causes.RST_TO_STATUS.get(code, "INTERNAL")
                self._end(call, "error", status, f"upstream reset the stream (HTTP/2 error {code})", None, rst=code)
                self._late.end(call, False, self._t_end)
            elif self._late.knows(sid):
                self._late.frame(sid, "rst", code, True)
        elif ftype == _SETTINGS:
            if not flags & _ACK:
                self.c2s.receiver_settings(payload)
                self._client_settings = True
            if not self._verbatim:
                self._s2c_q.append(raw)
        elif ftype == _GOAWAY:
            self._up_goaway(payload, raw)
        elif ftype == _PUSH_PROMISE:
            raise wire.FrameError(wire.PROTOCOL_ERROR, "PUSH_PROMISE: gRPC clients never accept server push")
        elif not self._verbatim:
            self._s2c_q.append(raw)

    def _up_goaway(self, payload: memoryview, raw: memoryview) -> None:
        last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        code = int.from_bytes(payload[4:8], "big")
        if code != wire.NO_ERROR and self.up is _U_OPEN:
            # The upstream ends the connection with an error, in answer to frames it got from the
            # client verbatim (or, like ENHANCE_YOUR_CALM for too many pings, to the client's
            # behaviour): the violation is the client's as the upstream judged it. The upstream
            # closes the connection next, and what it sends until then still goes to the client:
            # gRPC C-core ends each open call with its status ("Too many pings") right after the
            # GOAWAY. Calls still open when it is gone end as upstream_disconnect; the timer bounds
            # an upstream that never closes.
            debug = bytes(payload[8:]).decode("utf-8", "replace")
            name = _ERROR_NAMES.get(code, str(code))
            error = f"the upstream rejected the client's frames: GOAWAY {name}" + (f" ({debug})" if debug else "")
            self.up = upstream_after(self.up, UpstreamInput.ERROR_GOAWAY)
            self._violation(C2S, code, error)
            self._out.commands.append(ArmTimer("upstream_end", LINGER_S))
        for call in list(self.calls.values()):
            if call.sid > last:
                # Never processed upstream (RFC 9113 6.8): REFUSED_STREAM lets the client retry it.
                self._refuse(call, ev.REFUSED_ABOVE_UPSTREAM_GOAWAY, "upstream_disconnect", wire.REFUSED_STREAM)
        # Passed on so the client opens new calls on a new connection (and so a new upstream
        # connection); calls in flight drain. A GOAWAY may never raise an earlier one's last id.
        if self.goaway_last is None or last < self.goaway_last:
            self.goaway_last, self.goaway_cause = last, "upstream_disconnect"
            self._client_input(ClientInput.GOAWAY)
            self._s2c_q.append(raw)
        elif code != wire.NO_ERROR:
            # The client still learns the error, under the last stream id it was given.
            self._own_s2c(wire.goaway(self.goaway_last, code, bytes(payload[8:])))
        self._maybe_close_client()

    def _end_with_status(self, call: Call, trailers: list[tuple[bytes, bytes]]) -> None:
        raw, details = grpc_status(trailers)
        if raw is None or not raw.isdigit() or len(raw) > 4:  # bytes.isdigit(): ASCII only
            self._end(call, "error", "UNKNOWN", details or "upstream trailers without grpc-status", trailers)
            return
        code = int(raw)
        cause = causes.upstream_status_cause(code, call.timeout_ms, (_monotonic_ns() - call.t0) / 1e6)
        if cause == "deadline":
            self._cut_unfinished(call)
            in_flight, responded = call.inflight.snapshot()
            self.emit(
                ev.CallCancelled(
                    t_ns=time.time_ns(), call=call.id, cause="deadline", in_flight=in_flight,
                    responded=responded, rst_code=None, elapsed_ms=call.elapsed_ms(),
                    forwarded_upstream=False,
                )
            )  # fmt: skip
        self._end(call, cause, causes.status_name(code), details, trailers)

    # --- how calls end ----------------------------------------------------------------------------

    def _cancel(
        self, call: Call, cause: str, rst_code: int | None, rst: Any = None, learned_ns: int = 0,
    ) -> Job:  # fmt: skip
        """The call ends by a cancel-like event: recorded, and the upstream stream reset at once.

        ``rst`` is the client's RST_STREAM frame to pass on (else the proxy sends its own CANCEL);
        ``learned_ns`` (monotonic) is when the proxy learned of it, if earlier than now. The status is the
        one the client ended with: the cause's, or the one its RST's code says (``ev.cancel_status``). The reset
        ends the step: it is written before anything else is handled (Triton must see it first),
        and its latency is measured to the socket.
        """
        in_flight, responded = call.inflight.snapshot()
        forwarded = False
        rst_us: float | None = None
        if self.up is Upstream.OPEN and self.refuser is None:
            learned = learned_ns or time.monotonic_ns()
            before = self.shared.before_cancel
            if before is not None:
                before(call.id)
            self._c2s_q.append(rst if rst is not None else wire.rst_stream(call.sid, wire.CANCEL))
            yield
            forwarded = True
            rst_us = (time.monotonic_ns() - learned) / 1e3
            self._late.watch(call)
        self._cut_unfinished(call)
        self.emit(
            ev.CallCancelled(
                t_ns=time.time_ns(), call=call.id, cause=cause, in_flight=in_flight, responded=responded,  # type: ignore[arg-type]
                rst_code=rst_code, elapsed_ms=call.elapsed_ms(), forwarded_upstream=forwarded,
                upstream_rst_us=rst_us,
            )
        )  # fmt: skip
        answer = PROXY_ANSWERS.get(cause)
        if answer is not None:
            self._fail_c2s(call, cause, *answer)
            return
        self._end(call, cause, ev.cancel_status(cause, rst_code), None, None)

    def _cut_unfinished(self, call: Call) -> None:
        """The call ends while a message is still on its way (a request uploading when Triton's deadline or error,
        a cancel or a lost connection ends it; a response arriving when a cancel, the upstream's reset or its lost
        connection does): what arrived of it goes on record, as a message its receiver never had whole, before the
        records that end the call (a reader takes the first of them for the end)."""
        if call.c2s_asm.partial or call.s2c_asm.partial:
            self._cut_unfinished_of(call)

    def _cancel_all(self, cause: str) -> Job:
        for call in list(self.calls.values()):
            yield from self._cancel(call, cause, None)

    def _fail_c2s(self, call: Call, cause: str, code: int, message: str) -> None:
        """End a call the upstream cannot answer: the client gets a gRPC status of the proxy's own."""
        if self.client_live:
            trailers = status_trailers(code, message, call.resp_headers is None)
            self._own_s2c(wire.headers_frames(call.sid, wire.encode_block(trailers), True, self.s2c.max_frame))
        self._end(call, cause, causes.status_name(code), message, None)

    def _end(
        self,
        call: Call,
        cause: str,
        status: str,
        details: str | None,
        trailers: list[tuple[bytes, bytes]] | None,
        rst: int | None = None,
        refused: bool = False,
    ) -> None:
        if call.ended:
            return
        call.ended = True
        self.calls.pop(call.sid, None)
        self.shared.open_calls -= 1
        self._cut_unfinished(call)
        # The relay holds nothing per call: what the client did not get is in the socket buffer,
        # shared by every call of the connection, so it can be told only when that is empty.
        undelivered = 0 if not self.client_live or not self._buffered() else None
        self.emit(
            make_call_end(
                time.time_ns(), call.id, status, details, cause,
                pairs(trailers) if trailers is not None else None,
                pairs(call.resp_headers) if call.resp_headers is not None else None,
                ((t_end := _monotonic_ns()) - call.t0) / 1e6, call.index[C2S], call.index[S2C], rst, undelivered,
                {"refused": True} if refused else {},
            )
        )  # fmt: skip
        self._t_end = t_end
        if self.goaway_last is not None:
            self._maybe_close_client()

    # --- how the connections end ------------------------------------------------------------------

    def _own_s2c(self, frames: bytes) -> None:
        """Frames of the proxy's own for the client (after a SETTINGS frame, if none went yet)."""
        if not self._client_settings:
            self._client_settings = True
            self._own_settings_acks += 1
            self._s2c_q.append(wire.frame(wire.SETTINGS, 0, 0))
        self._s2c_q.append(frames)

    def _client_input(self, inp: ClientInput) -> None:
        """The client's state after ``inp`` (the one place it changes)."""
        self.client = client_after(self.client, inp)
        self.client_live = self.client in CLIENT_LIVE

    def _violation(self, d: int, code: int, error: str) -> None:
        """The sender of direction ``d`` broke HTTP/2 (as we, or the upstream, judged it): logged and recorded."""
        upstream = d == S2C
        self._out.commands.append(Log("warning", "http2_protocol_error", {"upstream": upstream, "error": error}))
        self.emit(
            ev.ProtocolViolated(
                t_ns=time.time_ns(), conn=self.conn_id, side="upstream" if upstream else "client",
                error=error, error_code=code,
                open_calls=[c.id for c in self.calls.values()],
            )
        )  # fmt: skip

    def _protocol_error(self, d: int, code: int, error: str, goaway: bool) -> None:
        """The sender of direction ``d`` broke HTTP/2: recorded, told (GOAWAY), its connection closed;
        its calls end when it is lost."""
        upstream = d == S2C
        self._violation(d, code, error)
        if goaway:
            debug = error.encode()[:256]
            if upstream:
                self._c2s_q.append(wire.goaway(0, code, debug))
            else:
                # A GOAWAY may never raise an earlier one's last stream id (RFC 9113 6.8).
                last = self.last_sid if self.goaway_last is None else min(self.goaway_last, self.last_sid)
                self._own_s2c(wire.goaway(last, code, debug))
            self._flush()
        # Nothing more may be sent on that connection; its calls end when the transport is lost.
        if upstream:
            self.up = upstream_after(self.up, UpstreamInput.VIOLATION)
            self._up_error = error
            self._out.commands.append(Close(UPSTREAM))
        else:
            self._client_input(ClientInput.CLOSE)
            self._out.commands.append(Close(CLIENT))

    def _client_lost(self) -> Job:
        self._client_input(ClientInput.LOST)
        if self._linger:
            self._linger = False
            self._out.commands.append(CancelTimer("linger"))
        for call in list(self.calls.values()):
            yield from self._cancel(call, "client_disconnect", None)
        self._flush()
        self._out.commands.append(Close(UPSTREAM))

    def _upstream_lost(self, exc: Exception | None) -> None:
        if self.up is Upstream.CONNECTING or self.up is Upstream.REFUSING:
            return  # never connected, or already answered for
        if not self.client_live:
            # Nothing more is said to a client that is gone or being closed (for its violation, or
            # after its linger: no call left then, and it got GOAWAY already).
            self.up = upstream_after(self.up, UpstreamInput.LOST)
            return
        if self.last_sid == 0 and self.goaway_last is None and (not self._client_settings or self._up_error):
            # No call yet, and a new connection would meet the same upstream: answer calls
            # with the reason. An upstream that spoke HTTP/2 and closed cleanly (a restart, an
            # idle timeout) gets the GOAWAY below instead: the client reconnects and its next
            # call is not failed for nothing.
            self.up = upstream_after(self.up, UpstreamInput.LOST_EARLY)
            self._refuse_connection(exc)
            return
        self.up = upstream_after(self.up, UpstreamInput.LOST)
        self._start(self._upstream_lost_calls())

    def _upstream_lost_calls(self) -> Job:
        yield from self._cancel_all("upstream_disconnect")
        self._goaway_client()
        self._maybe_close_client()

    def _refuse_connection(self, exc: Exception | None) -> None:
        """The upstream closed before it spoke HTTP/2 (an mTLS upstream rejecting our certificate,
        a port-forward with nothing behind it) or broke HTTP/2, and the client has opened no call
        yet: it is served as when the upstream is unreachable, every call UNAVAILABLE with the
        reason. A GOAWAY instead would send a gRPC client round reconnecting until its deadline,
        never telling it why: a GOAWAY whose last stream id is 0 says no call was processed, and
        gRPC retries such calls transparently, without limit, each on a new connection."""
        if self._up_error is not None:
            reason = f"{OWN_ANSWER}upstream broke HTTP/2 ({self._up_error})"
        else:
            reason = OWN_ANSWER + "upstream closed the connection before speaking HTTP/2" + (f" ({exc})" if exc else "")
        self._out.commands.append(Log("warning", "upstream_closed_early", {"error": reason}))
        self.refuser = Refuser(self, reason)
        # What the client sent so far went to the lost upstream: the refuser gets a preface in its
        # place (the client's settings do not matter for statuses), then anything unread.
        rest = self.c2s.unread()
        self._guarded_feed(rest if self.c2s.expecting_preface else wire.PREFACE + wire.frame(wire.SETTINGS, 0, 0) + rest)

    def _goaway_client(self, cause: str = "upstream_disconnect") -> None:
        """Tell the client to open no new calls on this connection (``cause``: why); open calls go on."""
        if self.goaway_last is None and self.client_live:
            self.goaway_last = self.last_sid
            self.goaway_cause = cause
            self._client_input(ClientInput.GOAWAY)
            if self.refuser is not None:
                self.refuser.goaway()
            else:
                self._own_s2c(wire.goaway(self.last_sid, wire.NO_ERROR))
                self._flush()
            self._maybe_close_client()

    def _maybe_close_client(self) -> None:
        """The client got GOAWAY and has no call left: it closes itself, or the linger closes it."""
        if self.goaway_last is not None and not self.calls and self.client_live and not self._linger:
            self._linger = True
            self._out.commands.append(ArmTimer("linger", LINGER_S))

    def _abort(self, cause: str) -> Job:
        yield from self._cancel_all(cause)
        self._goaway_client(cause)
        self._flush()
        self._maybe_close_client()
        self._out.commands.append(Close(UPSTREAM))

    def _guarded_feed(self, data: bytes) -> None:
        assert self.refuser is not None
        try:
            self.refuser.feed(data)
        except Exception as e:
            self._internal_error(e)


#: HTTP/2's largest flow-control window and frame size (RFC 9113 6.9.1, 4.2).
_MAX_WINDOW: Final = 2**31 - 1
_MAX_FRAME: Final = 2**24 - 1


class Refuser:
    """Speaks HTTP/2 to a client whose upstream could not be reached: every call gets UNAVAILABLE.

    The one place the proxy terminates HTTP/2 itself (with ``h2``, which does no I/O either): there
    is no peer to relay to. What it says goes into the core's writes to the client."""

    def __init__(self, core: H2Core, reason: str) -> None:
        self.core = core
        self.reason = reason
        conn = self.conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=False, header_encoding=None, validate_inbound_headers=False)
        )
        conn.initiate_connection()
        # The client may hold more credit, and send larger frames, than a fresh h2 takes: an upstream that
        # spoke HTTP/2 before it broke it granted them (its SETTINGS and WINDOW_UPDATEs reached the client
        # unchanged). Held to h2's defaults, a client sending by that grant was told it broke flow control.
        # Every byte is acknowledged here, so it takes the most HTTP/2 allows, per stream, per frame and on
        # the connection, and says nothing of it: its SETTINGS above are h2's own, and a WINDOW_UPDATE on top
        # of the upstream's grants could take the client's window past its limit, itself a connection error.
        conn.local_settings = h2.settings.Settings(client=False, initial_values={
            **{h2.settings.SettingCodes(code): conn.local_settings[code] for code in conn.local_settings},
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _MAX_WINDOW,
            h2.settings.SettingCodes.MAX_FRAME_SIZE: _MAX_FRAME,
        })  # fmt: skip
        conn.max_inbound_frame_size = _MAX_FRAME
        conn._inbound_flow_control_window_manager = h2.windows.WindowManager(_MAX_WINDOW)  # (h2 has no setter)
        self.closed = False
        self._write()

    def _write(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.core._s2c_q.append(data)
            self.core._flush()

    def feed(self, data: bytes) -> None:
        """Bytes from the client."""
        core = self.core
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError as e:
            if self.closed:
                # After our GOAWAY h2 refuses every frame and queues a GOAWAY(PROTOCOL_ERROR) of its
                # own; but frames a client had in flight (PING, WINDOW_UPDATE) are legal: drop it.
                self.conn.data_to_send()
                return
            self._write()
            core._protocol_error(C2S, int(getattr(e, "error_code", None) or 1), str(e) or type(e).__name__, goaway=False)
            return
        answered = False
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                answered = True
                call = core._request(event.stream_id, event.headers)
                try:
                    self.conn.send_headers(event.stream_id, status_trailers(14, self.reason, True), end_stream=True)
                except h2.exceptions.ProtocolError:
                    pass
                core._end(call, "upstream_disconnect", "UNAVAILABLE", self.reason, None)
            elif isinstance(event, h2.events.DataReceived):
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        self._write()
        if answered:
            # The calls sent so far have their status and its reason; now tell the client to open
            # no more calls here, so its next call reconnects (and reaches Triton once it is back)
            # instead of being refused on this connection forever.
            core._goaway_client()

    def goaway(self) -> None:
        """No new calls on this connection."""
        self.closed = True
        self.conn.close_connection(last_stream_id=self.core.last_sid)
        self._write()


def _joined(frames: list[Frame]) -> bytes | memoryview:
    """The raw bytes of a read's frames when they are not one slice of it."""
    return frames[0][4] if len(frames) == 1 else b"".join([f[4] for f in frames])
