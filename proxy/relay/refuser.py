"""A client whose upstream cannot be reached still gets an answer: UNAVAILABLE, from a small h2 server."""

from __future__ import annotations

from typing import TYPE_CHECKING

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import structlog

from proxy.wire.headers import status_trailers

if TYPE_CHECKING:
    from proxy.relay.state import TunnelState

log = structlog.get_logger("triton_tap.relay")


class Refuser:
    """Speaks HTTP/2 to a client whose upstream could not be reached: every call gets UNAVAILABLE.

    The one place the proxy terminates HTTP/2 itself (with ``h2``): there is no peer to relay to.
    """

    def __init__(self, tunnel: TunnelState, reason: str) -> None:
        self.tunnel = tunnel
        self.reason = reason
        self.conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=False, header_encoding=None, validate_inbound_headers=False)
        )
        self.conn.initiate_connection()
        self.closed = False
        self._write()

    def _write(self) -> None:
        t = self.tunnel.down.transport
        data = self.conn.data_to_send()
        if data and t is not None and not t.is_closing():
            t.write(data)

    def feed(self, data: bytes) -> None:
        """Bytes from the client."""
        tunnel = self.tunnel
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError as e:
            if self.closed:
                # After our GOAWAY h2 refuses every frame and queues a GOAWAY(PROTOCOL_ERROR) of its
                # own; but frames a client had in flight (PING, WINDOW_UPDATE) are legal: drop it.
                self.conn.data_to_send()
                return
            self._write()
            tunnel._protocol_error(tunnel.down, int(getattr(e, "error_code", None) or 1), str(e) or type(e).__name__, goaway=False)
            return
        answered = False
        try:
            for event in events:
                if isinstance(event, h2.events.RequestReceived):
                    answered = True
                    call = tunnel._request(event.stream_id, event.headers)
                    try:
                        self.conn.send_headers(event.stream_id, status_trailers(14, self.reason, True), end_stream=True)
                    except h2.exceptions.ProtocolError:
                        pass
                    tunnel._end(call, "upstream_disconnect", "UNAVAILABLE", self.reason, None)
                elif isinstance(event, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        except Exception:
            log.exception("relay_internal_error", conn=tunnel.conn_id)
            tunnel.abort("proxy_error")
            return
        self._write()
        if answered:
            # The calls sent so far have their status and its reason; now tell the client to open
            # no more calls here, so its next call reconnects (and reaches Triton once it is back)
            # instead of being refused on this connection forever.
            tunnel.goaway_down()

    def goaway(self) -> None:
        """No new calls on this connection."""
        self.closed = True
        self.conn.close_connection(last_stream_id=self.tunnel.max_down_id)
        self._write()
