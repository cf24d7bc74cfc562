"""The written-out line readers in ``logs/lines.py`` (string methods, no backtracking) are
held to the regular expressions they replace: the written-out readers are the faster ones,
the patterns the plainer statement of what a line means."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprobuild.logs.lines import (
    WARNINGS,
    WS,
    fastest_parts,
    runner_parts,
    set_tactic_parts,
    strip_prefix,
    warning_kind,
)
from reprobuild.logs.values import tactic_to_int

FLAGS = re.ASCII
PROFILED = re.compile(r"(?P<layer>.*) \((?P<runner>[^()]*)\) profiling completed", FLAGS)
SET_TACTIC = re.compile(
    r"(?P<layer>.*?)\s*(?:\((?P<src>[^()]*)\)\s*)?Set Tactic Name: (?P<k>.*?)"
    r"(?: Tactic: (?P<tac>[^\s,]+))?\s*$",
    FLAGS,
)
RUNNER_TAIL = re.compile(r"(?P<layer>.*) \((?P<runner>[^()]*)\)\s*$", FLAGS)

# Pieces real lines are made of, so random lines hit the interesting cases often.
PIECES = st.sampled_from(
    [" ", "(", ")", "[", "]", ",", "\t", "conv1", "Cask", "0x1f", "12", "Tactic: ",
     " Tactic: ", "Set Tactic Name: ", "Timing Runner: ", " profiling completed",
     "Fastest Tactic: ", " Time: ", "0.5", "[TRT] ", "[V] ", "x", "\x1f"]
)  # fmt: skip
LINES = st.lists(PIECES, max_size=14).map("".join)


def _regex_set_tactic(line: str):
    m = SET_TACTIC.match(strip_prefix(line))
    if m is None:
        return None
    tac = tactic_to_int(m["tac"]) if m["tac"] else None
    return (m["layer"].strip(WS) if m["layer"] else None), m["k"].strip(WS), tac


def _regex_runner(line: str):
    i = line.find("Timing Runner: ")
    if i < 0:
        return None
    rest = line[i + 15 :].strip(WS)
    m = RUNNER_TAIL.match(rest)
    if m is not None:
        layer, runner = m["layer"].strip(WS), m["runner"].split("[", 1)[0].strip(WS) or None
    else:
        layer, runner = rest, None
    return layer, runner, layer.startswith("Optimizer Reformat")


def _regex_profiled(line: str, i: int):
    m = PROFILED.search(line, 0, i)
    if m is None:
        return "", None
    return strip_prefix(m["layer"]), m["runner"].split("[", 1)[0].strip(WS) or None


@settings(max_examples=400, deadline=None)
@given(LINES)
def test_set_tactic_reader_equals_its_regex(line: str) -> None:
    assert set_tactic_parts(line) == _regex_set_tactic(line)


@settings(max_examples=400, deadline=None)
@given(LINES)
def test_runner_reader_equals_its_regex(line: str) -> None:
    assert runner_parts(line) == _regex_runner(line)


@settings(max_examples=400, deadline=None)
@given(LINES)
def test_fastest_reader_finds_the_regexs_layer_and_runner(line: str) -> None:
    parts = fastest_parts(line)
    if parts is not None:
        assert parts[2:] == _regex_profiled(line, line.find("Fastest Tactic: "))


# Timing-cache messages (each pattern's own words, in the cases its flags allow) and pieces
# to cut them with, for the gated warning patterns.
WARNING_PHRASES = [
    ("Cache result detected as invalid", "cache-invalid"),
    ("Invalid timing cache", "cache-invalid"),
    ("detected invalid timing cache", "cache-invalid"),
    ("The Timing Cache Will Not Be Used!", "cache-not-used"),
    ("Could not read cache", "cache-not-used"),
    ("could NOT read timing cache", "cache-not-used"),
    ("Cache deserialize: Error Code 1", "cache-error"),
    ("Error Code 4: cache", "cache-error"),
    ("Timing cache MISS", "cache-miss"),
    ("Loaded 4096 bytes of timing cache", "cache-loaded"),
    ("LOADED 7 BYTES OF THE TIMING CACHE", "cache-loaded"),
    ("using existing timing cache", "cache-loaded"),
    ("Global timing cache in use", "cache-in-use"),
    ("Local timing cache in use", "cache-local"),
    ("Serialized 12 timing cache entries", "cache-serialized"),
    ("Saved 99 bytes of timing cache", "cache-serialized"),
]
WARNING_PIECES = st.sampled_from(
    [p for p, _ in WARNING_PHRASES]
    + [" ", "x", "1", "Cache", "cache", "timing ", "TIMING ", "Error Code ", "Loaded ",
       "\u0130", "\u212a", "\u03a3", "\x1e"]
)  # fmt: skip


def _first_pattern(line: str) -> str | None:
    return next((kind for kind, pattern, _ in WARNINGS if pattern.search(line)), None)


@pytest.mark.parametrize(("phrase", "kind"), WARNING_PHRASES)
def test_each_warning_phrase_gets_its_kind(phrase: str, kind: str) -> None:
    assert _first_pattern(phrase) == kind
    assert warning_kind(f"[W] [TRT] {phrase}.") == kind


@settings(max_examples=500, deadline=None)
@given(st.lists(WARNING_PIECES, max_size=8).map("".join))
def test_warning_kind_equals_the_first_pattern_that_searches(line: str) -> None:
    """The literal gates only skip searches that cannot match."""
    assert warning_kind(line) == _first_pattern(line)


def test_the_readers_on_real_lines() -> None:
    line = "[TRT] conv1 (CaskConvolution[0x80000009]) profiling completed in 0.1 seconds. "
    line += "Fastest Tactic: 0x1f Time: 0.5"
    assert fastest_parts(line) == (0x1F, 0.5, "conv1", "CaskConvolution")
    assert runner_parts("Timing Runner: conv1 (CaskConvolution[0x80000009])") == (
        "conv1", "CaskConvolution", False
    )  # fmt: skip
    assert set_tactic_parts("conv1 (scudnn) Set Tactic Name: k1 Tactic: 12") == ("conv1", "k1", 12)
