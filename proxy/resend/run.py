"""``replay send``: the recorder in front of ``--target``, the calls sent through it on schedule, a summary.

Everything runs on one event loop: the :class:`~proxy.ops.server.RecordingProxy` (so the new
capture has the recorder's schema and causes) and one :class:`~proxy.resend.h2client.Connection`
per captured connection and pass. A dispatcher starts each call at its scheduled time; each call
then sends its messages, half-close and client ending at their recorded offsets (or the ending
after the recorded number of responses, ``--cancel-at responses``) while its recorded deadline
runs from its start, as the client's did.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.ops.server import ProxyConfig, RecordingProxy
from proxy.relay.contract import OWN_ANSWER
from proxy.resend.h1client import BODY_END, HttpConnection
from proxy.resend.h2client import BY_SEND, LOST, NOT_SENT, STATUS, UNOBSERVED, Connection, Stream
from proxy.resend.plan import CallScript
from proxy.resend.schedule import Lag, Start, scaled
from replay.cli.base import STOP_SIGNALS
from replay.errors import UpstreamError, UserError
from replay.hostport import format_hostport, parse_hostport


@dataclass(frozen=True, kw_only=True)
class SendOptions:
    """Everything ``replay send`` takes once the calls are chosen."""

    target: str | None  # gRPC: Triton's gRPC HOST:PORT (None: the calls are HTTP only)
    out: Path
    speed: float
    loops: int = 1
    cancel_at: str = "time"  # or "responses"
    drain_s: float = 30.0
    http_target: str | None = None  # HTTP: Triton's HTTP HOST:PORT


@dataclass(frozen=True, kw_only=True, slots=True)
class Unobserved:
    """A call that ended without an outcome send observed: what it is and why."""

    call: str
    loop: int
    outcome: str  # h2client.LOST, NOT_SENT or NO_STATUS
    why: str | None


@dataclass
class Tally:
    """What happened, for the progress line and the summary."""

    total: int
    started: int = 0  # calls whose HEADERS went out
    finished: int = 0
    lag: Lag = field(default_factory=Lag)
    # Calls that went out later than their offset because calls that had ended before they began in the capture
    # ended later in this run: by how much (the run's drift from the recorded timeline, not the sender's lag).
    held: Lag = field(default_factory=Lag)
    endings: Counter[str] = field(default_factory=Counter)  # what the *sender* did to end calls
    outcomes: Counter[str] = field(default_factory=Counter)  # how each call ended, as send observed it
    unobserved: list[Unobserved] = field(default_factory=list)
    http_status: Counter[str] = field(default_factory=Counter)  # HTTP calls: the status of each reply head seen
    events: int = 0  # HTTP calls: server-sent events (or whole bodies) received
    stray_frames: int = 0  # frames for calls the server had already ended, ignored (not those after our own reset)
    short: int = 0  # --cancel-at responses: endings sent after --drain, the client's count of responses not reached
    # Request messages not sent because the server had ended their call before their offset, and of how many calls.
    unsent_messages: int = 0
    cut_calls: int = 0
    t_begin: float = 0.0

    def ended(self, start: Start, stream: Stream) -> None:
        """``stream``, the call of ``start``, is over: count how, and keep it if send did not observe how."""
        _own_answer(stream)
        outcome = stream.outcome or NOT_SENT
        self.outcomes[outcome] += 1
        if outcome in UNOBSERVED:
            self.unobserved.append(Unobserved(call=start.call.id, loop=start.loop, outcome=outcome, why=stream.why))
        self.finished += 1


def _own_answer(stream: Stream) -> None:
    """A status (or HTTP error reply) that send's own recorder made up, its message beginning with OWN_ANSWER,
    is no answer of the target's: the target's connection was lost, refused the call or never spoke, and its
    answer never reached send. So the call is LOST, with the recorder's reason, not an outcome observed."""
    if stream.outcome in (STATUS, BODY_END) and stream.message is not None and stream.message.startswith(OWN_ANSWER):
        if stream.outcome == BODY_END:
            stream.responses = 0  # the whole reply was the recorder's
        stream.outcome, stream.why = LOST, "send's recorder: " + stream.message[len(OWN_ANSWER) :]
        stream.status = None


class _Ended:
    """The calls of one pass that have ended in this run, by their rank in the capture's order of ends (on every
    connection): how far the first ones have all ended, and when (see :class:`~proxy.resend.schedule.Start`)."""

    def __init__(self) -> None:
        self.done: set[int] = set()
        self.reached: list[float] = []  # [k]: loop time the first k + 1 (by captured end) had all ended
        self.grew = asyncio.Event()

    def ended(self, rank: int) -> None:
        self.done.add(rank)
        if rank == len(self.reached):
            now = asyncio.get_running_loop().time()
            while len(self.reached) in self.done:
                self.done.discard(len(self.reached))
                self.reached.append(now)
            self.grew.set()

    async def until(self, n: int) -> float:
        """Once the first ``n`` have ended: the loop time the last of them did (not a later one's)."""
        while len(self.reached) < n:
            self.grew.clear()
            await self.grew.wait()
        return self.reached[n - 1]


class _Conns:
    """The connections of the run: one per captured connection and pass, opened at its first call
    (HTTP/1.1 ones to the recorder's HTTP port, the others HTTP/2 to its gRPC port)."""

    def __init__(self, host: str, port: int, uses: Counter[str], http_port: int = 0,
                 http_conns: frozenset[str] = frozenset()) -> None:  # fmt: skip
        self.host, self.port, self.http_port = host, port, http_port
        self._http = http_conns
        self._uses = uses
        self._open: dict[str, Connection | HttpConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.ends: dict[int, _Ended] = {}  # per pass: its calls ended so far
        self.stray_frames = 0  # of the connections closed so far

    async def get(self, key: str) -> Connection | HttpConnection:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            conn = self._open.get(key)
            if conn is None:
                if key in self._http:
                    conn = HttpConnection(self.host, self.http_port, key)
                else:
                    conn = Connection(self.host, self.port, key)
                # Kept once open only: a connection whose connect failed has no socket, and the next
                # call of its captured connection tries again rather than write to nothing.
                await conn.open()
                self._open[key] = conn
            return conn

    async def release(self, key: str) -> None:
        self._uses[key] -= 1
        if self._uses[key] <= 0 and key in self._open:
            await self._close(self._open.pop(key))

    async def close_all(self) -> None:
        for conn in list(self._open.values()):
            await self._close(conn)
        self._open.clear()

    async def _close(self, conn: Connection | HttpConnection) -> None:
        await conn.close()
        self.stray_frames += conn.stray_frames


async def _sleep_until(t: float) -> float:
    """Wait until loop time ``t``; how late we woke (s)."""
    loop = asyncio.get_running_loop()
    delay = t - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)
    return loop.time() - t


def _backstop_s(timeout_ms: float) -> float:
    """When the sender resets a call whose recorded ``grpc-timeout`` is ``timeout_ms`` itself: a little after it.

    The header goes out with the call and a gRPC server (Triton) ends the call at it, which the recorder calls
    ``deadline``. The sender's own timer starts when it queues the call, and the recorder's clock when it reads
    the call's HEADERS: with many calls at once (``--speed max``) that read came 50-70 ms later, and a reset
    at the timeout by the sender's clock was a ``client_cancel`` by the recorder's. So the sender resets only
    a call still open past the timeout by a margin, as a client's timer would have by then."""
    return timeout_ms / 1000 + max(DEADLINE_BACKSTOP_S, DEADLINE_BACKSTOP_FRACTION * timeout_ms / 1000)


#: :func:`_backstop_s`'s margin: at least this, or this fraction of the timeout.
DEADLINE_BACKSTOP_S = 0.25
DEADLINE_BACKSTOP_FRACTION = 0.1


async def _deadline(conn: Connection, stream: Stream, timeout_s: float, tally: Tally) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stream.done.wait(), timeout_s)
        return
    if not stream.done.is_set():
        tally.endings["deadline"] += 1
        conn.cancel(stream)


async def _until_responses(stream: Stream, n: int, due: float, opts: SendOptions) -> bool:
    """``--cancel-at responses``: until the call has ``n`` responses or has ended, but not past ``--drain`` after
    the ending's own time ``due`` (loop time): a server that sends fewer and then goes quiet (a model answering
    with fewer tokens, the stream left open) would keep the sender waiting forever. False: cut short (the
    ending then goes out late, with fewer responses than the client had: the caller counts it if it does)."""
    if opts.cancel_at != "responses":
        return True
    loop = asyncio.get_running_loop()
    while stream.responses < n and not stream.done.is_set():
        stream.progress.clear()
        try:
            await asyncio.wait_for(stream.progress.wait(), max(0.0, due + opts.drain_s - loop.time()))
        except TimeoutError:
            return False
    return True


async def _http_call(start: Start, conn: HttpConnection, conns: _Conns, opts: SendOptions, tally: Tally) -> None:
    """One HTTP call of one pass: the recorded request at once (its body was whole when it was recorded),
    then the client's disconnect, if it made one, at its offset (or after its number of events)."""
    c: CallScript = start.call
    body = b"".join(m.body for m in c.messages)
    stream = await conn.request(c.method, c.headers, body)
    try:
        if stream.done.is_set() and stream.outcome == NOT_SENT:
            return
        tally.started += 1
        begun = asyncio.get_running_loop().time()
        fin = c.half_close_ns
        reset = False
        if fin is not None and not stream.done.is_set():
            # The recorded client's FIN (a close or a half-close: the wire showed only the FIN), at its offset;
            # with --cancel-at responses, a FIN that was the disconnect also waits for the events it had.
            due = begun + scaled(fin, opts.speed)
            full = True
            if c.ending is not None and c.ending.cause == "client_disconnect":
                full = await _until_responses(stream, c.ending.responses, due, opts)
            await _sleep_until(due)
            if not stream.done.is_set():
                tally.short += not full
                conn.half_close()
        if fin is not None and c.ending is not None and c.ending.cause == "client_disconnect":
            pass  # that FIN was the disconnect: what the server does about it is the call's end, not a reset
        elif c.ending is not None and not stream.done.is_set():
            due = begun + scaled(c.ending.at_ns, opts.speed)
            full = await _until_responses(stream, c.ending.responses, due, opts)
            await _sleep_until(due)
            if not stream.done.is_set():
                tally.endings[c.ending.cause] += 1
                tally.short += not full
                reset = True
                conn.disconnect()
        try:
            await asyncio.wait_for(stream.done.wait(), opts.drain_s)
        except TimeoutError:
            tally.endings["cut_by_send"] += 1  # the server never ended it: end it rather than wait forever
            reset = True
            conn.disconnect()
        if fin is not None and not reset and stream.outcome == BY_SEND:
            tally.endings["client_disconnect"] += 1  # the server closed on send's FIN
    finally:
        if not stream.done.is_set():
            stream.finish(LOST, "send stopped before the call ended")
        tally.ended(start, stream)  # (first: the recorder's own reply is no HTTP status the target gave)
        if stream.status is not None:
            tally.http_status[stream.status] += 1
        tally.events += stream.responses
        conn.release(stream)
        await conns.release(start.conn)


async def _call(start: Start, conns: _Conns, t0: float, opts: SendOptions, tally: Tally) -> None:
    """One call of one pass, from HEADERS to its end (then the calls of its pass that waited for it may go: see
    :class:`~proxy.resend.schedule.Start`)."""
    ended = conns.ends.setdefault(start.loop, _Ended())
    try:
        due = t0 + start.at_s
        if start.after:
            after = await ended.until(start.after) + start.pause_s
            if after > due:
                tally.held.add(after - due)
                due = after
        tally.lag.add(await _sleep_until(due))
        await _sent(start, conns, t0, opts, tally)
    finally:
        if start.rank is not None:
            ended.ended(start.rank)


async def _sent(start: Start, conns: _Conns, t0: float, opts: SendOptions, tally: Tally) -> None:
    c: CallScript = start.call
    try:
        conn = await conns.get(start.conn)
    except OSError as e:
        # The recorder is local: only a machine out of sockets gets here.
        stream = Stream(0)
        stream.finish(NOT_SENT, f"cannot connect to the recorder: {e.strerror or e}")
        tally.ended(start, stream)
        await conns.release(start.conn)
        return
    if isinstance(conn, HttpConnection):
        await _http_call(start, conn, conns, opts, tally)
        return
    stream = conn.start(c.headers)
    if stream.done.is_set():  # never opened: its connection is gone
        tally.ended(start, stream)
        await conns.release(start.conn)
        return
    tally.started += 1
    begun = asyncio.get_running_loop().time()
    timer = None
    if c.timeout_ms is not None:
        timer = asyncio.create_task(_deadline(conn, stream, _backstop_s(c.timeout_ms), tally), name=f"send-deadline-{c.id}")
    try:
        for i, m in enumerate(c.messages):
            tally.lag.add(await _sleep_until(begun + scaled(m.at_ns, opts.speed)))
            if stream.done.is_set():
                # The server ended the call first (the recorded one had not, or later): the rest cannot go.
                tally.unsent_messages += len(c.messages) - i
                tally.cut_calls += 1
                break
            await conn.send_message(stream, m.body, m.compressed)
        if c.half_close_ns is not None and not stream.done.is_set():
            await _sleep_until(begun + scaled(c.half_close_ns, opts.speed))
            conn.half_close(stream)
        if c.ending is not None and c.ending.cause != "deadline" and not stream.done.is_set():
            # With --cancel-at responses: the client had this many responses, and it did not act sooner than it
            # did (a unary call has none to count: it is cancelled at its offset, while the model works).
            due = begun + scaled(c.ending.at_ns, opts.speed)
            full = await _until_responses(stream, c.ending.responses, due, opts)
            await _sleep_until(due)
            if not stream.done.is_set():
                tally.endings[c.ending.cause] += 1
                tally.short += not full
                if c.ending.cause == "client_disconnect":
                    conn.disconnect()
                elif c.ending.rst_code is not None:
                    conn.cancel(stream, c.ending.rst_code)  # the recorded code: the recorder reads the status from it
                else:
                    conn.cancel(stream)
        try:
            await asyncio.wait_for(stream.done.wait(), opts.drain_s)
        except TimeoutError:
            tally.endings["cut_by_send"] += 1  # the server never ended it: end it rather than wait forever
            conn.cancel(stream)
    finally:
        if timer is not None:
            timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await timer
        if not stream.done.is_set():  # interrupted (Ctrl-C, an error): no outcome was observed
            stream.finish(LOST, "send stopped before the call ended")
        tally.ended(start, stream)
        await conns.release(start.conn)


async def drive(starts: Sequence[Start], proxy_port: int, opts: SendOptions, tally: Tally,
                tick: Callable[[], None] | None = None, http_port: int = 0) -> None:  # fmt: skip
    """Send every call of ``starts`` through the recorder listening on ``proxy_port`` (HTTP calls: ``http_port``)."""
    http = frozenset(s.conn for s in starts if s.call.http)
    conns = _Conns("127.0.0.1", proxy_port, Counter(s.conn for s in starts), http_port, http)
    loop = asyncio.get_running_loop()
    t0 = tally.t_begin = loop.time()
    try:
        async with asyncio.TaskGroup() as tg:
            for i, s in enumerate(starts):
                # Tasks are made just before they are due, not all at once: a long capture stays cheap.
                await _sleep_until(t0 + s.at_s - 0.05)
                tg.create_task(_call(s, conns, t0, opts, tally), name=f"send-call-{s.loop}-{s.call.id}-{i}")
                if tick is not None:
                    tick()
            if tick is not None:
                while tally.finished < len(starts):
                    tick()
                    await asyncio.sleep(0.2)
    finally:
        await conns.close_all()
        tally.stray_frames = conns.stray_frames


async def send(starts: Sequence[Start], opts: SendOptions, tally: Tally,
               tick: Callable[[], None] | None = None) -> Path:  # fmt: skip
    """Start the recorder towards ``opts.target``, drive the calls, close the capture; returns its path."""
    grpc_calls = any(not s.call.http for s in starts)
    http_calls = any(s.call.http for s in starts)
    if grpc_calls and opts.target is None:
        raise UserError("the capture has gRPC calls to send: give --target (Triton's gRPC HOST:PORT)")
    if http_calls and opts.http_target is None:
        raise UserError("the capture has HTTP calls to send: give --http-target (Triton's HTTP HOST:PORT)")
    upstream = format_hostport(*parse_hostport(opts.target, "--target")) if grpc_calls and opts.target else ""
    http_upstream = (format_hostport(*parse_hostport(opts.http_target, "--http-target"))
                     if http_calls and opts.http_target else None)  # fmt: skip
    created = not opts.out.exists()
    proxy = RecordingProxy(ProxyConfig(listen="127.0.0.1:0" if upstream else "", upstream=upstream,
                                       http_listen="127.0.0.1:0" if http_upstream else None, http_upstream=http_upstream,
                                       capture_dir=opts.out, payload="full", drain_timeout=opts.drain_s))  # fmt: skip
    try:
        await proxy.start()
    except UpstreamError as e:
        if created:
            with contextlib.suppress(OSError):
                opts.out.rmdir()  # made for this run and still empty: leave nothing behind
        # Nobody answered at --target: the upstream failed the run, not its input (exit 1, not 2).
        raise UpstreamError(f"{'--target' if upstream else '--http-target'}: {e}") from None
    try:
        await drive(starts, proxy.port, opts, tally, tick, proxy.http_port)
    finally:
        await proxy.stop()
    return proxy.capture_path


def run_send(starts: Sequence[Start], opts: SendOptions, tally: Tally, tick: Callable[[], None] | None = None) -> Path:
    """:func:`send` on a fresh event loop (the CLI's entry); SIGTERM stops it as Ctrl-C does."""
    return asyncio.run(_sigterm_interrupts(send(starts, opts, tally, tick)))


async def _sigterm_interrupts(main: Coroutine[Any, Any, Path]) -> Path:
    """``main``, cancelled by SIGTERM or SIGHUP (``STOP_SIGNALS``) as asyncio.run cancels it on Ctrl-C (the recorder's stop in its ``finally``
    ends the calls in flight and writes ``capture_end``), then KeyboardInterrupt: a harness's timeout or
    ``kill`` leaves a capture as complete as Ctrl-C does, not one cut off without its end."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    terminated = False

    def on_sigterm() -> None:
        nonlocal terminated
        terminated = True
        task.cancel()

    try:
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, on_sigterm)
    except (RuntimeError, ValueError):  # not the main thread (an embedding program's): its own signals then
        return await main
    try:
        return await main
    except asyncio.CancelledError:
        if terminated:
            raise KeyboardInterrupt from None
        raise
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
