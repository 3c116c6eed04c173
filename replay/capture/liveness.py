"""Whether a capture file is still being written: its writer holds it locked while it writes it.

A file without a closing ``capture_end`` is either still growing or left by a proxy that died. The
writer takes an exclusive ``flock`` on each capture file as it opens it, before its first line, and
keeps it until the file is closed (after its ``capture_end``; a rotation's closed file, whose end names the
next one, and a live file deleted by hand, until the next file exists and is held). The kernel drops the lock when the
process dies, however it dies (SIGKILL, OOM), and it holds across processes and containers that share
the file system: so a reader tells a live file from a dead writer's by trying the lock, with no pid in
a name and no heartbeat to wait for.

A file system that does not support ``flock`` leaves every file unlocked: the reader then says what it
said before there was a lock (no ``capture_end``: the proxy stopped, or may still be writing).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from pathlib import Path
from typing import Literal


def hold(fd: int) -> bool:
    """Lock the capture file open at ``fd`` for as long as it stays open (the writer, once per file).

    False where the file system refuses locks: the file is written all the same, only not told live.
    A reader's :func:`being_written` holds a shared lock for the moment of its test: tried again for up to
    about :data:`HOLD_TRIES` ms rather than waited on (a process that kept a lock on the file must not
    stall the writer).
    """
    for _ in range(HOLD_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            time.sleep(0.001)
        except OSError:
            return False
        else:
            return True
    return False


#: How many times :func:`hold` tries the lock, 1 ms apart.
HOLD_TRIES = 50


def being_written(path: Path | str) -> bool:
    """Whether a writer holds ``path`` (a live capture file); False for a file nobody holds, one that is
    gone, or one whose lock cannot be tried, and for anything but a regular file: a named pipe (a capture
    piped in, ``mkfifo``) is never opened here, where opening it waits for its writer and closing it again
    can leave that writer with no reader (EPIPE: the capture it was writing lost)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return fd_being_written(fd)
    finally:
        os.close(fd)


def fd_being_written(fd: int) -> bool:
    """Whether a writer holds the file open at ``fd`` (a reader's own descriptor), whatever its name is now.

    A reader that keeps a file open asks this rather than :func:`being_written` of the name it opened: a
    live file renamed while read (logrotate's ``mv``) has left that name, which then refers to nothing or
    to another file, while its writer still holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    fcntl.flock(fd, fcntl.LOCK_UN)  # (the shared lock taken when nobody held it: a reader keeps none)
    return False


#: How long a writer may take from creating a capture file to holding it (it creates the file, then locks
#: it, then writes its first line): an empty file held by no one for longer was left by a writer that died.
LOCK_GRACE_S = 10.0

#: Whether a capture is being written: held by a writer; not held yet but just created; or neither.
CaptureState = Literal["written", "starting", "over"]


def capture_state(paths: list[Path], now: float | None = None) -> CaptureState:
    """The state of the capture of files ``paths``: ``written`` when a writer holds one of them (a rotation
    keeps the closed file held until the next one is); ``starting`` when none is held but one is an empty file
    younger than :data:`LOCK_GRACE_S`; else ``over``: its writer closed it, or stopped (killed)."""
    now = time.time() if now is None else now
    starting = False
    for path in paths:
        if being_written(path):
            return "written"
        try:
            st = os.stat(path)
        except OSError:  # (removed by retention meanwhile: the others tell)
            continue
        starting = starting or (st.st_size == 0 and now - st.st_mtime < LOCK_GRACE_S)
    return "starting" if starting else "over"
