"""What every connection of one proxy shares: options, the capture sink, id counters, the open connections."""

from __future__ import annotations

import asyncio
import itertools
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any

from proxy.relay.contract import CoreFactory
from proxy.relay.core import H2Core
from proxy.relay.options import RelayOptions
from proxy.relay.shell import Connection


class Relay:
    """Everything the connections share: options, the capture sink, id counters, the open connections
    (``tunnels``), the protocol core each one gets (``core_factory``)."""

    def __init__(
        self,
        upstream: tuple[str, int],
        emit: Callable[[Any], None],
        options: RelayOptions | None = None,
        upstream_tls: ssl.SSLContext | None = None,
        upstream_server_name: str | None = None,
        conn_prefix: str = "c",
        emit_message: Callable[[Any], None] | None = None,
        core_factory: CoreFactory = H2Core,
        conn_ids: Iterator[int] | None = None,
    ) -> None:
        self.upstream = upstream
        self.emit = emit
        #: Where ``message`` records go (default: ``emit``). The most frequent records, and the observer
        #: in front of the writer only counts them for the metrics: without metrics they may go to the
        #: writer directly, one call a message less.
        self.emit_message = emit_message or emit
        self.options = options or RelayOptions()
        self.upstream_tls = upstream_tls
        self.upstream_server_name = upstream_server_name
        #: ``:authority`` sent upstream instead of the client's (a TLS upstream may route on it).
        self.authority = upstream_server_name.encode() if upstream_server_name else None
        #: Open connections (each a :class:`~proxy.relay.shell.Connection`; it leaves when its client
        #: connection is lost).
        self.tunnels: set[Connection] = set()
        #: The protocol core of each client connection: gRPC over HTTP/2 (:class:`H2Core`), or HTTP/1.1
        #: for Triton's HTTP port (:class:`proxy.relay.http1.Http1Core`).
        self.core_factory: CoreFactory = core_factory
        #: Connection numbers; the relays of one proxy (gRPC and HTTP ports) share one counter, so
        #: connection and call ids are unique across the capture.
        self._conn_ids = conn_ids if conn_ids is not None else itertools.count(1)
        #: Connection ids are ``<prefix><n>``: ``record --workers`` gives each worker its own prefix,
        #: so call ids stay unique across the capture set.
        self.conn_prefix = conn_prefix
        self.open_calls = 0
        #: Set once :meth:`hard_close` dropped every connection: one made later is refused.
        self.closed = False
        #: Called with the call id just before a cancel is forwarded upstream (``record --evidence``
        #: marks the end of Triton's log there: Triton may log the cancel before the record exists).
        self.before_cancel: Callable[[str], None] | None = None
        #: Called when a read of either side has been handled and what goes on has been written (the
        #: metrics' forwarding latency ends there): a plain call per read, where a loop callback per
        #: read cost the proxy an event-loop handle each time.
        self.after_read: Callable[[], None] | None = None

    def protocol_factory(self) -> asyncio.Protocol:
        """For ``loop.create_server``: a new connection per client connection."""
        # The connection joins ``tunnels`` when it is made: a TLS client refused at the handshake
        # never gets that far, and must not stay in the set forever.
        return Connection(self, f"{self.conn_prefix}{next(self._conn_ids)}").client

    def begin_shutdown(self) -> None:
        """Stop taking new calls: GOAWAY to every client, in-flight calls go on."""
        for t in list(self.tunnels):
            t.goaway()

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is open (True) or ``timeout`` seconds passed (False)."""
        deadline = time.monotonic() + timeout
        while self.open_calls and time.monotonic() < deadline:
            # Condition polling at a short interval: calls end from protocol callbacks that have no
            # awaitable to hand out, and shutdown is not a hot path.
            await asyncio.sleep(0.01)
        return self.open_calls == 0

    def hard_close(self) -> None:
        """Drop every connection still open without waiting for buffered bytes."""
        for t in list(self.tunnels):
            for side in (t.client, t.upstream):
                if side.transport is not None:
                    side.transport.abort()
        self.tunnels.clear()
        self.closed = True

    def abort_all(self, cause: str) -> None:
        """End every open call with ``cause`` (``proxy_shutdown``) and close every connection."""
        for t in list(self.tunnels):
            t.abort(cause)
