"""replay.compiled: the one registry of compiled modules, and what each load gave (compiled, or why the
Python version runs instead)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from replay import compiled


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry state of its own: what this process's modules loaded stays as it was."""
    monkeypatch.setattr(compiled, "_loaded", {})
    monkeypatch.delenv(compiled.PURE_ENV, raising=False)


def test_only_registered_modules_load(fresh: None) -> None:
    with pytest.raises(KeyError, match="not a registered compiled module"):
        compiled.load_compiled("proxy.wire._elsewhere")


def test_a_module_not_built_says_so(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(compiled.MODULES, "replay._never_built", "a module no install builds")
    assert compiled.load_compiled("replay._never_built") is None
    assert compiled.active()["replay._never_built"] == "not built"


def test_a_module_that_does_not_load_says_why(fresh: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A build that is there but fails to import (a stale or foreign build): its own error, not "not built"."""
    (tmp_path / "tt_broken_build.py").write_text("raise ImportError('undefined symbol: PyFoo')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(compiled.MODULES, "tt_broken_build", "a build that does not load")
    assert compiled.load_compiled("tt_broken_build") is None
    assert compiled.active()["tt_broken_build"] == "does not load: undefined symbol: PyFoo"
    sys.modules.pop("tt_broken_build", None)


def test_the_first_load_is_what_is_reported(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Callers load at import and keep what they got: a later load under another setting changes nothing
    that runs, so it changes nothing reported either."""
    monkeypatch.setenv(compiled.PURE_ENV, "1")
    assert compiled.load_compiled("replay._frozen") is None
    monkeypatch.setenv(compiled.PURE_ENV, "0")
    compiled.load_compiled("replay._frozen")
    assert compiled.active()["replay._frozen"] == "TRITON_TAP_PURE=1"


def test_active_names_every_module_in_order(fresh: None) -> None:
    assert list(compiled.active()) == [*compiled.SOURCES, *compiled.MODULES]
