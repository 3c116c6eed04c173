"""House rules that CI enforces: ruff clean, mypy --strict clean on proxy/ and replay/."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import ROOT


def test_ruff_clean() -> None:
    """ruff finds nothing in the project."""
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict_clean() -> None:
    """mypy --strict (configured in pyproject.toml) passes on proxy/ and replay/."""
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
