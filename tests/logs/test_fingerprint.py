"""The parser's ``fingerprint`` costs the lines added since the last one, and is the same
whenever the state is, however often it was taken on the way.

``logs.split`` takes a fingerprint after every block (a MiB); a table that spans the split
holds up to 100,000 candidates, which were all written out again at every check.
"""

from __future__ import annotations

import builtins

import pytest

from reprobuild.logs import blocks
from reprobuild.logs.parser import LogParser

HEAD = [
    "[V] [TRT] =============== Computing costs for conv",
    "[V] [TRT] *************** Autotuning format combination: Float(1,2) -> Float(3,4) ***",
    "[V] [TRT] --------------- Timing Runner: conv (CaskConvolution[0x80000009])",
]
ORPHANS = [f"[V] [TRT] Tactic: 0x{i:x} Time: 0.{i}" for i in range(1, 6)]


def _rows(start: int, n: int) -> list[str]:
    return [
        f"[V] [TRT] Tactic Name: k{i} Tactic: 0x{i:x} Time: 0.{i % 97}"
        for i in range(start, start + n)
    ]


def test_a_check_costs_the_candidates_added_since_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = LogParser()
    parser.feed_lines(ORPHANS + HEAD + _rows(1, 20_000))
    parser.fingerprint()
    shown: list[int] = []  # characters written out for the digest, per repr

    def counting_repr(value: object) -> str:
        text = builtins.repr(value)
        shown.append(len(text))
        return text

    monkeypatch.setattr(blocks, "repr", counting_repr, raising=False)
    parser.feed_lines(_rows(20_001, 3))
    parser.fingerprint()
    # the state's head and the three new candidates, not 20,000 candidates again
    assert 0 < sum(shown) < 2000, sum(shown)


@pytest.mark.parametrize("every", [1, 7, 1000])
def test_the_same_state_gives_the_same_fingerprint_however_it_was_taken(every: int) -> None:
    lines = ORPHANS + HEAD + _rows(1, 300) + HEAD + _rows(400, 50) + ORPHANS
    one = LogParser()
    one.feed_lines(lines)
    checked = LogParser()
    for i in range(0, len(lines), every):
        checked.feed_lines(lines[i : i + every])
        checked.fingerprint()
    assert checked.fingerprint() == one.fingerprint()
    other = LogParser()
    other.feed_lines(lines[:-1])
    assert other.fingerprint() != one.fingerprint()
