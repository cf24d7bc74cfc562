"""The line-level layers reader and writer against the strict YAML path and PyYAML's emitter.

The line reader may only ever give what the strict path gives, or decline; the line
writer only ever the emitter's bytes, or decline. Both are held to that on the goldens, on
random canonical locks, and (the reader) on random mutations of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprobuild.errors import LockError
from reprobuild.lock import yamlio, yamlparse
from reprobuild.lock.linewriter import layer_lines
from reprobuild.lock.model import LayerEntry, Lock, LockCandidate
from reprobuild.lock.yamlio import dumps_lock, loads_lock

from ..conftest import sample_lock

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "locks"
LOCKS = sorted(GOLDEN.glob("*.lock"))


def _strict(text: str) -> Lock:
    """The full YAML path alone, as it was before the line reader."""
    return yamlparse.strict_lock(text, "t.lock")


def _same(a: Lock, b: Lock) -> bool:
    """Equal, where NaN floats in a precision plan count as equal to themselves."""
    return a == b or repr(a) == repr(b)


@pytest.mark.parametrize("path", LOCKS, ids=[p.stem for p in LOCKS])
def test_line_reader_reads_every_golden_as_the_strict_path(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    fast = yamlio._line_lock(text, "t.lock")
    assert fast is not None, "goldens are canonical: the line reader must take them"
    assert _same(fast, _strict(text))


@pytest.mark.parametrize("path", LOCKS, ids=[p.stem for p in LOCKS])
def test_line_writer_writes_the_goldens_as_the_emitter(path: Path) -> None:
    lock = loads_lock(path.read_bytes())
    lock.canonicalize()
    assert yamlio._dumps(lock) == yamlparse.emit_lock(lock)


_WORD = st.from_regex(r"[A-Za-z_][A-Za-z0-9_./\-]{0,12}", fullmatch=True)
_TRICKY = st.sampled_from(
    ["null", "Null", "true", "No", "y", "~", "0x1f", "", " a", "a b", "a: b", "#x", "é", "\t"]
)
_ANY = st.text(st.characters(blacklist_categories=()), max_size=12)  # surrogates too
_TEXT = _WORD | _TRICKY | _ANY
_TACTIC = st.integers(0, 2**64 - 1)


@st.composite
def _locks(draw: st.DrawFn) -> Lock:
    lock = sample_lock(1)
    n = draw(st.integers(0, 6))
    keys = draw(st.lists(st.integers(0, 2**128 - 1), min_size=n, max_size=n, unique=True))
    lock.layers = [
        LayerEntry(
            key=f"0x{k:032x}",
            layer=draw(_TEXT),
            tactic=draw(_TACTIC),
            kernel=draw(_TEXT | st.none()),
            pinned=draw(st.booleans()),
            candidates=draw(
                st.lists(st.builds(LockCandidate, _TACTIC, _TEXT | st.none()), max_size=4)
            ),
        )
        for k in keys
    ]
    return lock


@settings(max_examples=300, deadline=None)
@given(_locks())
def test_random_canonical_locks_read_alike_and_write_alike(lock: Lock) -> None:
    text = dumps_lock(lock)
    assert text == yamlparse.emit_lock(lock), "the line writer must give the emitter's bytes"
    fast = yamlio._line_lock(text, "t.lock")
    assert fast is not None, "every canonical lock is for the line reader"
    assert _same(fast, _strict(text))
    assert fast == lock


_MUTANTS = st.sampled_from(
    ['"', "'", "\\", " ", "\n", "#", "&a ", "*a", "!!str ", "- ", ":", "{", "}", "[", "]", ",",
     "\t", "\r", "\x85", "\u2028", "\ufeff", "\x00", "0", "x", "null", "true", "~", "..."]
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(_locks(), st.data())
def test_line_reader_declines_or_agrees_on_mutated_locks(lock: Lock, data: st.DataObject) -> None:
    """Change the text anywhere: the line reader gives the strict path's lock, or None
    (then the strict path alone decides, error message and position included)."""
    text = dumps_lock(lock)
    at = data.draw(st.integers(0, len(text)))
    cut = data.draw(st.integers(0, 3))
    text = text[:at] + data.draw(_MUTANTS | _ANY) + text[at + cut :]
    fast = yamlio._line_lock(text, "t.lock")
    if fast is None:
        return
    assert _same(fast, _strict(text))


def test_line_reader_declines_what_only_yaml_reads() -> None:
    """Comments, other quoting, repeated keys, words YAML reads as non-strings."""
    text = dumps_lock(sample_lock(2))
    for old, new in [
        ("    pinned: false\n", "    pinned: false  # reviewed\n"),
        ('tactic: "0x1000"', "tactic: '0x1000'"),
        ('tactic: "0x1000"', "tactic: 0x1000"),
        ("kernel: kern_0\n", "kernel: yes\n"),
        ("0x00000000000000000000000000000001", "0x00000000000000000000000000000000"),
        ("layer: layer1", "layer: null"),
    ]:
        assert old in text
        edited = text.replace(old, new, 1)
        assert yamlio._line_lock(edited, "t.lock") is None
    assert yamlio._line_lock(text, "t.lock") == loads_lock(text)


def test_errors_in_layers_keep_their_position() -> None:
    text = dumps_lock(sample_lock(2)).replace('tactic: "0x1010"', 'tactic: "0xzz"', 1)
    line = text.splitlines().index('    tactic: "0xzz"') + 1
    with pytest.raises(LockError, match=rf"^tactics\.lock:{line}:13: layers\[1\]\.tactic"):
        loads_lock(text)


def test_line_writer_declines_strings_the_emitter_escapes() -> None:
    lock = sample_lock(1)
    assert layer_lines(lock.layers) is not None
    for name in ('a"b', "a\\b", "a\nb", "\x85", "\ud800"):
        lock.layers[0].layer = name
        assert layer_lines(lock.layers) is None
        assert dumps_lock(lock) == yamlparse.emit_lock(lock)


def test_line_reader_declines_keys_with_nothing_under_them() -> None:
    """``layers:`` or ``candidates:`` as the last line is YAML's null, not an empty list:
    the strict path's error, not an empty lock."""
    text = dumps_lock(sample_lock(2))
    no_layers = text[: text.index("\nlayers:\n") + len("\nlayers:\n")]
    assert yamlio._line_lock(no_layers, "t.lock") is None
    with pytest.raises(LockError, match=r"layers: expected a list, got null"):
        loads_lock(no_layers)
    last = text.rindex("    candidates:\n") + len("    candidates:\n")
    assert yamlio._line_lock(text[:last], "t.lock") is None
    assert loads_lock(text[:last]).layers[1].candidates == []
