"""Quantized models: xlac's int8 build beside its float build and onnxruntime's int8.

    python benchmarks/int8.py [--only NAME] [--inputs 20] [--runs 30] [--format qdq|qoperator]
                              [--activation-type int8|uint8]

The MLPerf Tiny four, ResNet-18 and MobileNetV2 of benchmarks/memory_models.py are
quantized with onnxruntime.quantization.quantize_static (QDQ by default, per-channel
int8 weights, int8 activations by default as onnxruntime's own default, static
calibration on seeded random inputs). With uint8 activations onnxruntime's x86 QDQ path
runs every convolution on integers (its s8 -> u8 rewrite has nothing to skip), so the
exact column then compares integer arithmetic with integer arithmetic; likewise the
QOperator format. For each model the table gives:

  - arena and weight bytes of xlac's float build and of its int8 build (and int8/float);
  - exact: the fraction of output elements where xlac's int8 build equals onnxruntime's
    on the same quantized model, over ``--inputs`` seeded random inputs, and the largest
    difference in quantization steps of the output (the last QuantizeLinear's scale);
  - latency medians of xlac int8, xlac float and onnxruntime int8, one thread each, all
    three timed in one interleaved loop (xlac through xlac.load's bound call), with the
    machine's load average before and after: timings are only comparable on a quiet one.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

import xlac

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory_models import MODELS  # noqa: E402

CALIBRATION_INPUTS = 8


def input_shape(model: onnx.ModelProto) -> list[int]:
    return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def quantize(model: onnx.ModelProto, folder: str, name: str, fmt: str,
             activations: str = "int8", reduce_range: bool = False) -> str:
    """The model quantized by onnxruntime as a user would: per channel, int8 weights (of 7
    bits with ``reduce_range``), ``activations`` (int8 or uint8) activations, seeded random
    calibration data; returns the path of the quantized model."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    types = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}
    src, dst = os.path.join(folder, f"{name}.onnx"), os.path.join(folder, f"{name}_int8.onnx")
    onnx.save(model, src)
    rng = np.random.default_rng(0)
    shape = input_shape(model)
    data = iter([{model.graph.input[0].name: rng.standard_normal(shape).astype(np.float32)}
                 for _ in range(CALIBRATION_INPUTS)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(data, None)

    logging.disable(logging.WARNING)        # quantize_static's pre-processing advice
    quantize_static(src, dst, Reader(), per_channel=True,
                    quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                    activation_type=types[activations],
                    weight_type=QuantType.QInt8, reduce_range=reduce_range)
    logging.disable(logging.NOTSET)
    return dst


def output_step(model: onnx.ModelProto) -> float | None:
    """The scale of the quantization the model's output went through last, if any."""
    by_output = {o: n for n in model.graph.node for o in n.output}
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    node = by_output.get(model.graph.output[0].name)
    while node is not None and node.op_type not in ("DequantizeLinear", "QuantizeLinear"):
        node = by_output.get(node.input[0])
    if node is None or node.input[1] not in inits:
        return None
    return float(np.max(inits[node.input[1]]))


def session(path: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def compiled(path: str, folder: str, name: str):
    result = xlac.compile(path, os.path.join(folder, f"{name}.o"), name=name, report=True)
    return xlac.load(result.output), result.report


def timed(calls: dict, runs: int) -> dict[str, float]:
    """Median seconds per call, the calls interleaved run by run."""
    for fn in calls.values():
        fn()                        # warm up
    times = {k: [] for k in calls}
    for _ in range(runs):
        for k, fn in calls.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def measure(name: str, folder: str, args) -> dict:
    model = MODELS[name]()
    qpath = quantize(model, folder, name, args.format, args.activation_type)
    fpath = os.path.join(folder, f"{name}.onnx")
    q_model, q_report = compiled(qpath, folder, f"{name}_int8")
    f_model, f_report = compiled(fpath, folder, f"{name}_f32")
    sess = session(qpath)
    in_name = sess.get_inputs()[0].name
    rng = np.random.default_rng(1)
    shape = input_shape(model)
    step = output_step(onnx.load(qpath))
    equal = total = 0
    worst = 0.0
    for _ in range(args.inputs):
        x = rng.standard_normal(shape).astype(np.float32)
        got, want = q_model(x)[0], sess.run(None, {in_name: x})[0]
        equal += int((got == want).sum())
        total += got.size
        diff = float(np.max(np.abs(got.astype(np.float64) - want)))
        worst = max(worst, diff / step if step else diff)
    x = rng.standard_normal(shape).astype(np.float32)
    calls = {}
    for key, m in (("xlac_int8", q_model), ("xlac_f32", f_model)):
        out = [np.empty(t.shape, t.dtype) for t in m.outputs]
        calls[key] = m.bind([x], out, m.new_arena())
    feed = {in_name: x}
    calls["ort_int8"] = lambda: sess.run(None, feed)
    times = timed(calls, args.runs)
    return {"model": name, "arena_f32": f_report["arena_bytes"],
            "arena_int8": q_report["arena_bytes"], "weights_f32": f_report["weight_bytes"],
            "weights_int8": q_report["weight_bytes"], "exact": equal / total,
            "steps": worst, "elements": total, **times}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="substring of the model names to run")
    ap.add_argument("--inputs", type=int, default=20, help="random inputs compared")
    ap.add_argument("--runs", type=int, default=30, help="timed runs of each build")
    ap.add_argument("--format", choices=("qdq", "qoperator"), default="qdq")
    ap.add_argument("--activation-type", choices=("int8", "uint8"), default="int8",
                    help="the activations' type (weights are int8)")
    args = ap.parse_args()
    names = [n for n in MODELS if not args.only or args.only in n]
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs); "
          f"onnxruntime {ort.__version__}, format {args.format}, activations "
          f"{args.activation_type}")
    head = (f"{'model':<22} {'arena f32':>10} {'arena i8':>9} {'%':>4} {'weights f32':>12} "
            f"{'weights i8':>11} {'%':>4} {'exact':>7} {'steps':>5} {'xlac i8':>9} "
            f"{'xlac f32':>9} {'ort i8':>9} {'i8/ort':>6} {'f32/i8':>6}")
    print(head)
    print("-" * len(head))
    with tempfile.TemporaryDirectory(prefix="xlac-int8-") as folder:
        for name in names:
            r = measure(name, folder, args)
            print(f"{r['model']:<22} {r['arena_f32']:>10,} {r['arena_int8']:>9,} "
                  f"{100 * r['arena_int8'] / r['arena_f32']:>3.0f}% {r['weights_f32']:>12,} "
                  f"{r['weights_int8']:>11,} {100 * r['weights_int8'] / r['weights_f32']:>3.0f}% "
                  f"{100 * r['exact']:>6.2f}% {r['steps']:>5.2f} {_ms(r['xlac_int8'])} "
                  f"{_ms(r['xlac_f32'])} {_ms(r['ort_int8'])} "
                  f"{r['xlac_int8'] / r['ort_int8']:>6.2f} {r['xlac_f32'] / r['xlac_int8']:>6.2f}",
                  flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}; exact: share of output elements "
          f"equal to onnxruntime's over {args.inputs} inputs; steps: largest difference in "
          f"output quantization steps; times: medians of {args.runs} interleaved runs")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:>7.3f}ms"


if __name__ == "__main__":
    main()
