"""``tail CAPTURE_DIR --follow``: a capture's lines while it is written, across rotation and compression.

The newest capture of the directory is read from its first file on, with aiofiles (a capture set of
``record --workers``: each worker's chain, concurrently). Every file is
read as it grows: a plain file line by line (a line without its newline yet waits for the rest), a
``.jsonl.zst`` or ``.jsonl.gz`` file frame by frame (the writer appends one complete zstd frame or
gzip member per written batch; a frame still being written waits for the rest). A ``capture_end``
of reason ``rotate`` or ``reopen`` leads to the file it names (or, when retention removed that one before
the follow got there, to the oldest file of the chain still there, with a warning of what was not shown),
waited for as long as the writer holds the file that named it (it keeps it locked until the next one exists);
any other end stops the follow. A file
that its writer no longer holds (:mod:`replay.capture.liveness`) and that ends without a
``capture_end`` was left by a proxy that died: the follow stops there, an UpstreamError, rather than
wait for lines that will not come. The lock is tried on the file the follow holds open, not by its name: a
live file renamed while followed (logrotate's ``mv``) is still held by its writer, which closes it with a
``capture_end`` (``reopen``) under its new name. One that was deleted while it was written has no end
either: its writer went on in the chain's next file (which starts with a gap record saying what was
lost), and so does the follow; so does it after a renamed file let go without its end.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson

from proxy.capture import retention
from replay.capture import liveness, naming
from replay.errors import CaptureError, UpstreamError, UserError

#: How often a followed file that did not grow is looked at again (a file has no "grew" event to await).
POLL_S = 0.1
CHUNK = 1 << 16


def newest_capture(directory: Path) -> Path:
    """The first file still present of the newest capture in ``directory`` (names sort in time order); of a
    capture set (``record --workers``), of its first chain present."""
    return newest_chains(directory)[0]


def newest_chains(directory: Path) -> list[Path]:
    """The newest capture in ``directory``: the first file still present of each of its chains (one, or one
    per worker of a capture set), in worker order."""
    files, newest = _newest(directory)
    return chains_of(files, newest)


def newest_with_state(directory: Path) -> tuple[list[Path], liveness.CaptureState]:
    """:func:`newest_chains`, and whether that capture is being written (:func:`liveness.capture_state`)."""
    files, newest = _newest(directory)
    return chains_of(files, newest), liveness.capture_state(_by_capture(files)[newest])


def _newest(directory: Path) -> tuple[list[tuple[str, str, int, Path]], str]:
    """The writer-named files of ``directory`` and its newest capture; a UserError when there is none."""
    if not directory.is_dir():
        raise UserError(f"{str(directory)!r} is not a directory")
    files = _files(directory)
    if not files:
        raise UserError(f"no capture files in {str(directory)!r}")
    return files, max(capture for capture, _, _, _ in files)


def newest_written(directory: Path, over: set[str]) -> tuple[list[Path] | None, str | None]:
    """The newest capture in ``directory`` a writer holds a file of (:func:`liveness.capture_state`), as
    :func:`newest_chains` gives it (None: none is), and the newest capture's name whether written or not
    (None: no capture files). ``over`` holds the captures found over: the caller's, kept between calls, since
    one that is over stays so and a directory of old captures is not looked at again on every poll."""
    files = _files(directory)
    if not files:
        return None, None
    paths = _by_capture(files)
    now = time.time()
    for capture in sorted(paths, reverse=True):
        if capture in over:
            continue
        state = liveness.capture_state(paths[capture], now)
        if state == "written":
            return chains_of(files, capture), max(paths)
        if state == "over":
            over.add(capture)
    return None, max(paths)


def capture_names(directory: Path) -> set[str]:
    """The captures (a capture set's stem, or a capture's) that ``directory``'s writer-named files belong to;
    none for a directory that is not there."""
    return {capture for capture, _, _, _ in _files(directory)} if directory.is_dir() else set()


def _by_capture(files: list[tuple[str, str, int, Path]]) -> dict[str, list[Path]]:
    """Each capture's files (of :func:`_files`)."""
    paths: dict[str, list[Path]] = {}
    for capture, _, _, path in files:
        paths.setdefault(capture, []).append(path)
    return paths


def set_chains(directory: Path, capture: str) -> list[Path]:
    """The first file still present of each chain of ``capture`` (a capture set's stem) in ``directory``: a
    worker opens its first file a moment after the set starts, so a follow looks again for the others."""
    return chains_of(_files(directory), capture)


def _files(directory: Path) -> list[tuple[str, str, int, Path]]:
    """(capture, chain stem, index, path) of each writer-named file of ``directory``."""
    return [(n.capture_set or n.stem, n.stem, n.index, p)
            for p in directory.iterdir() if (n := naming.parse(p.name)) is not None]  # fmt: skip


def chains_of(files: list[tuple[str, str, int, Path]], capture: str) -> list[Path]:
    stems = sorted({stem for c, stem, _, _ in files if c == capture})
    return [min((index, p) for _, s, index, p in files if s == stem)[1] for stem in stems]


class _Frames:
    """Decompresses a growing stream of complete frames (zstd) or members (gzip), one after another."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._obj = make()

    def feed(self, data: bytes) -> bytes:
        out = []
        while data:
            out.append(self._obj.decompress(data))
            if not self._obj.eof:
                break  # the frame goes on in bytes not written yet
            data = self._obj.unused_data
            self._obj = self._make()
        return b"".join(out)


def _decoder(path: Path) -> Callable[[bytes], bytes]:
    if path.name.endswith(naming.SUFFIX + naming.ZSTD_SUFFIX):
        import zstandard

        dctx = zstandard.ZstdDecompressor()
        return _Frames(dctx.decompressobj).feed
    if path.name.endswith(naming.SUFFIX + naming.GZIP_SUFFIX):
        return _Frames(lambda: zlib.decompressobj(wbits=31)).feed  # 31: gzip framing
    return lambda data: data


class _LetGo(Exception):
    """The followed file was deleted or renamed while its writer held it, and its writer let it go without
    its end: ``how`` says which (``deleted``, ``renamed``)."""

    def __init__(self, name: str, how: str) -> None:
        super().__init__(name)
        self.how = how


async def _lines_growing(path: Path, done: Callable[[bytes], bool], kept: list[int]) -> AsyncIterator[bytes]:
    """Complete lines of a file being appended to, until ``done(line)`` says the file is finished (a descriptor
    of it then goes into ``kept``, the caller's to close: whether its writer still holds it); a file let go
    without that end: :class:`_LetGo` if ``path`` no longer names it (deleted, or renamed), else an
    UpstreamError."""
    import aiofiles

    decode = _decoder(path)
    buf = b""
    started = False  # (an empty file may be one its writer has not locked yet)
    released = False
    empty_unheld = 0.0  # how long the file has been empty and held by no writer
    async with aiofiles.open(path, "rb") as f:
        while True:
            chunk = await f.read(CHUNK)
            if not chunk:
                if released or empty_unheld >= liveness.LOCK_GRACE_S:
                    state = retention.live_state(f.fileno(), path)
                    if state != "ok":
                        raise _LetGo(path.name, "deleted" if state == "unlinked" else "renamed")
                    if not started:
                        raise UpstreamError(f"{path.name}: its proxy stopped before it wrote anything to it (killed, "
                                            "or stopped while it could not write it): nothing more will be written "
                                            "to it")  # fmt: skip
                    raise UpstreamError(f"{path.name}: its proxy stopped without closing the capture (killed?): "
                                        "nothing more will be written to it")  # fmt: skip
                # The descriptor, not the name: a live file renamed under the follow keeps its writer's lock,
                # and its old name is gone (or names another file).
                if started and not liveness.fd_being_written(f.fileno()):
                    # No writer holds it: one that closed it wrote its end first, so one more read
                    # finds that end, or nothing more will come.
                    released = True
                    continue
                if not started:
                    # Its writer creates it, then locks it, then writes its first line: empty and held by no one
                    # for longer than that takes, its writer is gone (killed right after creating it, or it
                    # could not write its first line, a full disk, and then stopped).
                    empty_unheld = 0.0 if liveness.fd_being_written(f.fileno()) else empty_unheld + POLL_S
                await asyncio.sleep(POLL_S)
                continue
            started = True
            try:
                buf += decode(chunk)
            except Exception as e:  # zstandard.ZstdError, zlib.error: damage, not a frame still growing
                raise CaptureError(str(path), None, f"not a readable compressed capture: {e}") from None
            *complete, buf = buf.split(b"\n")
            for line in complete:
                if line.strip():
                    yield line
                    if done(line):
                        kept.append(os.dup(f.fileno()))
                        return


def is_end(line: bytes) -> bool:
    """Whether ``line`` is a ``capture_end`` record (cheap: no JSON parse for the other lines)."""
    # The bytes are only a hint: a mark's labels ({"kind":"capture_end"}) hold them too, and a follow
    # that stopped there would miss everything the proxy goes on recording.
    if b'"kind":"capture_end"' not in line:
        return False
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False  # (damage is said where the line is decoded)
    return isinstance(raw, dict) and raw.get("kind") == "capture_end"


def _existing(directory: Path, name: str) -> Path | None:
    # The name as the writer opened it, or with .gz once a rotated plain file was compressed.
    for cand in (directory / name, directory / f"{name}{naming.GZIP_SUFFIX}"):
        if cand.exists():
            return cand
    return None


#: How long a capture file named by the directory may take to be found again under its compressed name
#: (or a later file of its chain to be found) before the follow gives up on it.
VANISHED_S = 10.0


async def follow_lines(first: Path, warn: Callable[[str], None] | None = None) -> AsyncIterator[tuple[Path, bytes]]:
    """``(file, line)`` for every line of the capture starting at file ``first``, across rotations. Files of the
    chain removed before the follow got to them (a follow that fell behind retention) are skipped to the oldest
    one still there, and ``warn`` (default: stderr) is told, once, which files and records were not shown."""
    say = warn or _warn_stderr
    path: Path | None = first
    directory = first.parent
    end_seq: int | None = None  # the seq of the capture_end that named ``path`` (None: the directory did)
    skipped: tuple[str, int, int | None] | None = None  # (first file removed, how many, end_seq) to say
    while path is not None:
        last = b""
        kept: list[int] = []
        try:
            async for line in _lines_growing(path, is_end, kept):
                if skipped is not None:
                    say(_skipped_text(*skipped, _seq_of(line), path.name))
                    skipped = None
                last = line
                yield path, line
        except FileNotFoundError:
            # Seen, then compressed before it was opened: a rotated plain file becomes NAME.gz (nothing
            # of it was read yet: the error comes from the open). Or removed by retention.
            name = path.name
            path, n = await _named_or_later(directory, name, VANISHED_S)
            skipped = _more_skipped(skipped, name, n, end_seq)
            continue
        except _LetGo as e:
            path = await _next_of_chain(path, e.how)
            continue
        ended, path = path, None
        try:
            if is_end(last):
                end = orjson.loads(last)
                nxt = end.get("next_file")
                if end.get("reason") in ("rotate", "reopen") and isinstance(nxt, str):
                    seq = end.get("seq")
                    end_seq = seq if isinstance(seq, int) else None
                    # For as long as the writer goes on: it opens the next file right after the end record, or
                    # tries again later when it could not, keeping the file it closed locked until then.
                    path, n = await _named_or_later(directory, nxt, None, (ended.name, kept[0]))
                    skipped = _more_skipped(skipped, nxt, n, end_seq)
        finally:
            for fd in kept:
                os.close(fd)


def _seq_of(line: bytes) -> object:
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None  # (damage is said where the line is decoded)
    return raw.get("seq") if isinstance(raw, dict) else None


def _warn_stderr(text: str) -> None:
    print(f"triton-tap: warning: {text}", file=sys.stderr, flush=True)


def _more_skipped(skipped: tuple[str, int, int | None] | None, name: str, n: int,
                  end_seq: int | None) -> tuple[str, int, int | None] | None:  # fmt: skip
    """The files not shown so far (not said yet) with ``n`` more from ``name`` on."""
    if n == 0:
        return skipped
    if skipped is None:
        return name, n, end_seq
    return skipped[0], skipped[1] + n, skipped[2]


def _skipped_text(first: str, n: int, end_seq: int | None, next_seq: object, going_on: str) -> str:
    files = first if n == 1 else f"{n} files ({first} and the {n - 1} after it)"
    if isinstance(next_seq, int) and end_seq is not None and next_seq == end_seq + 1:
        # Nothing between the end that named it and what follows: it never held a record (the writer could not
        # create it and went on in the next index), not a file removed with records in it.
        return (f"{files} named as the next file {'is' if n == 1 else 'are'} not there, and no record is missing "
                f"(seq {end_seq}, then {next_seq}): going on in {going_on}")  # fmt: skip
    if isinstance(next_seq, int) and end_seq is not None and next_seq > end_seq + 1:
        records = f"seq {end_seq + 1}..{next_seq - 1} ({next_seq - end_seq - 1} record(s)) not shown"
    elif isinstance(next_seq, int):
        records = f"the records before seq {next_seq} not shown"
    else:
        records = "their records not shown"
    return (
        f"{files} removed before this follow read {'it' if n == 1 else 'them'} (--max-total-mb retention, or "
        f"by hand): {records}; going on in {going_on}"
    )


def _later_of_chain(directory: Path, name: str) -> list[tuple[int, Path]]:
    """(index, path) of the files of ``name``'s chain after it, oldest first."""
    named = naming.parse(name)
    if named is None:
        return []
    try:
        files = [(n, p) for p in directory.iterdir() if (n := naming.parse(p.name)) is not None]
    except FileNotFoundError:
        raise CaptureError(str(directory), None, "the capture directory was removed while it was followed") from None
    return sorted((n.index, p) for n, p in files if n.stem == named.stem and n.index > named.index)


async def _named_or_later(
    directory: Path, name: str, wait_s: float | None, named_by: tuple[str, int] | None = None,
) -> tuple[Path, int]:  # fmt: skip
    """``name``, or ``name.gz`` once the writer compressed it, and 0; or, once it is gone for good (a later file
    of its chain is there, and the writer opens its files in order), the oldest later one still there and how
    many files were skipped to get to it. Nothing of that within ``wait_s`` (None: no limit) is a CaptureError.

    ``named_by``: the file whose ``capture_end`` named ``name``, and a descriptor of it (does its writer still hold
    it?). The writer keeps it locked until the next file exists, so neither is a proxy that stopped before it
    created that file (killed): an UpstreamError, after :data:`VANISHED_S` (a writer from before that rule let go
    of it a moment before creating the next)."""
    named = naming.parse(name)
    waited = 0.0
    let_go: float | None = None  # when the writer was first seen not holding ``named_by``'s file
    while True:
        if (path := _existing(directory, name)) is not None:
            return path, 0
        later = _later_of_chain(directory, name)
        if later and named is not None:
            # Looked for once more: a listing is no snapshot, and a writer rotating fast can create ``name``,
            # close it, go on in the next file and gzip it (a new name) between the look above and the
            # listing, which then saw the next file and neither of its names.
            if (path := _existing(directory, name)) is not None:
                return path, 0
            index, path = later[0]
            return path, index - named.index
        if wait_s is not None and waited >= wait_s:
            raise CaptureError(str(directory / name), None, "the capture file vanished while it was followed")
        if named_by is not None and not liveness.fd_being_written(named_by[1]):
            if let_go is None:
                let_go = waited
            elif waited - let_go >= VANISHED_S:
                raise UpstreamError(
                    f"{named_by[0]} names {name} as its next file, which is not there, and its proxy no longer "
                    "holds it: the proxy stopped before it created that file (killed, or stopped while it could "
                    "not create it), or the file was removed; nothing more will be written"
                )  # fmt: skip
        await asyncio.sleep(POLL_S)
        waited += POLL_S


async def _next_of_chain(deleted: Path, how: str = "deleted") -> Path:
    """The file its writer went on in after ``deleted`` was removed (or renamed: ``how``) while being written:
    the chain's next one. None within :data:`VANISHED_S`: the writer died too, an UpstreamError."""
    waited = 0.0
    while True:
        if later := _later_of_chain(deleted.parent, deleted.name):
            return later[0][1]
        if waited >= VANISHED_S:
            raise UpstreamError(f"{deleted.name} was {how} while being written, and its proxy opened no next "
                                "file (killed?): nothing more will be written to it")  # fmt: skip
        await asyncio.sleep(POLL_S)
        waited += POLL_S
