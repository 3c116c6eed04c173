"""Bytes in, frames out: a tunnel's reads, the verbatim writes, and the frames of the proxy's own.

Every read of either side is cut into frames once (:class:`proxy.wire.frames.FrameReader`), each
frame handled (:mod:`proxy.relay.from_client`, :mod:`proxy.relay.from_upstream`), and what goes
on written once at the end of the read, or before the handling when nothing of the read can
change on the way (:meth:`Transports._plain`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from proxy.relay.peercert import client_subject
from proxy.relay.refuser import Refuser
from proxy.relay.side import Side
from proxy.relay.state import Frame, TunnelState
from proxy.wire import frames as wire

log = structlog.get_logger("triton_tap.relay")


class Transports(TunnelState):
    """The tunnel's part that reads and writes its two transports."""

    def side_made(self, side: Side) -> None:
        if side is self.down:
            assert side.transport is not None
            self.relay.tunnels.add(self)
            peer = side.transport.get_extra_info("peername")
            self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
            self.client_subject = client_subject(side.transport)
            # Hold the client's bytes until the upstream connection exists.
            side.hold_reading("connect", True)
            self._connect_task = asyncio.get_running_loop().create_task(
                self._connect(), name=f"triton-tap-upstream-connect-{self.conn_id}"
            )
        else:
            self.up_ready = True

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.relay.upstream
        tls = self.relay.upstream_tls
        try:
            await loop.create_connection(
                lambda: self.up, host, port, ssl=tls,
                server_hostname=(self.relay.upstream_server_name or host) if tls is not None else None,
            )  # fmt: skip
        except OSError as e:  # ssl.SSLError and certificate errors included
            reason = f"triton-tap: upstream {host}:{port} unreachable: {e.strerror or e}"
            log.warning("upstream_connect_failed", conn=self.conn_id, error=reason)
            # Someone must speak HTTP/2 to the client to give it a status: a small h2 server.
            self.refuser = Refuser(self, reason)
        if not self.down_lost:
            self.down.hold_reading("connect", False)

    def side_data(self, side: Side, data: bytes) -> None:
        if self.down_lost if side is self.down else self.up_lost:
            return  # that connection is being closed (protocol error): nothing more from it counts
        if side is self.down:
            if self.refuser is not None:
                self.refuser.feed(data)
                return
            self._down_read_ns = time.monotonic_ns()
            reader, handle = self.c2s, self._c2s_frame
        else:
            reader, handle = self.s2c, self._s2c_frame
        try:
            try:
                frames = reader.feed(data)
            except wire.FrameError as e:
                # What the frames before the bad one said did happen: handle it, then the error.
                for f in e.before:
                    handle(*f)
                raise
            if frames and self._plain(side, frames):
                # Latency: every frame of this read goes on unchanged, so it is written before
                # the recording work (labels, records) instead of after it.
                self._write_early(side, frames)
                self._early = True
                try:
                    for f in frames:
                        handle(*f)
                finally:
                    self._early = False
            else:
                for f in frames:
                    handle(*f)
        except wire.FrameError as e:
            self._flush()
            self._protocol_error(side, e.code, str(e), goaway=True)
            return
        except Exception:
            # A bug of ours must cost one connection, never the proxy, and be recorded as ours.
            log.exception("relay_internal_error", conn=self.conn_id)
            self.abort("proxy_error")
            return
        if self._to_up or self._to_down:  # usually written early already: no call then
            self._flush()

    def _plain(self, side: Side, frames: list[Frame]) -> bool:
        """Whether every frame of a read is passed on verbatim whatever the calls' state."""
        if side is self.up:
            for f in frames:
                if f[0] == wire.GOAWAY or f[0] == wire.PUSH_PROMISE:
                    return False
            return True
        if (
            self.reencode_c2s or self.goaway_last is not None or self.up_lost
            or self._own_settings_acks
        ):  # fmt: skip
            return False
        kept = self._kept_back
        for f in frames:
            ftype = f[0]
            if ftype == wire.RST_STREAM or ftype == wire.PUSH_PROMISE or (kept and f[2] in kept):
                return False
        return True

    def _write_early(self, side: Side, frames: list[Frame]) -> None:
        # Bytes the handlers queued before (none in practice) go first: order is kept.
        if self._to_up or self._to_down:
            self._flush()
        lost = self.up_lost if side is self.down else self.down_lost
        t = self.other(side).transport
        if t is not None and not lost and not t.is_closing():
            span = (self.c2s if side is self.down else self.s2c).span
            if span is not None:
                t.write(span)  # one slice of the read: no copy for a 100 MB tensor's frames
            else:
                t.write(frames[0][4] if len(frames) == 1 else b"".join([f[4] for f in frames]))

    def _own_down(self, frames: bytes) -> None:
        """Frames of the proxy's own for the client (after a SETTINGS frame, if none went yet)."""
        if not self._down_settings:
            self._down_settings = True
            self._own_settings_acks += 1
            self._to_down.append(wire.frame(wire.SETTINGS, 0, 0))
        self._to_down.append(frames)

    def _fwd_up(self, raw: Any) -> None:
        """A client frame goes upstream unchanged."""
        if not self._early:
            self._to_up.append(raw)

    def _fwd_down(self, raw: Any) -> None:
        """An upstream frame goes to the client unchanged."""
        if not self._early:
            self._to_down.append(raw)

    def _flush(self) -> None:
        if self._to_up:
            out, self._to_up = self._to_up, []
            t = self.up.transport
            if t is not None and not self.up_lost and not t.is_closing():
                t.write(out[0] if len(out) == 1 else b"".join(out))
        if self._to_down:
            out, self._to_down = self._to_down, []
            t = self.down.transport
            if t is not None and not self.down_lost and not t.is_closing():
                t.write(out[0] if len(out) == 1 else b"".join(out))
