"""The reference loop nest (``NaiveConv``): any dimension numbers, base dilation, batch
groups and element type, compiled for the exact shapes."""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ....hlo import ConvDimensionNumbers, Shape, Window
from ...irutil import alloca_once, for_range, i64, llvm_type
from .. import scalar
from ..dot import row_major_strides
from ..function import Frame


@dataclass(frozen=True)
class NaiveConv:
    """Any dimension numbers, groups and element type, compiled for these exact shapes."""
    x: Shape
    k: Shape
    out: Shape
    dn: ConvDimensionNumbers
    window: Window
    feature_groups: int
    batch_groups: int

    params = ()
    scratch_bytes = 0
    extra_operands = 0
    constant_operands = ()

    def emit(self, f: Frame) -> None:
        emit_naive_conv(f.b, self, f.out, f.lhs, f.rhs)


def emit_naive_conv(b: ir.IRBuilder, spec: NaiveConv, out, x, k) -> None:
    """Any dimension numbers, window, feature / batch groups and element type (XLA's
    semantics: output feature f uses feature group f // (Cout/fg) and batch group
    f // (Cout/bg); batch group j reads input images j*(N/bg) ...)."""
    xs, ks, os_ = spec.x, spec.k, spec.out
    dn, w = spec.dn, spec.window
    fg, bg = spec.feature_groups, spec.batch_groups
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
            _window(b, spec, 0, [coord[dn.output_spatial[i]] for i in range(nsp)], xo, ko,
                    ir.Constant(ir.IntType(1), 1), x, k, acc, sx, sk, aty)
        b.store(scalar.narrow(b, b.load(acc, typ=aty), dtype),
                b.gep(out, [flat], source_etype=ety, inbounds=True))


def _window(b, spec: NaiveConv, i, out_pos, xo, ko, inside, x, k, acc, sx, sk, aty):
    """Loop over window dim i; at the innermost level accumulate when all dims are inside."""
    dn, w = spec.dn, spec.window
    dtype = spec.out.dtype
    if i == w.rank:
        with b.if_then(inside):
            xt, kt = spec.x.dtype, spec.k.dtype
            xty, kty = llvm_type(xt), llvm_type(kt)
            xv = b.load(b.gep(x, [xo], source_etype=xty, inbounds=True), typ=xty)
            kv = b.load(b.gep(k, [ko], source_etype=kty, inbounds=True), typ=kty)
            b.store(scalar.mul_add(b, b.load(acc, typ=aty), xv, kv, dtype, xt, kt), acc)
        return
    extent = spec.x.dims[dn.input_spatial[i]]
    dilated = (extent - 1) * w.lhs_dilation[i] + 1
    with for_range(b, w.size[i], f"w{i}") as kk:
        # position in the (base-dilated, padded) input
        pos = b.sub(b.add(b.mul(out_pos[i], i64(w.stride[i])), b.mul(kk, i64(w.rhs_dilation[i]))),
                    i64(w.pad_low[i]))
        ok = b.and_(b.icmp_signed(">=", pos, i64(0)), b.icmp_signed("<", pos, i64(dilated)))
        if w.lhs_dilation[i] > 1:
            ok = b.and_(ok, b.icmp_signed("==", b.srem(pos, i64(w.lhs_dilation[i])), i64(0)))
            pos = b.sdiv(pos, i64(w.lhs_dilation[i]))
        _window(b, spec, i + 1, out_pos, b.add(xo, b.mul(pos, i64(sx[dn.input_spatial[i]]))),
                b.add(ko, b.mul(kk, i64(sk[dn.kernel_spatial[i]]))), b.and_(inside, ok),
                x, k, acc, sx, sk, aty)

