"""The relay's I/O shell: asyncio protocols, the upstream connect, timers, reading paused for
backpressure, TLS. It knows nothing of HTTP/2.

A :class:`Connection` is one client connection and the upstream connection opened for it; its
protocol core (:class:`proxy.relay.contract.ProtocolCore`, :class:`proxy.relay.core.H2Core` for
gRPC) decides everything the bytes mean. The shell gives the core its inputs (each read, the
upstream connected or unreachable, a side lost, a timer fired) and carries out each step's
:class:`~proxy.relay.contract.Output`: one write per side, then the commands (close a side, arm or cancel a timer, a log line), then the next step.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Callable
from typing import Any, Protocol, cast

import structlog

from proxy.relay.contract import (
    CLIENT,
    OWN_ANSWER,
    UPSTREAM,
    ArmTimer,
    CancelTimer,
    Close,
    CoreFactory,
    Log,
    Output,
    ProtocolCore,
    Shared,
    WriteEof,
)
from proxy.relay.peercert import client_subject

log = structlog.get_logger("triton_tap.relay")

#: Bytes the proxy lets queue towards one peer before it stops reading the other one: with the
#: end-to-end windows this only binds when a peer stops reading its socket altogether.
WRITE_HIGH = 4 * 1024 * 1024
WRITE_LOW = 1024 * 1024


def _tls(t: asyncio.BaseTransport) -> bool:
    return t.get_extra_info("ssl_object") is not None


#: The most :func:`_unread` takes from a socket (the kernel's receive buffer holds less).
UNREAD_MAX = 16 * 1024 * 1024


def _unread(t: asyncio.Transport | None) -> bytes:
    """What the peer sent that the loop never read from ``t``'s socket, which is still open while its protocol
    is told of the loss (asyncio and uvloop close it after). Plain TCP only: over TLS these bytes are records
    only the transport's SSL object could read."""
    if t is None or _tls(t):
        return b""
    sock = t.get_extra_info("socket")
    fd = sock.fileno() if sock is not None else -1
    chunks: list[bytes] = []
    size = 0
    while fd >= 0 and size < UNREAD_MAX:
        try:
            data = os.read(fd, 65536)  # (non-blocking, as the loop left it)
        except OSError:  # nothing more (BlockingIOError), or the reset itself, which comes after the bytes
            break
        if not data:
            break
        chunks.append(data)
        size += len(data)
    return b"".join(chunks)


def _no_core(data: bytes) -> Output:
    raise RuntimeError("a read before the connection's core exists")


def _no_step() -> Output | None:
    raise RuntimeError("a step before the connection's core exists")


class Side(asyncio.Protocol):
    """One transport of a connection (the client's or the upstream's); its reads go to the core."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        #: Why reading this side is paused: "connect" (upstream not there yet), "peer" (the other
        #: side's write buffer is full). Reading resumes when no reason is left.
        self.hold: set[str] = set()
        #: Bytes that arrived while reading was held for "connect": some event loops (uvloop) may
        #: deliver a read already under way when reading is paused inside connection_made.
        self._held: list[bytes] | None = None
        #: The peer's FIN arrived while bytes were held for "connect": it is handled after them (TCP's order).
        #: Handled at once, the core passed the half-close upstream, and the held bytes, written after it,
        #: raised in the connect task (write after write_eof) and were lost with their call.
        self._held_eof = False
        #: What the peer's FIN was answered (keep the transport open or not), once handled: uvloop delivers an
        #: EOF read while reading was paused for "connect" again once reading resumes, and the core must see
        #: one FIN (a second one recorded a second half_close).
        self._eof_answer: bool | None = None
        #: The core's input for this side's reads (``receive_c2s`` or ``receive_s2c``), once it exists,
        #: and its next step.
        self.receive: Callable[[bytes], Output] = _no_core
        self.resume: Callable[[], Output | None] = _no_step

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (the protocol is only used with create_server/create_connection); not an
        # isinstance check: uvloop's transports implement the interface without subclassing asyncio's.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(WRITE_HIGH, WRITE_LOW)
        self.conn.side_made(self)

    def data_received(self, data: bytes) -> None:
        if self._held is not None:
            self._held.append(data)
            return
        conn = self.conn
        out: Output | None = self.receive(data)
        # Connection.perform, inline: this runs once per read of either side (bench.icount).
        while out is not None:
            write = out.c2s
            if write is not None:
                t = conn.upstream.transport
                if t is not None and not t.is_closing():
                    t.write(write)  # one slice of the read: no copy for a 100 MB tensor's frames
            write = out.s2c
            if write is not None:
                t = conn.client.transport
                if t is not None and not t.is_closing():
                    t.write(write)
            if out.commands:
                conn.commands(out.commands)
            out = self.resume() if out.more else None
        after = conn.relay.after_read
        if after is not None:
            after()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.receive is not _no_core:
            # A write that failed on the peer's reset ends the transport before the loop read what the peer
            # sent ahead of that reset: a client that cancels (RST_STREAM) and closes with responses unread
            # (its kernel resets) had its cancel recorded as a disconnect. The kernel keeps those bytes
            # readable after the reset: they are handled first, in TCP's order.
            rest = _unread(self.transport)
            if rest:
                self.data_received(rest)
        self.conn.side_lost(self, exc)

    def pause_writing(self) -> None:
        self.conn.other(self).hold_reading("peer", True)

    def resume_writing(self) -> None:
        self.conn.other(self).hold_reading("peer", False)

    def eof_received(self) -> bool:
        # True keeps the transport open for writing (half-closed): the core decides, by its commands.
        if self._eof_answer is not None:
            return self._eof_answer
        if self._held is not None and self.transport is not None and not _tls(self.transport):
            # (Over TLS the FIN ends the connection as a loss at once: side_eof; asyncio ignores True there.)
            self._held_eof = True
            return True  # (decided when the held bytes are handled: hold_reading)
        self._eof_answer = self.conn.side_eof(self)
        return self._eof_answer

    def hold_reading(self, reason: str, on: bool) -> None:
        """Pause (``on``) or release reading for ``reason``."""
        before = bool(self.hold)
        if on:
            self.hold.add(reason)
            if reason == "connect":
                self._held = []
        else:
            self.hold.discard(reason)
            if reason == "connect" and self._held is not None:
                held, self._held = self._held, None
                for data in held:
                    self.data_received(data)
                if self._held_eof:
                    self._held_eof = False
                    t = self.transport
                    self._eof_answer = self.conn.side_eof(self)
                    if not self._eof_answer and t is not None and not t.is_closing():
                        t.close()  # (what asyncio does when eof_received says not to stay open)
        t = self.transport
        if t is None or t.is_closing() or before == bool(self.hold):
            return
        if self.hold:
            t.pause_reading()
        else:
            t.resume_reading()


class Owner(Shared, Protocol):
    """What the shell needs of the connections' owner (:class:`proxy.relay.relay.Relay` is one)."""

    upstream: tuple[str, int]
    upstream_tls: ssl.SSLContext | None
    upstream_server_name: str | None
    #: Open connections (a connection joins when its client connection is made, leaves when it is lost).
    tunnels: set[Connection]
    #: Every connection was dropped at a stop: a client connection made after it is refused.
    closed: bool
    core_factory: CoreFactory
    #: Called after each read of either side is handled and written, or None.
    after_read: Callable[[], None] | None


class Connection:
    """A client connection, the upstream connection opened for it, and the protocol core between them."""

    def __init__(self, relay: Owner, conn_id: str) -> None:
        self.relay = relay
        self.conn_id = conn_id
        self.client = Side(self)
        self.upstream = Side(self)
        #: Made with the client connection (it needs the peer's address and certificate).
        self.core: ProtocolCore = cast(ProtocolCore, None)
        self._connect_task: asyncio.Task[None] | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._client_gone = False

    @property
    def calls(self) -> dict[int, Any]:
        """The open calls (for the admin service)."""
        return self.core.calls if self.core is not None else {}

    def other(self, side: Side) -> Side:
        """The transport facing the other peer."""
        return self.upstream if side is self.client else self.client

    def open(self, transport: asyncio.Transport) -> None:
        """Make the core for the client connection on ``transport`` (without connecting upstream)."""
        peer = transport.get_extra_info("peername")
        self.core = self.relay.core_factory(
            self.relay, self.conn_id, f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer),
            client_subject(transport), transport.get_write_buffer_size,
        )  # fmt: skip
        self.client.receive = self.core.receive_c2s
        self.upstream.receive = self.core.receive_s2c
        self.client.resume = self.upstream.resume = self.core.resume

    def side_made(self, side: Side) -> None:
        if side is self.client:
            assert side.transport is not None
            if self.relay.closed:
                # Made after the stop dropped every connection (a TLS handshake that ended late): nothing
                # would ever close it, and the capture is over. Refused unrecorded, with no core.
                side.transport.abort()
                return
            self.open(side.transport)
            self.relay.tunnels.add(self)
            # Hold the client's bytes until the upstream connection exists.
            side.hold_reading("connect", True)
            self._connect_task = asyncio.get_running_loop().create_task(
                self._connect(), name=f"triton-tap-upstream-connect-{self.conn_id}"
            )
        else:
            self.perform(self.core.connected())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.relay.upstream
        tls = self.relay.upstream_tls
        try:
            await loop.create_connection(
                lambda: self.upstream, host, port, ssl=tls,
                server_hostname=(self.relay.upstream_server_name or host) if tls is not None else None,
            )  # fmt: skip
        except OSError as e:  # ssl.SSLError and certificate errors included
            # (asyncio words a refused connect "Connect call failed ('H', P)": the errno says what failed)
            why = os.strerror(e.errno) if e.errno and not isinstance(e, ssl.SSLError) else e.strerror or str(e)
            reason = f"{OWN_ANSWER}upstream {host}:{port} unreachable: {why}"
            log.warning("upstream_connect_failed", conn=self.conn_id, error=reason)
            self.perform(self.core.connect_failed(reason))
        if not self._client_gone:
            self.client.hold_reading("connect", False)

    def side_lost(self, side: Side, exc: Exception | None) -> None:
        if self.core is None:
            return  # refused when made (see side_made): nothing was opened
        if side is self.client:
            self._client_gone = True
            self.perform(self.core.lost(CLIENT, exc))
            if self._connect_task is not None and not self._connect_task.done():
                self._connect_task.cancel()
            for handle in self._timers.values():
                handle.cancel()
            self._timers.clear()
            self.relay.tunnels.discard(self)
        else:
            self.client.hold_reading("peer", False)
            self.perform(self.core.lost(UPSTREAM, exc))

    def side_eof(self, side: Side) -> bool:
        """``side``'s peer shut its writing half; True: the transport stays open for writing.

        Over TLS (on either side) a half-close cannot be passed on (asyncio's TLS transports neither
        stay open after the peer's close_notify nor write one alone), so there it ends the connection
        as a loss, without asking the core."""
        t = side.transport
        o = self.other(side).transport
        if t is None or _tls(t) or (o is not None and (_tls(o) or not o.can_write_eof())):
            return False
        self.perform(self.core.eof(CLIENT if side is self.client else UPSTREAM))
        return not t.is_closing()

    def goaway(self) -> None:
        """Shutdown: no new calls on this connection; calls in flight go on."""
        self.perform(self.core.goaway())

    def abort(self, cause: str) -> None:
        """End every open call with ``cause`` and close both connections."""
        self.perform(self.core.abort(cause))

    def perform(self, out: Output | None) -> None:
        """Carry out each step of an input: writes, then commands; then the next step."""
        while out is not None:  # (inline in Side.data_received too)
            data = out.c2s
            if data is not None:
                t = self.upstream.transport
                if t is not None and not t.is_closing():
                    t.write(data)
            data = out.s2c
            if data is not None:
                t = self.client.transport
                if t is not None and not t.is_closing():
                    t.write(data)
            if out.commands:
                self.commands(out.commands)
            out = self.core.resume() if out.more else None

    def commands(self, commands: list[Any]) -> None:
        """Carry out a step's commands."""
        for c in commands:
            if type(c) is Close:
                t = (self.client if c.side == CLIENT else self.upstream).transport
                if t is not None:
                    t.close()
            elif type(c) is WriteEof:
                t = (self.client if c.side == CLIENT else self.upstream).transport
                if t is not None and not t.is_closing() and t.can_write_eof():
                    t.write_eof()
            elif type(c) is ArmTimer:
                old = self._timers.pop(c.name, None)
                if old is not None:
                    old.cancel()
                self._timers[c.name] = asyncio.get_running_loop().call_later(c.delay_s, self._fire, c.name)
            elif type(c) is CancelTimer:
                handle = self._timers.pop(c.name, None)
                if handle is not None:
                    handle.cancel()
            elif type(c) is Log:
                if c.level == "exception":
                    log.error(c.event, conn=self.conn_id, exc_info=c.exc, **c.fields)
                else:
                    log.warning(c.event, conn=self.conn_id, **c.fields)

    def _fire(self, name: str) -> None:
        self._timers.pop(name, None)
        self.perform(self.core.timer(name))
