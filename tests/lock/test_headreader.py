"""The YAML-free head reader against PyYAML: it gives ``yaml.safe_load``'s data or declines.

Held to that on random canonical heads (environment strings, tactic sources, input
shapes) and on random mutations of them; and a locked rebuild's lock load must not
import PyYAML at all (what the reader is for).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from reprobuild.errors import LockError
from reprobuild.lock import yamlio
from reprobuild.lock.headreader import read_head
from reprobuild.lock.model import ExternalFile, Lock
from reprobuild.lock.yamlio import dumps_lock, loads_lock
from reprobuild.types import BuildSettings, Environment

from ..conftest import ROOT, sample_lock
from .test_linereader import _ANY, _MUTANTS, _TEXT, _strict

_NAME = st.text("abcdefgh_:-/ 0", min_size=0, max_size=8)
_DIMS = st.lists(st.integers(0, 2**40), min_size=1, max_size=4).map(tuple)
_SOURCES = st.lists(_TEXT, max_size=4).map(tuple) | st.none()


@st.composite
def _locks(draw: st.DrawFn) -> Lock:
    shapes = draw(st.lists(st.tuples(_NAME, _DIMS, _DIMS, _DIMS), max_size=3))
    unique = tuple({s[0]: s for s in shapes}.values())
    return replace(
        sample_lock(1),
        environment=Environment(
            backend=draw(st.sampled_from(["reference", "tensorrt"])),
            tensorrt_version=draw(_TEXT | st.none()),
            gpu=draw(_TEXT | st.none()),
            driver_version=draw(_TEXT | st.none()),
        ),
        settings=BuildSettings(
            optimization_level=draw(st.integers(0, 5)),
            workspace=draw(st.integers(0, 2**63) | st.none()),
            tactic_sources=draw(_SOURCES),
            tf32=draw(st.booleans()),
            tiling_optimization_level=draw(_TEXT | st.none()),
            input_shapes=unique,
        ),
    )


def _head(text: str) -> str:
    return text[: text.index("\nlayers:") + 1]


def _agrees(head: str) -> dict | None:
    """``read_head``'s result, checked against PyYAML's whenever it gives one."""
    got = read_head(head)
    if got is not None:
        assert got == yaml.safe_load(head)
    return got


@settings(max_examples=300, deadline=None)
@given(_locks())
def test_random_canonical_heads_read_as_yaml_reads_them(lock: Lock) -> None:
    text = dumps_lock(lock)
    _agrees(_head(text))
    fast = yamlio._line_lock(text, "t.lock")
    assert fast is not None and fast == _strict(text)


def test_plain_heads_are_taken() -> None:
    """The common head (no external data, no precision plan) never needs PyYAML."""
    lock = replace(
        sample_lock(1),
        settings=BuildSettings(
            tactic_sources=("CUBLAS", "yes", "a b"),
            input_shapes=(("input:0", (1, 3), (8, 3), (32, 3)), ("x", (1,), (2,), (3,))),
        ),
    )
    head = _head(dumps_lock(lock))
    assert "input_shapes:\n    " in head and '"yes"' in head
    assert _agrees(head) is not None


@settings(max_examples=500, deadline=None)
@given(_locks(), st.data())
def test_mutated_heads_read_as_yaml_reads_them_or_decline(lock: Lock, data: st.DataObject) -> None:
    head = _head(dumps_lock(lock))
    at = data.draw(st.integers(0, len(head)))
    cut = data.draw(st.integers(0, 3))
    head = head[:at] + data.draw(_MUTANTS | _ANY) + head[at + cut :]
    if not head.endswith("\n"):
        head += "\n"
    _agrees(head)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("  tf32: true\n", "  tf32: true  # reviewed\n"),  # a comment after a value
        ("  tf32: true\n", "  tf32: yes\n"),  # YAML 1.1's other booleans
        ("  optimization_level: 3\n", "  optimization_level: 3.0\n"),  # a float
        ("  optimization_level: 3\n", "  optimization_level: 0x3\n"),
        ("  optimization_level: 3\n", "  optimization_level: 03\n"),  # octal in YAML 1.1
        ("  tf32: true\n", "  tf32: true\n\n"),  # a blank line
        ("  tf32: true\n", "  tf32: true\n  tf32: false\n"),  # a repeated key
        ("  tf32: true\n", "\ttf32: true\n"),  # a tab
        ("  tf32: true\n", "  tf32:\n"),  # a key with nothing under it
        ("  tf32: true\n", "  tf32: \n"),  # YAML's null
        ("  tf32: true\n", "  tf32: true\n    more: 1\n"),  # deeper than an open mapping
        ("schema: 1\n", "---\nschema: 1\n"),
        ("schema: 1\n", "schema: !!int 1\n"),
        ("schema: 1\n", "schema: &a 1\n"),
        ("  backend: reference\n", "  backend: 'reference'\n"),
        ("  backend: reference\n", '  backend: "a\\x41"\n'),  # an escape the writer never makes
        ("# Review", "#\rReview"),  # a YAML line break inside a comment
    ],
)
def test_reader_declines_what_only_yaml_reads(old: str, new: str) -> None:
    head = _head(dumps_lock(sample_lock(1)))
    assert old in head
    assert read_head(head.replace(old, new, 1)) is None


def test_sections_with_block_sequences_go_to_yaml() -> None:
    """External data and precision plans are block sequences: PyYAML reads those heads,
    and the lock is the same."""
    lock = replace(
        sample_lock(1),
        model=replace(sample_lock(1).model, external_data=[ExternalFile("w.bin", "cd" * 32)]),
    )
    text = dumps_lock(lock)
    assert read_head(_head(text)) is None
    assert loads_lock(text) == lock


def test_a_canonical_lock_loads_without_pyyaml(tmp_path) -> None:
    path = tmp_path / "t.lock"
    path.write_text(dumps_lock(sample_lock(3)), encoding="utf-8")
    code = (
        "import sys\n"
        "from reprobuild.lock.yamlio import load_lock\n"
        f"lock = load_lock({str(path)!r})\n"
        "print(len(lock.layers), 'yaml' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.split() == ["3", "False"]


def test_errors_in_a_plain_head_keep_their_position() -> None:
    """The reader reads, validation refuses: the strict path says where."""
    text = dumps_lock(sample_lock(1)).replace("  tf32: true", "  tf32: 7")
    assert read_head(_head(text)) is not None
    line = text.splitlines().index("  tf32: 7") + 1
    with pytest.raises(LockError, match=rf"^tactics\.lock:{line}:9: settings\.tf32"):
        loads_lock(text)
