"""``--ready-file PATH`` (``record``, ``serve``): how a script learns that a server accepts connections.

A server binds and listens some time after it starts (0.9-3.8 s for ``record`` on a loaded machine);
a client that connects before gets grpc's opaque "stream is no longer in valid state". The ready
file is written once the listening socket accepts connections, atomically (a temporary file in the
same directory, then a rename): a reader sees no file or the whole of it, one JSON line with the
process id and the addresses actually bound (port 0 resolved), e.g.
``{"pid": 4242, "listen": "127.0.0.1:8011", "admin": null, "metrics": null}``. It is removed when
the server stops accepting connections (at shutdown); a process that is killed leaves it behind, so
a leftover found at start-up is removed first, before anything is bound.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

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
    try:
        path.unlink(missing_ok=True)
    except OSError as e:
        raise UserError(f"--ready-file {str(path)!r}: cannot remove the leftover file: {e.strerror or e}") from None


def write(path: Path, listen: str, **addresses: Any) -> None:
    """Say the server is ready: ``{"pid", "listen", **addresses}`` as one JSON line, atomically."""
    line = json.dumps({"pid": os.getpid(), "listen": listen, **addresses}) + "\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(line)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write --ready-file {str(path)!r}: {e.strerror or e}") from None


def remove(path: Path) -> None:
    """The server no longer accepts connections: the file goes (a file already gone is fine)."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass  # shutdown goes on; the pid in a leftover file tells a reader it is stale
