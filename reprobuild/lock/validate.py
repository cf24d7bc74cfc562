"""From loaded YAML data to a ``Lock``: every field checked, every error one line.

Strict on purpose: a lock is reviewed and committed, so an unknown field or a wrong type is
far more likely a mistake than an extension, and the message names file, line:column and
the fix (through ``Doc``).
"""

from __future__ import annotations

import re
from typing import Any

from reprobuild.limits import SEED_DIGITS
from reprobuild.lock.model import (
    SCHEMA_VERSION,
    ExternalFile,
    LayerEntry,
    Lock,
    LockCandidate,
    ModelInfo,
    OutputDigest,
    Target,
)
from reprobuild.lock.plan import plan_from_data
from reprobuild.lock.schema import Doc, Path_
from reprobuild.types import (
    DEFAULT_TIE_BAND,
    DEFAULT_TIE_RULE,
    LEGACY_ENV_FIELDS,
    MAX_TIE_RECORDS,
    TIE_FIELDS,
    TIE_RULES,
    BuildSettings,
    Environment,
    KernelRule,
    legacy_environment,
)

FIX = "fix the value, or delete the lock and re-record it with `reprobuild build`"
_SHA_RE = re.compile(r"[0-9a-f]{64}")
_INT_SETTINGS = ("workspace", "max_num_tactics", "avg_timing_iterations", "max_aux_streams")
_STR_SETTINGS = ("tiling_optimization_level", "hardware_compatibility_level")
_FIELD_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")
_INPUTS_RE = re.compile(rf"seeded:-?[0-9]{{1,{SEED_DIGITS}}}|sha256:[0-9a-f]{{64}}")


def lock_from_data(doc: Doc, raw: Any) -> Lock:
    """Check the schema version first: a newer lock must say "upgrade", not "unknown field"."""
    if not isinstance(raw, dict):
        doc.fail((), f"expected a mapping at the top level, got {type(raw).__name__}")
    if "schema" not in raw:
        doc.fail(
            (),
            f"missing 'schema' (this lockfile format is schema {SCHEMA_VERSION})",
            f"add 'schema: {SCHEMA_VERSION}'",
        )
    schema = raw["schema"]
    if not isinstance(schema, int) or isinstance(schema, bool):
        doc.fail(("schema",), f"expected an integer schema version, got {schema!r}")
    # a 4000-digit hex number is a number too: shown by its size, never converted to decimal
    shown = (
        str(schema)
        if abs(schema) < 2**64
        else f"{hex(schema)[:12]}... ({schema.bit_length()} bits)"
    )
    if schema > SCHEMA_VERSION and abs(schema) < 2**64:
        doc.fail(
            ("schema",),
            f"schema {shown} is newer than this reprobuild understands ({SCHEMA_VERSION})",
            "upgrade reprobuild (pip install -U reprobuild)",
        )
    if schema < 1 or schema > SCHEMA_VERSION:
        doc.fail(("schema",), f"invalid schema version {shown}", f"use 'schema: {SCHEMA_VERSION}'")
    if schema == 1:  # one environment, one list of layers: one target
        top = doc.mapping(
            raw, (), ("schema", "model", "environment", "settings", "layers"), ("precision",)
        )
        targets = [
            Target(
                _legacy_environment(doc, top["environment"], ("environment",)),
                _layers(doc, top["layers"], ("layers",), timed=False),
            )
        ]
    else:
        top = doc.mapping(raw, (), ("schema", "model", "settings", "targets"), ("precision",))
        targets = _targets(doc, top["targets"], ("targets",))
    lock = Lock(
        model=_model(doc, top["model"], ("model",)),
        environment=targets[0].environment,
        settings=_settings(doc, top["settings"], ("settings",)),
        layers=targets[0].layers,
        precision=None
        if top.get("precision") is None
        else plan_from_data(doc, top["precision"], ("precision",)),
        schema=schema,
        outputs=targets[0].outputs,
        others=targets[1:],
    )
    return lock


def _targets(doc: Doc, value: Any, path: Path_) -> list[Target]:
    targets: list[Target] = []
    seen: dict[str, int] = {}
    items = doc.seq(value, path)
    if not items:
        doc.fail(path, "a lock needs at least one target", "re-record the lock")
    for i, item in enumerate(items):
        p = path + (i,)
        m = doc.mapping(
            item, p, ("target", "backend", "identity", "layers"), ("advisory", "outputs")
        )
        label = doc.string(m["target"], p + ("target",))
        env = Environment.make(
            doc.string(m["backend"], p + ("backend",)),
            _fields(doc, m["identity"], p + ("identity",)),
            _fields(doc, m.get("advisory") or {}, p + ("advisory",)),
        )
        if label != env.name:  # the label is derived: a difference is an edit of one or other
            doc.fail(
                p + ("identity",),
                f"gives the target label {env.name}, not the recorded {label[:70]!r} (an "
                "identity field or the label was edited)",
                "restore the identity as it was recorded, or delete the lock and re-record "
                "it with reprobuild build on the machine it is for",
            )
        if env.name in seen:
            doc.fail(
                p + ("identity",),
                f"the same identity as targets[{seen[env.name]}] ({env.name})",
                "merge the two sections into one, or delete one",
            )
        seen[env.name] = i
        outputs = []
        for j, o in enumerate(doc.seq(m.get("outputs") or [], p + ("outputs",))):
            op = p + ("outputs", j)
            om = doc.mapping(o, op, ("inputs", "sha256"))
            inputs = doc.string(om["inputs"], op + ("inputs",))
            if not _INPUTS_RE.fullmatch(inputs):
                doc.fail(
                    op + ("inputs",),
                    f"expected 'seeded:N' or 'sha256:<64 hex>', got {inputs[:70]!r}",
                )
            if any(o.inputs == inputs for o in outputs):
                doc.fail(op + ("inputs",), f"a second digest for inputs {inputs[:70]!r}",
                         "keep one digest per inputs, or re-record them")  # fmt: skip
            outputs.append(OutputDigest(inputs, _sha(doc, om["sha256"], op + ("sha256",))))
        targets.append(Target(env, _layers(doc, m["layers"], p + ("layers",), timed=True), outputs))
    return targets


def _fields(doc: Doc, value: Any, path: Path_) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        doc.fail(path, "expected a mapping of field name -> text")
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not _FIELD_NAME_RE.fullmatch(k):
            doc.fail(path + (str(k),), f"invalid field name {k!r}: lowercase words joined by '_'")
        out[k] = doc.string(v, path + (k,))
    return out


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


def _legacy_environment(doc: Doc, value: Any, path: Path_) -> Environment:
    m = doc.mapping(value, path, ("backend",), LEGACY_ENV_FIELDS)
    data: dict[str, Any] = {"backend": doc.string(m["backend"], path + ("backend",))}
    for f in LEGACY_ENV_FIELDS:
        data[f] = doc.string(m.get(f), path + (f,), optional=True)
    return legacy_environment(data)


def _settings(doc: Doc, value: Any, path: Path_) -> BuildSettings:
    optional = (
        "tactic_sources", "tf32", "input_shapes", *_INT_SETTINGS, *_STR_SETTINGS, *TIE_FIELDS,
        "deny", "distributive_independence",
    )  # fmt: skip
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
    # Absent (every lock older than the tie settings): the default policy, docs/stability.md.
    band = doc.number(m.get("tie_band", DEFAULT_TIE_BAND), path + ("tie_band",))
    if not 0.0 <= band <= 1.0:
        doc.fail(path + ("tie_band",), f"expected a fraction from 0 to 1, got {band!r}")
    kw["tie_band"] = band
    rule = doc.string(m.get("tie_rule", DEFAULT_TIE_RULE), path + ("tie_rule",))
    if rule not in TIE_RULES:
        doc.fail(path + ("tie_rule",), f"unknown tie rule {rule!r}: use {', '.join(TIE_RULES)}")
    kw["tie_rule"] = rule
    records = doc.integer(m.get("tie_records", 1), path + ("tie_records",), minimum=1)
    if records > MAX_TIE_RECORDS:
        doc.fail(path + ("tie_records",), f"expected at most {MAX_TIE_RECORDS}, got {records}")
    kw["tie_records"] = records
    kw["deny"] = _rules(doc, m.get("deny") or [], path + ("deny",))
    di = m.get("distributive_independence", False)
    kw["distributive_independence"] = doc.boolean(di, path + ("distributive_independence",))
    return BuildSettings(**kw)


def _rules(doc: Doc, value: Any, path: Path_) -> tuple[KernelRule, ...]:
    """``settings.deny``: kernel rules (``reprobuild deny``), each once."""
    rules: list[KernelRule] = []
    for i, item in enumerate(doc.seq(value, path)):
        p = path + (i,)
        m = doc.mapping(item, p, ("kernel",), ("layer",))
        kernel = doc.string(m["kernel"], p + ("kernel",))
        layer = doc.string(m.get("layer", "*"), p + ("layer",))
        if not kernel or not layer:
            doc.fail(p, "an empty pattern", "write a pattern such as '*splitk*', or '*' for all")
        rule = KernelRule(kernel, layer)
        if rule in rules:
            doc.fail(p, f"the rule {rule.describe()} is listed twice", "delete one")
        rules.append(rule)
    return tuple(sorted(rules))


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


def _layers(doc: Doc, value: Any, path: Path_, *, timed: bool) -> list[LayerEntry]:
    entries: list[LayerEntry] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(doc.seq(value, path)):
        p = path + (i,)
        optional = (
            "kernel",
            "pinned",
            "candidates",
            *(("time", "runs", "band", "ties") if timed else ()),
        )
        m = doc.mapping(item, p, ("layer", "key", "tactic"), optional)
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
                time_ms=_time(doc, m.get("time"), p + ("time",)),
                band_ms=_time(doc, m.get("band"), p + ("band",)),
                ties=[
                    doc.tactic(t, p + ("ties", j))
                    for j, t in enumerate(doc.seq(m.get("ties") or [], p + ("ties",)))
                ],
                runs=None if m.get("runs") is None else doc.boolean(m["runs"], p + ("runs",)),
            )
        )
    return entries


def _time(doc: Doc, value: Any, path: Path_) -> float | None:
    """A recorded time: exact hex float text (``float.hex``), ``inf`` for a failed key."""
    if value is None:
        return None
    text = doc.string(value, path)
    try:
        t = float.fromhex(text) if text not in ("inf", "nan") else float(text)
    except (ValueError, OverflowError):
        doc.fail(path, f"malformed time {text[:40]!r}: expected a hex float like '0x1.8p-3'")
    if not t >= 0:
        doc.fail(path, f"a time must be >= 0 ms, got {text[:40]!r}")
    return t
