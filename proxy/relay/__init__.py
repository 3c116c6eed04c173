"""The HTTP/2 relay: one upstream connection per client connection, every frame passed on verbatim.

Why frames and not a gRPC proxy: only at the HTTP/2 level can the proxy tell an explicit cancel
(RST_STREAM CANCEL) from a dead client (EOF) or a deadline, forward the client's own headers
(user-agent included) untouched, and keep up with the wire (see the README's measurements).

Why verbatim: stream ids, settings, flow-control windows, pings and HPACK state are negotiated end
to end between the client and Triton; the proxy reads each frame (:mod:`proxy.wire.frames`), records what
it means and writes the same bytes on. So backpressure is the endpoints' own (a client that stops
reading a stream stops granting window for it, and Triton stops sending), nothing is buffered per
call, and the bytes Triton gets are the bytes the client sent. The proxy writes frames of its own
only where it must speak for a side that is gone or refuses: statuses when the upstream is lost
or unreachable, RST_STREAM upstream when the client is lost, GOAWAY at shutdown and on a protocol
error — and those never touch HPACK state (:func:`proxy.wire.frames.encode_block`).

Shape: a :class:`~proxy.relay.tunnel.Tunnel` owns the two asyncio transports and one
:class:`proxy.wire.frames.FrameReader` per direction. Bytes in -> frames -> records + the same
frames out, written once per read. All per-message work is one pass in
:meth:`~proxy.relay.messages.MessageRecording._messages`. The pure pieces live in
:mod:`proxy.wire` (frames, gRPC messages, header helpers); this package is the asyncio shell.

The modules:

- ``relay``: :class:`~proxy.relay.relay.Relay`, what every tunnel of one proxy shares (options,
  the capture sink, open tunnels, shutdown); ``options``: :class:`~proxy.relay.options.RelayOptions`;
- ``tunnel``: :class:`~proxy.relay.tunnel.Tunnel`, assembled from the parts below; ``state``: what
  a tunnel holds, and the methods its parts offer each other; ``side``: one transport (a protocol);
- the parts: ``transports`` (reads, verbatim writes, frames of the proxy's own), ``closing``
  (protocol errors, a side lost, GOAWAY, linger, abort), ``from_client`` (client -> upstream),
  ``from_upstream`` (upstream -> client), ``messages`` (the per-message pass), ``endings`` (how
  calls end), ``late`` (frames after a forwarded cancel);
- ``call``: one RPC's state; ``refuser``: the small h2 server that answers UNAVAILABLE when the
  upstream cannot be reached.

Why the parts are mixins of one class and not objects of their own: the relay's hot path is a
chain of calls on one object (``side_data`` -> ``_s2c_frame`` -> ``_messages`` -> ``_fwd_down``),
each reading the same per-connection state (``calls``, ``_to_down``, ``_early``...). As mixins,
every such call and read is what it was in the single class: a method found in the type's cache
and an attribute of ``self``. Objects of their own would add an attribute hop per call and per
piece of shared state, in the per-frame loop, or copies of that state to keep in step. The price
is that the parts are not independent: they share ``self``, which
:class:`~proxy.relay.state.TunnelState` makes explicit (the state in one ``__init__``, and the
signatures of what one part calls on another, checked by mypy).
"""
