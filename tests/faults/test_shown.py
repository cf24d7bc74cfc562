"""Lock text shown on a terminal is escaped: a hand-edited field with a newline or an escape
character cannot forge an ``error:`` line or drive the terminal."""

from __future__ import annotations

from pathlib import Path

FORGED = '"Has\\nwell\\nerror: forged\\x1b[2J"'


def _forge(proj: Path, field: str) -> None:
    text = (proj / "t.lock").read_text()
    start = text.index(f"{field}:")
    end = text.index("\n", start)
    (proj / "t.lock").write_text(f"{text[:start]}{field}: {FORGED}{text[end:]}")


def test_show_escapes_lock_text(proj: Path, cli) -> None:
    _forge(proj, "cpu")  # an advisory field: shown, never checked
    r = cli("show", "--lock", "t.lock", "--targets")
    assert r.code == 0, r
    assert "\x1b" not in r.out and not any(ln.startswith("error:") for ln in r.out.splitlines())
    assert "Has\\nwell\\nerror: forged\\x1b[2J" in r.out, r.out


def test_an_error_naming_lock_text_stays_one_escaped_line(proj: Path, cli) -> None:
    _forge(proj, "target")  # a label that is not its identity's: refused, quoting it
    r = cli("build", "mlp.onnx", "--lock", "t.lock", "--frozen", "--backend", "reference", "-q")
    assert r.code == 2 and "or the label was edited" in r.err and "\x1b" not in r.err, r
    assert [ln for ln in r.err.splitlines() if ln.startswith("error:")] == r.err.splitlines()[-1:]
