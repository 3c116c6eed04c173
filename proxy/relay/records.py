"""Records built on the hot path at the cost of a plain object, and still the frozen events they are.

A frozen dataclass's ``__init__`` sets every field through ``object.__setattr__``: ~4 us for a
``message`` record's 24 fields, against ~1 us for a plain slots dataclass (``python -m bench.micro``).
The record is built as its non-frozen twin (:func:`replay.frozen.building`, which says how) and
then becomes the event by assigning ``__class__``.
"""

from __future__ import annotations

from replay.capture import events as ev
from replay.frozen import building

#: Build with ``BuildingMessageSeen(...)``, then set ``__class__ = ev.MessageSeen`` (see module doc).
BuildingMessageSeen = building(ev.MessageSeen)
