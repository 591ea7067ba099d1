"""One thread against two: NAME_run_parallel next to onnxruntime's intra-op threads.

    python benchmarks/threads.py [--runs 15] [--threads 2] [--only NAME]
    python benchmarks/threads.py --profile MODEL [--threads 2] [--top 25]
    python benchmarks/threads.py --dispatch [--threads 2]

Models: ResNet-18 and MobileNetV2 (benchmarks/memory_models.py, 224x224) and a
BERT-style encoder (``bert_encoder``: sequence 128, hidden 256, 4 heads, FFN 1024,
2 layers; LayerNorm, erf-GELU, Softmax attention). Each is compiled once with
``parallel=True``; xlac runs NAME_run on one thread and NAME_run_parallel on a
pthreads pool of N threads (xlac.load(..., threads=N)), onnxruntime with
intra_op_num_threads 1 and N. The four are timed in turn, round after round, on the
same input (so load from other processes hits them alike), each timed call after
a pause and SETTLE untimed ones (so the previous contender's spinning pool threads are
gone), and
the medians printed
with xlac's speedup (1 thread / N threads) and the ratio xlac / onnxruntime at each
thread count. The machine's load average is printed too: the cores may be shared.

``--profile MODEL`` compiles MODEL with cycle counters around every step of both
entries (emitter/profile.py) and prints, per HLO instruction, its time on one thread and
on N, the speedup, how busy the step kept the pool (cycles inside its tasks over N times
its time) and the time lost against a perfect split (N-thread time minus 1/N of the
one-thread time), worst first; then the lost time in three parts: steps not split,
dispatch and imbalance of split steps (their time minus their tasks' busy time / N),
and tasks slower than their share of the one-thread time (memory bandwidth, work every
task repeats).

``--dispatch`` times one parallel_for of N tasks of 5 us each on xlac_threadpool, back
to back and after gaps of busy work or sleep: how quickly the workers wake.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import xlac

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory_models import mobilenet_v2, resnet18  # noqa: E402
from models import _describe, compile_profiled, counters, ms_per_cycle  # noqa: E402


def bert_encoder(seq: int = 128, hidden: int = 256, heads: int = 4, ffn: int = 1024,
                 layers: int = 2, seed: int = 7) -> onnx.ModelProto:
    """A BERT-style encoder (post-LN): self-attention and an erf-GELU FFN per layer."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    count = [0]

    def const(prefix, value):
        count[0] += 1
        name = f"{prefix}{count[0]}"
        inits.append(numpy_helper.from_array(np.asarray(value, np.float32)
                                             if not isinstance(value, np.ndarray)
                                             or value.dtype != np.int64 else value, name))
        return name

    def node(op, inputs, **attrs):
        count[0] += 1
        out = f"{op.lower()}{count[0]}"
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def dense(x, n_in, n_out):
        w = const("w", rng.standard_normal((n_in, n_out)).astype(np.float32) / np.sqrt(n_in))
        b = const("b", rng.standard_normal(n_out).astype(np.float32) * 0.02)
        return node("Add", [node("MatMul", [x, w]), b])

    def layer_norm(x):
        return node("LayerNormalization", [x, const("g", np.ones(hidden, np.float32)),
                                           const("beta", np.zeros(hidden, np.float32))],
                    axis=-1, epsilon=1e-12)

    dh = hidden // heads
    split = const("shape", np.array([1, seq, heads, dh], np.int64))
    merge = const("shape", np.array([1, seq, hidden], np.int64))
    x = "x"
    for _ in range(layers):
        q, k, v = (node("Transpose", [node("Reshape", [dense(x, hidden, hidden), split])],
                        perm=perm) for perm in ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3]))
        scores = node("Mul", [node("MatMul", [q, k]), const("scale", 1 / np.sqrt(dh))])
        ctx = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        ctx = node("Reshape", [node("Transpose", [ctx], perm=[0, 2, 1, 3]), merge])
        x = layer_norm(node("Add", [x, dense(ctx, hidden, hidden)]))
        h = dense(x, hidden, ffn)
        gelu = node("Mul", [node("Mul", [h, const("half", 0.5)]), node("Add", [
            node("Erf", [node("Div", [h, const("sqrt2", np.sqrt(2.0))])]),
            const("one", 1.0)])])
        x = layer_norm(node("Add", [x, dense(gelu, ffn, hidden)]))
    graph = helper.make_graph(
        nodes, "bert_encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, seq, hidden])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


PAUSE_S = 0.05  # before each contender's calls
SETTLE = 6      # untimed calls of a contender before each timed one (pools and clocks ramp up)

MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "bert_encoder": bert_encoder}


def _session(model: onnx.ModelProto, threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def _bound(m: xlac.Model, x: np.ndarray):
    outputs = [np.empty(t.shape, t.dtype) for t in m.outputs]
    return m.bind([x], outputs, m.new_arena()), outputs


def profile(name: str, model: onnx.ModelProto, n: int, runs: int, top: int) -> None:
    """Per-step time of NAME_run against NAME_run_parallel on n threads (see the module
    docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / f"{name}.o"
        cname, module, art = compile_profiled(name, model, obj, parallel=True)
        one, many = xlac.load(obj), xlac.load(obj, threads=n)
    labels = art.profile_sites
    assert labels == art.profile_parallel_sites, "the entries walk different steps"
    by_name = {i.name: i for c in module.computations for i in c.instructions}
    lib = ctypes.CDLL(str(one.library_path))
    c1, calls = counters(lib, cname, "profile", len(labels))
    cn, _, busy = counters(lib, cname, "profile_parallel", len(labels),
                           ("cycles", "calls", "busy"))
    inp = model.graph.input[0]
    x = np.random.default_rng(0).standard_normal(
        [d.dim_value for d in inp.type.tensor_type.shape.dim]).astype(np.float32)
    run1, _ = _bound(one, x)
    run_n, _ = _bound(many, x)
    calls[:] = 0
    run1()
    calls = calls.copy()
    run_n()
    samples = [[], [], []]
    walls = [[], []]
    for _ in range(runs):         # per site, the median over runs: robust to load spikes
        for k, fn in enumerate((run1, run_n)):
            time.sleep(PAUSE_S)
            for _ in range(SETTLE):
                fn()
            c1[:] = cn[:] = busy[:] = 0
            t = time.perf_counter()
            fn()
            walls[k].append(time.perf_counter() - t)
            if k == 0:
                samples[0].append(c1.copy())
            else:
                samples[1].append(cn.copy())
                samples[2].append(busy.copy())
    period = ms_per_cycle(lib, cname) * 1e3          # us per cycle
    t1, tn, tb = (np.median(np.array(v, dtype=np.float64), axis=0) * period for v in samples)
    lost = tn - t1 / n
    split = tb > 0
    w1, wn = (statistics.median(w) * 1e3 for w in walls)
    print(f"{name}: {w1:.3f} ms on one thread, {wn:.3f} ms on {n} ({w1 / wn:.2f}x; medians "
          f"of {runs}); steps: {t1.sum() / 1e3:.3f} -> {tn.sum() / 1e3:.3f} ms; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"lost against a perfect split: {lost.sum():.0f} us = "
          f"{lost[~split].sum():.0f} in {int((~split).sum())} steps not split + "
          f"{(tn - tb / n)[split].sum():.0f} dispatch and imbalance in "
          f"{int(split.sum())} split steps + {(tb / n - t1 / n)[split].sum():.0f} tasks slower "
          f"than their share")
    print(f"{'1t us':>8} {f'{n}t us':>8} {'speedup':>7} {'busy':>5} {'lost us':>8} "
          f"{'calls':>5}  instruction")
    for k in np.argsort(-lost)[:top]:
        instr = by_name.get(labels[k])
        what = _describe(instr) if instr is not None else labels[k]
        busy_pct = f"{100 * tb[k] / (n * tn[k]):4.0f}%" if split[k] else "    -"
        print(f"{t1[k]:8.1f} {tn[k]:8.1f} {t1[k] / tn[k]:6.2f}x {busy_pct} {lost[k]:8.1f} "
              f"{calls[k]:5d}  {what}")


DISPATCH_C = r"""
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "xlac_runtime.h"

static pthread_t caller;
static unsigned long by_workers;    /* tasks the workers ran (added atomically) */

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Each task spins for TASK_US microseconds. */
static void task(void *ctx, size_t i) {
  double until = now_us() + TASK_US;
  (void)ctx;
  (void)i;
  if (!pthread_equal(pthread_self(), caller))
    __atomic_add_fetch(&by_workers, 1, __ATOMIC_RELAXED);
  while (now_us() < until) {}
}

int main(void) {
  xlac_threadpool *pool = xlac_threadpool_create(%(threads)d);
  const long gaps_us[] = {0, 10, 100, 1000, 10000};
  size_t g;
  int k;
  caller = pthread_self();
  for (g = 0; g < sizeof gaps_us / sizeof gaps_us[0]; g++) {
    double total = 0;
    int calls = g == 0 ? 20000 : g < 3 ? 2000 : 100;
    by_workers = 0;
    for (k = 0; k < calls; k++) {
      double t;
      if (gaps_us[g]) {
        double until = now_us() + gaps_us[g];
        if (gaps_us[g] >= 1000) {
          struct timespec d = {0, gaps_us[g] * 1000};
          nanosleep(&d, NULL);
        }
        while (now_us() < until) {}
      }
      t = now_us();
      pool->parallel_for(pool->ctx, task, NULL, %(threads)d);
      total += now_us() - t;
    }
    printf("%%8ld %%10.2f %%10.2f %%9.0f%%%%\n", gaps_us[g], total / calls,
           total / calls - TASK_US, 100.0 * by_workers / (calls * (%(threads)d - 1.0)));
  }
  xlac_threadpool_destroy(pool);
  return 0;
}
"""
TASK_US = 5


def dispatch(n: int) -> None:
    """What one parallel_for of n tasks of TASK_US costs on xlac_threadpool beyond
    TASK_US (a perfect split), after a gap of the caller's own work (busy) or sleep
    (1 ms and more) since the last one, and how many of the tasks the workers ran."""
    runtime = Path(xlac.runtime_c.__file__).parent
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "dispatch.c", Path(tmp) / "dispatch"
        src.write_text(DISPATCH_C % {"threads": n})
        subprocess.run(["cc", "-O2", "-std=c99", f"-DTASK_US={TASK_US}", f"-I{runtime}",
                        str(src), str(runtime / "xlac_threadpool.c"), "-pthread", "-o",
                        str(exe)], check=True)
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    print(f"xlac_threadpool, {n} threads: one parallel_for of {n} tasks of {TASK_US} us; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'gap us':>8} {'call us':>10} {'over us':>10} {'workers':>9}")
    print(out, end="")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", help="substring of the model names to run")
    ap.add_argument("--profile", metavar="MODEL", choices=sorted(MODELS),
                    help="time per HLO instruction of MODEL, one thread against N")
    ap.add_argument("--top", type=int, default=25, help="rows of --profile")
    ap.add_argument("--dispatch", action="store_true",
                    help="what one parallel_for costs on xlac_threadpool")
    args = ap.parse_args()
    n = args.threads
    if args.dispatch:
        dispatch(n)
        return
    if args.profile:
        profile(args.profile, MODELS[args.profile](), n, args.runs, args.top)
        return
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    head = (f"{'model':<14} {'xlac 1t ms':>10} {f'xlac {n}t ms':>10} {'speedup':>8} "
            f"{'ort 1t ms':>10} {f'ort {n}t ms':>10} {'ratio 1t':>9} {f'ratio {n}t':>9} "
            f"{'max |diff|':>10}")
    print(head)
    print("-" * len(head))
    ratios = []
    for name, build in MODELS.items():
        if args.only and args.only not in name:
            continue
        model = build()
        inp = model.graph.input[0]
        dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        x = np.random.default_rng(0).standard_normal(dims).astype(np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{name}.o")
            xlac.compile(model, path, parallel=True)
            one, many = xlac.load(path), xlac.load(path, threads=n)
        run1, (y1,) = _bound(one, x)
        run_n, (yn,) = _bound(many, x)
        sessions = [_session(model, 1), _session(model, n)]
        feeds = {inp.name: x}
        ref = sessions[0].run(None, feeds)[0]
        assert np.array_equal(y1, yn), f"{name}: {n} threads differ from one"
        fns = [run1, run_n] + [lambda s=s: s.run(None, feeds) for s in sessions]
        for fn in fns:          # warm up
            fn()
        times = [[] for _ in fns]
        for _ in range(args.runs):
            for fn, ts in zip(fns, times):
                # A pool's threads spin for a while after a call (onnxruntime's intra-op
                # pool, xlac_threadpool's polls) and would hold the other core from the
                # next contender: a pause lets them sleep, untimed calls wake this one's.
                time.sleep(PAUSE_S)
                for _ in range(SETTLE):
                    fn()
                t = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t)
        x1, xn, o1, on = (statistics.median(ts) * 1e3 for ts in times)
        print(f"{name:<14} {x1:>10.2f} {xn:>10.2f} {x1 / xn:>7.2f}x {o1:>10.2f} {on:>10.2f} "
              f"{x1 / o1:>9.2f} {xn / on:>9.2f} {float(np.abs(y1 - ref).max()):>10.2e}")
        ratios.append((x1 / o1, xn / on))
    if ratios:
        one, many = (float(np.exp(np.mean(np.log(r)))) for r in zip(*ratios))
        print(f"geometric mean of xlac/onnxruntime latency over {len(ratios)} models: "
              f"{one:.2f} on one thread, {many:.2f} on {n}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
