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
    ("__init__", "errors", "types", "events", "fileio", "accuracy", "transaction", "limits"),
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
