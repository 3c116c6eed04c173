"""proxy/relay has no import cycle, imports under TYPE_CHECKING counted: each module can be read on its own."""

from __future__ import annotations

import ast
from pathlib import Path

RELAY = Path(__file__).resolve().parents[3] / "proxy" / "relay"


def relay_imports(root: Path = RELAY) -> dict[str, set[str]]:
    """Module -> the proxy.relay modules it imports (anywhere in it, TYPE_CHECKING blocks included)."""
    edges: dict[str, set[str]] = {}
    for path in root.glob("*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("proxy.relay."):
                deps.add(node.module.removeprefix("proxy.relay."))
            elif isinstance(node, ast.Import):
                deps |= {a.name.removeprefix("proxy.relay.") for a in node.names if a.name.startswith("proxy.relay.")}
        edges[path.stem] = deps
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        for dep in sorted(edges.get(node, ())):
            if dep in path:
                found.append([*path[path.index(dep) :], dep])
            else:
                visit(dep, [*path, dep])

    for start in sorted(edges):
        visit(start, [start])
    return found


def test_the_relay_has_no_import_cycle() -> None:
    edges = relay_imports()
    assert {"core", "shell", "contract", "lifecycle"} <= set(edges)
    assert cycles(edges) == []


def test_the_core_does_not_import_the_shell() -> None:
    """The shell drives the core; the core knows nothing of it (nor of the relay that owns both)."""
    edges = relay_imports()
    for pure in ("core", "contract", "lifecycle", "recording", "call", "records", "options"):
        assert not edges[pure] & {"shell", "relay", "peercert"}, pure
