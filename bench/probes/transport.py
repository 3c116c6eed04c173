"""The in-memory asyncio transport that drives a relay connection (:mod:`proxy.relay.shell`) without sockets.

One definition for ``python -m bench.micro`` and the relay's pure tests (``tests.support.transport``
hands this one on): both need exact control of which bytes arrive in which read, and see what the
tunnel writes, read by read. It lives here because bench must not import tests.
"""

from __future__ import annotations

import asyncio
from typing import Any


class MemoryTransport(asyncio.Transport):
    """An in-memory transport for driving a relay connection without sockets (``bench.micro`` and the relay tests)."""

    def __init__(self) -> None:
        super().__init__()
        self.out: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed, "write after close"
        self.out.append(bytes(data))

    def take(self) -> bytes:
        data = b"".join(self.out)
        self.out.clear()
        return data

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0
