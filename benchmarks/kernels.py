"""GFLOP/s of the dot / convolution kernels next to onnxruntime on the same single op.

    python benchmarks/kernels.py [--runs 7] [--only NAME]
    python benchmarks/kernels.py --tuning [--runs 7] [--only NAME]

A second table times pooling (memory-bound: microseconds, no FLOPs) as a one-node model
compiled whole, next to onnxruntime, alternating runs (models.py's ``measure``).

Both sides run single-threaded on this machine; the table shows medians over --runs
runs (after one warm-up), each as a fraction of one core's FP32 peak, the largest
difference between the two outputs, and the time to generate, optimize (O3) and
JIT-compile the kernel. The kernel is the generic code that layers of a model share:
its sizes are read at run time, not folded in. A convolution's weights are a constant,
as in a model (kernels may take them packed at compile time). Each side is timed on
operands bound once (the kernel through ``CompiledKernel.bind``, one foreign call;
onnxruntime through an IOBinding), so the times are the ops', not those of the Python
around them (``CompiledKernel.__call__`` costs about 12 us, ``InferenceSession.run``
2 us more than its IOBinding: a fifth of ResNet's 1x1/2 layers).

GFLOP/s count the direct convolution's FLOPs (2 x output elements x Cin/group x window),
whatever the kernel does: the 3x3 stride-1 layers that take Winograd's F(2x2, 3x3)
(emitter/kernels/conv/winograd.py: 16 multiplies per 2 x 2 outputs where the direct
convolution does 36) show the rate of the direct convolution that would take as long,
above the peak where the GEMMs run near it.

``--tuning`` times the cases behind the convolution path's thresholds
(emitter/kernels/conv/tuning.py; benchmarks/conv_tuning.md lists what they measured):
each convolution under two plans, a path or a tuning row's tile each, and the ratio of
the first's kernel time to the second's (below 1: the first is faster). ``--only``
matches a threshold's name or a case's.

The peak is measured, not looked up: the fastest of 51 short runs of a JIT loop of 24
independent vector FMA chains at the kernels' vector width (``peak_gflops``), i.e. FMA
units x lanes x 2 x the clock this core runs at (a Zen 5 core with AVX-512: 2 x 16 x 2
= 64 FLOP per cycle, 288 GFLOP/s at 4.5 GHz). On a loaded machine the fractions of it
read low: the peak is the unloaded core's, the kernels' medians are not.
"""
from __future__ import annotations

import argparse
import re
import time
from dataclasses import replace

import ctypes

import numpy as np
import onnxruntime as ort
from llvmlite import binding as llvm
from llvmlite import ir
from onnx import TensorProto, helper, shape_inference

import models

from xlac.hlo import (Builder, ConvDimensionNumbers, DotDimensionNumbers, Shape, Window,
                      dtypes)
from xlac.emitter.intrinsics import declare_intrinsic
from xlac.emitter.kernels.conv import plan_conv
from xlac.emitter.kernels.conv.tuning import conv_tuning
from xlac.emitter.kernels.jit import CompiledKernel, host_machine, host_target


def conv_case(name, x, w, stride=1, pad=0, groups=1):
    nsp = len(x) - 2
    b = Builder(name)
    xi = b.parameter(0, Shape.array(dtypes.F32, x))
    wi = b.constant(np.random.default_rng(1).standard_normal(w).astype(np.float32))
    win = Window.make(w[2:], (stride,) * nsp, (pad,) * nsp, (pad,) * nsp)
    instr = b.convolution(xi, wi, win, ConvDimensionNumbers.nchw(nsp), groups)
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[stride] * nsp,
                            pads=[pad] * 2 * nsp, group=groups)
    flops = 2 * instr.shape.num_elements * w[1] * int(np.prod(w[2:]))
    return name, instr, node, flops


def gemm_case(name, m, k, n, trans_b):
    b = Builder(name)
    a = b.parameter(0, Shape.array(dtypes.F32, (m, k)))
    bw = b.parameter(1, Shape.array(dtypes.F32, (n, k) if trans_b else (k, n)))
    instr = b.dot(a, bw, DotDimensionNumbers((), (1,), (), (1 if trans_b else 0,)))
    if trans_b:
        node = helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)
    else:
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
    return name, instr, node, 2 * m * n * k


CASES = [
    conv_case("resnet 7x7/2 3->64 @224", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3),
    conv_case("resnet 3x3 64->64 @56", (1, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    conv_case("resnet 1x1 256->64 @56", (1, 256, 56, 56), (64, 256, 1, 1)),
    conv_case("resnet 1x1 64->256 @56", (1, 64, 56, 56), (256, 64, 1, 1)),
    conv_case("resnet 3x3/2 128->128 @56", (1, 128, 56, 56), (128, 128, 3, 3), 2, 1),
    conv_case("resnet 3x3 128->128 @28", (1, 128, 28, 28), (128, 128, 3, 3), 1, 1),
    conv_case("resnet 3x3/2 64->128 @56", (1, 64, 56, 56), (128, 64, 3, 3), 2, 1),
    conv_case("resnet 3x3/2 256->512 @14", (1, 256, 14, 14), (512, 256, 3, 3), 2, 1),
    conv_case("resnet 1x1/2 64->128 @56", (1, 64, 56, 56), (128, 64, 1, 1), 2),
    conv_case("resnet 1x1/2 128->256 @28", (1, 128, 28, 28), (256, 128, 1, 1), 2),
    conv_case("resnet 1x1/2 256->512 @14", (1, 256, 14, 14), (512, 256, 1, 1), 2),
    conv_case("resnet8 3x3/2 16->32 @32", (1, 16, 32, 32), (32, 16, 3, 3), 2, 1),
    conv_case("resnet8 3x3/2 32->64 @16", (1, 32, 16, 16), (64, 32, 3, 3), 2, 1),
    conv_case("resnet 3x3 256->256 @14", (1, 256, 14, 14), (256, 256, 3, 3), 1, 1),
    conv_case("resnet 1x1 1024->256 @14", (1, 1024, 14, 14), (256, 1024, 1, 1)),
    conv_case("resnet 3x3 512->512 @7", (1, 512, 7, 7), (512, 512, 3, 3), 1, 1),
    conv_case("vgg 3x3 256->256 @56", (1, 256, 56, 56), (256, 256, 3, 3), 1, 1),
    conv_case("resnet8 3x3 16->16 @32", (1, 16, 32, 32), (16, 16, 3, 3), 1, 1),
    conv_case("resnet8 3x3 32->32 @16", (1, 32, 16, 16), (32, 32, 3, 3), 1, 1),
    conv_case("resnet8 3x3 64->64 @8", (1, 64, 8, 8), (64, 64, 3, 3), 1, 1),
    conv_case("mnv2 1x1 320->1280 @7", (1, 320, 7, 7), (1280, 320, 1, 1)),
    conv_case("mnv2 1x1 960->320 @7", (1, 960, 7, 7), (320, 960, 1, 1)),
    conv_case("mnv2 1x1 160->960 @7", (1, 160, 7, 7), (960, 160, 1, 1)),
    conv_case("mnv2 1x1 576->96 @14", (1, 576, 14, 14), (96, 576, 1, 1)),
    conv_case("depthwise 3x3 256 @28", (1, 256, 28, 28), (256, 1, 3, 3), 1, 1, 256),
    gemm_case("gemv 25088x4096 (transB)", 1, 25088, 4096, True),
    gemm_case("gemv 4096x4096 (MatMul)", 1, 4096, 4096, False),
    gemm_case("gemm 512x512x512", 512, 512, 512, False),
]


def named_conv(name):
    """The convolution a tuning case's name describes: "3x3/2 64->128 @56" (window,
    stride, channels, map; "@25x5": rows x columns) or "dw 3x3 144 @56" (depthwise),
    padded by half the window, its weights a constant."""
    m = re.fullmatch(r"(dw )?(\d+)x\d+(?:/(\d+))? (?:(\d+)->)?(\d+) @(\d+)(?:x(\d+))?", name)
    dw, k, stride, cin, cout, h, w = m.groups()
    k, cout, h = int(k), int(cout), int(h)
    cin = cout if dw else int(cin)
    x, wd = (1, cin, h, int(w or h)), (cout, 1 if dw else cin, k, k)
    return conv_case(name, x, wd, int(stride or 1), k // 2, cout if dw else 1)[1]


_ROWS_4x2 = {"depthwise_rows_block": 4, "depthwise_rows_unroll": 2}
_ROWS_1x4 = {"depthwise_rows_block": 1, "depthwise_rows_unroll": 4}

# (threshold, first plan, second plan, cases): a plan is a path ("gemm") or tuning fields
# ({"depthwise_rows_block": 1}; {}: the row as it is). benchmarks/conv_tuning.md.
TUNING_CASES = [
    ("direct_max_cout", "direct", "gemm", ["3x3 16->16 @32", "3x3 16->32 @32",
                                           "3x3 16->64 @32", "3x3 16->96 @32",
                                           "3x3 16->16 @112"]),
    ("direct_min_pixels", "direct", "channels", ["3x3 3->16 @32", "3x3 32->32 @8",
                                                 "3x3 64->32 @7"]),
    ("rows_min_stem_pixels", "rows", "channels", ["3x3/2 3->16 @224", "3x3/2 3->32 @224",
                                                  "3x3/2 3->16 @64", "3x3/2 3->16 @32"]),
    ("winograd_min_channels", "winograd", "gemm", ["3x3 16->16 @32", "3x3 32->32 @16"]),
    ("winograd_min_pixels", "winograd", "channels", ["3x3 64->64 @8"]),
    ("winograd_max_pairs_per_pixel", "winograd", "gemm", ["3x3 64->64 @56",
                                                          "3x3 256->256 @56"]),
    ("winograd_max_pairs_per_pixel", "winograd", "channels", ["3x3 256->256 @14",
                                                              "3x3 512->512 @7"]),
    ("channels_max_cin", "channels", "gemm", ["7x7/2 3->64 @224"]),
    ("channels_max_pixels", "channels", "gemm", ["3x3 256->256 @14", "3x3 512->512 @7"]),
    ("channels_max_strided_pointwise_pixels", "channels", "gemm",
     ["3x3/2 64->128 @56", "3x3/2 16->32 @224", "3x3/2 256->256 @56"]),
    ("channels_max_strided_pointwise_pixels", "channels", "gemm_subsample",
     ["1x1/2 64->128 @56"]),
    ("channels_max_pointwise_pixels", "channels", "gemm",
     ["1x1 576->96 @14", "1x1 64->384 @14", "1x1 64->256 @20", "1x1 32->192 @28"]),
    ("channels_min_pointwise_cin", "channels", "gemm",
     ["1x1 64->64 @25x5", "1x1 32->64 @12", "1x1 64->64 @12"]),
    # 28 accumulators: the general tile of 2 vectors in place of the 1x1 one.
    ("pointwise_accumulators", {}, {"pointwise_accumulators": 28},
     ["1x1 320->1280 @7", "1x1 960->320 @7", "1x1 160->960 @7"]),
    ("rows_max_cout", "rows", "gemm", ["3x3/2 3->8 @96", "3x3/2 3->20 @96", "7x7/2 3->8 @96"]),
    ("rows_max_cout", "channels", "rows", ["3x3/2 3->32 @224"]),
    ("rows_max_stride", "depthwise_rows", "depthwise",
     ["dw 3x3 32 @112", "dw 3x3 144 @48", "dw 3x3 576 @14", "dw 3x3 960 @7",
      "dw 3x3 64 @25x5", "dw 3x3/2 96 @112"]),
    ("depthwise_rows_block", _ROWS_4x2, _ROWS_1x4,
     ["dw 3x3 144 @56", "dw 3x3 192 @28", "dw 3x3/2 96 @112"]),
    ("subsample_max_pieces", "gemm_subsample", "gemm",
     ["1x1/2 64->128 @56", "1x1/2 64->16 @56", "1x1/2 32->64 @112"]),
]


def _label(plan) -> str:
    if isinstance(plan, str):
        return plan
    return ",".join(f"{k}={v}" for k, v in plan.items()) or "as tuned"


def _kernel(instr, plan) -> CompiledKernel:
    """The kernel of ``instr`` on the path, or with the tuning fields, ``plan``."""
    target = host_target()
    if isinstance(plan, str):
        return CompiledKernel(instr, target, plan=plan_conv(instr, target, path=plan))
    row = conv_tuning(target.vector_bytes, target.registers)
    return CompiledKernel(instr, target,
                          plan=plan_conv(instr, target, tuning=replace(row, **plan)))


def tuning_table(only: str, runs: int, rng) -> None:
    print(f"{'threshold':38} {'case':20} {'first':>26} {'second':>26} {'ms':>8} {'ms':>8}"
          f" {'ratio':>6}")
    for threshold, first, second, names in TUNING_CASES:
        for name in names:
            if only in threshold or only in name:
                t = [_time(named_conv(name), plan, runs, rng) for plan in (first, second)]
                print(f"{threshold:38} {name:20} {_label(first):>26} {_label(second):>26} "
                      f"{t[0] * 1e3:8.3f} {t[1] * 1e3:8.3f} {t[0] / t[1]:6.2f}", flush=True)


def _time(instr, plan, runs, rng) -> float:
    """Median seconds of ``instr``'s kernel under ``plan`` on random input."""
    x = rng.standard_normal(instr.operands[0].shape.dims).astype(np.float32)
    w = instr.operands[1].literal
    kernel = _kernel(instr, plan)
    out = np.empty(instr.shape.dims, np.float32)
    kernel(x, w, out=out)       # checks the scratch guard
    return median_seconds(kernel.bind(x, w, out=out), runs)


def pool_case(name, op, x, **attrs):
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "pool",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return name, shape_inference.infer_shapes(model)


POOL_CASES = [
    pool_case("avgpool 3x3/2 64 @56", "AveragePool", (1, 64, 56, 56), kernel_shape=[3, 3],
              strides=[2, 2], pads=[1, 1, 1, 1]),
    pool_case("avgpool 3x3/2 64 @56 include_pad", "AveragePool", (1, 64, 56, 56),
              kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
    pool_case("avgpool 2x2/2 64 @56", "AveragePool", (1, 64, 56, 56), kernel_shape=[2, 2],
              strides=[2, 2]),
    pool_case("resnet maxpool 3x3/2 64 @112", "MaxPool", (1, 64, 112, 112),
              kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    pool_case("resnet global avgpool 512 @7", "GlobalAveragePool", (1, 512, 7, 7)),
    pool_case("mobilenet_v2 global avgpool 1280 @7", "GlobalAveragePool", (1, 1280, 7, 7)),
]


def peak_gflops(chains: int = 24, iterations: int = 1_000_000) -> float:
    """FP32 GFLOP/s of a loop of ``chains`` independent FMA chains of the kernels' vector
    width: the most one core can do (enough chains to cover the FMA latency)."""
    lanes = host_target().vector_bytes // 4
    vty = ir.VectorType(ir.FloatType(), lanes)
    module = ir.Module("peak")
    module.triple = llvm.get_process_triple()
    fma = declare_intrinsic(module, "llvm.fma", vty, [vty] * 3, [vty])
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(),
                                                             ir.IntType(64)]), "peak")
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(ir.IntType(64))
    accs = [b.phi(vty) for _ in range(chains)]
    one, half = (ir.Constant(vty, [ir.Constant(ir.FloatType(), v)] * lanes) for v in (1.0, 0.5))
    nxt = [b.call(fma, [a, one, half]) for a in accs]
    i1 = b.add(i, ir.Constant(ir.IntType(64), 1))
    b.cbranch(b.icmp_unsigned("<", i1, fn.args[1]), loop, done)
    i.add_incoming(ir.Constant(ir.IntType(64), 0), entry)
    i.add_incoming(i1, loop)
    for a, n in zip(accs, nxt):
        a.add_incoming(ir.Constant(vty, None), entry)
        a.add_incoming(n, loop)
    b.position_at_end(done)
    total = nxt[0]
    for n in nxt[1:]:
        total = b.fadd(total, n)
    b.store(total, fn.args[0], align=4)
    b.ret_void()
    mod = llvm.parse_assembly(str(module))
    tm = host_machine()
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("peak"))
    out = np.empty(lanes, np.float32)
    # The fastest of several runs: the core's peak, not the load of a shared machine.
    best = min(_seconds(lambda: run(out.ctypes.data, iterations)) for _ in range(51))
    return iterations * chains * lanes * 2 / best / 1e9


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def ort_session(instr, node):
    x, w = (o.shape.dims for o in instr.operands)
    graph = helper.make_graph(
        [node], "op",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, w)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def ort_bound(sess, x, w, like):
    """onnxruntime's run on inputs and an output bound once (IOBinding), as the kernel
    is timed through CompiledKernel.bind."""
    io = sess.io_binding()
    io.bind_cpu_input("x", x)
    io.bind_cpu_input("w", w)
    y = np.empty_like(like)
    io.bind_output("y", "cpu", 0, np.float32, y.shape, y.ctypes.data)
    return lambda: (y, sess.run_with_iobinding(io))


def median_seconds(fn, runs):
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--only", default="")
    ap.add_argument("--tuning", action="store_true",
                    help="time the cases behind the convolution path's thresholds")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    if args.tuning:
        tuning_table(args.only, args.runs, rng)
        return
    peak = peak_gflops()
    print(f"peak: {peak:.1f} GFLOP/s on one core (a loop of vector FMAs, "
          f"{host_target().vector_bytes * 8}-bit vectors)")
    print("GF/s: the direct convolution's FLOPs over the time (Winograd layers do fewer)")
    print(f"{'case':32} {'xlac GF/s':>10} {'ort GF/s':>10} {'xlac %pk':>9} {'ort %pk':>8}"
          f" {'xlac ms':>9} {'ort ms':>9} {'max|diff|':>10} {'compile s':>10}")
    for name, instr, node, flops in CASES:
        if args.only not in name:
            continue
        x, w = (o.literal if o.literal is not None else
                rng.standard_normal(o.shape.dims).astype(np.float32) for o in instr.operands)
        t0 = time.perf_counter()
        kernel = CompiledKernel(instr)
        t_compile = time.perf_counter() - t0
        out = np.empty(instr.shape.dims, np.float32)
        sess = ort_session(instr, node)
        ref = sess.run(None, {"x": x, "w": w})[0].reshape(out.shape)
        kernel(x, w, out=out)       # checks the scratch guard
        t_x = median_seconds(kernel.bind(x, w, out=out), args.runs)
        t_o = median_seconds(ort_bound(sess, x, w, ref), args.runs)
        diff = float(np.abs(out - ref).max())
        gx, go = flops / t_x / 1e9, flops / t_o / 1e9
        print(f"{name:32} {gx:10.1f} {go:10.1f} {100 * gx / peak:8.0f}% {100 * go / peak:7.0f}% "
              f"{t_x * 1e3:9.2f} {t_o * 1e3:9.2f} {diff:10.2e} {t_compile:10.2f}", flush=True)
    pools = [(name, model) for name, model in POOL_CASES if args.only in name]
    if pools:
        print(f"\n{'pooling':36} {'xlac us':>9} {'ort us':>9} {'ratio':>6} {'max|diff|':>10}")
    for name, model in pools:
        r = models.measure("pool", model, 2 * args.runs + 1, 0.02)
        print(f"{name:36} {r['xlac_ms'] * 1e3:9.1f} {r['ort_ms'] * 1e3:9.1f} "
              f"{r['ratio']:6.2f} {r['max_diff']:10.2e}", flush=True)


if __name__ == "__main__":
    main()
