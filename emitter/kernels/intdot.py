"""Integer dot products per target: the inner step of the int8 kernels (qconv.py).

``dot4(acc, w, x)``: ``acc`` holds L i32 lanes, ``w`` 4L bytes of weights (lane j's four
at 4j..4j+3), ``x`` one i32 holding four bytes of activations; lane j gains
sum_t w[4j + t] * x[t], exactly (no step saturates). How, by target:

    vnni     x86 AVX512-VNNI / AVX-VNNI: vpdpbusd (u8 activations x s8 weights)
    avx2     x86 AVX2: vpmaddubsw(|x|, sign(w, x)) then vpmaddwd by ones: |x| <= 128 and
             |w| <= 127 keep every pair sum within 32767 (the kernel checks the weights)
    sdot     AArch64 with the dot product extension: sdot (s8 x s8)
    neon     AArch64 without it: smull (bytes to i16 products), sadalp (pairs into i32
             accumulators of pair sums), addp once per tile (``finish``)
    smlad    Arm M-profile DSP (Cortex-M4/M7/M33): sxtb16 unpacks bytes 0, 2 and
             (rotated) 1, 3 of each word into halfword pairs, smlad adds both products
    generic  anything else: widen, multiply, add the four products of a lane (LLVM
             selects what the target has: pmaddwd on x86 without AVX2, vwmacc with
             RISC-V V, scalar multiply-adds on RV32/RV64)

The instructions that take one operand unsigned or signed only (``activations``) read
the activations shifted by 128 (x ^ 0x80 per byte); the kernel adds 128 times the
weight sums back (``flip``). ``dot2`` is the depthwise kernel's step: pairs of i16.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..intrinsics import declare_intrinsic
from ..irutil import I8, I32
from .vec import const_vec, splat, vec_type

I16 = ir.IntType(16)

@dataclass(frozen=True)
class IntDot:
    kind: str               # vnni | avx2 | sdot | smlad | generic
    lanes: int              # i32 accumulators per vector
    activations: str        # the byte type the instruction reads activations as: u8 | s8 | any
    vnni_name: str = ""     # the vpdpbusd intrinsic of this width

    def flip(self, x_signed: bool) -> int:
        """+1: the kernel feeds x ^ 0x80 (x + 128 for s8 x), so it must subtract 128 * the
        weight sums; -1: x ^ 0x80 = x - 128 for u8 x, add them; 0: x as it is."""
        if self.activations == "u8" and x_signed:
            return 1
        if self.activations == "s8" and not x_signed:
            return -1
        return 0

    # -- the step --
    def dot4(self, b: ir.IRBuilder, acc: ir.Value, w: ir.Value, x: ir.Value,
             x_signed: bool) -> ir.Value:
        """acc + the four-product sums; ``x`` as the instruction reads it (see flip)."""
        return getattr(self, f"_dot4_{self.kind}")(b, acc, w, x, x_signed)

    def _words(self, b, x):
        """x (i32) in every lane, as 4L bytes."""
        return b.bitcast(splat(b, x, self.lanes), vec_type(I8, 4 * self.lanes))

    def _dot4_vnni(self, b, acc, w, x, x_signed):
        bytes_ty = vec_type(I8, 4 * self.lanes)
        fn = declare_intrinsic(b.module, self.vnni_name, acc.type, [acc.type, bytes_ty, bytes_ty])
        return b.call(fn, [acc, self._words(b, x), w])

    def _dot4_avx2(self, b, acc, w, x, x_signed):
        n = 4 * self.lanes
        bty, hty = vec_type(I8, n), vec_type(I16, n // 2)
        xs = self._words(b, x)
        absx = declare_intrinsic(b.module, "llvm.abs.v32i8", bty, [bty, ir.IntType(1)])
        sign = declare_intrinsic(b.module, "llvm.x86.avx2.psign.b", bty, [bty, bty])
        maddubs = declare_intrinsic(b.module, "llvm.x86.avx2.pmadd.ub.sw", hty, [bty, bty])
        maddwd = declare_intrinsic(b.module, "llvm.x86.avx2.pmadd.wd", acc.type, [hty, hty])
        pairs = b.call(maddubs, [b.call(absx, [xs, ir.Constant(ir.IntType(1), 0)]),
                                 b.call(sign, [w, xs])])
        return b.add(acc, b.call(maddwd, [pairs, const_vec(I16, [1] * (n // 2))]))

    def _dot4_sdot(self, b, acc, w, x, x_signed):
        bty = vec_type(I8, 16)
        fn = declare_intrinsic(b.module, "llvm.aarch64.neon.sdot.v4i32.v16i8", acc.type,
                               [acc.type, bty, bty])
        return b.call(fn, [acc, w, self._words(b, x)])

    def _dot4_smlad(self, b, acc, w, x, x_signed):
        # acc: scalar i32 (L = 1); bytes 0, 2 and 1, 3 as signed halfword pairs.
        w02, w13 = halfword_pairs(b, b.bitcast(w, I32))
        x02, x13 = halfword_pairs(b, x)
        return dsp_call(b, "smlad", w13, x13, dsp_call(b, "smlad", w02, x02, acc))

    def _dot4_neon(self, b, acc, w, x, x_signed):
        # acc: 2L lanes, the pair sums (k0 + k1, k2 + k3) of each output lane; smull
        # multiplies eight bytes into i16 (|x| <= 128, |w| <= 128 fit), sadalp adds
        # adjacent i16 pairs into the i32 accumulators. ``finish`` adds the pairs.
        n = 4 * self.lanes
        half = vec_type(I16, n // 2)
        xs = self._words(b, x)
        saddlp = declare_intrinsic(b.module, "llvm.aarch64.neon.saddlp.v4i32.v8i16",
                                   vec_type(I32, 4), [half])
        parts = []
        for lo in (0, n // 2):
            pick = const_vec(I32, range(lo, lo + n // 2))
            wv = b.sext(b.shuffle_vector(w, w, pick), half)
            xv = b.sext(b.shuffle_vector(xs, xs, pick), half)
            parts.append(b.call(saddlp, [b.mul(wv, xv)]))
        both = b.shuffle_vector(parts[0], parts[1], const_vec(I32, range(8)))
        return b.add(acc, both)

    def _dot4_generic(self, b, acc, w, x, x_signed):
        if self.lanes == 1:
            return self._dot4_scalar(b, acc, w, x, x_signed)
        n = 4 * self.lanes
        wide = vec_type(I32, n)
        xs = self._words(b, x)
        xs = b.sext(xs, wide) if x_signed else b.zext(xs, wide)
        prod = b.mul(b.sext(w, wide), xs)
        # lane j: the four products 4j..4j+3, summed as two pairs then the pair sums
        for width in (n // 2, n // 4):
            even = b.shuffle_vector(prod, prod, const_vec(I32, range(0, 2 * width, 2)))
            odd = b.shuffle_vector(prod, prod, const_vec(I32, range(1, 2 * width, 2)))
            prod = b.add(even, odd)
        return b.add(acc, prod)

    def _dot4_scalar(self, b, acc, w, x, x_signed):
        # One multiply-add per byte into the accumulator (mla on Arm, mul + add on RV32),
        # a chain: a sum tree of the four products needs three more registers per
        # accumulator, which a tile of them spills on a 13-register core (Cortex-M3).
        extend = b.sext if x_signed else b.zext
        for t in range(4):
            xt = extend(b.trunc(b.lshr(x, ir.Constant(I32, 8 * t)), I8), I32)
            wt = b.sext(b.extract_element(w, ir.Constant(I32, t)), I32)
            acc = b.add(acc, b.mul(wt, xt))
        return acc

    @property
    def acc_lanes(self) -> int:
        """i32 lanes of one accumulator: the output lanes, or for neon their pair sums."""
        return 2 * self.lanes if self.kind == "neon" else self.lanes

    def finish(self, b: ir.IRBuilder, acc: ir.Value) -> ir.Value:
        """The accumulator as L output lanes."""
        if self.kind != "neon":
            return acc
        q = vec_type(I32, 4)
        addp = declare_intrinsic(b.module, "llvm.aarch64.neon.addp.v4i32", q, [q, q])
        lo = b.shuffle_vector(acc, acc, const_vec(I32, range(4)))
        hi = b.shuffle_vector(acc, acc, const_vec(I32, range(4, 8)))
        return b.call(addp, [lo, hi])

    # -- depthwise --
    def dot2(self, b: ir.IRBuilder, acc: ir.Value, x0: ir.Value, x1: ir.Value,
             w01: ir.Value) -> ir.Value:
        """acc (L x i32) + x0 * w0 + x1 * w1 per lane: ``x0``, ``x1`` L x i16 (widened
        activations of two taps), ``w01`` 2L x i16 (lane j's two weights at 2j, 2j+1)."""
        n = self.lanes
        if n == 1:
            # one channel: the halfword pair (x0, x1) against (w0, w1)
            xpair = b.or_(b.zext(x0, I32), b.shl(b.zext(x1, I32), ir.Constant(I32, 16)))
            wpair = b.bitcast(w01, I32)
            if self.kind == "smlad":
                return dsp_call(b, "smlad", wpair, xpair, acc)
            w0 = b.extract_element(w01, ir.Constant(I32, 0))
            w1 = b.extract_element(w01, ir.Constant(I32, 1))
            return b.add(acc, b.add(b.mul(b.sext(x0, I32), b.sext(w0, I32)),
                                    b.mul(b.sext(x1, I32), b.sext(w1, I32))))
        pairs = b.shuffle_vector(x0, x1, const_vec(I32, [k for j in range(n)
                                                         for k in (j, j + n)]))
        if self.kind in ("vnni", "avx2") and n in (8, 16):
            name = "llvm.x86.avx2.pmadd.wd" if n == 8 else "llvm.x86.avx512.pmaddw.d.512"
            fn = declare_intrinsic(b.module, name, acc.type, [pairs.type, pairs.type])
            return b.add(acc, b.call(fn, [pairs, w01]))
        wide = vec_type(I32, 2 * n)
        prod = b.mul(b.sext(pairs, wide), b.sext(w01, wide))
        even = b.shuffle_vector(prod, prod, const_vec(I32, range(0, 2 * n, 2)))
        odd = b.shuffle_vector(prod, prod, const_vec(I32, range(1, 2 * n, 2)))
        return b.add(acc, b.add(even, odd))


def halfword_pairs(b: ir.IRBuilder, word: ir.Value, signed: bool = True):
    """The M-profile DSP's unpacking of a word of four bytes: bytes 0, 2 and bytes 1, 3
    as halfword pairs (sxtb16, the second through a rotate that it folds in; uxtb16 for
    unsigned bytes)."""
    unpack = declare_intrinsic(b.module, "llvm.arm.sxtb16" if signed else "llvm.arm.uxtb16",
                               I32, [I32])
    ror = declare_intrinsic(b.module, "llvm.fshr.i32", I32, [I32, I32, I32])
    return (b.call(unpack, [word]),
            b.call(unpack, [b.call(ror, [word, word, ir.Constant(I32, 8)])]))


def dsp_call(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, acc: ir.Value) -> ir.Value:
    """An M-profile DSP multiply-accumulate of halfwords: ``op`` smlad (both pairs),
    smlabb (the bottom halves), smlatt (the top ones)."""
    return b.call(declare_intrinsic(b.module, f"llvm.arm.{op}", I32, [I32, I32, I32]),
                  [x, y, acc])


def int_dot_for(target) -> IntDot:
    """The dot-product step for ``target`` (a TargetInfo): from the instruction-set
    features its code may use (``required``: the CPU's own and those given)."""
    arch = target.triple.split("-", 1)[0]
    on = {f[1:] for f in target.required if f.startswith("+")}
    if arch in ("x86_64", "i386", "i686"):
        if target.vector_bytes >= 64 and {"avx512vnni", "avx512bw"} <= on:
            return IntDot("vnni", 16, "u8", "llvm.x86.avx512.vpdpbusd.512")
        if "avxvnni" in on:
            return IntDot("vnni", 8, "u8", "llvm.x86.avx512.vpdpbusd.256")   # VEX-encoded
        if {"avx512vnni", "avx512vl"} <= on:
            return IntDot("vnni", 8, "u8", "llvm.x86.avx512.vpdpbusd.256")
        if "avx2" in on:
            return IntDot("avx2", 8, "s8")
    if arch in ("aarch64", "arm64"):
        return IntDot("sdot", 4, "s8") if "dotprod" in on else IntDot("neon", 4, "s8")
    if arch.startswith("thumb") and "dsp" in on:
        return IntDot("smlad", 1, "s8")
    return IntDot("generic", max(1, target.vector_bytes // 4), "any")
