"""Dot and convolution kernels, compiled for this machine, against numpy references.

Each case names the path it is meant to exercise; ``test_*_path`` checks the kernel
actually takes it, so a change in path selection cannot silently drop coverage. Paths
and plans are checked on explicit targets (target_util: 16-, 32- and 64-byte vectors),
whatever this machine is; the numerics run here, at this machine's width (that of
$XLAC_HOST_CPU's CPU where it is set) unless a test names another.
"""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import target_util
from target_util import TARGETS, by_width, every_target, expected, target
from xlac.hlo import (Builder, ConvDimensionNumbers, DotDimensionNumbers, Opcode, Shape, Window,
                      XlacError, dtypes)
from xlac.hlo.ir import Instruction
from xlac.emitter.kernels import dot as dot_mod
from xlac.emitter.kernels import (emit_kernel, kernel_arguments, kernel_key, plan_kernel,
                                  scratch_bytes)
from xlac.emitter.kernels.conv.channel_conv import channel_cols, channel_tile
from xlac.emitter.kernels.conv.depthwise import Depthwise
from xlac.emitter.kernels.conv.depthwise_rows import DepthwiseRows
from xlac.emitter.kernels.conv.geometry import ConvSizes, ConvWindow
from xlac.emitter.kernels.conv.implicit_gemm import UNROLLED_POSITIONS, subsample_pieces
from xlac.emitter.kernels.conv.path import conv_path
from xlac.emitter.kernels.conv.tuning import conv_tuning
from xlac.emitter.kernels.gemm import tiling_for
from xlac.emitter.kernels.jit import CompiledKernel, HostTarget, host_target
from xlac.emitter.parallel import Axis, kernel_split
from hlo_util import CPU

F32, F64, F16, S32 = dtypes.F32, dtypes.F64, dtypes.F16, dtypes.S32
RNG = np.random.default_rng(1234)


def _random(shape, dtype):
    if dtype.is_integer:
        return RNG.integers(-5, 6, shape).astype(dtype.np)
    return RNG.standard_normal(shape).astype(dtype.np)


def _check(got, want, dtype, rtol=1e-4):
    if dtype.is_integer:
        np.testing.assert_array_equal(got, want)
        return
    tol = {"f16": 2e-2, "f32": rtol, "f64": 1e-12}[dtype.name]
    # relative to the size of the terms, not of the (possibly cancelling) result
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * scale)


# --- dot ------------------------------------------------------------------------------

def make_dot(lhs, rhs, lb, lc, rb, rc, dtype=F32):
    b = Builder("dot")
    x = b.parameter(0, Shape.array(dtype, lhs))
    y = b.parameter(1, Shape.array(dtype, rhs))
    return b.dot(x, y, DotDimensionNumbers(lb, lc, rb, rc))


def dot_reference(instr, x, y):
    dn = instr.attrs["dimension_numbers"]
    letters = iter("abcdefghijklmnop")
    lx = [next(letters) for _ in range(x.ndim)]
    ly = [next(letters) for _ in range(y.ndim)]
    for la, rb in zip(dn.lhs_batch + dn.lhs_contracting, dn.rhs_batch + dn.rhs_contracting):
        ly[rb] = lx[la]
    out = ([lx[d] for d in dn.lhs_batch]
           + [lx[d] for d in range(x.ndim) if d not in dn.lhs_batch + dn.lhs_contracting]
           + [ly[d] for d in range(y.ndim) if d not in dn.rhs_batch + dn.rhs_contracting])
    spec = f"{''.join(lx)},{''.join(ly)}->{''.join(out)}"
    wide = np.float64 if x.dtype.kind == "f" else np.int64
    return np.einsum(spec, x.astype(wide), y.astype(wide))


DOT_CASES = [
    # id, lhs, rhs, lhs_batch, lhs_contracting, rhs_batch, rhs_contracting, dtype, path
    ("gemm_odd_sizes", (37, 53), (53, 29), (), (1,), (), (0,), F32, "gemm"),
    ("gemm_multi_block", (300, 600), (600, 40), (), (1,), (), (0,), F32, "gemm"),
    ("gemm_small_m", (3, 20), (20, 50), (), (1,), (), (0,), F32, "gemm_direct"),
    ("gemm_small_m_thin", (2, 16), (16, 5), (), (1,), (), (0,), F32, "gemm_direct"),
    ("gemm_small_m_k_blocks", (3, 600), (600, 40), (), (1,), (), (0,), F32, "gemm_direct"),
    ("gemm_small_m_trans_b", (4, 40), (23, 40), (), (1,), (), (1,), F32, "gemm"),
    ("gemm_trans_b", (10, 40), (23, 40), (), (1,), (), (1,), F32, "gemm"),
    ("gemm_contract_first", (13, 9), (20, 13), (), (0,), (), (1,), F32, "gemm"),
    # attention's Q . K^T with K read in place: heads a middle batch dim, rows of K
    # contiguous (B packed by columns), a sliver and a tail of columns
    ("batch_heads_trans_b", (3, 19, 17), (40, 3, 17), (0,), (2,), (1,), (2,), F32, "gemm"),
    ("batch_matmul", (2, 9, 13), (2, 13, 20), (0,), (2,), (0,), (1,), F32, "gemm"),
    ("batch_not_leading", (5, 2, 6), (6, 2, 3), (1,), (2,), (1,), (0,), F32, "gemm_direct"),
    ("two_contracting", (3, 4, 5), (4, 5, 6), (), (1, 2), (), (0, 1), F32, "gemm_direct"),
    ("free_dims_split", (3, 7, 4), (7, 9), (), (1,), (), (0,), F32, "gemm_direct"),
    ("gemv_row_dot", (1, 25000), (7, 25000), (), (1,), (), (1,), F32, "row_dot"),
    ("gemv_row_stream", (1, 25000), (25000, 21), (), (1,), (), (0,), F32, "row_stream"),
    ("matvec", (33, 100), (100,), (), (1,), (), (0,), F32, "row_dot"),
    ("vecmat_1d", (70,), (70, 45), (), (0,), (), (0,), F32, "row_stream"),
    ("inner_product", (100,), (100,), (), (0,), (), (0,), F32, "row_dot"),
    ("outer_product", (5,), (7,), (), (), (), (), F32, "gemm_direct"),
    ("contracting_unmergeable", (4, 3, 5), (5, 4, 6), (), (0, 2), (), (1, 0), F32, "naive"),
    ("f64", (6, 11), (11, 5), (), (1,), (), (0,), F64, "naive"),
    ("s32_batch", (2, 3, 4), (2, 4, 5), (0,), (2,), (0,), (1,), S32, "naive"),
    ("f16", (4, 16), (16, 3), (), (1,), (), (0,), F16, "naive"),
]


@pytest.mark.parametrize("case", DOT_CASES, ids=[c[0] for c in DOT_CASES])
def test_dot(case):
    _, lhs, rhs, lb, lc, rb, rc, dtype, _path = case
    instr = make_dot(lhs, rhs, lb, lc, rb, rc, dtype)
    x, y = _random(lhs, dtype), _random(rhs, dtype)
    _check(CompiledKernel(instr)(x, y), dot_reference(instr, x, y), dtype)


@every_target()
@pytest.mark.parametrize("case", DOT_CASES, ids=[c[0] for c in DOT_CASES])
def test_dot_path(case, target_name):
    _, lhs, rhs, lb, lc, rb, rc, dtype, path = case
    instr = make_dot(lhs, rhs, lb, lc, rb, rc, dtype)
    t = target(target_name)
    assert dot_mod._path(instr, dot_mod.canonicalize(instr), tiling_for(t)) == \
        expected(path, t.vector_bytes)


@every_target()
def test_transposed_b_is_packed_by_columns(target_name):
    t = target(target_name)
    plan = plan_kernel(make_dot((3, 19, 17), (40, 3, 17), (0,), (2,), (1,), (2,)), t)
    assert plan.spec.unit_bk and not plan.spec.unit_bn
    plan = plan_kernel(make_dot((37, 53), (53, 29), (), (1,), (), (0,)), t)
    assert plan.spec.unit_bn and not plan.spec.unit_bk


def test_canonicalize_merges_contracting_dims():
    plan = dot_mod.canonicalize(make_dot((3, 4, 5), (4, 5, 6), (), (1, 2), (), (0, 1)))
    assert (plan.m, plan.n, plan.k, plan.a_sk, plan.b_sk, plan.b_sn) == (3, 6, 20, 1, 6, 1)
    assert plan.batch == ()


def test_canonicalize_turns_unmergeable_free_dims_into_batch_loops():
    plan = dot_mod.canonicalize(make_dot((3, 7, 4), (7, 9), (), (1,), (), (0,)))
    assert (plan.m, plan.a_sm, plan.c_sm) == (4, 1, 9)
    assert plan.batch == (dot_mod.Loop(3, 28, 0, 36),)


# --- convolution ------------------------------------------------------------------------

def make_conv(xd, wd, stride=None, pad=None, dil=None, groups=1, lhs_dil=None, dn=None,
              batch_groups=1, dtype=F32, constant=False):
    """``constant``: the weights are a constant (random), as a model's are."""
    nsp = len(xd) - 2
    pad = pad or ((0, 0),) * nsp
    b = Builder("conv")
    x = b.parameter(0, Shape.array(dtype, xd))
    w = b.constant(_random(wd, dtype)) if constant else b.parameter(1, Shape.array(dtype, wd))
    dn = dn or ConvDimensionNumbers.nchw(nsp)
    size = [wd[d] for d in dn.kernel_spatial]
    win = Window.make(size, stride, [p[0] for p in pad], [p[1] for p in pad], lhs_dil, dil)
    return b.convolution(x, w, win, dn, groups, batch_groups)


def conv_reference(instr, x, w):
    """XLA convolution semantics in float64 numpy, for any dimension numbers."""
    dn, win = instr.attrs["dimension_numbers"], instr.attrs["window"]
    fg, bg = instr.attrs["feature_group_count"], instr.attrs["batch_group_count"]
    nsp = win.rank
    x = x.astype(np.float64).transpose(dn.input_batch, dn.input_feature, *dn.input_spatial)
    w = w.astype(np.float64).transpose(dn.kernel_output, dn.kernel_input, *dn.kernel_spatial)
    for i, ld in enumerate(win.lhs_dilation):        # base dilation: insert zeros
        if ld > 1:
            n = x.shape[2 + i]
            grown = list(x.shape)
            grown[2 + i] = (n - 1) * ld + 1
            y = np.zeros(grown)
            y[(slice(None),) * (2 + i) + (slice(None, None, ld),)] = x
            x = y
    x = np.pad(x, [(0, 0), (0, 0)] + [(max(0, lo), max(0, hi))
                                      for lo, hi in zip(win.pad_low, win.pad_high)])
    x = x[(slice(None), slice(None)) + tuple(slice(max(0, -lo), x.shape[2 + i] - max(0, -hi))
                                             for i, (lo, hi) in
                                             enumerate(zip(win.pad_low, win.pad_high)))]
    n_out, cout, cin_g = x.shape[0] // bg, w.shape[0], w.shape[1]
    out_sp = [(x.shape[2 + i] - (win.size[i] - 1) * win.rhs_dilation[i] - 1) // win.stride[i] + 1
              for i in range(nsp)]
    out = np.zeros([n_out, cout] + out_sp)
    for o in range(cout):
        g, gb = o // (cout // fg), o // (cout // bg)
        xs = x[gb * n_out:(gb + 1) * n_out, g * cin_g:(g + 1) * cin_g]
        for kpos in itertools.product(*(range(s) for s in win.size)):
            sl = tuple(slice(kpos[i] * win.rhs_dilation[i],
                             kpos[i] * win.rhs_dilation[i] + (out_sp[i] - 1) * win.stride[i] + 1,
                             win.stride[i]) for i in range(nsp))
            out[:, o] += np.einsum("nc...,c->n...", xs[(slice(None), slice(None)) + sl],
                                   w[(o, slice(None)) + kpos])
    order = [0] * (nsp + 2)            # our NC... axes -> the output's layout
    for axis, d in enumerate([dn.output_batch, dn.output_feature, *dn.output_spatial]):
        order[d] = axis
    return out.transpose(order)


NHWC = ConvDimensionNumbers(0, 3, (1, 2), 3, 2, (0, 1), 0, 3, (1, 2))   # b01f_01io->b01f
# Strided 1x1 windows: SubsamplePacker from 32-byte vectors, im2col at 16 (no masked loads)
SUBSAMPLED = by_width("gemm", "gemm_subsample", "gemm_subsample")

CONV_CASES = [
    # id, kwargs of make_conv, expected path: the same on every target, or by_width (at
    # 16, 32 and 64-byte vectors, registers counted as target_util.TARGETS says)
    ("3x3_same", dict(xd=(2, 5, 11, 13), wd=(40, 5, 3, 3), pad=((1, 1), (1, 1))), "gemm"),
    # 3x3 stride 1 keeping the map's size, few output channels: DirectConv (_direct_pays),
    # two images, groups, a stem, weights constant or not; not on maps below 64 pixels
    ("3x3_same_few_channels", dict(xd=(2, 5, 11, 13), wd=(7, 5, 3, 3), pad=((1, 1), (1, 1))),
     "direct"),
    ("3x3_same_few_channels_groups", dict(xd=(1, 10, 9, 8), wd=(12, 5, 3, 3),
                                          pad=((1, 1), (1, 1)), groups=2, constant=True),
     "direct"),
    ("3x3_same_stem", dict(xd=(1, 3, 17, 19), wd=(16, 3, 3, 3), pad=((1, 1), (1, 1)),
                           constant=True), "direct"),
    ("3x3_same_7x7_map", dict(xd=(1, 24, 7, 7), wd=(32, 24, 3, 3), pad=((1, 1), (1, 1)),
                              constant=True), "channels"),
    ("1x1_pointwise", dict(xd=(1, 16, 7, 9), wd=(20, 16, 1, 1)), "gemm"),
    # Strided 1x1: B packed from input rows (SubsamplePacker), vectors of pixels on up to
    # 4 output rows (5 x 5), on 2 (31 wide, two images), column strides 1 to 4, groups, K
    # blocks; a stride of 5, a padded window and vectors on more rows keep im2col, as
    # 16-byte vectors (no masked loads) do (SUBSAMPLED).
    ("1x1_stride2", dict(xd=(1, 8, 9, 9), wd=(12, 8, 1, 1), stride=(2, 2)), SUBSAMPLED),
    ("1x1_stride2_wide", dict(xd=(2, 19, 30, 61), wd=(21, 19, 1, 1), stride=(2, 2)),
     SUBSAMPLED),
    ("1x1_stride3x2_groups", dict(xd=(1, 12, 17, 40), wd=(10, 6, 1, 1), stride=(3, 2),
                                  groups=2), SUBSAMPLED),
    ("1x1_stride4_odd", dict(xd=(1, 5, 23, 71), wd=(9, 5, 1, 1), stride=(4, 4)),
     SUBSAMPLED),
    ("1x1_stride2x1", dict(xd=(1, 7, 13, 33), wd=(11, 7, 1, 1), stride=(2, 1)),
     SUBSAMPLED),
    ("1x1_stride3_k_blocks", dict(xd=(1, 300, 14, 52), wd=(13, 300, 1, 1), stride=(3, 3)),
     SUBSAMPLED),
    ("1x1_stride5", dict(xd=(1, 6, 21, 41), wd=(8, 6, 1, 1), stride=(5, 5)), "gemm"),
    ("1x1_stride2_padded", dict(xd=(1, 6, 20, 41), wd=(8, 6, 1, 1), stride=(2, 2),
                                pad=((1, 0), (0, 1))), "gemm"),
    ("1x1_stride2_narrow", dict(xd=(1, 8, 30, 4), wd=(8, 8, 1, 1), stride=(2, 2)), "gemm"),
    # (More than channels_max_cin input channels per group: no stem kernel.)
    ("5x5_valid", dict(xd=(1, 5, 12, 14), wd=(9, 5, 5, 5)), "gemm"),
    ("7x7_stride2_pad3", dict(xd=(1, 5, 20, 22), wd=(8, 5, 7, 7), stride=(2, 2),
                              pad=((3, 3), (3, 3))), "gemm"),
    ("3x3_stride4_asym_pad", dict(xd=(1, 5, 17, 15), wd=(6, 5, 3, 3), stride=(4, 4),
                                  pad=((2, 0), (0, 1))), "gemm"),
    ("3x3_dilated", dict(xd=(1, 6, 13, 11), wd=(10, 6, 3, 3), dil=(2, 3),
                         pad=((2, 2), (3, 3))), "gemm"),
    ("groups2", dict(xd=(2, 10, 9, 9), wd=(6, 5, 3, 3), stride=(2, 2),
                     pad=((1, 0), (2, 1)), groups=2), "gemm"),
    ("many_channels_k_blocks", dict(xd=(1, 70, 6, 5), wd=(13, 70, 3, 3),
                                    pad=((1, 1), (1, 1))), "gemm"),
    ("depthwise", dict(xd=(1, 8, 12, 10), wd=(8, 1, 3, 3), pad=((1, 1), (1, 1)), groups=8),
     "depthwise_rows"),
    ("depthwise_narrow", dict(xd=(1, 8, 12, 2), wd=(8, 1, 3, 3), pad=((1, 1), (1, 1)),
                              groups=8), "depthwise"),
    ("depthwise_stride2_dilated", dict(xd=(2, 6, 13, 11), wd=(12, 1, 3, 3), stride=(2, 2),
                                       dil=(2, 2), pad=((2, 1), (1, 2)), groups=6),
     "depthwise_rows"),
    ("depthwise_stride5", dict(xd=(1, 3, 13, 21), wd=(3, 1, 3, 3), stride=(1, 5),
                               pad=((1, 1), (1, 1)), groups=3), "depthwise"),
    ("depthwise_1d", dict(xd=(1, 4, 19), wd=(4, 1, 3), pad=((1, 1),), groups=4), "depthwise"),
    ("conv1d", dict(xd=(2, 3, 17), wd=(4, 3, 5), pad=((2, 2),)), "gemm"),
    ("conv1d_stride2", dict(xd=(1, 5, 30), wd=(7, 5, 4), stride=(2,), pad=((1, 2),)), "gemm"),
    ("conv3d", dict(xd=(1, 2, 5, 6, 7), wd=(3, 2, 3, 3, 3), pad=((1, 1),) * 3), "gemm"),
    ("negative_padding", dict(xd=(1, 5, 10, 10), wd=(4, 5, 3, 3), pad=((-1, 1), (1, -2))),
     "gemm"),
    ("nhwc_general", dict(xd=(2, 7, 6, 4), wd=(3, 3, 4, 5), pad=((1, 1), (0, 1)), dn=NHWC),
     "naive"),
    ("lhs_dilation", dict(xd=(1, 2, 5, 4), wd=(3, 2, 3, 3), lhs_dil=(2, 3),
                          pad=((2, 2), (1, 1))), "naive"),
    ("batch_groups", dict(xd=(4, 3, 6, 6), wd=(4, 3, 3, 3), batch_groups=2), "naive"),
    ("f64", dict(xd=(1, 3, 7, 7), wd=(4, 3, 3, 3), stride=(2, 2), pad=((1, 1), (1, 1)),
                 dtype=F64), "naive"),
    # Stems with constant weights: vectors of output channels (ChannelConv).
    ("stem_7x7_stride2", dict(xd=(1, 3, 37, 41), wd=(48, 3, 7, 7), stride=(2, 2),
                              pad=((3, 3), (3, 3)), constant=True), "channels"),
    ("stem_cin1_asym_pad", dict(xd=(2, 1, 13, 29), wd=(48, 1, 3, 5), stride=(1, 2),
                                pad=((1, 0), (2, 1)), constant=True), "channels"),
    ("stem_dilated_groups", dict(xd=(1, 4, 15, 17), wd=(96, 2, 3, 3), dil=(2, 2),
                                 pad=((2, 2), (1, 3)), groups=2, constant=True), "channels"),
    ("stem_unpadded_tail_panel", dict(xd=(1, 3, 9, 31), wd=(48, 3, 2, 3), stride=(2, 2),
                                      constant=True), "channels"),
    ("stem_negative_padding", dict(xd=(1, 3, 10, 12), wd=(48, 3, 3, 3),
                                   pad=((-1, 1), (1, -2)), constant=True), "channels"),
    ("stem_narrow_rows", dict(xd=(1, 2, 30, 4), wd=(48, 2, 3, 3), pad=((1, 1), (1, 1)),
                              constant=True), "channels"),
    ("stem_weights_at_run_time", dict(xd=(1, 3, 37, 41), wd=(48, 3, 7, 7), stride=(2, 2),
                                      pad=((3, 3), (3, 3))), "gemm"),
    # 40 channels are no multiple of 16 lanes, but of 8 and 4: the case is one at 64 bytes
    ("stem_channels_not_lanes", dict(xd=(1, 3, 12, 12), wd=(40, 3, 3, 3),
                                     pad=((1, 1), (1, 1)), constant=True),
     by_width("channels", "channels", "gemm")),
    # Stems of few output channels: vectors along output rows (RowConv), every column
    # stride it takes, padding, dilation, groups, tiles of channels past the last one.
    # a 3x3 stem from rows_min_stem_pixels output pixels (33 x 33): RowConv where the
    # target's row sets it (AVX2), ChannelConv elsewhere
    ("stem_3x3_stride2_large_map", dict(xd=(1, 3, 66, 66), wd=(16, 3, 3, 3), stride=(2, 2),
                                        pad=((1, 1), (1, 1)), constant=True),
     by_width("channels", "rows", "channels")),
    ("stem_3x3_stride2_below_large", dict(xd=(1, 3, 62, 62), wd=(16, 3, 3, 3), stride=(2, 2),
                                          pad=((1, 1), (1, 1)), constant=True), "channels"),
    ("stem_rows_stride2", dict(xd=(1, 3, 37, 41), wd=(8, 3, 3, 3), stride=(2, 2),
                               pad=((1, 1), (1, 1))), "rows"),
    ("stem_rows_cin1_asym_pad", dict(xd=(2, 1, 13, 29), wd=(8, 1, 3, 5), stride=(1, 2),
                                     pad=((1, 0), (2, 1))), "rows"),
    ("stem_rows_dilated_groups", dict(xd=(1, 4, 15, 27), wd=(6, 2, 3, 3), dil=(2, 2),
                                      pad=((2, 2), (1, 3)), groups=2), "rows"),
    ("stem_rows_stride4_negative_pad", dict(xd=(1, 3, 10, 70), wd=(4, 3, 3, 3),
                                            stride=(1, 4), pad=((-1, 1), (1, -2))), "rows"),
    ("stem_rows_5x5_stride3_constant", dict(xd=(1, 2, 20, 50), wd=(7, 2, 5, 5), stride=(3, 3),
                                            pad=((2, 2), (2, 2)), constant=True), "rows"),
    ("stem_rows_valid_wide", dict(xd=(1, 3, 5, 131), wd=(8, 3, 3, 3)), "rows"),
    ("stem_rows_last_tile_short", dict(xd=(1, 3, 12, 12), wd=(22, 3, 3, 3), stride=(2, 1),
                                       pad=((1, 1), (1, 1)), constant=True), "rows"),
    ("stem_rows_32_channels_weights_at_run_time", dict(xd=(1, 3, 23, 35), wd=(32, 3, 3, 3),
                                                       stride=(2, 2), pad=((1, 1), (1, 1))),
     "rows"),
    # rows of 6 pixels, half a vector or less only at 64 bytes (16 lanes): the GEMM there
    ("stem_few_channels_narrow", dict(xd=(1, 3, 12, 6), wd=(8, 3, 3, 3),
                                      pad=((1, 1), (1, 0))), by_width("rows", "rows", "gemm")),
    # Windows on small maps: ChannelConv, long K (many input channels), groups, stride 2.
    ("small_map_long_k", dict(xd=(1, 70, 6, 5), wd=(32, 70, 3, 3),
                              pad=((1, 1), (1, 1)), constant=True), "channels"),
    ("small_map_long_k_groups_stride2", dict(xd=(2, 130, 9, 11), wd=(96, 65, 3, 3),
                                             stride=(2, 2), pad=((1, 1), (0, 1)),
                                             groups=2, constant=True), "channels"),
    ("small_map_wide_rows_long_k", dict(xd=(1, 60, 3, 33), wd=(48, 60, 3, 3),
                                        pad=((1, 1), (1, 1)), constant=True), "channels"),
    # rows of 16 and 32 output columns: tiles of 8 columns (_channel_cols), two vectors
    # of output channels by one row, one vector (16 channels at AVX-512) by three
    ("small_map_stride2_16_wide", dict(xd=(1, 12, 9, 31), wd=(32, 12, 3, 3), stride=(2, 2),
                                       pad=((1, 1), (1, 1)), constant=True), "channels"),
    ("stem_one_vector_32_wide", dict(xd=(1, 3, 9, 32), wd=(16, 3, 3, 3), stride=(2, 1),
                                     pad=((1, 1), (1, 1)), constant=True), "channels"),
    # 1x1 on maps of up to 14 x 14, where the GEMM's slivers of pixels go partly empty:
    # tiles of 3 vectors (narrower last panels), column tiles shifted back, long K,
    # groups, strides.
    ("small_map_pointwise", dict(xd=(1, 40, 7, 7), wd=(32, 40, 1, 1), constant=True),
     "channels"),
    ("small_map_pointwise_long_k", dict(xd=(2, 600, 3, 3), wd=(48, 600, 1, 1),
                                        constant=True), "channels"),
    ("pointwise_14x14_tail_panel", dict(xd=(1, 130, 14, 14), wd=(112, 130, 1, 1),
                                        constant=True), "channels"),
    # from 64 pixels up, a short K and a 1-vector panel (64 channels at AVX-512) keep
    # the GEMM (a case at 64 bytes only: shorter vectors' 2-vector panels are full); a
    # 3 x 3 map takes a tile of 2 vectors (channel_tile)
    ("pointwise_25x5_short_k", dict(xd=(1, 64, 25, 5), wd=(64, 64, 1, 1), constant=True),
     by_width("channels", "channels", "gemm")),
    ("pointwise_3x3_map", dict(xd=(1, 40, 3, 3), wd=(80, 40, 1, 1), constant=True),
     "channels"),
    ("pointwise_odd_map_groups", dict(xd=(1, 38, 11, 9), wd=(96, 19, 1, 1), groups=2,
                                      constant=True), "channels"),
    ("pointwise_stride2_8x7", dict(xd=(1, 24, 15, 13), wd=(32, 24, 1, 1), stride=(2, 2),
                                   constant=True), "channels"),
    ("pointwise_stride2_10x10", dict(xd=(1, 24, 20, 19), wd=(32, 24, 1, 1), stride=(2, 2),
                                     constant=True), SUBSAMPLED),
    ("pointwise_15x15_constant", dict(xd=(1, 40, 15, 15), wd=(32, 40, 1, 1), constant=True),
     "gemm"),
    # Strided windows on larger maps: ChannelConv, reads checked at the right edge (a
    # pad past the slack), dilated, a narrower last panel; strided 1x1 keeps the GEMM.
    ("strided_map", dict(xd=(1, 61, 35, 37), wd=(32, 61, 3, 3), stride=(2, 2),
                         pad=((1, 1), (1, 1)), constant=True), "channels"),
    ("strided_map_asym_dilated_tail_panel", dict(xd=(2, 9, 41, 45), wd=(48, 9, 3, 3),
                                                 stride=(2, 3), dil=(1, 2),
                                                 pad=((0, 1), (2, 1)), constant=True),
     "channels"),
    ("strided_map_wide_pad", dict(xd=(1, 5, 40, 36), wd=(16, 5, 5, 5), stride=(2, 2),
                                  pad=((2, 3), (4, 3)), constant=True), "channels"),
    ("strided_map_pointwise", dict(xd=(1, 24, 40, 40), wd=(32, 24, 1, 1), stride=(2, 2),
                                   constant=True), SUBSAMPLED),
    ("large_map_constant", dict(xd=(1, 8, 17, 17), wd=(48, 8, 3, 3), pad=((1, 1), (1, 1)),
                                constant=True), "gemm"),
    ("s32_groups", dict(xd=(1, 4, 5, 5), wd=(4, 2, 2, 2), groups=2, dtype=S32), "naive"),
    # 3x3 stride 1, one group, 32 channels or more: Winograd F(2x2, 3x3), odd maps (partial
    # tiles at both edges, tile blocks straddling rows of tiles), two images.
    ("winograd", dict(xd=(2, 33, 13, 17), wd=(35, 33, 3, 3), pad=((1, 1), (1, 1))),
     "winograd"),
    ("winograd_asym_pad", dict(xd=(1, 32, 15, 12), wd=(40, 32, 3, 3), pad=((0, 2), (2, 1))),
     "winograd"),
    ("winograd_unpadded", dict(xd=(1, 32, 20, 21), wd=(32, 32, 3, 3)), "winograd"),
    # rows of tiles wider than a block of them; negative padding (a crop)
    ("winograd_wide_map", dict(xd=(1, 32, 5, 70), wd=(33, 32, 3, 3), pad=((1, 1), (1, 1))),
     "winograd"),
    ("winograd_crop", dict(xd=(1, 32, 14, 15), wd=(40, 32, 3, 3), pad=((-1, 1), (1, -2))),
     "winograd"),
    # many input channels: blocks of 32 output channels (the last of 13), a partial
    # vector of input channels in the weights' transform; constant weights, small maps
    ("winograd_out_blocks", dict(xd=(1, 250, 11, 10), wd=(45, 250, 3, 3),
                                 pad=((1, 1), (1, 1)), constant=True), "winograd"),
    ("winograd_small_map", dict(xd=(1, 64, 14, 14), wd=(64, 64, 3, 3), pad=((1, 1), (1, 1)),
                                constant=True), "winograd"),
    # where it does not pay: 16 channels; many channel pairs per pixel; an 8 x 8 map
    ("3x3_16_channels", dict(xd=(1, 16, 20, 20), wd=(16, 16, 3, 3), pad=((1, 1), (1, 1))),
     "direct"),
    ("3x3_many_pairs_per_pixel", dict(xd=(1, 256, 7, 7), wd=(256, 256, 3, 3),
                                      pad=((1, 1), (1, 1)), constant=True), "channels"),
    ("3x3_8x8_map", dict(xd=(1, 32, 8, 8), wd=(48, 32, 3, 3), pad=((1, 1), (1, 1)),
                         constant=True), "channels"),
    ("3x3_many_input_channels", dict(xd=(1, 300, 20, 20), wd=(40, 300, 3, 3),
                                     pad=((1, 1), (1, 1))), "gemm"),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv(case):
    _, kw, _path = case
    instr = make_conv(**kw)
    dtype = instr.shape.dtype
    x, w = _operands(instr)
    got = CompiledKernel(instr)(x, w)
    want = conv_reference(instr, x, w)
    assert got.shape == want.shape
    _check(got, want, dtype)


def _operands(instr):
    """Random operands, a constant's own value."""
    return [o.literal if o.opcode is Opcode.CONSTANT else _random(o.shape.dims, o.shape.dtype)
            for o in instr.operands]


@every_target()
@pytest.mark.parametrize("case", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv_path(case, target_name):
    _, kw, path = case
    instr = make_conv(**kw)
    constant = instr.operands[1].opcode is Opcode.CONSTANT
    t = target(target_name)
    assert _conv_path(instr, t, constant) == expected(path, t.vector_bytes)


def _conv_path(instr, target, constant):
    """conv_path with ``target``'s tiling and tuning row."""
    tuning = conv_tuning(target.vector_bytes, target.registers)
    return conv_path(instr, tiling_for(target), tuning, constant)


def _paths(case) -> set[str]:
    """The paths a case takes at 16, 32 and 64-byte vectors."""
    return {expected(case[2], vector_bytes) for vector_bytes in (16, 32, 64)}


ROW_WIDTH_CASES = [c for c in CONV_CASES if c[0] in (
    "stem_rows_stride2", "stem_rows_dilated_groups", "stem_rows_stride4_negative_pad",
    "stem_rows_last_tile_short")]
OTHER_WIDTH_CASES = ([("ChannelConv", c) for c in CONV_CASES if _paths(c) == {"channels"}]
                     + [("RowConv", c) for c in ROW_WIDTH_CASES])


@pytest.mark.parametrize("vector_bytes", [16, 32])
@pytest.mark.parametrize("kernel,case", OTHER_WIDTH_CASES,
                         ids=[c[0] for _, c in OTHER_WIDTH_CASES])
def test_stem_kernels_other_vector_widths(kernel, case, vector_bytes):
    """SSE and AVX2: 4 and 8 lanes, fewer registers (fewer vectors per tile), other
    transposes."""
    _, kw, _path = case
    instr = make_conv(**kw)
    x, w = _operands(instr)
    assert type(plan_kernel(instr, HostTarget(vector_bytes)).spec).__name__ == kernel
    _check(CompiledKernel(instr, HostTarget(vector_bytes))(x, w), conv_reference(instr, x, w),
           F32)


LONG_WINDOW_CASES = {
    # a spectrogram's STFT as a 1-D convolution: one channel, 256 taps, hop 64 (gathers)
    "stft_1d": dict(xd=(1, 1, 704), wd=(18, 1, 256), stride=(64,)),
    # stride 1, "same" padding: contiguous reads, masked where the taps leave the input
    "same_1d": dict(xd=(2, 2, 150), wd=(8, 2, 100), pad=((49, 50),)),
    # 9x9 = 81 positions in two dims, padded, strided (gathers checked in both dims)
    "9x9_stride2": dict(xd=(1, 3, 21, 19), wd=(10, 3, 9, 9), stride=(2, 2),
                        pad=((4, 4), (4, 3))),
    "9x9_same": dict(xd=(1, 2, 13, 12), wd=(8, 2, 9, 9), pad=((4, 4), (4, 4))),
}


@pytest.mark.parametrize("vector_bytes", [4, 16, 32, 64])
@pytest.mark.parametrize("name", sorted(LONG_WINDOW_CASES))
def test_conv_gemm_loops_over_a_long_window(name, vector_bytes):
    """Windows of more than UNROLLED_POSITIONS positions pack their im2col rows in a
    run-time loop over the positions (unrolled, the pack is one block of thousands of
    gathers that LLVM takes seconds to compile)."""
    instr = make_conv(**LONG_WINDOW_CASES[name], constant=True)
    positions = np.prod(instr.attrs["window"].size)
    assert positions > UNROLLED_POSITIONS
    x, w = _operands(instr)
    assert type(plan_kernel(instr, HostTarget(vector_bytes)).spec).__name__ == "ConvGemm"
    kernel = CompiledKernel(instr, HostTarget(vector_bytes))
    # The reads are emitted once per vector of pixels, not once per position as well.
    assert kernel.llvm_ir.count("call <") < positions
    _check(kernel(x, w), conv_reference(instr, x, w), F32)


STEM_THRESHOLD_CASES = [c for c in CONV_CASES if c[0].startswith("stem_3x3_stride2_")]


@pytest.mark.parametrize("vector_bytes", [16, 32])
@pytest.mark.parametrize("case", STEM_THRESHOLD_CASES, ids=[c[0] for c in STEM_THRESHOLD_CASES])
def test_stem_threshold_kernels_at_explicit_widths(case, vector_bytes):
    """The stems on either side of the AVX2 row's rows_min_stem_pixels, run as SSE and
    AVX2 whatever this machine is: ChannelConv, or RowConv above it at AVX2."""
    _, kw, path = case
    instr = make_conv(**kw)
    x, w = _operands(instr)
    kernel = {"channels": "ChannelConv", "rows": "RowConv"}[expected(path, vector_bytes)]
    assert type(plan_kernel(instr, HostTarget(vector_bytes)).spec).__name__ == kernel
    _check(CompiledKernel(instr, HostTarget(vector_bytes))(x, w), conv_reference(instr, x, w),
           F32)


@pytest.mark.parametrize("width,most,cols", [(16, 14, 8), (32, 14, 8), (7, 14, 7),
                                             (28, 14, 14), (24, 14, 12), (17, 14, 9),
                                             (3, 6, 3)])
def test_channel_conv_tiles_waste_fewest_columns(width, most, cols):
    """The fewest columns computed per row (the last tile is shifted back inside the
    row), then the widest tile."""
    assert channel_cols(width, most) == cols


@pytest.mark.parametrize("side,vectors", [(2, 3), (3, 2), (7, 3), (14, 3)])
def test_pointwise_tile_reads_a_small_maps_weights_once(side, vectors):
    """1x1 windows at AVX-512 (64-byte vectors, 32 registers) take tiles of 3 vectors by
    up to 8 pixels, but 2 vectors where one such tile covers the map and one of 3 does not
    (3 x 3)."""
    instr = make_conv((1, 40, side, side), (96, 40, 1, 1), constant=True)
    window = ConvWindow.of(instr.attrs["window"], (side, side))
    tile = channel_tile(window, ConvSizes.of(instr), tiling_for(HostTarget(64)),
                        conv_tuning(64, 32))
    assert tile[0] == vectors
    if side == 3:
        assert tile[1] * tile[2] >= 9


@pytest.mark.parametrize("vector_bytes,registers", [(32, 16), (64, 32)])
@pytest.mark.parametrize("height,rows", [(1, 1), (2, 2), (28, None)])
def test_channel_conv_tiles_are_no_taller_than_the_map(vector_bytes, registers, height,
                                                      rows):
    """A squeeze-excitation's 1x1 convolution on its pooled 1x1 map takes one-row tiles:
    taller ones would only add compile-time variants that never run."""
    instr = make_conv((1, 96, height, 1), (576, 96, 1, 1), constant=True)
    window = ConvWindow.of(instr.attrs["window"], (height, 1))
    tile = channel_tile(window, ConvSizes.of(instr), tiling_for(HostTarget(vector_bytes)),
                        conv_tuning(vector_bytes, registers))
    if rows is None:
        assert tile[1] > 2
    else:
        assert tile[1] == rows


@pytest.mark.parametrize("channels,kernel", [(48, "ChannelConv"), (8, "RowConv")])
def test_stem_kernels_need_simd(channels, kernel):
    """A scalar target (Cortex-M: one lane) keeps the GEMM: no transposes, no vectors of
    pixels."""
    instr = make_conv((1, 3, 20, 22), (channels, 3, 3, 3), stride=(2, 2),
                      pad=((1, 1), (1, 1)), constant=True)
    assert type(plan_kernel(instr, HostTarget(64)).spec).__name__ == kernel
    assert type(plan_kernel(instr, HostTarget(4)).spec).__name__ == "ConvGemm"


def test_channel_conv_packs_weights_in_panels_of_output_channels():
    """Per group, panels of vectors x lanes output channels (the last one narrower), each
    K x its width: a panel starts where its first channel starts in OIHW."""
    instr = make_conv((1, 4, 9, 9), (96, 2, 3, 3), pad=((1, 1), (1, 1)), groups=2,
                      constant=True)
    plan = plan_kernel(instr, HostTarget(64))
    spec = plan.spec
    assert (spec.lanes, spec.vectors) == (16, 2)
    w = instr.operands[1].literal
    packed = spec.pack_weights(w, plan.sizes).reshape(-1)
    assert packed.size == w.size
    k = 2 * 9
    for g, c0, width in ((0, 0, 32), (0, 32, 16), (1, 0, 32), (1, 32, 16)):
        at = (g * 48 + c0) * k
        panel = packed[at:at + k * width].reshape(k, width)
        first = g * 48 + c0
        np.testing.assert_array_equal(panel, w[first:first + width].reshape(width, k).T)


# The implicit GEMM's and Winograd's at every width (not the cases that take RowConv or
# ChannelConv where vectors are shorter).
GEMM_CONV_CASES = [c for c in CONV_CASES if _paths(c) <= {"gemm", "gemm_subsample", "winograd"}]
CHANNEL_CONV_CASES = [c for c in CONV_CASES if _paths(c) == {"channels"}]
WINOGRAD_CASES = [c for c in CONV_CASES if c[2] == "winograd"]


@pytest.mark.parametrize("vector_bytes", [16, 32])
@pytest.mark.parametrize("case", WINOGRAD_CASES[:3], ids=[c[0] for c in WINOGRAD_CASES[:3]])
def test_winograd_other_vector_widths(case, vector_bytes):
    """SSE and AVX2: tiles in vectors of 4 and 8, GEMM slivers of 8 and 16 tiles."""
    instr = make_conv(**case[1])
    x, w = _operands(instr)
    assert type(plan_kernel(instr, HostTarget(vector_bytes)).spec).__name__ == "WinogradConv"
    _check(CompiledKernel(instr, HostTarget(vector_bytes))(x, w), conv_reference(instr, x, w),
           F32)


SUBSAMPLE_CASES = [c for c in CONV_CASES if expected(c[2], 32) == "gemm_subsample"]


@pytest.mark.parametrize("case", SUBSAMPLE_CASES, ids=[c[0] for c in SUBSAMPLE_CASES])
def test_strided_pointwise_on_avx2(case):
    """Vectors of 8 pixels (on fewer rows each); 16-byte vectors, which have no masked
    loads, keep im2col."""
    instr = make_conv(**case[1])
    x, w = _operands(instr)
    spec = plan_kernel(instr, HostTarget(32)).spec
    assert type(spec).__name__ == "ConvGemm" and spec.pieces >= 2
    assert plan_kernel(instr, HostTarget(16)).spec.pieces == 0
    _check(CompiledKernel(instr, HostTarget(32))(x, w), conv_reference(instr, x, w), F32)


def test_strided_pointwise_pieces_cover_a_vector():
    """A vector of 16 pixels lies on 2 rows of 28 or 16, 3 of 14 or 8, 4 of 5."""
    assert [subsample_pieces(cols, 16) for cols in (28, 16, 15, 14, 8, 5, 4)] == \
        [2, 2, 2, 3, 3, 4, 5]


def test_winograd_transforms_compute_a_3x3_correlation():
    """A^T [(G g G^T) . (B^T d B)] A is the 2x2 correlation of the 4x4 tile d with g."""
    from xlac.emitter.kernels.conv.winograd import TRANSFORMS
    t = {k: np.array(v, np.float64) for k, v in TRANSFORMS[2].items()}
    rng = np.random.default_rng(3)
    d, g = rng.standard_normal((4, 4)), rng.standard_normal((3, 3))
    y = t["at"] @ ((t["g"] @ g @ t["g"].T) * (t["bt"] @ d @ t["bt"].T)) @ t["at"].T
    want = [[(d[i:i + 3, j:j + 3] * g).sum() for j in range(2)] for i in range(2)]
    np.testing.assert_allclose(y, want, rtol=1e-12)


def test_winograd_scratch_is_bounded():
    """The transformed weights take blocks of output channels: the scratch stays near a
    MiB whatever the output channels (and up to 256 input channels, winograd_max_cin)."""
    for cin, cout in ((64, 64), (256, 256), (256, 1024)):
        instr = make_conv((1, cin, 56, 56), (cout, cin, 3, 3), pad=((1, 1), (1, 1)))
        plan = plan_kernel(instr, HostTarget(64))
        assert type(plan.spec).__name__ == "WinogradConv"
        assert plan.scratch_bytes <= 5 << 18, (cin, cout, plan.scratch_bytes)


@pytest.mark.parametrize("vector_bytes", [16, 32, 64])
@pytest.mark.parametrize("case", GEMM_CONV_CASES, ids=[c[0] for c in GEMM_CONV_CASES])
def test_lean_conv_needs_no_scratch(case, vector_bytes):
    """The variant the memory planner asks for at the peak: same result, no scratch."""
    _, kw, _path = case
    instr = make_conv(**kw)
    target = HostTarget(vector_bytes)
    assert scratch_bytes(instr, target) > 0 and scratch_bytes(instr, target, lean=True) == 0
    assert kernel_key(instr, target, lean=True) != kernel_key(instr, target)
    x, w = _operands(instr)
    _check(CompiledKernel(instr, target, lean=True)(x, w), conv_reference(instr, x, w), F32)


@pytest.mark.parametrize("vector_bytes", [16, 32, 64])
def test_channel_conv_is_its_own_lean_variant(vector_bytes):
    """ChannelConv reads its input in place: no scratch, nothing leaner to ask for."""
    target = HostTarget(vector_bytes)
    for _, kw, _path in CHANNEL_CONV_CASES:
        instr = make_conv(**kw)
        assert type(plan_kernel(instr, target).spec).__name__ == "ChannelConv"
        assert scratch_bytes(instr, target) == 0
        assert kernel_key(instr, target, lean=True) == kernel_key(instr, target)


def test_channel_conv_prefetches_the_next_panels_weights():
    """Without K blocks, a panel's tiles prefetch the weights after it (channel_conv._Stream), as
    the K blocks' tiles did the next block's: in a model the weights come from memory."""
    instr = make_conv((1, 320, 7, 7), (1280, 320, 1, 1), constant=True)
    target = HostTarget(64)
    assert type(plan_kernel(instr, target).spec).__name__ == "ChannelConv"
    assert "llvm.prefetch" in CompiledKernel(instr, target).llvm_ir


@every_target()
def test_lean_changes_nothing_without_a_lean_variant(target_name):
    dot = make_dot((37, 53), (53, 29), (), (1,), (), (0,))
    t = target(target_name)
    assert kernel_key(dot, t, lean=True) == kernel_key(dot, t)


def test_conv_reference_matches_direct_sum():
    """The reference itself, against a literal sum over one output element."""
    instr = make_conv((1, 2, 6, 5), (3, 2, 3, 2), stride=(2, 1), pad=((1, 0), (0, 1)),
                      dil=(1, 2))
    x, w = _random((1, 2, 6, 5), F32), _random((3, 2, 3, 2), F32)
    o, oh, ow = 2, 1, 2
    want = sum(float(x[0, c, ih, iw]) * float(w[o, c, kh, kw])
               for c in range(2) for kh in range(3) for kw in range(2)
               for ih, iw in [(oh * 2 + kh - 1, ow + 2 * kw)] if 0 <= ih < 6 and 0 <= iw < 5)
    assert conv_reference(instr, x, w)[0, o, oh, ow] == pytest.approx(want)


# --- depthwise convolutions (DepthwiseRows) ------------------------------------------

# Every stride (1, 2, 3 per dim), padding (none, symmetric, Keras 'same' asymmetric,
# wider than the window's reach, negative), dilation and channel multiplier, on odd
# sizes: images narrower than a vector, a vector and a bit, with and without interior
# columns and rows.
DEPTHWISE_CASES = [
    # id, input dims, kernel (kh, kw), multiplier, stride, pads ((top, bottom), (l, r)), dil
    ("s1_pad1", (1, 5, 9, 23), (3, 3), 1, (1, 1), ((1, 1), (1, 1)), (1, 1)),
    ("s1_valid", (2, 3, 7, 37), (3, 3), 1, (1, 1), ((0, 0), (0, 0)), (1, 1)),
    ("s2_pad1", (1, 4, 15, 33), (3, 3), 1, (2, 2), ((1, 1), (1, 1)), (1, 1)),
    ("s2_same_even", (1, 3, 16, 18), (3, 3), 1, (2, 2), ((0, 1), (0, 1)), (1, 1)),
    ("s2_valid_odd", (1, 2, 11, 19), (3, 3), 1, (2, 2), ((0, 0), (0, 0)), (1, 1)),
    ("s3_mixed", (1, 3, 17, 29), (3, 3), 1, (3, 1), ((1, 2), (2, 1)), (1, 1)),
    ("s1x2", (1, 2, 9, 40), (3, 3), 1, (1, 2), ((1, 1), (1, 1)), (1, 1)),
    ("multiplier2", (1, 3, 10, 13), (3, 3), 2, (1, 1), ((1, 1), (1, 1)), (1, 1)),
    ("multiplier3_s2", (2, 2, 9, 9), (3, 3), 3, (2, 2), ((1, 1), (1, 1)), (1, 1)),
    ("dilated2", (1, 3, 12, 27), (3, 3), 1, (1, 1), ((2, 2), (2, 2)), (2, 2)),
    ("5x5_pad2", (1, 3, 14, 14), (5, 5), 1, (1, 1), ((2, 2), (2, 2)), (1, 1)),
    ("7x3_asym", (1, 2, 12, 21), (7, 3), 1, (1, 1), ((3, 3), (0, 2)), (1, 1)),
    ("pad_beyond_window", (1, 2, 5, 6), (3, 3), 1, (1, 1), ((3, 2), (4, 3)), (1, 1)),
    ("negative_pad", (1, 2, 10, 20), (3, 3), 1, (1, 2), ((-1, 1), (1, -2)), (1, 1)),
    ("tiny_1x1_image", (1, 4, 1, 1), (3, 3), 1, (1, 1), ((1, 1), (1, 1)), (1, 1)),
    ("narrow_7x7", (1, 6, 7, 7), (3, 3), 1, (1, 1), ((1, 1), (1, 1)), (1, 1)),
    ("narrow_3x3_s2", (1, 6, 3, 3), (3, 3), 1, (2, 2), ((1, 1), (1, 1)), (1, 1)),
    ("wide_row", (1, 2, 4, 131), (3, 3), 1, (1, 1), ((1, 1), (1, 1)), (1, 1)),
]


def _depthwise(dims, kernel, multiplier, stride, pad, dil):
    c = dims[1]
    return make_conv(dims, (c * multiplier, 1) + kernel, stride=stride, pad=pad, dil=dil,
                     groups=c)


@pytest.mark.parametrize("vector_bytes", [16, 32, 64])
@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=[c[0] for c in DEPTHWISE_CASES])
def test_depthwise(case, vector_bytes):
    instr = _depthwise(*case[1:])
    target = HostTarget(vector_bytes)
    # Rows for strides 2 to 4, and at stride 1 where an output row fills a vector.
    sw, ow = case[4][1], instr.shape.dims[-1]
    most = conv_tuning(target.vector_bytes, target.registers).rows_max_stride
    rows = 2 <= sw <= most or sw == 1 and 2 * ow > vector_bytes // 4
    assert type(plan_kernel(instr, target).spec) is (DepthwiseRows if rows else Depthwise)
    x, w = (_random(o.shape.dims, F32) for o in instr.operands)
    _check(CompiledKernel(instr, target)(x, w), conv_reference(instr, x, w), F32)


def test_depthwise_padding_reads_no_neighbour():
    """Padding reads as zero, not as the neighbouring row or channel: infinities next to
    a small image would turn every border output into NaN otherwise."""
    instr = _depthwise((1, 3, 5, 6), (3, 3), 1, (1, 1), ((1, 1), (1, 1)), (1, 1))
    x = np.full((1, 3, 5, 6), np.inf, np.float32)
    x[0, 1] = _random((5, 6), F32)
    w = _random((3, 1, 3, 3), F32)
    got = CompiledKernel(instr)(x, w)
    assert np.isfinite(got[0, 1]).all()
    _check(got[0, 1], conv_reference(instr, np.where(np.isfinite(x), x, 0), w)[0, 1], F32)


# --- fused epilogues -------------------------------------------------------------------

# Every epilogue step the float convolution and dot kernels apply (an output fusion's
# bias, activation and residual, optimizer/fusion.py): HLO text after %conv, the result
# %out. %bias, %s and %r are run-time operands (a value per channel, a scalar, a value
# of the result's shape) the kernel reads through its extra pointers; %zb is a broadcast
# constant, which the caller passes through a pointer after them.
EPILOGUES = {
    "bias": "%out = add(%conv, %bb)",
    "bias_first": "%out = add(%bb, %conv)",
    "relu": "%out = maximum(%conv, %zb)",
    "relu6": "%out = clamp(%zero, %conv, %six)",
    "bias_relu6": "%a = add(%conv, %bb)\n%out = clamp(%zero, %a, %six)",
    "bias_relu": "%a = add(%conv, %bb)\n%out = maximum(%zb, %a)",
    "scale_shift": "%a = multiply(%conv, %bb)\n%out = subtract(%a, %sb)",
    "scalar_min": "%out = minimum(%conv, %sb)",
    "residual": "%out = add(%conv, %r)",
    "bias_residual_relu": "%a = add(%conv, %bb)\n%c = add(%r, %a)\n%out = maximum(%c, %zb)",
    "scale_residual_relu6": "%a = multiply(%conv, %bb)\n%c = add(%a, %r)\n"
                            "%out = clamp(%zero, %c, %six)",
    # any DAG of element-wise steps with one exit, transcendental ones included
    "bias_gelu": "%a = add(%conv, %bb)\n%h = multiply(%a, %rt2b)\n%e = erf(%h)\n"
                 "%p = add(%e, %oneb)\n%q = multiply(%a, %p)\n%out = multiply(%q, %halfb)",
    "silu_residual": "%g = logistic(%conv)\n%a = multiply(%conv, %g)\n%out = add(%a, %r)",
    "leaky_relu": "%ge = compare(%conv, %zb)\n%n = multiply(%conv, %tenthb)\n"
                  "%out = select(%ge, %conv, %n)",
    # NE is true on NaN, the others false: a NaN result picks %bb here, not %sb
    "ne_select": "%ge = compare_NE(%conv, %zb)\n%out = select(%ge, %bb, %sb)",
    "lt_select": "%ge = compare_LT(%conv, %bb)\n%out = select(%ge, %sb, %bb)",
    "tanh_exp_divide": "%t = tanh(%conv)\n%e = exponential(%t)\n%d = divide(%bb, %e)\n"
                       "%out = subtract(%d, %sb)",
}
# Convolutions of every kernel: (input channels, output channels, groups, window,
# stride, lean) and the kernel they take (at every width, or by_width).
EPILOGUE_CONVS = {
    "depthwise_s1": ((5, 5, 5, 3, 1, False), "DepthwiseRows"),
    "depthwise_s2": ((5, 5, 5, 3, 2, False), "DepthwiseRows"),
    "dense_3x3": ((5, 40, 1, 3, 1, False), "ConvGemm"),
    "direct": ((5, 7, 1, 3, 1, False), "DirectConv"),
    "dense_k_blocks": ((70, 9, 1, 3, 2, False), "ConvGemm"),
    "pointwise": ((6, 13, 1, 1, 1, False), "ConvGemm"),
    "pointwise_s2_rows": ((9, 10, 1, 1, 2, False), "ConvGemm"),     # SubsamplePacker
    "grouped": ((10, 80, 2, 3, 1, False), "ConvGemm"),
    "direct_grouped": ((10, 8, 2, 3, 1, False), "DirectConv"),
    "direct_lean": ((5, 7, 1, 3, 1, True), "DirectConv"),
    "winograd": ((32, 37, 1, 3, 1, False), "WinogradConv"),
    # constant weights (the test makes %w one)
    "stem": ((3, 48, 1, 3, 2, False), "ChannelConv"),
    "stem_rows": ((3, 6, 1, 5, 1, False), "RowConv"),
    # more input channels than the Winograd kernel takes (winograd_max_cin)
    "small_map_long_k": ((300, 48, 1, 3, 1, False), "ChannelConv"),
    "pointwise_s2_small_map": ((24, 32, 1, 1, 2, False), "ChannelConv"),
    # 1x1 on an 11 x 11 map: panels of 3, 3 and 1 vectors (a K of 128 or more, so
    # ChannelConv); long K
    "pointwise_small_map": ((130, 112, 1, 1, 1, False), "ChannelConv"),
    "pointwise_small_map_long_k": ((600, 48, 1, 1, 1, False), "ChannelConv"),
    # the residual with strides, K blocks, groups and the lean kernel's clamped rows
    "depthwise_s3": ((5, 10, 5, 3, 3, False), "DepthwiseRows"),
    "depthwise_s5": ((3, 3, 3, 3, 5, False), "Depthwise"),
    "pointwise_k_blocks": ((300, 9, 1, 1, 1, False), "ConvGemm"),
    # (the GEMM's and DirectConv's at 64-byte vectors only: RowConv's where rows of 6
    # pixels are more than half a vector)
    "grouped_s2": ((6, 8, 2, 3, 2, False), by_width("RowConv", "RowConv", "ConvGemm")),
    "direct_lean_s2": ((4, 11, 1, 5, 2, True), by_width("RowConv", "RowConv", "DirectConv")),
}
EPILOGUE_CASES = ([(conv, name) for conv in ("depthwise_s1", "dense_3x3", "stem", "stem_rows")
                   for name in EPILOGUES]
                  + [(conv, name) for conv in EPILOGUE_CONVS
                     if conv not in ("depthwise_s1", "dense_3x3", "stem", "stem_rows")
                     for name in ("bias_relu6", "scale_shift", "bias_residual_relu")])


def _epilogue_module(conv: str, steps: str):
    (cin, cout, groups, k, stride, _), _ = EPILOGUE_CONVS[conv]
    hw, pad = 11, k // 2
    o = (hw + 2 * pad - k) // stride + 1
    x, w, y = f"f32[1,{cin},{hw},{hw}]", f"f32[{cout},{cin // groups},{k},{k}]", \
        f"f32[1,{cout},{o},{o}]"
    core = (f"convolution({x} %x, {w} %w), window={{size={k}x{k} "
            f"stride={stride}x{stride} pad={pad}_{pad}x{pad}_{pad}}}, "
            f"dim_labels=bf01_oi01->bf01, feature_group_count={groups}")
    return _fused_module(x, w, y, cout, 1, core, steps)


def _fused_module(x: str, w: str, y: str, channels: int, channel_dim: int, core: str,
                  steps: str):
    """%conv = ``core`` (reading %x and %w) of type ``y``, then ``steps``, reading
    %bias (``channels`` values along ``channel_dim``), %s and %r."""
    from xlac.hlo.text import parse_module
    body = [f"%x = {x} parameter(0)", f"%w = {w} parameter(1)",
            f"%bias = f32[{channels}] parameter(2)", "%s = f32[] parameter(3)",
            f"%r = {y} parameter(4)", f"%conv = {y} {core}",
            f"%bb = {y} broadcast(f32[{channels}] %bias), dimensions={{{channel_dim}}}",
            f"%sb = {y} broadcast(f32[] %s), dimensions={{}}",
            "%zero = f32[] constant(0)", "%six = f32[] constant(6)",
            f"%zb = {y} broadcast(f32[] %zero), dimensions={{}}"]
    for name, value in (("rt2", 0.70710677), ("one", 1), ("half", 0.5), ("tenth", 0.1)):
        body += [f"%{name} = f32[] constant({value})",
                 f"%{name}b = {y} broadcast(f32[] %{name}), dimensions={{}}"]
    pred = "pred" + y[3:]
    for line in steps.split("\n"):
        target, expr = line.split(" = ")
        op, args = expr[:-1].split("(")
        typed = ", ".join(f"f32[] {a}" if a in ("%zero", "%six") else
                          f"{pred} {a}" if a == "%ge" else f"{y} {a}" for a in args.split(", "))
        if op.startswith("compare"):         # compare_NE: direction NE; compare: GE
            body.append(f"{target} = {pred} compare({typed}), direction={op[8:] or 'GE'}")
        else:
            body.append(f"{target} = {y} {op}({typed})")
    body[-1] = "ROOT " + body[-1]
    text = (f"HloModule m\n\nENTRY %main (x: {x}, w: {w}, bias: f32[{channels}], s: f32[], "
            f"r: {y}) -> {y} {{\n" + "".join(f"  {line}\n" for line in body) + "}\n")
    return parse_module(text)


@pytest.mark.parametrize("conv,name", EPILOGUE_CASES, ids=[f"{c}-{n}" for c, n in EPILOGUE_CASES])
def test_convolution_applies_its_fused_epilogue(conv, name):
    (_, _, _, _, _, lean), kernel = EPILOGUE_CONVS[conv]
    _check_fused_kernel(lambda: _epilogue_module(conv, EPILOGUES[name]), name, kernel, lean)


@every_target()
@pytest.mark.parametrize("conv", EPILOGUE_CONVS)
def test_fused_convolution_kernels(conv, target_name):
    """The kernel each fused convolution takes on each target (the numerics above run
    this machine's)."""
    (_, _, _, _, _, lean), kernel = EPILOGUE_CONVS[conv]
    t = target(target_name)
    root = _fused_root(lambda: _epilogue_module(conv, EPILOGUES["bias_residual_relu"]))
    _constant_weights(root, kernel, _random(root.operands[1].shape.dims, F32))
    spec = plan_kernel(root, t, lean).spec
    assert type(spec).__name__ == expected(kernel, t.vector_bytes)
    assert len(spec.epilogue.steps) == 3


def _fused_root(build):
    """The output fusion of ``build()``'s module."""
    from xlac.optimizer import DeadCodeElimination
    from xlac.optimizer.fusion import OutputFusion
    m = build()
    OutputFusion(CPU).run(m)
    DeadCodeElimination().run(m)
    root = m.entry.root
    assert root.opcode is Opcode.FUSION and root.attrs["kind"] == "kOutput"
    return root


def _constant_weights(root, kernel, w: np.ndarray) -> None:
    """For ChannelConv (at some width) and PackedWeightsDot, the weights become the
    constant ``w``, as in a model."""
    if {"ChannelConv", "PackedWeightsDot"} & set(
            kernel.values() if isinstance(kernel, dict) else (kernel,)):
        root.operands[1] = Instruction(Opcode.CONSTANT, root.operands[1].shape, name="wc",
                                       literal=w)


def _check_fused_kernel(build, name: str, kernel, lean: bool = False, path=None,
                        nan_operand: int = 0):
    """The output fusion of ``build()``'s module run by its kernel (at this machine's
    vector width: ``kernel`` may be by_width) against the evaluator on the unfused
    module; one element of operand ``nan_operand`` is NaN."""
    from xlac.hlo.evaluator import evaluate
    original = build()
    args = [_random(p.shape.dims, F32) for p in original.entry.parameters]
    args[2] *= 3
    args[nan_operand].flat[37] = np.nan     # NaN goes through maximum, minimum and clamp
    root = _fused_root(build)
    passed = [args[o.attrs["number"]] for o in root.operands]
    _constant_weights(root, kernel, args[1])
    host = host_target()
    spec = plan_kernel(root, host, lean).spec
    assert type(spec).__name__ == expected(kernel, host.vector_bytes)
    assert path is None or spec.path == path
    assert len(spec.epilogue.steps) == EPILOGUES[name].count("\n") + 1
    want, = evaluate(original, args)
    got = CompiledKernel(root, lean=lean)(*passed)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    _check(got[ok], want[ok], F32)


# Dots of every path, with odd sizes: (lhs dims, rhs dims, contracting dims, batch dims,
# the path); the epilogue's channels are the last dim.
EPILOGUE_DOTS = {
    "gemm": ((37, 53), (53, 29), ((1,), (0,)), ((), ()), "gemm"),
    "gemm_k_blocks": ((19, 300), (300, 21), ((1,), (0,)), ((), ()), "gemm"),
    "gemm_direct": ((3, 53), (53, 45), ((1,), (0,)), ((), ()), "gemm_direct"),
    "batched": ((3, 20, 30), (3, 30, 17), ((2,), (1,)), ((0,), (0,)), "gemm"),
    "row_dot": ((1, 301), (45, 301), ((1,), (1,)), ((), ()), "row_dot"),
    "row_stream": ((1, 301), (301, 45), ((1,), (0,)), ((), ()), "row_stream"),
    # transposed operands: A read down its columns, B across its rows
    "gemm_a_transposed": ((53, 37), (53, 29), ((0,), (0,)), ((), ()), "gemm"),
    "gemm_b_transposed": ((37, 53), (29, 53), ((1,), (1,)), ((), ()), "gemm"),
}
TRANSPOSED = ("gemm_a_transposed", "gemm_b_transposed")
EPILOGUE_DOT_CASES = [(d, n) for d in EPILOGUE_DOTS if d not in TRANSPOSED
                      for n in ("bias_relu6", "scale_shift", "bias_residual_relu", "residual",
                                "bias_gelu", "leaky_relu", "ne_select")] + \
    [(d, n) for d in TRANSPOSED for n in ("bias_residual_relu", "bias_gelu")] + \
    [(d, n) for d in ("gemm", "row_dot") for n in ("silu_residual", "tanh_exp_divide")]


def _dot_epilogue_module(dot: str, steps: str):
    lhs, rhs, (lc, rc), (lb, rb), _ = EPILOGUE_DOTS[dot]
    out = [lhs[d] for d in lb] + [n for d, n in enumerate(lhs) if d not in lb + lc] + \
        [n for d, n in enumerate(rhs) if d not in rb + rc]
    x, w, y = (f"f32[{','.join(map(str, dims))}]" for dims in (lhs, rhs, out))

    def dims(k):
        return ",".join(map(str, k))
    batch = f"lhs_batch_dims={{{dims(lb)}}}, " if lb else ""
    core = (f"dot({x} %x, {w} %w), {batch}lhs_contracting_dims={{{dims(lc)}}}, "
            + (f"rhs_batch_dims={{{dims(rb)}}}, " if rb else "")
            + f"rhs_contracting_dims={{{dims(rc)}}}")
    return _fused_module(x, w, y, out[-1], len(out) - 1, core, steps)


@pytest.mark.parametrize("dot,name", EPILOGUE_DOT_CASES,
                         ids=[f"{d}-{n}" for d, n in EPILOGUE_DOT_CASES])
def test_dot_applies_its_fused_epilogue(dot, name):
    # a NaN weight, not a NaN in a one-row lhs, which every output would read
    _check_fused_kernel(lambda: _dot_epilogue_module(dot, EPILOGUES[name]), name, "FastDot",
                        path=EPILOGUE_DOTS[dot][-1], nan_operand=1)


@every_target()
@pytest.mark.parametrize("dot", EPILOGUE_DOTS)
def test_fused_dot_paths(dot, target_name):
    t = target(target_name)
    root = _fused_root(lambda: _dot_epilogue_module(dot, EPILOGUES["bias_residual_relu"]))
    spec = plan_kernel(root, t).spec
    assert (type(spec).__name__, spec.path) == ("FastDot", EPILOGUE_DOTS[dot][-1])


@pytest.mark.parametrize("dot,name", [("gemm", "bias_residual_relu"), ("gemm", "bias_gelu"),
                                      ("gemm_b_transposed", "scale_shift")])
def test_dot_with_constant_weights_applies_its_fused_epilogue(dot, name):
    _check_fused_kernel(lambda: _dot_epilogue_module(dot, EPILOGUES[name]), name,
                        "PackedWeightsDot", path="gemm", nan_operand=1)


def test_dot_epilogue_after_the_reshape_that_gives_back_batch_dims():
    """A 3-D MatMul as the importer lowers it: dot (2*19, 53) x (53, 29), reshaped to
    (2, 19, 29), then bias, residual and ReLU, all stored by the GEMM kernel."""
    from xlac.hlo.text import parse_module
    x, w, d, y = "f32[38,53]", "f32[53,29]", "f32[38,29]", "f32[2,19,29]"
    text = f"""HloModule m

ENTRY %main (x: {x}, w: {w}, bias: f32[29], r: {y}) -> {y} {{
  %x = {x} parameter(0)
  %w = {w} parameter(1)
  %bias = f32[29] parameter(2)
  %r = {y} parameter(3)
  %d = {d} dot({x} %x, {w} %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %conv = {y} reshape({d} %d)
  %bb = {y} broadcast(f32[29] %bias), dimensions={{2}}
  %zero = f32[] constant(0)
  %zb = {y} broadcast(f32[] %zero), dimensions={{}}
  %a = {y} add({y} %conv, {y} %bb)
  %c = {y} add({y} %r, {y} %a)
  ROOT %out = {y} maximum({y} %c, {y} %zb)
}}
"""
    _check_fused_kernel(lambda: parse_module(text), "bias_residual_relu", "FastDot",
                        path="gemm", nan_operand=1)


# --- other vector widths ------------------------------------------------------------------

OTHER_WIDTH_CASES = [
    make_dot((37, 53), (53, 29), (), (1,), (), (0,)),
    make_dot((37, 53), (29, 53), (), (1,), (), (1,)),       # B packed by columns
    make_dot((1, 301), (45, 301), (), (1,), (), (1,)),
    make_dot((1, 301), (301, 45), (), (1,), (), (0,)),
    make_conv((1, 5, 11, 13), (19, 5, 3, 3), stride=(2, 1), pad=((1, 1), (1, 1))),
    make_conv((1, 6, 9, 9), (6, 1, 3, 3), pad=((1, 1), (1, 1)), groups=6),
]


@pytest.mark.parametrize("vector_bytes", [16, 64])
@pytest.mark.parametrize("index", range(len(OTHER_WIDTH_CASES)))
def test_other_vector_widths(vector_bytes, index):
    """SSE- and AVX-512-sized tiles (LLVM legalizes the vectors for this machine)."""
    instr = OTHER_WIDTH_CASES[index]
    x, y = (_random(o.shape.dims, F32) for o in instr.operands)
    got = CompiledKernel(instr, HostTarget(vector_bytes))(x, y)
    want = (dot_reference(instr, x, y) if instr.opcode is Opcode.DOT
            else conv_reference(instr, x, w=y))
    _check(got, want, F32)


@every_target()
def test_tiling_follows_vector_width(target_name):
    """Slivers of 2 vectors; MR x NV accumulators, NV B vectors and a splat fit the
    registers the kernels count (16 below 64-byte vectors, 32 there)."""
    _, _, vector_bytes, registers = TARGETS[target_name]
    t = tiling_for(target(target_name))
    assert t.nr == 2 * vector_bytes // 4
    assert t.mr * t.nv + t.nv + 1 <= registers


# --- the function contract ---------------------------------------------------------------

@every_target()
def test_kernel_signature_and_attributes(target_name):
    from llvmlite import ir
    module = ir.Module("m")
    conv = make_conv((1, 4, 8, 8), (40, 4, 3, 3), pad=((1, 1), (1, 1)))
    t = target(target_name)
    fn = emit_kernel(module, conv, "k_conv", t)
    # out, x, w, scratch, then batch, groups, cin_g, cout_g, in spatial, out spatial
    assert scratch_bytes(conv, t) > 0
    assert kernel_arguments(conv, t) == [1, 1, 4, 40, 8, 8, 8, 8]
    assert [str(a.type) for a in fn.args] == ["ptr"] * 4 + ["i64"] * 8
    assert fn.linkage == "internal" and "nounwind" in fn.attributes
    assert all("noalias" in a.attributes for a in fn.args[:4])
    dw = make_conv((1, 8, 8, 8), (8, 1, 3, 3), groups=8)
    assert scratch_bytes(dw, t) == 0
    assert len(emit_kernel(module, dw, "k_dw", t).args) == 3 + 8
    naive = make_dot((2, 3), (3, 4), (), (1,), (), (0,), F64)
    assert kernel_arguments(naive, t) == []
    assert len(emit_kernel(module, naive, "k_naive", t).args) == 3


# --- sharing one function between instructions ----------------------------------------------

SHARING_CASES = [
    # id, two instructions, whether they share a kernel (on every target, or by_width)
    ("3x3_channels_and_size", make_conv((1, 8, 12, 10), (16, 8, 3, 3), pad=((1, 1), (1, 1))),
     make_conv((2, 13, 9, 9), (5, 13, 3, 3), pad=((1, 1), (1, 1))), True),
    ("1x1_channels_and_size", make_conv((1, 24, 9, 9), (16, 24, 1, 1)),
     make_conv((1, 40, 5, 6), (32, 40, 1, 1)), True),
    # the GEMM's (a case at 64 bytes: where vectors are shorter both take RowConv, whose
    # tiles of 4 and 2 channels per group differ)
    ("3x3_stride2_groups", make_conv((1, 8, 11, 11), (8, 4, 3, 3), stride=(2, 2),
                                     pad=((1, 1), (1, 1)), groups=2),
     make_conv((1, 12, 15, 15), (6, 4, 3, 3), stride=(2, 2), pad=((1, 1), (1, 1)), groups=3),
     by_width(False, False, True)),
    ("depthwise_channels_and_size", make_conv((1, 8, 12, 10), (8, 1, 3, 3),
                                              pad=((1, 1), (1, 1)), groups=8),
     make_conv((2, 5, 6, 13), (10, 1, 3, 3), pad=((1, 1), (1, 1)), groups=5), True),
    ("gemm_sizes", make_dot((37, 53), (53, 29), (), (1,), (), (0,)),
     make_dot((9, 20), (20, 50), (), (1,), (), (0,)), True),
    ("batched_gemm_sizes", make_dot((2, 9, 7), (2, 7, 20), (0,), (2,), (0,), (1,)),
     make_dot((3, 17, 5), (3, 5, 6), (0,), (2,), (0,), (1,)), True),
    ("gemv_sizes", make_dot((1, 301), (45, 301), (), (1,), (), (1,)),
     make_dot((1, 64), (7, 64), (), (1,), (), (1,)), True),
    ("channel_conv_sizes", make_conv((1, 70, 6, 7), (32, 70, 3, 3), pad=((1, 1), (1, 1)),
                                     constant=True),
     make_conv((1, 90, 5, 7), (48, 90, 3, 3), pad=((1, 1), (1, 1)), constant=True), True),
    ("padding_differs", make_conv((1, 8, 12, 10), (16, 8, 3, 3), pad=((1, 1), (1, 1))),
     make_conv((1, 8, 12, 10), (16, 8, 3, 3)), False),
    ("stride_differs", make_conv((1, 8, 12, 10), (16, 8, 3, 3)),
     make_conv((1, 8, 12, 10), (16, 8, 3, 3), stride=(2, 1)), False),
    ("window_differs", make_conv((1, 8, 12, 10), (16, 8, 3, 3)),
     make_conv((1, 8, 12, 10), (16, 8, 5, 5)), False),
    ("gemm_vs_gemv", make_dot((37, 53), (53, 29), (), (1,), (), (0,)),
     make_dot((1, 53), (53, 29), (), (1,), (), (0,)), False),
    ("naive_shapes_differ", make_dot((2, 3), (3, 4), (), (1,), (), (0,), F64),
     make_dot((2, 5), (5, 4), (), (1,), (), (0,), F64), False),
]


@every_target()
@pytest.mark.parametrize("case", SHARING_CASES, ids=[c[0] for c in SHARING_CASES])
def test_kernel_key_shares_code_between_sizes(case, target_name):
    _, first, second, shared = case
    t = target(target_name)
    shared = expected(shared, t.vector_bytes)
    assert (kernel_key(first, t) == kernel_key(second, t)) == shared
    if shared:
        assert kernel_arguments(first, t) != kernel_arguments(second, t)
        # One function, each call with the scratch its own sizes need (a short K packs
        # fewer rows), within what the shared code allows for, and with or without
        # scratch alike (the function's signature).
        # A spec whose scratch grows with the sizes (scratch_floats: Winograd's) states
        # a stand-in that only says the function takes one.
        spec = plan_kernel(first, t).spec
        for instr in (first, second):
            assert (scratch_bytes(instr, t) > 0) == (spec.scratch_bytes > 0)
            if not hasattr(spec, "scratch_floats"):
                assert scratch_bytes(instr, t) <= spec.scratch_bytes


SHARED_CASES = [c for c in SHARING_CASES if c[3]]     # at some width


@pytest.mark.parametrize("case", SHARED_CASES, ids=[c[0] for c in SHARED_CASES])
def test_shared_kernel_computes_both_instructions(case):
    """One compiled function, called with each instruction's own sizes: at this
    machine's vector width, or for a case that shares only at 64 bytes, at those."""
    _, first, second, shared = case
    width = host_target().vector_bytes
    kernel = CompiledKernel(first, None if expected(shared, width) else HostTarget(64))
    for instr in (first, second):
        x, y = (_random(o.shape.dims, F32) for o in instr.operands)
        want = (dot_reference(instr, x, y) if instr.opcode is Opcode.DOT
                else conv_reference(instr, x, y))
        _check(kernel(x, y, instr=instr), want, F32)


def _relu6_topped(top: float):
    """The depthwise ReLU6 epilogue module with its clamp's top at ``top``."""
    m = _epilogue_module("depthwise_s1", EPILOGUES["bias_relu6"])
    six = next(i for i in m.entry.instructions if i.name == "six")
    six.literal = np.array(top, np.float32)
    return m


TOPS = (6.0, 4.0)


@every_target()
def test_epilogues_differing_in_a_constant_share_a_kernel(target_name):
    """Layers whose fused epilogues differ only in scalar constants (ReLU6 and a clamp at
    4; PP-LCNet's learned scalar scale and shift) share one kernel key, each call
    passing its own constants."""
    t = target(target_name)
    roots = [_fused_root(lambda top=top: _relu6_topped(top)) for top in TOPS]
    assert kernel_key(roots[0], t) == kernel_key(roots[1], t)
    assert [plan_kernel(r, t).spec.constant_operands for r in roots] == \
        [(0.0, top) for top in TOPS]


def test_shared_epilogue_kernel_computes_each_layers_constants():
    """One compiled function run for both layers computes each with its own top."""
    from xlac.hlo.evaluator import evaluate
    roots = [_fused_root(lambda top=top: _relu6_topped(top)) for top in TOPS]
    kernel = CompiledKernel(roots[0])
    for top, root in zip(TOPS, roots):
        original = _relu6_topped(top)
        args = [_random(p.shape.dims, F32) * 4 for p in original.entry.parameters]
        want, = evaluate(original, args)
        got = kernel(*(args[o.attrs["number"]] for o in root.operands), instr=root)
        _check(got, want, F32)
        assert got.max() == top


def test_bound_call_computes_what_a_call_does():
    """CompiledKernel.bind (what benchmarks/kernels.py times) runs the same call."""
    instr = make_conv((1, 8, 9, 9), (12, 8, 1, 1), stride=(2, 2), constant=True)
    kernel = CompiledKernel(instr)
    x, w = _operands(instr)
    out = np.full(instr.shape.dims, np.nan, np.float32)
    kernel.bind(x, w, out=out)()
    np.testing.assert_array_equal(out, kernel(x, w))


def test_kernel_rejects_an_instruction_with_another_key():
    kernel = CompiledKernel(SHARING_CASES[-3][1])
    other = SHARING_CASES[-3][2]
    with pytest.raises(ValueError, match="does not share"):
        kernel(*(_random(o.shape.dims, F32) for o in other.operands), instr=other)


def test_packed_weights_replace_the_constant(tmp_path):
    """A model's ChannelConvs read their weights packed, and the object holds them once:
    ResNet-8's weights section is no larger than its initializers. ChannelConv runs some
    of its layers at every vector width, so this machine's object packs too."""
    import sys
    from pathlib import Path

    from onnx import numpy_helper

    import xlac
    from xlac.emitter.elf import ElfObject
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from memory_models import MODELS

    model = MODELS["resnet8"]()
    path = tmp_path / "resnet8.o"
    xlac.compile(model, path)
    for name in TARGETS:
        info = target(name)
        assert "ChannelConv" in {type(plan_kernel(i, info).spec).__name__
                                 for i in _kernels_of(model, name)}
    weights = ElfObject(path.read_bytes()).footprint(".rodata.resnet8.weights")["weights"]
    assert weights <= sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


def _kernels_of(model, target_name):
    """The kernels of ``model`` optimized for target_util's ``target_name``."""
    from xlac.emitter.kernels import is_kernel
    from xlac.importers.onnx import import_onnx
    from xlac.optimizer import optimize
    backend = target_util.backend(target_name)
    module = optimize(import_onnx(model), backend)
    return [i for i in module.entry.instructions if is_kernel(i, backend.target)]


def test_model_emits_one_function_for_convolutions_of_different_sizes(tmp_path):
    """Two 3x3 pad-1 convolutions differing in channels and image size: one kernel
    function in the model's IR, two calls, and both outputs right."""
    from emit_util import compile_module, emit_module
    from xlac.hlo import Module

    b = Builder("main")
    dims = [(1, 8, 12, 10), (16, 8, 3, 3), (1, 13, 9, 9), (5, 13, 3, 3)]
    params = [b.parameter(i, Shape.array(F32, d)) for i, d in enumerate(dims)]
    nchw = ConvDimensionNumbers.nchw(2)
    win = Window.make((3, 3), None, (1, 1), (1, 1))
    convs = [b.convolution(params[0], params[1], win, nchw, 1, 1),
             b.convolution(params[2], params[3], win, nchw, 1, 1)]
    module = Module("two_convs")
    module.add_computation(b.build(b.tuple(convs)), entry=True)

    art, _ = emit_module(module, "two", ("llvm",), opt_level=0)
    kernels = re.findall(r'define internal void @"?(two\.convolution[\w.]*)', art.llvm_ir)
    assert len(kernels) == 1
    assert len(re.findall(rf'call void @"?{re.escape(kernels[0])}"?\(', art.llvm_ir)) == 2

    args = [_random(d, F32) for d in dims]
    got = compile_module(module, tmp_path, name="two")(*args)
    for out, instr, (x, w) in zip(got, convs, (args[:2], args[2:])):
        _check(out, conv_reference(instr, x, w), F32)


@every_target()
def test_scratch_is_small(target_name):
    """Only one packed sliver: the scratch does not grow with the problem."""
    big = make_conv((1, 512, 56, 56), (512, 512, 3, 3), pad=((1, 1), (1, 1)))
    assert scratch_bytes(big, target(target_name)) <= 64 * 1024


def make_weights_dot(lhs, weights: np.ndarray, lc, rc):
    """A dot of a parameter and constant weights, as a model's layer."""
    b = Builder("dot")
    x = b.parameter(0, Shape.array(F32, lhs))
    return b.dot(x, b.constant(weights), DotDimensionNumbers((), lc, (), rc))


# lhs dims, weights dims, contracting dims: two K blocks and a tail sliver; Gemm's
# transB (each column of B a contiguous row of the constant); a tail of one vector
WEIGHTS_DOTS = {"k_blocks": ((37, 300), (300, 120), (1,), (0,)),
                "transposed": ((20, 53), (29, 53), (1,), (1,)),
                "thin_tail": ((9, 16), (16, 135), (1,), (0,))}


@pytest.mark.parametrize("case", WEIGHTS_DOTS)
def test_dot_with_packed_weights_computes_the_product(case):
    lhs, rhs, lc, rc = WEIGHTS_DOTS[case]
    instr = make_weights_dot(lhs, _random(rhs, F32), lc, rc)
    x, w = _random(lhs, F32), instr.operands[1].literal
    _check(CompiledKernel(instr)(x, w), dot_reference(instr, x, w), F32)


@every_target()
@pytest.mark.parametrize("case", WEIGHTS_DOTS)
def test_constant_weights_are_packed_at_compile_time(case, target_name):
    lhs, rhs, lc, rc = WEIGHTS_DOTS[case]
    plan = plan_kernel(make_weights_dot(lhs, _random(rhs, F32), lc, rc), target(target_name))
    assert type(plan.spec).__name__ == "PackedWeightsDot" and plan.scratch_bytes == 0


@every_target()
def test_fused_dot_over_constant_weights_packs_them(target_name):
    root = _fused_root(lambda: _dot_epilogue_module("gemm", EPILOGUES["bias_residual_relu"]))
    _constant_weights(root, "PackedWeightsDot", _random(root.operands[1].shape.dims, F32))
    spec = plan_kernel(root, target(target_name)).spec
    assert (type(spec).__name__, spec.path) == ("PackedWeightsDot", "gemm")


@every_target()
def test_packed_weights_are_slivers_of_nr_columns(target_name):
    t = target(target_name)
    w = _random((300, 120), F32)
    plan = plan_kernel(make_weights_dot((37, 300), w, (1,), (0,)), t)
    nr = tiling_for(t).nr
    packed = plan.spec.pack_weights(w, plan.sizes)
    assert packed.shape == (-(-120 // nr), 300, nr)
    np.testing.assert_array_equal(packed[1, 7, :3], w[7, nr:nr + 3])
    assert not packed[-1, :, 120 - (packed.shape[0] - 1) * nr:].any()     # zero padding
    # a column block of the parallel split starts whole slivers on: K floats a column
    split = kernel_split(plan, tiling_for(t))
    assert split.strides[2] == (300 if split.axis is Axis.N else 0)


@every_target()
def test_does_not_pack_weights_whose_slivers_would_be_mostly_padding(target_name):
    """N = 10: its slivers of NR columns (2 x 8 or 1 x 16 or 32 floats) would hold 10
    real ones."""
    t = target(target_name)
    narrow = plan_kernel(make_weights_dot((37, 300), _random((300, 10), F32), (1,), (0,)), t)
    assert type(narrow.spec).__name__ == "FastDot"


@every_target()
@pytest.mark.parametrize("why", ["not_constant", "few_rows", "batched"])
def test_does_not_pack_weights_that_a_call_reads_otherwise(why, target_name):
    t = target(target_name)
    instr = {"not_constant": lambda: make_dot((37, 300), (300, 45), (), (1,), (), (0,)),
             "few_rows": lambda: make_weights_dot((2, 300), _random((300, 45), F32), (1,),
                                                  (0,)),
             "batched": lambda: _batched_weights_dot()}[why]()
    spec = plan_kernel(instr, t).spec
    assert type(spec).__name__ == "FastDot"


def _batched_weights_dot():
    b = Builder("dot")
    x = b.parameter(0, Shape.array(F32, (3, 20, 30)))
    return b.dot(x, b.constant(_random((3, 30, 17), F32)),
                 DotDimensionNumbers((0,), (2,), (0,), (1,)))


SHORT_K = make_dot((2, 4, 16, 8), (2, 4, 16, 8), (0, 1), (3,), (0, 1), (3,))


@every_target()
def test_gemm_scratch_fits_a_short_k(target_name):
    """A product over K < KC packs K rows of the B sliver, not KC (attention's scores)."""
    t = target(target_name)
    assert scratch_bytes(SHORT_K, t) == 8 * tiling_for(t).nr * 4
    assert scratch_bytes(SHORT_K, t) < plan_kernel(SHORT_K, t).spec.scratch_bytes


def test_gemm_stays_inside_a_short_ks_scratch():
    """The guarded call checks that the kernel stays inside it."""
    x, y = (_random(o.shape.dims, F32) for o in SHORT_K.operands)
    _check(CompiledKernel(SHORT_K)(x, y), dot_reference(SHORT_K, x, y), F32)


# A convolution GEMM whose K (input channels x window positions: 5 x 9) is shorter
# than the K block; and a 1x1 one over 8 channels (a row-streamed band's pointwise layer).
SHORT_K_CONVS = [make_conv((1, 5, 11, 11), (40, 5, 3, 3), pad=((1, 1), (1, 1))),
                 make_conv((1, 8, 2, 13), (8, 8, 1, 1))]


@every_target()
@pytest.mark.parametrize("k", [0, 1], ids=["3x3_k45", "1x1_k8"])
def test_conv_gemm_scratch_fits_a_short_k(k, target_name):
    instr, t = SHORT_K_CONVS[k], target(target_name)
    spec = plan_kernel(instr, t).spec
    assert type(spec).__name__ == "ConvGemm"
    assert scratch_bytes(instr, t) == (45, 8)[k] * tiling_for(t).nr * 4
    assert scratch_bytes(instr, t) < spec.scratch_bytes


@pytest.mark.parametrize("k", [0, 1], ids=["3x3_k45", "1x1_k8"])
def test_conv_gemm_stays_inside_a_short_ks_scratch(k):
    instr = SHORT_K_CONVS[k]
    x, w = (_random(o.shape.dims, F32) for o in instr.operands)
    _check(CompiledKernel(instr)(x, w), conv_reference(instr, x, w), F32)


def test_other_opcodes_are_rejected():
    b = Builder("add")
    x = b.parameter(0, Shape.array(F32, (2,)))
    add = b.op(Opcode.ADD, x, x)
    with pytest.raises(XlacError, match="no kernel"):
        scratch_bytes(add, target("avx512"))


# --- base (lhs) dilation: transposed convolutions -----------------------------------------

LHS_DILATED = [
    # id, kwargs of make_conv (odd sizes, every base dilation > 1)
    ("stride2_3x3", dict(xd=(1, 5, 7, 9), wd=(6, 5, 3, 3), lhs_dil=(2, 2),
                         pad=((1, 2), (1, 2)))),
    ("stride3_4x4_asym", dict(xd=(2, 3, 5, 6), wd=(7, 3, 4, 4), lhs_dil=(3, 3),
                              pad=((3, 1), (2, 3)))),
    ("mixed_strides_dilated_window", dict(xd=(1, 4, 6, 5), wd=(5, 4, 3, 2), lhs_dil=(2, 3),
                                          dil=(2, 1), pad=((4, 3), (1, 1)))),
    ("groups", dict(xd=(1, 6, 5, 5), wd=(9, 2, 3, 3), lhs_dil=(2, 2), groups=3,
                    pad=((2, 2), (2, 2)))),
    ("depthwise", dict(xd=(1, 4, 7, 7), wd=(4, 1, 3, 3), lhs_dil=(2, 2), groups=4,
                       pad=((2, 3), (2, 3)))),
    ("conv1d_stride4", dict(xd=(2, 3, 11), wd=(5, 3, 5), lhs_dil=(4,), pad=((4, 4),))),
    ("negative_pads", dict(xd=(1, 2, 9, 8), wd=(3, 2, 3, 3), lhs_dil=(2, 2),
                           pad=((-1, 0), (0, -2)))),
]


@pytest.mark.parametrize("case", LHS_DILATED, ids=[c[0] for c in LHS_DILATED])
def test_lhs_dilated_conv_runs_dense_fast_kernels(case, tmp_path):
    """After conv_phase_split every convolution takes a fast path, and the compiled
    model matches the dilated convolution's reference."""
    from emit_util import compile_module
    from xlac.hlo import Module
    from xlac.optimizer import ConvPhaseSplit, optimize

    instr = make_conv(**case[1])
    args = [_random(o.shape.dims, F32) for o in instr.operands]
    module = Module(case[0])
    b = Builder("main")
    x = b.parameter(0, instr.operands[0].shape)
    w = b.parameter(1, instr.operands[1].shape)
    module.add_computation(b.build(b.op(Opcode.CONVOLUTION, x, w, **instr.attrs)), entry=True)
    assert ConvPhaseSplit().run(module)
    optimize(module, CPU)
    convs = [i for c in module.computations for i in c.instructions
             if i.opcode is Opcode.CONVOLUTION]
    assert convs and all(_conv_path(c, target(name), False) != "naive"
                         for c in convs for name in TARGETS)
    got, = compile_module(module, tmp_path, name=f"lhs_{case[0]}")(*args)
    _check(got, conv_reference(instr, *args), F32)
