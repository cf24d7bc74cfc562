"""From loaded YAML data to a ``Lock``: every field checked, every error one line.

Strict on purpose: a lock is reviewed and committed, so an unknown field or a wrong type is
far more likely a mistake than an extension, and the message names file, line:column and
the fix (through ``Doc``).
"""

from __future__ import annotations

import re
from typing import Any

from reprobuild.lock.model import (
    SCHEMA_VERSION,
    ExternalFile,
    LayerEntry,
    Lock,
    LockCandidate,
    ModelInfo,
)
from reprobuild.lock.plan import plan_from_data
from reprobuild.lock.schema import Doc, Path_
from reprobuild.types import BuildSettings, Environment

FIX = "fix the value, or delete the lock and re-record it with `reprobuild build`"
_SHA_RE = re.compile(r"[0-9a-f]{64}")
_INT_SETTINGS = ("workspace", "max_num_tactics", "avg_timing_iterations", "max_aux_streams")
_STR_SETTINGS = ("tiling_optimization_level", "hardware_compatibility_level")
_ENV_FIELDS = ("tensorrt_version", "gpu", "compute_capability", "cuda_version", "driver_version")


def lock_from_data(doc: Doc, raw: Any) -> Lock:
    """Check the schema version first: a newer lock must say "upgrade", not "unknown field"."""
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
    return Lock(
        model=_model(doc, top["model"], ("model",)),
        environment=_environment(doc, top["environment"], ("environment",)),
        settings=_settings(doc, top["settings"], ("settings",)),
        layers=_layers(doc, top["layers"], ("layers",)),
        precision=None
        if top.get("precision") is None
        else plan_from_data(doc, top["precision"], ("precision",)),
        schema=schema,
    )


def _sha(doc: Doc, value: Any, path: Path_) -> str:
    s = doc.string(value, path)
    if not _SHA_RE.fullmatch(s):
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
    m = doc.mapping(value, path, ("backend",), _ENV_FIELDS)
    return Environment(
        backend=doc.string(m["backend"], path + ("backend",)),
        **{f: doc.string(m.get(f), path + (f,), optional=True) for f in _ENV_FIELDS},
    )


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
    kw["input_shapes"] = _input_shapes(doc, m.get("input_shapes") or {}, path + ("input_shapes",))
    return BuildSettings(**kw)


def _input_shapes(
    doc: Doc, raw: Any, sp: Path_
) -> tuple[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...]:
    shapes: list[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = []
    if not isinstance(raw, dict):
        doc.fail(sp, "expected a mapping of input name -> {min, opt, max}")
    for name, prof in raw.items():
        pp = sp + (name,)
        if not isinstance(name, str):
            doc.fail(pp, f"input names must be strings, got {name!r}")
        pm = doc.mapping(prof, pp, ("min", "opt", "max"))
        dims = []
        for part in ("min", "opt", "max"):
            seq = doc.seq(pm[part], pp + (part,))
            dims.append(tuple(doc.integer(d, pp + (part, i), minimum=0) for i, d in enumerate(seq)))
        shapes.append((name, dims[0], dims[1], dims[2]))
    return tuple(sorted(shapes))


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
