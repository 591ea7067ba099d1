"""NAME_run_parallel: the big loops and kernels split into tasks for the caller's
parallel-for give NAME_run's results bit for bit, with 1, 2, 3 and 7 threads, with
more tasks than the pool has threads, and in a C program on the pthreads pool."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import target_util
import xlac
from target_util import by_width, every_target, expected
from xlac.hlo import XlacError

RUNTIME_DIR = Path(xlac.runtime_c.__file__).parent
C_STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
RNG = np.random.default_rng(0)


def _weights(name, shape, scale=0.1):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32),
                                   name)


def _model(nodes, inputs, outputs, inits):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def cnn(batch: int = 1):
    """Dense, depthwise and strided convolutions, residual adds, an element loop, a
    reduction, a dot; one image splits convolutions by output channels and groups, two
    by images (the biases, fused into the convolutions, move with their channels, the
    residuals, fused into the depthwise one and a dense one, with their outputs)."""
    n = helper.make_node
    return _model([
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "wd", "bd"], ["c2"], pads=[1, 1, 1, 1], group=40),
        n("Add", ["c2", "r1"], ["a"]),
        n("Tanh", ["a"], ["t"]),
        n("Conv", ["t", "w4", "b4"], ["c4"], pads=[1, 1, 1, 1]),
        n("Add", ["t", "c4"], ["u"]),
        n("Relu", ["u"], ["v"]),
        n("Conv", ["v", "w3"], ["c3"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("ReduceMean", ["c3"], ["m"], axes=[3], keepdims=0),
        n("MatMul", ["m", "wf"], ["y"]),
    ], [("x", [batch, 16, 40, 40])], [("y", [batch, 24, 20])], [
        _weights("w1", (40, 16, 3, 3)), _weights("b1", (40,)), _weights("wd", (40, 1, 3, 3)),
        _weights("bd", (40,)), _weights("w4", (40, 40, 3, 3)), _weights("b4", (40,)),
        _weights("w3", (24, 40, 3, 3)), _weights("wf", (20, 20))])


def stem():
    """A stem convolution (3 input channels, constant weights: ChannelConv) with its bias
    and ReLU fused, split by panels of output channels (96 = 3 x 32), then a strided
    one onto a small map (ChannelConv, two panels)."""
    n = helper.make_node
    return _model([
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[3, 3, 3, 3], strides=[2, 2]),
        n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "w2"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2]),
    ], [("x", [1, 3, 45, 50])], [("y", [1, 64, 12, 13])], [
        _weights("w1", (96, 3, 7, 7)), _weights("b1", (96,)), _weights("w2", (64, 96, 3, 3))])


def winograd(batch: int = 1):
    """3x3 stride-1 convolutions on the Winograd kernel (a 1x1 pair before them sets the
    arena's peak, so their scratch does not and they keep it), with a bias and ReLU and
    a bias and residual fused; split by blocks of output channels, or images."""
    n = helper.make_node
    return _model([
        n("Conv", ["x", "wa"], ["big"]),
        n("Conv", ["big", "wb"], ["s"]),
        n("Conv", ["s", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        n("Add", ["c2", "s"], ["y"]),
    ], [("x", [batch, 40, 29, 27])], [("y", [batch, 40, 29, 27])], [
        _weights("wa", (320, 40, 1, 1)), _weights("wb", (40, 320, 1, 1)),
        _weights("w1", (48, 40, 3, 3)), _weights("b1", (48,)),
        _weights("w2", (40, 48, 3, 3)), _weights("b2", (40,))])


def stem_rows():
    """ChannelConv split by output rows: a stem of one panel (32 channels) with its
    padding (31 x 32 output pixels, below the AVX2 row's rows_min_stem_pixels), and a
    strided window on a small map (one panel) with a residual."""
    n = helper.make_node
    return _model([
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "w2"], ["c2"]),
        n("Tanh", ["c2"], ["t"]),
        n("Conv", ["t", "w3"], ["c3"], strides=[2, 2]),
        n("Add", ["c3", "r3"], ["y"]),
    ], [("x", [1, 3, 62, 63])], [("y", [1, 32, 15, 15])], [
        _weights("w1", (32, 3, 3, 3)), _weights("b1", (32,)), _weights("w2", (64, 32, 1, 1)),
        _weights("w3", (32, 64, 3, 3)), _weights("r3", (32, 15, 15))])


def small_pointwise():
    """1x1 convolutions on a small map (ChannelConv, panels of 3 vectors): from 128
    channels (a K long enough for ChannelConv where the panels are not full) to 512
    channels (11 panels, the last of 2 vectors: 6 of them leave more to one task than 5
    of 9 rows), to 560 with a bias and ReLU6 (12 panels), back to 96 (a long K) with a
    residual (2 panels), to 48 (one panel: rows), and from the 560 to 48 (a long K, one
    panel: rows), added."""
    n = helper.make_node
    return _model([
        n("Conv", ["x", "w0"], ["c0"]),
        n("Conv", ["c0", "w1", "b1"], ["c1"]),
        n("Clip", ["c1", "lo", "hi"], ["r1"]),
        n("Conv", ["r1", "w2"], ["c2"]),
        n("Add", ["c2", "r2"], ["a2"]),
        n("Conv", ["a2", "w3"], ["c3"]),
        n("Conv", ["r1", "w4"], ["c4"]),
        n("Add", ["c3", "c4"], ["y"]),
    ], [("x", [1, 128, 9, 11])], [("y", [1, 48, 9, 11])], [
        _weights("w0", (512, 128, 1, 1)), _weights("w1", (560, 512, 1, 1), 0.05),
        _weights("b1", (560,)), numpy_helper.from_array(np.array(0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6, np.float32), "hi"),
        _weights("w2", (96, 560, 1, 1)), _weights("r2", (96, 9, 11)),
        _weights("w3", (48, 96, 1, 1)), _weights("w4", (48, 560, 1, 1))])


def strided():
    """Strided 3x3 windows on maps past 256 pixels (ChannelConv, one panel: split by
    output rows, the parts' reads checked at the top and the left edge): with a bias
    and ReLU, then with a residual."""
    n = helper.make_node
    return _model([
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Add", ["c2", "r2"], ["y"]),
    ], [("x", [1, 16, 66, 70])], [("y", [1, 32, 17, 18])], [
        _weights("w1", (32, 16, 3, 3)), _weights("b1", (32,)), _weights("w2", (32, 32, 3, 3)),
        _weights("r2", (32, 17, 18))])


def pointwise():
    """Implicit GEMMs split by output pixels (a 1x1 one read in place and a strided one
    packed, with a residual, its 40 channels no multiple of ChannelConv's lanes; their
    last parts end inside an NR sliver) and by output channels (1x1 layers to 128
    channels on a small map, the first lean), with bias and ReLU fused."""
    n = helper.make_node
    return _model([
        n("Conv", ["x", "w1", "b1"], ["c1"]),
        n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Add", ["c2", "r2"], ["a2"]),
        n("Conv", ["a2", "w3"], ["c3"]),
        n("Relu", ["c3"], ["r3"]),
        n("Conv", ["r3", "w4"], ["y"]),
    ], [("x", [1, 16, 36, 36])], [("y", [1, 128, 18, 18])], [
        _weights("w1", (24, 16, 1, 1)), _weights("b1", (24,)),
        _weights("w2", (40, 24, 3, 3)), _weights("b2", (40,)),
        _weights("r2", (40, 18, 18)), _weights("w3", (128, 40, 1, 1)),
        _weights("w4", (128, 128, 1, 1))])


def shortcut():
    """ResNet's downsampling block, after a 1x1 pair that sets the arena's peak (so the
    block's kernels keep their scratch): a 3x3/2 convolution beside a strided 1x1 one (B
    packed from input rows, SubsamplePacker) with its bias and the residual add fused,
    split by output pixels (19 x 23: parts end inside rows and slivers); then a 1x1 of
    strides 2 x 3 onto an 8-wide map (vectors of 16 pixels on up to 3 rows)."""
    n = helper.make_node
    return _model([
        n("Conv", ["x", "wa"], ["big"]),
        n("Conv", ["big", "wb"], ["t"]),
        n("Conv", ["t", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Relu", ["c1"], ["r1"]),
        n("Conv", ["t", "ws", "bs"], ["s"], strides=[2, 2]),
        n("Add", ["r1", "s"], ["a"]),
        n("Relu", ["a"], ["r"]),
        n("Conv", ["r", "w2"], ["y"], strides=[2, 3]),
    ], [("x", [1, 8, 38, 46])], [("y", [1, 96, 10, 8])], [
        _weights("wa", (64, 8, 1, 1)), _weights("wb", (16, 64, 1, 1)),
        _weights("w1", (40, 16, 3, 3)), _weights("ws", (40, 16, 1, 1)), _weights("bs", (40,)),
        _weights("w2", (96, 40, 1, 1))])


def pool():
    """Max pooling rows (emitter/pooling.py) split by channels, then on one channel by
    output rows (both parts of a row's border / interior split), with the ReLU before
    it fused into the loop (the element loop) and not (the pooling rows)."""
    n = helper.make_node
    return _model([
        n("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("Conv", ["p", "w"], ["c"]),
        n("MaxPool", ["c"], ["q"], kernel_shape=[3, 2], strides=[1, 2], pads=[1, 0, 1, 1]),
        n("Relu", ["q"], ["r"]),
        n("MaxPool", ["r"], ["y"], kernel_shape=[2, 3], strides=[2, 1], pads=[0, 1, 1, 1]),
    ], [("x", [1, 4, 256, 130])], [("y", [1, 1, 128, 65])], [_weights("w", (1, 4, 1, 1))])


def average_pool():
    """Average pooling rows (emitter/pooling.py: the divide on each row vector) split by
    channels, dividing by counts (padding, ceil mode), then on one channel by output
    rows, dividing by a constant."""
    n = helper.make_node
    return _model([
        n("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], strides=[2, 2],
          pads=[1, 1, 1, 1], ceil_mode=1),
        n("Conv", ["a", "w"], ["c"]),
        n("AveragePool", ["c"], ["y"], kernel_shape=[2, 2]),
    ], [("x", [1, 4, 64, 70])], [("y", [1, 1, 32, 35])], [_weights("w", (1, 4, 1, 1))])


def row_conv():
    """Stems of few output channels (RowConv): 3->8 stride 2 with its bias and ReLU (one
    tile of channels, one task), then a grouped one (split by groups) with a residual
    add fused."""
    n = helper.make_node
    return _model([
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=2),
        n("Add", ["c2", "r1"], ["y"]),
    ], [("x", [1, 3, 33, 64])], [("y", [1, 8, 17, 32])], [
        _weights("w1", (8, 3, 3, 3)), _weights("b1", (8,)), _weights("w2", (8, 4, 3, 3)),
        _weights("b2", (8,))])


def encoder():
    """Batched dots (attention), a matrix-vector product, softmax and layer norm rows; a
    bias and erf-GELU fused into a product, a residual into a batched one."""
    n = helper.make_node
    return _model([
        n("MatMul", ["x", "wq"], ["q0"]),
        n("Add", ["q0", "bq"], ["q1"]),
        n("Div", ["q1", "sqrt2"], ["q2"]),
        n("Erf", ["q2"], ["q3"]),
        n("Add", ["q3", "one"], ["q4"]),
        n("Mul", ["q1", "q4"], ["q5"]),
        n("Mul", ["q5", "half"], ["q"]),
        n("Transpose", ["q"], ["qt"], perm=[0, 2, 1]),
        n("MatMul", ["q", "qt"], ["s"]),
        n("Softmax", ["s"], ["p"], axis=-1),
        n("MatMul", ["p", "x"], ["c0"]),
        n("Add", ["x", "c0"], ["ctx"]),
        n("LayerNormalization", ["ctx", "g", "beta"], ["ln"], axis=-1),
        n("MatMul", ["ln", "v"], ["y"]),
    ], [("x", [3, 96, 200])], [("y", [3, 96])], [
        _weights("wq", (200, 200)), _weights("bq", (200,)), _weights("g", (200,)), _weights("beta", (200,)),
        _weights("v", (200,))] + [numpy_helper.from_array(np.array(v, np.float32), name)
                                  for name, v in (("sqrt2", 2 ** 0.5), ("one", 1), ("half", 0.5))])


def mlp():
    """Fully connected layers of one row with bias, ReLU and a residual fused into the
    matrix-vector kernels (rows contiguous in k, then columns contiguous), split by
    output columns."""
    n = helper.make_node
    return _model([
        n("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        n("Relu", ["h"], ["hr"]),
        n("MatMul", ["hr", "w2"], ["z"]),
        n("Add", ["z", "b2"], ["zb"]),
        n("Add", ["zb", "x"], ["zr"]),
        n("Relu", ["zr"], ["y"]),
    ], [("x", [1, 600])], [("y", [1, 600])], [
        _weights("w1", (1000, 600)), _weights("b1", (1000,)), _weights("w2", (1000, 600)),
        _weights("b2", (600,))])


def dense(weights_input: bool = False):
    """A product of 64 rows, its bias, residual and ReLU fused; ``weights_input``: its
    weights are an input, so that each call packs them (not a constant, packed at
    compile time)."""
    n = helper.make_node
    w = [("w", [256, 256])] if weights_input else []
    return _model([
        n("MatMul", ["x", "w"], ["h"]),
        n("Add", ["h", "b"], ["hb"]),
        n("Add", ["hb", "x"], ["r"]),
        n("Relu", ["r"], ["y"]),
    ], [("x", [1, 64, 256])] + w, [("y", [1, 64, 256])],
        ([] if weights_input else [_weights("w", (256, 256))]) + [_weights("b", (256,))])


def loop():
    """A Loop whose body's dot and element-wise ops are split, three iterations."""
    n = helper.make_node
    body = helper.make_graph(
        [n("MatMul", ["v_in", "w"], ["h"]), n("Add", ["h", "b"], ["hb"]),
         n("Tanh", ["hb"], ["v_out"]), n("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [160, 256])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [160, 256])])
    m = _model([n("Loop", ["trips", "cond", "x"], ["y"], body=body)],
               [("x", [160, 256])], [("y", [160, 256])],
               [_weights("w", (256, 256), 0.06), _weights("b", (256,)),
                numpy_helper.from_array(np.array(3, np.int64), "trips"),
                numpy_helper.from_array(np.array(True), "cond")])
    return m


MODELS = {"cnn": cnn, "cnn_batch": lambda: cnn(2), "encoder": encoder, "mlp": mlp,
          "loop": loop, "stem": stem, "winograd": winograd,
          "winograd_batch": lambda: winograd(2), "pointwise": pointwise, "stem_rows": stem_rows,
          "shortcut": shortcut, "strided": strided,
          "small_pointwise": small_pointwise,
          "dense": dense, "pool": pool, "average_pool": average_pool, "row_conv": row_conv}


@pytest.fixture(scope="module", params=sorted(MODELS))
def compiled(request, tmp_path_factory):
    model = MODELS[request.param]()
    path = tmp_path_factory.mktemp(request.param) / "m.o"
    xlac.compile(model, path, parallel=True)
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = RNG.standard_normal(dims).astype(np.float32)
    reference = xlac.load(path)(x)
    return path, x, reference


@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_parallel_entry_gives_one_thread_results_bit_for_bit(compiled, threads):
    path, x, reference = compiled
    m = xlac.load(path, threads=threads)
    for _ in range(2):      # the arena is reused: nothing may depend on its old bytes
        outputs = m(x)
        for got, want in zip(outputs, reference):
            np.testing.assert_array_equal(got, want)


def test_more_tasks_than_the_pool_has_threads(compiled):
    """A pool of 2 threads that says 7: up to 7 tasks share its 2 threads."""
    path, x, reference = compiled
    m = xlac.load(path, threads=2)
    m.pool.threads = 7
    header = path.with_suffix(".h").read_text()
    base, slot = (int(re.search(rf"_THREAD_SCRATCH_{w} (\d+)u", header).group(1))
                  for w in ("BASE", "SIZE"))
    m._arena_size = base + 6 * slot
    for got, want in zip(m(x), reference):
        np.testing.assert_array_equal(got, want)


def _function(ir: str, name: str) -> str | None:
    found = re.search(rf"define [^\n]*@{name}\(.*?\n}}\n", ir, re.S)
    return found and found.group(0)


def test_big_steps_become_tasks_and_the_one_thread_entry_stays_as_it_was(tmp_path):
    """Convolutions (dense, depthwise), dots and element loops each get a task function;
    NAME_run and NAME_run_v optimize to the same code as without the parallel entry."""
    model = cnn(2)          # one model: cnn() draws new weights, which LLVM may fold in
    xlac.compile(model, tmp_path / "p.ll", emit="llvm", parallel=True, name="m")
    xlac.compile(model, tmp_path / "s.ll", emit="llvm", name="m")
    ir, alone = (tmp_path / "p.ll").read_text(), (tmp_path / "s.ll").read_text()
    tasks = re.findall(r"define internal void @\"?([\w.]+)\.task\"?\(", ir)
    assert len(tasks) >= 4, tasks
    for entry in ("m_run", "m_run_v"):
        assert _function(ir, entry) is not None
        assert _function(ir, entry) == _function(alone, entry)
    assert _function(ir, "m_compute") == _function(alone, "m_compute")   # or both inlined
    assert ".task" not in _function(ir, "m_run_v")


def _splits(model, target_name: str):
    """The size each kernel of ``model`` is split along in the parallel entry for
    target_util's target ``target_name``."""
    from xlac.emitter import build_steps
    from xlac.emitter.kernels.gemm import tiling_for
    from xlac.emitter.parallel import kernel_split
    from xlac.emitter.steps import kernel_steps
    from xlac.importers.onnx import import_onnx
    from xlac.optimizer import optimize, plan_memory
    backend = target_util.backend(target_name)
    module = optimize(import_onnx(model), backend)
    steps = build_steps(module, plan_memory(module, backend), backend)
    splits = [(s.kernel.name, kernel_split(s.kernel.plan, tiling_for(backend.target)))
              for s in kernel_steps(steps) if s.kernel.kind == "kernel"]
    return [(name, split and split.axis.name) for name, split in splits]


# The split tests state each target's splits (target_util: vector bytes and the registers
# the kernels count); the models' docstrings tell the 64-byte story, the one the tests'
# names tell. Where vectors are shorter, ChannelConv takes the strided 3x3 windows of 40
# channels (a multiple of 8 and 4 lanes) and its panels hold fewer channels.
def _expect(target_name: str, splits):
    return expected(splits, target_util.target(target_name).vector_bytes)


@every_target()
def test_implicit_gemms_split_by_pixels_where_channel_blocks_would_repack(target_name):
    """Few output channels on a large map: pixel blocks (no im2col sliver packed twice,
    24 channels are no even split of 8-row blocks); many on a small map: channel
    blocks (49 pixels are two slivers, one half empty)."""
    shorter = [("ConvGemm", "PIXELS"), ("ChannelConv", "ROWS"), ("DirectConv", "CHANNELS"),
               ("ConvGemm", "PIXELS")]
    assert _splits(pointwise(), target_name) == _expect(target_name, by_width(
        shorter, shorter, [("ConvGemm", "PIXELS"), ("ConvGemm", "PIXELS"),
                           ("DirectConv", "CHANNELS"), ("ConvGemm", "CHANNELS")]))


@every_target()
def test_strided_pointwise_gemm_splits_by_pixels(target_name):
    """The shortcut (40 channels, 437 pixels) by pixel blocks, whose packer starts
    mid-row; the 1x1 of stride 3 (96 channels, 80 pixels) by channel blocks (by pixel
    blocks at 16-byte vectors, where it is im2col's)."""
    assert _splits(shortcut(), target_name)[2:] == _expect(target_name, by_width(
        [("ChannelConv", "ROWS"), ("ConvGemm", "PIXELS"), ("ConvGemm", "PIXELS")],
        [("ChannelConv", "ROWS"), ("ConvGemm", "PIXELS"), ("ConvGemm", "CHANNELS")],
        [("ConvGemm", "PIXELS"), ("ConvGemm", "PIXELS"), ("ConvGemm", "CHANNELS")]))


@every_target()
def test_products_split_by_columns_where_row_blocks_would_repack(target_name):
    assert _splits(dense(weights_input=True), target_name) == [("FastDot", "N")]
    # constant weights are packed already: row and column blocks do the same work
    assert _splits(dense(), target_name) == [("PackedWeightsDot", "N")]
    # 36 row blocks, 7 column ones
    assert _splits(encoder(), target_name)[0] == ("PackedWeightsDot", "M")


@every_target()
def test_channel_convolutions_of_one_panel_split_by_rows(target_name):
    """32 channels are one panel at 64-byte vectors only: by panels where they are
    shorter."""
    shorter = [("ChannelConv", "CHANNELS"), ("DirectConv", "CHANNELS"), ("ChannelConv", "CHANNELS")]
    assert _splits(stem_rows(), target_name) == _expect(target_name, by_width(
        shorter, shorter,
        [("ChannelConv", "ROWS"), ("DirectConv", "CHANNELS"), ("ChannelConv", "ROWS")]))


@every_target()
def test_small_map_pointwise_splits_by_panels_or_rows(target_name):
    """(At 64-byte vectors; with panels of fewer channels, more of them split by
    panels.)"""
    panels, rows = ("ChannelConv", "CHANNELS"), ("ChannelConv", "ROWS")
    assert _splits(small_pointwise(), target_name) == _expect(target_name, by_width(
        [panels] * 5, [panels] * 3 + [rows] * 2, [rows] + [panels] * 2 + [rows] * 2))


@every_target()
def test_strided_channel_convolutions_split_by_rows(target_name):
    """32 channels are one panel at 64-byte vectors only: by panels where they are
    shorter."""
    assert _splits(strided(), target_name) == _expect(target_name, by_width(
        [("ChannelConv", "CHANNELS")] * 2, [("ChannelConv", "CHANNELS")] * 2,
        [("ChannelConv", "ROWS")] * 2))


def test_profile_counts_both_entries_and_the_tasks_on_every_thread(tmp_path):
    """EmitOptions(profile=True, parallel=True): one slot per step in each entry, named
    by its instruction; a split step's tasks add their cycles to its busy slot, and no
    task of an unsplit step does."""
    import ctypes
    from xlac.backends import make_backend
    from xlac.emitter import EmitOptions
    from xlac.emitter.kernels.gemm import tiling_for
    from xlac.emitter.parallel import kernel_split, loop_split
    from xlac.importers.onnx import import_onnx
    from xlac.optimizer import optimize, plan_memory
    backend = make_backend()
    target = backend.target
    module = optimize(import_onnx(cnn()), backend)
    plan = plan_memory(module, backend)
    art = backend.emit(module, plan, EmitOptions("m", profile=True, parallel=True))
    by_name = {i.name: i for i in module.entry.instructions}
    assert art.profile_sites == art.profile_parallel_sites
    assert len(art.profile_sites) >= 2 and set(art.profile_sites) <= set(by_name)
    (tmp_path / "m.o").write_bytes(art.object_code)
    (tmp_path / "m.h").write_text(art.header)
    m = xlac.load(tmp_path / "m.o", threads=2)
    lib = ctypes.CDLL(str(m.library_path))
    n = len(art.profile_sites)
    cycles, calls, busy = (np.ctypeslib.as_array((ctypes.c_uint64 * n).in_dll(
        lib, f"m_profile_parallel_{w}")) for w in ("cycles", "calls", "busy"))
    m(RNG.standard_normal((1, 16, 40, 40)).astype(np.float32))
    assert list(calls) == [1] * n and all(cycles > 0)
    tiling = tiling_for(target)
    kernels = {i: backend.kernel(i, i in plan.lean_kernels) for i in by_name.values()}
    split = np.array([(kernel_split(kernels[i].plan, tiling) if kernels[i] is not None
                       else loop_split(i)) is not None
                      for i in (by_name[s] for s in art.profile_sites)])
    assert 0 < split.sum() < n and list(busy > 0) == list(split)
    assert all(busy[split] <= 2 * cycles[split])


def test_load_with_threads_needs_the_parallel_entry(tmp_path):
    path = tmp_path / "m.o"
    xlac.compile(loop(), path)
    assert "run_parallel" not in path.with_suffix(".h").read_text()
    with pytest.raises(XlacError, match="has no m_run_parallel; compile it with parallel=True"):
        xlac.load(path, threads=2)
    with pytest.raises(XlacError, match="threads must be a positive int"):
        xlac.load(path, threads=0)


C_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "m.h"

int main(void) {
  static float x[m_x_COUNT], y1[m_y_COUNT], y3[m_y_COUNT];
  size_t k, threads = 3;
  void *arena1 = aligned_alloc(m_ARENA_ALIGN, (m_ARENA_SIZE + m_ARENA_ALIGN - 1)
                               / m_ARENA_ALIGN * m_ARENA_ALIGN);
  size_t bytes = m_ARENA_SIZE_THREADS(threads);
  void *arena3 = aligned_alloc(m_ARENA_ALIGN, (bytes + m_ARENA_ALIGN - 1)
                               / m_ARENA_ALIGN * m_ARENA_ALIGN);
  xlac_threadpool *pool = xlac_threadpool_create(threads);
  int s1, s3;
  if (arena1 == NULL || arena3 == NULL || pool == NULL) return 2;
  for (k = 0; k < m_x_COUNT; k++) x[k] = (float)(k % 13) / 13.0f - 0.5f;
  s1 = m_run(x, y1, arena1);
  s3 = m_run_parallel(x, y3, arena3, pool);
  printf("status %d %d, same %d, y0 %g\n", s1, s3, memcmp(y1, y3, sizeof y1) == 0,
         (double)y1[0]);
  xlac_threadpool_destroy(pool);
  free(arena1);
  free(arena3);
  return 0;
}
"""


def test_c_program_on_the_pthreads_pool(tmp_path):
    """The header compiles as C and C++; a C program links the object, the runtime and
    the pthreads pool, and NAME_run_parallel on 3 threads matches NAME_run."""
    xlac.compile(cnn(), tmp_path / "m.o", parallel=True)
    (tmp_path / "main.c").write_text(C_PROGRAM)
    (tmp_path / "include.cc").write_text('#include "m.h"\nint main() { return 0; }\n')
    inc = [f"-I{tmp_path}", f"-I{RUNTIME_DIR}"]
    subprocess.run(["c++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic", *inc,
                    "-fsyntax-only", tmp_path / "include.cc"], check=True)
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", *inc,
                    tmp_path / "main.c", tmp_path / "m.o", RUNTIME_DIR / "xlac_runtime.c",
                    RUNTIME_DIR / "xlac_threadpool.c", "-pthread", "-lm", "-o",
                    tmp_path / "app"], check=True)
    done = subprocess.run([tmp_path / "app"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("status 0 0, same 1,"), done.stdout


def test_threadpool_source_is_strict_c99():
    subprocess.run(["cc", *C_STRICT, "-pthread", f"-I{RUNTIME_DIR}", "-fsyntax-only",
                    RUNTIME_DIR / "xlac_threadpool.c"], check=True)


def test_parallel_entry_on_a_32_bit_target_needs_no_64_bit_division(tmp_path):
    """The task bounds are divided in size_t's width: a Cortex-M object with the
    parallel entry needs no __udivdi3 from libgcc (nor anything else)."""
    result = xlac.compile(cnn(2), tmp_path / "m.o", target="thumbv7em-none-eabihf",
                          cpu="cortex-m7", parallel=True)
    header = result.paths[1].read_text()
    assert "m_run_parallel(" in header
    assert "__udivdi3" not in header and "__aeabi_uldivmod" not in header
