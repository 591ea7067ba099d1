"""Bounded batch against exact batches, beside onnxruntime, in one run.

    python benchmarks/bounded.py [--bound 8] [--runs N] [--sample-ms MS] [--only SUBSTR]

For each model: one object compiled with ``bounds={"batch": BOUND}`` (the code of one
sample, run once per sample), and objects compiled for exactly 1 and exactly BOUND
samples (``input_shapes``). At batch 1 and at batch BOUND it prints the median latency of
the bounded object, of the exact one and of onnxruntime (one thread, all graph
optimizations, fed the same batch), the ratio bounded / exact, and the arenas (the
bounded object's is one sample's; the exact batch's grows with it). Calls alternate
sample by sample (models.py's side_by_side), so a change of load hits all three.

Models: benchmarks/models.py's CNNs and MLP with their first dimension renamed ``batch``,
and the T5-style encoder exported by torch with a dynamic batch axis.
"""
from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
import onnx

import xlac
from models import MODELS, bound_ort, bound_xlac, ort_session, side_by_side
from user_models import t5_encoder


def _batched(build):
    """``build``'s model with its input's and output's first dimension named ``batch``."""
    def make() -> onnx.ModelProto:
        model = build()
        del model.graph.value_info[:]        # shapes inferred at batch 1
        for v in list(model.graph.input) + list(model.graph.output):
            v.type.tensor_type.shape.dim[0].dim_param = "batch"
        return model
    return make


BOUNDED_MODELS = {
    "resnet18": _batched(MODELS["resnet18"]),
    "mobilenet_v2": _batched(MODELS["mobilenet_v2"]),
    "mobilenet_v1_025_vww": _batched(MODELS["mobilenet_v1_025_vww"]),
    "resnet8": _batched(MODELS["resnet8"]),
    "lenet5": _batched(MODELS["lenet5"]),
    "mlp": _batched(MODELS["mlp"]),
    "t5_encoder": lambda: t5_encoder(dynamic_batch=True),
}


def _shapes(model: onnx.ModelProto, n: int) -> dict:
    inits = {i.name for i in model.graph.initializer}
    return {i.name: (n, *[d.dim_value for d in i.type.tensor_type.shape.dim[1:]])
            for i in model.graph.input if i.name not in inits}


def measure(name: str, model: onnx.ModelProto, bound: int, samples: int,
            sample_s: float) -> list[dict]:
    rng = np.random.default_rng(3)
    sess = ort_session(model)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bounded = xlac.compile(model, os.path.join(tmp, "bounded.o"), bounds={"batch": bound})
        mb = xlac.load(bounded.output)
        for n in sorted({1, bound}):
            shapes = _shapes(model, n)
            exact = xlac.compile(model, os.path.join(tmp, f"exact{n}.o"), input_shapes=shapes)
            me = xlac.load(exact.output)
            feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
            inputs = list(feeds.values())
            run_b, out_b = bound_xlac_at(mb, inputs)
            run_e, out_e = bound_xlac(me, inputs)
            run_o, out_o = bound_ort(sess, feeds, out_e)
            t_b, t_e, t_o = side_by_side([run_b, run_e, run_o], samples, sample_s)
            diff = max(float(np.max(np.abs(b - o))) for b, o in zip(out_b, out_o))
            rows.append({"model": name, "batch": n, "bounded_ms": t_b * 1e3,
                         "exact_ms": t_e * 1e3, "ort_ms": t_o * 1e3, "ratio": t_b / t_e,
                         "bounded_arena": bounded.arena_size, "exact_arena": exact.arena_size,
                         "max_diff": diff})
    return rows


def bound_xlac_at(m, inputs: list[np.ndarray]):
    """bound_xlac for a bounded object: its outputs at the inputs' batch."""
    outs = [np.empty((inputs[0].shape[0], *t.shape[1:]), t.dtype) for t in m.outputs]
    return m.bind(inputs, outs, m.new_arena()), outs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bound", type=int, default=8)
    ap.add_argument("--runs", type=int, default=11, help="samples per side")
    ap.add_argument("--sample-ms", type=float, default=20)
    ap.add_argument("--only", help="comma-separated substrings of the model names to run")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}; bound {args.bound}, "
          f"{args.runs} samples of ~{args.sample_ms:.0f} ms per side")
    header = (f"{'model':<22} {'batch':>5} {'bounded ms':>11} {'exact ms':>9} {'ort ms':>9} "
              f"{'bnd/exact':>9} {'arena KiB bnd/exact':>20} {'max |diff|':>11}")
    print(header)
    print("-" * len(header))
    for name, build in BOUNDED_MODELS.items():
        if args.only and not any(o in name for o in args.only.split(",")):
            continue
        for r in measure(name, build(), args.bound, args.runs, args.sample_ms / 1e3):
            arenas = f"{r['bounded_arena'] / 1024:.1f}/{r['exact_arena'] / 1024:.1f}"
            print(f"{name:<22} {r['batch']:5d} {r['bounded_ms']:11.3f} {r['exact_ms']:9.3f} "
                  f"{r['ort_ms']:9.3f} {r['ratio']:9.2f} {arenas:>20} "
                  f"{r['max_diff']:11.3g}", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
