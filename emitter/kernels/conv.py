"""Convolution kernels.

Fast paths, f32 with ONNX's layout (input/output N C spatial..., kernel O I spatial...),
batch_group_count 1 and no base (lhs) dilation; any stride, padding, window dilation,
feature groups and number of spatial dims:

- implicit GEMM, per image and group: ``out (Cout_g x P) = W (Cout_g x Cin_g*R) *
  im2col(in) (Cin_g*R x P)`` where P is the number of output pixels and R the window
  size. The OIHW weights already are the row-major A matrix; the im2col matrix is never
  built: gemm.py packs one KC x NR sliver of it at a time (``Im2colPacker``), reading
  NR output pixels per window position with vector loads, masked where the window
  leaves the image (zero padding). 1x1 / stride 1 / no padding is a plain GEMM over
  the input (``MatrixPacker``).
- depthwise (one input channel per group, few outputs per group): direct convolution
  vectorized over output pixels, the R weights of a channel broadcast once.

Everything else (other dimension numbers, base dilation, batch groups, other element
types) goes through ``emit_naive_conv``, a loop nest over output elements.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import product
from math import prod

from llvmlite import ir

from ...hlo import ConvDimensionNumbers, Instruction, dtypes
from ..irutil import I32, alloca_once, for_range, i64, llvm_type
from . import scalar
from .dot import row_major_strides
from .function import kernel_function
from .gemm import GemmShape, MatrixPacker, Tiling, emit_gemm, scratch_floats, tiling_for
from .vec import (F32, const_vec, fma, lane_mask, load_vec, masked_gather, masked_load,
                  masked_store, offset_ptr, splat, store_vec, vec_type, zeros)


@dataclass(frozen=True)
class Geometry:
    """A convolution in ONNX layout: N C spatial... / O I spatial..."""
    batch: int
    cin: int
    cout: int
    groups: int
    in_sp: tuple[int, ...]
    out_sp: tuple[int, ...]
    size: tuple[int, ...]
    stride: tuple[int, ...]
    pad: tuple[int, ...]        # low padding (high padding is implied by the output size)
    dil: tuple[int, ...]

    @staticmethod
    def of(instr: Instruction) -> "Geometry":
        x, k = (o.shape for o in instr.operands)
        w = instr.attrs["window"]
        return Geometry(x.dims[0], x.dims[1], k.dims[0], instr.attrs["feature_group_count"],
                        x.dims[2:], instr.shape.dims[2:], w.size, w.stride, w.pad_low,
                        w.rhs_dilation)

    @property
    def cin_g(self) -> int:
        return self.cin // self.groups

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups

    @property
    def in_pixels(self) -> int:
        return prod(self.in_sp)

    @property
    def out_pixels(self) -> int:
        return prod(self.out_sp)

    @property
    def window(self) -> int:
        return prod(self.size)

    @cached_property
    def positions(self) -> list[tuple[int, ...]]:
        """Window positions in the kernel's row-major order (the K order of the GEMM)."""
        return list(product(*(range(s) for s in self.size)))

    @cached_property
    def in_strides(self) -> list[int]:
        return row_major_strides(self.in_sp)

    @cached_property
    def contiguous(self) -> bool:
        """Consecutive output pixels read consecutive input elements for every window
        position (stride 1 and an output as wide as the input in all but the outer dim)."""
        out_strides = row_major_strides(self.out_sp)
        return all(s * si == so for s, si, so in zip(self.stride, self.in_strides, out_strides))

    @property
    def is_pointwise(self) -> bool:
        return all(v == 1 for v in self.size + self.stride) and not any(self.pad) \
            and self.in_sp == self.out_sp


class WindowLanes:
    """``lanes`` consecutive output pixels from ``n0`` (``valid`` of them real): their
    coordinates are computed once, then ``load`` reads the input under any window position."""

    def __init__(self, b: ir.IRBuilder, g: Geometry, n0: ir.Value, lanes: int, valid: int):
        self.g, self.n0, self.lanes = g, n0, lanes
        ivec = vec_type(I32, lanes)
        rem = b.add(splat(b, b.trunc(n0, I32), lanes), const_vec(I32, range(lanes)))
        self.pos = [None] * len(g.out_sp)      # o_i * stride_i - pad_i, per lane
        for i in reversed(range(len(g.out_sp))):
            extent = ir.Constant(ivec, [ir.Constant(I32, g.out_sp[i])] * lanes)
            coord = b.urem(rem, extent) if i else rem
            rem = b.udiv(rem, extent)
            self.pos[i] = b.sub(b.mul(coord, _ivec(g.stride[i], lanes)), _ivec(g.pad[i], lanes))
        self.valid = lane_mask(lanes, valid) if valid < lanes else None
        self.offsets = None
        if not g.contiguous:
            off = _ivec(0, lanes)
            for p, s in zip(self.pos, g.in_strides):
                off = b.add(off, b.mul(p, _ivec(s, lanes)))
            self.offsets = off

    def load(self, b: ir.IRBuilder, chan: ir.Value, kpos: tuple[int, ...]) -> ir.Value:
        """in[pixel * stride + kpos * dil - pad] for each lane, 0 outside the image."""
        g, lanes = self.g, self.lanes
        mask = self.valid
        for i, k in enumerate(kpos):
            shift = k * g.dil[i]
            lowest = shift - g.pad[i]
            highest = (g.out_sp[i] - 1) * g.stride[i] + lowest
            if lowest >= 0 and highest < g.in_sp[i]:
                continue                    # this window position never leaves the image
            inside = b.icmp_unsigned("<", b.add(self.pos[i], _ivec(shift, lanes)),
                                     _ivec(g.in_sp[i], lanes))
            mask = inside if mask is None else b.and_(mask, inside)
        vty = vec_type(F32, lanes)
        shift = sum(k * d * s for k, d, s in zip(kpos, g.dil, g.in_strides))
        if self.offsets is None:
            # Contiguous: lane j reads element n0 + j + shift - sum(pad_i * stride_i).
            start = shift - sum(p * s for p, s in zip(g.pad, g.in_strides))
            ptr = offset_ptr(b, chan, F32, b.add(self.n0, i64(start)))
            return load_vec(b, ptr, vty) if mask is None else masked_load(b, ptr, vty, mask)
        all_lanes = lane_mask(lanes, lanes)
        return masked_gather(b, chan, F32, b.add(self.offsets, _ivec(shift, lanes)),
                             all_lanes if mask is None else mask)


def _ivec(v: int, lanes: int) -> ir.Constant:
    return const_vec(I32, [v] * lanes)


@dataclass(frozen=True)
class Im2colPacker:
    """Packs a sliver of the implicit im2col matrix of one image and group.

    Row ``c * R + r`` is input channel c under window position r, column n is output
    pixel n. K blocks hold whole channels so the window loop is unrolled at compile time.
    """
    g: Geometry
    base: ir.Value          # channel 0 of the group in this image
    tiling: Tiling
    k_block: int

    def pack(self, b, dst, k0, kc, n0, valid):
        t, g = self.tiling, self.g
        rows = [WindowLanes(b, g, b.add(n0, i64(v * t.lanes)), t.lanes,
                            max(0, min(t.lanes, valid - v * t.lanes))) for v in range(t.nv)]
        c0 = b.udiv(k0, i64(g.window))
        with for_range(b, b.udiv(kc, i64(g.window)), "pc") as c:
            chan = offset_ptr(b, self.base, F32, b.mul(b.add(c0, c), i64(g.in_pixels)))
            row0 = b.mul(c, i64(g.window * t.nr))
            for r, kpos in enumerate(g.positions):
                for v, lanes in enumerate(rows):
                    val = (zeros(vec_type(F32, t.lanes)) if v * t.lanes >= valid
                           else lanes.load(b, chan, kpos))
                    dst_idx = b.add(row0, i64(r * t.nr + v * t.lanes))
                    store_vec(b, val, offset_ptr(b, dst, F32, dst_idx))


# --- path selection -------------------------------------------------------------------

def _path(instr: Instruction, t: Tiling) -> str:
    dn = instr.attrs["dimension_numbers"]
    w = instr.attrs["window"]
    fast = (instr.shape.dtype == dtypes.F32 and instr.attrs.get("batch_group_count", 1) == 1
            and dn == ConvDimensionNumbers.nchw(w.rank) and all(d == 1 for d in w.lhs_dilation)
            and instr.shape.num_elements > 0)
    if not fast:
        return "naive"
    g = Geometry.of(instr)
    if g.cin_g == 1 and g.cout_g < t.mr:
        return "depthwise"
    return "gemm"


def _k_block(g: Geometry, t: Tiling) -> int:
    if g.is_pointwise:
        return t.kc
    return max(1, t.kc // g.window) * g.window


def conv_scratch_bytes(instr: Instruction, target) -> int:
    t = tiling_for(target)
    if _path(instr, t) != "gemm":
        return 0
    return scratch_floats(t, _k_block(Geometry.of(instr), t)) * 4


def emit_conv(module: ir.Module, instr: Instruction, name: str, target) -> ir.Function:
    t = tiling_for(target)
    path = _path(instr, t)
    fn, b = kernel_function(module, name, with_scratch=path == "gemm")
    out, x, k = fn.args[:3]
    if path == "gemm":
        _emit_implicit_gemm(b, Geometry.of(instr), t, out, x, k, fn.args[3])
    elif path == "depthwise":
        _emit_depthwise(b, Geometry.of(instr), t, out, x, k)
    else:
        emit_naive_conv(b, instr, out, x, k)
    b.ret_void()
    return fn


def _emit_implicit_gemm(b, g: Geometry, t: Tiling, out, x, k, scratch):
    kg = g.cin_g * g.window
    shape = GemmShape(g.cout_g, g.out_pixels, kg, a_sm=kg, a_sk=1, c_sm=g.out_pixels)
    with for_range(b, g.batch, "img") as img:
        with for_range(b, g.groups, "grp") as grp:
            chan0 = b.add(b.mul(img, i64(g.cin)), b.mul(grp, i64(g.cin_g)))
            base = offset_ptr(b, x, F32, b.mul(chan0, i64(g.in_pixels)))
            a = offset_ptr(b, k, F32, b.mul(grp, i64(g.cout_g * kg)))
            ochan0 = b.add(b.mul(img, i64(g.cout)), b.mul(grp, i64(g.cout_g)))
            c = offset_ptr(b, out, F32, b.mul(ochan0, i64(g.out_pixels)))
            if g.is_pointwise:
                packer = MatrixPacker(base, g.in_pixels, 1, t, _k_block(g, t))
            else:
                packer = Im2colPacker(g, base, t, _k_block(g, t))
            emit_gemm(b, shape, a, c, packer, scratch, t)


def _emit_depthwise(b, g: Geometry, t: Tiling, out, x, k):
    vty = vec_type(F32, t.lanes)
    p = g.out_pixels
    with for_range(b, g.batch, "img") as img:
        with for_range(b, g.cout, "oc") as oc:
            ic = b.add(b.mul(img, i64(g.cin)), b.udiv(oc, i64(g.cout_g)))
            chan = offset_ptr(b, x, F32, b.mul(ic, i64(g.in_pixels)))
            dst = offset_ptr(b, out, F32, b.mul(b.add(b.mul(img, i64(g.cout)), oc), i64(p)))
            wrow = offset_ptr(b, k, F32, b.mul(oc, i64(g.window)))
            ws = [splat(b, b.load(offset_ptr(b, wrow, F32, r), typ=F32), t.lanes)
                  for r in range(g.window)]

            def pixels(n0, valid):
                lanes = WindowLanes(b, g, n0, t.lanes, valid)
                acc = zeros(vty)
                for r, kpos in enumerate(g.positions):
                    acc = fma(b, ws[r], lanes.load(b, chan, kpos), acc)
                ptr = offset_ptr(b, dst, F32, n0)
                if valid == t.lanes:
                    store_vec(b, acc, ptr)
                else:
                    masked_store(b, acc, ptr, lane_mask(t.lanes, valid))

            full = p - p % t.lanes
            with for_range(b, full, "px", step=t.lanes) as n0:
                pixels(n0, t.lanes)
            if p % t.lanes:
                pixels(i64(full), p % t.lanes)


# --- reference loop nest ----------------------------------------------------------------

def emit_naive_conv(b: ir.IRBuilder, instr: Instruction, out, x, k) -> None:
    """Any dimension numbers, window, feature / batch groups and element type (XLA's
    semantics: output feature f uses feature group f // (Cout/fg) and batch group
    f // (Cout/bg); batch group j reads input images j*(N/bg) ...)."""
    xs, ks = (o.shape for o in instr.operands)
    os_ = instr.shape
    dn, w = instr.attrs["dimension_numbers"], instr.attrs["window"]
    fg, bg = instr.attrs.get("feature_group_count", 1), instr.attrs.get("batch_group_count", 1)
    dtype = os_.dtype
    ety, aty = llvm_type(dtype), scalar.acc_type(dtype)
    sx, sk = row_major_strides(xs.dims), row_major_strides(ks.dims)
    cout, cin_g, nsp = os_.dims[dn.output_feature], ks.dims[dn.kernel_input], w.rank
    acc = alloca_once(b, aty, "acc")
    with for_range(b, os_.num_elements, "o") as flat:
        coord, rem = [None] * os_.rank, flat
        for d in reversed(range(os_.rank)):
            coord[d] = b.urem(rem, i64(os_.dims[d]))
            rem = b.udiv(rem, i64(os_.dims[d]))
        of = coord[dn.output_feature]
        fgrp = b.udiv(of, i64(cout // fg))
        bgrp = b.udiv(of, i64(cout // bg))
        image = b.add(b.mul(bgrp, i64(os_.dims[dn.output_batch])), coord[dn.output_batch])
        x_base = b.add(b.mul(image, i64(sx[dn.input_batch])),
                       b.mul(fgrp, i64(cin_g * sx[dn.input_feature])))
        k_base = b.mul(of, i64(sk[dn.kernel_output]))
        b.store(scalar.zero(dtype), acc)
        with for_range(b, cin_g, "ci") as ci:
            xo = b.add(x_base, b.mul(ci, i64(sx[dn.input_feature])))
            ko = b.add(k_base, b.mul(ci, i64(sk[dn.kernel_input])))
            _window(b, instr, 0, [coord[dn.output_spatial[i]] for i in range(nsp)], xo, ko,
                    ir.Constant(ir.IntType(1), 1), x, k, acc, sx, sk, ety, aty)
        b.store(scalar.narrow(b, b.load(acc, typ=aty), dtype),
                b.gep(out, [flat], source_etype=ety, inbounds=True))


def _window(b, instr, i, out_pos, xo, ko, inside, x, k, acc, sx, sk, ety, aty):
    """Loop over window dim i; at the innermost level accumulate when all dims are inside."""
    dn, w = instr.attrs["dimension_numbers"], instr.attrs["window"]
    dtype = instr.shape.dtype
    if i == w.rank:
        with b.if_then(inside):
            xv = b.load(b.gep(x, [xo], source_etype=ety, inbounds=True), typ=ety)
            kv = b.load(b.gep(k, [ko], source_etype=ety, inbounds=True), typ=ety)
            b.store(scalar.mul_add(b, b.load(acc, typ=aty), xv, kv, dtype), acc)
        return
    extent = instr.operands[0].shape.dims[dn.input_spatial[i]]
    dilated = (extent - 1) * w.lhs_dilation[i] + 1
    with for_range(b, w.size[i], f"w{i}") as kk:
        # position in the (base-dilated, padded) input
        pos = b.sub(b.add(b.mul(out_pos[i], i64(w.stride[i])), b.mul(kk, i64(w.rhs_dilation[i]))),
                    i64(w.pad_low[i]))
        ok = b.and_(b.icmp_signed(">=", pos, i64(0)), b.icmp_signed("<", pos, i64(dilated)))
        if w.lhs_dilation[i] > 1:
            ok = b.and_(ok, b.icmp_signed("==", b.srem(pos, i64(w.lhs_dilation[i])), i64(0)))
            pos = b.sdiv(pos, i64(w.lhs_dilation[i]))
        _window(b, instr, i + 1, out_pos, b.add(xo, b.mul(pos, i64(sx[dn.input_spatial[i]]))),
                b.add(ko, b.mul(kk, i64(sk[dn.kernel_spatial[i]]))), b.and_(inside, ok),
                x, k, acc, sx, sk, ety, aty)
