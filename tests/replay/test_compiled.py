"""replay.compiled: the one registry of compiled modules, and what each load gave (compiled, or why the
Python version runs instead)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
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


# -- the modules compiled from their own source (SOURCES) ------------------------------------------------


def _needs_a_build() -> None:
    if not any(compiled.built(name) for name in compiled.SOURCES):
        pytest.skip("the relay's modules are not compiled here (no C compiler at install)")


def test_a_build_of_other_sources_is_stale(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The manifest's sha256 of a source differs from the file's (the .py was edited after the build), or
    there is no manifest: the build is not used, and the reason names the module or the file."""
    _needs_a_build()
    monkeypatch.delenv(compiled.PURE_ENV, raising=False)
    manifest = tmp_path / "compiled-build.json"
    monkeypatch.setattr(compiled, "BUILD_MANIFEST", manifest)
    assert compiled.sources_reason() == "stale build: no readable compiled-build.json (pip install -e . builds again)"
    hashes = {name: hashlib.sha256(compiled.source_path(name).read_bytes()).hexdigest() for name in compiled.SOURCES}
    manifest.write_text(json.dumps({"sources": hashes}))
    assert compiled.sources_reason() is None
    manifest.write_text(json.dumps({"sources": {**hashes, "proxy.wire.frames": "0" * 64}}))
    assert compiled.sources_reason() == (
        "stale build: proxy.wire.frames changed after it was compiled (pip install -e . builds again)"
    )
    manifest.write_text(json.dumps({"sources": hashes}))
    monkeypatch.setattr(compiled, "LIBRARY", "triton_tap_no_such_library")
    assert compiled.sources_reason() == (
        "stale build: triton_tap_no_such_library, which holds the compiled code, is missing"
        " (pip install -e . builds again)"
    )
    manifest.write_text(json.dumps({"sources": ["a list"]}))
    assert compiled.sources_reason() == "stale build: no readable compiled-build.json (pip install -e . builds again)"
    monkeypatch.setenv(compiled.PURE_ENV, "1")
    assert compiled.sources_reason() == "TRITON_TAP_PURE=1"


def test_the_source_finder_finds_the_py_file_of_a_compiled_module_only() -> None:
    finder = compiled._SourceFinder()
    spec = finder.find_spec("proxy.wire.frames", None)
    assert spec is not None and spec.origin == str(compiled.source_path("proxy.wire.frames"))
    assert finder.find_spec("proxy.wire.headers", None) is None


def test_load_source_runs_the_file_uncompiled_beside_the_module() -> None:
    from proxy.triton import labels

    source = compiled.load_source("proxy.triton.labels", "_labels_again")
    assert not compiled.is_compiled(source) and source is not labels and "_labels_again" not in sys.modules
    assert source.label_key(b"\x08\x01", labels.RAW_OUTPUT_TAG) == labels.label_key(b"\x08\x01", labels.RAW_OUTPUT_TAG)


_TURN_OFF = """
from replay import compiled
compiled.turn_off()
import proxy.wire.frames as frames
print(frames.__file__, compiled.active()["proxy.wire.frames"], compiled.is_compiled(frames))
try:
    compiled.turn_off()
except RuntimeError as e:
    print(e)
"""


def test_turn_off_runs_the_sources_from_then_on_and_refuses_once_one_is_loaded() -> None:
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    proc = subprocess.run([sys.executable, "-c", _TURN_OFF], env=env, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert first == f"{compiled.source_path('proxy.wire.frames')} TRITON_TAP_PURE=1 False"
    assert second.startswith("turn_off() after proxy.") and second.endswith(" was imported: it would stay as it is")
