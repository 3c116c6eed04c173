"""The relay: one upstream connection per client connection, every byte passed on verbatim; gRPC
(HTTP/2) and Triton's HTTP port (HTTP/1.1), each a protocol core under the one I/O shell.

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

Shape: a protocol core with no I/O under a thin I/O shell.

- ``core``: :class:`~proxy.relay.core.H2Core`, one client connection, its upstream connection and
  the calls between them, as HTTP/2: the bytes of one read in, what to write to each side, records
  and commands out (sans-IO: no asyncio, socket, ssl or threading, an import-linter contract); its
  small h2 server for an unreachable upstream (``Refuser``) is there too;
- ``lifecycle``: the core's states, one per side, and their transition tables;
- ``contract``: what a core and the shell say to each other (``Output``, the commands, the
  ``ProtocolCore`` interface);
- ``http1``: :class:`~proxy.relay.http1.Http1Core`, the same for Triton's HTTP/1.1 port (an h11
  parser per side as an observer; one exchange at a time is a call); ``http1_lifecycle``: the
  exchange's states and table;
- ``recording``: per-call recording as objects given an emit function (every gRPC message; late
  frames after a forwarded cancel); ``call``: one RPC's state; ``records``: the hot records;
- ``shell``: the asyncio protocols of both sides, the upstream connect (TLS included), timers,
  reading paused for backpressure; it knows nothing of HTTP; ``peercert``: the client
  certificate's subject;
- ``relay``: :class:`~proxy.relay.relay.Relay`, what every connection of one proxy shares (options,
  the capture sink, open connections, shutdown); ``options``: :class:`~proxy.relay.options.RelayOptions`.

A byte's way: the client's socket -> ``shell.Side.data_received`` -> ``H2Core.receive_c2s`` (frames
cut once by :class:`proxy.wire.frames.FrameReader`, the read classified once: verbatim or handled)
-> the shell writes the one slice upstream -> ``H2Core.resume`` records what the frames said
(:class:`~proxy.relay.recording.MessageRecorder`: cut, labelled, one ``message`` record per gRPC
message) -> the capture writer. The pure pieces below the core live in :mod:`proxy.wire` (frames,
gRPC messages, header helpers) and :mod:`proxy.triton` (labels, causes, in-flight requests).
"""
