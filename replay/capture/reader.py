"""Streaming capture reader: files and directories in, ``(seq, record)`` out, one line at a time.

Which files belong together: the writer names the files of one capture
``capture-<stamp>-<pid>.jsonl``, ``capture-<stamp>-<pid>-0001.jsonl``, ... (``.jsonl.zst`` or
``.jsonl.gz`` when compressed as written; rotated files may be gzipped to ``.jsonl.gz``; the rule is
:mod:`replay.capture.naming`). Files sharing a stem are one capture, read in file-index order; any other
file is a capture of its own. Captures are read in the order given (a directory's in name order,
which for the writer's names is time order). The chains of one capture set (``record --workers``:
one chain of files per worker, :mod:`replay.capture.naming`) are one capture: each chain is checked
for holes on its own (each worker numbers its records), and their records are interleaved by
``t_ns`` (each chain's own order kept; a call never spans workers).

What is tolerated and what is not: a line cut short at the very end of a capture (the proxy died
mid-write, or the file is still being written) is skipped with a warning; a file that yields no
record at all (empty, not gzip, one unterminated junk line) is unreadable; a line repeating an
earlier record exactly (same ``seq``, same content) is skipped and reported as a hole; a damaged
line anywhere else (not JSON, not a record, cut short before a later file) raises
:class:`~replay.errors.DamagedLine` naming file and line, or, with ``skip_damaged`` (the commands'
``--skip-damaged``), is skipped and reported as a ``damaged_line`` hole; anything else unreadable
raises :class:`~replay.errors.CaptureError`, and a record from a newer schema
:class:`~replay.errors.CaptureTooNew` (a newer writer, not damage: never skipped). Holes are reported, never hidden: missing or
repeated ``seq`` numbers, ``gap`` records (the proxy dropped records), a capture without its
closing ``capture_end`` (the proxy was killed) and rotated files that were not given.

Warnings and holes are collected on the reader object (:attr:`CaptureReader.warnings`,
:attr:`CaptureReader.gaps`); the library prints nothing.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import orjson

from replay.capture import events as ev
from replay.capture import naming
from replay.capture.payload import SideRefs
from replay.capture.schema import Sticky, decode
from replay.capture.zst import FrameLines, GzipLines, OnHole, ZstdLines
from replay.errors import CaptureError, CaptureTooNew, DamagedFrame, DamagedLine, UnknownKind

PathLike = str | os.PathLike[str]

#: Whether a reader made without ``skip_damaged`` skips damaged lines: set for a whole command by
#: :func:`skipping_damaged` (``--skip-damaged``), so every tool that reads captures takes it.
_SKIP_DAMAGED: ContextVar[bool] = ContextVar("skip_damaged", default=False)


@contextlib.contextmanager
def skipping_damaged(skip: bool = True) -> Iterator[None]:
    """Readers made inside skip damaged lines (``skip``), each a ``damaged_line`` hole, instead of raising."""
    token = _SKIP_DAMAGED.set(skip)
    try:
        yield
    finally:
        _SKIP_DAMAGED.reset(token)


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


class SeqWatch:
    """Checks one capture's record sequence for holes (pure; fed record by record).

    The reader's hot loop does :meth:`record`'s common case itself (the next seq, a message): the
    public attributes are what that case reads and sets; the two are kept in step.
    """

    __slots__ = (
        "_damaged", "_file_index", "_seen_start", "expected", "file", "gaps", "last", "line", "on_loss", "ring"
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
            self._file_index = record.file_index
            if record.file_index > 0:
                self._add(
                    Gap(kind="missing_file", file=file, line=line, first_seq=None, last_seq=seq - 1 if seq else None,
                        count=None, detail=f"the capture starts at rotated file {record.file_index}: "
                        "its earlier files were not given")
                )  # fmt: skip
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

    def end(self) -> None:
        """The capture's last record was read: was the capture closed?

        (What is missing here comes after every record read: not a loss where anything read was open.)
        """
        if self.last is None:
            return
        last = self.last[1]
        if not isinstance(last, ev.CaptureEnded):
            self.gaps.append(
                Gap(kind="missing_capture_end", file=self.file, line=self.line, first_seq=None, last_seq=None,
                    count=None, detail="no capture_end: the proxy stopped without closing the capture (killed?)")
            )  # fmt: skip
        elif last.next_file is not None:  # rotate, reopen
            self.gaps.append(
                Gap(kind="missing_file", file=self.file, line=self.line, first_seq=None, last_seq=None,
                    count=None, detail=f"the capture continues in {last.next_file}, which was not given")
            )  # fmt: skip


def _expand(paths: Iterable[PathLike]) -> list[list[list[Path]]]:
    """Capture files grouped per capture (set), then per chain, each chain in file-index order."""
    groups: dict[str, list[tuple[int, Path]]] = {}
    sets: dict[str, str] = {}  # chain key -> capture-set key
    seen: set[Path] = set()
    for given in paths:
        p = Path(given)
        if p.is_dir():
            found = sorted(
                q for q in p.iterdir() if q.is_file() and naming.looks_like_capture(q.name)
            )
            if not found:
                raise CaptureError(str(p), None, "no *.jsonl, *.jsonl.zst or *.jsonl.gz capture files in this directory")
        elif p.exists():
            # Not only regular files: a FIFO or /dev/stdin streams a capture too.
            found = [p]
        else:
            raise CaptureError(str(p), None, "no such file or directory")
        for q in found:
            key = q.resolve()
            if key in seen:
                continue
            seen.add(key)
            name = naming.parse(q.name)
            if name is None:
                groups[str(key)] = [(0, q)]
                sets[str(key)] = str(key)
                continue
            chain = str(key.parent / name.stem)
            groups.setdefault(chain, []).append((name.index, q))
            sets[chain] = str(key.parent / (name.capture_set or name.stem))
    chains: dict[str, list[Path]] = {}
    for chain, members in groups.items():
        by_index: dict[int, Path] = {}
        for index, q in sorted(members, key=lambda t: (t[0], t[1].name.endswith(naming.GZIP_SUFFIX))):
            # While the writer gzips a rotated file both names exist; the plain one is complete.
            by_index.setdefault(index, q)
        chains[chain] = [by_index[i] for i in sorted(by_index)]
    out: dict[str, list[list[Path]]] = {}
    for chain, files in chains.items():
        out.setdefault(sets[chain], []).append(files)
    return list(out.values())


def _open(path: Path, on_hole: OnHole | None) -> IO[bytes] | FrameLines:
    """The file's lines; a compressed one frame by frame, its damaged frames skipped as holes when ``on_hole``."""
    if path.name.endswith(".zst"):
        return ZstdLines(path, on_hole)
    if path.name.endswith(".gz"):
        return GzipLines(path, on_hole)
    return open(path, "rb")


def _compression(name: str) -> str:
    return "zstd" if name.endswith(".zst") else "gzip"


class CaptureReader:
    """Iterate a capture as ``(seq, record)``; warnings and holes are collected as it goes."""

    def __init__(self, paths: PathLike | Iterable[PathLike], *, skip_damaged: bool | None = None) -> None:
        if isinstance(paths, str | os.PathLike):
            paths = [paths]
        #: Skip damaged lines as holes instead of raising (None: as :func:`skipping_damaged` says).
        self.skip_damaged = _SKIP_DAMAGED.get() if skip_damaged is None else skip_damaged
        #: Per capture (set): its chains of files (one per worker; one for a single-process capture).
        self.sets = _expand(paths)
        self.files: list[Path] = [p for chains in self.sets for g in chains for p in g]
        self.warnings: list[str] = []
        self.gaps: list[Gap] = []
        self.records = 0  # records yielded, added up as each file is done (or left early)
        self.captures = 0
        #: Told of each hole where records were lost as it is found (:class:`SeqWatch`'s ``on_loss``):
        #: set before iterating, e.g. to :meth:`~replay.machine.tracker.Tracker.lost`.
        self.on_loss: OnLoss | None = None

    def __iter__(self) -> Iterator[tuple[int, ev.Record]]:
        self.warnings, self.gaps, self.records, self.captures = [], [], 0, 0
        # Each record is yielded by a file's generator straight to the caller: chaining the files in C
        # (rather than through `yield from` in two generators) saves two frame resumptions a record.
        return itertools.chain.from_iterable(self._parts())

    def _parts(self) -> Iterator[Iterable[tuple[int, ev.Record]]]:
        """The record sources in reading order: per file, or one merge per capture set of several chains."""
        for chains in self.sets:
            self.captures += 1
            if len(chains) == 1:
                yield from self._chain(chains[0])
            else:
                # One capture written by several workers: their records interleaved by time.
                merged = (itertools.chain.from_iterable(self._chain(c)) for c in chains)
                yield heapq.merge(*merged, key=lambda r: r[1].t_ns)

    def _chain(self, group: list[Path]) -> Iterator[Iterator[tuple[int, ev.Record]]]:
        """One reader per file of the chain; the chain's holes are added once its last file was read."""
        watch = SeqWatch(self.on_loss)
        for i, path in enumerate(group):
            yield self._file(path, last=i == len(group) - 1, watch=watch)
        watch.end()
        self.gaps.extend(watch.gaps)

    def _file(self, path: Path, *, last: bool, watch: SeqWatch) -> Iterator[tuple[int, ev.Record]]:
        name = str(path)
        lineno = 0
        found = 0  # lines that were records (of any kind): a file without one is not a capture
        skipped = 0  # of those, not yielded (exact repeats, unknown kinds): `records` is the rest
        unknown: set[str] = set()
        sticky: Sticky = {}  # the writer's sparse-encoding state is per file
        sides: SideRefs | None = None  # its side file (--payload full bytes), once a line points there

        def on_hole(offset: int, length: int, why: str) -> None:
            watch.damaged_frame(name, offset, length, why)

        try:
            with _open(path, on_hole if self.skip_damaged else None) as f:
                # Hot loop (every line of every capture read): the common line (a complete JSON
                # object) takes the first branch; names are bound to locals once.
                loads, record, decode_ = orjson.loads, watch.record, decode
                ring, mask, message = watch.ring, watch.MASK, ev.MessageSeen
                skip = self.skip_damaged
                watch.file = name
                for lineno, line in enumerate(f, 1):
                    try:
                        if line[:1] == b"{" and line[-1:] == b"\n":
                            try:
                                raw = loads(line)
                            except orjson.JSONDecodeError as e:
                                raise DamagedLine(name, lineno, f"not valid JSON: {e}") from None
                        elif not line.endswith(b"\n"):
                            try:
                                raw = orjson.loads(line)
                            except orjson.JSONDecodeError:
                                if last and found:
                                    self.warnings.append(
                                        f"{name}:{lineno}: last line cut short ({len(line)} bytes): skipped "
                                        "(the proxy stopped mid-write, or the file is still being written)"
                                    )
                                    break
                                if not found:
                                    raise CaptureError(name, lineno, "not a capture: no record, only an unterminated "
                                                       "line that is not JSON") from None  # fmt: skip
                                raise DamagedLine(
                                    name, lineno, "line cut short in the middle of a capture (a later file follows)"
                                ) from None
                        elif not line.strip():
                            continue
                        else:
                            try:
                                raw = orjson.loads(line)
                            except orjson.JSONDecodeError as e:
                                raise DamagedLine(name, lineno, f"not valid JSON: {e}") from None
                        try:
                            done = decode_(raw, path=name, line=lineno, sticky=sticky)
                        except UnknownKind as e:
                            # Same schema version, newer writer: new kinds are additions, so the rest
                            # of the capture still means what it says; the seq still counts (no hole).
                            found += 1
                            skipped += 1
                            record(e.seq, None, name, lineno)
                            if e.kind not in unknown:
                                self.warnings.append(
                                    f"{name}:{lineno}: record kind {e.kind!r} is unknown to this triton-tap "
                                    "(written by a newer version?): such records are skipped"
                                )
                            unknown.add(e.kind)
                            continue
                        except CaptureTooNew:
                            raise
                        except CaptureError as e:  # a field or the envelope: the line is not a record
                            raise DamagedLine(e.path, e.line, e.reason) from None
                    except DamagedLine as e:
                        if not skip:
                            raise
                        watch.damaged(name, lineno, e.reason)
                        continue
                    found += 1
                    seq, rec = done
                    if seq == watch.expected and type(rec) is message:
                        # SeqWatch.record's common case, inline (half the loop's cost was the call);
                        # `watch.file` is this file's since the loop began.
                        watch.expected = seq + 1
                        ring[seq & mask] = watch.last = done
                        watch.line = lineno
                    elif record(seq, rec, name, lineno):
                        skipped += 1
                        continue
                    if "payload_at" in raw and type(rec) is ev.MessageSeen and rec.payload_at is not None:
                        if sides is None:
                            sides = SideRefs(path, last)
                        sides.attach(rec, lineno)
                    yield done
        except DamagedFrame as e:
            if found:
                raise
            # Its first frame: the file may well not be compressed that way at all.
            raise DamagedFrame(name, None, f"not a readable {_compression(name)} capture: {e.reason}") from None
        except EOFError as e:
            if not found:
                raise CaptureError(name, None, f"not a readable {_compression(name)} capture: {e}") from None
            if not last:
                raise CaptureError(name, lineno + 1 if lineno else None, f"broken compressed file: {e}") from None
            self.warnings.append(f"{name}: compressed file cut short after line {lineno}: {e}")
        except OSError as e:
            raise CaptureError(name, None, f"cannot read: {e.strerror or e}") from None
        finally:
            self.records += found - skipped  # counted once, not per record (also when stopped early)
        if not found:
            raise CaptureError(name, None, "no capture records in this file (empty, or not a triton-tap capture)")
        if sides is not None and (why := sides.warning()) is not None:
            self.warnings.append(why)


class RecordsReader:
    """Records already in memory, ``(seq, record)`` pairs, read as a file's are: checked for holes
    (file ``<records>``; a ``capture_start`` of file 0 after records starts the next capture's
    check), exact repeats skipped, losses told (``on_loss``). The same surface as
    :class:`CaptureReader` for the tools that take records as well as paths."""

    def __init__(self, items: Iterable[tuple[int, ev.Record]]) -> None:
        self._items = items
        self.warnings: list[str] = []
        self.gaps: list[Gap] = []
        self.files: list[Path] = []
        self.records = 0
        self.captures = 0
        self.on_loss: OnLoss | None = None

    def __iter__(self) -> Iterator[tuple[int, ev.Record]]:
        self.gaps, self.records, self.captures = [], 0, 0
        watch = SeqWatch(self.on_loss)
        for seq, record in self._items:
            if isinstance(record, ev.CaptureStarted) and record.file_index == 0 and watch.started:
                watch.end()
                self.gaps.extend(watch.gaps)
                watch = SeqWatch(self.on_loss)
            if watch.record(seq, record, "<records>", None):
                continue
            self.records += 1
            yield seq, record
        watch.end()
        self.gaps.extend(watch.gaps)


def read_capture(paths: PathLike | Iterable[PathLike], *, skip_damaged: bool | None = None) -> CaptureReader:
    """A streaming reader over capture files and/or directories (see the module docstring).

    Iterating it yields ``(seq, record)``; afterwards ``.warnings`` and ``.gaps`` say what was
    tolerated and what is missing. Raises :class:`~replay.errors.CaptureError` for a path that
    does not exist and, while iterating, for unreadable content (:class:`~replay.errors.DamagedLine`
    for a damaged line, unless ``skip_damaged``: then it is a ``damaged_line`` hole; None: as
    :func:`skipping_damaged` says, off by default).
    """
    return CaptureReader(paths, skip_damaged=skip_damaged)
