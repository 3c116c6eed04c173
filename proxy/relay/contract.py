"""What a protocol core and the I/O shell say to each other (:mod:`proxy.relay.core`, :mod:`proxy.relay.shell`).

A protocol core turns inputs (the bytes of one read of either side, a side connected or lost, a
timer fired, shutdown) into an :class:`Output` per step: the bytes to write to each side and the
:data:`Command` values the shell carries out. The shell knows only this vocabulary, so any core
that speaks it runs under the same shell: :class:`proxy.relay.core.H2Core` (gRPC over HTTP/2) and
:class:`proxy.relay.http1.Http1Core` (Triton's HTTP/1.1 port).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from proxy.relay.options import RelayOptions

#: Directions: what a read carries and where a write goes (``c2s``: from the client, to the upstream).
C2S: Final = 0
S2C: Final = 1
#: The two sides, as commands name them.
CLIENT: Final = "client"
UPSTREAM: Final = "upstream"
#: What every answer the proxy makes up itself begins with (a gRPC status's message, an HTTP error body's
#: ``error``): the upstream's answer never came, and a client of the proxy (``replay send``) can tell so.
OWN_ANSWER: Final = "triton-tap: "


@dataclass(frozen=True, slots=True)
class Close:
    """Close a side's connection (after this step's writes)."""

    side: str


@dataclass(frozen=True, slots=True)
class WriteEof:
    """Shut the writing half of a side's connection (TCP FIN, after this step's writes); reading goes on."""

    side: str


@dataclass(frozen=True, slots=True)
class ArmTimer:
    """Give the core the input ``timer(name)`` after ``delay_s`` seconds."""

    name: str
    delay_s: float


@dataclass(frozen=True, slots=True)
class CancelTimer:
    """Forget the timer ``name`` if it is armed."""

    name: str


@dataclass(frozen=True, slots=True)
class Log:
    """A line for the proxy's log (a core has no logger: logging is I/O)."""

    level: str  # "warning" | "exception"
    event: str
    fields: dict[str, Any] = field(default_factory=dict)
    exc: BaseException | None = None


Command = Close | WriteEof | ArmTimer | CancelTimer | Log


class Output:
    """What one step of an input asks of the shell, in this order: write ``c2s`` to the upstream and
    ``s2c`` to the client (one write per side, or none), run ``commands``; then, if ``more``, give
    the core ``resume()`` for the next step (None from it: the input is done).

    One object per core, filled anew by every step: the shell is done with it before the next input."""

    __slots__ = ("c2s", "commands", "more", "s2c")

    def __init__(self) -> None:
        self.c2s: Any = None
        self.s2c: Any = None
        self.commands: list[Command] = []
        self.more = False


class Shared(Protocol):
    """What every connection of one proxy shares (:class:`proxy.relay.relay.Relay` is one)."""

    options: RelayOptions
    #: ``:authority`` sent upstream instead of the client's, or None.
    authority: bytes | None
    #: Open calls of all connections.
    open_calls: int
    emit: Callable[[Any], None]
    #: Where ``message`` records go (the most frequent ones).
    emit_message: Callable[[Any], None]
    #: Called with a call's id just before its cancel is handed to the upstream socket, or None.
    before_cancel: Callable[[str], None] | None


class ProtocolCore(Protocol):
    """A protocol core as the shell drives it: every input returns the first step's output."""

    #: Open calls by stream (the admin service lists them).
    calls: dict[int, Any]

    def receive_c2s(self, data: bytes) -> Output: ...
    def receive_s2c(self, data: bytes) -> Output: ...
    def resume(self) -> Output | None: ...
    def connected(self) -> Output: ...
    def connect_failed(self, reason: str) -> Output: ...
    def lost(self, side: str, exc: Exception | None) -> Output: ...
    #: A side's peer shut its writing half (TCP FIN) and the connection still carries the other
    #: direction: the core either passes the half-close on (:class:`WriteEof` to the other side) or
    #: ends the connection (:class:`Close` of this side; its loss follows).
    def eof(self, side: str) -> Output: ...
    def timer(self, name: str) -> Output: ...
    def goaway(self) -> Output: ...
    def abort(self, cause: str) -> Output: ...


#: Makes the core of a new client connection: (shared, connection id, peer, client certificate
#: subject, the client socket's unsent byte count).
CoreFactory = Callable[[Shared, str, str, "str | None", Callable[[], int]], ProtocolCore]
