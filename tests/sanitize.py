"""The sanitizer tier (opt-in): the compiled modules built with AddressSanitizer and UBSan, then tested.

    python -m tests.sanitize                      # build, differential tests, 20 s of fuzz per parser
    python -m tests.sanitize --fuzz-seconds 120   # a longer fuzz
    python -m tests.sanitize --keep -- -k frozen  # keep the build tree; more pytest arguments after --

Why: the hand-written C modules (replay/compiled.py's MODULES) read and fill memory by offset, lend
references and call back into Python, and the C mypyc makes of the relay's modules (SOURCES) reads the
bytes of every frame a peer sends. A mistake there can give the right answer and still read past a
buffer or use freed memory, which the ordinary tests only see when it happens to crash. Here every read
and write of those modules is checked. Not part of the README's test command: it compiles and takes a
few minutes (docs/testing.md#the-sanitizer-tier).

What it does, in a temporary copy of this tree (the tree itself and its built modules are left alone):

1. builds every compiled module in place (setup.py) with ``-fsanitize=address,undefined
   -fno-omit-frame-pointer`` (``-fno-sanitize-recover=undefined``: undefined behaviour stops the run as
   a memory error does; with GCC, ``-fno-sanitize=shift-base``: :data:`GCC_ONLY`) and checks that all
   were built with ASan (setup.py marks them optional: a failed
   build would leave the Python running and prove nothing);
2. runs pytest there on :data:`DIFFERENTIAL`, the tests holding each module equal to its Python (its
   own source uncompiled, or the C module's Python version, and the regression tests of the hazards
   found in them), and on tests/test_compiled_fuzz.py, a fuzz
   of the three parsers of untrusted bytes, with

   - ``LD_PRELOAD`` = the compiler's libasan: the interpreter is not built with ASan, and the runtime must
     be loaded before anything else;
   - ``PYTHONMALLOC=malloc``: objects come from malloc, where ASan watches them (pymalloc's arenas would
     hide a use after free inside them);
   - ``ASAN_OPTIONS=detect_leaks=0``: what the interpreter leaves allocated at exit is not ours to report;
   - ``UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1``;
   - pytest's ``--capture=sys``: a report reaches the terminal (fd 2 is not captured).

The exit status is pytest's (or 2 when the build is not what it must be). Needs gcc with libasan and
libubsan (Debian: ``gcc``, which brings ``libasan8`` and ``libubsan1``), or a ``CC`` that prints where
its libasan.so is with ``-print-file-name=libasan.so``.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from replay.compiled import MODULES, PURE_ENV, SOURCES
from tests.support.paths import ROOT

#: Seconds of fuzzing per parser (tests/test_compiled_fuzz.py): unset or empty, the fuzz is skipped.
FUZZ_ENV = "TRITON_TAP_FUZZ_SECONDS"

#: The tests holding each compiled module equal to its Python version (docs/testing.md's table), and
#: the regression tests of the hazards found in them, which sit beside those.
DIFFERENTIAL = (
    "tests/proxy/wire/test_wire_compiled.py",
    "tests/proxy/triton/test_labels_compiled.py",
    "tests/proxy/relay/test_core_equivalence.py",
    "tests/proxy/triton/test_label_key.py",
    "tests/replay/capture/test_capture_compiled.py",
    "tests/replay/capture/test_encode.py",
    "tests/replay/test_frozen.py",
)
FUZZ = "tests/test_compiled_fuzz.py"

SANITIZE = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined", "-g")
#: Added for GCC. mypyc's runtime (lib-rt/CPy.h ``IsShortLshiftOverflow``) detects an overflowing ``<<``
#: of a short int by shifting the signed value and shifting it back, which C99 leaves undefined but GCC
#: defines ("does not use the latitude given in C99 and C11 only to treat certain aspects of signed '<<'
#: as undefined", its manual's Integers implementation) while UBSan still reports it: any varint of 9 or
#: more bytes in the labels scanner stopped the run there. A shift count out of range stays checked.
GCC_ONLY = ("-fno-sanitize=shift-base",)
#: pytest's option for the tier: a report is written to fd 2 just before the process stops, and pytest's
#: default capture (of fd 2, into a file it prints at the test's end) would lose it with the process.
PYTEST_CAPTURE = "--capture=sys"
#: Build products and caches not copied (the copy builds its own).
_NOT_COPIED = shutil.ignore_patterns(".git", "build", "dist", "*.so", "__pycache__", ".venv*", ".hypothesis",
                                     ".mypy_cache", ".ruff_cache", "*.egg-info", "captures")  # fmt: skip


class SetupError(Exception):
    """The sanitized build cannot be made or is not what it must be (one line, for the user)."""


def compiler() -> str:
    """The C compiler setuptools uses (``CC``, else the interpreter's), to ask where its libasan is."""
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        raise SetupError(f"no C compiler {cc!r}: the sanitizer tier builds the compiled modules")
    return cc


def libasan(cc: str) -> str:
    """The ASan runtime ``cc`` links against, to preload into the (non-ASan) interpreter."""
    out = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True, check=False)
    path = out.stdout.strip()
    if out.returncode != 0 or not os.path.isabs(path) or not os.path.exists(path):
        raise SetupError(f"{cc} has no libasan.so (it printed {path!r}): install its AddressSanitizer runtime")
    return path


def is_gcc(cc: str) -> bool:
    """Whether ``cc`` is GCC (clang defines ``__GNUC__`` too, and ``__clang__``)."""
    out = subprocess.run([cc, "-dM", "-E", "-x", "c", os.devnull], capture_output=True, text=True, check=False)
    macros = {line.split()[1] for line in out.stdout.splitlines() if line.startswith("#define ")}
    return out.returncode == 0 and "__GNUC__" in macros and "__clang__" not in macros


def flags(cc: str) -> tuple[str, ...]:
    """The sanitizer flags for ``cc``."""
    return SANITIZE + GCC_ONLY if is_gcc(cc) else SANITIZE


def module_path(tree: Path, name: str) -> Path:
    """Where ``build_ext --inplace`` puts compiled module ``name`` in ``tree``."""
    *package, module = name.split(".")
    return tree.joinpath(*package, module + importlib.machinery.EXTENSION_SUFFIXES[0])


def build(tree: Path, cflags: tuple[str, ...]) -> None:
    """The compiled modules of ``tree``, built in place with ``cflags``; SetupError unless all are."""
    env = dict(os.environ)
    env["CFLAGS"] = " ".join([env.get("CFLAGS", ""), *cflags, "-O1"]).strip()
    env["LDFLAGS"] = " ".join([env.get("LDFLAGS", ""), "-fsanitize=address,undefined"]).strip()
    proc = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace",
                           "--build-temp", str(tree / "build" / "temp")],
                          cwd=tree, env=env, capture_output=True, text=True, check=False)  # fmt: skip
    # mypyc's modules are shims of one library holding their code (setup.py's group)
    products = {**{name: module_path(tree, name) for name in MODULES}, "SOURCES": module_path(tree, "triton_tap__mypyc")}
    missing = [name for name, path in products.items() if not path.exists()]
    missing += [name for name in SOURCES if not module_path(tree, name).exists()]
    plain = [name for name, path in products.items() if path.exists() and b"__asan_" not in path.read_bytes()]
    if proc.returncode != 0 or missing or plain:
        raise SetupError(f"the sanitized build failed (missing {missing}, without ASan {plain}):\n{proc.stderr[-4000:]}")


def test_env(tree: Path, asan: str, fuzz_seconds: float) -> dict[str, str]:
    """The environment the tests run in: this tree's sanitized modules, the ASan runtime preloaded."""
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH", "")])])
    env["LD_PRELOAD"] = " ".join([asan, *filter(None, [env.get("LD_PRELOAD", "")])])
    env["PYTHONMALLOC"] = "malloc"
    env["ASAN_OPTIONS"] = ":".join(filter(None, ["detect_leaks=0", env.get("ASAN_OPTIONS", "")]))
    env["UBSAN_OPTIONS"] = ":".join(filter(None, ["print_stacktrace=1:halt_on_error=1", env.get("UBSAN_OPTIONS", "")]))
    env[FUZZ_ENV] = f"{fuzz_seconds:g}"
    return env


#: Run in the test environment first: every module compiled, and loaded from the sanitized tree.
_PREFLIGHT = """
import importlib, sys
from replay.compiled import MODULES, SOURCES, active
tree = sys.argv[1]
wrong = {n: why for n, why in active().items() if why != "compiled"}
wrong.update({n: importlib.import_module(n).__file__ for n in [*SOURCES, *MODULES]
              if not importlib.import_module(n).__file__.startswith(tree)})
print(wrong or "ok")
"""


def run(fuzz_seconds: float, keep: bool, pytest_args: list[str]) -> int:
    started = time.monotonic()
    cc = compiler()
    asan = libasan(cc)
    tree = Path(tempfile.mkdtemp(prefix="triton-tap-sanitize-"))
    try:
        shutil.copytree(ROOT, tree, ignore=_NOT_COPIED, dirs_exist_ok=True)
        cflags = flags(cc)
        build(tree, cflags)
        built = time.monotonic()
        env = test_env(tree, asan, fuzz_seconds)
        check = subprocess.run([sys.executable, "-c", _PREFLIGHT, str(tree)], cwd=tree, env=env, capture_output=True,
                               text=True, check=False)  # fmt: skip
        if check.stdout.strip() != "ok":
            raise SetupError(f"the sanitized modules do not load: {check.stdout.strip()} {check.stderr[-2000:]}")
        print(f"sanitize: built the {len(SOURCES) + len(MODULES)} modules with {' '.join(cflags)} in {built - started:.0f} s "
              f"({cc}, LD_PRELOAD={asan}); testing in {tree}", flush=True)  # fmt: skip
        code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rP", PYTEST_CAPTURE, *DIFFERENTIAL, FUZZ,
                               *pytest_args],
                              cwd=tree, env=env, check=False).returncode  # fmt: skip
        verdict = "passed" if code == 0 else f"FAILED (pytest exit {code})"
        print(f"sanitize: {verdict} in {time.monotonic() - started:.0f} s", flush=True)
        return code
    finally:
        if keep:
            print(f"sanitize: kept {tree}")
        else:
            shutil.rmtree(tree, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sanitize", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--fuzz-seconds", type=float, default=20.0, help="fuzz per parser (default 20)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary build tree")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    try:
        return run(args.fuzz_seconds, args.keep, args.pytest_args)
    except SetupError as e:
        print(f"sanitize: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
