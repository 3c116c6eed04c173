"""The project's compiled fast paths: the one registry of them, the one rule loading them, the one setting
turning them off, and what each load gave (a leaf: imports nothing of ours).

Two kinds, both built at install when a C compiler is there (setup.py) and both optional: without a
compiler, or with :data:`PURE_ENV` set, the Python runs as it is.

* :data:`SOURCES`: modules compiled from their own ``.py`` file by mypyc. There is no second version
  to keep equal: the file is the one source, run compiled or not. Tests run the compiled module and the
  same file uncompiled on the same inputs (:func:`load_source`; tests/proxy/wire/test_wire_compiled.py,
  tests/proxy/triton/test_labels_compiled.py, tests/replay/capture/test_capture_compiled.py), since a
  compiler can change what code means (mypyc boxes a ``tuple[...]``-typed value anew on each use, for one).
* :data:`MODULES`: hand-written C modules, each the same work as a Python version beside its caller, which
  tests hold equal to it; their callers load them with :func:`load_compiled`.

Which of them run is visible: ``triton-tap --version``, the proxy's start log line and its captures'
``capture_start.options.compiled`` all say it with :func:`active`. A build older than its sources (a
``.py`` edited after ``pip install -e .``), or one that failed half way, is not used: the sources run,
and :func:`active` says why. (A commit from before this rule, checked out over a build, cannot know
it: remove the builds first, ``git clean -fdX``, or ``find . -name '*.so' -delete``.)
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

#: Set (to anything but "" or "0") to run without any compiled module: the Python alone.
PURE_ENV = "TRITON_TAP_PURE"

#: The modules setup.py compiles from their own source (mypyc), with the work that makes them hot: the
#: relay's per-read path, from a read's bytes to its writes and records, and the capture decoder's fast
#: path (nearly every line a reader reads).
SOURCES: dict[str, str] = {
    "proxy.relay.core": "the HTTP/2 relay's protocol core: a read in, writes and records out",
    "proxy.relay.call": "one RPC as the relay follows it",
    "proxy.relay.contract": "what the core hands the shell",
    "proxy.relay.recording": "a message's record: labels, payload modes, redaction",
    "proxy.relay.records": "the relay's records, built at the cost of plain objects",
    "proxy.wire.frames": "a read cut into HTTP/2 frames, header blocks decoded",
    "proxy.wire.messages": "gRPC messages cut out of a stream's DATA",
    "proxy.triton.labels": "a message's labels: the field scanner and the labels cache",
    "proxy.triton.pieces": "a long message's head read across its pieces",
    "proxy.triton.inflight": "which request ids of a call wait for their final response",
    "replay.capture.shapes": "the decoder's fast path: a line of a known shape to its record",
    "replay.capture.sparse": "the writer's fast path: a record to its line (its sparse dict, sticky fields, bytes)",
}

#: Hand-written C modules, by import name, with the work each does (its Python version is named beside
#: its caller, and docs/testing.md#the-proxys-compiled-pieces-and-their-python-versions).
MODULES: dict[str, str] = {
    "replay._frozen": "the relay's records filled by slot (replay/frozen.py)",
}

#: What :func:`active` says of a module that runs compiled (otherwise it says why its Python runs instead).
COMPILED = "compiled"

#: Written by setup.py beside this file once it has built every module of :data:`SOURCES` for this
#: interpreter's ABI (one file per ABI: builds for several Pythons share a checkout): the compiler and
#: each source's sha256, so that a build older than its sources, or one that failed half way, is
#: recognised (and not used).
BUILD_MANIFEST = Path(__file__).with_name(
    "compiled-build" + importlib.machinery.EXTENSION_SUFFIXES[0].rsplit(".", 1)[0] + ".json"
)

#: The library holding the code of every module of :data:`SOURCES` (each module's extension is a shim
#: importing it; setup.py's ``GROUP``).
LIBRARY = "triton_tap__mypyc"

#: The root the dotted names of :data:`SOURCES` are paths under (this file is replay/compiled.py).
_ROOT = Path(__file__).resolve().parent.parent

#: name -> :data:`COMPILED`, or why the Python path runs: what the first :func:`load_compiled` of it gave.
_loaded: dict[str, str] = {}


def pure() -> bool:
    """:data:`PURE_ENV` is set: compiled modules are not used."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def source_path(name: str) -> Path:
    """The ``.py`` file of a module of :data:`SOURCES` (or any module of ours) by its dotted name."""
    return _ROOT.joinpath(*name.split(".")).with_suffix(".py")


def built(name: str) -> bool:
    """A compiled build of ``name`` lies beside its source."""
    src = source_path(name)
    return any(src.with_name(src.stem + suffix).exists() for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def sources_reason() -> str | None:
    """Why :data:`SOURCES` run as Python (None: compiled): :data:`PURE_ENV`, no build, or a build that
    is not of these sources (its manifest's sha256 of a source differs, or it has no manifest)."""
    if pure():
        return f"{PURE_ENV}={os.environ[PURE_ENV]}"
    if not any(built(name) for name in SOURCES):
        return "not built"
    try:
        hashes = json.loads(BUILD_MANIFEST.read_text())["sources"]
        if not isinstance(hashes, dict):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        return f"stale build: no readable {BUILD_MANIFEST.name} (pip install -e . builds again)"
    for name in SOURCES:
        try:
            now = hashlib.sha256(source_path(name).read_bytes()).hexdigest()
        except OSError as e:  # an install without the .py files: what ran would be unknown
            return f"stale build: {name}'s source cannot be read ({e.strerror})"
        if hashes.get(name) != now:
            return f"stale build: {name} changed after it was compiled (pip install -e . builds again)"
    if importlib.util.find_spec(LIBRARY) is None:
        return f"stale build: {LIBRARY}, which holds the compiled code, is missing (pip install -e . builds again)"
    return None


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the ``.py`` file of a module of :data:`SOURCES`, ahead of the compiled build beside it."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in SOURCES:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname))


#: Decided once, at the first import of this module (the packages' ``__init__`` import it before any
#: compiled module can be): all of :data:`SOURCES` compiled or none, since compiled modules call each
#: other's code directly and a mix would hold two versions of one class.
_SOURCES_REASON = sources_reason()
_FINDER = _SourceFinder()
if _SOURCES_REASON is not None and _SOURCES_REASON != "not built":
    sys.meta_path.insert(0, _FINDER)


def turn_off() -> None:
    """From now on, in this process and the processes it starts, run no compiled module: sets
    :data:`PURE_ENV`. Only before any of them is imported (a module loaded stays what it is)."""
    global _SOURCES_REASON
    loaded = [name for name in SOURCES if name in sys.modules]
    if loaded:
        raise RuntimeError(f"turn_off() after {loaded[0]} was imported: it would stay as it is")
    os.environ[PURE_ENV] = "1"
    _SOURCES_REASON = sources_reason()
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def load_source(name: str, as_name: str) -> ModuleType:
    """A fresh module ``as_name`` run from ``name``'s ``.py`` file, uncompiled whatever is built: the
    reference a compiled module of :data:`SOURCES` is tested against. Not put in ``sys.modules``."""
    spec = importlib.util.spec_from_file_location(as_name, source_path(name))
    if spec is None or spec.loader is None:
        raise ImportError(f"no source for {name}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def is_compiled(module: ModuleType) -> bool:
    """``module`` was loaded from a compiled build (not from its ``.py`` file)."""
    spec = module.__spec__
    return spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)


def load_compiled(name: str) -> ModuleType | None:
    """The hand-written C module ``name`` (one of :data:`MODULES`), or None when it was not built, does
    not load, or :data:`PURE_ENV` is set; what the first load of ``name`` gave is kept for :func:`active`."""
    if name not in MODULES:
        raise KeyError(f"{name} is not a registered compiled module (replay.compiled.MODULES)")
    module: ModuleType | None = None
    if pure():
        why = f"{PURE_ENV}={os.environ[PURE_ENV]}"
    else:
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            if isinstance(e, ModuleNotFoundError) and e.name == name:
                why = "not built"  # no C compiler at install: the Python path alone
            else:  # built, but this interpreter cannot load it (a stale or foreign build)
                why = f"does not load: {e}"
        else:
            why = COMPILED
    # The first load is the one its callers hold (they load at import); a later one (a test flipping
    # the setting) does not change what runs.
    _loaded.setdefault(name, why)
    return module


def active() -> dict[str, str]:
    """Every module of :data:`SOURCES` and :data:`MODULES`, in that order: :data:`COMPILED`, or why its
    Python runs (``TRITON_TAP_PURE=1``, ``not built``, ``stale build: ...``, ``does not load: ...``).

    A C module its caller loaded says what that load gave; one not loaded yet is loaded here by the same
    rule, so the answer is what its caller gets. A module of :data:`SOURCES` says what was imported.
    """
    out: dict[str, str] = {}
    for name in SOURCES:
        if _SOURCES_REASON is not None:
            out[name] = _SOURCES_REASON
        else:
            out[name] = COMPILED if is_compiled(importlib.import_module(name)) else "not built"
    for name in MODULES:
        if name not in _loaded:
            load_compiled(name)
        out[name] = _loaded[name]
    return out
