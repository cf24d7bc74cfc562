"""Schema-1 locks still load as they always did, and the writer's bytes do not move.

tests/fixtures/locks/ holds schema-1 locks written by the old hand-written emitter
(recorded by real reference builds, and built in code to stress quoting and escaping), each
with ``repr()`` of what the old loader read from it; scripts/make_golden_locks.py made them.
tests/fixtures/locks/v2/ holds each of them as today's writer writes it (schema 2: one
target section); the schema-1 file must load to exactly what the old loader read, and the
schema-2 file must be what the writer makes of it, byte for byte, and read back the same.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from reprobuild.lock import emit, yamlparse
from reprobuild.lock.yamlio import dumps_lock, load_lock, loads_lock

from ..conftest import sample_lock

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "locks"
LOCKS = sorted(GOLDEN.glob("*.lock"))
V2 = GOLDEN / "v2"


def _v2(path: Path) -> Path:
    return V2 / path.name


def _old_repr(lock) -> str:
    """``repr()`` of a lock as the schema-1 loader's dataclasses printed it: the flat
    environment (read back from the target's identity and advisory fields) and layer
    entries without recorded times."""
    env = lock.environment
    fields = {**env.identity_dict(), **env.advisory_dict()}
    flat = {
        "tensorrt_version": fields.get("tensorrt_version"),
        "gpu": fields.get("gpu", fields.get("cpu")),
        "compute_capability": fields.get("compute_capability"),
        "cuda_version": fields.get("cuda_runtime"),
        "driver_version": fields.get("driver_version", fields.get("numerics")),
    }
    env_text = ", ".join([f"backend={env.backend!r}", *(f"{k}={v!r}" for k, v in flat.items())])
    layers = ", ".join(
        f"LayerEntry(key={e.key!r}, layer={e.layer!r}, tactic={e.tactic!r}, "
        f"kernel={e.kernel!r}, pinned={e.pinned!r}, candidates={e.candidates!r})"
        for e in lock.layers
    )
    # the tie settings, kernel rules and distributive independence came later (absent: the
    # default policy, no rule, off); the old loader had none
    settings = re.sub(
        r", tie_band=[^,]*, tie_rule='[^']*', tie_records=\d+, deny=\(\), "
        r"distributive_independence=False",
        "",
        repr(lock.settings),
    )
    return (
        f"Lock(model={lock.model!r}, environment=Environment({env_text}), "
        f"settings={settings}, layers=[{layers}], precision={lock.precision!r}, "
        f"schema={lock.schema!r})"
    )


_PAIR = re.compile(r"\\ud([89ab][0-9a-f]{2})\\ud([c-f][0-9a-f]{2})")


def _joined(text: str) -> str:
    """Surrogate pairs as one character: the old loader read an escaped pair as one
    character in the layers (its line reader used ``json.loads``) but as two elsewhere
    (PyYAML); PyYAML now reads every section, so the pair stays two, and is written back
    exactly as it was."""

    def join(m: re.Match[str]) -> str:
        hi, lo = int("d" + m.group(1), 16), int("d" + m.group(2), 16)
        return chr(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))

    return _PAIR.sub(join, text)


def test_goldens_exist() -> None:
    names = {p.stem for p in LOCKS}
    assert {"recorded_mlp", "recorded_cnn", "recorded_fp16_middle", "names", "full"} <= names
    assert "pinned: true" in (GOLDEN / "recorded_cnn.lock").read_text()
    assert "precision:" in (GOLDEN / "recorded_fp16_middle.lock").read_text()


@pytest.mark.parametrize("path", LOCKS, ids=[p.stem for p in LOCKS])
def test_writer_reproduces_golden_bytes(path: Path) -> None:
    v1 = load_lock(path)
    assert v1.schema == 1 and not v1.others and not v1.outputs
    assert all(e.time_ms is None for e in v1.layers)  # schema 1 recorded no times
    assert dumps_lock(v1).encode("utf-8") == _v2(path).read_bytes()
    v2 = load_lock(_v2(path))
    assert v2.schema == 2 and dumps_lock(v2).encode("utf-8") == _v2(path).read_bytes()
    assert _old_repr(v2).replace("schema=2", "schema=1") == _old_repr(v1)


@pytest.mark.parametrize("path", LOCKS, ids=[p.stem for p in LOCKS])
def test_loader_reads_what_the_old_loader_read(path: Path) -> None:
    expected = path.with_suffix(".repr").read_text(encoding="utf-8")
    assert _joined(_old_repr(load_lock(path)) + "\n") == _joined(expected)


@pytest.mark.parametrize("path", LOCKS, ids=[p.stem for p in LOCKS])
def test_pure_python_fallback_gives_the_same_bytes_and_locks(path: Path, monkeypatch) -> None:
    """Without libyaml, PyYAML's pure loader and emitter must give the same results."""
    fast = load_lock(path)
    monkeypatch.setattr(emit, "DUMPER", yaml.SafeDumper)
    monkeypatch.setattr(yamlparse, "CLoader", yamlparse.PyLoader)
    slow = load_lock(path)
    assert slow == fast or _joined(repr(slow)) == _joined(repr(fast))
    assert dumps_lock(slow).encode("utf-8") == _v2(path).read_bytes()


def test_edited_golden_loads_equal() -> None:
    """A lock that leaves the writer's shape (comments, other quoting) loads the same."""
    path = V2 / "recorded_cnn.lock"
    text = path.read_text()
    edited = text.replace("        pinned: false\n", "        pinned: false  # reviewed\n")
    edited = re.sub(r'tactic: "(0x[0-9a-f]+)"', r"tactic: '\1'", edited)
    assert edited != text
    assert loads_lock(edited) == load_lock(path)
    assert dumps_lock(loads_lock(edited)) == text


def _old_scalar(text: str) -> str:
    """How the format quotes a string (the rule of the hand-written emitter, as a spec)."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_./\-]*", text) and text.lower() not in {
        "true",
        "false",
        "yes",
        "no",
        "on",
        "off",
        "null",
        "y",
        "n",
        "none",
    }:
        return text
    unsafe = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")
    return unsafe.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(text, ensure_ascii=False))


_ANY_TEXT = st.text(st.characters(blacklist_categories=()), max_size=30)  # surrogates too


@settings(max_examples=300, deadline=None)
@given(_ANY_TEXT, _ANY_TEXT | st.none())
def test_any_name_is_written_as_the_format_always_wrote_it(layer: str, kernel: str | None) -> None:
    lock = sample_lock(1)
    entry = lock.layers[0]
    entry.layer, entry.kernel = layer, kernel
    text = dumps_lock(lock)
    assert f"\n      - layer: {_old_scalar(layer)}\n" in text
    expected_kernel = "null" if kernel is None else _old_scalar(kernel)
    assert f"\n        kernel: {expected_kernel}\n" in text
    back = loads_lock(text)
    assert (back.layers[0].layer, back.layers[0].kernel) == (layer, kernel)
    assert dumps_lock(back) == text
