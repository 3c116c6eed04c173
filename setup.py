"""The build's compiled modules (the rest of the build is pyproject.toml's).

Both kinds are optional: without a C compiler (or with ``TRITON_TAP_NO_COMPILE=1``) the install still
succeeds and the same Python runs uncompiled (replay/compiled.py says which runs, and why).

* The modules of ``replay.compiled.SOURCES``, compiled from their own ``.py`` files by mypyc. mypyc
  type-checks them first, with every third-party module as Any (``--no-site-packages``, a cache of its
  own): what the compiled code checks at run time must not depend on what the build environment
  happened to hold, while ``mypy --strict`` in CI checks them against the dependencies' types. Once every one of them is
  built, a manifest of the sources' sha256 is written beside replay/compiled.py, named for this
  interpreter's ABI: a build older than its sources, or one that failed half way, is not used.
* The hand-written C modules of ``replay.compiled.MODULES``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
REGISTRY = ROOT / "replay" / "compiled.py"
#: The library holding the code of every mypyc module (each module's own extension is a shim importing it).
GROUP = "triton_tap"


def _registry(name: str) -> dict[str, str]:
    """A dict literal of replay/compiled.py, read without importing the package (its deps are not here)."""
    for node in ast.parse(REGISTRY.read_text()).body:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
            and node.value
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, dict)
            return value
    raise SystemExit(f"setup.py: no {name} in {REGISTRY}")


def manifest_name() -> str:
    """replay/compiled.py's ``BUILD_MANIFEST`` name for this interpreter (one per ABI: builds for several
    Pythons share a checkout)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return "compiled-build" + suffix.rsplit(".", 1)[0] + ".json"


def _c_modules() -> list[Extension]:
    return [Extension(name, sources=[name.replace(".", "/") + ".c"], optional=True) for name in _registry("MODULES")]


#: name -> sha256 of the source mypyc compiled (filled by _mypyc_modules; written by BuildExt once built).
_COMPILED: dict[str, str] = {}


def _mypyc_modules() -> list[Extension]:
    names = list(_registry("SOURCES"))
    if os.environ.get("TRITON_TAP_NO_COMPILE", "") not in ("", "0"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("setup.py: mypyc is not installed: the relay's modules run uncompiled", file=sys.stderr)
        return []
    paths = [name.replace(".", "/") + ".py" for name in names]
    _COMPILED.update(
        {name: hashlib.sha256((ROOT / path).read_bytes()).hexdigest() for name, path in zip(names, paths, strict=True)}
    )
    try:
        # Not the project's [tool.mypy] (strict: with third-party modules as Any it refuses what CI's mypy
        # passes), and a cache of the build's own (the tree's .mypy_cache holds the dependencies' types).
        flags = ["--config-file", os.devnull, "--no-site-packages", "--ignore-missing-imports",
                 "--cache-dir", str(ROOT / "build" / "mypyc-cache")]  # fmt: skip
        extensions = mypycify([*flags, *paths], opt_level="3", group_name=GROUP)
    except SystemExit as e:  # mypyc reports type errors and exits
        print(f"setup.py: mypyc could not compile the relay's modules ({e}): they run uncompiled", file=sys.stderr)
        _COMPILED.clear()
        return []
    for ext in extensions:
        ext.optional = True  # no C compiler: the same .py files run
    return extensions


class BuildExt(build_ext):
    """build_ext, then the manifest: only when the library and every module's shim were built (an
    optional extension that fails leaves the build going, and an older build's file where it was)."""

    def run(self) -> None:
        self.failed: set[str] = set()
        target = Path(self.get_ext_fullpath("replay.compiled")).with_name(manifest_name())
        target.unlink(missing_ok=True)  # a failed build must not keep an older build's word
        super().run()
        wanted = [GROUP + "__mypyc", *_COMPILED]
        built = all(Path(self.get_ext_fullpath(name)).exists() for name in wanted)
        if _COMPILED and built and not self.failed & set(wanted):
            target.parent.mkdir(parents=True, exist_ok=True)
            from mypy.version import __version__ as mypy_version

            target.write_text(json.dumps({"compiler": f"mypyc {mypy_version}", "sources": _COMPILED}, indent=1) + "\n")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except BaseException:
            self.failed.add(ext.name)
            raise


setup(ext_modules=[*_mypyc_modules(), *_c_modules()], cmdclass={"build_ext": BuildExt})
