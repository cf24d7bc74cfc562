"""Plain bad values that must be one line with a documented code, never a traceback: a
negative input dimension (in the model, in --shapes), a 5000-digit TacticValue (in a lock,
in layer information as JSON or as inspector text), and a calibration dataset raising
GeneratorExit or its own BaseException subclass (Ctrl-C in a dataset still stops the run
with 130). Some of these already were refusals; each is held here either way."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from .helpers import assert_clean, snapshot

BIG_HEX = "0x" + "f" * 5000
BIG_DEC = "9" * 5000


def _negative_model(proj: Path) -> None:
    proto = onnx.load(str(proj / "mlp.onnx"))
    proto.graph.input[0].type.tensor_type.shape.dim[1].dim_value = -4
    onnx.save(proto, str(proj / "neg.onnx"))


def _locks(proj: Path) -> None:
    lock = (proj / "t.lock").read_text()
    tactic = next(ln for ln in lock.splitlines() if ln.strip().startswith("tactic: "))
    indent = tactic[: len(tactic) - len(tactic.lstrip())]
    (proj / "hex.lock").write_text(lock.replace(tactic, f'{indent}tactic: "{BIG_HEX}"', 1))
    (proj / "dec.lock").write_text(lock.replace(tactic, f"{indent}tactic: {BIG_DEC}", 1))
    cand = '{tactic: "'
    (proj / "cand.lock").write_text(lock.replace(cand, cand + "0x" + "e" * 5000, 1))


def _layer_files(proj: Path) -> None:
    text = (proj / "mlp.engine.layers.json").read_text()
    value = json.loads(text)["Layers"][0]["TacticValue"]
    (proj / "dec.json").write_text(text.replace(json.dumps(value), BIG_DEC, 1))
    (proj / "hex.json").write_text(text.replace(json.dumps(value), json.dumps(BIG_HEX), 1))
    (proj / "layers.txt").write_text(
        "Name: fc1, LayerType: RefMatrixMultiply, Inputs: [], Outputs: [], "
        f"TacticName: ref_matmul_blas_f32, TacticValue: {BIG_HEX}, StreamId: 0, "
        "Metadata: [ONNX Layer: fc1]\n"
    )


CASES = {
    "negative-dim-in-model": ("build", "neg.onnx", "--lock", "n.lock", "--backend", "reference"),
    "negative-dim-in-shapes": ("build", "mlp.onnx", "--lock", "n.lock", "--backend",
                               "reference", "--shapes", "input:8x-4"),
    "negative-dim-in-min-shapes": ("build", "mlp.onnx", "--lock", "n.lock", "--backend",
                                   "reference", "--min-shapes", "input:-8x1024"),
    "5000-digit-hex-tactic-in-lock": ("show", "--lock", "hex.lock"),
    "5000-digit-decimal-tactic-in-lock": ("show", "--lock", "dec.lock"),
    "5000-digit-candidate-in-lock": ("verify", "--lock", "cand.lock", "-n", "1"),
    "5000-digit-decimal-tactic-value-json": ("layers", "dec.json"),
    "5000-digit-hex-tactic-value-json": ("layers", "hex.json"),
    "5000-digit-tactic-value-inspector-text": ("layers", "layers.txt"),
}  # fmt: skip

MESSAGES = {
    "negative-dim-in-model": "neg.onnx: input 'input' has the shape",
    "negative-dim-in-shapes": "--shapes 'input:8x-4'",
    "negative-dim-in-min-shapes": "input:-8x1024",
    "5000-digit-hex-tactic-in-lock": "does not fit in 64 bits",
    "5000-digit-decimal-tactic-in-lock": "dec.lock",
    "5000-digit-candidate-in-lock": "candidates[0].tactic",
    "5000-digit-decimal-tactic-value-json": "dec.json: a number in the JSON is thousands",
}
"""What the one line says, where the case is refused (the others are read: a tactic value
that is no 64-bit number is shown as none, as for any unreadable value)."""


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_value_is_one_line(proj: Path, cli, case: str) -> None:
    _negative_model(proj)
    _locks(proj)
    _layer_files(proj)
    before = snapshot(proj)
    r = cli(*CASES[case])
    assert "Traceback" not in r.out + r.err and "internal error" not in r.err, (case, r)
    assert_clean(r, proj, before)
    if case in MESSAGES:
        assert r.code == 2 and MESSAGES[case] in r.err.splitlines()[-1], (case, r)
    else:
        assert r.code == 0 and BIG_HEX not in r.out, (case, r)


RAISERS = {
    "GeneratorExit": "raise GeneratorExit()",
    "custom BaseException": "raise Odd('odd')",
    "SystemExit": "raise SystemExit(3)",
}

DATASET = """
class Odd(BaseException):
    pass

class D:
    def __len__(self):
        return 16

    def __getitem__(self, i):
        {raise_it}

DS = D()
"""


@pytest.mark.parametrize("kind", sorted(RAISERS))
def test_dataset_raising_base_exceptions_is_one_line(proj: Path, cli, kind: str) -> None:
    (proj / "ds.py").write_text(DATASET.format(raise_it=RAISERS[kind]))
    before = snapshot(proj)
    r = cli("build", "mlp.onnx", "--lock", "q.lock", "--backend", "reference",
            "--precision", "int8", "--calibration", "ds.py:DS")  # fmt: skip
    assert r.code == 2, r
    name = {"custom BaseException": "Odd"}.get(kind, kind)
    assert f"ds.py:DS: dataset[0] raised {name}" in r.err.splitlines()[-1], r
    assert_clean(r, proj, before)


def test_dataset_ctrl_c_still_stops_the_run(proj: Path, cli) -> None:
    (proj / "ds.py").write_text(DATASET.format(raise_it="raise KeyboardInterrupt()"))
    before = snapshot(proj)
    r = cli("build", "mlp.onnx", "--lock", "q.lock", "--backend", "reference",
            "--precision", "int8", "--calibration", "ds.py:DS")  # fmt: skip
    assert r.code == 130, r
    assert "Traceback" not in r.err and "raised KeyboardInterrupt" not in r.err, r
    kept = {k: v for k, v in snapshot(proj).items() if not k.startswith("caches/")}
    assert kept == {k: v for k, v in before.items() if not k.startswith("caches/")}
