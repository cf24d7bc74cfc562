"""The lockfile format: canonical bytes, strict loading, crash-safe writing."""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reprobuild import fileio
from reprobuild.errors import LockError, UsageError
from reprobuild.lock import yamlparse
from reprobuild.lock.eventread import STR, read_lock
from reprobuild.lock.model import ExternalFile, LayerEntry, Lock, LockCandidate
from reprobuild.lock.plan import NodePrecision, PrecisionPlan, PrecisionSettings
from reprobuild.lock.yamlio import dumps_lock, load_lock, loads_lock, save_lock
from reprobuild.types import BuildSettings, Environment

from ..conftest import ROOT, sample_lock


def test_round_trip_is_byte_identical(tmp_path: Path) -> None:
    lock = sample_lock(5, dup_name=True)
    lock.layers[1].pinned = True
    lock.layers[2].layer = 'odd "name" (with parens)\x1e'
    text = dumps_lock(lock)
    again = dumps_lock(loads_lock(text))
    assert again == text
    path = tmp_path / "t.lock"
    save_lock(loads_lock(text), path)
    assert path.read_text() == text


def test_order_of_recording_does_not_change_bytes() -> None:
    a, b = sample_lock(6), sample_lock(6)
    b.layers.reverse()
    for e in b.layers:
        e.candidates.reverse()
    assert dumps_lock(a) == dumps_lock(b)


def test_one_pin_is_a_one_entry_diff() -> None:
    lock = sample_lock(20)
    before = dumps_lock(lock).splitlines()
    entry = lock.layers[7]
    entry.tactic, entry.kernel, entry.pinned = (
        entry.candidates[2].tactic,
        entry.candidates[2].kernel,
        True,
    )
    after = dumps_lock(lock).splitlines()
    changed = [
        line
        for line in difflib.unified_diff(before, after, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    # tactic, kernel and pinned of one entry: three lines out, three lines in.
    assert len(changed) == 6
    assert {line[1:].strip().split(":")[0] for line in changed} == {"tactic", "kernel", "pinned"}


def test_hex_values_load_as_integers_and_keys_normalise() -> None:
    text = dumps_lock(sample_lock(1))
    # A hand edit may write unquoted hex (YAML reads it as an int) or uppercase digits.
    edited = text.replace('tactic: "0x1000"', "tactic: 0x1000").replace(
        'key: "0x00000000000000000000000000000000"', 'key: "0X00000000000000000000000000000000"'
    )
    lock = loads_lock(edited)
    assert lock.layers[0].tactic == 0x1000
    assert lock.layers[0].key == "0x" + "0" * 32
    assert dumps_lock(lock) == text


def test_precision_section_round_trips() -> None:
    lock = sample_lock(2)
    lock.precision = PrecisionPlan(
        mode="fp16",
        settings=PrecisionSettings(keep_fp32=("^head",), max_output=256.0, fp32_accumulate=True),
        calibration="seeded:0",
        nodes=[
            NodePrecision("fc1", "MatMul", "fp16", "default", accumulate="fp32"),
            NodePrecision("head", "Softmax", "fp32", "name"),
        ],
    )
    text = dumps_lock(lock)
    assert "precision:" in text
    back = loads_lock(text)
    assert back.precision == lock.precision
    assert dumps_lock(back) == text


def _err(text: str) -> str:
    with pytest.raises(LockError) as info:
        loads_lock(text, "t.lock")
    return str(info.value)


GOOD = dumps_lock(sample_lock(2))


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda t: t.replace("schema: 2\n", ""),
            "missing 'schema' (this lockfile format is schema 2)",
        ),
        (lambda t: t.replace("schema: 2", "schema: 7"), "t.lock:3:9: schema: schema 7 is newer"),
        (lambda t: t.replace("schema: 2", "schema: one"), "expected an integer schema version"),
        (
            lambda t: t.replace(
                "    backend: reference", "    backend: reference\n    colour: red"
            ),
            "targets[0].colour: unknown field 'colour'",
        ),
        (
            lambda t: t.replace("      cpu: ", "      CPU model: "),
            "targets[0].advisory.CPU model: invalid field name",
        ),
        (
            lambda t: t.replace("pinned: false", "pinned: maybe", 1),
            "targets[0].layers[0].pinned: expected true or false, got a string 'maybe'",
        ),
        (
            lambda t: t.replace("outputs: []", "outputs:\n      - {inputs: x, sha256: y}"),
            "targets[0].outputs[0].inputs: expected 'seeded:N' or 'sha256:<64 hex>'",
        ),
        (
            lambda t: t.replace("kernel: kern_0", 'time: "0x1.8p-3x"\n        kernel: kern_0', 1),
            "targets[0].layers[0].time: malformed time",
        ),
        (
            lambda t: t.replace("kernel: kern_0", 'time: "-0x1.8p-3"\n        kernel: kern_0', 1),
            "targets[0].layers[0].time: a time must be >= 0 ms",
        ),
        (
            lambda t: t.replace("targets:\n", "targets: []\nx:\n"),
            "unknown field 'x'",
        ),
        (
            lambda t: t.replace('tactic: "0x1000"', 'tactic: "0x10zz"', 1),
            "malformed tactic hash '0x10zz'",
        ),
        (
            lambda t: t.replace('tactic: "0x1000"', 'tactic: "0x1ffffffffffffffff"', 1),
            "does not fit in 64 bits",
        ),
        (
            lambda t: t.replace('key: "0x00000000000000000000000000000001"', 'key: "0x01"'),
            "malformed timing-cache key '0x01'",
        ),
        (
            lambda t: t.replace(
                'key: "0x00000000000000000000000000000001"',
                'key: "0x00000000000000000000000000000000"',
            ),
            "key 0x00000000000000000000000000000000 already used by layers[0]",
        ),
        (lambda t: t + "schema: 2\n", "duplicate key 'schema'"),
        (lambda t: t.replace("optimization_level: 3", "optimization_level: -1"), ">= 0"),
        (lambda t: t.replace("layers:", "layers: [", 1), "invalid YAML"),
        (lambda t: "- just\n- a list\n", "expected a mapping at the top level"),
        (lambda t: "", "empty lockfile"),
        (lambda t: t.replace("  sha256: " + "ab" * 32, "  sha256: nothex"), "malformed sha256"),
    ],
)
def test_bad_locks_give_one_clear_line(edit, expected: str) -> None:
    message = _err(edit(GOOD))
    assert expected in message
    assert "\n" not in message
    assert message.startswith("t.lock")


def test_error_points_at_line_and_column() -> None:
    text = GOOD.replace("pinned: false", "pinned: 3", 1)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "pinned: 3" in s)
    assert _err(text).startswith(f"t.lock:{line}:17: ")


def test_a_label_that_is_not_its_identitys_is_refused_at_the_identity() -> None:
    """A hand-edited identity field (or label) would make the section another machine's
    while it holds this one's tactics and digests: refused at the identity's first field."""
    line = next(i for i, s in enumerate(GOOD.splitlines(), 1) if s == "      blas_kernels: Test")
    for edit in (("blas_kernels: Test", "blas_kernels: Other"), ("-Test-ec0a4d", "-Test-000000")):
        message = _err(GOOD.replace(*edit, 1))
        assert message.startswith(f"t.lock:{line}:7: targets[0].identity: gives the target "), (
            message
        )
        assert "restore the identity as it was recorded" in message and "\n" not in message


def test_missing_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(LockError, match="no such lockfile; record one"):
        load_lock(tmp_path / "absent.lock")
    bad = tmp_path / "bin.lock"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(LockError, match="not UTF-8"):
        load_lock(bad)


def test_python_objects_are_never_constructed() -> None:
    evil = GOOD.replace(
        "      cpu: ", "      cpu: !!python/object/apply:os.system ['echo hi']\n      x: ", 1
    )
    with pytest.raises(LockError):
        loads_lock(evil)


def test_crash_during_write_keeps_old_lock(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "tactics.lock"
    save_lock(sample_lock(3), path)
    before = path.read_bytes()
    new = sample_lock(3)
    new.layers[0].tactic = new.layers[0].candidates[1].tactic

    def crash(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "fsync", crash)
    with pytest.raises(UsageError, match=r"cannot write the lock \(No space left on device\)"):
        save_lock(new, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["tactics.lock"], "temporary file left behind"


def test_killed_writer_keeps_old_lock(tmp_path: Path) -> None:
    """A process killed between writing the temp file and replacing: old lock survives."""
    import subprocess
    import sys

    path = tmp_path / "tactics.lock"
    save_lock(sample_lock(3), path)
    before = path.read_bytes()
    code = (
        "import os, sys\n"
        "from reprobuild import fileio\n"
        "def die(*a):\n"
        "    os._exit(9)\n"
        "fileio.os.replace = die\n"
        "fileio.atomic_write_text(sys.argv[1], 'half written')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], timeout=60)
    assert proc.returncode == 9
    assert path.read_bytes() == before
    assert load_lock(path).layers[0].layer == "layer0"


yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        st.sampled_from(
            ["schema", "model", "environment", "settings", "layers", "precision", "junk"]
        ),
        yaml_values,
    )
)
def test_random_documents_load_or_raise_lockerror(doc: dict) -> None:
    text = yaml.safe_dump(doc)
    try:
        loads_lock(text)
    except LockError as err:
        assert "\n" not in str(err)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_load_or_raise_lockerror(data: bytes) -> None:
    try:
        loads_lock(data)
    except LockError:
        pass


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mutated_good_lock_loads_or_raises_lockerror(data: st.DataObject) -> None:
    text = GOOD
    pos = data.draw(st.integers(0, len(text) - 1))
    junk = data.draw(st.text(max_size=5))
    mutated = text[:pos] + junk + text[pos + data.draw(st.integers(0, 5)) :]
    try:
        lock = loads_lock(mutated)
    except LockError:
        return
    assert loads_lock(dumps_lock(lock)) is not None


names = st.text(min_size=1, max_size=12) | st.sampled_from(["null", "true", "No", "fc1", "a b"])


def _both_ways(text: str) -> tuple[Lock | None, Lock | str]:
    """The event reader's lock (None: it declined, or the text is no YAML) and the
    composing path's lock (or its error message), each on its own."""
    loader = yamlparse.CLoader(text)
    try:
        fast = read_lock(loader, "t.lock")
    except (yaml.YAMLError, ValueError):
        fast = None
    finally:
        loader.dispose()
    try:
        loader, root = yamlparse.compose(text, "t.lock")
    except LockError as err:
        return fast, str(err)
    try:
        return fast, yamlparse.any_lock(loader, root, "t.lock")
    except LockError as err:
        return fast, str(err)
    finally:
        loader.dispose()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(names, st.none() | names, st.booleans()), min_size=1, max_size=5))
def test_event_reader_reads_what_yaml_reads(rows) -> None:
    """The event reader must take the writer's shape and agree with PyYAML exactly."""
    lock = sample_lock(len(rows))
    for i, (entry, (layer, kernel, pinned)) in enumerate(zip(lock.layers, rows, strict=True)):
        entry.layer, entry.kernel, entry.pinned = layer, kernel, pinned
        entry.candidates[1] = type(entry.candidates[1])(entry.candidates[1].tactic, kernel)
        entry.time_ms = None if i % 2 else 0.1 * (i + 1)  # a recorded time, or none
    text = dumps_lock(lock)
    fast, general = _both_ways(text)
    assert fast is not None
    assert fast == general == lock
    raw = yaml.safe_load(text)
    assert [
        {
            "layer": e.layer,
            "key": e.key,
            "tactic": f"0x{e.tactic:x}",
            **({} if e.time_ms is None else {"time": e.time_ms.hex()}),
            "kernel": e.kernel,
            "pinned": e.pinned,
            "candidates": [{"tactic": f"0x{c.tactic:x}", "kernel": c.kernel} for c in e.candidates],
        }
        for e in fast.layers
    ] == raw["targets"][0]["layers"]
    dumped = yaml.safe_dump(raw)  # other key order, block candidates, plain '0x..' quoted
    assert _both_ways(dumped) == (lock, lock)


def test_layer_field_names_are_strings_to_yaml() -> None:
    """The event reader takes these keys as strings without resolving them."""
    resolver = yaml.resolver.Resolver()
    for name in ("layer", "key", "tactic", "kernel", "pinned", "candidates"):
        assert resolver.resolve(yaml.ScalarNode, name, (True, False)) == STR


_MUTANTS = st.sampled_from(
    ['"', "'", "\\", " ", "\n", "#", "&a ", "*a", "!!str ", "- ", ":", "{", "}", "[", "]", ",",
     "\t", "\r", "\x85", "\u2028", "\ufeff", "0", "x", "null", "true", "~", "...", "<<: "]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_event_reader_agrees_or_declines_on_edited_locks(data: st.DataObject) -> None:
    """Change the text anywhere: the event reader gives the composing path's lock, or
    declines (then the composing path alone decides, error message and position included)."""
    text = GOOD.replace("layer1", "a b", 1).replace("kern_1", "null", 1)
    at = data.draw(st.integers(0, len(text)))
    cut = data.draw(st.integers(0, 3))
    text = text[:at] + data.draw(_MUTANTS | st.text(max_size=3)) + text[at + cut :]
    fast, general = _both_ways(text)
    if fast is not None:
        assert fast == general
    assert (loads_lock(text) if isinstance(general, Lock) else _err(text)) == general


def test_non_canonical_edit_still_loads() -> None:
    text = GOOD.replace("        pinned: false\n", "        pinned: false   # reviewed\n", 1)
    assert loads_lock(text).layers[0].pinned is False
    flow = GOOD.replace("        kernel: kern_0\n", "        kernel: 'kern_0'\n", 1)
    assert loads_lock(flow).layers[0].kernel == "kern_0"


def test_layer_errors_still_point_at_line_and_column() -> None:
    """Anything unusual in the layers leaves the fast walk; the message keeps its place."""
    text = GOOD.replace(
        "        kernel: kern_0\n", "        kernel: kern_0\n        kernel: again\n", 1
    )
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "kernel: again" in s)
    assert _err(text).startswith(f"t.lock:{line}:9: duplicate key 'kernel'")
    text = GOOD.replace(
        "        pinned: false\n", "        pinned: false\n        colour: red\n", 1
    )
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "colour" in s)
    assert _err(text).startswith(
        f"t.lock:{line}:17: targets[0].layers[0].colour: unknown field 'colour'"
    )
    text = GOOD.replace('tactic: "0x1010"', "tactic: !!binary aGk=", 1)
    assert "targets[0].layers[1].tactic: malformed tactic hash b'hi'" in _err(text)


def test_aliases_are_refused_and_merge_keys_read_as_the_safe_loader_reads_them() -> None:
    text = GOOD.replace("model:\n", "model: &env\n", 1).replace(
        "settings:\n", "extra: *env\nsettings:\n", 1
    )
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "&env" in s)
    assert _err(text).startswith(f"t.lock:{line}:")
    assert "anchors and aliases (&name, *name) are not allowed" in _err(text)
    scalar = GOOD.replace("kernel: kern_0", "kernel: &k kern_0", 1).replace(
        "kernel: kern_1", "kernel: *k", 1
    )
    assert "anchors and aliases" in _err(scalar)
    assert "&" not in GOOD  # an '&' inside a value is no anchor:
    assert loads_lock(GOOD.replace("kernel: kern_0", "kernel: kern&0", 1)).layers[0].kernel == (
        "kern&0"
    )
    merged = GOOD.replace("    identity:\n", "    identity:\n      <<: {blas_kernels: other}\n", 1)
    assert loads_lock(merged).environment.identity_dict() == {"blas_kernels": "Test"}


def test_lone_surrogates_round_trip() -> None:
    """libyaml refuses a lone surrogate; the pure parser reads it, as locks always could."""
    lock = sample_lock(1)
    lock.layers[0].layer = "bad\ud800name"
    text = dumps_lock(lock)
    assert '"bad\\ud800name"' in text
    assert loads_lock(text).layers[0].layer == "bad\ud800name"
    assert dumps_lock(loads_lock(text)) == text


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    assert "t.lock" in _err("a: " + "[" * 100_000)


_WORD = st.from_regex(r"[A-Za-z_][A-Za-z0-9_./\-]{0,12}", fullmatch=True)
_TRICKY = st.sampled_from(
    ["null", "Null", "true", "No", "y", "~", "0x1f", "", " a", "a b", "a: b", "#x", "é", "\t"]
)
_TEXT = _WORD | _TRICKY | st.text(st.characters(blacklist_categories=()), max_size=12)
_TACTIC = st.integers(0, 2**64 - 1)
_SHAPE_NAME = st.text("abcdefgh_:-/ 0", max_size=8)
_DIMS = st.lists(st.integers(0, 2**40), min_size=1, max_size=4).map(tuple)


@st.composite
def _locks(draw: st.DrawFn) -> Lock:
    """Any head (environment strings, tactic sources, input shapes) with any layers."""
    shapes = draw(st.lists(st.tuples(_SHAPE_NAME, _DIMS, _DIMS, _DIMS), max_size=3))
    n = draw(st.integers(0, 5))
    keys = draw(st.lists(st.integers(0, 2**128 - 1), min_size=n, max_size=n, unique=True))
    return replace(
        sample_lock(0),
        environment=Environment.make(
            draw(st.sampled_from(["reference", "tensorrt"])),
            {"tensorrt_version": draw(_TEXT | st.none()), "gpu": draw(_TEXT | st.none())},
            {"driver_version": draw(_TEXT | st.none())},
        ),
        settings=BuildSettings(
            optimization_level=draw(st.integers(0, 5)),
            workspace=draw(st.integers(0, 2**63) | st.none()),
            tactic_sources=draw(st.lists(_TEXT, max_size=4).map(tuple) | st.none()),
            tf32=draw(st.booleans()),
            tiling_optimization_level=draw(_TEXT | st.none()),
            input_shapes=tuple(sorted({s[0]: s for s in shapes}.values())),  # as read back
        ),
        layers=[
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
        ],
    )


@settings(max_examples=200, deadline=None)
@given(_locks())
def test_random_locks_round_trip(lock: Lock) -> None:
    text = dumps_lock(lock)
    back = loads_lock(text)
    assert back == lock
    assert dumps_lock(back) == text


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("  tf32: true\n", "  tf32: true  # reviewed\n"),  # a comment after a value
        ("  tf32: true\n", "  tf32: yes\n"),  # YAML 1.1's other booleans
        ("  optimization_level: 3\n", "  optimization_level: 0x3\n"),
        ("  optimization_level: 3\n", "  optimization_level: 03\n"),  # octal in YAML 1.1
        ("  tf32: true\n", "  tf32: true\n\n"),  # a blank line
        ("schema: 2\n", "---\nschema: 2\n"),
        ("schema: 2\n", "schema: !!int 2\n"),
        ("schema: 2\n", "schema: &a 2\n"),  # an anchor never used is no alias
        ("    backend: reference\n", "    backend: 'reference'\n"),
        ("        pinned: false\n", "        pinned: false  # reviewed\n"),
        ('tactic: "0x1000"', "tactic: '0x1000'"),
    ],
)
def test_edits_yaml_reads_alike_load_alike(old: str, new: str) -> None:
    text = dumps_lock(sample_lock(1))
    assert old in text
    assert loads_lock(text.replace(old, new, 1)) == sample_lock(1)


_TF32 = "  tf32: true\n"
_NOT_HERE = "invalid YAML (mapping values are not allowed here)"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("  optimization_level: 3\n", "  optimization_level: 3.0\n",
         "9:23: settings.optimization_level: expected an integer, got float 3.0;"),
        (_TF32, "  tf32: true\n  tf32: false\n", "13:3: duplicate key 'tf32';"),
        # a repeated key is one by its text
        ("      cpu:", '      1: a\n      "1": b\n      cpu:', "26:7: duplicate key '1';"),
        (_TF32, "\ttf32: true\n", "12:1: invalid YAML (found character '\\t' that cannot"),
        (_TF32, "  tf32:\n", "12:8: settings.tf32: expected true or false, got null"),
        (_TF32, "  tf32: \n", "12:8: settings.tf32: expected true or false, got null"),  # null
        (_TF32, "  tf32: true\n    more: 1\n", f"13:9: {_NOT_HERE};"),
        ("# Review", "#\rReview", f"4:7: {_NOT_HERE};"),  # "\r" breaks a line, in a comment too
        ("kernel: kern_0\n", "kernel: yes\n",
         "31:17: targets[0].layers[0].kernel: expected a string, got"),
        ("layer: layer0", "layer: null",
         "28:16: targets[0].layers[0].layer: expected a string, got null"),
    ],
)  # fmt: skip
def test_edits_are_refused_where_they_are(old: str, new: str, expected: str) -> None:
    text = dumps_lock(sample_lock(1))
    assert old in text
    assert _err(text.replace(old, new, 1)).startswith(f"t.lock:{expected}")


def test_escapes_the_writer_never_makes_are_read_as_yaml_reads_them() -> None:
    text = dumps_lock(sample_lock(1)).replace('      cpu: "test cpu"\n', '      cpu: "a\\x41"\n')
    assert loads_lock(text).environment.advisory_dict()["cpu"] == "aA"


def test_sections_with_block_sequences_round_trip() -> None:
    lock = replace(
        sample_lock(1),
        model=replace(sample_lock(1).model, external_data=[ExternalFile("w.bin", "cd" * 32)]),
    )
    text = dumps_lock(lock)
    assert "  external_data:\n    - {path: w.bin, sha256: " in text
    assert loads_lock(text) == lock


def test_errors_in_the_head_and_the_layers_keep_their_position() -> None:
    text = dumps_lock(sample_lock(1)).replace("  tf32: true", "  tf32: 7")
    line = text.splitlines().index("  tf32: 7") + 1
    with pytest.raises(LockError, match=rf"^tactics\.lock:{line}:9: settings\.tf32"):
        loads_lock(text)
    text = dumps_lock(sample_lock(2)).replace('tactic: "0x1010"', 'tactic: "0xzz"', 1)
    line = text.splitlines().index('        tactic: "0xzz"') + 1
    with pytest.raises(
        LockError, match=rf"^tactics\.lock:{line}:17: targets\[0\]\.layers\[1\]\.tactic"
    ):
        loads_lock(text)


@pytest.mark.parametrize("name", ['a"b', "a\\b", "a\nb", "\x85", "\ud800", "\u2028"])
def test_strings_the_emitter_escapes_round_trip(name: str) -> None:
    lock = sample_lock(1)
    lock.layers[0].layer = lock.layers[0].candidates[1].kernel = name
    text = dumps_lock(lock)
    assert f"\n      - layer: {name}\n" not in text
    assert loads_lock(text) == lock
    assert dumps_lock(loads_lock(text)) == text


def test_keys_with_nothing_under_them_are_null() -> None:
    """``layers:`` or ``candidates:`` as the last line is YAML's null, not an empty list."""
    text = dumps_lock(sample_lock(2))
    no_layers = text[: text.index("\n    layers:\n") + len("\n    layers:\n")]
    with pytest.raises(LockError, match=r"targets\[0\]\.layers: expected a list, got null"):
        loads_lock(no_layers)
    last = text.rindex("        candidates:\n") + len("        candidates:\n")
    assert loads_lock(text[:last]).layers[1].candidates == []


def test_yaml_is_imported_on_first_use_only(tmp_path: Path) -> None:
    """``import reprobuild.lock`` gives the dataclasses alone; reading a lock loads PyYAML."""
    path = tmp_path / "t.lock"
    path.write_text(dumps_lock(sample_lock(3)), encoding="utf-8")
    code = (
        "import sys\n"
        "import reprobuild.lock\n"
        "print('yaml' in sys.modules)\n"
        f"lock = reprobuild.lock.load_lock({str(path)!r})\n"
        "print(len(lock.layers), 'yaml' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.split() == ["False", "3", "True"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            names,
            st.none() | names,
            st.booleans(),
            st.sampled_from([None, 0.0, 1.5e-3]),
            st.sampled_from([None, True, False]),
        ),
        min_size=1,
        max_size=5,
    ),
    st.booleans(),
)
def test_layers_written_as_text_read_back_as_yaml_reads_them(rows, empty_candidates: bool) -> None:
    """The layers' text (the one writer of the bulk of a lock) is YAML that any reader
    reads as the entries it was written from, every field included (near ties, the key a
    layer runs, empty candidates, names the emitter escapes), and it round-trips."""
    lock = sample_lock(len(rows))
    for i, (entry, (layer, kernel, pinned, time, runs)) in enumerate(
        zip(lock.layers, rows, strict=True)
    ):
        entry.layer, entry.kernel, entry.pinned, entry.runs = layer, kernel, pinned, runs
        entry.candidates[1] = type(entry.candidates[1])(entry.candidates[1].tactic, kernel)
        entry.time_ms = float("inf") if i == 3 else time
        if i == 1:
            entry.band_ms, entry.ties = 0.25, [c.tactic for c in entry.candidates[:2]]
        if empty_candidates and i == 2:
            entry.candidates = []
    text = dumps_lock(lock)
    read = yaml.load(text, Loader=yaml.SafeLoader)["targets"][0]["layers"]
    for row, e in zip(read, lock.layers, strict=True):
        assert (row["layer"], row["key"], int(row["tactic"], 16)) == (e.layer, e.key, e.tactic)
        assert (row["kernel"], row["pinned"], row.get("runs")) == (e.kernel, e.pinned, e.runs)
        assert ("time" in row) == (e.time_ms is not None)
        assert [(int(c["tactic"], 16), c["kernel"]) for c in row["candidates"]] == [
            (c.tactic, c.kernel) for c in e.candidates
        ]
    assert loads_lock(text) == lock
    assert dumps_lock(loads_lock(text)) == text
