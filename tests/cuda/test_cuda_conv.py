"""The implicit-GEMM convolution kernel of the CUDA backend (emitter/cuda/conv.py).

The plan: which convolutions it takes (f32, 2-D, groups of at least MIN_GROUP_ROWS
output channels; narrower ones, depthwise, the direct kernel), how it flattens K and N
from the layouts, which spatial dims the gather bounds-checks and how it loads its B
tile.

ptxas: one-convolution models of every geometry (1x1, 3x3 at strides 1 and 2,
padding, asymmetric padding, dilation 2, groups 2 and 4, the 7x7 stride-2 stem, odd
sizes and windows, batch 2, each tile; channels-last and other dimension numbers, a
kernel layout whose K dims do not merge, base dilation, cropping) compile into PTX
holding the kernel (.entry, bar.sync, its shared tiles), which NVIDIA's assembler
accepts for sm_80 and sm_90 with warnings as errors and without spilling.

Emulation (the stand-in driver): the same convolutions match onnxruntime (ONNX models)
or the numpy evaluator (HLO modules) in both thread orders of a block (a missing
barrier shows in one of them), and the launch log shows the convolution as one launch
of 256-thread blocks, one per (group, tile row, tile column).

The direct kernel (depthwise and other narrow groups) likewise, as one grid-stride
launch; and the epilogues after all three (bias, BatchNorm, residual, clip, leaky
ReLU) fuse into them: one kernel, the output channel found in any dimension numbers.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
from xlac.backends import make_backend
from xlac.emitter import EmitOptions
from xlac.emitter.cuda import conv, dot
from xlac.emitter.cuda.ptxas import assemble, find_ptxas
from xlac.hlo import Opcode
from xlac.hlo.evaluator import evaluate
from xlac.hlo.text import parse_module
from xlac.importers.hlo import import_hlo
from xlac.optimizer import plan_memory

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_cuda_dot import compile_case, tiled_kernel  # noqa: E402
ARCHS = ("sm_80", "sm_90")
PTXAS = find_ptxas()
ORDERS = (None, "reverse")          # the stand-in's default order, then the reverse
LARGE, SMALL, SHORT, NARROW = dot.LARGE, dot.SMALL, dot.SHORT, dot.NARROW


def _rand(shape, seed) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@dataclass(frozen=True)
class Case:
    """A one-convolution model: ONNX (a ModelProto, the reference onnxruntime) or HLO text
    (compiled without the optimizer, so its layouts stay; the reference the numpy
    evaluator), its input shapes, and the convolution's groups, M (output channels per
    group), N (batch x output pixels), K (input channels per group x window) and tile."""
    model: Callable
    inputs: tuple
    groups: int
    m: int
    n: int
    k: int
    tile: dot.Tile

    @property
    def blocks(self) -> int:
        return self.groups * -(-self.m // self.tile.bm) * -(-self.n // self.tile.bn)

    def feeds(self) -> list[np.ndarray]:
        return [_rand(s, seed) for seed, s in enumerate(self.inputs)]

    def reference(self, feeds) -> np.ndarray:
        model = self.model()
        if isinstance(model, onnx.ModelProto):
            sess = ort.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"])
            return sess.run(None, {"x": feeds[0]})[0]
        module = parse_module(model)
        return evaluate(module, [f.astype(np.float64).astype(np.float32) for f in feeds])[0]


def onnx_conv(x, cout, kernel, tile, stride=1, pads=0, dilation=1, groups=1) -> Case:
    """ONNX Conv of an input ``x`` (N, C, H, W) with constant weights, no bias (its add
    would be a second kernel); ``kernel``, ``stride``, ``dilation`` an int or (h, w),
    ``pads`` an int or ONNX's (top, left, bottom, right)."""
    two = (lambda v: (v, v) if isinstance(v, int) else tuple(v))
    kernel, stride, dilation = two(kernel), two(stride), two(dilation)
    pads = (pads,) * 4 if isinstance(pads, int) else tuple(pads)
    n, c, h, w = x
    weights = _rand((cout, c // groups, *kernel), 10)
    out = [(size + pads[i] + pads[i + 2] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
           for i, size in enumerate((h, w))]

    def model():
        node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=list(kernel),
                                strides=list(stride), pads=list(pads),
                                dilations=list(dilation), group=groups)
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, (n, cout, *out))],
            [numpy_helper.from_array(weights, "w")])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return Case(model, (x,), groups, cout // groups, n * out[0] * out[1],
                c // groups * kernel[0] * kernel[1], tile)


def hlo(body, params, groups, m, n, k, tile) -> Case:
    """``body`` after the parameters ``params`` (shapes, default layouts), the root last."""
    decls = "\n".join(f"  p{i} = f32[{','.join(map(str, s))}] parameter({i})"
                      for i, s in enumerate(params))
    text = f"HloModule model\n\nENTRY e {{\n{decls}\n{body.strip()}\n}}\n"
    return Case(lambda: text, tuple(params), groups, m, n, k, tile)


CASES = {
    "pointwise_1x1": onnx_conv((1, 32, 14, 14), 64, 1, SMALL),
    "3x3_stride1_pad1": onnx_conv((1, 16, 17, 17), 32, 3, SMALL, pads=1),
    "3x3_stride2_pad1_batch2": onnx_conv((2, 8, 15, 15), 24, 3, SMALL, stride=2, pads=1),
    "3x3_no_padding": onnx_conv((1, 8, 10, 12), 16, 3, SHORT),
    "asymmetric_padding": onnx_conv((1, 8, 9, 11), 16, 3, SHORT, pads=(1, 0, 2, 1)),
    "dilation2": onnx_conv((1, 8, 20, 20), 16, 3, SHORT, pads=2, dilation=2),
    "groups2": onnx_conv((1, 16, 12, 12), 64, 3, SMALL, pads=1, groups=2),
    "groups4_stride2": onnx_conv((1, 32, 9, 9), 128, 3, SMALL, stride=2, pads=1, groups=4),
    "stem_7x7_stride2": onnx_conv((1, 3, 64, 64), 64, 7, SMALL, stride=2, pads=3),
    "odd_sizes": onnx_conv((1, 5, 13, 7), 11, (3, 2), SHORT, stride=(1, 2), pads=(1, 0, 1, 1)),
    "large_tile_batch2": onnx_conv((2, 16, 48, 48), 128, 3, LARGE, pads=1),
    "narrow_few_pixels": onnx_conv((1, 32, 4, 4), 64, 3, NARROW, pads=1),
    "short_8_channels": onnx_conv((1, 4, 10, 10), 8, 3, SHORT, pads=1),
    # Channels last (TF's NHWC / HWIO): K is (row, column, channel), the gather loads
    # consecutive channels.
    "nhwc_hwio": hlo("""
  ROOT c = f32[2,9,9,16] convolution(p0, p1), window={size=3x3 pad=1_1x1_1},
                                              dim_labels=b01f_01io->b01f
""", [(2, 9, 9, 8), (3, 3, 8, 16)], 1, 16, 162, 72, SHORT),
    "nhwc_groups2_stride2": hlo("""
  ROOT c = f32[1,5,5,32] convolution(p0, p1), window={size=3x3 stride=2x2 pad=1_1x1_1},
                                              dim_labels=b01f_01io->b01f,
                                              feature_group_count=2
""", [(1, 9, 9, 16), (3, 3, 8, 32)], 2, 16, 25, 72, SHORT),
    # Dimension numbers in unusual places: features first, the output's spatial dims
    # leading.
    "unusual_dimension_numbers": hlo("""
  ROOT c = f32[6,7,24,2] convolution(p0, p1), window={size=3x2 pad=1_1x0_0},
                                             dim_labels=fb01_io01->01fb
""", [(10, 2, 6, 8), (10, 24, 3, 2)], 1, 24, 84, 60, SMALL),
    # A kernel layout in which (input channel, row, column) do not lie together: K is
    # decoded dim by dim.
    "kernel_dims_apart": hlo("""
  w = f32[24,10,3,3]{2,0,3,1} copy(p1)
  ROOT c = f32[1,24,8,8] convolution(p0, w), window={size=3x3 pad=1_1x1_1},
                                            dim_labels=bf01_oi01->bf01
""", [(1, 10, 8, 8), (24, 10, 3, 3)], 1, 24, 64, 90, SMALL),
    # The input and the result in other layouts.
    "layouts": hlo("""
  x = f32[2,12,7,9]{1,3,2,0} copy(p0)
  c = f32[2,16,7,9]{2,1,3,0} convolution(x, p1), window={size=3x3 pad=1_1x1_1},
                                                dim_labels=bf01_oi01->bf01
  ROOT r = f32[2,16,7,9] copy(c)
""", [(2, 12, 7, 9), (16, 12, 3, 3)], 1, 16, 126, 108, SHORT),
    # Base (lhs) dilation with a stride (what phase splitting leaves), cropping.
    "base_dilation_stride2": hlo("""
  ROOT c = f32[1,16,5,5] convolution(p0, p1),
           window={size=3x3 stride=2x2 pad=2_1x1_2 lhs_dilate=2x2},
           dim_labels=bf01_oi01->bf01
""", [(1, 8, 5, 5), (16, 8, 3, 3)], 1, 16, 25, 72, SHORT),
    "negative_padding": hlo("""
  ROOT c = f32[1,16,8,6] convolution(p0, p1), window={size=3x3 pad=-1_1x0_-2},
                                              dim_labels=bf01_oi01->bf01
""", [(1, 8, 10, 10), (16, 8, 3, 3)], 1, 16, 48, 72, SHORT),
}


def conv_kernel(ptx: str) -> tuple[str, str]:
    """The name and the text of the one kernel of ``ptx`` with the convolution's tiles."""
    return tiled_kernel(ptx, "conv_a_tile")


def kernel_properties(printed: str, kernel: str, arch: str) -> tuple[str, str]:
    """ptxas -v's two lines about ``kernel``: the frame and spills, then the registers
    and shared memory."""
    props = re.search(rf"Compiling entry function '{kernel}' for '{arch}'\s*\n"
                      rf".*?Function properties for {kernel}\s*\n(.*?)\n(.*?)\n",
                      printed, re.S)
    assert props, printed
    return props.groups()


# -- the plan ----------------------------------------------------------------------------

def _conv_of(text: str):
    module = parse_module(f"HloModule m\nENTRY e {{\n{text.strip()}\n}}\n")
    return next(i for i in module.entry.instructions if i.opcode is Opcode.CONVOLUTION)


def _nchw(x, w, out, window="size=3x3 pad=1_1x1_1", groups=1, dtype="f32"):
    fmt = (lambda s: f"{dtype}[{','.join(map(str, s))}]")
    return _conv_of(f"""
  x = {fmt(x)} parameter(0)
  w = {fmt(w)} parameter(1)
  ROOT c = {fmt(out)} convolution(x, w), window={{{window}}}, dim_labels=bf01_oi01->bf01,
                       feature_group_count={groups}""")


def test_narrow_groups_run_the_direct_kernel():
    # One output channel per group (depthwise), then 4: most of a tile's rows would idle.
    for x, w, groups in (((1, 32, 8, 8), (32, 1, 3, 3), 32), ((1, 32, 8, 8), (32, 4, 3, 3), 8)):
        plan = conv.plan_conv(_nchw(x, w, (1, 32, 8, 8), groups=groups))
        assert isinstance(plan, conv.DirectPlan) and plan.m == 32 // groups
    # 8 output channels per group: a GEMM each.
    plan = conv.plan_conv(_nchw((1, 32, 8, 8), (32, 8, 3, 3), (1, 32, 8, 8), groups=4))
    assert isinstance(plan, conv.ConvPlan) and (plan.geometry.groups, plan.geometry.m) == (4, 8)
    # Narrow groups of many input channels: too many taps to unroll, the element loop.
    assert conv.plan_conv(_nchw((1, 64, 8, 8), (16, 16, 3, 3), (1, 16, 8, 8), groups=4)) is None


def test_other_types_and_ranks_are_left_to_the_loop():
    assert conv.plan_conv(_nchw((1, 8, 8, 8), (16, 8, 3, 3), (1, 16, 8, 8), dtype="f64")) is None
    one_d = _conv_of("""
  x = f32[1,8,10] parameter(0)
  w = f32[16,8,3] parameter(1)
  ROOT c = f32[1,16,8] convolution(x, w), window={size=3}, dim_labels=bf0_oi0->bf0""")
    assert conv.plan_conv(one_d) is None
    three_d = _conv_of("""
  x = f32[1,8,6,6,6] parameter(0)
  w = f32[16,8,3,3,3] parameter(1)
  ROOT c = f32[1,16,4,4,4] convolution(x, w), window={size=3x3x3},
                           dim_labels=bf012_oi012->bf012""")
    assert conv.plan_conv(three_d) is None


def test_plan_flattens_k_and_n_in_the_layouts_order():
    plan = conv.plan_conv(_nchw((2, 8, 10, 12), (16, 8, 3, 3), (2, 16, 10, 12)))
    g = plan.geometry
    assert (g.groups, g.m, g.n, g.k) == (1, 16, 240, 72)
    # OIHW: K = (channel, row, column) with one stride, 1; N = (batch, row, column).
    assert (g.k_axes, g.k_extents, plan.a.k_stride, plan.a.k_dims) == (("c", 0, 1), (8, 3, 3),
                                                                      1, ())
    assert (g.n_axes, g.n_extents, plan.c_cols[1]) == (("b", 0, 1), (2, 10, 12),
                                                       (1920, 12, 1))
    assert plan.checked == (True, True)
    assert plan.c.row_strides == (120,) and plan.c.batch_strides == (16 * 120,)
    # NCHW: a warp gathers consecutive output pixels.
    assert not conv.InputGather(None, 4, g, plan.checked, None).k_fastest()

    hwio = _conv_of("""
  x = f32[1,9,9,8] parameter(0)
  w = f32[3,3,8,16] parameter(1)
  ROOT c = f32[1,9,9,16] convolution(x, w), window={size=3x3 pad=1_1x1_1},
                         dim_labels=b01f_01io->b01f""")
    plan = conv.plan_conv(hwio)
    g = plan.geometry
    assert (g.k_axes, plan.a.k_stride, plan.a.row_strides) == ((0, 1, "c"), 16, (1,))
    # NHWC: consecutive K positions are consecutive channels of one pixel.
    assert conv.InputGather(None, 4, g, plan.checked, None).k_fastest()

    apart = _conv_of("""
  x = f32[1,10,8,8] parameter(0)
  w = f32[24,10,3,3]{2,0,3,1} parameter(1)
  ROOT c = f32[1,24,8,8] convolution(x, w), window={size=3x3 pad=1_1x1_1},
                         dim_labels=bf01_oi01->bf01""")
    plan = conv.plan_conv(apart)
    # strides: row 1, output channel 3, column 72, input channel 216.
    assert plan.geometry.k_axes == ("c", 1, 0)
    assert (plan.a.k_dims, plan.a.k_strides) == ((10, 3, 3), (216, 72, 1))


@pytest.mark.parametrize("window, kernel, out, checked", [
    ("size=1x1", (1, 1), (10, 10), (False, False)),
    ("size=3x3", (3, 3), (8, 8), (False, False)),
    ("size=3x3 pad=1_1x0_0", (3, 3), (10, 8), (True, False)),
    ("size=3x3 pad=0_0x0_1", (3, 3), (8, 9), (False, True)),        # the high side
    ("size=3x3 pad=-1_-1x-1_-1", (3, 3), (6, 6), (False, False)),   # a crop
    ("size=3x3 lhs_dilate=1x2", (3, 3), (8, 17), (False, True)),
])
def test_only_dims_whose_window_can_leave_the_input_are_checked(window, kernel, out, checked):
    plan = conv.plan_conv(_nchw((1, 8, 10, 10), (16, 8, *kernel), (1, 16, *out), window))
    assert plan.checked == checked


# -- ptxas -------------------------------------------------------------------------------

def test_ptxas_is_installed():
    assert PTXAS is not None and PTXAS.is_file()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_assembles_without_spills(name, arch, tmp_path):
    case = CASES[name]
    ptx = compile_case(case, tmp_path, "cuda", arch).read_text()
    kernel, text = conv_kernel(ptx)
    assert re.search(r"^\.maxntid 256\b", text, re.M)
    assert len(re.findall(r"\bbar\.sync\b", text)) >= 2
    tile = case.tile
    for which, rows in (("a", tile.bm), ("b", tile.bn)):
        size = dot.BK * (rows + dot.PAD) * 4
        assert re.search(rf"\.shared \.align 16 \.b8 conv_{which}_tile\w*\[{size}\]", text)
    _, printed = assemble(ptx, arch, PTXAS, ("-v", "--warning-as-error", "--warn-on-spills"))
    frame, usage = kernel_properties(printed, kernel, arch)
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in frame, printed
    registers = int(re.search(r"Used (\d+) registers", usage).group(1))
    assert registers <= 128, usage          # 256 threads: 2 blocks per SM at least


# -- the emulation -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_emulated_kernel_matches_the_reference_in_both_thread_orders(name, driver, tmp_path,
                                                                     monkeypatch):
    case = CASES[name]
    kernel, _ = conv_kernel(compile_case(case, tmp_path, "cuda").read_text())
    m = xlac.load(compile_case(case, tmp_path, "cuda-emulated"))
    feeds = case.feeds()
    want = case.reference(feeds)
    log = tmp_path / "launches.txt"
    monkeypatch.setenv("XLAC_FAKE_CUDA_LOG", str(log))
    for order in ORDERS:
        if order is None:
            monkeypatch.delenv("XLAC_FAKE_CUDA_ORDER", raising=False)
        else:
            monkeypatch.setenv("XLAC_FAKE_CUDA_ORDER", order)
        (got,) = m(*feeds)
        assert got.shape == want.shape
        # f32 sums of K products of ~N(0, 1) values.
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-6 * case.k,
                                   err_msg=f"thread order {order or 'forward'}")
    launches = [line for line in log.read_text().splitlines()
                if line.startswith(f"launch {kernel} ")]
    assert launches == [f"launch {kernel} grid={case.blocks},1,1 block=256,1,1 shared=0"] \
        * len(ORDERS)


# -- epilogues ---------------------------------------------------------------------------
#
# A convolution and the element-wise ops after it are one output fusion, which the
# implicit-GEMM kernel computes: its store applies them to each accumulator at the
# element's output index (the group and row make the channel, the column's digits the
# image and pixel), in any dimension numbers.

sys.path.insert(0, str(HERE))
from test_cuda_dot import (Fused, _chain, check_fused_emulation,  # noqa: E402
                           check_fused_kernel)


def _conv_chain(x, cout, kernel, tail, inits, out_shape, groups=1, pads=1, bias=True,
                extra=None):
    """Conv of ``x`` (3x3 and the like, same padding by default), its bias, then the
    ``tail`` nodes (from "c" to "y")."""
    weights = {"w": _rand((cout, x[1] // groups, kernel, kernel), 30)}
    if bias:
        weights["b"] = _rand((cout,), 31)
    conv_node = ("Conv", ["x", "w", "b"] if bias else ["x", "w"], "c",
                 {"kernel_shape": [kernel, kernel], "pads": [pads] * 4, "group": groups})
    inputs = {"x": x, **(extra or {})}
    direct = cout // groups < conv.MIN_GROUP_ROWS
    return Fused(_chain(inputs, [conv_node, *tail], {**weights, **inits}, "y", out_shape),
                 inputs, x[1] // groups * kernel * kernel, "" if direct else "conv")


def _bn(c: int) -> dict:
    rng = np.random.default_rng(32)
    return {"scale": 1 + 0.1 * rng.standard_normal(c), "shift": rng.standard_normal(c),
            "mean": rng.standard_normal(c), "var": 0.5 + rng.random(c)}


FUSED = {
    "bias_relu": _conv_chain((1, 8, 15, 15), 24, 3, [("Relu", ["c"], "y", {})], {},
                             (1, 24, 15, 15)),
    "batchnorm_relu": _conv_chain((2, 16, 9, 9), 32, 3,
                                  [("BatchNormalization", ["c", "scale", "shift", "mean", "var"],
                                    "n", {"epsilon": 1e-5}), ("Relu", ["n"], "y", {})],
                                  _bn(32), (2, 32, 9, 9), bias=False),
    # ResNet's block end: the convolution's bias, the shortcut (a second input), ReLU.
    "residual_relu": _conv_chain((1, 16, 10, 10), 16, 3,
                                 [("Add", ["c", "r"], "s", {}), ("Relu", ["s"], "y", {})], {},
                                 (1, 16, 10, 10), extra={"r": (1, 16, 10, 10)}),
    "clip_relu6": _conv_chain((1, 8, 11, 11), 16, 1,
                              [("Clip", ["c", "lo", "hi"], "y", {})], {"lo": 0.0, "hi": 6.0},
                              (1, 16, 11, 11), pads=0),
    "groups2_leaky_relu": _conv_chain((1, 16, 7, 9), 32, 3,
                                      [("LeakyRelu", ["c"], "y", {"alpha": 0.1})], {},
                                      (1, 32, 7, 9), groups=2),
    # MobileNet's depthwise layer: bias and ReLU6 (the direct kernel).
    "depthwise_bias_relu6": _conv_chain((1, 16, 10, 10), 16, 3,
                                        [("Clip", ["c", "lo", "hi"], "y", {})],
                                        {"lo": 0.0, "hi": 6.0}, (1, 16, 10, 10), groups=16),
}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_epilogue_is_one_kernel_without_spills(name, arch, tmp_path):
    case = FUSED[name]
    out = tmp_path / "model.s"
    xlac.compile(case.model(), out, target="cuda", cpu=arch, emit="asm")
    check_fused_kernel(out.read_text(), case.tiles, arch)


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_epilogue_matches_onnxruntime(name, driver, tmp_path, monkeypatch):
    check_fused_emulation(FUSED[name], tmp_path, monkeypatch)


# Epilogues of convolutions in other dimension numbers (optimized HLO, the evaluator the
# reference): the bias must follow the output channel wherever it is.
FUSED_HLO = {
    "nhwc_bias_residual_relu": ("""
  c = f32[2,9,9,16] convolution(p0, p1), window={size=3x3 pad=1_1x1_1},
                                         dim_labels=b01f_01io->b01f
  b = f32[2,9,9,16] broadcast(p2), dimensions={3}
  s = f32[2,9,9,16] add(c, b)
  r = f32[2,9,9,16] add(s, p3)
  z = f32[] constant(0)
  zb = f32[2,9,9,16] broadcast(z), dimensions={}
  ROOT y = f32[2,9,9,16] maximum(r, zb)
""", [(2, 9, 9, 8), (3, 3, 8, 16), (16,), (2, 9, 9, 16)]),
    "unusual_dimension_numbers_scale": ("""
  c = f32[6,7,24,2] convolution(p0, p1), window={size=3x2 pad=1_1x0_0},
                                        dim_labels=fb01_io01->01fb
  s = f32[6,7,24,2] broadcast(p2), dimensions={2}
  t = f32[6,7,24,2] broadcast(p3), dimensions={2}
  m = f32[6,7,24,2] multiply(c, s)
  ROOT y = f32[6,7,24,2] add(m, t)
""", [(10, 2, 6, 8), (10, 24, 3, 2), (24,), (24,)]),
    "groups4_bias": ("""
  c = f32[1,32,5,5] convolution(p0, p1), window={size=3x3 stride=2x2 pad=1_1x1_1},
                                        dim_labels=bf01_oi01->bf01, feature_group_count=4
  b = f32[1,32,5,5] broadcast(p2), dimensions={1}
  ROOT y = f32[1,32,5,5] add(c, b)
""", [(1, 16, 9, 9), (32, 4, 3, 3), (32,)]),
}


@pytest.mark.parametrize("name", sorted(FUSED_HLO))
def test_fused_epilogue_indexes_the_output_channel_in_any_layout(name, driver, tmp_path,
                                                                 monkeypatch):
    from xlac.optimizer import optimize
    body, params = FUSED_HLO[name]
    text = hlo(body, params, 1, 1, 1, 1, SMALL).model()
    feeds = [_rand(s, seed) for seed, s in enumerate(params)]
    want = evaluate(parse_module(text), feeds)[0]
    arts = {}
    for target in ("cuda", "cuda-emulated"):
        module = import_hlo(text.encode(), name="model")
        backend = make_backend(target, "sm_80")
        optimize(module, backend)
        kinds = ("asm",) if target == "cuda" else ("obj",)
        arts[target] = backend.emit(module, plan_memory(module, backend), EmitOptions("model"),
                                    kinds)
    check_fused_kernel(arts["cuda"].assembly, "conv", "sm_80")
    (tmp_path / "model.o").write_bytes(arts["cuda-emulated"].object_code)
    (tmp_path / "model.h").write_text(arts["cuda-emulated"].header)
    m = xlac.load(tmp_path / "model.o")
    for order in ("forward", "reverse"):
        monkeypatch.setenv("XLAC_FAKE_CUDA_ORDER", order)
        (got,) = m(*feeds)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4, err_msg=order)


def test_resnet8_has_fewer_kernels_with_epilogues(monkeypatch):
    from test_cuda_dot import _entries
    sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))
    from models import MODELS
    model = MODELS["resnet8"]()
    fused, unfused = _entries(model, True, monkeypatch), _entries(model, False, monkeypatch)
    # Each of its 9 convolutions had its bias (and ReLU, and shortcut) in a loop of its
    # own; two of those loops were a block's sum of two convolutions, which fuses into
    # one of them.
    assert fused <= unfused - 7, (fused, unfused)


# -- the direct kernel (narrow groups) ---------------------------------------------------

DIRECT = {
    "depthwise_3x3": onnx_conv((1, 16, 9, 9), 16, 3, None, pads=1, groups=16),
    "depthwise_3x3_stride2_batch2": onnx_conv((2, 8, 12, 11), 8, 3, None, stride=2,
                                              pads=(0, 1, 1, 0), groups=8),
    "depthwise_5x5_dilation2": onnx_conv((1, 8, 10, 10), 8, 5, None, pads=4, dilation=2,
                                         groups=8),
    "depthwise_multiplier2": onnx_conv((1, 8, 9, 9), 16, 3, None, pads=1, groups=8),
    "groups_of_4_channels": onnx_conv((1, 16, 8, 7), 16, 3, None, pads=1, groups=4),
    "depthwise_no_padding": onnx_conv((1, 8, 9, 9), 8, 3, None, groups=8),
    "depthwise_nhwc": hlo("""
  ROOT c = f32[2,7,7,12] convolution(p0, p1), window={size=3x3 stride=2x2 pad=1_1x1_1},
                                              dim_labels=b01f_01io->b01f,
                                              feature_group_count=12
""", [(2, 13, 13, 12), (3, 3, 1, 12)], 12, 1, 98, 9, None),
}


def _direct_elements(case: Case) -> int:
    return case.groups * case.m * case.n


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(DIRECT))
def test_direct_kernel_assembles_without_spills(name, arch, tmp_path):
    ptx = compile_case(DIRECT[name], tmp_path, "cuda", arch).read_text()
    check_fused_kernel(ptx, "", arch)


@pytest.mark.parametrize("name", sorted(DIRECT))
def test_emulated_direct_kernel_matches_the_reference(name, driver, tmp_path, monkeypatch):
    from xlac.emitter.cuda.kernels import launch_size
    case = DIRECT[name]
    ptx = compile_case(case, tmp_path, "cuda").read_text()
    (kernel,) = re.findall(r"^\.visible \.entry (\w+)\(", ptx, re.M)
    m = xlac.load(compile_case(case, tmp_path, "cuda-emulated"))
    feeds = case.feeds()
    want = case.reference(feeds)
    log = tmp_path / "launches.txt"
    monkeypatch.setenv("XLAC_FAKE_CUDA_LOG", str(log))
    for order in ORDERS:
        if order is None:
            monkeypatch.delenv("XLAC_FAKE_CUDA_ORDER", raising=False)
        else:
            monkeypatch.setenv("XLAC_FAKE_CUDA_ORDER", order)
        (got,) = m(*feeds)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-6 * case.k,
                                   err_msg=f"thread order {order or 'forward'}")
    blocks, threads = launch_size(_direct_elements(case))
    launches = [line for line in log.read_text().splitlines() if line.startswith("launch ")]
    assert launches == [f"launch {kernel} grid={blocks},1,1 block={threads},1,1 shared=0"] \
        * len(ORDERS)
