"""The layers read back from the writer's own text (``textread``): the same lock as the
parse events give, taken only when the writer would write that very text.

Every mutation test of ``test_yamlio.py`` (``loads_lock`` against the composing path on
edited locks) runs through this reader too; here, that it is really taken, and that text
which is not the writer's is declined, never misread.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from reprobuild.errors import LockError
from reprobuild.lock import yamlparse
from reprobuild.lock.model import Lock
from reprobuild.lock.textread import split_layers
from reprobuild.lock.yamlio import dumps_lock, loads_lock

from ..conftest import sample_lock
from .test_yamlio import _both_ways, _locks


def _events_only(text: str) -> Lock | str:
    """The lock as the parse events alone read it (the composing path's, else its error)."""
    fast, general = _both_ways(text)
    return general if fast is None else fast


def _reads_as_events_do(text: str) -> None:
    """``loads_lock`` gives the events' lock, or their error message word for word."""
    expected = _events_only(text)
    if isinstance(expected, str):
        with pytest.raises(LockError) as info:
            loads_lock(text, "t.lock")
        assert str(info.value) == expected
    else:
        assert loads_lock(text) == expected


@settings(max_examples=200, deadline=None)
@given(_locks())
def test_the_writers_text_is_read_as_text_and_gives_the_events_lock(lock: Lock) -> None:
    text = dumps_lock(lock)
    assert loads_lock(text) == _events_only(text) == lock


def test_several_targets_each_take_their_block() -> None:
    from reprobuild.lock.targets import merge

    a, b = sample_lock(3), sample_lock(2)
    b.environment = type(b.environment).make("reference", {"cpu": "other"}, {})
    text = dumps_lock(merge([("a", a), ("b", b)]))
    head, blocks = split_layers(text)
    assert [len(x) for x in blocks] == [3, 2] and "reprobuild_layers_1" in head
    assert loads_lock(text) == _events_only(text)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("        pinned: false\n", "        pinned: false  # reviewed\n"),
        ("        pinned: false\n", "        pinned: no\n"),
        ('        tactic: "0x', '        tactic: "0X'),
        ('key: "0x0', 'key: "0X0'),
        ("          - {tactic:", "          - { tactic:"),
        ("        kernel: kern_0\n", "        kernel: 'kern_0'\n"),
        ("      - layer: ", "      -  layer: "),
    ],
)
def test_text_the_writer_would_not_write_is_declined(old: str, new: str) -> None:
    text = dumps_lock(sample_lock(2))
    assert old in text
    edited = text.replace(old, new, 1)
    assert split_layers(edited) is None
    _reads_as_events_do(edited)


def test_a_block_inside_a_string_of_the_head_is_never_taken_for_layers() -> None:
    """A block scalar in the head can hold text shaped like a layers block: the marker put
    in its place is never at a target's layers, so the events read the whole lock."""
    text = dumps_lock(sample_lock(1))
    layers = text[text.index("    layers:\n") :]
    block = layers[: layers.index("\n", layers.index("candidates:\n") + 40) + 1]
    fake = "model:\n  path: |\n" + block
    edited = text.replace("model:\n  path: model.onnx\n", fake, 1)
    assert split_layers(edited) is not None  # the fake block is cut out too...
    lock = loads_lock(edited)
    assert lock == _events_only(edited)  # ...and still read as the string it is
    assert lock.model.path.startswith("layers:\n  - layer: ")


def test_the_bulk_lock_reads_through_text() -> None:
    text = yamlparse.emit_lock(sample_lock(50))
    assert split_layers(text) is not None
