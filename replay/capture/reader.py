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
from pathlib import Path
from typing import IO, Any

import orjson

from replay.capture import events as ev
from replay.capture import liveness, naming
from replay.capture.holes import Gap, OnLoss, SeqWatch
from replay.capture.payload import SideRefs
from replay.capture.schema import Sticky, decode
from replay.capture.zst import CutShort, FrameLines, GzipLines, OnHole, ZstdLines
from replay.errors import CaptureError, CaptureTooNew, DamagedFrame, DamagedLine, UnknownKind

#: A ``message``'s fields a sparse line leaves out when they repeat its call's previous `s2c` line.
_STICKY = ev.MessageSeen.sticky

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

    def __init__(self, paths: PathLike | Iterable[PathLike], *, skip_damaged: bool | None = None,
                 set_checks: bool = True, payload: bool = True) -> None:  # fmt: skip
        if isinstance(paths, str | os.PathLike):
            paths = [paths]
        #: The message bytes a capture keeps in its side file (``--payload full``) are wanted. A reader that
        #: never looks at them (check, report, export) sets it False: a capture copied without its side file
        #: is read all the same, each such message's ``payload_at`` as not read (None), and one warning says so.
        self.payload = payload
        #: Run the checks that need every chain of a set and every file given (a worker not given, a chain
        #: continued in another capture's file) at the end of reading. Off for a reader given one chain of
        #: a larger reading: its ``watches`` go to :func:`set_gaps` with the others'.
        self.set_checks = set_checks
        #: Per capture set read, each chain's (first file's name, its watch), in reading order.
        self.watches: list[list[tuple[str, SeqWatch]]] = []
        #: Skip damaged lines as holes instead of raising (None: as :func:`skipping_damaged` says).
        self.skip_damaged = _SKIP_DAMAGED.get() if skip_damaged is None else skip_damaged
        #: Per capture (set): its chains of files (one per worker; one for a single-process capture).
        self.sets = _expand(paths)
        self.files: list[Path] = [p for chains in self.sets for g in chains for p in g]
        self.warnings: list[str] = []
        self.gaps: list[Gap] = []
        self.records = 0  # records yielded, added up as each file is done (or left early)
        #: What the files hold that no record was read from, each with a warning: a cut last line, a cut last
        #: compressed frame, a record of a kind this version does not know (a copy of the records lacks them).
        self.unread = 0
        self.captures = 0
        #: Told of each hole where records were lost as it is found (:class:`~replay.capture.holes.SeqWatch`'s ``on_loss``):
        #: set before iterating, e.g. to :meth:`~replay.machine.tracker.Tracker.lost`.
        self.on_loss: OnLoss | None = None
        #: Told as reading moves on to each capture its files' names tell apart, before its first record:
        #: its first ``capture_start`` begins a capture even when its first files are gone (file index
        #: > 0), which its records cannot show (:meth:`~replay.capture.ids.CaptureIds.begin`).
        self.on_capture: Callable[[], None] | None = None

    def __iter__(self) -> Iterator[tuple[int, ev.Record]]:
        self.warnings, self.gaps, self.records, self.captures, self.unread = [], [], 0, 0, 0
        # Each record is yielded by a file's generator straight to the caller: chaining the files in C
        # (rather than through `yield from` in two generators) saves two frame resumptions a record.
        return itertools.chain.from_iterable(self._parts())

    def _parts(self) -> Iterator[Iterable[tuple[int, ev.Record]]]:
        """The record sources in reading order: per file, or one merge per capture set of several chains."""
        last: str | None = None
        self.watches = []
        for chains in self.sets:
            self.captures += 1
            name = naming.parse(chains[0][0].name)
            key = None if name is None else name.capture_set or name.stem
            if self.on_capture is not None and key is not None and key != last:
                # Only files the writer named are known to be a capture of their own, and files of one
                # name in two directories (an archive and the live one) may be one capture's: those
                # are left to their records, which join a later file to the one before.
                self.on_capture()
            last = key
            watches: list[SeqWatch] = []
            if len(chains) == 1:
                yield from self._chain(chains[0], watches)
            else:
                # One capture written by several workers: their records interleaved by time.
                merged = (itertools.chain.from_iterable(self._chain(c, watches)) for c in chains)
                yield heapq.merge(*merged, key=lambda r: r[1].t_ns)
            self.watches.append(list(zip((c[0].name for c in chains), watches, strict=True)))
        if self.set_checks:
            added, dropped = set_gaps(self.watches, {p.name for p in self.files})
            self.gaps = [g for g in self.gaps if not any(g is d for d in dropped)] + [g for a in added for g in a]

    def _chain(self, group: list[Path], watches: list[SeqWatch]) -> Iterator[Iterator[tuple[int, ev.Record]]]:
        """One reader per file of the chain; the chain's holes are added once its last file was read."""
        watch = SeqWatch(self.on_loss)
        watches.append(watch)
        # Asked before the last file is read: a writer that closes it meanwhile wrote its end into it.
        live = liveness.being_written(group[-1])
        for i, path in enumerate(group):
            yield self._file(path, last=i == len(group) - 1, watch=watch)
        watch.end(live)
        self.gaps.extend(watch.gaps)

    def _file(self, path: Path, *, last: bool, watch: SeqWatch) -> Iterator[tuple[int, ev.Record]]:
        name = str(path)
        lineno = 0
        found = 0  # lines that were records (of any kind): a file without one is not a capture
        skipped = 0  # of those, not yielded (exact repeats, unknown kinds): `records` is the rest
        unknown: set[str] = set()
        sticky: Sticky = {}  # the writer's sparse-encoding state is per file
        # After a hole in the file, a call's `s2c` line may leave out fields (model, outputs...) that only a
        # lost line stated: the calls whose such fields are unknown until a line states them again.
        hole: _AfterHole | None = None  # set at the file's first hole
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
                                    self.unread += 1
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
                            counted = hole is not None and type(raw) is dict and raw.get("dir") == "s2c" and (
                                hole.leaves_out_unknown(raw))  # fmt: skip
                            done = decode_(raw, path=name, line=lineno, sticky=sticky)
                        except UnknownKind as e:
                            # Same schema version, newer writer: new kinds are additions, so the rest
                            # of the capture still means what it says; the seq still counts (no hole).
                            found += 1
                            skipped += 1
                            self.unread += 1
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
                    else:
                        expected = watch.expected
                        if expected is not None and seq > expected:
                            # A hole before this line: what the writer left out of the lines after it may have
                            # been stated by a lost one. A call's state from before it holds only while its
                            # `s2c` indexes follow on (none of its lines was lost).
                            if hole is None:
                                hole = _AfterHole(sticky)
                            hole.seen(watch.ring, watch.MASK, expected)
                            if type(rec) is message and rec.dir == "s2c":
                                if counted:  # (already read with its unknown fields null, at an earlier hole)
                                    hole.check.discard(rec.call)
                                elif hole.leaves_out_unknown(raw):
                                    # The hole was found only once this line was decoded, with its call's state
                                    # from before the hole: decoded again, what it left out read as unknown.
                                    seq, rec = done = decode_(raw, path=name, line=lineno, sticky=sticky)
                        if record(seq, rec, name, lineno):
                            skipped += 1
                            continue
                    if "payload_at" in raw and type(rec) is ev.MessageSeen and rec.payload_at is not None:
                        if sides is None:
                            sides = SideRefs(path, last, needed=self.payload)
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
                if not self.skip_damaged or not isinstance(e, CutShort):
                    raise CaptureError(name, lineno + 1 if lineno else None, f"broken compressed file: {e}") from None
                # A later file follows: what the cut frame held is a hole (the next file's first seq counts it).
                watch.damaged_frame(name, e.start, e.end - e.start, f"cut short (the file ends inside it): {e}")
            else:
                self.unread += 1
                self.warnings.append(f"{name}: compressed file cut short after line {lineno}: {e}")
        except OSError as e:
            raise CaptureError(name, None, f"cannot read: {e.strerror or e}") from None
        finally:
            self.records += found - skipped  # counted once, not per record (also when stopped early)
        if not found:
            raise CaptureError(name, None, "no capture records in this file (empty, or not a triton-tap capture)")
        if hole is not None and hole.lost:
            self.warnings.append(
                f"{name}: {hole.lost} response message(s) after a hole leave out fields a lost line stated "
                "(model, model_version, outputs, output_tensors): read as unknown (null), not as the line before the "
                "hole said, so their requests' text_responses may be short"
            )
        if sides is not None and (why := sides.warning()) is not None:
            self.warnings.append(why)


class _AfterHole:
    """The sparse-encoding state of a file after a hole in it: which calls' sticky fields are unknown."""

    __slots__ = ("check", "last_index", "lost", "sticky", "unsure")

    def __init__(self, sticky: Sticky) -> None:
        self.sticky = sticky
        self.check: set[str] = set()  # calls with a state from before the hole, checked at their next `s2c` line
        self.last_index: dict[str, int] = {}  # of those, the index of the last `s2c` message read
        self.unsure: dict[str, set[str]] = {}  # call -> its sticky fields unknown until a line states them
        #: Response lines read with fields unknown (per file: the chains of a capture set are read interleaved).
        self.lost = 0

    def seen(self, ring: list[tuple[int, ev.Record] | None], mask: int, expected: int) -> None:
        """A hole ends before seq ``expected``: each call with a state, its last `s2c` index read before the hole
        (from the reader's recent records; one older than those is unknown, and its call's state with it)."""
        last: dict[str, int] = {}
        for seq in range(expected - 1, max(-1, expected - 1 - len(ring)), -1):
            kept = ring[seq & mask]
            if kept is None or kept[0] != seq:
                continue
            rec = kept[1]
            if type(rec) is ev.MessageSeen and rec.dir == "s2c" and rec.call not in last:
                last[rec.call] = rec.index
        self.check = set(self.sticky)
        self.last_index = last

    def leaves_out_unknown(self, raw: dict[str, Any]) -> bool:
        """An `s2c` line after a hole in its file, before it is decoded. Its call's state from before the hole
        holds if this is the call's next `s2c` message (its index follows the last one read: none of the
        call's lines was lost); else each sticky field is unknown until a line states it. A line leaving
        out an unknown one reads it as null, and is counted (True)."""
        call = raw.get("call")
        if not isinstance(call, str):
            return False  # (decode says what is wrong with it)
        sticky, unsure = self.sticky, self.unsure
        if call in self.check:
            self.check.discard(call)
            index = raw.get("index")
            if type(index) is not int or index != self.last_index.get(call, -2) + 1:
                unsure[call] = set(_STICKY)
        elif call not in sticky and call not in unsure:
            unsure[call] = set(_STICKY)  # (its first line since the hole: the writer stated them all, unless lost)
        unknown = unsure.get(call)
        if unknown is None:
            return False
        unknown.difference_update([name for name in _STICKY if name in raw])
        if not unknown:
            del unsure[call]
            return False
        state = sticky.get(call)
        sticky[call] = tuple(None if name in unknown or state is None else state[k] for k, name in enumerate(_STICKY))
        self.lost += 1
        return True


def set_gaps(sets: list[list[tuple[str, SeqWatch]]], read: set[str]) -> tuple[list[list[Gap]], list[Gap]]:
    """What a whole reading says that its chains, each read on its own, cannot: ``(holes to add, per set;
    holes to drop)``. ``sets``: per capture set, each chain's (first file's name, its watch); ``read``: the
    names of every file read.

    Added: a worker of a capture set none of whose files was given (its calls are not in this reading at
    all, where the files read show no loss). Dropped: a chain's missing start, or its next file, that
    another chain read holds (a live file renamed by hand is read as a capture of its own, under its new
    name, and the file after it names the old one: both files were there, nothing was missing).
    """
    added = [[g] if (g := _workers_not_given(chains)) is not None else [] for chains in sets]
    links = [link for chains in sets for link in chains]
    continued = {w.open_end[1] for _, w in links if w.open_end is not None and w.open_end[1] in read}
    dropped = [w.open_end[0] for _, w in links if w.open_end is not None and w.open_end[1] in read]
    dropped += [w.late_start for first, w in links if w.late_start is not None and first in continued]
    return added, dropped


def _workers_not_given(chains: list[tuple[str, SeqWatch]]) -> Gap | None:
    watches = [w for _, w in chains]
    starts = [w.start for w in watches if w.start is not None and w.start.workers is not None]
    if not starts:
        return None
    workers = max(s.workers or 0 for s in starts)
    given = {s.worker for s in starts}
    missing = [k for k in range(workers) if k not in given]
    if not missing:
        return None
    which = f"worker {missing[0]}'s files were" if len(missing) == 1 else (
        f"workers {', '.join(map(str, missing))}' files were")  # fmt: skip
    return Gap(kind="missing_file", file=str(watches[0].file), line=None, first_seq=None, last_seq=None,
               count=None, detail=f"capture set {starts[0].capture_set} was written by {workers} workers: {which} "
               "not given, so the calls it relayed are not in this reading")  # fmt: skip


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


def read_capture(
    paths: PathLike | Iterable[PathLike], *, skip_damaged: bool | None = None, payload: bool = True
) -> CaptureReader:
    """A streaming reader over capture files and/or directories (see the module docstring).

    Iterating it yields ``(seq, record)``; afterwards ``.warnings`` and ``.gaps`` say what was
    tolerated and what is missing. Raises :class:`~replay.errors.CaptureError` for a path that
    does not exist and, while iterating, for unreadable content (:class:`~replay.errors.DamagedLine`
    for a damaged line, unless ``skip_damaged``: then it is a ``damaged_line`` hole; None: as
    :func:`skipping_damaged` says, off by default). ``payload``: as :attr:`CaptureReader.payload`.
    """
    return CaptureReader(paths, skip_damaged=skip_damaged, payload=payload)
