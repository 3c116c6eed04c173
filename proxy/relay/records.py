"""Records built on the hot path at the cost of a plain object, and still the frozen events they are.

A frozen dataclass's ``__init__`` sets every field through ``object.__setattr__``: ~4 us for a
``message`` record's 24 fields, ~2 us for a ``call_end``'s 12 (a unary call makes three records
besides its messages). :func:`replay.frozen.maker` builds the event without it: compiled, its slots
filled by offset in one call (~0.3 us); else as the non-frozen twin given the event's class (~2 us).
Either way what leaves is the event itself (an ordinary ``ev.MessageSeen``, ``ev.CallEnded``, ...).
"""

from __future__ import annotations

from typing import Final

from replay.capture import events as ev
from replay.frozen import maker

#: The fields the relay knows of every message, given to :data:`make_message` in this order.
MESSAGE_LEADING = ("t_ns", "call", "dir", "index", "size", "compressed")

#: ``make_message(t_ns, call, dir, index, size, compressed, labels)``: one ``message`` record, the
#: labels (a dict of its other fields) as they are. Once per gRPC message: the relay's hot path.
make_message: Final = maker(ev.MessageSeen, MESSAGE_LEADING)

#: ``make_call_start(t_ns, call, conn, method, peer, metadata, timeout_ms, client_subject, {})``: once per call.
make_call_start: Final = maker(ev.CallStarted, ("t_ns", "call", "conn", "method", "peer", "metadata", "timeout_ms",
                                         "client_subject"))  # fmt: skip

#: ``make_call_end(t_ns, call, status, details, cause, trailers, initial_metadata, duration_ms,
#: messages_c2s, messages_s2c, upstream_rst_code, s2c_undelivered_bytes, {})``: once per call.
make_call_end: Final = maker(ev.CallEnded, ("t_ns", "call", "status", "details", "cause", "trailers", "initial_metadata",
                                     "duration_ms", "messages_c2s", "messages_s2c", "upstream_rst_code",
                                     "s2c_undelivered_bytes"))  # fmt: skip

#: ``make_half_close(t_ns, call, {})``: once per call that the client half-closes.
make_half_close: Final = maker(ev.HalfClosed, ("t_ns", "call"))
