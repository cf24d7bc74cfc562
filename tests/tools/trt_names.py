"""Which TensorRT names the backend uses, and which names a real TensorRT wheel defines.

Used by ``tests/test_trt_conformance.py`` and ``scripts/trt_api_names.py``; imports only the
standard library and never imports TensorRT.

Collecting the backend's names (an AST scan of :data:`SCANNED_FILES`) relies on a naming
convention that the same scan enforces (:attr:`ScanResult.violations`):

- A name is a *TensorRT name* when it is ``trt``/``_trt`` or starts with ``trt_``/``_trt_``
  (variables, parameters, attributes such as ``self._trt_module``, functions that return
  TensorRT objects such as ``_trt_builder()``). A class whose base is a TensorRT expression
  (the ``trt.ILogger`` subclass) also counts.
- An expression is *TensorRT-valued* when it is such a name, an attribute/call/subscript of a
  TensorRT-valued expression, or ``list()/dict()/getattr()/...`` applied to one.
- Collected: every attribute read or written on a TensorRT-valued expression (so
  ``trt.ILogger.Severity.VERBOSE`` gives ``ILogger``, ``Severity``, ``VERBOSE`` and
  ``trt_cache.queryKeys()`` gives ``queryKeys``), keyword-argument names of calls to
  TensorRT callables (``ignore_mismatch``), the string in ``hasattr/getattr(<trt expr>,
  "NAME")`` (marked *guarded*: it is feature-detected), and the methods a TensorRT subclass
  overrides (``log``).
- Enforced: whatever is bound from a TensorRT-valued expression (assignment, loop or
  comprehension target, function return, argument to one of our own functions) gets a
  TensorRT name, so no TensorRT object hides behind an unrecognizable name; plain values are
  taken out with ``str()``, ``int()``, ``float()``, ``bool()`` or ``bytes()``. A ``getattr``
  on a TensorRT object with a non-constant name is refused (it could not be checked).

Reading a wheel: ``tensorrt_bindings/tensorrt.so`` is a pybind11 module; every Python-visible
name is a NUL-terminated C string in it. The linker merges a string that is the tail of
another (``num_errors`` is stored inside ``get_num_errors``), so a name counts as present
when it is a whole string (``exact``) or the tail of one (``tail``); names assigned in
``tensorrt_bindings/__init__.py`` (``__version__`` on 10.x) count as ``python``.
"""

from __future__ import annotations

import ast
import enum
import re
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "reprobuild"
SCANNED_FILES = (
    "backends/tensorrt/backend.py",
    "backends/tensorrt/cache.py",
    "backends/tensorrt/cuda_probe.py",
    "backends/tensorrt/device.py",
    "backends/tensorrt/execute.py",
    "backends/tensorrt/install.py",
    "backends/tensorrt/config.py",
    "backends/tensorrt/logger.py",
    "cli/trt_cmds.py",
)

# Builtins whose result still holds TensorRT objects when an argument does.
_PASSTHROUGH = frozenset(
    {
        "dict",
        "enumerate",
        "filter",
        "frozenset",
        "getattr",
        "iter",
        "list",
        "max",
        "min",
        "next",
        "reversed",
        "set",
        "sorted",
        "tuple",
        "vars",
        "zip",
    }
)


def is_trt_name(name: str) -> bool:
    return name in ("trt", "_trt") or name.startswith(("trt_", "_trt_"))


@dataclass(frozen=True)
class NameUse:
    name: str
    file: str
    line: int
    kind: str  # attribute | keyword | hasattr | getattr | override
    guarded: bool = False


@dataclass
class ScanResult:
    uses: list[NameUse] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def names(self) -> set[str]:
        return {u.name for u in self.uses}

    def guarded_names(self) -> set[str]:
        return {u.name for u in self.uses if u.guarded}

    def where(self, name: str) -> list[str]:
        return sorted({f"{u.file}:{u.line}" for u in self.uses if u.name == name})


def scanned_paths(root: Path = PACKAGE_ROOT) -> list[Path]:
    return [root / rel for rel in SCANNED_FILES]


@dataclass
class _Signature:
    params: list[str]


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> list[str]:
    names = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if (
        method
        and names
        and not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)
    ):
        names = names[1:]
    return names + [a.arg for a in fn.args.kwonlyargs]


class _Scanner:
    def __init__(self, trees: dict[str, ast.Module]) -> None:
        self.trees = trees
        self.result = ScanResult()
        self.trt_classes: set[str] = set()
        self.functions: dict[str, list[_Signature]] = {}
        self.methods: dict[tuple[str, str], _Signature] = {}
        for tree in trees.values():
            self._index(tree)

    # ------------------------------------------------------------------ indexing

    def _index(self, tree: ast.Module) -> None:
        # Classes with TensorRT bases first: trt_valued() consults them.
        changed = True
        while changed:
            changed = False
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.ClassDef)
                    and node.name not in self.trt_classes
                    and any(self.trt_valued(b) for b in node.bases)
                ):
                    self.trt_classes.add(node.name)
                    changed = True
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(node.name, []).append(
                    _Signature(_params(node, method=False))
                )
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        sig = _Signature(_params(item, method=True))
                        self.methods[(node.name, item.name)] = sig
                        if item.name == "__init__":
                            self.functions.setdefault(node.name, []).append(sig)

    # ------------------------------------------------------------------ classification

    def trt_valued(self, node: ast.AST | None) -> bool:
        if node is None:
            return False
        if isinstance(node, ast.Name):
            return is_trt_name(node.id) or node.id in self.trt_classes
        if isinstance(node, ast.Attribute):
            return is_trt_name(node.attr) or self.trt_valued(node.value)
        if isinstance(node, ast.Call):
            if self.trt_valued(node.func):
                return True
            return (
                isinstance(node.func, ast.Name)
                and node.func.id in _PASSTHROUGH
                and any(self.trt_valued(a) for a in node.args)
            )
        if isinstance(node, (ast.Subscript, ast.Starred, ast.NamedExpr, ast.Await)):
            return self.trt_valued(node.value)
        if isinstance(node, ast.IfExp):
            return self.trt_valued(node.body) or self.trt_valued(node.orelse)
        if isinstance(node, ast.BoolOp):
            return any(self.trt_valued(v) for v in node.values)
        return False

    def plain(self, node: ast.AST | None) -> bool:
        """True when ``node`` cannot evaluate to (or contain) a TensorRT object."""
        if node is None or self.trt_valued(node):
            return node is None
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self.plain(node.elt)
        if isinstance(node, ast.DictComp):
            return self.plain(node.key) and self.plain(node.value)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return all(self.plain(e) for e in node.elts)
        if isinstance(node, ast.Dict):
            return all(self.plain(k) for k in node.keys if k is not None) and all(
                self.plain(v) for v in node.values
            )
        if isinstance(node, ast.BinOp):
            return self.plain(node.left) and self.plain(node.right)
        if isinstance(node, ast.BoolOp):
            return all(self.plain(v) for v in node.values)
        if isinstance(node, ast.IfExp):
            return self.plain(node.body) and self.plain(node.orelse)
        if isinstance(node, ast.UnaryOp):
            return isinstance(node.op, ast.Not) or self.plain(node.operand)
        return True

    # ------------------------------------------------------------------ scanning

    def scan(self) -> ScanResult:
        for rel, tree in self.trees.items():
            self._scan_block(rel, tree.body, cls=None)
        return self.result

    def _violation(self, rel: str, node: ast.AST, message: str) -> None:
        self.result.violations.append(f"{rel}:{getattr(node, 'lineno', 0)}: {message}")

    def _use(self, rel: str, node: ast.AST, name: str, kind: str, guarded: bool = False) -> None:
        self.result.uses.append(NameUse(name, rel, getattr(node, "lineno", 0), kind, guarded))

    def _scan_block(self, rel: str, body: Iterable[ast.stmt], cls: str | None) -> None:
        for stmt in body:
            self._scan_node(rel, stmt, cls)

    def _scan_node(self, rel: str, node: ast.AST, cls: str | None) -> None:
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                self._scan_node(rel, base, cls)
            if node.name in self.trt_classes:
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self._use(rel, item, item.name, "override")
            self._scan_block(rel, node.body, cls=node.name)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._check_returns(rel, node)
            for child in ast.iter_child_nodes(node):
                self._scan_node(rel, child, cls)
            return
        self._check_node(rel, node, cls)
        for child in ast.iter_child_nodes(node):
            self._scan_node(rel, child, cls)

    def _check_node(self, rel: str, node: ast.AST, cls: str | None) -> None:
        if isinstance(node, ast.Attribute) and self.trt_valued(node.value):
            self._use(rel, node, node.attr, "attribute")
        elif isinstance(node, ast.Call):
            self._check_call(rel, node, cls)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                self._check_binding(rel, target, node.value)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            self._check_binding(rel, node.target, node.value)
        elif isinstance(node, ast.NamedExpr):
            self._check_binding(rel, node.target, node.value)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            self._check_binding(rel, node.target, node.iter)

    def _check_call(self, rel: str, node: ast.Call, cls: str | None) -> None:
        func = node.func
        if (
            isinstance(func, ast.Name)
            and func.id in ("hasattr", "getattr")
            and len(node.args) >= 2
            and self.trt_valued(node.args[0])
        ):
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                guarded = func.id == "hasattr" or len(node.args) == 3
                self._use(rel, node, name.value, func.id, guarded)
            else:
                self._violation(rel, node, f"{func.id}() on a TensorRT object with a computed name")
        if self.trt_valued(func):
            for kw in node.keywords:
                if kw.arg is not None:
                    self._use(rel, node, kw.arg, "keyword")
            return
        self._check_arguments(rel, node, cls)

    def _check_arguments(self, rel: str, node: ast.Call, cls: str | None) -> None:
        """TensorRT objects passed to our own functions must land in TensorRT names."""
        func = node.func
        sigs: list[_Signature] = []
        if isinstance(func, ast.Name):
            sigs = self.functions.get(func.id, [])
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
            and cls is not None
        ):
            sig = self.methods.get((cls, func.attr))
            sigs = [sig] if sig else []
        for sig in sigs:
            for i, arg in enumerate(node.args):
                if isinstance(arg, ast.Starred) or self.plain(arg) or i >= len(sig.params):
                    continue
                if not is_trt_name(sig.params[i]):
                    self._violation(
                        rel, node, f"TensorRT object passed to parameter {sig.params[i]!r}"
                    )
            for kw in node.keywords:
                if kw.arg and not self.plain(kw.value) and not is_trt_name(kw.arg):
                    self._violation(rel, node, f"TensorRT object passed to parameter {kw.arg!r}")

    def _check_binding(self, rel: str, target: ast.AST, value: ast.AST) -> None:
        if self.plain(value):
            return
        if isinstance(target, ast.Name):
            if not is_trt_name(target.id):
                self._violation(rel, target, f"TensorRT object bound to {target.id!r}")
        elif isinstance(target, ast.Attribute):
            if not (self.trt_valued(target.value) or is_trt_name(target.attr)):
                self._violation(rel, target, f"TensorRT object stored in .{target.attr}")
        elif isinstance(target, (ast.Tuple, ast.List)):
            names = [e for e in target.elts if isinstance(e, ast.Name)]
            if not any(is_trt_name(e.id) for e in names):
                self._violation(rel, target, "TensorRT objects unpacked into non-TensorRT names")
        elif isinstance(target, ast.Subscript):
            if not self.trt_valued(target.value):
                self._violation(rel, target, "TensorRT object stored in a plain container")
        elif isinstance(target, ast.Starred):
            self._check_binding(rel, target.value, value)

    def _check_returns(self, rel: str, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if is_trt_name(fn.name):
            return
        for node in _own_nodes(fn):
            if isinstance(node, ast.Return) and not self.plain(node.value):
                self._violation(
                    rel, node, f"function {fn.name!r} returns a TensorRT object; name it trt_*"
                )


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """Nodes of a function body, not descending into nested functions, lambdas or classes."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def scan_sources(paths: Iterable[Path], root: Path = PACKAGE_ROOT) -> ScanResult:
    trees: dict[str, ast.Module] = {}
    for path in paths:
        try:
            rel = str(path.relative_to(root.parent))
        except ValueError:
            rel = str(path)
        trees[rel] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return _Scanner(trees).scan()


# ---------------------------------------------------------------------- reading wheels


def python_level_names(source: str) -> set[str]:
    """Names a bindings ``__init__.py`` defines or attaches in Python (not imports)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                names.add(target.id)
            elif isinstance(target, ast.Attribute):
                names.add(target.attr)
    return names


@dataclass
class BindingNames:
    """The names one TensorRT bindings wheel provides, looked up without importing it."""

    version: str
    so: bytes
    python_names: frozenset[str]

    def lookup(self, name: str) -> str | None:
        """``python``, ``exact``, ``tail`` (linker tail-merged string), or None if absent."""
        raw = name.encode("ascii")
        if b"\0" + raw + b"\0" in self.so:
            return "exact"
        if name in self.python_names:
            return "python"
        if raw + b"\0" in self.so:
            return "tail"
        return None

    def has(self, name: str) -> bool:
        return self.lookup(name) is not None


_VERSION_RE = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.M)


def read_bindings_wheel(path: str | Path) -> BindingNames:
    with zipfile.ZipFile(path) as zf:
        so = zf.read("tensorrt_bindings/tensorrt.so")
        init = zf.read("tensorrt_bindings/__init__.py").decode("utf-8")
    match = _VERSION_RE.search(init)
    version = match.group(1) if match else Path(path).name.split("-")[1]
    return BindingNames(version=version, so=so, python_names=frozenset(python_level_names(init)))


# ---------------------------------------------------------------------- module objects


def module_public_names(module: ModuleType) -> dict[str, str]:
    """Every public name a (stand-in) ``tensorrt`` module offers: ``{name: where}``.

    Module attributes and, recursively, class attributes not starting with ``_``; for enum
    classes their members; plus ``__version__``.
    """
    found: dict[str, str] = {}
    seen: set[int] = set()

    def visit_class(cls: type, where: str) -> None:
        if id(cls) in seen:
            return
        seen.add(id(cls))
        if isinstance(cls, enum.EnumMeta):
            for member in cls.__members__:
                found.setdefault(member, f"{where}.{member}")
            return
        for attr in dir(cls):  # dir(): inherited attributes count too
            if attr.startswith("_"):
                continue
            found.setdefault(attr, f"{where}.{attr}")
            value = getattr(cls, attr, None)
            if isinstance(value, type):
                visit_class(value, f"{where}.{attr}")

    for attr, value in vars(module).items():
        if attr.startswith("_") and attr != "__version__":
            continue
        found.setdefault(attr, attr)
        if isinstance(value, type):
            visit_class(value, attr)
    return found


# ---------------------------------------------------------------------- fetching wheels


@dataclass(frozen=True)
class WheelSpec:
    dist: str
    version: str
    filename: str
    sha256: str


# The two bindings wheels the backend is checked against (pinned by hash).
WHEELS = (
    WheelSpec(
        "tensorrt-cu12-bindings",
        "10.13.3.9",
        "tensorrt_cu12_bindings-10.13.3.9-cp311-none-manylinux_2_28_x86_64.whl",
        "33aa9d104c04b008871645a97bd8a1a02279cf498d251df5e767d9d5183e0646",
    ),
    WheelSpec(
        "tensorrt-cu13-bindings",
        "11.4.0.106",
        "tensorrt_cu13_bindings-11.4.0.106-cp311-none-manylinux_2_28_x86_64.whl",
        "d072ac2a095e2be749fefc847adfb25d5ebe70303401df62ede8fe67a59f27fc",
    ),
)

_UNREACHABLE_MARKERS = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "ConnectTimeoutError",
    "Network is unreachable",
    "No route to host",
    "ProxyError",
    "Read timed out",
    "Connection refused",
    "Could not fetch URL",
)


class IndexUnreachable(RuntimeError):
    """pip could not reach the package index (the caller may skip, not fail)."""


def default_wheel_cache() -> Path:
    import os

    env = os.environ.get("REPROBUILD_TRT_WHEELS")
    return Path(env) if env else Path.home() / ".cache" / "reprobuild-trt-wheels"


def _sha256_file(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch_wheel(spec: WheelSpec, cache_dir: Path, timeout: float = 300.0) -> Path:
    """The wheel file, downloaded with ``pip download --no-deps`` unless cached (sha-checked).

    Platform and Python are fixed so every runner fetches the same file. Raises
    :class:`IndexUnreachable` when pip cannot reach the index, ``RuntimeError`` otherwise.
    """
    import subprocess
    import sys
    import tempfile

    target = cache_dir / spec.filename
    if target.is_file() and _sha256_file(target) == spec.sha256:
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
            "--disable-pip-version-check", "--retries", "1", "--timeout", "30",
            "-d", tmp, f"{spec.dist}=={spec.version}",
        ]  # fmt: skip
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as err:
            raise IndexUnreachable(f"pip download {spec.dist} timed out after {timeout}s") from err
        output = proc.stdout + proc.stderr
        if proc.returncode != 0:
            if any(marker in output for marker in _UNREACHABLE_MARKERS):
                raise IndexUnreachable(
                    f"pip could not reach the package index for {spec.dist}=={spec.version}: "
                    + next(
                        line
                        for line in output.splitlines()
                        if any(marker in line for marker in _UNREACHABLE_MARKERS)
                    )[-300:]
                )
            raise RuntimeError(f"pip download {spec.dist}=={spec.version} failed:\n{output}")
        downloaded = Path(tmp) / spec.filename
        if not downloaded.is_file():
            raise RuntimeError(f"pip download did not produce {spec.filename}:\n{output}")
        digest = _sha256_file(downloaded)
        if digest != spec.sha256:
            raise RuntimeError(
                f"{spec.filename}: sha256 {digest} differs from the pinned {spec.sha256}"
            )
        downloaded.replace(target)
    return target
