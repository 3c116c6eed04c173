"""Holes in a capture: what a :class:`Gap` is, and :class:`SeqWatch`, which finds them in a record sequence.

Pure, fed record by record: the file reader (:mod:`replay.capture.reader`) and the in-memory one
both check a capture's sequence here, and tell whoever follows the records of each hole where
records were lost (:data:`LOSSES`) as it is found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from replay.capture import events as ev


@dataclass(frozen=True, kw_only=True, slots=True)
class Gap:
    """A hole in a capture: records that were lost, repeated or never written."""

    kind: str  # seq_gap | duplicate_seq | gap_record | files_removed | missing_capture_end | missing_file | damaged_line | damaged_frame
    file: str
    line: int | None
    first_seq: int | None
    last_seq: int | None
    count: int | None
    detail: str

    def to_json(self) -> dict[str, object]:
        """The entry of ``check --json``'s ``gaps`` list."""
        return {
            "kind": self.kind,
            "file": self.file,
            "line": self.line,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "count": self.count,
            "detail": self.detail,
        }


#: The holes where records of the traffic were lost at that point of the capture: what was open
#: there may have lost responses, ends or requests. Not the others: a repeat loses nothing, and a
#: missing ``capture_end``, a missing last file or files removed before the first one read lose
#: records after (or before) everything that was read, where nothing read was open (see
#: :meth:`~replay.machine.tracker.Tracker.lost`).
LOSSES = frozenset({"seq_gap", "gap_record", "missing_file", "damaged_line", "damaged_frame"})

#: ``on_loss(gap)``: records were lost at this point (:data:`LOSSES`).
OnLoss = Callable[[Gap], None]


#: ``missing_capture_end``'s detail, by whether a writer still holds the file (its proxy is running).
LIVE_END = "no capture_end yet: the capture is still being written (its proxy holds the file), read up to here"
DEAD_END = "no capture_end: the proxy stopped without closing the capture (killed?)"


class SeqWatch:
    """Checks one capture's record sequence for holes (pure; fed record by record).

    The reader's hot loop does :meth:`record`'s common case itself (the next seq, a message): the
    public attributes are what that case reads and sets; the two are kept in step.
    """

    __slots__ = (
        "_damaged", "_file_index", "_seen_start", "expected", "file", "gaps", "last", "late_start", "line", "on_loss",
        "open_end", "ring", "start",
    )  # fmt: skip

    #: How many recent records are kept to tell an exact repeat of a line from a conflicting one
    #: (a power of two: the ring is indexed by ``seq & MASK``).
    RECENT = 1024
    MASK = RECENT - 1

    def __init__(self, on_loss: OnLoss | None = None) -> None:
        self.gaps: list[Gap] = []
        #: Told of each hole where records were lost (:data:`LOSSES`) as it is found, before the record
        #: after it is given: so a reader of the records knows what was open when they were lost.
        self.on_loss = on_loss
        #: The seq the next record should have (None until the capture's start says it is 0).
        self.expected: int | None = None
        #: The last record fed as ``(seq, record)``, and where it was: what :meth:`end` judges.
        self.last: tuple[int, ev.Record] | None = None
        self.file = ""
        self.line: int | None = None
        self._seen_start = False
        #: The chain's first ``capture_start`` read (a worker's says which of how many workers wrote it).
        self.start: ev.CaptureStarted | None = None
        #: The ``missing_file`` holes of a chain that starts after its file 0, and of one whose last
        #: ``capture_end`` names a next file (with that name): the reader drops them when the files it
        #: read hold what they miss (a live file renamed by hand is read, under its new name).
        self.late_start: Gap | None = None
        self.open_end: tuple[Gap, str] | None = None
        self._file_index = 0  # of the newest capture_start: each rotated file's is one more than its last's
        # (the expected seq when they were met, how many): damaged lines since the last record, which
        # may have held the seq numbers missing before the next one (not a second hole for them).
        self._damaged: tuple[int | None, int] = (None, 0)
        # seq & MASK -> (seq, record) of the newest record with that seq: a ring, so keeping it
        # costs O(1) per record; the reader's (seq, record) pair is kept as it is (no tuple made).
        self.ring: list[tuple[int, ev.Record] | None] = [None] * self.RECENT

    def _add(self, gap: Gap) -> None:
        self.gaps.append(gap)
        if self.on_loss is not None and gap.kind in LOSSES and self.last is not None:
            # (Before the chain's first record nothing of it was open: what was lost came before it,
            # and what is open then belongs to an earlier capture.)
            self.on_loss(gap)

    @property
    def started(self) -> bool:
        """A record was seen."""
        return self.last is not None

    def record(self, seq: int, record: ev.Record | None, file: str, line: int | None) -> bool:
        """One record of the capture, in file order (``None``: a record of a kind this reader skips).

        True when the record repeats an earlier one exactly (same seq, same content): the caller skips
        it so nothing counts it twice; the repeat is still reported as a ``duplicate_seq`` hole.
        """
        self.file, self.line = file, line
        if seq == self.expected and type(record) is ev.MessageSeen:
            # The common case (the next seq, a message); the reader's hot loop does the same inline.
            self.expected = seq + 1
            self.ring[seq & self.MASK] = self.last = (seq, record)
            return False
        if isinstance(record, ev.CaptureStarted) and self._seen_start:
            if record.file_index > self._file_index + 1:
                lost = range(self._file_index + 1, record.file_index)
                which = f"file {lost[0]} was" if len(lost) == 1 else f"files {lost[0]}-{lost[-1]} were"
                self._add(
                    Gap(kind="missing_file", file=file, line=line, first_seq=None, last_seq=None, count=None,
                        detail=f"rotated {which} not given (between the files read)")
                )  # fmt: skip
            self._file_index = record.file_index
        elif isinstance(record, ev.CaptureStarted):
            self._seen_start = True
            self.start = record
            self._file_index = record.file_index
            if record.file_index > 0:
                self.late_start = Gap(kind="missing_file", file=file, line=line, first_seq=None,
                                      last_seq=seq - 1 if seq else None, count=None,
                                      detail=f"the capture starts at rotated file {record.file_index}: "
                                      "its earlier files were not given")  # fmt: skip
                self._add(self.late_start)
            elif self.expected is None:
                self.expected = 0
        expected = self.expected
        if expected is not None and seq != expected:
            if seq > expected:
                at, damaged = self._damaged
                missing = seq - expected - (damaged if at == expected else 0)
                if missing > 0:
                    besides = f" besides the {damaged} damaged line(s) before it" if at == expected else ""
                    self._add(
                        Gap(kind="seq_gap", file=file, line=line, first_seq=expected, last_seq=seq - 1,
                            count=missing, detail=f"{missing} record(s) missing before seq {seq}{besides}")
                    )  # fmt: skip
            else:
                kept = self.ring[seq & self.MASK]
                exact = record is not None and kept is not None and kept[0] == seq and kept[1] == record
                detail = (f"seq {seq} repeated exactly (a duplicated line): the repeat is skipped" if exact
                          else f"seq {seq} again (or out of order) where {expected} was expected")  # fmt: skip
                self._add(
                    Gap(kind="duplicate_seq", file=file, line=line, first_seq=seq, last_seq=seq, count=1, detail=detail)
                )
                if exact:
                    return True
        if expected is None or seq >= expected:
            self.expected = seq + 1
        if record is None:
            return False
        last = self.last = (seq, record)
        if self.expected == seq + 1:  # the newest record of its seq, not a conflicting repeat
            self.ring[seq & self.MASK] = last
        if isinstance(record, ev.GapRecorded):
            self._add(
                Gap(kind="gap_record", file=file, line=line, first_seq=seq, last_seq=seq, count=record.dropped,
                    detail=f"the proxy dropped {record.dropped} record(s): {record.reason}")
            )  # fmt: skip
        elif isinstance(record, ev.FilesRemoved):
            self._add(
                Gap(kind="files_removed", file=file, line=line, first_seq=seq, last_seq=seq, count=None,
                    detail=f"{len(record.files)} capture file(s) left the directory ({record.reason}): "
                    f"{', '.join(record.files[:5])}{' ...' if len(record.files) > 5 else ''}")
            )  # fmt: skip
        return False

    def damaged(self, file: str, line: int, reason: str) -> None:
        """A line that is no record was skipped (``--skip-damaged``): a hole where it was.

        The seq numbers it may have held are not a second hole: the next record's ``seq_gap`` counts
        only what these lines cannot explain.
        """
        self.file, self.line = file, line
        at, count = self._damaged
        self._damaged = (self.expected, count + 1 if at == self.expected else 1)
        self._add(
            Gap(kind="damaged_line", file=file, line=line, first_seq=None, last_seq=None, count=1,
                detail=f"{reason}: skipped")
        )  # fmt: skip

    def damaged_frame(self, file: str, offset: int, length: int, reason: str) -> None:
        """A compressed frame that does not decode was skipped (``--skip-damaged``), with the bytes up to the
        next frame that does: one hole for them, at no line (they are compressed bytes).

        The records it held are not counted here: the next record's ``seq_gap`` counts them, as the records
        they are (how many lines the frame held is not known).
        """
        self.file, self.line = file, None
        self._add(
            Gap(kind="damaged_frame", file=file, line=None, first_seq=None, last_seq=None, count=None,
                detail=f"{length} byte(s) skipped from byte offset {offset}: {reason}")
        )  # fmt: skip

    def end(self, live: bool = False) -> None:
        """The capture's last record was read: was the capture closed? (``live``: its last file is still
        held by its writer, :mod:`replay.capture.liveness`.)

        (What is missing here comes after every record read: not a loss where anything read was open.)
        """
        if self.last is None:
            return
        last = self.last[1]
        if not isinstance(last, ev.CaptureEnded):
            self.gaps.append(
                Gap(kind="missing_capture_end", file=self.file, line=self.line, first_seq=None, last_seq=None,
                    count=None, detail=LIVE_END if live else DEAD_END)
            )  # fmt: skip
        elif last.next_file is not None:  # rotate, reopen
            gap = Gap(kind="missing_file", file=self.file, line=self.line, first_seq=None, last_seq=None,
                      count=None, detail=f"the capture continues in {last.next_file}, which was not given")
            self.open_end = (gap, last.next_file)
            self.gaps.append(gap)
