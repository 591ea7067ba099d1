"""Quantized arithmetic: quantized models computed on their integers.

The importer states ONNX's quantization ops in the form of their definitions
(importers/onnx/quantization.py), here written dq and q:

    dq(x) = multiply(subtract(f32(x), B(zx)), B(sx))            (no subtract: zx = 0)
    q(y)  = T(clamp(lo, add(round-nearest-even(divide(y, B(sy))), B(zy)), hi))

with B a broadcast of a constant scalar or of one value per element of one dim (per
channel), and QLinearConv, ConvInteger, MatMulInteger... as a dot or convolution of
``s32(x) - B(zx)`` operands accumulated in s32. A QDQ model (what
onnxruntime.quantization writes) computes in float between a dq and a q. Rules, each
exact or onnxruntime's own arithmetic:

1. ``q(act(conv(dq(x), dq(w)) + B(bias)))``, act ReLU, Clip or none, w constant (per
   tensor or per output channel), x per tensor => onnxruntime's QLinearConv:
   ``T(clamp(lo', round(f32(conv_s32(s32(x) - zx, s32(w) - zw) + B(bq)) * B(m)) + zy,
   hi'))`` with m = f32(f32(sx * sw) / sy) per channel, bq the integer bias where the
   bias is one (bias = bq * sx * sw, as quantize_static writes it; otherwise the f32
   bias is added to f32(acc) * sx * sw before dividing by sy), and the activation folded
   into the bounds: q is monotonic, so q(max(y, 0)) = max(q(y), zy) and
   q(clamp(a, y, b)) = clamp(q(a), q(y), q(b)). Likewise for a dot with constant
   weights per tensor or per output column (Gemm, MatMul).
2. ``conv_s32(s32(x) - B(zx), W)``, x 8-bit, W a constant s32 expression whose values
   fit 16 bits, zx a constant (or, but for padded convolutions, a scalar computed at run
   time: DynamicQuantizeLinear's) => ``conv(pad(x, zx), W') - B(zx * sum(W'))``: x is read
   in its own type and W' (s8 where the values fit) replaces W; padding with the zero
   point is padding with zero in x - zx, and sum_k (x_k - zx) W_k = sum_k x_k W_k -
   zx sum_k W_k. Likewise for dots (the sum over W's contracting dims).
3. ``q(f(dq(x)))`` with q's and dq's scale and zero point equal, f a data movement
   (reshape, transpose, slice, broadcast, reverse, copy, concatenation of such dqs, pad
   with p => pad with q(p)) or a max-pool / max-reduction (to_apply maximum, init
   q(init)) => ``f(x)`` on the integers: q(dq(x)) = x (|x - zx| < 2**16, so the f32
   round trip is within half a step) and q commutes with f (q is element-wise and,
   with sx > 0, monotonic). ``q(dq(x))`` alone => x.

4. ``q(softmax(dq(x)))`` over dims R (the importer's exp(x - max) / sum, x 8-bit, per
   tensor, q to x's type at its full range) => onnxruntime's QLinearSoftmax, into which
   its QDQ transformer turns DQ -> Softmax -> Q: a table of 256 exps, summed in f32,
   ``t = E[s32(x) - s32(max_R x) + 255]`` with E[i] = f32(exp((i - 255 + k) * sx)),
   k = max(0, log(FLT_MAX / |R|) - 5) / sx (exp's values kept large yet their sum
   finite), then ``T(clamp(s32(round(t * floor(1 / sy) / sum_R t)) + zy))`` saturated to
   T's range: 1 / sy floors (254 for the usual 1/255, so the largest probability is
   zy + 254).

5. ``q(mean_R(dq(x)))``, mean a sum over whole dims R (a reduce, or a reduce-window whose
   window spans them) divided by their count n, x 8-bit, per tensor, q to an 8-bit type
   at its full range => onnxruntime's QLinearGlobalAveragePool (MLAS), into which it
   turns a QDQ GlobalAveragePool, and an AveragePool whose window is the whole image:
   ``T(clamp(round(f32(sum_R s32(x) - zx * n) * m) + zy))``, m = f32(sx / f32(sy * n)):
   the sum is exact, one f32 multiply rounds.

6. ``q(act(dq(a) + dq(b)))``, a and b 8-bit per tensor, act ReLU or none (a residual
   connection; onnxruntime's QLinearAdd) => ``T(clamp(lo, round(A * ma + B * mb) + zy,
   hi))`` with A = f32(a) - za, ma = f32(sa / sy) (likewise B, mb): no divide per
   element. Taken only where it gives the float model's result for every one of the
   65,536 pairs (a, b), tried at compile time; else the division stays.

7. ``q(x)``, x a model input (any float: its first QuantizeLinear) => the same division,
   then round, zero point and clamp in integers without a bound: the bits of
   ``x / s + 1.5 * 2**23``, taken as 0 where negative (the sum is then at most 0, so
   x / s is below the clamp), less those of 1.5 * 2**23, plus the zero point, clamped;
   a NaN gives 0 as the float tail's conversion does. One float compare per element
   instead of the rounding and the clamp's compare chains.

Rules 1, 5 and 6 round in integers where |round's operand| < 2**22 is known from the
integers it is made of (``_requantized``): exact, and no float compare per element.

Rule 1 makes rule 2's input; all run in one walk, before constant folding could fold
dq(w) into f32 weights. DCE removes the float instructions left unused.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hlo import Computation, Instruction, Module, Opcode, Shape, dtypes, scalar_computation
from ..hlo.attributes import PaddingConfig, Window
from ..hlo.evaluator import evaluate_instruction
from ..hlo.qlinear import qlinear_softmax
from ..hlo.shape_inference import infer_shape
from .rewrite import apply_replacements

# Values evaluated at compile time to read scales, zero points and bounds: small.
_PARAM_LIMIT = 1 << 16
_PASSTHROUGH = frozenset({Opcode.RESHAPE, Opcode.BITCAST, Opcode.TRANSPOSE, Opcode.SLICE,
                          Opcode.BROADCAST, Opcode.REVERSE, Opcode.COPY, Opcode.CONCATENATE,
                          Opcode.PAD, Opcode.REDUCE_WINDOW, Opcode.REDUCE})


class QuantizedArithmetic:
    """``soft_float``: the target has no FPU (the backend's ``soft_float``), so rule 1
    requantizes in fixed point where that is exact (``fixed_point_multipliers``)."""
    name = "quantized-arithmetic"

    def __init__(self, soft_float: bool = False):
        self.soft_float = soft_float

    def run(self, module: Module) -> bool:
        # every computation: a recurrent network's products are in its loop's body
        changed = [_Rewriter(module, comp, self.soft_float).run()
                   for comp in list(module.computations)]
        return any(changed)


# --- reading the importer's forms ------------------------------------------------------

def known_value(instr: Instruction, limit: int | None = _PARAM_LIMIT,
                memo: dict | None = None) -> np.ndarray | None:
    """The value of ``instr`` if it depends on constants alone (and, with ``limit``, no
    value on the way has more elements), else None."""
    memo = {} if memo is None else memo
    if id(instr) in memo:
        return memo[id(instr)]
    value = None
    if instr.opcode is Opcode.CONSTANT:
        value = instr.literal
    elif (instr.opcode not in (Opcode.PARAMETER, Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT)
          and not instr.shape.is_tuple
          and (limit is None or instr.shape.num_elements <= limit)):
        ops = [known_value(o, limit, memo) for o in instr.operands]
        if all(o is not None for o in ops):
            value = np.asarray(evaluate_instruction(instr, ops))
    memo[id(instr)] = value
    return value


@dataclass(frozen=True)
class Param:
    """A scale or zero point as broadcast: one value (``axis`` None) or one per element
    of dim ``axis`` of the value it is broadcast to."""
    values: np.ndarray      # 0-D, or 1-D along ``axis``
    axis: int | None

    def along(self, n: int) -> np.ndarray:
        """One value per element of the axis (n of them)."""
        return np.broadcast_to(self.values, (n,)) if self.axis is None else self.values

    def scalar(self):
        return None if self.axis is not None else self.values[()]


def _converted(values: np.ndarray, src: dtypes.DType, dst: dtypes.DType) -> np.ndarray:
    """HLO's convert of ``values`` (through the evaluator, so exactly the op's rounding)."""
    shape = Shape.array(src, values.shape)
    convert = Instruction(Opcode.CONVERT, shape.with_dtype(dst),
                          [Instruction(Opcode.PARAMETER, shape, attrs={"number": 0})])
    return np.asarray(evaluate_instruction(convert, [values.astype(src.np)]))


def _param(v: Instruction) -> Param | None:
    """``v`` as B(constant): through converts of the broadcast value."""
    if v.opcode is Opcode.CONVERT:
        inner = _param(v.operands[0])
        if inner is None:
            return None
        return Param(_converted(inner.values, v.operands[0].shape.dtype, v.shape.dtype),
                     inner.axis)
    if v.opcode is Opcode.BROADCAST:
        o = v.operands[0]
        value = known_value(o)
        if value is None:
            return None
        if o.shape.num_elements == 1:
            return Param(value.reshape(()), None)
        wide = [i for i, n in enumerate(o.shape.dims) if n != 1]
        if len(wide) == 1:
            return Param(value.reshape(-1), v.attrs["dimensions"][wide[0]])
        return None
    if v.opcode is Opcode.CONSTANT and v.literal.size and (v.literal == v.literal.flat[0]).all():
        return Param(v.literal.reshape(-1)[:1].reshape(()), None)
    return None


@dataclass(frozen=True)
class Dequantized:
    """``dq(q)``: (f32(q) - zero_point) * scale."""
    q: Instruction
    scale: Param
    zero_point: Param | None


def dequantized(v: Instruction) -> Dequantized | None:
    if v.opcode is not Opcode.MULTIPLY or v.shape.dtype != dtypes.F32:
        return None
    y, s = v.operands
    scale = _param(s)
    if scale is None:
        return None
    zp = None
    if y.opcode is Opcode.SUBTRACT:
        y, z = y.operands
        zp = _param(z)
        if zp is None:
            return None
    if y.opcode is not Opcode.CONVERT:
        return None
    q = y.operands[0]
    if not q.shape.dtype.is_integer or q.shape.dtype.bits > 16:
        return None
    return Dequantized(q, scale, zp)


@dataclass(frozen=True)
class Quantized:
    """``q(y)``: T(clamp(lo, round(y / scale) + zero_point, hi)); ``divide`` is y / scale."""
    y: Instruction
    divide: Instruction
    scale: Param
    zero_point: Param | None
    out: dtypes.DType
    lo: float
    hi: float

    @property
    def full_range(self) -> bool:
        """Whether the clamp is the whole range of the integer type (no ReLU folded in)."""
        return (self.lo, self.hi) == (float(self.out.info.min), float(self.out.info.max))


def quantized(v: Instruction) -> Quantized | None:
    if v.opcode is not Opcode.CONVERT or not v.shape.dtype.is_integer:
        return None
    c = v.operands[0]
    if c.opcode is not Opcode.CLAMP or c.shape.dtype != dtypes.F32:
        return None
    lo, r, hi = c.operands
    lo_v, hi_v = known_value(lo), known_value(hi)
    if lo_v is None or hi_v is None or lo_v.size != 1 or hi_v.size != 1:
        return None
    zp = None
    if r.opcode is Opcode.ADD:
        r, z = r.operands
        zp = _param(z)
        if zp is None:
            return None
    if r.opcode is not Opcode.ROUND_NEAREST_EVEN or r.operands[0].opcode is not Opcode.DIVIDE:
        return None
    divide = r.operands[0]
    y, s = divide.operands
    scale = _param(s)
    if scale is None or y.shape.dtype != dtypes.F32:
        return None
    return Quantized(y, divide, scale, zp, v.shape.dtype, float(lo_v.reshape(())),
                     float(hi_v.reshape(())))


def _per_tensor(v: Instruction) -> Quantized | None:
    """``quantized(v)`` where its scale and zero point are one value each."""
    q = quantized(v)
    if q is None or q.scale.axis is not None or (q.zero_point and q.zero_point.axis
                                                 is not None):
        return None
    return q


def _per_tensor_8bit(v: Instruction) -> Quantized | None:
    """``_per_tensor(v)`` to s8 or u8 over the type's whole range (the table and sum
    rules hold only there)."""
    q = _per_tensor(v)
    if q is None or q.out not in (dtypes.S8, dtypes.U8) or not q.full_range:
        return None
    return q


def _scalar(p: Param | None, default=0.0):
    """The one value of a per-tensor parameter (``default`` for none), else None."""
    if p is None:
        return default
    return p.scalar()


def _widened(v: Instruction):
    """``s32(x) - B(zx)`` or ``s32(x)`` with x 8-bit and zx a constant scalar (an int) or
    a scalar computed at run time (DynamicQuantizeLinear's, an s32 instruction):
    (x, zx), else None. A reshape of either form is the form of a reshape of x (the zero
    point is one scalar); x is then returned reshaped by the caller."""
    zx = 0
    if v.opcode is Opcode.RESHAPE:
        v = v.operands[0]
    if v.opcode is Opcode.SUBTRACT:
        v, z = v.operands
        p = _param(z)
        if p is not None and p.axis is None:
            zx = int(p.values)
        elif z.opcode is Opcode.BROADCAST and z.operands[0].shape.rank == 0:
            zx = z.operands[0]
        else:
            return None
    if v.opcode is not Opcode.CONVERT or v.shape.dtype != dtypes.S32:
        return None
    x = v.operands[0]
    if x.shape.dtype not in (dtypes.S8, dtypes.U8):
        return None
    return x, zx


# --- rewriting ---------------------------------------------------------------------------

class _Rewriter:
    def __init__(self, module: Module, comp: Computation, soft_float: bool = False):
        self.module = module
        self.comp = comp
        self.soft_float = soft_float
        self.users = self.comp.users()
        self.replaced: dict[Instruction, Instruction] = {}
        self._reducers: dict[tuple[Opcode, dtypes.DType], Computation] = {}

    def run(self) -> bool:
        for instr in list(self.comp.instructions):
            instr.operands = [self.replaced.get(o, o) for o in instr.operands]
            for rule in (self._contraction, self._narrow, self._passthrough, self._softmax,
                         self._mean, self._sum, self._input):
                new = rule(instr)
                if new is not None:
                    self.replaced[instr] = new
                    break
        if not self.replaced:
            return False
        apply_replacements(self.comp, self.replaced)
        return True

    # -- building --
    def add(self, opcode: Opcode, *operands: Instruction, shape: Shape | None = None,
            called=(), metadata=None, **attrs) -> Instruction:
        s = infer_shape(opcode, [o.shape for o in operands], attrs, called, shape)
        return self.comp.add(Instruction(opcode, s, operands, attrs, called,
                                         metadata=metadata))

    def constant(self, value: np.ndarray, dtype: dtypes.DType, metadata=None) -> Instruction:
        arr = np.array(np.asarray(value).astype(dtype.np), order="C")
        return self.comp.add(Instruction(Opcode.CONSTANT, Shape.array(dtype, arr.shape),
                                         literal=arr, metadata=metadata))

    def spread(self, values: np.ndarray, dtype: dtypes.DType, dims, axis: int | None,
               metadata=None) -> Instruction:
        """B(values): a scalar, or one value per element of dim ``axis`` of ``dims``."""
        c = self.constant(values, dtype, metadata)
        return self.add(Opcode.BROADCAST, c, shape=Shape.array(dtype, dims),
                        dimensions=() if axis is None else (axis,), metadata=metadata)

    def single_use(self, *chain: Instruction) -> bool:
        """Each value of ``chain`` but the last has exactly one user, the next one."""
        return all(self.users[a] == [b] for a, b in zip(chain, chain[1:]))

    # -- rule 1 --
    def _contraction(self, v: Instruction) -> Instruction | None:
        q = _per_tensor(v)
        if q is None:
            return None
        sy, zy = np.float32(q.scale.scalar()), np.float32(_scalar(q.zero_point))
        folded = _folded_activation(q, sy, zy)
        if folded is None:
            return None
        y, lo, hi, chain = folded       # chain: what reads each value, back to y
        bias = None
        if y.opcode is Opcode.ADD:
            c, bb = y.operands
            if c.opcode not in (Opcode.CONVOLUTION, Opcode.DOT):
                c, bb = bb, c
            bias = _param(bb)
            if bias is None:
                return None
            chain.append(y)
        else:
            c = y
        if c.opcode not in (Opcode.CONVOLUTION, Opcode.DOT) or c.shape.dtype != dtypes.F32:
            return None
        chain.append(c)
        if not self.single_use(*reversed(chain)):
            return None
        form = _contraction_form(c)
        if form is None:
            return None
        x_dq, w_dq, w_axis, out_axis = form
        sx = _scalar(x_dq.scale, None)
        zx = _scalar(x_dq.zero_point)
        if sx is None or zx is None:
            return None
        cout = c.shape.dims[out_axis]
        if bias is not None and bias.axis not in (None, out_axis):
            return None
        if (w_dq.scale.axis not in (None, w_axis)
                or (w_dq.zero_point is not None and w_dq.zero_point.axis not in (None, w_axis))):
            return None
        sw = w_dq.scale.along(cout).astype(np.float32)
        acc_scale = (np.float32(sx) * sw).astype(np.float32)
        md = v.metadata
        dims = c.shape.dims

        def widened(dq: Dequantized) -> Instruction:
            """s32(q) - B(zero point)"""
            y32 = self.add(Opcode.CONVERT, dq.q, shape=dq.q.shape.with_dtype(dtypes.S32),
                           metadata=md)
            zero = dq.zero_point
            if zero is not None and np.any(zero.values != 0):
                y32 = self.add(Opcode.SUBTRACT, y32, self.spread(
                    np.rint(zero.values), dtypes.S32, dq.q.shape.dims, zero.axis, md),
                    metadata=md)
            return y32
        operands = (widened(x_dq), widened(w_dq))
        operands = operands if form.x_first else operands[::-1]
        acc = self.add(c.opcode, *operands, shape=Shape.array(dtypes.S32, ()), metadata=md,
                       **c.attrs)
        acc = self._narrow(acc) or acc          # rule 2 on what rule 1 made
        bias_f = None if bias is None else bias.along(cout).astype(np.float32)
        integral = bias_f is None
        if bias_f is not None:
            bq = np.rint(bias_f.astype(np.float64) / acc_scale.astype(np.float64))
            wide = (bq * acc_scale.astype(np.float64)).astype(np.float32)
            narrow = (bq.astype(np.float32) * acc_scale).astype(np.float32)
            if np.all(np.abs(bq) < 2**31) and (np.array_equal(wide, bias_f)
                                               or np.array_equal(narrow, bias_f)):
                integral = True
                acc = self.add(Opcode.ADD, acc, self.spread(bq, dtypes.S32, dims, out_axis, md),
                               metadata=md)
        # |acc| at most, per channel (with the bias folded in)
        acc_bound = _contraction_bound(x_dq, w_dq, w_axis, cout)
        m = (acc_scale / sy).astype(np.float32)
        if integral and self.soft_float and acc_bound is not None:
            fixed = fixed_point_multipliers(
                m, acc_bound + (0 if bias_f is None else np.abs(bq)), zy, lo, hi)
            if fixed is not None:
                return self._fixed_point(acc, *fixed, out_axis, zy, lo, hi, v.shape, md)
        f = self.add(Opcode.CONVERT, acc, shape=acc.shape.with_dtype(dtypes.F32), metadata=md)
        if integral:
            f = self.add(Opcode.MULTIPLY, f, self.spread(m, dtypes.F32, dims, out_axis, md),
                         metadata=md)
        else:
            f = self.add(Opcode.MULTIPLY, f, self.spread(acc_scale, dtypes.F32, dims,
                                                         out_axis, md), metadata=md)
            f = self.add(Opcode.ADD, f, self.spread(bias_f, dtypes.F32, dims, out_axis, md),
                         metadata=md)
            f = self.add(Opcode.DIVIDE, f, self.spread(sy, dtypes.F32, dims, None, md),
                         metadata=md)
        # |f| at most: the accumulators' bound per channel through the same arithmetic
        if acc_bound is None:
            bound = None
        elif integral:
            bq = 0 if bias_f is None else np.abs(bq)
            bound = np.max((acc_bound + bq) * np.abs(acc_scale / sy).astype(np.float64))
        else:
            bound = np.max((acc_bound * np.abs(acc_scale) + np.abs(bias_f)) / sy)
        return self._requantized(f, bound, zy, lo, hi, v.shape, md)

    def _requantized(self, f: Instruction, bound: float | None, zy, lo, hi, shape: Shape,
                     md) -> Instruction:
        """``T(clamp(lo, round(f) + zy, hi))`` of shape ``shape``. Where |f| < 2**22
        (``bound``, from the integers f is made of), in integers: adding 1.5 * 2**23
        rounds f to nearest even and leaves the integer in the sum's low mantissa bits,
        so ``bits(f + 1.5 * 2**23) - bits(1.5 * 2**23)`` is round(f) exactly; the zero
        point and clamp follow on s32 (a saturating instruction on most targets), and no
        float compare, rounding instruction or libcall is left per element."""
        dims = f.shape.dims
        if bound is None or not np.isfinite(bound) or bound * (1 + 2**-20) >= 2**22:
            r = self.add(Opcode.ROUND_NEAREST_EVEN, f, metadata=md)
            if zy:
                r = self.add(Opcode.ADD, r, self.spread(zy, dtypes.F32, dims, None, md),
                             metadata=md)
            r = self.add(Opcode.CLAMP, self.constant(lo, dtypes.F32, md), r,
                         self.constant(hi, dtypes.F32, md), metadata=md)
            return self.add(Opcode.CONVERT, r, shape=shape, metadata=md)
        return self._rounded_in_integers(f, zy, lo, hi, shape, md)

    def _fixed_point(self, acc: Instruction, multipliers: np.ndarray, shift: int, axis: int,
                     zy, lo, hi, shape: Shape, md) -> Instruction:
        """``T(clamp(lo, (s64(acc) * B(M) + 2**(S-1)) >> S + zy, hi))``: the products of
        ``fixed_point_multipliers``, in 64-bit integers (smull and an add with carry on
        a 32-bit core; ``S`` = 32 keeps the high word)."""
        dims = acc.shape.dims
        wide = self.add(Opcode.CONVERT, acc, shape=acc.shape.with_dtype(dtypes.S64),
                        metadata=md)
        r = self.add(Opcode.MULTIPLY, wide,
                     self.spread(multipliers, dtypes.S64, dims, axis, md), metadata=md)
        r = self.add(Opcode.ADD, r, self.spread(1 << (shift - 1), dtypes.S64, dims, None, md),
                     metadata=md)
        r = self.add(Opcode.SHIFT_RIGHT_ARITHMETIC, r,
                     self.spread(shift, dtypes.S64, dims, None, md), metadata=md)
        r = self.add(Opcode.CONVERT, r, shape=r.shape.with_dtype(dtypes.S32), metadata=md)
        return self._clamped(r, int(zy), lo, hi, shape, md)

    def _clamped(self, r: Instruction, offset: int, lo, hi, shape: Shape, md,
                 where: Instruction | None = None) -> Instruction:
        """``T(clamp(lo, r + offset, hi))`` of the s32 ``r``; 0 where ``where`` is false."""
        if offset:
            r = self.add(Opcode.ADD, r, self.spread(offset, dtypes.S32, r.shape.dims, None, md),
                         metadata=md)
        r = self.add(Opcode.CLAMP, self.constant(int(lo), dtypes.S32, md), r,
                     self.constant(int(hi), dtypes.S32, md), metadata=md)
        if where is not None:
            r = self.add(Opcode.SELECT, where, r,
                         self.spread(0, dtypes.S32, r.shape.dims, None, md), metadata=md)
        return self.add(Opcode.CONVERT, r, shape=shape, metadata=md)

    def _rounded_in_integers(self, f: Instruction, zy, lo, hi, shape: Shape, md,
                             any_float: bool = False) -> Instruction:
        """``T(clamp(lo, round(f) + zy, hi))`` as ``bits(f + 1.5 * 2**23) - bits(1.5 *
        2**23) + zy`` clamped on s32, exact for |f| < 2**22. ``any_float``: exact for
        every f besides: the bits taken as 0 where negative (the sum is then at most 0,
        so f is below the clamp; above 2**22 they only grow, past it) and a NaN giving
        0, as the float tail's conversion does."""
        dims = f.shape.dims
        magic = np.float32(1.5 * 2**23)
        t = self.add(Opcode.ADD, f, self.spread(magic, dtypes.F32, dims, None, md),
                     metadata=md)
        r = self.add(Opcode.BITCAST_CONVERT, t, shape=t.shape.with_dtype(dtypes.S32),
                     metadata=md)
        number = None
        if any_float:
            r = self.add(Opcode.MAXIMUM, r, self.spread(0, dtypes.S32, dims, None, md),
                         metadata=md)
            number = self.add(Opcode.COMPARE, t, t, shape=t.shape.with_dtype(dtypes.PRED),
                              direction="EQ", metadata=md)
        return self._clamped(r, int(zy) - int(magic.view(np.int32)), lo, hi, shape, md,
                             number)

    # -- rule 2 --
    def _narrow(self, c: Instruction) -> Instruction | None:
        if c.opcode not in (Opcode.CONVOLUTION, Opcode.DOT) or c.shape.dtype != dtypes.S32:
            return None
        if c.opcode is Opcode.CONVOLUTION:
            act_k, w_k = 0, 1
        else:
            act_k = 0 if _widened(c.operands[0]) is not None else 1
            w_k = 1 - act_k
        act, w = _widened(c.operands[act_k]), c.operands[w_k]
        if act is None:
            return None
        wv = known_value(w, limit=None)
        if wv is None:
            return None
        wv = wv.astype(np.int64)
        wt = next((t for t in (dtypes.S8, dtypes.S16)
                   if wv.size == 0 or (wv.min() >= t.info.min and wv.max() <= t.info.max)), None)
        if wt is None:
            return None
        x, zx = act
        md = c.metadata
        dims = c.operands[act_k].shape.dims
        if x.shape.dims != dims:
            x = self.add(Opcode.RESHAPE, x, shape=Shape.array(x.shape.dtype, dims), metadata=md)
        attrs = dict(c.attrs)
        if c.opcode is Opcode.CONVOLUTION:
            win = attrs["window"]
            if attrs.get("batch_group_count", 1) != 1:
                return None
            if zx and (any(win.pad_low) or any(win.pad_high)):
                if any(d != 1 for d in win.lhs_dilation) or isinstance(zx, Instruction):
                    return None
                dn = attrs["dimension_numbers"]
                low, high = [0] * x.shape.rank, [0] * x.shape.rank
                for i, d in enumerate(dn.input_spatial):
                    low[d], high[d] = win.pad_low[i], win.pad_high[i]
                x = self.add(Opcode.PAD, x, self.constant(zx, x.shape.dtype, md), metadata=md,
                             padding=PaddingConfig(low, high, [0] * x.shape.rank))
                attrs["window"] = Window(win.size, win.stride, (0,) * win.rank,
                                         (0,) * win.rank, win.lhs_dilation, win.rhs_dilation)
        wn = self.constant(wv, wt, md)
        operands = [None, None]
        operands[act_k], operands[w_k] = x, wn
        acc = self.add(c.opcode, *operands, shape=Shape.array(dtypes.S32, ()), metadata=md,
                       **attrs)
        if not zx:
            return acc
        # sum_k (x_k - zx) W_k = sum_k x_k W_k - zx sum_k W_k
        if c.opcode is Opcode.CONVOLUTION:
            dn = attrs["dimension_numbers"]
            kept = (dn.kernel_output,)
            out_dims = (dn.output_feature,)
        else:
            dn = attrs["dimension_numbers"]
            contracting = dn.rhs_contracting if w_k == 1 else dn.lhs_contracting
            batch = dn.rhs_batch if w_k == 1 else dn.lhs_batch
            kept = tuple(d for d in range(wv.ndim) if d not in contracting)
            nb = len(batch)
            free = tuple(d for d in kept if d not in batch)
            # the result's dims: batch, lhs free, rhs free; W's sums must be in that order
            if kept != tuple(batch) + free:
                return None
            lhs_free = c.operands[0].shape.rank - nb - len(dn.lhs_contracting)
            start = nb + (lhs_free if w_k == 1 else 0)
            out_dims = tuple(range(nb)) + tuple(start + i for i in range(len(free)))
        summed = wv.sum(axis=tuple(d for d in range(wv.ndim) if d not in kept))
        if isinstance(zx, Instruction):
            sums = self.add(Opcode.BROADCAST, self.constant(summed, dtypes.S32, md),
                            shape=acc.shape, dimensions=out_dims, metadata=md)
            zxs = self.add(Opcode.BROADCAST, zx, shape=acc.shape, dimensions=(), metadata=md)
            corr = self.add(Opcode.MULTIPLY, zxs, sums, metadata=md)
            return self.add(Opcode.SUBTRACT, acc, corr, metadata=md)
        corr = self.constant(-zx * summed, dtypes.S32, md)
        corr = self.add(Opcode.BROADCAST, corr, shape=acc.shape, dimensions=out_dims,
                        metadata=md)
        return self.add(Opcode.ADD, acc, corr, metadata=md)

    # -- rule 3 --
    def _passthrough(self, v: Instruction) -> Instruction | None:
        q = _per_tensor(v)
        if q is None:
            return None
        t = q.out
        if not q.full_range:
            return None
        sy, zy = q.scale.scalar(), _scalar(q.zero_point)
        if not sy > 0:
            return None

        def same(dq: Dequantized | None) -> bool:
            return (dq is not None and dq.q.shape.dtype == t and dq.scale.axis is None
                    and np.float32(dq.scale.scalar()) == np.float32(sy)
                    and _scalar(dq.zero_point) == zy)

        f = q.y
        direct = dequantized(f)
        if same(direct):
            return direct.q                      # q(dq(x)) = x
        if f.opcode not in _PASSTHROUGH:
            return None
        md = v.metadata
        if f.opcode is Opcode.PAD:
            dq, p = dequantized(f.operands[0]), known_value(f.operands[1])
            if not same(dq) or p is None:
                return None
            pad = np.clip(np.rint(np.float32(p) / np.float32(sy)) + zy, t.info.min, t.info.max)
            return self.add(Opcode.PAD, dq.q, self.constant(pad, t, md), metadata=md,
                            **f.attrs)
        if f.opcode in (Opcode.REDUCE_WINDOW, Opcode.REDUCE):
            reducer = f.called[0]
            if (len(f.operands) != 2 or reducer.root.opcode is not Opcode.MAXIMUM
                    or len(reducer.instructions) != 3):
                return None
            dq, init = dequantized(f.operands[0]), known_value(f.operands[1])
            if not same(dq) or init is None:
                return None
            start = np.clip(np.rint(np.float32(init) / np.float32(sy)) + zy, t.info.min,
                            t.info.max) if np.isfinite(init) else \
                (t.info.min if init < 0 else t.info.max)
            return self.add(f.opcode, dq.q, self.constant(start, t, md),
                            called=[self._max(t)], metadata=md, **f.attrs)
        dqs = [dequantized(o) for o in f.operands]
        if not all(same(dq) for dq in dqs):
            return None
        shape = None if f.opcode in (Opcode.TRANSPOSE, Opcode.SLICE, Opcode.REVERSE,
                                     Opcode.COPY, Opcode.CONCATENATE) \
            else f.shape.with_dtype(t)
        return self.add(f.opcode, *(dq.q for dq in dqs), shape=shape, metadata=md, **f.attrs)

    # -- rule 4 --
    def _softmax(self, v: Instruction) -> Instruction | None:
        q = _per_tensor_8bit(v)
        if q is None:
            return None
        t = q.out
        form = _softmax_form(q.y)
        if form is None:
            return None
        dq, dims = form
        sx, zx = dq.scale.scalar(), _scalar(dq.zero_point)
        sy, zy = np.float32(q.scale.scalar()), _scalar(q.zero_point)
        if (dq.q.shape.dtype != t or sx is None or zx is None or not np.float32(sx) > 0
                or not sy > 0):
            return None
        md = v.metadata
        return qlinear_softmax(
            lambda opcode, *xs, **attrs: self.add(opcode, *xs, metadata=md, **attrs),
            lambda value, dtype: self.constant(value, dtype, md), self._reducer,
            dq.q, dims, sx, sy, zy)

    # -- rule 5 --
    def _mean(self, v: Instruction) -> Instruction | None:
        q = _per_tensor_8bit(v)
        if q is None:
            return None
        t = q.out
        y, chain = q.y, [q.divide]
        if y.opcode is Opcode.RESHAPE:                  # GlobalAveragePool's N C 1 1
            chain.append(y)
            y = y.operands[0]
        if y.opcode is not Opcode.DIVIDE:
            return None
        total, count = y.operands
        n = _param(count)
        summed = _global_sum(total)
        if n is None or n.axis is not None or summed is None or float(n.values) != summed:
            return None
        dq = dequantized(total.operands[0])
        if (dq is None or dq.q.shape.dtype not in (dtypes.S8, dtypes.U8)
                or dq.scale.axis is not None or _scalar(dq.zero_point) is None
                or not self.single_use(total, y, *reversed(chain))):
            return None
        sx, zx = np.float32(dq.scale.scalar()), int(_scalar(dq.zero_point))
        sy, zy = np.float32(q.scale.scalar()), np.float32(_scalar(q.zero_point))
        if not (sx > 0 and sy > 0):
            return None
        md = v.metadata
        x32 = self.add(Opcode.CONVERT, dq.q, shape=dq.q.shape.with_dtype(dtypes.S32),
                       metadata=md)
        acc = self.add(total.opcode, x32, self.constant(0, dtypes.S32, md),
                       called=[self._reducer(Opcode.ADD, dtypes.S32)], metadata=md,
                       **total.attrs)
        dims = acc.shape.dims
        if zx:
            acc = self.add(Opcode.SUBTRACT, acc, self.spread(zx * summed, dtypes.S32, dims,
                                                             None, md), metadata=md)
        # onnxruntime's scale: x_scale / (y_scale * count), in f32
        m = np.float32(sx / np.float32(sy * np.float32(summed)))
        f = self.add(Opcode.MULTIPLY, self.add(Opcode.CONVERT, acc, shape=acc.shape.with_dtype(
            dtypes.F32), metadata=md), self.spread(m, dtypes.F32, dims, None, md), metadata=md)
        bound = summed * _span(dq.q.shape.dtype, zx) * abs(float(m))
        out = self._requantized(f, bound, zy, q.lo, q.hi, f.shape.with_dtype(t), md)
        if out.shape.dims != v.shape.dims:
            out = self.add(Opcode.RESHAPE, out, shape=v.shape, metadata=md)
        return out

    # -- rule 6 --
    def _sum(self, v: Instruction) -> Instruction | None:
        q = _per_tensor(v)
        if q is None or q.out not in (dtypes.S8, dtypes.U8):
            return None
        sy, zy = np.float32(q.scale.scalar()), np.float32(_scalar(q.zero_point))
        folded = _folded_activation(q, sy, zy)
        if folded is None or folded[0].opcode is not Opcode.ADD:
            return None
        y, lo, hi, chain = folded
        terms = [dequantized(o) for o in y.operands]
        if any(t is None or t.q.shape.dtype not in (dtypes.S8, dtypes.U8)
               or t.scale.axis is not None or _scalar(t.zero_point) is None
               or t.q.shape.dims != y.shape.dims for t in terms):
            return None
        if not self.single_use(y, *reversed(chain)):
            return None
        a, b = terms
        za, zb = np.float32(_scalar(a.zero_point)), np.float32(_scalar(b.zero_point))
        sa, sb = np.float32(a.scale.scalar()), np.float32(b.scale.scalar())
        ma, mb = np.float32(sa / sy), np.float32(sb / sy)
        if not _sum_is_exact(a.q.shape.dtype, b.q.shape.dtype, za, zb, sa, sb, sy, zy,
                             ma, mb, lo, hi):
            return None
        md = v.metadata
        dims = y.shape.dims

        def scaled(t: Dequantized, z, m) -> Instruction:
            f = self.add(Opcode.CONVERT, t.q, shape=t.q.shape.with_dtype(dtypes.F32),
                         metadata=md)
            if z:
                f = self.add(Opcode.SUBTRACT, f, self.spread(z, dtypes.F32, dims, None, md),
                             metadata=md)
            return self.add(Opcode.MULTIPLY, f, self.spread(m, dtypes.F32, dims, None, md),
                            metadata=md)
        f = self.add(Opcode.ADD, scaled(a, za, ma), scaled(b, zb, mb), metadata=md)
        bound = (_span(a.q.shape.dtype, float(za)) * abs(float(ma))
                 + _span(b.q.shape.dtype, float(zb)) * abs(float(mb)))
        return self._requantized(f, bound, zy, lo, hi, v.shape, md)

    # -- rule 7 --
    def _input(self, v: Instruction) -> Instruction | None:
        q = _per_tensor(v)
        if (q is None or q.out not in (dtypes.S8, dtypes.U8) or q.y.opcode is not
                Opcode.PARAMETER or q.y not in self.comp.parameters):
            return None
        return self._rounded_in_integers(q.divide, _scalar(q.zero_point), q.lo, q.hi,
                                         v.shape, v.metadata, any_float=True)

    def _max(self, dtype: dtypes.DType) -> Computation:
        return self._reducer(Opcode.MAXIMUM, dtype)

    def _reducer(self, opcode: Opcode, dtype: dtypes.DType) -> Computation:
        if (opcode, dtype) not in self._reducers:
            comp = scalar_computation(f"{opcode.name.lower()}_{dtype.name}", opcode, dtype)
            self._reducers[opcode, dtype] = self.module.add_computation(comp)
        return self._reducers[opcode, dtype]


@dataclass(frozen=True)
class _Form:
    """A float dot / convolution of a dequantized tensor and dequantized constant weights."""
    x: Dequantized
    w: Dequantized
    w_axis: int           # the weights' dim that is an output channel
    out_axis: int         # where it lands in the result
    x_first: bool         # x is operand 0

    def __iter__(self):
        return iter((self.x, self.w, self.w_axis, self.out_axis))


def _contraction_form(c: Instruction) -> _Form | None:
    a, b = (dequantized(o) for o in c.operands)
    if a is None or b is None:
        return None
    if c.opcode is Opcode.CONVOLUTION:
        dn = c.attrs["dimension_numbers"]
        if b.q.opcode is not Opcode.CONSTANT:
            return None
        return _Form(a, b, dn.kernel_output, dn.output_feature, True)
    dn = c.attrs["dimension_numbers"]
    for x, w, k in ((a, b, 1), (b, a, 0)):
        if w.q.opcode is not Opcode.CONSTANT:
            continue
        rank = w.q.shape.rank
        batch = dn.rhs_batch if k == 1 else dn.lhs_batch
        contracting = dn.rhs_contracting if k == 1 else dn.lhs_contracting
        free = [d for d in range(rank) if d not in batch + contracting]
        if len(free) != 1:
            continue
        nb = len(batch)
        lhs_free = c.operands[0].shape.rank - nb - len(dn.lhs_contracting)
        out_axis = nb + (lhs_free if k == 1 else 0)
        return _Form(x, w, free[0], out_axis, k == 1)
    return None


def _folded_activation(q: Quantized, sy, zy):
    """(y, lo, hi, chain): q's input below a ReLU or a clamp by constants, folded into
    q's bounds (q is monotonic: q(max(y, 0)) = max(q(y), zy), q(clamp(a, y, b)) =
    clamp(q(a), q(y), q(b))), and the instructions from q's divide down to y's reader;
    None where the scale is not positive or a clamp's bounds are not known."""
    if not sy > 0:
        return None
    lo, hi = np.float32(q.lo), np.float32(q.hi)
    chain, y = [q.divide], q.y
    if y.opcode is Opcode.MAXIMUM and _param(y.operands[1]) is not None \
            and _param(y.operands[1]).scalar() == 0:
        lo = max(lo, zy)
        chain.append(y)
        y = y.operands[0]
    elif y.opcode is Opcode.CLAMP:
        a, b = known_value(y.operands[0]), known_value(y.operands[2])
        if a is None or b is None or a.size != 1 or b.size != 1:
            return None
        lo = max(lo, np.float32(np.rint(np.float32(a) / sy) + zy))
        hi = min(hi, np.float32(np.rint(np.float32(b) / sy) + zy))
        chain.append(y)
        y = y.operands[1]
    return y, lo, hi, chain


# Fixed-point requantization: the float path's error and the reach of its results.
_REACH = 1024               # |round(f)| beyond this is clamped away whatever the zero point
_NEAR_TIE = 2.0**-14        # more than f32's rounding error of an |f| below _REACH (2**-15)
_MAX_CANDIDATES = 1 << 22   # accumulators checked at compile time per layer, at most


def fixed_point_multipliers(m: np.ndarray, bound: np.ndarray, zy, lo,
                            hi) -> tuple[np.ndarray, int] | None:
    """Integers ``M`` (one per channel) and a shift ``S`` such that, for every integer
    accumulator |a| <= ``bound[c]``, ``clamp(lo, (a * M[c] + 2**(S-1)) >> S + zy, hi)``
    equals the float path's ``clamp(lo, rint(f32(a) * m[c]) + zy, hi)``; None where some
    accumulator would differ (or the check would be too long).

    ``M / 2**S`` is ``m`` exactly (an f32 is a 24-bit integer times a power of two), so
    the shift rounds the exact product half up, where the float path rounds it to f32
    first and then to even. The two agree on every ``a`` whose exact ``a * m`` lies
    farther than f32's rounding error from a half-integer; the rest, a few per
    half-integer, are computed both ways here. Beyond ``_REACH`` both are clamped."""
    m = np.asarray(m, np.float32).astype(np.float64)
    bound = np.broadcast_to(np.asarray(bound, np.float64), m.shape)
    if (not np.all(np.isfinite(m)) or np.any(m < 2.0**-100) or np.any(bound >= 2**24)
            or max(abs(lo), abs(hi)) + abs(zy) >= _REACH - 2):
        return None
    exponents = np.frexp(m)[1] - 24                 # m = mantissa(24 bits) * 2**exponent
    shift = max(32, int(-exponents.min()))
    multipliers = np.ldexp(m, shift).astype(np.int64)
    if np.any(multipliers.astype(np.float64) != np.ldexp(m, shift)) or np.any(
            np.floor(bound) * multipliers.astype(np.float64) >= 2.0**62):
        return None
    halves = np.arange(-_REACH, _REACH) + 0.5
    checked = 0
    for c in range(m.size):
        first = np.ceil((halves - _NEAR_TIE) / m[c]) - 1
        last = np.floor((halves + _NEAR_TIE) / m[c]) + 1
        counts = (last - first + 1).astype(np.int64)
        checked += int(counts.sum())
        if checked > _MAX_CANDIDATES:
            return None
        a = np.repeat(first, counts) + (np.arange(counts.sum())
                                        - np.repeat(np.cumsum(counts) - counts, counts))
        a = a[np.abs(a) <= bound[c]].astype(np.int64)
        floats = np.rint(a.astype(np.float32) * np.float32(m[c])).astype(np.int64)
        ints = (a * int(multipliers[c]) + (1 << (shift - 1))) >> shift
        if not np.array_equal(np.clip(floats + zy, lo, hi), np.clip(ints + zy, lo, hi)):
            return None
    return multipliers.reshape(-1), shift


def _span(dtype: dtypes.DType, zero_point) -> float:
    """The largest |x - zero_point| over the values of the integer type."""
    return float(max(abs(dtype.info.min - zero_point), abs(dtype.info.max - zero_point)))


def _contraction_bound(x_dq: Dequantized, w_dq: Dequantized, w_axis: int,
                       cout: int) -> np.ndarray | None:
    """Per output channel, the largest |accumulator| of sum (x - zx)(w - zw): the sum of
    the channel's |w - zw| (over every other dim of the constant weights, a bound where
    they hold batch dims too) times the largest |x - zx| of x's type."""
    zx = _scalar(x_dq.zero_point)
    if zx is None or w_dq.q.opcode is not Opcode.CONSTANT:
        return None
    w = np.moveaxis(w_dq.q.literal.astype(np.float64), w_axis, 0).reshape(cout, -1)
    if w_dq.zero_point is not None:
        zw = w_dq.zero_point.along(cout) if w_dq.zero_point.axis is not None \
            else np.broadcast_to(w_dq.zero_point.values, (cout,))
        w = w - np.asarray(zw, np.float64)[:, None]
    return np.abs(w).sum(axis=1) * _span(x_dq.q.shape.dtype, float(zx))


def _sum_is_exact(ta, tb, za, zb, sa, sb, sy, zy, ma, mb, lo, hi) -> bool:
    """Whether round(A * ma + B * mb) gives q's result of A * sa + B * sb for every pair
    of 8-bit values (A = a - za, B = b - zb), all in f32 as the ops compute them."""
    a = np.arange(ta.info.min, ta.info.max + 1, dtype=np.float32) - za
    b = np.arange(tb.info.min, tb.info.max + 1, dtype=np.float32) - zb
    a, b = a[:, None], b[None, :]
    with np.errstate(all="ignore"):
        want = np.clip(np.rint((a * sa + b * sb) / sy) + zy, lo, hi)
        got = np.clip(np.rint(a * ma + b * mb) + zy, lo, hi)
    return bool(np.array_equal(want, got))


def _softmax_form(y: Instruction) -> tuple[Dequantized, tuple[int, ...]] | None:
    """``y`` as the importer's softmax of a dequantized tensor, exp(x - B(max_R x)) /
    B(sum_R exp(...)): (the dq, R), else None."""
    if y.opcode is not Opcode.DIVIDE:
        return None
    e, total = y.operands
    if e.opcode is not Opcode.EXP or total.opcode is not Opcode.BROADCAST:
        return None
    s = total.operands[0]
    if s.opcode is Opcode.CONVERT and s.shape.dtype == s.operands[0].shape.dtype:
        s = s.operands[0]
    shifted = e.operands[0]
    if (not _reduces(s, e, Opcode.ADD) or shifted.opcode is not Opcode.SUBTRACT
            or shifted.operands[1].opcode is not Opcode.BROADCAST):
        return None
    x, top = shifted.operands[0], shifted.operands[1].operands[0]
    if not _reduces(top, x, Opcode.MAXIMUM) or top.attrs["dimensions"] != s.attrs["dimensions"]:
        return None
    dims = tuple(top.attrs["dimensions"])
    kept = tuple(d for d in range(x.shape.rank) if d not in dims)
    if any(tuple(b.attrs["dimensions"]) != kept for b in (total, shifted.operands[1])):
        return None
    dq = dequantized(x)
    return None if dq is None else (dq, dims)


def _global_sum(r: Instruction) -> int | None:
    """How many elements each value of ``r`` sums if ``r`` is a sum (init 0) of whole
    dims: a reduce, or a reduce-window whose window spans each dim it reduces (size 1 on
    the others, no padding or dilation): a global average pool's sum. Else None."""
    if len(r.operands) != 2 or r.opcode not in (Opcode.REDUCE, Opcode.REDUCE_WINDOW):
        return None
    comp = r.called[0]
    init = known_value(r.operands[1])
    if comp.root.opcode is not Opcode.ADD or len(comp.instructions) != 3 or init is None \
            or init.size != 1 or init.reshape(()) != 0:
        return None
    dims = r.operands[0].shape.dims
    if r.opcode is Opcode.REDUCE:
        return int(np.prod([dims[d] for d in r.attrs["dimensions"]], dtype=np.int64))
    w = r.attrs["window"]
    if (any(w.pad_low) or any(w.pad_high) or any(d != 1 for d in w.lhs_dilation)
            or any(d != 1 for d in w.rhs_dilation)
            or any(size not in (1, n) for size, n in zip(w.size, dims))):
        return None
    return int(np.prod(w.size, dtype=np.int64))


def _reduces(r: Instruction, x: Instruction, opcode: Opcode) -> bool:
    """``r`` is a reduction of ``x`` by ``opcode`` (any initial value that the reduction
    absorbs: the sum's 0, the max's lowest)."""
    if r.opcode is not Opcode.REDUCE or len(r.operands) != 2 or r.operands[0] is not x:
        return False
    comp = r.called[0]
    init = known_value(r.operands[1])
    if comp.root.opcode is not opcode or len(comp.instructions) != 3 or init is None:
        return False
    return bool(init == 0) if opcode is Opcode.ADD else bool(init <= np.finfo(np.float32).min)
