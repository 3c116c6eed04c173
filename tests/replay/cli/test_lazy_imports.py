"""The CLI starts fast: ``--help`` of any command never loads the relay, grpc, tritonclient, numpy or rich;
``replay check --json`` loads only what reading and tracking need (start-up is part of every check's time)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import DATA

HEAVY = ("h2", "hpack", "tritonclient", "grpc", "proxy.relay.core", "pyarrow", "numpy", "rich")


@pytest.mark.parametrize("argv", [[], ["replay", "check"], ["record"], ["diff"], ["serve"], ["report"], ["health"], ["export"]])
def test_help_imports_nothing_heavy(argv: list[str]) -> None:
    """Building the whole command tree and printing one command's help imports none of HEAVY."""
    code = (
        "import sys\n"
        "from proxy.cli import build_parser\n"
        f"try:\n    build_parser().parse_args({[*argv, '--help']!r})\n"
        "except SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_check_json_imports_neither_the_other_tools_nor_rich() -> None:
    """~0.15 s of start-up (numpy for report, asyncio for serve, rich for tables) was paid by every check."""
    code = (
        "import sys, io, contextlib\n"
        "from replay.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main(['check', '--json', {str(DATA / 'one_response.jsonl')!r}])\n"
        f"print(sorted(m for m in {(*HEAVY, 'asyncio', 'replay.tools.report.model')!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
