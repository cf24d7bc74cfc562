"""Train the digits MLP and CNN once and write them, with their test split, as test data.

Usage:
    pip install -e '.[train]'                    # scikit-learn, for its bundled dataset
    python scripts/train_digits.py [--out tests/fixtures/digits] [--seed 0]

Why: reproducibility checks need a model whose outputs matter, on real data, with an
accuracy that can be asserted. scikit-learn ships the 1797 8x8 digit images (no download).
Both networks are trained in numpy with a fixed seed (no framework to install), exported
with onnx.helper (opset 17, FP32, named nodes, one input ``input`` of shape
``(N_TEST, 1, 8, 8)`` with pixels scaled to [0, 1]). The batch is static and equal to the
test split's size, so ``reprobuild build``/``verify`` work without ``--shapes`` and the
whole split runs in one call. Outputs: ``digits_mlp.onnx``, ``digits_cnn.onnx`` and
``digits_test.npz`` (``input`` float32, ``labels`` int64), committed as data.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
Params = dict[str, np.ndarray]


def load_split(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train x, train y, test x, test y): a fixed stratified 70/30 split, x in [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.3, random_state=seed, stratify=y)
    return x_tr, y_tr, x_te, y_te


def _im2col(x: np.ndarray, k: int, stride: int, pad: int) -> np.ndarray:
    """(N, Ho, Wo, C*k*k) patches in (C, kh, kw) order, as ONNX Conv weights are laid out."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    cols = np.empty((n, c, k, k, ho, wo), x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = xp[:, :, i : i + stride * ho : stride, j : j + stride * wo : stride]
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n, ho, wo, c * k * k)


def _col2im(d: np.ndarray, shape: tuple[int, ...], k: int, stride: int, pad: int) -> np.ndarray:
    n, c, h, w = shape
    ho, wo = d.shape[1], d.shape[2]
    d = d.reshape(n, ho, wo, c, k, k).transpose(0, 3, 4, 5, 1, 2)
    out = np.zeros((n, c, h + 2 * pad, w + 2 * pad), d.dtype)
    for i in range(k):
        for j in range(k):
            out[:, :, i : i + stride * ho : stride, j : j + stride * wo : stride] += d[:, :, i, j]
    return out[:, :, pad : pad + h, pad : pad + w]


# layers of the CNN: (name, in channels, out channels, stride); 3x3 kernels, padding 1
CNN_CONVS = (("conv1", 1, 8, 1), ("conv2", 8, 16, 2))


def cnn_forward(p: Params, x: np.ndarray) -> tuple[np.ndarray, list]:
    """Logits and what the backward pass needs."""
    tape = []
    h = x
    for name, _cin, cout, stride in CNN_CONVS:
        cols = _im2col(h, 3, stride, 1)
        z = cols @ p[f"{name}.w"].reshape(cout, -1).T + p[f"{name}.b"]
        tape.append((name, h.shape, cols, z, stride))
        h = np.maximum(z, 0).transpose(0, 3, 1, 2)
    flat = h.reshape(h.shape[0], -1)
    tape.append(flat)
    return flat @ p["fc.w"].T + p["fc.b"], tape


def cnn_backward(p: Params, tape: list, dlogits: np.ndarray) -> Params:
    flat = tape[-1]
    g = {"fc.w": dlogits.T @ flat, "fc.b": dlogits.sum(0)}
    dh = (dlogits @ p["fc.w"]).reshape(-1, 16, 4, 4)
    for name, in_shape, cols, z, stride in reversed(tape[:-1]):
        dz = dh.transpose(0, 2, 3, 1) * (z > 0)
        dflat = dz.reshape(-1, dz.shape[-1])
        g[f"{name}.w"] = (dflat.T @ cols.reshape(dflat.shape[0], -1)).reshape(p[f"{name}.w"].shape)
        g[f"{name}.b"] = dflat.sum(0)
        dcols = dz @ p[f"{name}.w"].reshape(dz.shape[-1], -1)
        dh = _col2im(dcols, in_shape, 3, stride, 1)
    return g


def mlp_forward(p: Params, x: np.ndarray) -> tuple[np.ndarray, list]:
    flat = x.reshape(x.shape[0], -1)
    z = flat @ p["fc1.w"].T + p["fc1.b"]
    h = np.maximum(z, 0)
    return h @ p["fc2.w"].T + p["fc2.b"], [flat, z, h]


def mlp_backward(p: Params, tape: list, dlogits: np.ndarray) -> Params:
    flat, z, h = tape
    dz = (dlogits @ p["fc2.w"]) * (z > 0)
    return {
        "fc2.w": dlogits.T @ h,
        "fc2.b": dlogits.sum(0),
        "fc1.w": dz.T @ flat,
        "fc1.b": dz.sum(0),
    }


def he(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.normal(0, np.sqrt(2.0 / np.prod(shape[1:])), shape).astype(np.float32)


def init_params(kind: str, rng: np.random.Generator) -> Params:
    if kind == "mlp":
        shapes = {"fc1.w": (64, 64), "fc2.w": (10, 64)}
    else:
        shapes = {f"{n}.w": (co, ci, 3, 3) for n, ci, co, _s in CNN_CONVS}
        shapes["fc.w"] = (10, 16 * 4 * 4)
    p = {name: he(rng, shape) for name, shape in shapes.items()}
    p.update({name[:-2] + ".b": np.zeros(shape[0], np.float32) for name, shape in shapes.items()})
    return p


def train(
    kind: str, x: np.ndarray, y: np.ndarray, seed: int, epochs: int = 60, lr: float = 3e-3
) -> Params:
    """Adam on softmax cross-entropy with a little weight decay, minibatches of 32."""
    forward: Callable = mlp_forward if kind == "mlp" else cnn_forward
    backward: Callable = mlp_backward if kind == "mlp" else cnn_backward
    rng = np.random.default_rng(seed)
    p = init_params(kind, rng)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(a) for k, a in p.items()}
    step = 0
    for _epoch in range(epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x), 32):
            idx = order[start : start + 32]
            logits, tape = forward(p, x[idx])
            prob = np.exp(logits - logits.max(1, keepdims=True))
            prob /= prob.sum(1, keepdims=True)
            prob[np.arange(len(idx)), y[idx]] -= 1.0
            grads = backward(p, tape, prob / len(idx))
            step += 1
            for k in p:
                g = grads[k] + 1e-4 * p[k]
                m[k] = 0.9 * m[k] + 0.1 * g
                v[k] = 0.999 * v[k] + 0.001 * g * g
                mhat, vhat = m[k] / (1 - 0.9**step), v[k] / (1 - 0.999**step)
                p[k] = (p[k] - lr * mhat / (np.sqrt(vhat) + 1e-8)).astype(np.float32)
    return p


def export(kind: str, p: Params, batch: int) -> onnx.ModelProto:
    """The trained network as an FP32 opset-17 ONNX model with named nodes."""
    inits = [numpy_helper.from_array(a.astype(np.float32), k) for k, a in sorted(p.items())]
    gemm = {"transB": 1}
    if kind == "mlp":
        nodes = [
            helper.make_node("Flatten", ["input"], ["flat"], name="flatten", axis=1),
            helper.make_node("Gemm", ["flat", "fc1.w", "fc1.b"], ["fc1_out"], name="fc1", **gemm),
            helper.make_node("Relu", ["fc1_out"], ["relu1_out"], name="relu1"),
            helper.make_node(
                "Gemm", ["relu1_out", "fc2.w", "fc2.b"], ["logits"], name="fc2", **gemm
            ),
        ]
    else:
        nodes, prev = [], "input"
        for i, (name, _ci, _co, stride) in enumerate(CNN_CONVS, start=1):
            nodes += [
                helper.make_node(
                    "Conv",
                    [prev, f"{name}.w", f"{name}.b"],
                    [f"{name}_out"],
                    name=name,
                    kernel_shape=[3, 3],
                    pads=[1, 1, 1, 1],
                    strides=[stride, stride],
                ),
                helper.make_node("Relu", [f"{name}_out"], [f"relu{i}_out"], name=f"relu{i}"),
            ]
            prev = f"relu{i}_out"
        nodes += [
            helper.make_node("Flatten", [prev], ["flat"], name="flatten", axis=1),
            helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", **gemm),
        ]
    graph = helper.make_graph(
        nodes,
        f"digits_{kind}",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="train_digits.py"
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "digits")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    x_tr, y_tr, x_te, y_te = load_split(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    np.savez(args.out / "digits_test.npz", input=x_te, labels=y_te)
    for kind in ("mlp", "cnn"):
        params = train(kind, x_tr, y_tr, args.seed)
        forward = mlp_forward if kind == "mlp" else cnn_forward
        acc = float((forward(params, x_te)[0].argmax(1) == y_te).mean())
        model = export(kind, params, len(x_te))
        onnx.save(model, str(args.out / f"digits_{kind}.onnx"))
        print(f"digits_{kind}: test accuracy {acc:.4f} on {len(y_te)} held-apart images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
