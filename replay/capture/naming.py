"""The capture file-name rule, one definition for the writer (build) and the reader (parse).

The files of one capture are ``capture-<UTC stamp>-<pid>.jsonl``, then, after each rotation,
``capture-<UTC stamp>-<pid>-<index, 4+ digits>.jsonl`` (``-0001``, ``-0002``...), each possibly gzipped
to ``.jsonl.gz``. The stem (``capture-<stamp>-<pid>``) ties the files of one capture together; the
stamp (``YYYYMMDDTHHMMSS``, UTC, the capture's start) makes a directory's name order its time order.

A capture *set* (``record --workers N``) is one capture written by N worker processes: worker ``k``
writes ``capture-<stamp>-<pid>.w<k>.jsonl`` (then ``...w<k>-0001.jsonl``...), where ``<pid>`` is
the supervisor's. Each worker's files are a chain of their own (own ``seq``); the set's stem
(without ``.w<k>``) ties the chains together. Names without ``.w<k>`` parse as before.

A capture file written with ``--payload full`` (side-file store) has a *side file* holding the
messages' raw bytes: its name is the capture file's with the capture suffix (``.jsonl``,
``.jsonl.zst``, ``.jsonl.gz``) replaced by ``.payload`` (:func:`side_name`), so a rotated file that is
gzipped later keeps its side file. Pure: names in, names out.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

#: What a capture file's name ends with (``GZIP_SUFFIX`` appended once a rotated file is compressed,
#: ``ZSTD_SUFFIX`` for a file compressed as written).
SUFFIX = ".jsonl"
GZIP_SUFFIX = ".gz"
ZSTD_SUFFIX = ".zst"
#: What a capture file's side file (raw message bytes, ``--payload full``) is named with instead of the capture suffix.
SIDE_SUFFIX = ".payload"

_NAME = re.compile(
    r"^(?P<stem>(?P<set>capture-(?P<stamp>\d{8}T\d{6})-(?P<pid>\d+))(?:\.w(?P<worker>\d+))?)"
    r"(?:-(?P<index>\d{4,}))?\.jsonl(?P<comp>\.gz|\.zst)?$"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class CaptureName:
    """What a writer-made file name says: which capture (stem) and which of its files (index)."""

    stem: str  # capture-<stamp>-<pid>[.w<worker>], as written in the name: one chain of files
    stamp: str
    pid: int
    index: int  # 0: the first file; n: the file opened by the n-th rotation
    gzipped: bool
    zstd: bool = False
    #: A worker's file: the capture set's stem (``capture-<stamp>-<pid>``); "" for a single-process capture.
    capture_set: str = ""
    #: The worker that wrote the file (``record --workers``), else None.
    worker: int | None = None


def stamp(t_ns: int) -> str:
    """The UTC stamp (``YYYYMMDDTHHMMSS``) of a capture started at ``t_ns`` (unix epoch ns)."""
    # Whole seconds by integer division: t_ns / 1e9 is a float that rounds a start in the last ~0.2 us of a
    # second up to the next one.
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(t_ns // 1_000_000_000))


def stem(stamp: str, pid: int) -> str:
    """The stem shared by every file of the capture started at ``stamp`` by process ``pid``."""
    return f"capture-{stamp}-{pid}"


def worker_stem(set_stem: str, worker: int) -> str:
    """The stem of worker ``worker``'s chain of files in the capture set ``set_stem``."""
    return f"{set_stem}.w{worker}"


def file_name(stem: str, index: int, *, gzipped: bool = False, suffix: str = SUFFIX) -> str:
    """The name of file ``index`` (0: the first) of the capture ``stem`` (``suffix``: ``.jsonl``,
    ``.jsonl.zst`` or ``.jsonl.gz`` as written; ``gzipped``: a rotated file compressed afterwards)."""
    part = "" if index == 0 else f"-{index:04d}"
    return f"{stem}{part}{suffix}{GZIP_SUFFIX if gzipped else ''}"


def parse(name: str) -> CaptureName | None:
    """What a file name built by :func:`file_name` says, or None for any other name."""
    m = _NAME.match(name)
    if m is None:
        return None
    return CaptureName(stem=m["stem"], stamp=m["stamp"], pid=int(m["pid"]), index=int(m["index"] or 0),
                       gzipped=m["comp"] == GZIP_SUFFIX, zstd=m["comp"] == ZSTD_SUFFIX,
                       capture_set=m["set"] if m["worker"] is not None else "",
                       worker=int(m["worker"]) if m["worker"] is not None else None)  # fmt: skip


def side_name(name: str) -> str:
    """The side file of the capture file ``name``: its capture suffix replaced by ``.payload``
    (any name: ``capture-X-0001.jsonl.gz`` -> ``capture-X-0001.payload``, ``my.jsonl`` -> ``my.payload``;
    a name without a capture suffix gets ``.payload`` appended)."""
    for suffix in (SUFFIX + ZSTD_SUFFIX, SUFFIX + GZIP_SUFFIX, SUFFIX):
        if name.endswith(suffix):
            return name[: -len(suffix)] + SIDE_SUFFIX
    return name + SIDE_SUFFIX


def side_owner(name: str) -> CaptureName | None:
    """What the side file ``name`` of a writer-made capture file says (its capture file's stem and
    index), or None for any other name: :func:`side_name` read backwards."""
    if not name.endswith(SIDE_SUFFIX):
        return None
    return parse(name[: -len(SIDE_SUFFIX)] + SUFFIX)


def looks_like_capture(name: str) -> bool:
    """A file a directory of captures is read for: ``*.jsonl``, ``*.jsonl.gz`` or ``*.jsonl.zst`` (any stem)."""
    return name.endswith((SUFFIX, SUFFIX + GZIP_SUFFIX, SUFFIX + ZSTD_SUFFIX))


def holds_capture(name: str) -> bool:
    """Whether a file of that name is read as part of a capture (:func:`looks_like_capture`, or a side file):
    a name no other output of the tools may take (a typo must not destroy evidence)."""
    return looks_like_capture(name) or name.endswith(SIDE_SUFFIX)


def capture_name(name: str) -> str:
    """The name of the capture a file of that name belongs to (``export`` partitions by it).

    A worker's file: its capture set's stem (the set is one capture); another writer-made file: its
    stem (rotated files are one capture); any other file: its name without the capture suffix.
    """
    parsed = parse(name)
    if parsed is not None:
        return parsed.capture_set or parsed.stem
    for suffix in (SUFFIX + ZSTD_SUFFIX, SUFFIX + GZIP_SUFFIX, SUFFIX):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name
