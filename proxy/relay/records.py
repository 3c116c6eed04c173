"""Records built on the hot path at the cost of a plain object, and still the frozen events they are.

A frozen dataclass's ``__init__`` sets every field through ``object.__setattr__``: ~4 us for a
``message`` record's 24 fields. :func:`replay.frozen.maker` builds the event without it: compiled,
its slots filled by offset in one call (~0.3 us); else as the non-frozen twin given the event's class
(~2 us). Either way what leaves is an ordinary ``ev.MessageSeen``.
"""

from __future__ import annotations

from replay.capture import events as ev
from replay.frozen import maker

#: The fields the relay knows of every message, given to :data:`make_message` in this order.
MESSAGE_LEADING = ("t_ns", "call", "dir", "index", "size", "compressed")

#: ``make_message(t_ns, call, dir, index, size, compressed, labels)``: one ``message`` record, the
#: labels (a dict of its other fields) as they are. Once per gRPC message: the relay's hot path.
make_message = maker(ev.MessageSeen, MESSAGE_LEADING)
