"""Convolutions as implicit GEMM on the tiled SGEMM of dot.py, for the CUDA backend.

    plan = plan_conv(instr)         # None: not a convolution this kernel takes (a loop runs it)
    fn, blocks, threads = plan.emit(module, instr, name, hooks, blob, out, operands)

An f32 2-D convolution (rank-4 operands, any dimension numbers and layouts, strides,
padding, window and base dilations, feature groups) is, per feature group g, the product

    C[m, n] = sum_k A[m, k] * B[k, n]       M = the group's output channels
                                            N = batch x output pixels
                                            K = the group's input channels x window

A[m, k] is the kernel element of output channel g*M + m at K position k = (input
channel, window row, window column), flattened in the order of the kernel's strides,
largest first (so that A reads as a matrix with one K stride wherever the kernel's
layout keeps those three dims together: OIHW and HWIO both do). B[k, n] is the input
element that output pixel n reads at window position k, or zero where that falls in the
padding (or between the elements of a base-dilated input): im2col, never built: the B
tile loader (``InputGather``) computes each element's input position as it copies the
tile into shared memory. C[m, n] is the output element of channel g*M + m at pixel n.

The grid has one block per (group, tile row, tile column), the group in the place of
the dot's batch; the tile loop, the tile sizes and the store are the dot's (TileLoop,
choose_tile, MatrixStore), and so is an output fusion's epilogue, applied by the store
(epilogue.py): the output index of C[m, n] of group g is channel g*M + m at pixel n.

A group of fewer than MIN_GROUP_ROWS output channels would waste most of a tile's rows
(a depthwise convolution has one): with at most MAX_DIRECT_TAPS products per output
element, those run the direct kernel (``DirectPlan``): a thread per output element,
the window unrolled, the epilogue applied as it stores. Wider windows of narrow groups
stay element loops.

The gather's arithmetic per element and K step is in 32 bits (the plan refuses
operands of 2^31 elements or more): K position -> (channel, window row, window
column) by division by constants, the input row and column, the bounds test and the
offset, which LLVM lowers to a few IMADs; the output pixel's part (its image, its first
input row and column) is worked out once per thread. A dim whose window never leaves
the input (no padding there, no base dilation) has no bounds test.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Sequence

from llvmlite import ir

from ...hlo import Instruction, Opcode
from ...hlo.dtypes import F32
from ..intrinsics import call_intrinsic
from ..irutil import I32, I64, i32, i64
from ..loops import PointerArg
from .dot import (BK, PAD, THREADS, F32_TY, MatrixStore, MatrixTile, ResultIndex, Tile,
                  TileLoop, _Matrix, _cdiv, _strides, batch_offsets, choose_tile, digits,
                  finish_kernel)
from .epilogue import unpack
from .kernels import WeightsBlob, _grid_stride, launch_size, new_kernel

# Output channels per group below which a convolution is no GEMM (the direct kernel, or
# an element loop): a group's rows would fill less than half of the smallest tile's 16.
MIN_GROUP_ROWS = 8
# A convolution of narrower groups (depthwise: one channel each) with at most this many
# products per output element runs the direct kernel (DirectPlan), its window unrolled.
MAX_DIRECT_TAPS = 64
# The gather computes in 32 bits: every operand below this many elements.
MAX_ELEMENTS = 2 ** 31 - 1


@dataclass(frozen=True)
class _Spatial:
    """One spatial dim of the convolution: the output pixel's input coordinate is
    ``o * stride - pad_low + w * dilation`` (w the window position), in units of the
    base-dilated input."""
    size: int                   # of the input
    window: int
    stride: int
    pad_low: int
    dilation: int               # the window's (rhs)
    base_dilation: int          # the input's (lhs)
    in_stride: int              # element stride of the input along it

    def input_position(self, b: ir.IRBuilder, p: ir.Value, checked: bool, ok):
        """The input element at base-dilated position ``p`` (i32), and ``ok`` and-ed
        with whether it exists (``checked``: the window may leave the input here)."""
        if not checked:
            return p, ok
        inside = None
        if self.base_dilation != 1:
            inside = b.icmp_signed("==", b.srem(p, i32(self.base_dilation)), i32(0))
            p = b.sdiv(p, i32(self.base_dilation))
        # Unsigned: a negative position (the low padding) is outside too.
        in_range = b.icmp_unsigned("<", p, i32(self.size))
        inside = in_range if inside is None else b.and_(inside, in_range)
        return p, inside if ok is None else b.and_(ok, inside)


@dataclass(frozen=True)
class ConvGeometry:
    """The convolution as ``groups`` GEMMs, and how each of its arrays is addressed."""
    groups: int
    m: int                      # output channels per group
    n: int                      # batch x output pixels
    k: int                      # input channels per group x window
    # K, row-major over these axes: "c" (the group's input channels) or a spatial dim
    # number (0, 1: its window positions); their extents.
    k_axes: tuple
    k_extents: tuple[int, ...]
    # N, row-major over these axes: "b" (the batch) or a spatial dim number (its output
    # positions); their extents.
    n_axes: tuple
    n_extents: tuple[int, ...]
    spatial: tuple[_Spatial, ...]
    in_batch_stride: int
    in_channel_stride: int

    def checked(self, i: int, out_size: int) -> bool:
        return _checked(self.spatial[i], out_size)


def _checked(s: _Spatial, out_size: int) -> bool:
    """Whether the input coordinate along ``s`` can fall outside the input (output
    positions 0 .. out_size - 1)."""
    if s.base_dilation != 1:
        return True
    last = (out_size - 1) * s.stride - s.pad_low + (s.window - 1) * s.dilation
    return s.pad_low > 0 or last > s.size - 1


def _order(axes: Sequence, strides: Sequence[int], extents: Sequence[int]) -> list[int]:
    """Positions of ``axes`` ordered by descending stride (the most major first), those
    of extent 1 (no stride to speak of) last."""
    return sorted(range(len(axes)), key=lambda i: (-strides[i] if extents[i] != 1 else 0, i))


def _merged(extents: Sequence[int], strides: Sequence[int]) -> int | None:
    """The one stride of row-major positions over ``extents`` if the dims are contiguous
    with each other at ``strides`` (outer = inner * extent), else None."""
    live = [(e, s) for e, s in zip(extents, strides) if e != 1]
    if not live:
        return 0
    for (_, outer), (e, inner) in zip(live, live[1:]):
        if outer != inner * e:
            return None
    return live[-1][1]


def plan_conv(instr: Instruction) -> "ConvPlan | DirectPlan | None":
    """The plan of an f32 2-D convolution, or of an output fusion of one (its store
    applies the epilogue): implicit GEMM where its groups have at least MIN_GROUP_ROWS
    output channels, the direct kernel where they have fewer and at most
    MAX_DIRECT_TAPS products per output element; None for anything else, which the
    element loop computes."""
    conv, epilogue = unpack(instr)
    if conv is None or conv.opcode is not Opcode.CONVOLUTION or len(conv.operands) != 2:
        return None
    out = conv.shape
    if instr.shape.dims != out.dims:
        return None
    if out.is_tuple or any(o.shape.is_tuple for o in conv.operands):
        return None
    x, w = (o.shape for o in conv.operands)
    if any(s.dtype != F32 for s in (x, w, out)) or x.rank != 4:
        return None
    if conv.attrs.get("batch_group_count", 1) != 1:
        return None
    if max(s.num_elements for s in (x, w, out)) > MAX_ELEMENTS or out.num_elements == 0:
        return None
    dn, win = conv.attrs["dimension_numbers"], conv.attrs["window"]
    groups = conv.attrs.get("feature_group_count", 1)
    m = out.dims[dn.output_feature] // groups
    cin = w.dims[dn.kernel_input]
    xs, ws, os_ = _strides(x), _strides(w), _strides(instr.shape)
    spatial = tuple(_Spatial(x.dims[dn.input_spatial[i]], w.dims[dn.kernel_spatial[i]],
                             win.stride[i], win.pad_low[i], win.rhs_dilation[i],
                             win.lhs_dilation[i], xs[dn.input_spatial[i]])
                    for i in range(2))
    if m < MIN_GROUP_ROWS:
        taps = cin * spatial[0].window * spatial[1].window
        if taps > MAX_DIRECT_TAPS:
            return None
        out_sizes = [out.dims[dn.output_spatial[i]] for i in range(2)]
        return DirectPlan(instr.shape, dn, groups, m, cin, spatial,
                          tuple(_checked(s, o) for s, o in zip(spatial, out_sizes)),
                          xs[dn.input_batch], xs[dn.input_feature],
                          tuple(ws[d] for d in (dn.kernel_output, dn.kernel_input,
                                                *dn.kernel_spatial)),
                          epilogue)

    # K: the kernel's (input channel, window row, window column), by its strides.
    k_axes = ("c", 0, 1)
    k_dims = (dn.kernel_input, *dn.kernel_spatial)
    k_ext = [w.dims[d] for d in k_dims]
    k_str = [ws[d] for d in k_dims]
    order = _order(k_axes, k_str, k_ext)
    k_axes = tuple(k_axes[i] for i in order)
    k_ext = tuple(k_ext[i] for i in order)
    k_str = tuple(k_str[i] for i in order)
    k_stride = _merged(k_ext, k_str)
    oc = ws[dn.kernel_output]
    a = _Matrix((m * oc,), (m,), (oc,), k_stride or 0,
                *(((), ()) if k_stride is not None else (k_ext, k_str)))

    # N: the output's (batch, row, column), by the output's strides: consecutive
    # columns of C are neighbours in memory wherever the layout allows.
    n_axes = ("b", 0, 1)
    n_dims = (dn.output_batch, *dn.output_spatial)
    n_ext = [out.dims[d] for d in n_dims]
    n_str = [os_[d] for d in n_dims]
    order = _order(n_axes, n_str, n_ext)
    n_axes = tuple(n_axes[i] for i in order)
    n_ext = tuple(n_ext[i] for i in order)
    n_str = tuple(n_str[i] for i in order)
    feature = os_[dn.output_feature]
    c = _Matrix((m * feature,), (m,), (feature,), 0)

    geometry = ConvGeometry(groups, m, prod(n_ext), prod(k_ext), k_axes, k_ext, n_axes,
                            n_ext, spatial, xs[dn.input_batch], xs[dn.input_feature])
    out_sizes = {i: out.dims[dn.output_spatial[i]] for i in range(2)}
    checked = tuple(geometry.checked(i, out_sizes[i]) for i in range(2))
    # The output index of C[m, n] of group g: channel g * M + m, the pixel's digits.
    n_index = {"b": dn.output_batch, 0: dn.output_spatial[0], 1: dn.output_spatial[1]}
    index = ResultIndex(4, (groups,), ((dn.output_feature, m),), ((dn.output_feature, 1),),
                        tuple((n_index[a], 1) for a in n_axes))
    plan = ConvPlan(geometry, a, c, (n_ext, n_str), checked,
                    choose_tile(groups, m, geometry.n), cin, index, epilogue)
    return plan if plan.blocks < 2 ** 31 else None


@dataclass(frozen=True)
class ConvPlan:
    """One convolution as ``groups`` GEMMs: the geometry, how the kernel (A) and the
    output (C: its rows, its columns' dims and strides) are addressed, which spatial
    dims the gather bounds-checks, and the tile."""
    geometry: ConvGeometry
    a: _Matrix
    c: _Matrix
    c_cols: tuple[tuple[int, ...], tuple[int, ...]]
    checked: tuple[bool, ...]
    tile: Tile
    cin: int                    # input channels per group
    index: ResultIndex | None = field(default=None, compare=False)
    epilogue: object = field(default=None, compare=False)   # a StoreEpilogue

    @property
    def blocks(self) -> int:
        g = self.geometry
        return g.groups * _cdiv(g.m, self.tile.bm) * _cdiv(g.n, self.tile.bn)

    def emit(self, module: ir.Module, instr: Instruction, name: str, hooks, blob: WeightsBlob,
             out: PointerArg, operands: Sequence[PointerArg]):
        """``name(out, input, kernel, [epilogue operand...,] weights)``; returns it, the
        blocks and the threads per block of its launch."""
        g = self.geometry
        params = 2 + len(operands)
        fn, b = new_kernel(module, name, params, hooks, [out, *operands])
        out_align, x_align, w_align = (min(a.align, 4) for a in (out, *operands[:2]))
        loop = TileLoop(b, hooks, self.tile, g.m, g.n, g.k, "conv")
        # The group's offsets in the kernel (A), the output (C) and the input (its
        # first channel).
        channels = _Matrix((self.cin * g.in_channel_stride,), (), (), 0)
        offsets = []

        def begin(loop: TileLoop) -> None:
            offsets.extend(batch_offsets(b, (g.groups,), (self.a, self.c, channels),
                                         loop.batch))
        apply = None if self.epilogue is None else \
            self.epilogue.bind(b, fn, blob, operands)
        loop.emit(begin,
                  MatrixTile(fn.args[2], w_align, self.a, g.m, lambda: offsets[0]),
                  InputGather(fn.args[1], x_align, g, self.checked, lambda: offsets[2]),
                  MatrixStore(fn.args[0], out_align, self.c, self.c_cols, g.m, g.n,
                              lambda: offsets[1], self.index, apply))
        b.ret_void()
        finish_kernel(module, fn, hooks, params)
        return fn, self.blocks, THREADS


class InputGather:
    """The B-tile loader of a convolution: B[k, n] gathered from the input (im2col on
    the fly), zero in the padding, between base-dilated elements and outside K x N."""

    def __init__(self, ptr: ir.Value, align: int, geometry: ConvGeometry, checked,
                 group_offset):
        self.ptr, self.align, self.g, self.checked = ptr, align, geometry, checked
        self.group_offset = group_offset

    def k_fastest(self) -> bool:
        """Whether consecutive threads load consecutive k: where K's innermost axis is
        the input channel and the input's channels are its contiguous dim (channels
        last), else consecutive output pixels (NCHW: a row of the image)."""
        g = self.g
        live = [a for a, e in zip(g.k_axes, g.k_extents) if e != 1]
        return bool(live) and live[-1] == "c" and g.in_channel_stride == 1 and g.k > 1

    def __call__(self, loop: TileLoop, n0, tile_cols: int, tile):
        b, g, t = loop.b, self.g, loop.t
        per_thread = tile_cols * BK // THREADS
        k_fastest = self.k_fastest()
        run = BK if k_fastest else tile_cols
        fast = b.urem(t, i64(run))
        slow = b.udiv(t, i64(run))
        n_guard = g.n % tile_cols != 0
        k_guard = g.k % BK != 0
        group_offset = self.group_offset()
        pixels: dict = {}

        def pixel(r):
            """Of column n0 + r: whether it is inside N, the offset of its image and
            group in the input (i64), and its first input row and column (i32)."""
            if id(r) not in pixels:
                n = b.add(n0, r)
                inside = None
                if n_guard:
                    inside = b.icmp_unsigned("<", n, i64(g.n))
                    n = b.select(inside, n, i64(g.n - 1))
                index = dict(zip(g.n_axes, digits(b, n, g.n_extents)))
                base = b.add(group_offset, b.mul(index["b"], i64(g.in_batch_stride)))
                starts = []
                for i, s in enumerate(g.spatial):
                    o = b.trunc(index[i], I32)
                    starts.append(b.sub(b.mul(o, i32(s.stride)), i32(s.pad_low)))
                pixels[id(r)] = (r, inside, base, starts)
            return pixels[id(r)]

        slots, narrow = [], {}
        for j in range(per_thread):
            step = b.add(slow, i64(j * THREADS // run)) if j else slow
            r, kk = (step, fast) if k_fastest else (fast, step)
            at = b.add(b.mul(kk, i64(tile_cols + PAD)), r)
            if id(kk) not in narrow:
                narrow[id(kk)] = b.trunc(kk, I32)
            slots.append((pixel(r), narrow[id(kk)], at))

        def position(k32):
            """The K position's (input channel, window row, window column), i32."""
            index = {"c": i32(0), 0: i32(0), 1: i32(0)}
            rest = k32
            live = [n for n, e in enumerate(g.k_extents) if e != 1]
            for n in reversed(live):
                axis = g.k_axes[n]
                index[axis] = rest if n == live[0] else b.urem(rest, i32(g.k_extents[n]))
                if n != live[0]:
                    rest = b.udiv(rest, i32(g.k_extents[n]))
            return index

        def load(k0):
            k0_32 = b.trunc(k0, I32)
            positions: dict = {}
            values = []
            for (_, n_in, base, starts), kk, at in slots:
                gk = b.add(k0_32, kk)
                ok = n_in
                if k_guard:
                    k_in = b.icmp_unsigned("<", gk, i32(g.k))
                    gk = b.select(k_in, gk, i32(g.k - 1))
                    ok = k_in if ok is None else b.and_(ok, k_in)
                # Threads loading consecutive k of one pixel share the position of k0 +
                # kk; pixels of one k (n-fastest) share it across j as well.
                if id(kk) not in positions:
                    positions[id(kk)] = position(gk)
                index = positions[id(kk)]
                offset = b.mul(index["c"], i32(g.in_channel_stride))
                for i, s in enumerate(g.spatial):
                    p = b.add(starts[i], b.mul(index[i], i32(s.dilation)))
                    p, ok = s.input_position(b, p, self.checked[i], ok)
                    offset = b.add(offset, b.mul(p, i32(s.in_stride)))
                # Inside, the offset is not negative; outside, element 0 is read (a
                # valid address) and the value dropped.
                where = b.add(base, b.zext(offset, I64))
                if ok is not None:
                    where = b.select(ok, where, i64(0))
                v = b.load(b.gep(self.ptr, [where], source_etype=F32_TY, inbounds=True),
                           typ=F32_TY, align=self.align)
                if ok is not None:
                    v = b.select(ok, v, ir.Constant(F32_TY, 0.0))
                values.append((at, v))
            for at, v in values:
                b.store(v, b.gep(tile, [at], source_etype=F32_TY, inbounds=True), align=4)
        return load


@dataclass(frozen=True)
class DirectPlan:
    """A convolution of groups too narrow for a GEMM (a depthwise one: one input and
    one output channel per group, or a channel multiplier of a few): one thread per
    output element, in the order of the output's layout (a warp's stores and its
    input loads along a row coalesce), its window and the group's channels unrolled:
    a product per tap of the input element (zero outside the input) and the kernel's
    (the same for every thread of a channel: one load served to the warp). The store
    applies an output fusion's epilogue, as the tiled kernels' do."""
    out: object                         # the result's Shape (its layout: the order)
    dn: object                          # ConvDimensionNumbers
    groups: int
    m: int                              # output channels per group
    cin: int                            # input channels per group
    spatial: tuple[_Spatial, ...]
    checked: tuple[bool, ...]
    in_batch_stride: int
    in_channel_stride: int
    kernel_strides: tuple[int, ...]     # output channel, input channel, row, column
    epilogue: object = field(default=None, compare=False)   # a StoreEpilogue

    @property
    def elements(self) -> int:
        return self.out.num_elements

    def emit(self, module: ir.Module, instr: Instruction, name: str, hooks, blob: WeightsBlob,
             out: PointerArg, operands: Sequence[PointerArg]):
        """``name(out, input, kernel, [epilogue operand...,] weights)``; returns it, the
        blocks and the threads per block of its (grid-stride) launch."""
        params = 2 + len(operands)
        fn, b = new_kernel(module, name, params, hooks, [out, *operands])
        out_align, x_align, w_align = (min(a.align, 4) for a in (out, *operands[:2]))
        apply = None if self.epilogue is None else \
            self.epilogue.bind(b, fn, blob, operands)
        dn, shape = self.dn, self.out
        ks = self.kernel_strides

        def element(i):
            # i is the element's offset in the result's layout (below 2^31).
            index: list = [None] * shape.rank
            rest = b.trunc(i, I32)
            for n, d in enumerate(shape.layout):
                last = n == len(shape.layout) - 1
                index[d] = rest if last else b.urem(rest, i32(shape.dims[d]))
                if not last:
                    rest = b.udiv(rest, i32(shape.dims[d]))
            oc = index[dn.output_feature]
            group = b.udiv(oc, i32(self.m)) if self.groups > 1 else i32(0)
            x_base = b.add(b.mul(index[dn.output_batch], i32(self.in_batch_stride)),
                           b.mul(group, i32(self.cin * self.in_channel_stride)))
            w_base = b.mul(oc, i32(ks[0]))
            starts = [b.sub(b.mul(index[dn.output_spatial[k]], i32(s.stride)), i32(s.pad_low))
                      for k, s in enumerate(self.spatial)]
            acc = ir.Constant(F32_TY, 0.0)
            for ci in range(self.cin):
                for ky in range(self.spatial[0].window):
                    for kx in range(self.spatial[1].window):
                        acc = self._tap(b, fn.args[1], fn.args[2], x_align, w_align, x_base,
                                        w_base, starts, (ci, ky, kx), acc)
            if apply is not None:
                acc = apply([b.zext(v, I64) for v in index], acc)
            b.store(acc, b.gep(fn.args[0], [i], source_etype=F32_TY, inbounds=True),
                    align=out_align)

        _grid_stride(b, hooks, self.elements, element)
        b.ret_void()
        hooks.finish(module, fn, params)
        blocks, threads = launch_size(self.elements)
        return fn, blocks, threads

    def _tap(self, b, x_ptr, w_ptr, x_align, w_align, x_base, w_base, starts, tap, acc):
        """``acc`` plus the product of window position ``tap`` (input channel, row,
        column of the group's window)."""
        ci, *window = tap
        ks = self.kernel_strides
        offset = b.add(x_base, i32(ci * self.in_channel_stride)) if ci else x_base
        ok = None
        for k, (s, w) in enumerate(zip(self.spatial, window)):
            p = b.add(starts[k], i32(w * s.dilation)) if w * s.dilation else starts[k]
            p, ok = s.input_position(b, p, self.checked[k], ok)
            offset = b.add(offset, b.mul(p, i32(s.in_stride)))
        where = b.zext(offset, I64)
        if ok is not None:
            where = b.select(ok, where, i64(0))
        x = b.load(b.gep(x_ptr, [where], source_etype=F32_TY, inbounds=True), typ=F32_TY,
                   align=x_align)
        if ok is not None:
            x = b.select(ok, x, ir.Constant(F32_TY, 0.0))
        w_off = b.add(w_base, i32(ci * ks[1] + window[0] * ks[2] + window[1] * ks[3]))
        w = b.load(b.gep(w_ptr, [b.zext(w_off, I64)], source_etype=F32_TY, inbounds=True),
                   typ=F32_TY, align=w_align)
        return call_intrinsic(b, "llvm.fmuladd", [x, w, acc])
