"""The replay subcommands of ``triton-tap`` (also ``python -m replay``)."""

from __future__ import annotations

import argparse
from typing import Any


def add_replay_commands(sub: Any) -> None:
    """Register ``replay ...`` under the ``triton-tap`` command tree."""
    rp = sub.add_parser("replay", help="offline commands on captures")
    rsub = rp.add_subparsers(dest="replay_command", required=True, parser_class=type(rp))
    _ = (rsub, argparse)
