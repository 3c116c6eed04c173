"""Call and connection ids as every tool reports them when several captures are read in one run.

A capture's ids restart at ``c1`` / ``c1.1``, so when a run reads two captures the second one's
ids would collide with the first's: every reader (``check``, ``report``, ``feed``, ``replay send``)
prefixes the ids of the n-th capture with ``n:`` (the first keeps its ids as written). One rule,
here, so an id that ``check`` prints is the id ``feed(call=...)`` and ``send --only`` accept.

Where a capture starts: at its first file's ``capture_start`` (file index 0), or at the first
``capture_start`` read of a capture whose first files are gone (rotated out, not given): the run's
first one, or one a reader announced (``on_capture``: it knows which files belong together, the
records alone do not).
"""

from __future__ import annotations

from replay.capture import events as ev


class CaptureIds:
    """Follows ``capture_start`` records (pure): which capture of the run this is, and its id prefix."""

    __slots__ = ("_head", "_set", "captures", "prefix")

    def __init__(self) -> None:
        self.captures = 0
        self.prefix = ""
        self._set: str | None = None  # the capture set (``record --workers``) of the current capture
        #: The next ``capture_start`` begins a capture, whatever its file index (the run's first, or
        #: the first after :meth:`begin`).
        self._head = True

    def begin(self) -> None:
        """A reader moves on to another capture: its first ``capture_start`` begins one even when it
        is not its first file's (``CaptureReader.on_capture``)."""
        self._head = True

    def follow(self, reader: object) -> None:
        """Be told by ``reader`` (a capture or records reader; anything else: nothing) of each capture it begins."""
        if hasattr(reader, "on_capture"):
            setattr(reader, "on_capture", self.begin)  # noqa: B010 - any reader with the hook

    def starts(self, record: ev.Record) -> bool:
        """Whether ``record`` starts a new capture (its first file's ``capture_start``); updates the prefix.

        The workers of one capture set each start a chain of their own (their records interleaved by
        time, their call ids apart): one capture, whenever each chain's start comes.
        """
        if type(record) is not ev.CaptureStarted:
            return False
        if self._head:
            self._head = False
        elif record.file_index != 0 or (record.capture_set is not None and record.capture_set == self._set):
            return False
        self._set = record.capture_set
        self.captures += 1
        self.prefix = f"{self.captures}:" if self.captures > 1 else ""
        return True

    def of(self, raw_id: str) -> str:
        """``raw_id`` (a call or connection id as written in the capture) as reported."""
        return self.prefix + raw_id
