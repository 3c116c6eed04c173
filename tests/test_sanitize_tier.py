"""The sanitizer tier's command (tests/sanitize.py) names what is there; its fuzz waits to be asked.

The tier itself (a sanitized build, minutes of tests) is opt-in: ``python -m tests.sanitize``
(docs/testing.md#the-sanitizer-tier). This checks, cheaply, what would otherwise rot unseen: the test
files it runs exist, it finds the modules where the build puts them, and the fuzz is skipped unless set.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replay import compiled
from tests import sanitize
from tests.support.paths import ROOT


def test_it_runs_test_files_that_exist() -> None:
    for name in (*sanitize.DIFFERENTIAL, sanitize.FUZZ):
        assert (ROOT / name).is_file(), name


def test_it_looks_for_each_module_where_the_build_puts_it() -> None:
    if compiled.sources_reason() is None:  # mypyc's shims, and the one library holding their code
        for name in compiled.SOURCES:
            assert Path(importlib.import_module(name).__file__ or "") == sanitize.module_path(ROOT, name)
        assert sanitize.module_path(ROOT, "triton_tap__mypyc").exists()
    for name in compiled.MODULES:
        module = compiled.load_compiled(name)
        if module is None:
            pytest.skip(f"{name} is not built here (or {compiled.PURE_ENV})")
        assert Path(module.__file__ or "") == sanitize.module_path(ROOT, name)


def test_the_tests_run_the_sanitized_tree_with_asan_watching_the_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compiled.PURE_ENV, "1")
    monkeypatch.setenv("LD_PRELOAD", "/lib/other.so")
    env = sanitize.test_env(Path("/tmp/tree"), "/lib/libasan.so", 3)
    assert compiled.PURE_ENV not in env  # the compiled modules are what is tested
    assert env["PYTHONPATH"].split(os.pathsep)[0] == "/tmp/tree"
    assert env["LD_PRELOAD"].split()[0] == "/lib/libasan.so"  # the ASan runtime first, or it refuses to run
    assert env["PYTHONMALLOC"] == "malloc" and env[sanitize.FUZZ_ENV] == "3"


def test_the_fuzz_is_skipped_unless_asked_for() -> None:
    env = {k: v for k, v in os.environ.items() if k != sanitize.FUZZ_ENV}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", sanitize.FUZZ], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0 and " skipped" in proc.stdout and "passed" not in proc.stdout, proc.stdout[-2000:]


def test_gcc_builds_leave_out_only_what_gcc_defines(monkeypatch: pytest.MonkeyPatch) -> None:
    """mypyc's own overflow test of ``<<`` is a signed shift GCC defines: with GCC that check is off, the
    rest of UBSan on; with another compiler nothing is left out."""
    cc = sanitize.compiler()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False).stdout.lower()
    assert sanitize.is_gcc(cc) == ("clang" not in version and ("gcc" in version or "free software" in version))
    monkeypatch.setattr(sanitize, "is_gcc", lambda _: True)
    assert sanitize.flags(cc) == (*sanitize.SANITIZE, "-fno-sanitize=shift-base")
    monkeypatch.setattr(sanitize, "is_gcc", lambda _: False)
    assert sanitize.flags(cc) == sanitize.SANITIZE
    assert "-fsanitize=address,undefined" in sanitize.SANITIZE and "-fno-sanitize-recover=undefined" in sanitize.SANITIZE


def test_a_report_written_as_the_process_stops_reaches_the_output(tmp_path: Path) -> None:
    """A sanitizer writes its report to fd 2 and ends the process: under pytest's default capture (fd 2
    into a file, shown at the test's end) the report was lost and the tier said only "exit 1"."""
    (tmp_path / "test_dies.py").write_text(
        "import os\n\ndef test_dies():\n    os.write(2, b'SANITIZER REPORT\\n')\n    os._exit(1)\n"
    )
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", sanitize.PYTEST_CAPTURE,
                           "test_dies.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert proc.returncode == 1 and "SANITIZER REPORT" in proc.stderr, (proc.stdout, proc.stderr)
