"""The CLI starts fast: ``--help`` of any command never loads the relay, grpc or tritonclient."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("h2", "hpack", "tritonclient", "grpc", "proxy.relay.tunnel", "pyarrow")


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
