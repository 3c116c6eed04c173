"""The build's compiled modules (the rest of the build is pyproject.toml's).

Both kinds are optional: without a C compiler (or with ``TRITON_TAP_NO_COMPILE=1``) the install still
succeeds and the same Python runs uncompiled (replay/compiled.py says which runs, and why).

* The modules of ``replay.compiled.SOURCES``, compiled from their own ``.py`` files by mypyc. mypyc
  type-checks them first; the dependencies' types are not needed for that (a build environment holds only
  the build requirements), so missing imports are Any here while ``mypy --strict`` in CI checks them whole.
  A manifest of the sources' sha256 is written beside replay/compiled.py: a build older than its
  sources is not used.
* The hand-written C modules of ``replay.compiled.MODULES``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent
REGISTRY = ROOT / "replay" / "compiled.py"


def _registry(name: str) -> dict[str, str]:
    """A dict literal of replay/compiled.py, read without importing the package (its deps are not here)."""
    for node in ast.parse(REGISTRY.read_text()).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name and node.value:
            value = ast.literal_eval(node.value)
            assert isinstance(value, dict)
            return value
    raise SystemExit(f"setup.py: no {name} in {REGISTRY}")


def _c_modules() -> list[Extension]:
    slots = "replay/_slots.h"
    return [
        Extension(name, sources=[name.replace(".", "/") + ".c"], depends=[slots], optional=True)
        for name in _registry("MODULES")
    ]


def _mypyc_modules() -> list[Extension]:
    names = list(_registry("SOURCES"))
    manifest = ROOT / "replay" / "compiled-build.json"
    manifest.unlink(missing_ok=True)
    if os.environ.get("TRITON_TAP_NO_COMPILE", "") not in ("", "0"):
        return []
    try:
        from mypy.version import __version__ as mypy_version
        from mypyc.build import mypycify
    except ImportError:
        print("setup.py: mypyc is not installed: the relay's modules run uncompiled", file=sys.stderr)
        return []
    paths = [name.replace(".", "/") + ".py" for name in names]
    # The project's [tool.mypy] (strict), but dependencies the build environment lacks are Any.
    try:
        extensions = mypycify(["--ignore-missing-imports", *paths], opt_level="3", group_name="triton_tap")
    except SystemExit as e:  # mypyc reports type errors and exits
        print(f"setup.py: mypyc could not compile the relay's modules ({e}): they run uncompiled", file=sys.stderr)
        return []
    for ext in extensions:
        ext.optional = True  # no C compiler: the same .py files run
    sources = {name: hashlib.sha256((ROOT / path).read_bytes()).hexdigest() for name, path in zip(names, paths, strict=True)}
    manifest.write_text(json.dumps({"compiler": f"mypyc {mypy_version}", "sources": sources}, indent=1) + "\n")
    return extensions


setup(ext_modules=[*_mypyc_modules(), *_c_modules()])
