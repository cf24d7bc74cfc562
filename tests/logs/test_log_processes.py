"""``REPROBUILD_LOG_PROCESSES`` is validated like every other variable: 1 or 2, else a
refusal naming the variable, never a silent "split"."""

from __future__ import annotations

import pytest

from .test_cli import REF


@pytest.mark.parametrize("value", ["yes", "0", "3", "１"])
def test_a_bad_value_is_refused(cli, monkeypatch, value: str) -> None:
    monkeypatch.setenv("REPROBUILD_LOG_PROCESSES", value)
    r = cli("log", str(REF))
    assert r.code == 2 and "REPROBUILD_LOG_PROCESSES=" in r.err, r
    assert len(r.err.strip().splitlines()) == 1, r


@pytest.mark.parametrize("value", ["1", "2", ""])
def test_good_values_read(cli, monkeypatch, value: str) -> None:
    monkeypatch.setenv("REPROBUILD_LOG_PROCESSES", value)
    assert cli("log", str(REF)).code == 0
