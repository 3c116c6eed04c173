"""The project's compiled fast paths: the one registry of them, the one rule loading them, the one setting
turning them off, and what each load gave (a leaf: imports nothing of ours).

Each compiled module (:data:`MODULES`) is the same work as a Python version kept beside it, which tests
hold equal to it. They are built at install when a C compiler and the Python headers are there
(pyproject's optional ``ext-modules``, the same five names: tests/test_static.py); without them, or with
:data:`PURE_ENV` set, every caller takes the Python path. Which of them run is visible:
``triton-tap --version``, the proxy's start log line and its captures' ``capture_start.options.compiled``
all say it with :func:`active`.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: Set (to anything but "" or "0") to run without any compiled module: the Python paths alone.
PURE_ENV = "TRITON_TAP_PURE"

#: Every compiled module, by import name, with the work it does (its Python version is named beside
#: its caller, and docs/testing.md#the-proxys-compiled-pieces-and-their-python-versions).
MODULES: dict[str, str] = {
    "proxy.wire._cut": "a read's plain frames and whole gRPC messages (proxy/wire/frames.py, messages.py)",
    "proxy.triton._scan": "the labels cache's field scanner and lookup (proxy/triton/labels.py)",
    "replay.capture._lines": "a capture line's bytes straight to its record (replay/capture/lines.py)",
    "replay.capture._encode": "the writer's sparse dict of a record (replay/capture/schema.py)",
    "replay._frozen": "the relay's records filled by slot (replay/frozen.py)",
}

#: What :func:`active` says of a module that runs (otherwise it says why its Python path runs instead).
COMPILED = "compiled"

#: name -> :data:`COMPILED`, or why the Python path runs: what the first :func:`load_compiled` of it gave.
_loaded: dict[str, str] = {}


def pure() -> bool:
    """:data:`PURE_ENV` is set: compiled modules are not used."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def load_compiled(name: str) -> ModuleType | None:
    """The compiled module ``name`` (one of :data:`MODULES`), or None when it was not built, does not load,
    or :data:`PURE_ENV` is set; what the first load of ``name`` gave is kept for :func:`active`."""
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
    """Every registered module in :data:`MODULES` order: :data:`COMPILED`, or why its Python path runs
    (``TRITON_TAP_PURE=1``, ``not built``, ``does not load: ...``).

    A module its caller loaded says what that load gave; one not loaded yet is loaded here by the same
    rule, so the answer is what its caller gets.
    """
    for name in MODULES:
        if name not in _loaded:
            load_compiled(name)
    return {name: _loaded[name] for name in MODULES}
