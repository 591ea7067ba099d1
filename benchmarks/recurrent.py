"""Recurrent models: arena against the ONNX-order bound, compile time, latency.

    python benchmarks/recurrent.py [--runs 20]

Two models built in code (opset 17, batch 1, float32, seeded random weights):

    lstm_kws     keyword spotting: 49 MFCC frames of 10 -> LSTM(64) -> last state -> 12
    gru_tagger   tagging: 50 frames of 40 -> bidirectional GRU(64) -> 10 per frame

Per model, in bytes: xlac's arena; the ONNX-order bound (the most intermediate bytes
live at once in the file's node order; an LSTM/GRU node's own workspace is not in it);
xlac's own bound for its schedule; and the hoisted input projection (all steps' X W^T,
live across the loop), the part of the arena the ONNX-order bound cannot see. Then the
compile time and the median latency of xlac and onnxruntime (one thread), and the
largest output difference.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import xlac

OPSET = 17


def _w(rng, *shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _model(name, nodes, x_shape, out_shape, weights) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(v, n) for n, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def lstm_kws() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    frames, feats, hidden, classes = 49, 10, 64, 12
    weights = {"W": _w(rng, 1, 4 * hidden, feats), "R": _w(rng, 1, 4 * hidden, hidden),
               "B": _w(rng, 1, 8 * hidden, scale=0.1), "fc": _w(rng, hidden, classes),
               "fc_b": _w(rng, classes, scale=0.1), "axes": np.array([0], np.int64)}
    nodes = [
        helper.make_node("Transpose", ["input"], ["x"], perm=[1, 0, 2]),
        helper.make_node("LSTM", ["x", "W", "R", "B"], ["", "h"], hidden_size=hidden),
        helper.make_node("Squeeze", ["h", "axes"], ["last"]),
        helper.make_node("Gemm", ["last", "fc", "fc_b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["output"], axis=-1),
    ]
    return _model("lstm_kws", nodes, [1, frames, feats], [1, classes], weights)


def gru_tagger() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    frames, feats, hidden, tags = 50, 40, 64, 10
    weights = {"W": _w(rng, 2, 3 * hidden, feats), "R": _w(rng, 2, 3 * hidden, hidden),
               "B": _w(rng, 2, 6 * hidden, scale=0.1), "proj": _w(rng, 2 * hidden, tags),
               "shape": np.array([frames, 2 * hidden], np.int64)}
    nodes = [
        helper.make_node("GRU", ["input", "W", "R", "B"], ["y"], hidden_size=hidden,
                         direction="bidirectional", linear_before_reset=1),
        helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["yt", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "proj"], ["output"]),
    ]
    return _model("gru_tagger", nodes, [frames, 1, feats], [frames, tags], weights)


MODELS = {"lstm_kws": lstm_kws, "gru_tagger": gru_tagger}


def _projection_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the hoisted X W^T of every recurrent node: steps x batch x W's rows."""
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim]
              for i in onnx.shape_inference.infer_shapes(model).graph.value_info}
    shapes.update({i.name: [d.dim_value for d in i.type.tensor_type.shape.dim]
                   for i in model.graph.input})
    inits = {t.name: t.dims for t in model.graph.initializer}
    total = 0
    for n in model.graph.node:
        if n.op_type in ("LSTM", "GRU", "RNN"):
            x, w = shapes[n.input[0]], inits[n.input[1]]
            total += x[0] * x[1] * w[0] * w[1] * 4
    return total


def _median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    header = (f"{'model':<11} {'arena':>8} {'onnx bd':>8} {'own bd':>8} {'proj':>8} "
              f"{'compile s':>9} {'xlac ms':>8} {'ort ms':>8} {'max |diff|':>10}")
    print(header)
    print("-" * len(header))
    for name, build in MODELS.items():
        model = build()
        x = np.random.default_rng(2).standard_normal(
            [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        ).astype(np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            res = xlac.compile(model, os.path.join(tmp, f"{name}.o"), report=True)
            compile_s = time.perf_counter() - t
            m = xlac.load(res.output)
            so = ort.SessionOptions()
            so.intra_op_num_threads = so.inter_op_num_threads = 1
            sess = ort.InferenceSession(model.SerializeToString(), so,
                                        providers=["CPUExecutionProvider"])
            ours, = m(x)
            ref, = sess.run(None, {"input": x})
            tx = _median_ms(lambda: m(x), args.runs)
            to = _median_ms(lambda: sess.run(None, {"input": x}), args.runs)
        rep = res.report
        print(f"{name:<11} {res.arena_size:8,} {rep['onnx_order_lower_bound_bytes']:8,} "
              f"{rep['lower_bound_bytes']:8,} {_projection_bytes(model):8,} {compile_s:9.2f} "
              f"{tx:8.3f} {to:8.3f} {float(np.abs(ours - ref).max()):10.2g}", flush=True)


if __name__ == "__main__":
    main()
