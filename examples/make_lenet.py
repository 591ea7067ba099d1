"""Write examples/lenet.onnx: a LeNet-5-like CNN with seeded random weights.

    python examples/make_lenet.py [-o examples/lenet.onnx]

image f32[1,1,28,28] -> conv 5x5 (6, pad 2) -> relu -> max-pool 2
                     -> conv 5x5 (16)       -> relu -> max-pool 2
                     -> flatten -> gemm 120 -> relu -> gemm 84 -> relu -> gemm 10
                     -> softmax -> probs f32[1,10]

The weights are He-scaled normal values from a fixed seed, so the file is the
same on every run and the activations stay O(1). It exercises the ops most
small vision models use (convolution, pooling, dense layers, softmax) while
staying small enough (about 250 KB) to keep in the repository.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 5
OPSET = 13


def _he(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def make_lenet(seed: int = SEED) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    weights = {
        "conv1.w": _he(rng, (6, 1, 5, 5), 1 * 25),
        "conv1.b": (rng.standard_normal(6) * 0.1).astype(np.float32),
        "conv2.w": _he(rng, (16, 6, 5, 5), 6 * 25),
        "conv2.b": (rng.standard_normal(16) * 0.1).astype(np.float32),
        "fc1.w": _he(rng, (120, 400), 400),
        "fc1.b": (rng.standard_normal(120) * 0.1).astype(np.float32),
        "fc2.w": _he(rng, (84, 120), 120),
        "fc2.b": (rng.standard_normal(84) * 0.1).astype(np.float32),
        "fc3.w": _he(rng, (10, 84), 84),
        "fc3.b": (rng.standard_normal(10) * 0.1).astype(np.float32),
    }
    node = helper.make_node
    nodes = [
        node("Conv", ["image", "conv1.w", "conv1.b"], ["c1"], name="conv1",
             kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
        node("Relu", ["c1"], ["r1"], name="relu1"),
        node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        node("Conv", ["p1", "conv2.w", "conv2.b"], ["c2"], name="conv2", kernel_shape=[5, 5]),
        node("Relu", ["c2"], ["r2"], name="relu2"),
        node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        node("Flatten", ["p2"], ["f"], name="flatten", axis=1),
        node("Gemm", ["f", "fc1.w", "fc1.b"], ["g1"], name="fc1", transB=1),
        node("Relu", ["g1"], ["h1"], name="relu3"),
        node("Gemm", ["h1", "fc2.w", "fc2.b"], ["g2"], name="fc2", transB=1),
        node("Relu", ["g2"], ["h2"], name="relu4"),
        node("Gemm", ["h2", "fc3.w", "fc3.b"], ["logits"], name="fc3", transB=1),
        node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "lenet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 28, 28])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(w, name) for name, w in weights.items()])
    model = helper.make_model(graph, producer_name="xlac examples/make_lenet.py",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8          # readable by onnxruntime releases of the last years
    onnx.checker.check_model(model, full_check=True)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path,
                        default=Path(__file__).resolve().parent / "lenet.onnx")
    args = parser.parse_args()
    onnx.save(make_lenet(), args.output)
    print(f"wrote {args.output} ({args.output.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
