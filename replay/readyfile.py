"""``--ready-file PATH`` (``record``, ``serve``): how a script learns that a server accepts connections.

A server binds and listens some time after it starts (0.9-3.8 s for ``record`` on a loaded machine);
a client that connects before gets grpc's opaque "stream is no longer in valid state". The ready
file is written once the listening socket accepts connections, atomically (a temporary file in the
same directory, then a rename): a reader sees no file or the whole of it, one JSON line with the
process id and the addresses actually bound (port 0 resolved), e.g.
``{"pid": 4242, "listen": "127.0.0.1:8011", "admin": null, "metrics": null}``. It is removed when
the server stops accepting connections (at shutdown); a process that is killed leaves it behind, so
a leftover found at start-up is removed first, before anything is bound.

Only a leftover: the server holds its ready file locked while it runs (:mod:`replay.capture.liveness`;
the kernel drops the lock when the process dies, however it dies), so a second server given the same
path is refused rather than taking the file of one still running; and a file that is no ready file (a
capture given by mistake) is never removed. A capture file's name is refused outright.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from replay.capture import liveness, naming
from replay.errors import UserError


def add_argument(parser: argparse.ArgumentParser, says: str) -> None:
    """``--ready-file PATH`` and its help, as ``record`` and ``serve`` both take it; ``says``: what the line holds."""
    parser.add_argument("--ready-file", type=Path, default=None, metavar="PATH",
                        help=f"once clients can connect, write one JSON line here ({says}; the addresses bound, "
                        "port 0 resolved), atomically; removed at shutdown")  # fmt: skip


def prepare(path: Path) -> None:
    """Before anything is bound: a leftover from an earlier run goes; a directory that cannot take the file is
    one line (:class:`UserError`) now rather than after the server started."""
    directory = path.parent
    if not directory.is_dir():
        raise UserError(f"--ready-file {str(path)!r}: directory {str(directory)!r} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UserError(f"--ready-file {str(path)!r}: directory {str(directory)!r} is not writable")
    if path.is_dir():
        raise UserError(f"--ready-file {str(path)!r} is a directory")
    if naming.holds_capture(path.name):
        raise UserError(f"--ready-file {str(path)!r} has a capture file's name: give another path")
    if not path.exists():
        return
    whose = _whose(path)
    if liveness.being_written(path):
        raise UserError(f"--ready-file {str(path)!r} is the ready file of a server still running{whose}: "
                        "give another path")  # fmt: skip
    if whose == "":
        raise UserError(f"--ready-file {str(path)!r} exists and is not a ready file: not replacing it")
    try:
        path.unlink()
    except OSError as e:
        raise UserError(f"--ready-file {str(path)!r}: cannot remove the leftover file: {e.strerror or e}") from None


def _whose(path: Path) -> str:
    """`` (pid N)`` when ``path`` holds a ready file's line, else ``""``."""
    try:
        doc = json.loads(path.read_bytes()[:4096])
    except (OSError, ValueError):
        return ""
    if not isinstance(doc, dict) or "pid" not in doc or "listen" not in doc:
        return ""
    return f" (pid {doc['pid']})"


#: path -> the descriptor holding its lock while this process serves (closed by :func:`remove`).
_HELD: dict[Path, int] = {}


def write(path: Path, listen: str, **addresses: Any) -> None:
    """Say the server is ready: ``{"pid", "listen", **addresses}`` as one JSON line, atomically."""
    line = json.dumps({"pid": os.getpid(), "listen": listen, **addresses}) + "\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = -1
    try:
        tmp.write_text(line)
        fd = os.open(tmp, os.O_RDONLY)
        liveness.hold(fd)  # before it is seen under its name: held from the first moment it says ready
        os.replace(tmp, path)
    except OSError as e:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write --ready-file {str(path)!r}: {e.strerror or e}") from None
    old = _HELD.pop(path, None)
    if old is not None:
        os.close(old)
    _HELD[path] = fd


def remove(path: Path) -> None:
    """The server no longer accepts connections: the file goes (a file already gone is fine)."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass  # shutdown goes on; the pid in a leftover file tells a reader it is stale
    fd = _HELD.pop(path, None)
    if fd is not None:
        os.close(fd)
