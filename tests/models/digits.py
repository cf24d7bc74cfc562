"""The digits MLP and CNN (trained by ``scripts/train_digits.py``) and their test split.

Why committed data: the tests must not need scikit-learn or training time; the models'
weights and the held-apart split are data, read here with ``allow_pickle=False``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

DIGITS_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "digits"
KINDS = ("mlp", "cnn")
INPUT = "input"
OUTPUT = "logits"
FP32_FLOOR = {"mlp": 0.93, "cnn": 0.90}
"""The accuracy each model must keep on the test split in FP32 (trained: about 0.97)."""


def model_path(kind: str) -> Path:
    """``digits_mlp.onnx`` or ``digits_cnn.onnx``: input ``input`` (N, 1, 8, 8), output
    ``logits`` (N, 10), N the test split's size."""
    if kind not in KINDS:
        raise ValueError(f"unknown digits model {kind!r}; choose one of {', '.join(KINDS)}")
    return DIGITS_DIR / f"digits_{kind}.onnx"


def held_out_split() -> tuple[np.ndarray, np.ndarray]:
    """(images float32 (N, 1, 8, 8) scaled to [0, 1], labels int64 (N,))."""
    with np.load(DIGITS_DIR / "digits_test.npz", allow_pickle=False) as npz:
        return np.asarray(npz["input"], np.float32), np.asarray(npz["labels"], np.int64)


def held_out_feeds() -> dict[str, np.ndarray]:
    """The whole test split as the models' feed dict."""
    return {INPUT: held_out_split()[0]}


def accuracy(outputs: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of rows whose largest logit is the label."""
    outputs = np.asarray(outputs)
    if outputs.shape[0] != labels.shape[0]:
        raise ValueError(f"{outputs.shape[0]} outputs for {labels.shape[0]} labels")
    return float((outputs.argmax(axis=-1) == labels).mean())
