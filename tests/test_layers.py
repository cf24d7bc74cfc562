"""The package's shape holds: imports only go downwards, the workflow stays backend-neutral,
and no module grows past the size where it starts doing two jobs.

Layers, lowest first. A module may import from its own layer and the ones below, at module
level or inside a function (lazy imports count: they are still dependencies).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "reprobuild"

LAYERS: list[tuple[str, ...]] = [
    (
        "__init__",
        "errors",
        "types",
        "events",
        "fileio",
        "accuracy",
        "transaction",
        "limits",
        "gcpause",
        "tiebreak",
        "words",
    ),
    ("lock",),
    ("logs",),
    ("precision",),
    ("backends",),
    ("pinning", "cachedir"),
    ("workflow",),
    ("cli", "__main__"),
]
MAX_LINES = 500


def _modules() -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE
    )


def _concept(module: str) -> str:
    """``reprobuild.workflow.build`` -> ``workflow``; ``reprobuild.__version__`` (a name
    the package root defines) -> ``__init__``."""
    name = module.split(".")[1] if module.count(".") else module
    exists = (PACKAGE / f"{name}.py").is_file() or (PACKAGE / name).is_dir()
    return name if exists else "__init__"


def _rank(concept: str) -> int:
    for i, names in enumerate(LAYERS):
        if concept in names:
            return i
    raise AssertionError(f"reprobuild.{concept} is in no layer of tests/test_layers.py")


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "reprobuild":
                out += [(node.lineno, f"reprobuild.{a.name}") for a in node.names]
            elif node.module.startswith("reprobuild."):
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("reprobuild.")]
    return out


def _name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    return ".".join(rel.parts)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_only_go_downwards(path: Path) -> None:
    here = _name(path)
    rank = _rank(_concept(here))
    upward = [
        f"{path.relative_to(PACKAGE)}:{line} imports {target}"
        for line, target in _imports(path)
        if _rank(_concept(target)) > rank
    ]
    assert upward == []


def test_workflow_and_pinning_use_no_backend_internals() -> None:
    files = [*(PACKAGE / "workflow").glob("*.py"), PACKAGE / "pinning.py", PACKAGE / "cachedir.py"]
    private = [
        f"{p.relative_to(PACKAGE)}:{line} imports {target}"
        for p in files
        for line, target in _imports(p)
        if target.startswith(("reprobuild.backends.reference", "reprobuild.backends.tensorrt"))
    ]
    assert private == []


def test_no_module_over_the_size_limit() -> None:
    big = {
        str(p.relative_to(PACKAGE)): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert big == {}


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The check itself can fail: an import of the workflow from the lock is caught."""
    bad = tmp_path / "x.py"
    bad.write_text("def f():\n    from reprobuild.workflow.build import build\n")
    ((line, target),) = _imports(bad)
    assert line == 2 and _rank(_concept(target)) > _rank("lock")


def _module_name_of(path: Path) -> str:
    """``reprobuild/lock/__init__.py`` -> ``reprobuild.lock``: importing a package runs its
    ``__init__``, so the package name stands for that file."""
    name = _name(path)
    return name.removesuffix(".__init__")


def _is_module(name: str, root: Path) -> bool:
    rel = Path(*name.split("."))
    return (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file()


def _targets(path: Path, root: Path = PACKAGE.parent) -> set[str]:
    """The reprobuild modules ``path`` imports, at any depth of its code.

    ``from reprobuild.x import y`` imports the module ``reprobuild.x.y`` when ``y`` is one
    (that file is what runs), else the module ``reprobuild.x`` that defines the name.
    """
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module != "reprobuild" and not node.module.startswith("reprobuild."):
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if _is_module(sub, root) else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "reprobuild"}
    return out


def _import_graph(paths: list[Path]) -> dict[str, set[str]]:
    graph = {_module_name_of(p): _targets(p) for p in paths}
    return {m: {t for t in targets if t in graph and t != m} for m, targets in graph.items()}


def _cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Every simple cycle, each once, as a chain starting at its smallest module.

    A cycle is searched from its smallest module only, through larger ones, so each is found
    once; the package's graph is small enough for a plain depth-first walk.
    """
    found: set[tuple[str, ...]] = set()

    def walk(start: str, chain: list[str]) -> None:
        for nxt in sorted(graph[chain[-1]]):
            if nxt == start:
                found.add(tuple(chain))
            elif nxt > start and nxt not in chain:
                walk(start, [*chain, nxt])

    for start in sorted(graph):
        walk(start, [start])
    return found


def _chain(cycle: tuple[str, ...]) -> str:
    return " -> ".join((*cycle, cycle[0]))


def test_no_import_cycles() -> None:
    """Two modules that import each other (directly or around a loop) have no order to be
    read, tested or loaded in; the shared piece belongs in a lower module of its own."""
    cycles = _cycles(_import_graph(_modules() + [PACKAGE / "__init__.py"]))
    found = sorted(_chain(c) for c in cycles)
    assert not found, "import cycles:\n" + "\n".join(found)


def test_the_cycle_check_sees_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    """The check itself can fail: a lazy import that closes a loop is a cycle, and
    ``from package import submodule`` counts as importing that submodule."""
    pkg = tmp_path / "reprobuild" / "demo"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from reprobuild.demo import b\n")
    (pkg / "b.py").write_text("def f():\n    import reprobuild.demo.c\n")
    (pkg / "c.py").write_text("from reprobuild.demo.a import thing\n")
    graph = {f"reprobuild.demo.{p.stem}": _targets(p, tmp_path) for p in pkg.glob("?.py")}
    assert _cycles(graph) == {("reprobuild.demo.a", "reprobuild.demo.b", "reprobuild.demo.c")}
