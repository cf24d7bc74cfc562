"""``diff`` and ``merge`` agree on whether two locks are the same: one definition
(``reprobuild.lock.diff.diff_locks``) decides both, over everything that decides the engine."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from reprobuild.lock.diff import NOT_COMPARED, diff_locks, ran_keys
from reprobuild.lock.model import LayerEntry, Lock, OutputDigest
from reprobuild.lock.yamlio import save_lock

from ..conftest import sample_lock


def _two_keys() -> Lock:
    """layer0 has two keys (two format combinations); layer1 and layer2 one each. The
    first key of layer0 runs (the lower recorded time); the engine gave one digest."""
    lock = sample_lock(3)
    second = dataclasses.replace(lock.layers[1], key=f"0x{99:032x}", layer="layer0")
    lock.layers.append(second)
    times = {lock.layers[0].key: 4.780, second.key: 4.856}
    for e in lock.layers:
        e.time_ms = times.get(e.key, 1.0)
    lock.outputs = [OutputDigest("seeded:0", "aa" * 32)]
    lock.canonicalize()
    return lock


def _entry(lock: Lock, key_index: int) -> LayerEntry:
    return lock.by_key()[f"0x{key_index:032x}"]


def _swap_key_choice(lock: Lock) -> None:
    _entry(lock, 0).time_ms, _entry(lock, 99).time_ms = 4.856, 4.780


def _multi_key_time(lock: Lock) -> None:
    _entry(lock, 99).time_ms = 4.9  # the same key still runs; its rival's time moved


def _output_digest(lock: Lock) -> None:
    lock.outputs = [OutputDigest("seeded:0", "bb" * 32)]


def _tactic(lock: Lock) -> None:
    e = _entry(lock, 2)
    e.tactic, e.kernel = e.candidates[1].tactic, e.candidates[1].kernel


def _pin(lock: Lock) -> None:
    _entry(lock, 2).pinned = True


def _noise_only(lock: Lock) -> None:
    """What two recordings of one engine may differ in: the band, the near-ties, the order
    candidates were written in, and the time of a layer's only key."""
    e = _entry(lock, 2)
    e.band_ms, e.ties = 0.05, [e.tactic, e.candidates[1].tactic]
    e.candidates = list(reversed(e.candidates))
    e.time_ms = 1.5


DIFFERENT: dict[str, Callable[[Lock], None]] = {
    "key choice": _swap_key_choice,
    "time of a layer of several keys": _multi_key_time,
    "output digest": _output_digest,
    "tactic": _tactic,
    "pin": _pin,
}


def _pair(tmp_path: Path, edit: Callable[[Lock], None]) -> tuple[Path, Path]:
    a, b = tmp_path / "a.lock", tmp_path / "b.lock"
    save_lock(_two_keys(), a)
    other = _two_keys()
    edit(other)
    save_lock(other, b)
    return a, b


@pytest.mark.parametrize("name", sorted(DIFFERENT))
def test_diff_and_merge_both_see_a_difference(cli, tmp_path: Path, name: str) -> None:
    a, b = _pair(tmp_path, DIFFERENT[name])
    r = cli("diff", str(a), str(b))
    assert r.code == 1 and "locks are equivalent" not in r.out, r
    assert json.loads(cli("diff", str(a), str(b), "--json").out)["differs"] is True
    out = tmp_path / "m.lock"
    r = cli("merge", str(a), str(b), "--out", str(out))
    assert r.code == 2 and "differs from the one in" in r.err, r
    assert not out.exists()


def test_diff_and_merge_both_see_the_same_lock(cli, tmp_path: Path) -> None:
    a, b = _pair(tmp_path, _noise_only)
    r = cli("diff", str(a), str(b))
    assert (r.code, r.out.strip()) == (0, "locks are equivalent"), r
    r = cli("merge", str(a), str(b), "--out", str(tmp_path / "m.lock"))
    assert r.code == 0, r


def test_the_key_choice_is_named_both_ways(cli, tmp_path: Path) -> None:
    a, b = _pair(tmp_path, _swap_key_choice)
    data = json.loads(cli("diff", str(a), str(b), "--json").out)
    assert data["key_choice_changed"] == [
        {"layer": "layer0", "key_a": f"0x{0:032x}", "key_b": f"0x{99:032x}"}
    ]
    assert {c["key_b"]: c["fields"] for c in data["changed"]} == {
        f"0x{0:032x}": ["time_ms"],
        f"0x{99:032x}": ["time_ms"],
    }
    out = cli("diff", str(a), str(b)).out
    assert f"key choice changed: layer0 runs 0x{0:032x} -> 0x{99:032x}" in out
    assert "1 key choice changed" in out
    a, b = _pair(tmp_path, _output_digest)
    data = json.loads(cli("diff", str(a), str(b), "--json").out)
    assert data["outputs_changed"] == [
        {"inputs": "seeded:0", "sha256_a": "aa" * 32, "sha256_b": "bb" * 32}
    ]


def test_a_field_is_compared_unless_listed_as_not_deciding() -> None:
    """A field added to LayerEntry counts in the definition without touching it."""
    compared = {f.name for f in dataclasses.fields(LayerEntry)} - set(NOT_COMPARED)
    assert {"tactic", "kernel", "pinned", "candidates", "time_ms", "layer"} <= compared
    one, two = _two_keys(), _two_keys()
    assert not diff_locks(one, two).differs
    for name in sorted(DIFFERENT):
        two = _two_keys()
        DIFFERENT[name](two)
        assert diff_locks(one, two).differs, name


def test_ran_keys_is_the_lowest_time_of_a_layer_of_several_keys() -> None:
    lock = _two_keys()
    assert ran_keys(lock.layers) == {"layer0": f"0x{0:032x}"}
    _swap_key_choice(lock)
    assert ran_keys(lock.layers) == {"layer0": f"0x{99:032x}"}
