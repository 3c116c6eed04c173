"""House rules that CI enforces: ruff, mypy --strict, the import contracts, declared = imported, module size,
C without warnings."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from tests.support.paths import ROOT

BIN = Path(sys.executable).parent


def _run(*argv: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_ruff_clean() -> None:
    """ruff finds nothing in the project."""
    proc = _run(sys.executable, "-m", "ruff", "check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict_clean() -> None:
    """mypy --strict (configured in pyproject.toml) passes on proxy/ and replay/."""
    proc = _run(sys.executable, "-m", "mypy")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_import_contracts_kept() -> None:
    """The import rules of docs/architecture.md ([tool.importlinter] in pyproject.toml) hold."""
    proc = _run(BIN / "lint-imports")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_declared_dependencies_are_the_imported_ones() -> None:
    """deptry: nothing imported that pyproject does not declare, nothing declared that nothing imports."""
    proc = _run(BIN / "deptry", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


#: Modules may grow past this only with a reason written here (none today).
MAX_MODULE_LINES = 500
#: Functions may be longer only when they are a measured hot loop that says so in a comment.
MAX_FUNCTION_LINES = 80
HOT_LOOP_MARK = "hot loop"


def test_modules_and_functions_stay_readable() -> None:
    """No module of proxy/ or replay/ over ~500 lines; no function over ~80 unless it says it is a hot loop."""
    too_long: list[str] = []
    for path in sorted([*ROOT.glob("proxy/**/*.py"), *ROOT.glob("replay/**/*.py")]):
        if "models" in path.relative_to(ROOT).parts:
            continue
        text = path.read_text()
        name = str(path.relative_to(ROOT))
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {len(text.splitlines())} lines")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                length = node.end_lineno - node.lineno + 1
                body = "\n".join(lines[node.lineno - 1 : node.end_lineno]).lower()
                if length > MAX_FUNCTION_LINES and HOT_LOOP_MARK not in body:
                    too_long.append(f"{name}:{node.lineno} {node.name}() {length} lines")
    assert not too_long, "\n".join(too_long)


#: Warnings left out: the CPython calling conventions pass `self` to every module function, and module
#: and type definitions leave the later members of CPython's structs to their zero defaults.
_C_QUIET = ("-Wno-unused-parameter", "-Wno-missing-field-initializers")


def test_the_c_code_compiles_without_warnings(tmp_path: Path) -> None:
    """Every compiled module pyproject builds compiles with -Wall -Wextra -Werror (a warning there found
    memchr's arguments evaluated in an unspecified order, reading one byte past a line)."""
    cc = shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0])
    if cc is None:
        pytest.skip("no C compiler: the compiled modules are not built here")
    with open(ROOT / "pyproject.toml", "rb") as f:
        modules = tomllib.load(f)["tool"]["setuptools"]["ext-modules"]
    include = sysconfig.get_paths()["include"]
    for m in modules:
        for src in m["sources"]:
            proc = _run(cc, "-Wall", "-Wextra", "-Werror", *_C_QUIET, "-O2", "-fPIC", "-shared", f"-I{include}",
                        src, "-o", tmp_path / "out.so")  # fmt: skip
            assert proc.returncode == 0, f"{src}:\n{proc.stderr}"
