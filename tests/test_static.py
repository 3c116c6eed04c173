"""House rules that CI enforces: ruff, mypy --strict, the import contracts, no import cycles, no private names
across modules, declared = imported, long modules and functions named with their reason, C without warnings."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
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


# -- size: a long module or function is fine when it is one concern; a reader sees here why -------------

#: Past these a module or function is named below with its reason: a split follows the seams of what the
#: code does, never a line count, and a long piece that is one thing says so here.
MODULE_LINES = 500
FUNCTION_LINES = 80

#: Modules that may be long, and why each is one piece. A path may name a module still to come.
LONG_MODULES = {
    "proxy/relay/core.py": "the relay's sans-IO protocol core: one state machine over both sides of a "
    "connection (bytes in; bytes out, records and commands), whose transitions are read together",
    "proxy/relay/http1.py": "the relay's HTTP/1.1 protocol core, as core.py is for HTTP/2: one state machine over "
    "both sides (an h11 parser per side), the call's lifecycle and its records, read together",
    "proxy/ops/server.py": "the recorder's process: its configuration, then one ordered start (check, bind both "
    "ports, open the capture, relays, admin, upkeep) that a failure at any step undoes, and the stop in reverse",
    "replay/machine/tracker.py": "the tracker: every record kind of both protocols folded into calls and requests "
    "in capture order, one pass over one state (the transitions themselves are replay/machine/table.py)",
    "proxy/capture/writer.py": "the capture writer: the queue, the batch hand-off to its thread, rotation, "
    "reopen and the failure policy share one state and one order of events (what stands alone is apart: "
    "batch, sink, sidefile, budget, retention, gaps, nap)",
    "replay/capture/schema.py": "the format's encoding and decoding of every record kind, generated from the "
    "event dataclasses with the version policy and upgrades: one place where a line becomes a record and back",
    "replay/capture/events.py": "THE schema: every record kind of the capture, with each field's meaning "
    "(docs/capture-format.md is generated from it)",
}

#: Functions that may be long, and why each is one piece.
LONG_FUNCTIONS = {
    "proxy/cli.py:add_record_arguments": "the record command's flags: a flat list that reads as the command's "
    "manual, grouped as its --help shows them",
    "proxy/wire/frames.py:FrameReader.feed": "the frame reader's per-read loop, measured (bench micro: cut one "
    "DATA frame from a read): one function on local names, helpers only off the common path",
    "replay/capture/reader.py:CaptureReader._file": "the reader's per-line loop over one file: the sequence "
    "checks, the compiled line decoder's common case and the side-file lookups inline, measured",
}


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function of a module with its qualified name (``Class.method``, ``outer.inner``)."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield f"{prefix}{child.name}", child
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def test_long_modules_and_functions_are_named_with_their_reason() -> None:
    """A module of proxy/ or replay/ past ~500 lines, or a function past ~80, is in LONG_MODULES /
    LONG_FUNCTIONS with why it is one piece."""
    unnamed: list[str] = []
    for path in _package_files():
        text = path.read_text()
        name = str(path.relative_to(ROOT))
        if len(text.splitlines()) > MODULE_LINES and name not in LONG_MODULES:
            unnamed.append(f"{name}: {len(text.splitlines())} lines")
        for qualname, node in _functions(ast.parse(text)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > FUNCTION_LINES and f"{name}:{qualname}" not in LONG_FUNCTIONS:
                unnamed.append(f"{name}:{node.lineno} {qualname}() {length} lines")
    assert not unnamed, (
        "long and not named: if it is one concern, add it to LONG_MODULES / LONG_FUNCTIONS with why; "
        "if it holds several, split it where they part (not by line count):\n" + "\n".join(unnamed)
    )


def test_named_long_functions_exist() -> None:
    """Each LONG_FUNCTIONS entry names a function that exists (a renamed one takes its reason along)."""
    have = {f"{p.relative_to(ROOT)}:{q}" for p in _package_files() for q, _ in _functions(ast.parse(p.read_text()))}
    gone = [k for k in LONG_FUNCTIONS if k not in have]
    assert not gone, f"LONG_FUNCTIONS names functions that are not there: {gone}"


# -- imports: no cycles, no private names across modules -----------------------------------------------

#: Import cycles tolerated for now, by the package holding all of the cycle's modules, with why.
#: Packages whose import cycles are tolerated for now, each with the reason (none today: a cycle is a
#: knot to cut, not a rule to bend).
CYCLES_ALLOWED: dict[str, str] = {}


def _package_files() -> list[Path]:
    """The modules of proxy/ and replay/ (the lab's Triton models aside: they run inside tritonserver)."""
    files = sorted([*ROOT.glob("proxy/**/*.py"), *ROOT.glob("replay/**/*.py")])
    return [p for p in files if "models" not in p.relative_to(ROOT).parts]


def _module_names() -> dict[str, Path]:
    out = {}
    for path in _package_files():
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, str, int]]:
    """``(target, imported name, line)`` for each name ``name`` imports from the project, at any depth of
    the module (functions and ``if TYPE_CHECKING:`` blocks included); ``target`` is the module it comes
    from (a submodule imported by name is the target itself). Importing ``a.b.c`` also runs ``a`` and
    ``a.b``, which import their submodules by design: those implicit edges are not counted."""

    def ours(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = ours(alias.name)
                if target is not None:
                    yield target, alias.name.rpartition(".")[2], node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{up}.{base}" if base else up
            for alias in node.names:
                target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else ours(base)
                if target is not None:
                    yield target, alias.name, node.lineno


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def _import_graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: first line}, for proxy/ and replay/."""
    modules = _module_names()
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for name, path in modules.items():
        for target, _, line in _imports(name, path, modules):
            if target != name:
                graph[name].setdefault(target, line)
    return graph


def test_the_import_cycle_finder_finds_cycles() -> None:
    """The finder itself: a cycle through a TYPE_CHECKING import is one, a chain is not."""
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_cycles() -> None:
    """No two modules of proxy/ or replay/ import each other, directly or around a circle, counting imports
    inside functions and under ``if TYPE_CHECKING:`` (a type a module needs is a dependency too): a cycle
    says two modules are one concern split in two, or that one should be handed what it imports."""
    graph = _import_graph()
    cycles = _cycles(graph)
    allowed = [c for c in cycles if any(all(m.startswith(f"{pkg}.") for m in c) for pkg in CYCLES_ALLOWED)]
    shown = [
        " <-> ".join(c) + "\n" + "\n".join(f"    {a}:{line} imports {b}" for a in c for b, line in graph[a].items() if b in c)
        for c in cycles
        if c not in allowed
    ]
    assert not shown, "import cycles:\n" + "\n".join(shown)
    stale = [pkg for pkg in CYCLES_ALLOWED if not any(c[0].startswith(f"{pkg}.") for c in allowed)]
    assert not stale, f"no cycle left in {stale}: remove the entry from CYCLES_ALLOWED"


def test_no_private_names_imported_across_modules() -> None:
    """No module imports another's ``_private`` name: what other modules need is public where it is defined
    (or moves to where it belongs). The compiled modules (replay.compiled.MODULES) are private by
    name and loaded through replay.compiled; importing one by name is the one exception."""
    from replay.compiled import MODULES

    modules = _module_names()
    private = [
        f"{path.relative_to(ROOT)}:{line} imports {what} from {target}"
        for name, path in modules.items()
        for target, what, line in _imports(name, path, modules)
        if what.startswith("_") and not what.startswith("__") and target != name and target not in MODULES
    ]
    assert not private, "\n".join(private)


def test_the_compiled_registry_names_files_that_are_there() -> None:
    """replay.compiled's registry (what setup.py builds, and what --version, the start log and
    capture_start report) names a ``.py`` file for each module compiled from its source and a ``.c`` file
    for each hand-written one."""
    from replay.compiled import MODULES, SOURCES, source_path

    assert not [name for name in SOURCES if not source_path(name).exists()]
    assert not [name for name in MODULES if not (ROOT / (name.replace(".", "/") + ".c")).exists()]


def test_a_compiled_module_binds_one_exception_type_to_a_name() -> None:
    """In a module compiled from its source (replay.compiled.SOURCES), a name bound by ``except X as name``
    names one type in a function: mypyc gives the name the first clause's type, and a second clause
    catching another type then raises TypeError instead of running (found: the relay's internal-error
    path, where a bug of ours must cost one connection, never the proxy)."""
    from replay.compiled import SOURCES, source_path

    found = []
    for name in SOURCES:
        for fn in ast.walk(ast.parse(source_path(name).read_text())):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                types: dict[str, set[str]] = {}
                for node in ast.walk(fn):
                    if isinstance(node, ast.ExceptHandler) and node.name:
                        types.setdefault(node.name, set()).add(ast.unparse(node.type) if node.type else "")
                found += [f"{name}.{fn.name}: {var} for {sorted(t)}" for var, t in types.items() if len(t) > 1]
    assert not found, found


#: Warnings left out: the CPython calling conventions pass `self` to every module function, and module
#: and type definitions leave the later members of CPython's structs to their zero defaults.
_C_QUIET = ("-Wno-unused-parameter", "-Wno-missing-field-initializers")


def test_the_c_code_compiles_without_warnings(tmp_path: Path) -> None:
    """Every hand-written C module compiles with -Wall -Wextra -Werror (a warning there found
    memchr's arguments evaluated in an unspecified order, reading one byte past a line)."""
    cc = shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0])
    if cc is None:
        pytest.skip("no C compiler: the compiled modules are not built here")
    from replay.compiled import MODULES

    include = sysconfig.get_paths()["include"]
    for name in MODULES:
        src = name.replace(".", "/") + ".c"
        proc = _run(cc, "-Wall", "-Wextra", "-Werror", *_C_QUIET, "-O2", "-fPIC", "-shared", f"-I{include}",
                    src, "-o", tmp_path / "out.so")  # fmt: skip
        assert proc.returncode == 0, f"{src}:\n{proc.stderr}"
