"""The modules of ``reprobuild.logs`` import each other one way only.

A cycle there (``layerinfo`` -> ``layertext`` -> ``lines`` -> ``layerinfo``, once hidden
behind an import inside a function) makes the import order decide which module sees a
half-initialised other, and keeps the modules from being read or changed one at a time.
Imports inside functions count: they are still dependencies.
"""

from __future__ import annotations

import ast
from pathlib import Path

LOGS = Path(__file__).resolve().parents[2] / "reprobuild" / "logs"


def _local_imports(source: str) -> set[str]:
    """The ``reprobuild.logs`` modules a module's source imports, by short name."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "reprobuild.logs":
                out.update(a.name for a in node.names)
            elif node.module.startswith("reprobuild.logs."):
                out.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            out.update(
                a.name.split(".")[2] for a in node.names if a.name.startswith("reprobuild.logs.")
            )
    return out


def _graph() -> dict[str, set[str]]:
    return {p.stem: _local_imports(p.read_text(encoding="utf-8")) for p in LOGS.glob("*.py")}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path (first module repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_logs_modules_import_one_way_only() -> None:
    graph = _graph()
    assert {"parser", "lines", "layerinfo", "layertext", "layermodel"} <= set(graph)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_check_sees_a_cycle_through_a_function_level_import() -> None:
    source = "def load():\n    from reprobuild.logs.layertext import read_layer_lines\n"
    graph = {
        "layerinfo": _local_imports(source),
        "layertext": _local_imports("from reprobuild.logs import lines\n"),
        "lines": _local_imports("from reprobuild.logs.layerinfo import EngineLayer\n"),
    }
    assert _cycle(graph) == ["layerinfo", "layertext", "lines", "layerinfo"]
