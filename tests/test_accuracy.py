"""The one accuracy metric: cosine similarity and top-1 agreement on hand-made outputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reprobuild.accuracy import (
    class_axis,
    compare_outputs,
    cosine_similarity,
    json_safe,
    top1_agreement,
)


def test_cosine_of_identical_outputs_is_exactly_one() -> None:
    x = np.random.default_rng(0).standard_normal((7, 10)).astype(np.float32)
    assert cosine_similarity(x, x.copy()) == 1.0


def test_cosine_of_hand_made_pairs() -> None:
    assert cosine_similarity([1.0, 0.0], [0.0, 1.0]) == 0.0
    assert cosine_similarity([1.0, 1.0], [-1.0, -1.0]) == pytest.approx(-1.0)
    assert cosine_similarity([3.0, 4.0], [6.0, 8.0]) == pytest.approx(1.0, abs=1e-15)
    assert cosine_similarity([1.0, 0.0], [1.0, 1.0]) == pytest.approx(1 / math.sqrt(2))
    assert cosine_similarity([0.0, 0.0], [0.0, 0.0]) == 1.0
    assert cosine_similarity([0.0, 0.0], [1.0, 0.0]) == 0.0
    assert math.isnan(cosine_similarity([np.inf, 0.0], [1.0, 0.0]))
    with pytest.raises(ValueError, match="shape"):
        cosine_similarity([1.0], [1.0, 2.0])


def test_top1_agreement_of_a_hand_made_pair() -> None:
    want = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5], [0.4, 0.6, 0.0]])
    got = np.array([[0.0, 1.0, 0.0], [0.1, 0.8, 0.1], [0.1, 0.2, 0.7], [0.7, 0.3, 0.0]])
    assert top1_agreement(got, want) == 0.5  # rows 0 and 2 agree, rows 1 and 3 do not
    assert top1_agreement(want, want) == 1.0
    # (N, C, 1, 1), as a global-pooled classifier ends: still a class vector
    assert top1_agreement(got[:, :, None, None], want[:, :, None, None]) == 0.5


def test_what_counts_as_a_class_vector() -> None:
    assert class_axis((4, 10)) == 1
    assert class_axis((4, 10, 1, 1)) == 1
    assert class_axis((1, 1, 1000)) == 2
    assert class_axis((4, 3, 8, 8)) is None  # a feature map
    assert class_axis((4,)) is None
    assert class_axis((4, 1)) is None  # one score: no argmax to agree on
    assert top1_agreement(np.ones((2, 3, 4)), np.ones((2, 3, 4))) is None


def test_compare_outputs_reports_the_worst_output() -> None:
    want = {"logits": np.array([[1.0, 2.0], [3.0, 1.0]]), "feat": np.ones((2, 2, 3))}
    got = {"logits": np.array([[2.0, 1.0], [3.0, 1.0]]), "feat": np.ones((2, 2, 3))}
    r = compare_outputs(got, want)
    assert r["top1_agreement"] == 0.5  # only logits is a class vector
    assert r["outputs"]["feat"]["top1_agreement"] is None
    assert r["outputs"]["feat"]["cosine"] == 1.0
    assert (
        r["cosine"] == r["outputs"]["logits"]["cosine"] == pytest.approx(14 / 15)
    )  # dot 14, both norms sqrt(15)
    assert r["max_abs"] == 1.0


def test_an_undefined_cosine_survives_as_json_text() -> None:
    r = compare_outputs({"y": np.array([[np.nan, 1.0]])}, {"y": np.array([[0.0, 1.0]])})
    assert r["non_finite_outputs"] == ["y"]
    assert json_safe(r)["cosine"] == "nan" and json_safe(r)["max_abs"] == "inf"
