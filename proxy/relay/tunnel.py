"""The tunnel: one client connection, its upstream connection, and the calls between them.

:class:`Tunnel` is assembled from its parts, one module each (see :mod:`proxy.relay` for why parts
of one class and not objects of their own); its state is :class:`proxy.relay.state.TunnelState`.
"""

from __future__ import annotations

from typing import Any

import hpack.hpack

from proxy.relay.closing import Closing
from proxy.relay.endings import CallEndings
from proxy.relay.from_client import ClientFrames
from proxy.relay.from_upstream import UpstreamFrames
from proxy.relay.late import LateFrames
from proxy.relay.messages import MessageRecording
from proxy.relay.transports import Transports


class _NoLog:
    def debug(self, *args: Any, **kwargs: Any) -> None:
        pass


# hpack calls log.debug() per header field (~50 calls per unary call) even when nothing listens.
hpack.hpack.log = _NoLog()  # type: ignore[assignment]


class Tunnel(Transports, Closing, ClientFrames, UpstreamFrames, MessageRecording, CallEndings, LateFrames):
    """A client connection, its upstream connection, and the calls between them.

    - :class:`~proxy.relay.transports.Transports`: reads, verbatim writes, frames of the proxy's own;
    - :class:`~proxy.relay.closing.Closing`: protocol errors, a side lost, GOAWAY, linger, abort;
    - :class:`~proxy.relay.from_client.ClientFrames`: client -> upstream, frame by frame;
    - :class:`~proxy.relay.from_upstream.UpstreamFrames`: upstream -> client, frame by frame;
    - :class:`~proxy.relay.messages.MessageRecording`: every gRPC message cut, labelled, recorded;
    - :class:`~proxy.relay.endings.CallEndings`: cancels, statuses of the proxy's own, call ends;
    - :class:`~proxy.relay.late.LateFrames`: frames after a forwarded cancel.
    """
