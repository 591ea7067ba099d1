"""Whole-model latency and memory next to onnxruntime, in one run.

    python benchmarks/models.py [--runs 10] [--only NAME]

For each of the onnx package's light models (the nine ImageNet CNNs; batch 1, 224x224)
it compiles the model with xlac for this machine, then times xlac's object (through
xlac.load) and onnxruntime (CPU provider, one intra-op thread, all graph optimizations)
on the same input, alternating the two, and prints medians, the ratio, xlac's arena
beside the naive sum of intermediate buffers, and the largest output difference.
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

import xlac

LIGHT = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__),
                                      "backend/test/data/light/light_*.onnx")))


def graph_input(model: onnx.ModelProto):
    inits = {i.name for i in model.graph.initializer}
    return next(i for i in model.graph.input if i.name not in inits)


def median_time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--only", help="substring of the model names to run")
    args = ap.parse_args()
    rows = []
    header = (f"{'model':<14} {'xlac ms':>9} {'ort ms':>9} {'ratio':>6} {'arena MiB':>10} "
              f"{'naive MiB':>10} {'compile s':>10} {'max |diff|':>11}")
    print(header)
    print("-" * len(header))
    for path in LIGHT:
        name = os.path.basename(path)[len("light_"):-len(".onnx")]
        if args.only and args.only not in name:
            continue
        model = onnx.load(path)     # its weights are ConstantOfShape(0.02): same timing
        inp = graph_input(model)
        dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        x = np.random.default_rng(1).standard_normal(dims).astype(np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            res = xlac.compile(model, os.path.join(tmp, f"{name}.o"), report=True)
            compile_s = time.perf_counter() - t
            m = xlac.load(res.output)
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            so.inter_op_num_threads = 1
            sess = ort.InferenceSession(model.SerializeToString(), so,
                                        providers=["CPUExecutionProvider"])
            feeds = {inp.name: x}
            ours, = m(x)
            ref = sess.run(None, feeds)[0]
            xs, os_ = [], []
            for _ in range(args.runs):      # alternate, so load changes hit both sides
                xs.append(median_time(lambda: m(x), 1))
                os_.append(median_time(lambda: sess.run(None, feeds), 1))
            tx, to = statistics.median(xs), statistics.median(os_)
            rep = res.report
            row = (name, tx * 1e3, to * 1e3, tx / to, res.arena_size / 2**20,
                   rep["naive_activation_bytes"] / 2**20, compile_s,
                   float(np.abs(ours - ref).max()))
            rows.append(row)
            print(f"{row[0]:<14} {row[1]:9.2f} {row[2]:9.2f} {row[3]:6.2f} {row[4]:10.2f} "
                  f"{row[5]:10.2f} {row[6]:10.1f} {row[7]:11.3g}", flush=True)
    if rows:
        geo = float(np.exp(np.mean([np.log(r[3]) for r in rows])))
        print(f"geometric mean of xlac/onnxruntime latency: {geo:.2f}")


if __name__ == "__main__":
    main()
