"""``triton-tap replay upgrade``: rewrite captures of older schema versions as the current one.

Older files keep reading through the upgrade chain; this makes them as small as new ones (sparse,
compressed) and readable by tools that only know the current version. File by file: each output
file holds exactly the records of its input file, seq numbers unchanged, so rotation and holes stay
what they were. Nothing is overwritten: an output name that exists is refused, and each file is
written to a temporary name and renamed only when complete. A file's side file (``--payload full``
message bytes) is copied along under the output's side-file name; offsets do not change.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from replay.capture import naming
from replay.capture.reader import read_capture
from replay.capture.schema import Encoder
from replay.cli.base import add_capture_argument, same_file
from replay.errors import EXIT_FINDINGS, EXIT_OK, UserError

_SUFFIX = {"zstd": naming.SUFFIX + naming.ZSTD_SUFFIX, "gzip": naming.SUFFIX + naming.GZIP_SUFFIX, "none": naming.SUFFIX}


def _inputs(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(q for q in p.iterdir() if q.is_file() and naming.looks_like_capture(q.name))
        else:
            files.append(p)
    return files


def _output_name(src: Path, compress: str) -> str:
    name = src.name
    for suffix in (naming.SUFFIX + naming.ZSTD_SUFFIX, naming.SUFFIX + naming.GZIP_SUFFIX, naming.SUFFIX):
        if name.endswith(suffix):
            return name[: -len(suffix)] + _SUFFIX[compress]
    return name + _SUFFIX[compress]


def _open(f: BinaryIO, compress: str) -> Any:
    if compress == "zstd":
        import zstandard

        return zstandard.ZstdCompressor(level=3, write_checksum=True).stream_writer(f, closefd=False)
    if compress == "gzip":
        return gzip.GzipFile(fileobj=f, mode="wb")
    return f


def upgrade(paths: list[str], out_dir: Path, compress: str = "zstd", err: TextIO | None = None) -> list[Path]:
    """Rewrite each capture file of ``paths`` into ``out_dir`` at the current schema; the new paths. What the
    reader warns of (a cut last line or frame, whose records the new file no longer shows missing) goes to
    ``err``."""
    return upgrade_files(paths, out_dir, compress, err)[0]


def upgrade_files(paths: list[str], out_dir: Path, compress: str = "zstd",
                  err: TextIO | None = None) -> tuple[list[Path], list[Path]]:  # fmt: skip
    """:func:`upgrade`'s new paths, and the input files not carried over whole: a cut last line or frame, or
    records of a kind this version does not know, each said on ``err``. Their copies hold every record that
    could be read, and no longer show what could not."""
    err = err or sys.stderr
    files = _inputs(paths)
    if not files:
        raise UserError("no capture files to upgrade")
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"-o {str(out_dir)!r} is not a directory")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"-o {str(out_dir)!r}: {e.strerror or e}") from None
    targets = [out_dir / _output_name(src, compress) for src in files]
    sides = [(_side(src), _side(t)) for src, t in zip(files, targets, strict=True)]
    clash = [str(t) for t in targets if t.exists()] + [str(t) for s, t in sides if s.exists() and t.exists()] + [str(t) for t, s in zip(targets, files, strict=True)
                                                       if same_file(t, s)]  # fmt: skip
    if clash:
        raise UserError(f"will not overwrite {clash[0]}: choose an empty output directory")
    written, partial = [], []
    for src, target in zip(files, targets, strict=True):
        reader = read_capture(src)
        records = list(reader)  # one file at a time: its records exactly (CaptureError if damaged)
        for w in reader.warnings:
            print(f"triton-tap: warning: {w}", file=err)
        if reader.unread:
            partial.append(src)
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".upgrade-")
        try:
            with os.fdopen(fd, "wb") as raw, _open(raw, compress) as out:
                encoder = Encoder()  # sparse state is per file, as the writer keeps it
                for seq, record in records:
                    out.write(encoder.encode(record, seq))
            os.chmod(tmp, 0o600)
            side, side_target = _side(src), _side(target)
            if side.exists():
                _copy(side, side_target)  # before the capture file: its lines point there
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        written.append(target)
    return written, partial


def _side(capture: Path) -> Path:
    return capture.with_name(naming.side_name(capture.name))


def _copy(src: Path, target: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".upgrade-")
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def add_upgrade_command(sub: Any) -> None:
    """Register ``upgrade`` on the ``replay`` subparser set."""
    p = sub.add_parser(
        "upgrade",
        help="rewrite captures of older schema versions as the current one (sparse, compressed)",
        description="Rewrite capture files at the current schema version, file by file (seq numbers, "
        "rotation and holes unchanged), into an output directory; never overwrites. Exit 0: done; 1: done, but "
        "a file was not carried over whole (a cut last line or frame, records of a kind unknown to this version: "
        "its copy does not show them; keep the original); 2: unreadable capture or an output file that exists.",
    )
    add_capture_argument(p)
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="directory for the rewritten files")
    p.add_argument("--compress", choices=tuple(_SUFFIX), default="zstd", help="how to store them (default %(default)s)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    written, partial = upgrade_files(args.capture, args.output, args.compress)
    for path in written:
        print(path)
    if partial:
        # Exit 0 would say the copies are the captures: they lack what could not be read, and no longer show it.
        print(f"triton-tap: {len(partial)} file(s) not carried over whole (warnings above): their copies hold every "
              f"record that could be read and no longer show the rest; keep the originals: "
              f"{', '.join(str(p) for p in partial)}", file=sys.stderr)  # fmt: skip
        return EXIT_FINDINGS
    return EXIT_OK
