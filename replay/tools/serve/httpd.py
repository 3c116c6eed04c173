"""The HTTP/1.1 shell of ``triton-tap serve``: Triton's HTTP port answered from the capture.

A small asyncio server with h11 as its parser (one connection per task, keep-alive, pipelined requests
answered in order). What every request gets:

* ``POST /v2/models/{m}/infer|generate|generate_stream`` (and the OpenAI paths): matched by
  :mod:`replay.tools.match` (key kind ``http <kind>``, model, the JSON ``"id"``, the body's hash without
  its id; a gzip or deflate body read decompressed, as Triton and the recorder's labels read it); the
  captured status, headers (framing headers aside: h11 frames) and body, or, for an event
  stream, one chunk per captured event at its captured delay after the request (``--timing``), the head
  with the first event (as Triton sends it), and the chunked terminator only when the captured body
  ended cleanly: a captured disconnect (client or upstream) closes the connection at the captured point
  instead, and a call whose client never got a head closes the connection without one. A plain body cut
  by a captured disconnect is announced longer than the bytes captured (its captured Content-Length, else
  one byte more) before the close, so it reads as cut. The client's side is read while it is answered (a
  pipelined request kept for the next cycle): where the capture says Triton closed after the client's FIN,
  a client's FIN ends the answer as long after it as Triton's close came after the captured one; a reset
  ends any answer at once.
* Other requests (health, metadata, repository...): the captured answer of a call with the same
  request line, preferring one asked the same body, walking through repeats.
* A request that matches nothing: 404 ``{"error": ...}`` naming the closest captured request; a body
  whose JSON does not parse: 400. Captured ids are kept (a JSON body is served as captured).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Collection, Sequence
from http import HTTPStatus

import h11

from replay.capture.methods import HTTP_INFERENCE, OPENAI, HttpCall, http_call
from replay.capture.payload import http_body, http_encoding
from replay.capture.shm import json_regions, manages_regions
from replay.hostport import cannot_listen, parse_hostport
from replay.tools.match import Key, http_json_part, payload_key
from replay.tools.serve.index import Answer, CapturedCall
from replay.tools.serve.responses import delay_s
from replay.tools.serve.session import Session

log = logging.getLogger("triton_tap.serve")

#: Response headers h11 writes itself (the framing), or that describe a connection, not the answer.
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})
#: Response headers that describe the captured bytes: dropped when the body is rebuilt from the labels.
_OF_THE_BYTES = frozenset({"content-encoding", "inference-header-content-length"})
_READ = 65536
#: Most bytes read ahead from a client while its answer is replayed (a pipelined request's, kept for h11): past
#: them the client's side is left unread until the answer is over (the kernel holds the rest, as with no reader).
_WATCH_MAX = 1 << 20


def _header(headers: Sequence[tuple[bytes, bytes]] | Sequence[list[str]], name: str) -> str | None:
    for k, v in headers:
        key = k.decode("latin-1") if isinstance(k, bytes) else k
        if key.lower() == name:
            return v.decode("latin-1") if isinstance(v, bytes) else v
    return None


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _kept_alive_10(head: bytes) -> bytes:
    """h11's response head to an HTTP/1.0 request, as Triton answers one asking to be kept alive: ``HTTP/1.0`` and
    ``Connection: keep-alive`` where h11 (which keeps no HTTP/1.0 connection) says ``Connection: close``. Only
    with a ``content-length``: a body that runs to the close must end with the connection."""
    lines = head.split(b"\r\n")
    if not any(line.lower().startswith(b"content-length:") for line in lines):
        return head
    lines[0] = lines[0].replace(b"HTTP/1.1 ", b"HTTP/1.0 ", 1)
    return b"\r\n".join(b"Connection: keep-alive" if line.lower() == b"connection: close" else line for line in lines)


def sse_block(data: bytes) -> bytes:
    """The bytes of one served event: a captured event block as captured, a bare JSON answer framed as ``data:``."""
    if data.startswith((b"data:", b"event:", b":", b"id:")):
        return data if data.endswith(b"\n\n") else data.rstrip(b"\n") + b"\n\n"
    return b"data: " + data + b"\n\n"


def _cut_length(announced: str | None, got: int) -> int:
    """The Content-Length serve announces for a reply body cut after ``got`` bytes: the captured one when it
    is more than that, else ``got + 1`` (a chunked or unparsable captured length)."""
    try:
        length = int(announced) if announced is not None else 0
    except ValueError:
        length = 0
    return length if length > got else got + 1


def pick_http_other(calls: Sequence[CapturedCall], body: bytes, used: Collection[str]) -> CapturedCall | None:
    """The captured call answering a non-inference request of the same request line: asked the same body
    (or its body was not captured), the first not used yet, else the last; None when there is none."""
    same = [c for c in calls if c.asked_bytes() in (None, body) or (c.asked is None and not body)]
    pool = same or list(calls)
    if not pool:
        return None
    return next((c for c in pool if c.id not in used), pool[-1])


class _Closed(Exception):
    """The served connection is to end now, without more bytes (a captured disconnect, or the client left)."""


class _Conn:
    """One client connection: h11 state, the socket, and the answers sent so far."""

    def __init__(self, serve: HttpServe, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.serve = serve
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.SERVER)
        self.client_closed = False  # its side of the connection ended (a read gave b"")
        #: The loop's time when the client's FIN was read (None: not yet); ``lost``: its side failed (a reset).
        self.fin_at: float | None = None
        self.lost = False
        self._heard = asyncio.Event()  # set when either comes while an answer is replayed
        #: The request being answered is HTTP/1.0 asking to be kept alive (``Connection: keep-alive``, ApacheBench
        #: ``-k``); ``kept10``: its answer has a length, and said so: the connection goes on after it, as Triton's.
        self.keep10 = self.kept10 = False
        #: The request being answered is a HEAD: its reply has no body, whatever was captured (Triton 2.51 sends
        #: its 405/404 error JSON all the same, which HTTP forbids and h11 refuses to send: it crashed the handler).
        self.head = False

    async def send(self, *events: h11.Event) -> None:
        for event in events:
            if self.head and type(event) is h11.Data:
                continue
            data = self.h11.send(event)
            if type(event) is h11.Response and self.keep10:
                head = data or b""
                data = _kept_alive_10(head)
                self.kept10 = data != head
            if data:
                self.writer.write(data)
        try:
            await self.writer.drain()
        except (ConnectionError, OSError) as e:
            raise _Closed(str(e)) from None

    async def next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await self.reader.read(_READ)
            except (ConnectionError, OSError) as e:  # a reset (an idle keep-alive one too): the client left
                raise _Closed(str(e)) from None
            if not data:
                self._closed_side()
            self.h11.receive_data(data)  # b"": the client closed its side

    def _closed_side(self) -> None:
        self.client_closed = True
        if self.fin_at is None:
            self.fin_at = asyncio.get_running_loop().time()

    async def _watch(self) -> None:
        """Read the client's side while its answer is replayed. Triton reads it meanwhile, so a client's FIN
        reaches it when sent, and what Triton did then is in the capture (the stream it cut and closed at once):
        serve must see the FIN as soon, not once the answer is over. The bytes of a pipelined request go to h11
        as they come, for the next cycle."""
        fed = 0
        try:
            while fed < _WATCH_MAX:
                data = await self.reader.read(_READ)
                self.h11.receive_data(data)  # (h11 holds them while it sends: no event is taken out here)
                if not data:
                    self._closed_side()
                    self._heard.set()
                    return
                fed += len(data)
        except (ConnectionError, OSError):  # a reset: no one reads the answer any more
            self.lost = True
            self._heard.set()

    async def answering(self, request: h11.Request, body: bytes) -> None:
        """Have the request answered, watching the client's side meanwhile (see :meth:`_watch`)."""
        watch = None if self.client_closed or self.lost else asyncio.create_task(self._watch(), name="serve-http-watch-client")
        try:
            await self.serve.answer(self, request, body)
        finally:
            if watch is not None:
                # (A read the cancel stops takes nothing from the reader's buffer: no byte is lost.)
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)

    async def heard(self, timeout: float) -> None:
        """Wait ``timeout`` seconds, less when the client's FIN or reset comes first (see :meth:`_watch`)."""
        if self.fin_at is not None or self.lost:
            await asyncio.sleep(timeout)  # heard already: nothing more comes while the answer goes on
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._heard.wait(), timeout)

    async def run(self) -> None:
        try:
            while True:
                event = await self.next_event()
                if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    return
                if not isinstance(event, h11.Request):
                    return
                asked = (_header(event.headers.raw_items(), "connection") or "").lower()
                self.keep10, self.kept10 = event.http_version == b"1.0" and "keep-alive" in asked, False
                self.head = event.method == b"HEAD"
                if self.h11.they_are_waiting_for_100_continue:
                    # `Expect: 100-continue` (curl sends it with bodies over 1 KiB): Triton says go on at once; a
                    # client that waits for it would otherwise wait its own timeout (curl: 1 s) before the body.
                    await self.send(h11.InformationalResponse(status_code=100, headers=[]))
                body = bytearray()
                while True:
                    part = await self.next_event()
                    if isinstance(part, h11.Data):
                        body += part.data
                    elif isinstance(part, h11.EndOfMessage):
                        break
                    else:  # the client left mid-body
                        return
                await self.answering(event, bytes(body))
                if self.kept10 and self.h11.our_state is h11.MUST_CLOSE and self.h11.their_state is h11.MUST_CLOSE:
                    # h11 keeps no HTTP/1.0 connection alive: a fresh one reads the next request, from the bytes
                    # that came after this one.
                    rest, closed = self.h11.trailing_data
                    self.h11 = h11.Connection(h11.SERVER)
                    if rest:
                        self.h11.receive_data(rest)
                    if closed:
                        self.h11.receive_data(b"")  # (h11's word for the close)
                    continue
                if self.h11.our_state is not h11.DONE or self.h11.their_state is not h11.DONE:
                    return
                self.h11.start_next_cycle()
        except h11.RemoteProtocolError as e:
            if self.client_closed:
                # h11's word for a client that left in the middle of its request: nothing to answer.
                log.info("HTTP: the client closed its connection in the middle of a request (%s)", e)
                return
            log.warning("HTTP: the client sent bytes that are not HTTP/1.1: %s", e)
            if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                with contextlib.suppress(_Closed):  # (it left meanwhile: no one to tell)
                    await self._error(e.error_status_hint, f"triton-tap serve: bad HTTP request: {e}")
        except _Closed:
            pass
        finally:
            if self.h11.our_state is h11.SEND_BODY:
                self.writer.transport.abort()  # mid-body: the body must not look finished
            else:
                self.writer.close()

    async def _error(self, status: int, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        await self.send(h11.Response(status_code=status, reason=_reason(status), headers=[("content-type", "application/json"),
                                                                  ("content-length", str(len(body)))]),
                        h11.Data(data=body), h11.EndOfMessage())  # fmt: skip


class HttpServe:
    """The HTTP half of serve, answering through a :class:`Session` shared with the gRPC half."""

    def __init__(self, session: Session, used: set[str]) -> None:
        self.session = session
        self._used = used  # captured non-inference calls answered already (shared with the gRPC half)
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self._count = 0
        self.port = 0

    async def start(self, listen: str = "127.0.0.1:0") -> int:
        """Bind ``listen`` (port 0: a free one) and serve; returns the port."""
        host, want = parse_hostport(listen, "--http-listen", allow_port_zero=True)
        try:
            self._server = await asyncio.start_server(self._accept, host, want)
        except OSError as e:
            raise cannot_listen(listen, e) from None
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        """Stop accepting and end the open connections."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._conns):
            task.cancel()
        await asyncio.gather(*self._conns, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._count += 1
        task = asyncio.current_task()
        assert task is not None
        task.set_name(f"serve-http-conn-{self._count}")
        self._conns.add(task)
        try:
            await _Conn(self, reader, writer).run()
        except asyncio.CancelledError:
            # stop() ends it (serve stops, mid-answer or waiting out a grace). asyncio's callback for this task
            # asks task.exception(), which raises for a cancelled task and logged a traceback; the task ends
            # here, and stop() waits for it.
            pass
        finally:
            self._conns.discard(task)

    async def answer(self, conn: _Conn, request: h11.Request, body: bytes) -> None:
        """Answer one request (see the module docstring)."""
        method = f"{request.method.decode('latin-1')} {request.target.decode('latin-1')}"
        call = http_call(method)
        if call is not None and call.kind in HTTP_INFERENCE:
            await self._inference(conn, method, call, request, body)
            return
        if manages_regions(method):
            self.session.note_region_call(method)
        captured = pick_http_other(self.session.capture.calls_of(method), body, self._used)
        if captured is None:
            message = f"triton-tap serve: the capture has no {method} call to answer with"
            self._refuse(method, message)
            await conn._error(404, message)
            return
        self._used.add(captured.id)
        await self._replay(conn, captured, captured.first_request_t)

    def _refuse(self, where: str, message: str) -> None:
        self.session.unmatched.append(message)
        log.warning("%s: %s", where, message)

    async def _inference(self, conn: _Conn, method: str, call: HttpCall, request: h11.Request, body: bytes) -> None:
        # The body as Triton reads it, and as the recorder's labels read the captured one (its id) and the capture
        # index hashes it: gzip and deflate decompressed, by the one rule. A body this cannot read (another
        # encoding, such as br, which Triton refuses with 501; bytes that do not decompress) has neither id nor
        # hash, as the captured one has not: it is matched by order alone.
        plain, unread = http_body(body, http_encoding(request.headers.raw_items()))
        parts = http_json_part(plain) if plain is not None else None
        head = parts[0] if parts is not None else None
        if head is None and plain is not None:
            message = f"triton-tap serve: the {method} body ({len(plain)} bytes) is not a JSON object"
            log.warning("%s: %s", method, message)
            await conn._error(400, message)
            return
        if unread is not None:
            log.info("%s: %s: no id or input hash to match it by (order only)", method, unread)
        rid = head.get("id") if head is not None else None
        model = head.get("model") if call.kind in OPENAI and head is not None else call.model
        key = Key(kind=f"http {call.kind}", model=model if isinstance(model, str) else None,
                  request_id=rid if isinstance(rid, str) else "",
                  input_hash=payload_key(method, plain) if plain is not None else None,
                  version=call.version or "")  # fmt: skip
        m = self.session.matcher.match(key)
        if m.candidate is None:
            message = "triton-tap serve: " + self.session.matcher.explain(key)
            self._refuse(method, message)
            await conn._error(404, message)
            return
        captured = self.session.capture.calls[m.candidate.call]
        log.debug("%s: %s matched call %s by %s", method, key.describe(), captured.id, m.by)
        asked = json_regions(head) if head is not None else ()
        self.session.note_shared_memory(f"{method} {key.describe()}", asked, m.candidate)
        await self._replay(conn, captured, captured.request_t(m.candidate.seq))

    async def _at(self, conn: _Conn, t0: int, t_ns: int, mono0: float, fin_gap: float | None = None,
                  grace: float = 0.0) -> None:  # fmt: skip
        """Sleep until the captured instant ``t_ns`` (``t0`` captured when the request arrived at ``mono0``), then
        ``grace`` seconds more. Raise :class:`_Closed` when the client's side failed (a reset), or, ``fin_gap``
        given (see :meth:`_fin_gap`), when Triton's close after the client's FIN comes first: the FIN came while
        the answer was replayed (or before it), and the close ``fin_gap`` seconds after it, as captured."""
        loop = asyncio.get_running_loop()
        speed = self.session.speed
        due = mono0 + (delay_s(t0, t_ns, speed) if speed is not None and t_ns > t0 else 0.0) + grace
        while True:
            if conn.lost:
                raise _Closed("the client's connection was reset")
            now = loop.time()
            if fin_gap is not None and conn.fin_at is not None and (close := max(conn.fin_at, mono0) + fin_gap) <= due:
                if close > now:
                    await asyncio.sleep(close - now)
                raise _Closed("Triton closed the connection after the client's FIN, as captured")
            if now >= due:
                return
            await conn.heard(due - now)

    def _fin_gap(self, call: CapturedCall, t0: int) -> float | None:
        """Seconds from the client's FIN to the close that ends the answer, when the captured call ended so: Triton
        closed after the client's FIN (an answer to it, not an end the client made), so a client's FIN ends the
        replayed answer as soon after it. None: a FIN does not end it (the captured answer went on after one, or
        no FIN came): a client that only half-closed still reads it all, one that closed stops reading."""
        end = call.end
        if end is None or not end.after_fin:
            return None
        if self.session.speed is None:
            return 0.0
        fin_t = max(call.fin_t if call.fin_t is not None else t0, t0)
        return max(delay_s(fin_t, end.t_ns, self.session.speed), 0.0)

    async def _replay(self, conn: _Conn, call: CapturedCall, t0: int) -> None:
        mono0 = asyncio.get_running_loop().time()
        end = call.end
        answers = call.all_responses()
        end_t = end.t_ns if end is not None else (answers[-1].t_ns if answers else t0)
        fin_gap = self._fin_gap(call, t0)
        if end is None or end.http_status is None:
            # The client got no response head (it left first, or the upstream went away): neither does this one.
            await self._at(conn, t0, end_t, mono0, fin_gap, self.session.grace(end.cause if end is not None else None))
            raise _Closed("no captured response head")
        if any(a.data is None for a in answers):
            message = (f"triton-tap serve: the capture holds no bytes of the {call.short_method} answer (recorded "
                       "with --payload meta); record with --payload full to serve it")  # fmt: skip
            log.warning("%s: %s", call.short_method, message)
            await conn._error(503, message)
            return
        headers = end.initial_metadata or []
        stream = (_header(headers, "content-type") or "").startswith("text/event-stream")
        real = all(a.real for a in answers)
        if not real:
            self.session.note_dataless(False, call.short_method)
        out = [(k, v) for k, v in headers if k.lower() not in _FRAMING and (real or k.lower() not in _OF_THE_BYTES)]
        # A body ends cleanly unless a side went away mid-body (an error reply is a clean body too).
        clean = end.cause in ("ok", "error")
        if not stream:
            data = b"".join(a.data or b"" for a in answers)
            await self._at(conn, t0, answers[0].t_ns if answers else end_t, mono0, fin_gap)
            if not clean:
                # The capture holds the bytes the client got before the cut: the length announced must promise
                # more (the captured one, else one byte more), so the client reads a truncated body at the abort.
                out.append(("content-length", str(_cut_length(_header(headers, "content-length"), len(data)))))
            elif _header(headers, "content-length") is not None:
                out.append(("content-length", str(len(data))))
            await conn.send(h11.Response(status_code=end.http_status, headers=out, reason=_reason(end.http_status)))
            if data:
                await conn.send(h11.Data(data=data))
            await self._finish(conn, t0, end_t, mono0, clean, end.cause, fin_gap)
            return
        # Triton sends the head with the first response (or with the end when the model sent none).
        await self._at(conn, t0, answers[0].t_ns if answers else end_t, mono0, fin_gap)
        await conn.send(h11.Response(status_code=end.http_status, headers=out, reason=_reason(end.http_status)))
        for i, answer in enumerate(answers):
            # What arrived of an event the cut ended goes out as captured: framing it would complete it.
            cut = not clean and real and i == len(answers) - 1
            await self._event(conn, answer, t0, mono0, cut, fin_gap)
        await self._finish(conn, t0, end_t, mono0, clean, end.cause, fin_gap)

    async def _event(
        self, conn: _Conn, answer: Answer, t0: int, mono0: float, cut: bool, fin_gap: float | None
    ) -> None:
        await self._at(conn, t0, answer.t_ns, mono0, fin_gap)
        data = answer.data or b""
        await conn.send(h11.Data(data=data if cut else sse_block(data)))

    async def _finish(self, conn: _Conn, t0: int, end_t: int, mono0: float, clean: bool, cause: str,
                      fin_gap: float | None) -> None:  # fmt: skip
        if not clean:
            # A client that does not do what the captured one did (no FIN, where Triton's close answered one) still
            # gets the captured end, after the grace of an end the client made.
            await self._at(conn, t0, end_t, mono0, fin_gap, self.session.grace(cause))
            raise _Closed("the captured body did not end cleanly")
        await self._at(conn, t0, end_t, mono0)
        await conn.send(h11.EndOfMessage())
