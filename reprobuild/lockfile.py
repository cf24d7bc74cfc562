"""The ``tactics.lock`` format (YAML, schema 1): what a reproducible build depends on.

Design choices, after uv/Cargo lockfiles:
- Canonical output: fixed field order, layers sorted by (layer name, key), candidates by
  tactic hash, one hand-written emitter. Recording the same choices twice gives the same
  bytes, and one changed pin is a one-entry diff.
- Entries are identified by timing-cache key; layer names may repeat in real logs.
- Timings change on every build, so they stay out of the lock (see the build report).
- Loading is strict; every problem is one line naming file, line:column and the fix.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.backends.base import BuildSettings, Environment
from reprobuild.errors import LockError
from reprobuild.precision_plan import PrecisionPlan, plan_from_data
from reprobuild.schema import Doc, Path_, find_duplicate_key

SCHEMA_VERSION = 1
DEFAULT_LOCK = "tactics.lock"
HEADER = (
    "# reprobuild lockfile: written by `reprobuild build`, edited with `reprobuild pin`.\n"
    "# Review changes like code; timings live in the build report, not here.\n"
)
_FIX = "fix the value, or delete the lock and re-record it with `reprobuild build`"


@dataclass(frozen=True)
class LockCandidate:
    tactic: int
    kernel: str | None = None


@dataclass
class LayerEntry:
    key: str
    layer: str
    tactic: int
    kernel: str | None = None
    pinned: bool = False
    candidates: list[LockCandidate] = field(default_factory=list)

    def candidate(self, tactic: int) -> LockCandidate | None:
        return next((c for c in self.candidates if c.tactic == tactic), None)


@dataclass(frozen=True)
class ExternalFile:
    path: str
    sha256: str


@dataclass
class ModelInfo:
    path: str
    sha256: str
    external_data: list[ExternalFile] = field(default_factory=list)


@dataclass
class Lock:
    model: ModelInfo
    environment: Environment
    settings: BuildSettings
    layers: list[LayerEntry] = field(default_factory=list)
    precision: PrecisionPlan | None = None
    schema: int = SCHEMA_VERSION

    def canonicalize(self) -> None:
        """Sort in place so that equal content always serializes to equal bytes."""
        for e in self.layers:
            e.candidates = sorted(set(e.candidates), key=lambda c: (c.tactic, c.kernel or ""))
        self.layers.sort(key=lambda e: (e.layer, e.key))

    def by_key(self) -> dict[str, LayerEntry]:
        return {e.key: e for e in self.layers}

    def tactic_map(self) -> dict[str, int]:
        return {e.key: e.tactic for e in self.layers}


# ---------------------------------------------------------------------------- writing

_PLAIN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_./\-]*")
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "none"}


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return ".nan"
        if abs(value) == float("inf"):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        # YAML 1.1 (PyYAML) reads 1e+20 as a string: a float needs its dot.
        return text if "." in text else text.replace("e", ".0e", 1)
    text = str(value)
    if _PLAIN_RE.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    # A JSON string literal is a valid YAML double-quoted scalar. Characters YAML treats
    # as line breaks or non-printable get \\u escapes; others stay literal, because YAML
    # does not join the surrogate pairs that JSON would use for characters beyond U+FFFF.
    return _YAML_UNSAFE.sub(
        lambda m: f"\\u{ord(m.group()):04x}", json.dumps(text, ensure_ascii=False)
    )


def _hex(n: int) -> str:
    return f'"0x{n:x}"'


def _emit(value: Any, indent: int, out: list[str]) -> None:
    """Block-style YAML for nested dicts/lists of scalars; flow style for flat items."""
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            return
        for k, v in value.items():
            if isinstance(v, dict) and v:
                out.append(f"{pad}{_scalar(k)}:")
                _emit(v, indent + 1, out)
            elif isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v):
                out.append(f"{pad}{_scalar(k)}:")
                _emit(v, indent + 1, out)
            else:
                out.append(f"{pad}{_scalar(k)}: {_inline(v)}")
    elif isinstance(value, list):
        for item in value:
            out.append(f"{pad}- {_inline(item)}")


def _inline(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {_inline(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_inline(x) for x in v) + "]"
    return _scalar(v)


def dumps_lock(lock: Lock) -> str:
    """Serialize canonically (sorts ``lock`` in place first)."""
    lock.canonicalize()
    out: list[str] = [HEADER.rstrip("\n"), f"schema: {lock.schema}"]
    model: dict[str, Any] = {"path": lock.model.path, "sha256": lock.model.sha256}
    out.append("model:")
    _emit(model, 1, out)
    ext = [{"path": f.path, "sha256": f.sha256} for f in lock.model.external_data]
    out.append(f"  external_data: {'[]' if not ext else ''}".rstrip())
    if ext:
        _emit(ext, 2, out)
    out.append("environment:")
    _emit(lock.environment.to_dict(), 1, out)
    out.append("settings:")
    _emit(lock.settings.to_dict(), 1, out)
    if lock.precision is not None:
        out.append("precision:")
        _emit(lock.precision.to_dict(), 1, out)
    out.append("layers:" if lock.layers else "layers: []")
    for e in lock.layers:
        out.append(f"  - layer: {_scalar(e.layer)}")
        out.append(f'    key: "{e.key}"')
        out.append(f"    tactic: {_hex(e.tactic)}")
        out.append(f"    kernel: {_scalar(e.kernel)}")
        out.append(f"    pinned: {_scalar(e.pinned)}")
        if e.candidates:
            out.append("    candidates:")
            for c in e.candidates:
                out.append(f"      - {{tactic: {_hex(c.tactic)}, kernel: {_scalar(c.kernel)}}}")
        else:
            out.append("    candidates: []")
    return "\n".join(out) + "\n"


def save_lock(lock: Lock, path: str | Path) -> None:
    """Write atomically: a failure leaves the previous lock byte-for-byte intact."""
    from reprobuild.fileio import atomic_write_text

    atomic_write_text(path, dumps_lock(lock))


# ---------------------------------------------------------------------------- reading


def load_lock(path: str | Path) -> Lock:
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise LockError(
            f"{p}: no such lockfile; record one with `reprobuild build MODEL --lock {p}`"
        ) from None
    except OSError as err:
        raise LockError(f"{p}: cannot read the lockfile ({err.strerror}); check the path") from None
    return loads_lock(data, str(p))


def loads_lock(data: bytes | str, filename: str = DEFAULT_LOCK) -> Lock:
    """Parse and validate; raises ``LockError`` (never anything else) on bad input."""

    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise LockError(
                f"{filename}: not UTF-8 text (byte {err.start}); restore it from version "
                "control or re-record it with `reprobuild build`"
            ) from None
    else:
        text = data
    fast = _split_canonical(text)
    if fast is not None:
        head, layers = fast
        try:
            return _load_yaml(head + "layers: []\n", filename, layers)
        except LockError:
            pass  # re-read the slow way so the message carries line and column
    return _load_yaml(text, filename, None)


def _load_yaml(text: str, filename: str, layers: list[Any] | None) -> Lock:
    import yaml

    try:
        raw = yaml.safe_load(text)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise LockError(f"{where}: invalid YAML ({problem}); fix the syntax there") from None
    except (ValueError, TypeError, RecursionError) as err:  # e.g. NUL bytes in the stream
        raise LockError(f"{filename}: unreadable YAML ({err}); {_FIX}") from None
    doc = Doc(filename, root, _FIX)
    dup = find_duplicate_key(root)
    if dup is not None:
        node, name = dup
        m = node.start_mark
        raise LockError(
            f"{filename}:{m.line + 1}:{m.column + 1}: duplicate key {name!r}; keep only one"
        )
    if raw is None:
        raise LockError(f"{filename}: empty lockfile; {_FIX}")
    if layers is not None and isinstance(raw, dict):
        raw["layers"] = layers
    return _lock_from_data(doc, raw)


# The layers section is most of a lock (a big network has thousands of entries) and the
# pure-Python YAML parser reads it at well under 1 MB/s. Locks as this module writes them
# are read line by line instead; any line that is not exactly canonical (a comment, a
# hand edit in another style) sends the whole file through the YAML parser as before.
_HEX_Q = r'"(0x[0-9a-f]+)"'
_SCALAR = r'(null|[A-Za-z_][A-Za-z0-9_./\-]*|"(?:[^"\\]|\\.)*")'
_LINE_RES = {
    "layer": re.compile(r"  - layer: " + _SCALAR + r"\Z"),
    "key": re.compile(r"    key: " + _HEX_Q + r"\Z"),
    "tactic": re.compile(r"    tactic: " + _HEX_Q + r"\Z"),
    "kernel": re.compile(r"    kernel: " + _SCALAR + r"\Z"),
    "pinned": re.compile(r"    pinned: (true|false)\Z"),
}
_CANDS_RE = re.compile(r"    candidates:( \[\])?\Z")
_CAND_RE = re.compile(r"      - \{tactic: " + _HEX_Q + r", kernel: " + _SCALAR + r"\}\Z")
_FIELDS = ("layer", "key", "tactic", "kernel", "pinned")


def _split_canonical(text: str) -> tuple[str, list[dict[str, Any]]] | None:
    marker = "\nlayers:\n"
    at = text.find(marker)
    if at < 0 or text.find(marker, at + 1) >= 0 or not text.endswith("\n"):
        return None
    lines = text[at + len(marker) : -1].split("\n")
    layers: list[dict[str, Any]] = []
    i, n = 0, len(lines)
    try:
        while i < n:
            entry: dict[str, Any] = {}
            for name in _FIELDS:
                m = _LINE_RES[name].match(lines[i])
                if m is None:
                    return None
                entry[name] = _fast_scalar(m.group(1), name)
                i += 1
            m = _CANDS_RE.match(lines[i])
            if m is None:
                return None
            i += 1
            cands: list[dict[str, Any]] = []
            if m.group(1) is None:
                while i < n and (c := _CAND_RE.match(lines[i])) is not None:
                    cands.append({"tactic": c.group(1), "kernel": _fast_scalar(c.group(2), "")})
                    i += 1
                if not cands:
                    return None
            entry["candidates"] = cands
            layers.append(entry)
    except (IndexError, ValueError):
        return None
    return text[: at + 1], layers


def _fast_scalar(token: str, field_name: str) -> Any:
    """Read one canonical scalar exactly as the YAML loader would, or raise ValueError."""
    if field_name == "pinned":
        return token == "true"
    if token.startswith('"'):
        return json.loads(token)  # ValueError on escapes JSON lacks -> slow path
    if token == "null" or token.lower() in _YAML_WORDS:
        if token == "null":
            return None
        raise ValueError(token)
    return token


def _lock_from_data(doc: Doc, raw: Any) -> Lock:
    if not isinstance(raw, dict):
        doc.fail((), f"expected a mapping at the top level, got {type(raw).__name__}")
    if "schema" not in raw:
        doc.fail((), "missing 'schema' (this lockfile format is schema 1)", "add 'schema: 1'")
    schema = raw["schema"]
    if not isinstance(schema, int) or isinstance(schema, bool):
        doc.fail(("schema",), f"expected an integer schema version, got {schema!r}")
    if schema > SCHEMA_VERSION:
        doc.fail(
            ("schema",),
            f"schema {schema} is newer than this reprobuild understands ({SCHEMA_VERSION})",
            "upgrade reprobuild (pip install -U reprobuild)",
        )
    if schema < 1:
        doc.fail(("schema",), f"invalid schema version {schema}", "use 'schema: 1'")
    top = doc.mapping(
        raw, (), ("schema", "model", "environment", "settings", "layers"), ("precision",)
    )
    lock = Lock(
        model=_model(doc, top["model"], ("model",)),
        environment=_environment(doc, top["environment"], ("environment",)),
        settings=_settings(doc, top["settings"], ("settings",)),
        layers=_layers(doc, top["layers"], ("layers",)),
        precision=None
        if top.get("precision") is None
        else plan_from_data(doc, top["precision"], ("precision",)),
        schema=schema,
    )
    return lock


def _sha(doc: Doc, value: Any, path: Path_) -> str:
    s = doc.string(value, path)
    if not re.fullmatch(r"[0-9a-f]{64}", s):
        doc.fail(path, f"malformed sha256 {s[:70]!r}: expected 64 lowercase hex digits")
    return s


def _model(doc: Doc, value: Any, path: Path_) -> ModelInfo:
    m = doc.mapping(value, path, ("path", "sha256"), ("external_data",))
    ext: list[ExternalFile] = []
    for i, item in enumerate(doc.seq(m.get("external_data") or [], path + ("external_data",))):
        p = path + ("external_data", i)
        e = doc.mapping(item, p, ("path", "sha256"))
        ext.append(
            ExternalFile(
                doc.string(e["path"], p + ("path",)), _sha(doc, e["sha256"], p + ("sha256",))
            )
        )
    return ModelInfo(
        path=doc.string(m["path"], path + ("path",)),
        sha256=_sha(doc, m["sha256"], path + ("sha256",)),
        external_data=ext,
    )


def _environment(doc: Doc, value: Any, path: Path_) -> Environment:
    fields = ("tensorrt_version", "gpu", "compute_capability", "cuda_version", "driver_version")
    m = doc.mapping(value, path, ("backend",), fields)
    return Environment(
        backend=doc.string(m["backend"], path + ("backend",)),
        **{f: doc.string(m.get(f), path + (f,), optional=True) for f in fields},
    )


_INT_SETTINGS = ("workspace", "max_num_tactics", "avg_timing_iterations", "max_aux_streams")
_STR_SETTINGS = ("tiling_optimization_level", "hardware_compatibility_level")


def _settings(doc: Doc, value: Any, path: Path_) -> BuildSettings:
    optional = ("tactic_sources", "tf32", "input_shapes", *_INT_SETTINGS, *_STR_SETTINGS)
    m = doc.mapping(value, path, ("optimization_level",), optional)
    kw: dict[str, Any] = {
        "optimization_level": doc.integer(
            m["optimization_level"], path + ("optimization_level",), minimum=0
        )
    }
    for f in _INT_SETTINGS:
        kw[f] = doc.integer(m.get(f), path + (f,), optional=True, minimum=0)
    for f in _STR_SETTINGS:
        kw[f] = doc.string(m.get(f), path + (f,), optional=True)
    srcs = doc.str_list(m.get("tactic_sources"), path + ("tactic_sources",), optional=True)
    kw["tactic_sources"] = tuple(srcs) if srcs is not None else None
    kw["tf32"] = doc.boolean(m.get("tf32", True), path + ("tf32",))
    shapes: list[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = []
    sp = path + ("input_shapes",)
    raw_shapes = m.get("input_shapes") or {}
    if not isinstance(raw_shapes, dict):
        doc.fail(sp, "expected a mapping of input name -> {min, opt, max}")
    for name, prof in raw_shapes.items():
        pp = sp + (name,)
        if not isinstance(name, str):
            doc.fail(pp, f"input names must be strings, got {name!r}")
        pm = doc.mapping(prof, pp, ("min", "opt", "max"))
        dims = []
        for part in ("min", "opt", "max"):
            seq = doc.seq(pm[part], pp + (part,))
            dims.append(tuple(doc.integer(d, pp + (part, i), minimum=0) for i, d in enumerate(seq)))
        shapes.append((name, dims[0], dims[1], dims[2]))
    kw["input_shapes"] = tuple(sorted(shapes))
    return BuildSettings(**kw)


def _layers(doc: Doc, value: Any, path: Path_) -> list[LayerEntry]:
    entries: list[LayerEntry] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(doc.seq(value, path)):
        p = path + (i,)
        m = doc.mapping(item, p, ("layer", "key", "tactic"), ("kernel", "pinned", "candidates"))
        key = doc.key(m["key"], p + ("key",))
        if key in seen:
            doc.fail(
                p + ("key",),
                f"key {key} already used by layers[{seen[key]}]",
                "each timing-cache key may appear once; delete the duplicate entry",
            )
        seen[key] = i
        cands: list[LockCandidate] = []
        for j, c in enumerate(doc.seq(m.get("candidates") or [], p + ("candidates",))):
            cp = p + ("candidates", j)
            cm = doc.mapping(c, cp, ("tactic",), ("kernel",))
            cands.append(
                LockCandidate(
                    tactic=doc.tactic(cm["tactic"], cp + ("tactic",)),
                    kernel=doc.string(cm.get("kernel"), cp + ("kernel",), optional=True),
                )
            )
        entries.append(
            LayerEntry(
                key=key,
                layer=doc.string(m["layer"], p + ("layer",)),
                tactic=doc.tactic(m["tactic"], p + ("tactic",)),
                kernel=doc.string(m.get("kernel"), p + ("kernel",), optional=True),
                pinned=doc.boolean(m.get("pinned", False), p + ("pinned",)),
                candidates=cands,
            )
        )
    return entries
