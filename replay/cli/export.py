"""``triton-tap export --parquet OUT CAPTURE...``: captures as Parquet tables for DuckDB, Spark or Trino.

The layout and the column types are :mod:`replay.tools.export.parquet`'s; docs/sql.md has the queries.
What the reader warns about (a cut last line) and the holes it finds are printed and kept in the
``hole`` table, so the exported tables never claim more than the capture held.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from replay.cli.base import add_capture_argument, positive_int
from replay.errors import EXIT_OK


def add_export_command(sub: Any) -> None:
    """Register ``export`` on a subparser set."""
    p = sub.add_parser(
        "export",
        help="write captures as Parquet: one table per record kind, partitioned by capture (DuckDB, Spark, Trino)",
        description="Write captures as Parquet tables, OUT/<kind>/capture=<name>/part-<k>.parquet (Hive "
        "partitioning), typed columns from the capture format; holes and reader warnings go to OUT/hole. "
        "Refuses a non-empty OUT unless --overwrite. Exit 0: done; 2: unreadable capture or unusable OUT.",
    )
    p.add_argument("--parquet", type=Path, required=True, metavar="OUT", help="output directory of the tables")
    add_capture_argument(p, skip_damaged=True)
    p.add_argument("--overwrite", action="store_true",
                   help="write into a non-empty OUT: the partitions of the exported captures are replaced, "
                   "other captures' partitions are kept")  # fmt: skip
    p.add_argument("--row-group", type=positive_int, default=None, metavar="ROWS",
                   help="records per Parquet row group, and the most each table holds in memory (default 16384)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from replay.tools.export.parquet import ROWS, Exported, export_parquet

    def report(done: Exported) -> None:
        for w in done.warnings:
            print(f"triton-tap: warning: {w}", file=sys.stderr)
        for gap in done.holes:
            where = f"{gap.file}:{gap.line}" if gap.line is not None else gap.file
            print(f"triton-tap: warning: {where}: {gap.detail}", file=sys.stderr)
        records = sum(done.records.values())
        kinds = ", ".join(f"{k} {n}" for k, n in done.records.items() if n)
        print(f"{done.capture}: {records} records ({kinds}); holes: {len(done.holes)}, warnings: {len(done.warnings)}")

    export_parquet(args.capture, args.parquet, overwrite=args.overwrite, rows=args.row_group or ROWS, on_capture=report)
    print(f"written: {args.parquet}")
    return EXIT_OK
