"""Captures as Parquet: one table per record kind, partitioned by capture, written in row groups.

Layout (Hive partitioning, read natively by DuckDB ``hive_partitioning = true`` and Spark)::

    OUT/<kind>/capture=<name>/part-<k>.parquet     one table per record kind (message, call_end, ...)
    OUT/hole/capture=<name>/part-<k>.parquet       what the reader found missing (holes, warnings)

``<name>`` is :func:`replay.capture.naming.capture_name`: the rotated files of a capture, and the
worker chains of a capture set (``record --workers``), are one capture; ``part-<k>`` is its k-th chain
of files (one per worker; ``seq`` numbers each chain). Every table of every capture is written, with
no rows when the capture has none of that kind, so a query or a Spark read of any table finds it.
Columns: ``seq``, ``kind``, then the record's fields typed by :mod:`replay.tools.export.columns`.

Memory is bounded and independent of the capture's size: records stream from the reader, and each
table holds at most ``rows`` records before writing them as one row group (so at most 14 tables x
``rows`` records, plus the row group being encoded).

Nothing half-done is left in OUT: everything is written under ``OUT/.export-*/`` and moved into
place when every capture was read; an unreadable capture leaves OUT as it was, and an OUT (or its
parents) that the export created is removed again.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from operator import attrgetter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from replay.capture import events as ev
from replay.capture import naming
from replay.capture.holes import Gap
from replay.capture.reader import CaptureReader, PathLike, read_capture, set_gaps
from replay.errors import UserError
from replay.tools.export.columns import Column, columns

#: Records per row group, and the most a table holds before writing (measured, docs/sql.md: 40 MB of RSS
#: above the reader's own; 65536 took 110 MB and wrote bigger files).
ROWS = 16_384
#: The table of what the reader found missing (it is not a record kind: no seq, no t_ns).
HOLE = "hole"
_PREFIX = ".export-"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Exported:
    """One capture as exported: its name, records per kind, and what the reader reported."""

    capture: str
    records: dict[str, int]
    holes: list[Gap]
    warnings: list[str]


class _Table:
    """One kind's part file of one chain: rows buffered up to a row group, then written."""

    def __init__(self, path: Path, kind: str, cols: list[Column], *, seq: bool, rows: int) -> None:
        self.path, self.kind, self.cols, self.rows = path, kind, cols, rows
        self.get = attrgetter(*(c.name for c in cols))
        head = [pa.field("seq", pa.int64(), nullable=False)] if seq else []
        self.schema = pa.schema([*head, pa.field("kind", pa.string(), nullable=False), *(c.field() for c in cols)])
        self.seqs: list[int] | None = [] if seq else None
        self.values: list[tuple[Any, ...]] = []
        self.written = 0
        self.writer: Any = None

    def add(self, seq: int, record: Any) -> None:
        """One record (``seq`` ignored by a table without one)."""
        if self.seqs is not None:
            self.seqs.append(seq)
        self.values.append(self.get(record))
        if len(self.values) >= self.rows:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows as one row group."""
        n = len(self.values)
        if not n:
            return
        by_column = list(zip(*self.values, strict=True))
        arrays = [] if self.seqs is None else [pa.array(self.seqs, pa.int64())]
        arrays.append(pa.array([self.kind] * n, pa.string()))
        for col, values in zip(self.cols, by_column, strict=True):
            arrays.append(pa.array(values if col.convert is None else list(map(col.convert, values)), col.type))
        self._write(pa.Table.from_arrays(arrays, schema=self.schema))
        self.written += n
        self.values = []
        if self.seqs is not None:
            self.seqs = []

    def close(self) -> None:
        """Flush; a table that got no row is still written (its schema, no rows)."""
        self.flush()
        if self.writer is None:
            self._write(self.schema.empty_table())
        self.writer.close()

    def _write(self, table: Any) -> None:
        if self.writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(self.path, self.schema, compression="zstd")
        self.writer.write_table(table, row_group_size=max(table.num_rows, 1))


def _hole_columns() -> list[Column]:
    """The reader's Gap as columns (its ``kind``, e.g. ``seq_gap``, is the column ``hole``)."""
    cols = columns(Gap)
    return [dataclasses.replace(c, name="hole") if c.name == "kind" else c for c in cols]


class _Hole:
    """A Gap with the column name ``hole`` for its kind (what ``_Table`` reads with attrgetter)."""

    __slots__ = ("count", "detail", "file", "first_seq", "hole", "last_seq", "line")

    def __init__(self, gap: Gap) -> None:
        self.hole, self.file, self.line, self.detail = gap.kind, Path(gap.file).name, gap.line, gap.detail
        self.first_seq, self.last_seq, self.count = gap.first_seq, gap.last_seq, gap.count


def _warning_gap(text: str, files: list[Path]) -> Gap:
    """A reader warning (a cut last line, a skipped kind) as a hole row of the file it names."""
    for p in files:
        if text.startswith(f"{p}:"):
            rest = text[len(str(p)) + 1 :].lstrip()
            m = re.match(r"(\d+): ", rest)
            line = int(m[1]) if m else None
            return Gap(kind="warning", file=str(p), line=line, first_seq=None, last_seq=None, count=None,
                       detail=rest[m.end():] if m else rest)  # fmt: skip
    return Gap(kind="warning", file=str(files[-1]), line=None, first_seq=None, last_seq=None, count=None, detail=text)


def partition(name: str) -> str:
    """The partition directory of a capture: ``capture=<name>``, an ASCII character beyond ``[A-Za-z0-9._-]``
    as ``%XX``, other characters as they are. Every engine reads one ``%XX`` back as one character: a non-ASCII
    character as its UTF-8 bytes' ``%XX`` read as ``cafÃ©`` in Spark where DuckDB read ``café``."""
    return "capture=" + "".join(c if not c.isascii() or c.isalnum() or c in "._-" else f"%{ord(c):02X}" for c in name)


def _export_chain(chain: list[Path], dest: Path, part: str, k: int,
                  rows: int) -> tuple[dict[str, int], CaptureReader]:  # fmt: skip
    """One chain of files into ``dest/<kind>/<part>/part-<k>.parquet``: its counts, and its reader (holes, warnings,
    watches). Its holes are written later (:func:`_write_holes`): some need every chain read (:func:`set_gaps`)."""
    kinds: dict[type[Any], _Table] = {
        cls: _Table(dest / cls.kind / part / f"part-{k}.parquet", cls.kind, columns(cls), seq=True, rows=rows)
        for cls in ev.RECORD_TYPES
    }
    reader = CaptureReader(chain, set_checks=False, payload=False)  # (no column holds the message bytes)
    for seq, record in reader:
        kinds[type(record)].add(seq, record)
    for table in kinds.values():
        table.close()
    return {t.kind: t.written for t in kinds.values()}, reader


def _write_holes(gaps: list[Gap], dest: Path, part: str, k: int, rows: int) -> None:
    holes = _Table(dest / HOLE / part / f"part-{k}.parquet", HOLE, _hole_columns(), seq=False, rows=rows)
    for gap in gaps:
        holes.add(0, _Hole(gap))
    holes.close()


def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"--parquet {str(out)!r} is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UserError(f"--parquet {str(out)!r} is not empty: choose an empty directory, or --overwrite "
                        "to replace the exported captures' partitions in it (other captures are kept)")  # fmt: skip


def _names(sets: list[list[list[Path]]]) -> list[str]:
    """Each capture's name; two captures of one name (one file name in two directories) are refused."""
    names: dict[str, Path] = {}
    for chains in sets:
        first = chains[0][0]
        name = naming.capture_name(first.name)
        if name in names:
            raise UserError(f"two captures are both named {name!r} ({names[name]} and {first}): "
                            "export them into different directories")  # fmt: skip
        names[name] = first
    return list(names)


def _move_into_place(staged: Path, out: Path, trash: Path) -> None:
    """``staged/<kind>/<partition>`` to ``out/<kind>/<partition>``; a partition it replaces goes to ``trash``."""
    for kind_dir in sorted(staged.iterdir()) if staged.is_dir() else []:
        for part_dir in sorted(kind_dir.iterdir()):
            target = out / kind_dir.name / part_dir.name
            target.parent.mkdir(exist_ok=True)
            if target.exists():
                old = trash / kind_dir.name / part_dir.name
                old.parent.mkdir(parents=True, exist_ok=True)
                os.replace(target, old)
            os.replace(part_dir, target)


def export_parquet(paths: Iterable[PathLike], out: Path, *, overwrite: bool = False, rows: int = ROWS,
                   on_capture: Callable[[Exported], None] | None = None) -> list[Exported]:  # fmt: skip
    """Write the captures of ``paths`` under ``out`` (see the module docstring); one :class:`Exported` each.

    Raises :class:`~replay.errors.CaptureError` for an unreadable capture and
    :class:`~replay.errors.UserError` for an output that is not an empty directory (without
    ``overwrite``); either way ``out`` is left as it was.
    """
    sets = read_capture(list(paths)).sets
    names = _names(sets)
    _check_out(out, overwrite)
    created = _missing_dirs(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=out, prefix=_PREFIX))
    except OSError as e:
        _remove_empty(created)
        raise UserError(f"--parquet {str(out)!r}: {e.strerror or e}") from None
    done: list[Exported] = []
    moved = False
    try:
        # Each chain is read on its own (its own part file); what only the whole reading can say (a worker not
        # given, a chain continued in another capture's file) is said once every chain was read, as `check`
        # says it: each chain alone took a complete worker set for one missing its other workers.
        read: list[tuple[str, list[tuple[dict[str, int], CaptureReader]]]] = []
        for name, chains in zip(names, sets, strict=True):
            read.append((name, [_export_chain(chain, work / "staged", partition(name), k, rows)
                                for k, chain in enumerate(chains)]))  # fmt: skip
        every = [[link for _, r in parts for chain in r.watches for link in chain] for _, parts in read]
        added, dropped = set_gaps(every, {p.name for chains in sets for chain in chains for p in chain})
        for (name, parts), of_set, chains in zip(read, added, sets, strict=True):
            counts: dict[str, int] = {}
            holes: list[Gap] = []
            warnings: list[str] = []
            for k, ((c, reader), chain) in enumerate(zip(parts, chains, strict=True)):
                counts = {kind: counts.get(kind, 0) + n for kind, n in c.items()}
                mine = [g for g in reader.gaps if not any(g is d for d in dropped)]
                mine += of_set if k == 0 else []  # (a worker not given: a hole of the set, kept with its first chain's)
                _write_holes(mine + [_warning_gap(w, chain) for w in reader.warnings], work / "staged",
                             partition(name), k, rows)  # fmt: skip
                holes += mine
                warnings += reader.warnings
            done.append(Exported(capture=name, records=counts, holes=holes, warnings=warnings))
            if on_capture is not None:
                on_capture(done[-1])
        moved = True
        _move_into_place(work / "staged", out, work / "old")
    except OSError as e:
        raise UserError(f"--parquet {str(out)!r}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not moved:
            # Nothing reached OUT: the directories this call made for it go too, so a failed export
            # leaves no trace. Only those it made, and only while empty: never a user's directory.
            _remove_empty(created)
    return done


def _missing_dirs(out: Path) -> list[Path]:
    """``out`` and those of its parents that do not exist yet, deepest first: what ``mkdir(parents=True)`` makes."""
    missing: list[Path] = []
    for d in (out, *out.parents):
        if d.exists():
            break
        missing.append(d)
    return missing


def _remove_empty(dirs: list[Path]) -> None:
    """Remove ``dirs`` (deepest first), stopping at the first that is not there or not empty."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            return


__all__ = ["HOLE", "ROWS", "Exported", "export_parquet", "partition"]
