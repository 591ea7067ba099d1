"""Whole-model latency next to onnxruntime, in one run, over every model class.

    python benchmarks/models.py [--quick] [--runs N] [--only SUBSTR] [--light]
    python benchmarks/models.py --profile MODEL [--top N]

Models, built in code with seeded random weights (batch 1, float32):

    depthwise-separable CNNs   mobilenet_v1_025_vww (96x96), mobilenet_v2 (224), ds_cnn
    small residual CNNs        resnet8 (CIFAR-10), lenet5 (28x28)
    ImageNet residual          resnet18 (224)
    normalization / attention  bert_encoder: 2 layers, sequence 128, hidden 256, 4 heads,
                               LayerNorm, erf-GELU, Softmax attention
    MLPs / autoencoders        mlp (784-512-256-10), fc_autoencoder (MLPerf Tiny)
    recurrent                  lstm_kws, gru_tagger (benchmarks/recurrent.py)

and the models as users bring them (benchmarks/user_models.py: exported by
torch.onnx.export or converted by skl2onnx, seeded, nothing downloaded):

    tree ensembles             rf_classifier, gb_classifier (scikit-learn, 100 trees, depth 8),
                               rf_deep_classifier (100 trees, no depth limit)
    relative-position attention t5_encoder (RMS norm, bucketed position bias)
    segmentation               lraspp_mobilenet_v3 (bilinear resizes, 128x128)
    large-kernel depthwise     convnext_blocks (7x7 depthwise, channels-last LayerNorm)
    squeeze-excitation         mobilenet_v3_small (hard-swish, hard-sigmoid)
    recurrent from torch       torch_lstm (nn.LSTM over 50 frames)

Those need torch, or scikit-learn and skl2onnx; without them their rows say so and the
run goes on.

``--light`` adds the onnx package's nine light ImageNet CNNs (224x224, weights
ConstantOfShape(0.02), so the timing is real but the outputs are not).

Each model is compiled with xlac for this machine and timed beside onnxruntime (CPU
provider, one intra-op and one inter-op thread, all graph optimizations) in this
process on the same input: the two alternate, sample by sample, so a change of load
hits both; a sample is as many back-to-back calls as take about ``--sample-ms``, and
the medians of the per-call times are compared. Each runs through its leanest call from
Python, its buffers bound once: xlac through ``Model.bind`` (a cffi call of
NAME_run_v, 0.2 us), onnxruntime through ``run_with_iobinding`` (1.6 us on an empty
model; ``InferenceSession.run`` costs 3.2 us, ``Model.run`` 5 us), so models of a few
microseconds compare their code, not the Python around it.
It prints per model the medians, the ratio xlac/onnxruntime, the compile time
(xlac.compile, seconds), the object's code (its executable sections, KiB), xlac's arena
(NAME_ARENA_SIZE, KiB) and the largest output difference; then the geometric mean of
the ratios and the worst model. ``--quick`` takes fewer, shorter samples (a full run in a few minutes).

``--profile MODEL`` compiles MODEL with a cycle counter around every call the model's
code makes (emitter/profile.py: one per fused loop or kernel call) and prints the time
per HLO instruction, slowest first, with its share of the whole.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import xlac
from memory_models import GraphBuilder, MODELS as MEMORY_MODELS
from recurrent import MODELS as RECURRENT_MODELS
from user_models import MODELS as USER_MODELS

LIGHT = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__),
                                      "backend/test/data/light/light_*.onnx")))


# -- the models not built by the memory and recurrent benchmarks -------------------------

def lenet5() -> onnx.ModelProto:
    """LeNet-5 on 28x28 digits: two 5x5 convolutions with 2x2 max pools, 120-84-10."""
    g = GraphBuilder("lenet5", (1, 1, 28, 28), seed=11)
    x = g.max_pool(g.relu(g.conv(g.input, 6, 5, pad="symmetric")), 2, 2, 0)
    x = g.max_pool(g.relu(g.conv(x, 16, 5, pad="symmetric")), 2, 2, 0)
    x = g.flatten(x)
    for width in (120, 84):
        x = g.relu(g.gemm(x, width))
    return g.build(g.softmax(g.gemm(x, 10)))


def mlp() -> onnx.ModelProto:
    """MNIST MLP 784-512-256-10 with ReLU."""
    g = GraphBuilder("mlp", (1, 784), seed=12)
    x = g.input
    for width in (512, 256):
        x = g.relu(g.gemm(x, width))
    return g.build(g.softmax(g.gemm(x, 10)))


def bert_encoder(layers: int = 2, seq: int = 128, hidden: int = 256, heads: int = 4,
                 ffn: int = 1024) -> onnx.ModelProto:
    """A BERT-style encoder over embedded tokens (seq, hidden): per layer, multi-head
    self-attention (Q K^T / sqrt(d), Softmax, times V) and an erf-GELU feed-forward, each
    with a residual add and a post LayerNorm, as torch exports BERT."""
    g = GraphBuilder("bert_encoder", (seq, hidden), seed=13)
    d = hidden // heads
    x = g.input
    for _ in range(layers):
        def split(t):        # (seq, hidden) -> (heads, seq, d)
            return g.transpose(g.reshape(t, (seq, heads, d)), (1, 0, 2))
        q, k, v = (split(g.matmul(x, hidden)) for _ in range(3))
        scores = g.scale(g.matmul_of(q, g.transpose(k, (0, 2, 1))), 1 / np.sqrt(d))
        ctx = g.matmul_of(g.softmax(scores), v)
        ctx = g.reshape(g.transpose(ctx, (1, 0, 2)), (seq, hidden))
        x = g.layer_norm(g.add(x, g.matmul(ctx, hidden, gain=0.5)))
        y = g.matmul(g.gelu(g.matmul(x, ffn)), hidden, gain=0.5)
        x = g.layer_norm(g.add(x, y))
    return g.build(x)


MODELS = {
    "mobilenet_v1_025_vww": MEMORY_MODELS["mobilenet_v1_025_vww"],
    "mobilenet_v2": MEMORY_MODELS["mobilenet_v2"],
    "ds_cnn": MEMORY_MODELS["ds_cnn"],
    "resnet8": MEMORY_MODELS["resnet8"],
    "lenet5": lenet5,
    "resnet18": MEMORY_MODELS["resnet18"],
    "bert_encoder": bert_encoder,
    "mlp": mlp,
    "fc_autoencoder": MEMORY_MODELS["fc_autoencoder"],
    **RECURRENT_MODELS,
    **USER_MODELS,
}


def light_models() -> dict:
    return {os.path.basename(p)[len("light_"):-len(".onnx")]: (lambda p=p: onnx.load(p))
            for p in LIGHT}


# -- timing -------------------------------------------------------------------------------

def graph_inputs(model: onnx.ModelProto, rng) -> dict[str, np.ndarray]:
    inits = {i.name for i in model.graph.initializer}
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input if i.name not in inits}


def ort_session(model: onnx.ModelProto, threads: int = 1) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def side_by_side(fns, samples: int, sample_s: float) -> list[float]:
    """The median seconds per call of each of ``fns``, sampled alternately."""
    reps = []
    for fn in fns:
        fn()                               # warm: caches, pages, onnxruntime's lazy init
        t = time.perf_counter()
        fn()
        reps.append(max(1, int(sample_s / max(time.perf_counter() - t, 1e-7))))
    times = [[] for _ in fns]
    for _ in range(samples):
        for fn, n, ts in zip(fns, reps, times):
            t = time.perf_counter()
            for _ in range(n):
                fn()
            ts.append((time.perf_counter() - t) / n)
    return [statistics.median(ts) for ts in times]


def bound_xlac(m, inputs: list[np.ndarray]):
    """xlac's leanest call from Python (Model.bind: NAME_run_v on buffers checked once),
    and its output arrays."""
    outs = [np.empty(t.shape, t.dtype) for t in m.outputs]
    return m.bind(inputs, outs, m.new_arena()), outs


def bound_ort(sess: ort.InferenceSession, feeds: dict, like: list[np.ndarray]):
    """onnxruntime's leanest call from Python (run_with_iobinding on inputs and outputs
    bound once), and its output arrays (shaped as ``like``, xlac's outputs)."""
    io = sess.io_binding()
    for name, x in feeds.items():
        io.bind_cpu_input(name, x)
    refs = [np.empty_like(o) for o in like]
    for o, r in zip(sess.get_outputs(), refs):
        io.bind_output(o.name, "cpu", 0, r.dtype, list(r.shape), r.ctypes.data)

    def call() -> None:
        sess.run_with_iobinding(io)
    call.buffers = (feeds, refs)        # onnxruntime holds their addresses, not them
    return call, refs


def race(m, sess: ort.InferenceSession, feeds: dict, samples: int,
         sample_s: float) -> tuple[float, float, float]:
    """xlac's and onnxruntime's median seconds per call on ``feeds``, timed side by side
    through their leanest calls, and the largest difference of their outputs."""
    xlac_call, outs = bound_xlac(m, [feeds[p.name] for p in sess.get_inputs()])
    ort_call, refs = bound_ort(sess, feeds, outs)
    xlac_call()
    ort_call()
    diff = max(float(np.abs(o.astype(np.float64) - r).max()) for o, r in zip(outs, refs))
    tx, to = side_by_side([xlac_call, ort_call], samples, sample_s)
    return tx, to, diff


def measure(name: str, model: onnx.ModelProto, samples: int, sample_s: float) -> dict:
    feeds = graph_inputs(model, np.random.default_rng(1))
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        res = xlac.compile(model, os.path.join(tmp, f"{name}.o"))
        compile_s = time.perf_counter() - t
        m = xlac.load(res.output)
        code = code_bytes(res)
    tx, to, diff = race(m, ort_session(model), feeds, samples, sample_s)
    return {"model": name, "xlac_ms": tx * 1e3, "ort_ms": to * 1e3, "ratio": tx / to,
            "compile_s": compile_s, "code_bytes": code, "arena_bytes": m.arena_size,
            "max_diff": diff}


def code_bytes(res) -> int:
    """The object's executable sections: its code, without the weights or other data."""
    from xlac.emitter.elf import ElfObject
    from xlac.emitter.render import weights_section
    from xlac.emitter.target import make_target
    section = weights_section(res.name, make_target()[0])
    return ElfObject(res.output.read_bytes()).footprint(section)["code"]


# -- profile ------------------------------------------------------------------------------

def compile_profiled(name: str, model: onnx.ModelProto, path: Path, parallel: bool = False,
                     backend=None, counter: int | None = None):
    """Compile ``model`` to ``path`` with a cycle counter around every step
    (``EmitOptions(profile=True)``; for ``backend``, default this machine's, reading the
    32-bit counter at address ``counter`` where one is given); returns the C name, the
    optimized module and the Artifact (``profile_sites``: each slot's instruction name)."""
    from xlac.backends import make_backend
    from xlac.emitter import EmitOptions
    from xlac.importers.onnx import import_onnx
    from xlac.optimizer import optimize, plan_memory

    cname = name.replace("-", "_")
    backend = backend or make_backend()
    module = optimize(import_onnx(model, name=cname), backend)
    assignment = plan_memory(module, backend)
    art = backend.emit(module, assignment, EmitOptions(cname, profile=True, parallel=parallel,
                                                       profile_counter=counter))
    path.write_bytes(art.object_code)
    path.with_suffix(".h").write_text(art.header)
    return cname, module, art


def counters(lib, cname: str, prefix: str, n: int, what=("cycles", "calls")):
    """The exported u64 arrays NAME_``prefix``_``what`` of a profiled library, as numpy
    views."""
    return [np.ctypeslib.as_array((ctypes.c_uint64 * max(n, 1)).in_dll(
        lib, f"{cname}_{prefix}_{w}")) for w in what]


def ms_per_cycle(lib, cname: str) -> float:
    """The cycle counter's period, from a timed sleep (rdtsc ticks at a constant rate)."""
    counter = getattr(lib, f"{cname}_profile_counter")
    counter.restype = ctypes.c_uint64
    c0, t0 = counter(), time.perf_counter()
    time.sleep(0.05)
    return (time.perf_counter() - t0) * 1e3 / max(counter() - c0, 1)


def profile(name: str, model: onnx.ModelProto, runs: int, top: int) -> None:
    """Time per HLO instruction of ``model`` (see the module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / f"{name}.o"
        cname, module, art = compile_profiled(name, model, obj)
        m = xlac.load(obj)
    by_name = {i.name: i for c in module.computations for i in c.instructions}
    sites = [by_name.get(label) for label in art.profile_sites]

    feeds = graph_inputs(model, np.random.default_rng(1))
    xs = [feeds[i.name] for i in model.graph.input if i.name in feeds]
    outs = [np.empty(t.shape, t.dtype) for t in m.outputs]
    arena = m.new_arena()
    lib = ctypes.CDLL(str(m.library_path))
    cycles, calls = counters(lib, cname, "profile", len(sites))
    m.run(xs, outs, arena)
    per_run, walls = [], []
    for _ in range(runs):         # per site, the median over runs: robust to load spikes
        cycles[:] = 0
        t = time.perf_counter()
        m.run(xs, outs, arena)
        walls.append(time.perf_counter() - t)
        per_run.append(cycles.copy())
    counts = calls // (runs + 1)
    med = np.median(np.array(per_run, dtype=np.float64), axis=0)
    wall_ms = statistics.median(walls) * 1e3
    period = ms_per_cycle(lib, cname)
    inside = float(med.sum()) * period
    print(f"{name}: {wall_ms:.3f} ms per run (median of {runs}), {inside:.3f} ms in its "
          f"{len(sites)} call sites, the rest in the call from Python and the entry; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'us':>9} {'share':>6} {'calls':>6}  instruction")
    for k in np.argsort(-med)[:top]:
        instr = sites[k]
        what = describe(instr) if instr is not None else art.profile_sites[k]
        print(f"{med[k] * period * 1e3:9.1f} {100 * med[k] / med.sum():5.1f}% "
              f"{counts[k]:6d}  {what}")


def describe(instr) -> str:
    """The opcode, shape and, for a fusion, the opcodes inside it; a convolution's (or a
    fused one's) window, stride and groups."""
    from xlac.hlo import Opcode
    text = f"%{instr.name} = {instr.opcode.text} {instr.shape}"
    inside = instr.called[0].instructions if instr.opcode is Opcode.FUSION else [instr]
    if instr.opcode is Opcode.FUSION:
        ops = [i.opcode.text for i in inside
               if i.opcode not in (Opcode.PARAMETER, Opcode.CONSTANT, Opcode.BROADCAST)]
        text += f" {{{', '.join(ops)}}}"
    for conv in (i for i in inside if i.opcode is Opcode.CONVOLUTION):
        w = conv.attrs["window"]
        text += (f" window {'x'.join(map(str, w.size))} stride "
                 f"{'x'.join(map(str, w.stride))} groups {conv.attrs['feature_group_count']}")
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter samples")
    ap.add_argument("--runs", type=int, help="samples per side (default 21, quick 7)")
    ap.add_argument("--sample-ms", type=float, help="length of a sample (default 20, quick 5)")
    ap.add_argument("--only", help="comma-separated substrings of the model names to run")
    ap.add_argument("--light", action="store_true", help="add the nine light ImageNet CNNs")
    ap.add_argument("--profile", metavar="MODEL", help="time per HLO instruction of MODEL")
    ap.add_argument("--top", type=int, default=25, help="rows of --profile")
    args = ap.parse_args()
    models = dict(MODELS)
    if args.light or (args.profile and args.profile not in models):
        models.update(light_models())
    if args.profile:
        if args.profile not in models:
            ap.error(f"unknown model {args.profile!r}; choose from {', '.join(models)}")
        profile(args.profile, models[args.profile](), args.runs or 50, args.top)
        return
    samples = args.runs or (7 if args.quick else 21)
    sample_s = (args.sample_ms or (5 if args.quick else 20)) / 1e3
    only = args.only.split(",") if args.only else None
    header = (f"{'model':<22} {'xlac ms':>9} {'ort ms':>9} {'ratio':>6} {'compile s':>10} "
              f"{'code KiB':>9} {'arena KiB':>10} {'max |diff|':>11}")
    print(f"load average at start: {os.getloadavg()[0]:.2f} (1 min), "
          f"{samples} samples of ~{sample_s * 1e3:.0f} ms per side")
    print(header)
    print("-" * len(header))
    rows = []
    for name, build in models.items():
        if only and not any(o in name for o in only):
            continue
        try:
            model = build()
        except ModuleNotFoundError as e:       # user_models.py's torch / sklearn builders
            print(f"{name:<22} skipped: needs {e.name}", flush=True)
            continue
        r = measure(name, model, samples, sample_s)
        rows.append(r)
        print(f"{name:<22} {r['xlac_ms']:9.3f} {r['ort_ms']:9.3f} {r['ratio']:6.2f} "
              f"{r['compile_s']:10.1f} {r['code_bytes'] / 1024:9.1f} "
              f"{r['arena_bytes'] / 1024:10.1f} "
              f"{r['max_diff']:11.3g}", flush=True)
    if rows:
        geo = float(np.exp(np.mean([np.log(r["ratio"]) for r in rows])))
        worst = max(rows, key=lambda r: r["ratio"])
        print(f"geometric mean of xlac/onnxruntime latency: {geo:.2f} over {len(rows)} models; "
              f"worst: {worst['model']} {worst['ratio']:.2f}; "
              f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
