"""The recording proxy stopped in the loop turn in which a client connection was accepted.

asyncio's own loop accepts in the listening socket's reader callback and makes the transport in a task a
turn later. A stop whose turn comes in the same batch (a SIGTERM as a client connects: `replay send` stopped
mid-run) closed the server in between: the task's attach to the closed server failed, the client was
dropped unanswered, and on 3.13.0 the orphaned transport's ``__del__`` printed a TypeError to stderr.

The stop's signal here is a socket pair made readable just before the client connects, so that the loop
sees both in one poll, the signal first (epoll reports descriptors in the order they became ready).
The upstream is serve's mock Triton: no model answers here, the client never sends a call.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

from proxy.ops.server import ProxyConfig, RecordingProxy
from proxy.relay.core import H2Core
from proxy.relay.options import RelayOptions
from proxy.relay.relay import Relay
from replay.tools.serve import MockTriton, load
from tests.support.aio import until
from tests.support.paths import DATA


def _until_closed(sock: socket.socket) -> bytes:
    """What the proxy sent before it closed (a reset counts as the close)."""
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    return got


def test_a_connection_accepted_in_the_stop_turn_is_taken_then_closed(tmp_path: Path) -> None:
    """The connection gets its transport and is closed by the stop; asyncio reports no failed transport."""
    errors: list[dict[str, Any]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_debug(True)  # (asyncio reports a failed transport creation only in debug mode)
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        upstream = MockTriton(load(DATA / "stream_cancel.jsonl"), speed=1.0)
        port = await upstream.start("127.0.0.1:0")
        proxy = RecordingProxy(ProxyConfig(listen="127.0.0.1:0", upstream=f"127.0.0.1:{port}", capture_dir=tmp_path))
        await proxy.start()
        signal_r, signal_w = socket.socketpair()
        stopping: list[asyncio.Task[None]] = []

        def signalled() -> None:
            loop.remove_reader(signal_r.fileno())
            stopping.append(loop.create_task(proxy.stop(), name="proxy-stop"))

        loop.add_reader(signal_r.fileno(), signalled)
        client = None
        try:
            signal_w.send(b"x")
            # Blocking, with the loop not polling: the connection is in the backlog before the next poll.
            client = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
            await until(lambda: bool(stopping), "the stop began")
            await asyncio.wait_for(stopping[0], 30)
            assert [c.get("message") for c in errors] == []
            try:
                await loop.run_in_executor(None, _until_closed, client)
            except TimeoutError:
                raise AssertionError("the connection accepted as the stop began was left open") from None
        finally:
            for s in (signal_r, signal_w, *([client] if client else [])):
                s.close()
            await upstream.stop(0)

    asyncio.run(main())
    assert [c.get("message") for c in errors] == []  # (nor later, as the loop closed)


class _Transport:
    """A client transport made after the stop (a TLS handshake that ended late): only what the shell uses."""

    aborted = False

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5) if name == "peername" else default

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self.aborted

    def pause_reading(self) -> None:
        pass

    def abort(self) -> None:
        self.aborted = True


def test_a_connection_made_after_the_stop_dropped_every_connection_is_refused_unrecorded() -> None:
    """Nothing would close it later and the capture is over: it is aborted at once, nothing is recorded,
    and its loss is nothing to a core it never got."""
    records: list[Any] = []
    relay = Relay(("127.0.0.1", 1), records.append, RelayOptions(), core_factory=H2Core)

    async def made() -> None:  # (on a loop, as connection_made always is)
        relay.hard_close()
        side = relay.protocol_factory()
        transport = _Transport()
        side.connection_made(transport)  # type: ignore[arg-type]
        assert transport.aborted and not relay.tunnels
        side.connection_lost(None)

    asyncio.run(made())
    assert records == []
