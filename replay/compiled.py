"""Loading the project's compiled fast paths: one rule, one setting (a leaf: imports nothing of ours).

Each compiled module (``replay/capture/_lines.c``, ``replay/_frozen.c``, ``proxy/triton/_scan.c``,
``proxy/wire/_cut.c``) is the same work as a Python version kept beside it, which tests hold equal to
it. They are built at install when a C compiler and the Python headers are there (pyproject: optional
extension modules); without them, or with :data:`PURE_ENV` set, every caller takes the Python path.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: Set (to anything but "" or "0") to run without any compiled module: the Python paths alone.
PURE_ENV = "TRITON_TAP_PURE"


def pure() -> bool:
    """:data:`PURE_ENV` is set: compiled modules are not used."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def load_compiled(name: str) -> ModuleType | None:
    """The compiled module ``name``, or None when it was not built or :data:`PURE_ENV` is set."""
    if pure():
        return None
    try:
        return importlib.import_module(name)
    except ImportError:  # not built (no C compiler at install): the Python path alone
        return None
