"""The documented exit-code table and error messages match what the code does.

Every message docs/exit-codes.md or docs/tensorrt.md shows in a refusal table must be text
the code can print: each literal piece of it (the parts between ``...`` and quoted
placeholders) is found in a string constant of the package, where implicitly concatenated
pieces count as one string and an f-string's replacement fields split it. A reworded message
fails here until the page says the same.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from reprobuild.errors import DOCUMENTED_EXIT_CODES

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "exit-codes.md").read_text(encoding="utf-8")
TENSORRT_PAGE = (ROOT / "docs" / "tensorrt.md").read_text(encoding="utf-8")


def _code_strings() -> list[str]:
    """Every string constant in the package, f-strings with NUL where a field goes."""
    out: list[str] = []
    for path in (ROOT / "reprobuild").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                out.append(
                    "".join(v.value if isinstance(v, ast.Constant) else "\0" for v in node.values)
                )
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.append(node.value)
    return out


CODE = "\n".join(_code_strings())


def _messages() -> list[str]:
    """First-column messages of the pages' refusal tables (rows with an exit code)."""
    found = []
    for line in (PAGE + TENSORRT_PAGE).splitlines():
        m = re.match(r"\| `(.+?)`(?: \(.*?\))? \| (\d|warning) \|", line)
        if m:
            found.append(m.group(1))
    return found


def _pieces(message: str) -> list[str]:
    """Literal parts of a documented message: placeholders (``...``, 'X', X) split it, and so
    do the joints where the code builds a message from several strings (``: ``, ``; ``,
    brackets, alternatives written ``a` / `b``)."""
    parts = re.split(r"\.\.\.|'[^']*'|\bX\b|`|; |: | / |\(|\)", message)
    return [p.strip(" ,") for p in parts if len(p.strip(" ,")) >= 10]


def test_page_lists_refusals() -> None:
    assert len(_messages()) >= 25


@pytest.mark.parametrize("message", _messages())
def test_documented_message_is_in_the_code(message: str) -> None:
    for piece in _pieces(message):
        assert piece in CODE, f"documented message piece not found in reprobuild/: {piece!r}"


def test_exit_code_table_matches_the_code() -> None:
    section = PAGE.split("## Exit codes", 1)[1].split("\n\n", 2)[1]
    codes = [int(m) for m in re.findall(r"^\| (\d) \|", section, re.MULTILINE)]
    assert tuple(codes) == DOCUMENTED_EXIT_CODES
    assert "internal error" in section
