"""The elemental emitter (XLA's ElementalIrEmitter): one rule per opcode in ``RULES``.

A *generator* maps an output index (a list of i64 values, one per dimension) to the
LLVM value of that element, emitted at the builder's position. A rule is

    rule(em, instr, operands, index) -> value

where ``operands[k]`` is the generator of operand k. Movement ops are index remaps,
reduce and reduce-window loop over their window, fusion composes the generators of
its fused computation, and a tuple-shaped value is a Python tuple of element values.
Values are in storage type (pred an i8 0/1, bf16 an i16, s4 an i8...); rules compute
in the compute type (scalar.py).

Dot and convolution are kernels (emitter/kernels/) when they stand alone; their rules
here (one loop over the contracted elements per output element) serve the fused
computations of output fusions that no kernel implements.
"""
from __future__ import annotations

from contextlib import ExitStack
from typing import Callable, Sequence

import numpy as np
from llvmlite import ir

from ..hlo import Computation, Instruction, Opcode, XlacError, dtypes
from .constants import ConstantPool
from .indexing import delinearize, linearize, reshape_index
from .intrinsics import call_intrinsic
from .irutil import I1, alloca_once, for_range, gep_elem, i64, llvm_type
from .scalar import (convert, from_compute, i1_to_pred, immediate, is_unsigned_like,
                     pred_to_i1, to_compute)

Index = list
Generator = Callable[[Index], ir.Value]


class ElementalEmitter:
    """Builds generators at one builder. ``libcalls`` collects the C library functions the
    emitted code calls (LLVM lowers ``frem`` to ``fmod``). ``float_abi`` is the target's
    (TargetInfo.float_abi): "hard" makes those calls pass floats in FPU registers.
    ``no_nans``: the caller knows that no float value is NaN (a kernel's epilogue of
    integer accumulators scaled by finite constants), so maximum, minimum, clamp and
    float-to-integer convert skip their NaN handling."""

    def __init__(self, b: ir.IRBuilder, constants: ConstantPool, float_abi: str | None = None,
                 no_nans: bool = False):
        self.b = b
        self.constants = constants
        self.float_abi = float_abi
        self.no_nans = no_nans
        self.libcalls: set[str] = set()
        # id(reduce-window) -> {dim: (lo, hi)}: static range of the output index the code
        # being emitted covers (set by the loop emitter around each split loop).
        self.index_ranges: dict[int, dict[int, tuple[int, int]]] = {}

    def generator(self, instr: Instruction, operands: Sequence[Generator]) -> Generator:
        try:
            rule = RULES[instr.opcode]
        except KeyError:
            raise XlacError(f"%{instr.name}: {instr.opcode.text} has no elemental rule") from None
        operands = list(operands)
        return lambda index: rule(self, instr, operands, index)

    def computation_generator(self, comp: Computation, parameters: Sequence[Generator],
                              overrides: dict | None = None,
                              value: Instruction | None = None) -> Generator:
        """The generator of ``comp``'s root (or of its instruction ``value``); parameter k
        is produced by ``parameters[k]``, and an instruction of ``overrides`` by its
        generator there (a kernel's accumulators in place of its dot). Each fused value is
        generated once per index and block (shared subexpressions); what only an override
        reads is never generated."""
        gens: dict[Instruction, Generator] = {}
        overrides = overrides or {}
        for instr in comp.instructions:
            if instr in overrides:
                gens[instr] = self._memoized(overrides[instr])
                continue
            if instr.opcode is Opcode.PARAMETER:
                ops = [parameters[instr.number]]
            else:
                ops = [gens[o] for o in instr.operands]
            gens[instr] = self._memoized(self.generator(instr, ops))
        return gens[comp.root if value is None else value]

    def apply(self, comp: Computation, args: Sequence[ir.Value]):
        """Value of a scalar computation (a reducer) on ``args``."""
        return self.computation_generator(comp, [_const_gen(a) for a in args])([])

    def _memoized(self, gen: Generator) -> Generator:
        cache: dict[tuple, ir.Value] = {}

        def memo(index):
            # A value made earlier in the current block dominates the builder's position.
            key = (id(self.b.block), tuple(id(v) for v in index))
            if key not in cache:
                cache[key] = gen(index)
            return cache[key]
        return memo


def _const_gen(value) -> Generator:
    return lambda index: value


def _dtype(instr: Instruction, k: int = 0):
    return instr.operands[k].shape.dtype


# --- element-wise ----------------------------------------------------------

def _float_fn(name: str):
    """f(x) or f(x, y) on floats from mathlib (exp, log, ..., pow, atan2)."""
    def fn(em, *xs):
        from . import mathlib    # written beside this module; the table is its API
        return mathlib.FUNCTIONS[name](em.b, *xs)
    return fn


def _llvm_fn(name: str):
    return lambda em, *xs: call_intrinsic(em.b, f"llvm.{name}", list(xs))


def _unary(float_fn=None, int_fn=None):
    """A unary rule: floats and integers (and pred) computed in their compute type."""
    def rule(em, instr, ops, index):
        dt = _dtype(instr)
        fn = float_fn if dt.is_float else (lambda em, x: int_fn(em, x, dt)) if int_fn else None
        if fn is None:
            raise XlacError(f"%{instr.name}: {instr.opcode.text} is not defined on {dt}")
        b = em.b
        return from_compute(b, fn(em, to_compute(b, ops[0](index), dt)), dt)
    return rule


def _binary(float_fn=None, int_fn=None):
    def rule(em, instr, ops, index):
        dt = _dtype(instr)
        fn = float_fn if dt.is_float else (lambda em, x, y: int_fn(em, x, y, dt)) if int_fn \
            else None
        if fn is None:
            raise XlacError(f"%{instr.name}: {instr.opcode.text} is not defined on {dt}")
        b = em.b
        x, y = (to_compute(b, op(index), dt) for op in ops)
        return from_compute(b, fn(em, x, y), dt)
    return rule


def _zero(v):
    return ir.Constant(v.type, 0)


def _int_abs(em, x, dt):
    if is_unsigned_like(dt):
        return x
    b = em.b
    return b.select(b.icmp_signed("<", x, _zero(x)), b.neg(x), x)


def _float_sign(em, x):
    # sign(+-0) = +-0, sign(NaN) = NaN, otherwise +-1.
    b = em.b
    one = call_intrinsic(b, "llvm.copysign", [ir.Constant(x.type, 1.0), x])
    keep = b.or_(b.fcmp_ordered("==", x, ir.Constant(x.type, 0.0)), b.fcmp_unordered("uno", x, x))
    return b.select(keep, x, one)


def _int_sign(em, x, dt):
    b = em.b
    if is_unsigned_like(dt):
        return b.zext(b.icmp_unsigned("!=", x, _zero(x)), x.type)
    pos = b.zext(b.icmp_signed(">", x, _zero(x)), x.type)
    neg = b.zext(b.icmp_signed("<", x, _zero(x)), x.type)
    return b.sub(pos, neg)


def _not(em, x, dt):
    mask = 1 if dt.is_pred else -1
    return em.b.xor(x, ir.Constant(x.type, mask))


def _rsqrt(em, x):
    return em.b.fdiv(ir.Constant(x.type, 1.0), call_intrinsic(em.b, "llvm.sqrt", [x]))


def _is_finite(em, instr, ops, index):
    dt = _dtype(instr)
    b = em.b
    x = to_compute(b, ops[0](index), dt)
    inf = ir.Constant(x.type, float("inf"))
    return i1_to_pred(b, b.fcmp_ordered("<", call_intrinsic(b, "llvm.fabs", [x]), inf))


def _convert(em, instr, ops, index):
    return convert(em.b, ops[0](index), _dtype(instr), instr.shape.dtype, em.no_nans)


def _bitcast_convert(em, instr, ops, index):
    """The same bits: storage types of one width are bitcast, sub-byte values (i8 with
    the value in its low bits) pass as they are."""
    x = ops[0](index)
    ty = llvm_type(instr.shape.dtype)
    return x if x.type == ty else em.b.bitcast(x, ty)


def _float_max(em, x, y):
    # NaN-propagating: a NaN x is taken, and a NaN y fails x > y so y is taken. One
    # compare and blend fewer than testing both for NaN: pooling runs this per element.
    b = em.b
    if em.no_nans:
        return b.select(b.fcmp_ordered(">", x, y), x, y)
    return b.select(b.or_(b.fcmp_ordered(">", x, y), b.fcmp_unordered("uno", x, x)), x, y)


def _float_min(em, x, y):
    b = em.b
    if em.no_nans:
        return b.select(b.fcmp_ordered("<", x, y), x, y)
    return b.select(b.or_(b.fcmp_ordered("<", x, y), b.fcmp_unordered("uno", x, x)), x, y)


def _int_max(em, x, y, dt):
    cmp = em.b.icmp_unsigned if is_unsigned_like(dt) else em.b.icmp_signed
    return em.b.select(cmp(">", x, y), x, y)


def _int_min(em, x, y, dt):
    cmp = em.b.icmp_unsigned if is_unsigned_like(dt) else em.b.icmp_signed
    return em.b.select(cmp("<", x, y), x, y)


def _int_divide(em, x, y, dt):
    """XLA: x / 0 = -1 (all ones), INT_MIN / -1 = INT_MIN; never traps."""
    b = em.b
    zero = b.icmp_unsigned("==", y, _zero(y))
    ones = ir.Constant(x.type, -1)
    if is_unsigned_like(dt):
        safe = b.select(zero, ir.Constant(y.type, 1), y)
        return b.select(zero, ones, b.udiv(x, safe))
    int_min = ir.Constant(x.type, -(1 << (dt.bits - 1)))
    overflow = b.and_(b.icmp_signed("==", x, int_min), b.icmp_signed("==", y, ones))
    safe = b.select(b.or_(zero, overflow), ir.Constant(y.type, 1), y)
    q = b.sdiv(x, safe)
    return b.select(zero, ones, b.select(overflow, int_min, q))


def _int_remainder(em, x, y, dt):
    """XLA: x % 0 = x, INT_MIN % -1 = 0; the sign follows the dividend (C semantics)."""
    b = em.b
    zero = b.icmp_unsigned("==", y, _zero(y))
    if is_unsigned_like(dt):
        safe = b.select(zero, ir.Constant(y.type, 1), y)
        return b.select(zero, x, b.urem(x, safe))
    ones = ir.Constant(x.type, -1)
    overflow = b.icmp_signed("==", y, ones)      # x % -1 is 0 for every x
    safe = b.select(b.or_(zero, overflow), ir.Constant(y.type, 1), y)
    r = b.srem(x, safe)
    return b.select(zero, x, b.select(overflow, _zero(x), r))


def _round_even(em, x):
    """rint. On hard-float ARM by adding and subtracting 2**23 (2**52 for f64), whose
    sum rounds to nearest even: FPv4 has no rounding instruction, and LLVM's libcall
    for rint would pass the value in core registers to a C library that takes it in s0
    (see _float_remainder). Values of 2**23 and more are integers already."""
    b = em.b
    if em.float_abi != "hard":
        return call_intrinsic(b, "llvm.rint", [x])
    big = ir.Constant(x.type, 2.0 ** (52 if isinstance(x.type, ir.DoubleType) else 23))
    a = call_intrinsic(b, "llvm.fabs", [x])
    r = call_intrinsic(b, "llvm.copysign", [b.fsub(b.fadd(a, big), big), x])
    return b.select(b.fcmp_ordered("<", a, big), r, x)


def _float_remainder(em, x, y):
    name = "fmodf" if isinstance(x.type, ir.FloatType) else "fmod"
    em.libcalls.add(name)
    if em.float_abi != "hard":
        return em.b.frem(x, y)
    # LLVM's libcall for frem follows the float ABI of the target options, which
    # llvmlite leaves soft; an ARM hard-float C library takes the arguments in s0/d0.
    module = em.b.module
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(x.type, [x.type, x.type]), name)
        fn.calling_convention = "arm_aapcs_vfpcc"
        fn.attributes.add("nounwind")
    return em.b.call(fn, [x, y])


def _int_power(em, x, y, dt):
    """Exponentiation by squaring over every bit of the exponent; a negative exponent
    gives 0 except for bases 1 and -1 (XLA's integer pow)."""
    b = em.b
    ty = x.type
    one = ir.Constant(ty, 1)
    acc, base, exp = (alloca_once(b, ty, name) for name in ("pow.acc", "pow.base", "pow.exp"))
    b.store(one, acc)
    b.store(x, base)
    b.store(y, exp)
    with for_range(b, dt.bits, "pow"):
        e, a, s = (b.load(p, typ=ty) for p in (exp, acc, base))
        b.store(b.select(b.trunc(e, I1), b.mul(a, s), a), acc)
        b.store(b.mul(s, s), base)
        b.store(b.lshr(e, one), exp)
    result = b.load(acc, typ=ty)
    if is_unsigned_like(dt):
        return result
    odd = b.trunc(y, I1)
    minus_one = ir.Constant(ty, -1)
    neg = b.select(b.icmp_signed("==", x, one), one,
                   b.select(b.icmp_signed("==", x, minus_one),
                            b.select(odd, minus_one, one), _zero(x)))
    return b.select(b.icmp_signed("<", y, _zero(y)), neg, result)


def _shift(kind: str):
    """Shifts by an amount >= the bit width (as unsigned) give 0, or the sign fill for an
    arithmetic right shift, as in XLA (LLVM would give poison). Sub-byte values arrive
    extended to 8 bits: a logical shift sees only the value's bits, an arithmetic one
    its sign extension."""
    def fn(em, x, y, dt):
        b = em.b
        if dt.is_sub_byte:
            mask = ir.Constant(y.type, (1 << dt.bits) - 1)
            y = b.and_(y, mask)                       # the amount as an unsigned s4/u4
            if kind == "lshr":
                x = b.and_(x, mask)
            elif kind == "ashr":
                spare = ir.Constant(x.type, 8 - dt.bits)
                x = b.ashr(b.shl(x, spare), spare)
        width = ir.Constant(y.type, dt.bits)
        oob = b.icmp_unsigned(">=", y, width)
        safe = b.select(oob, _zero(y), y)
        if kind == "shl":
            return b.select(oob, _zero(x), b.shl(x, safe))
        if kind == "lshr":
            return b.select(oob, _zero(x), b.lshr(x, safe))
        return b.ashr(x, b.select(oob, ir.Constant(y.type, dt.bits - 1), y))
    return fn


_FLOAT_COMPARE = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def _compare(em, instr, ops, index):
    """Floats compare ordered (false on NaN) except NE, which is unordered (true on NaN)."""
    b = em.b
    dt = _dtype(instr)
    x, y = ops[0](index), ops[1](index)
    op = _FLOAT_COMPARE[instr.attrs["direction"]]
    x, y = to_compute(b, x, dt), to_compute(b, y, dt)
    if dt.is_float:
        c = (b.fcmp_unordered if op == "!=" else b.fcmp_ordered)(op, x, y)
    else:
        c = (b.icmp_unsigned if is_unsigned_like(dt) else b.icmp_signed)(op, x, y)
    return i1_to_pred(b, c)


def _select(em, instr, ops, index):
    b = em.b
    return b.select(pred_to_i1(b, ops[0](index)), ops[1](index), ops[2](index))


def _clamp(em, instr, ops, index):
    """clamp(lo, x, hi) = min(max(x, lo), hi); the bounds may be scalars."""
    lo_shape, _, hi_shape = (o.shape for o in instr.operands)
    lo = ops[0]([] if lo_shape.rank == 0 else index)
    hi = ops[2]([] if hi_shape.rank == 0 else index)
    dt = instr.shape.dtype
    b = em.b
    lo, x, hi = (to_compute(b, v, dt) for v in (lo, ops[1](index), hi))
    if dt.is_float:
        return from_compute(b, _float_min(em, _float_max(em, x, lo), hi), dt)
    return from_compute(b, _int_min(em, _int_max(em, x, lo, dt), hi, dt), dt)


def _iota(em, instr, ops, index):
    return convert(em.b, index[instr.attrs["iota_dimension"]], dtypes.S64, instr.shape.dtype)


# --- sources and structure -------------------------------------------------

def _constant(em, instr, ops, index):
    """Uniform constants (scalars, splats) become immediates LLVM can fold; others load
    from the constant's global."""
    dt = instr.shape.dtype
    if _is_uniform(instr.literal):
        return immediate(instr.literal.reshape(-1)[0], dt)
    b = em.b
    ty = llvm_type(dt)
    g = em.constants.global_for(instr)
    linear = linearize(b, index, instr.shape.dims, instr.shape.layout)
    return b.load(gep_elem(b, g, ty, linear), typ=ty)


def _is_uniform(literal: np.ndarray) -> bool:
    """All elements bit-identical (compared as bytes, so NaN splats count too)."""
    flat = np.ascontiguousarray(literal).reshape(-1)
    if flat.size == 0:
        return False
    raw = flat.view(np.uint8).reshape(flat.size, -1)
    return bool((raw[: min(2, len(raw))] == raw[0]).all() and (raw == raw[0]).all())


def _parameter(em, instr, ops, index):
    # Inside a fused or reducer computation: the caller supplies the parameter's generator.
    return ops[0](index)


def _fusion(em, instr, ops, index):
    return em.computation_generator(instr.called[0], ops)(index)


def _tuple(em, instr, ops, index):
    return tuple(op(index) for op in ops)


def _get_tuple_element(em, instr, ops, index):
    return ops[0](index)[instr.attrs["index"]]


# --- movement: index remaps ------------------------------------------------

def _identity(em, instr, ops, index):
    return ops[0](index)


def _broadcast(em, instr, ops, index):
    operand = instr.operands[0].shape
    out = instr.shape
    src = [i64(0) if operand.dims[i] == 1 and out.dims[d] != 1 else index[d]
           for i, d in enumerate(instr.attrs["dimensions"])]
    return ops[0](src)


def _reshape(em, instr, ops, index):
    return ops[0](reshape_index(em.b, index, instr.shape.dims, instr.operands[0].shape.dims))


def _bitcast(em, instr, ops, index):
    # Same bytes: linearize in the result's layout, delinearize in the operand's.
    b = em.b
    out, src = instr.shape, instr.operands[0].shape
    linear = linearize(b, index, out.dims, out.layout)
    return ops[0](delinearize(b, linear, src.dims, src.layout))


def _transpose(em, instr, ops, index):
    perm = instr.attrs["dimensions"]
    src: list = [None] * len(perm)
    for i, p in enumerate(perm):
        src[p] = index[i]
    return ops[0](src)


def _slice(em, instr, ops, index):
    b = em.b
    s = instr.attrs["slice"]
    src = []
    for i, start, stride in zip(index, s.starts, s.strides):
        v = i if stride == 1 else b.mul(i, i64(stride), flags=["nuw", "nsw"])
        src.append(v if start == 0 else b.add(v, i64(start), flags=["nuw", "nsw"]))
    return ops[0](src)


def _reverse(em, instr, ops, index):
    b = em.b
    dims = instr.shape.dims
    rev = set(instr.attrs["dimensions"])
    return ops[0]([b.sub(i64(dims[d] - 1), v) if d in rev else v for d, v in enumerate(index)])


def _pad(em, instr, ops, index):
    """Branch-free: read the operand at a clamped (always valid) index and select the pad
    value where the output position is an edge or an interior gap."""
    b = em.b
    operand = instr.operands[0].shape
    pad_value = ops[1]([])
    if operand.num_elements == 0:
        return pad_value
    p = instr.attrs["padding"]
    inside = ir.Constant(I1, 1)
    src = []
    for d, i in enumerate(index):
        lo, hi, it, n = p.low[d], p.high[d], p.interior[d], operand.dims[d]
        if lo == hi == it == 0:
            src.append(i)
            continue
        t = b.sub(i, i64(lo)) if lo else i
        q = t
        if it:
            q = b.sdiv(t, i64(it + 1))
            inside = b.and_(inside, b.icmp_signed("==", b.srem(t, i64(it + 1)), i64(0)))
        in_range = b.icmp_unsigned("<", q, i64(n))    # a negative q is a huge unsigned
        inside = b.and_(inside, in_range)
        src.append(b.select(in_range, q, i64(0)))
    return b.select(inside, ops[0](src), pad_value)


def _concatenate(em, instr, ops, index):
    """Branch on the concatenated coordinate; only the chosen operand is generated."""
    b = em.b
    d = instr.attrs["dimension"]
    parts = [(k, o.shape.dims[d]) for k, o in enumerate(instr.operands) if o.shape.dims[d]]
    fn = b.block.function
    merge = fn.append_basic_block("concat.merge")
    incoming = []
    offset = 0
    for n, (k, size) in enumerate(parts):
        local = list(index)
        local[d] = b.sub(index[d], i64(offset)) if offset else index[d]
        if n == len(parts) - 1:
            incoming.append((ops[k](local), b.block))
            b.branch(merge)
            break
        take, rest = fn.append_basic_block("concat.take"), fn.append_basic_block("concat.rest")
        b.cbranch(b.icmp_signed("<", index[d], i64(offset + size)), take, rest)
        b.position_at_end(take)
        incoming.append((ops[k](local), b.block))
        b.branch(merge)
        b.position_at_end(rest)
        offset += size
    b.position_at_end(merge)
    phi = b.phi(incoming[0][0].type, name="concat")
    for v, blk in incoming:
        phi.add_incoming(v, blk)
    return phi


def _gather(em, instr, ops, index):
    """XLA gather: start indices are read from operand 1 and clamped so that the whole
    slice stays inside the operand; a batching dim reads the operand at the batch
    position itself."""
    b = em.b
    x, idx = (o.shape for o in instr.operands)
    dn, sizes = instr.attrs["dimension_numbers"], instr.attrs["slice_sizes"]
    batch = [v for d, v in enumerate(index) if d not in dn.offset_dims]
    offsets = [index[d] for d in dn.offset_dims]
    kept = [d for d in range(x.rank)
            if d not in dn.collapsed_slice_dims + dn.operand_batching_dims]
    src = [i64(0)] * x.rank
    for d, v in zip(kept, offsets):
        src[d] = v
    ivd = dn.index_vector_dim
    for od, sd in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
        src[od] = batch[sd if sd < ivd else sd - 1]
    for k, d in enumerate(dn.start_index_map):
        at = batch[:ivd] + [i64(k)] + batch[ivd:] if ivd < idx.rank else batch
        start = clamped_index(b, ops[1](at), idx.dtype, x.dims[d] - sizes[d])
        src[d] = b.add(start, src[d])
    return ops[0](src)


def clamped_starts(em, instr, ops, first: int, sizes) -> list:
    """XLA's dynamic slice starts: operand ``first + d`` (an integer scalar) as i64,
    clamped to [0, dims[d] - sizes[d]] so that the slice stays inside the operand."""
    x = instr.operands[0].shape
    return [clamped_index(em.b, ops[first + d]([]), instr.operands[first + d].shape.dtype,
                          x.dims[d] - sizes[d]) for d in range(x.rank)]


def _dynamic_slice(em, instr, ops, index):
    starts = clamped_starts(em, instr, ops, 1, instr.attrs["dynamic_slice_sizes"])
    return ops[0]([em.b.add(s, i, flags=["nsw"]) for s, i in zip(starts, index)])


def _dynamic_update_slice(em, instr, ops, index):
    """The update where the index falls in its window, else the operand (branch-free:
    the update is read at a clamped, always valid index)."""
    b = em.b
    sizes = instr.operands[1].shape.dims
    starts = clamped_starts(em, instr, ops, 2, sizes)
    inside = ir.Constant(I1, 1)
    src = []
    for i, s, n in zip(index, starts, sizes):
        t = b.sub(i, s)
        ok = b.icmp_unsigned("<", t, i64(n))             # a negative t is a huge unsigned
        inside = b.and_(inside, ok)
        src.append(b.select(ok, t, i64(0)))
    return b.select(inside, ops[1](src), ops[0](index))
def index_value(b: ir.IRBuilder, v: ir.Value, dtype) -> ir.Value:
    """An index element as i64; unsigned values beyond the i64 range saturate (they are
    out of range either way)."""
    if is_unsigned_like(dtype) and dtype.bits == 64:
        return b.select(b.icmp_signed("<", v, i64(0)), i64((1 << 63) - 1), v)
    return convert(b, v, dtype, dtypes.S64)


def clamped_index(b: ir.IRBuilder, v: ir.Value, dtype, limit: int) -> ir.Value:
    """An index element as i64, clamped to [0, limit]."""
    start = index_value(b, v, dtype)
    start = b.select(b.icmp_signed("<", start, i64(0)), i64(0), start)
    return b.select(b.icmp_signed(">", start, i64(limit)), i64(limit), start)


# --- reductions ------------------------------------------------------------

def _accumulators(em, inits):
    accs = [alloca_once(em.b, v.type, "acc") for v in inits]
    for a, v in zip(accs, inits):
        em.b.store(v, a)
    return accs


def _accumulate(em, comp, accs, values):
    b = em.b
    result = em.apply(comp, [b.load(a, typ=a.allocated_type) for a in accs] + list(values))
    results = result if isinstance(result, tuple) else (result,)
    for a, v in zip(accs, results):
        b.store(v, a)


def _results(em, accs):
    vals = tuple(em.b.load(a, typ=a.allocated_type) for a in accs)
    return vals if len(vals) > 1 else vals[0]


# Partial results a lane-split reduction keeps (see _reduce): up to CHAINS vectors of
# LANES independent lanes, which hide the reducer's latency (a NaN-propagating maximum is
# three dependent instructions) and which the SLP vectorizer fills with one vector load
# (or the vector computation of a fused producer) each per step.
LANES = 8
CHAINS = 4


def _reduce(em, instr, ops, index):
    """Loop over the reduced dimensions (last one innermost) folding with to_apply; where
    _splits_into_lanes allows, the innermost dim is folded into vectors of partial
    results (``_reduce_in_lanes``)."""
    n = len(instr.operands) // 2
    dims = instr.attrs["dimensions"]
    shape = instr.operands[0].shape
    full: list = [None] * shape.rank
    kept = [d for d in range(shape.rank) if d not in dims]
    for d, v in zip(kept, index):
        full[d] = v
    inner = max(dims, default=None)
    if inner is not None and shape.dims[inner] >= 2 * LANES and _splits_into_lanes(instr):
        return _reduce_in_lanes(em, instr, ops, full, inner)
    accs = _accumulators(em, [ops[n + k]([]) for k in range(n)])
    comp = instr.called[0]
    with ExitStack() as loops:
        for d in sorted(dims):
            full[d] = loops.enter_context(for_range(em.b, shape.dims[d], f"r{d}"))
        _accumulate(em, comp, accs, [ops[k](full) for k in range(n)])
    return _results(em, accs)


def _reduce_in_lanes(em, instr, ops, full, inner: int):
    """The innermost reduced dim folded as element i into lane i % (chains * LANES) of
    ``chains`` vector accumulators (each starting at init, init_is_neutral), the
    chains then combined pairwise, the lanes by halves."""
    b, comp = em.b, instr.called[0]
    shape = instr.operands[0].shape
    extent = shape.dims[inner]
    chains = max(1, min(CHAINS, extent // (2 * LANES)))
    width = chains * LANES
    init = ops[1]([])
    vty = ir.VectorType(init.type, LANES)
    accs = [alloca_once(b, vty, "acc") for _ in range(chains)]
    for acc in accs:
        b.store(_splat_value(b, init, LANES), acc)

    with ExitStack() as loops:
        for d in sorted(instr.attrs["dimensions"]):
            if d != inner:
                full[d] = loops.enter_context(for_range(b, shape.dims[d], f"r{d}"))
        whole = extent - extent % width
        with for_range(b, whole, f"r{inner}", step=width) as start:
            for c, acc in enumerate(accs):
                vec = ir.Constant(vty, None)
                for j in range(LANES):
                    at = c * LANES + j
                    full[inner] = b.add(start, i64(at)) if at else start
                    vec = b.insert_element(vec, ops[0](list(full)), i64(j))
                b.store(em.apply(comp, [b.load(acc, typ=vty), vec]), acc)
        for at in range(whole, extent):
            acc, j = accs[(at - whole) // LANES], i64((at - whole) % LANES)
            full[inner] = i64(at)
            value = em.apply(comp, [b.extract_element(b.load(acc, typ=vty), j),
                                    ops[0](list(full))])
            b.store(b.insert_element(b.load(acc, typ=vty), value, j), acc)
    values = [b.load(acc, typ=vty) for acc in accs]
    while len(values) > 1:
        values = [em.apply(comp, values[i:i + 2]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    value, lanes = values[0], LANES
    while lanes > 1:
        lanes //= 2
        halves = [b.shuffle_vector(value, value, ir.Constant(ir.VectorType(ir.IntType(32),
                                                                          lanes),
                                                             list(range(at, at + lanes))))
                  for at in (0, lanes)]
        value = em.apply(comp, halves)
    return b.extract_element(value, i64(0))


def _splat_value(b: ir.IRBuilder, x: ir.Value, lanes: int) -> ir.Value:
    vty = ir.VectorType(x.type, lanes)
    one = b.insert_element(ir.Constant(vty, None), x, ir.Constant(ir.IntType(32), 0))
    return b.shuffle_vector(one, ir.Constant(vty, None),
                            ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


# Reducers whose result does not depend on the order of the elements: exact for these
# ops, and for float add and multiply in f32/f64 up to rounding (XLA leaves the order of
# a reduction unspecified). f16 and bf16 sums stay in order: they round at every step,
# and numpy (the oracle) sums bf16 sequentially.
_REORDERABLE = frozenset({Opcode.ADD, Opcode.MULTIPLY, Opcode.MAXIMUM, Opcode.MINIMUM,
                          Opcode.AND, Opcode.OR, Opcode.XOR})


def _splits_into_lanes(instr) -> bool:
    """Whether a reduce may fold its innermost dim as LANES partial results: one operand,
    a reducer op(x, y) of _REORDERABLE, and an init value that each lane may fold in
    (init_is_neutral)."""
    root = instr.called[0].root
    if len(instr.operands) != 2 or root.opcode not in _REORDERABLE:
        return False
    if {o.opcode for o in root.operands} != {Opcode.PARAMETER} or \
            {o.number for o in root.operands} != {0, 1}:
        return False
    dt = root.shape.dtype
    if dt.is_float and dt.bits < 32 and root.opcode in (Opcode.ADD, Opcode.MULTIPLY):
        return False
    if dt.is_narrow_float or dt.is_sub_byte or dt.name == "f16":
        return False        # their rules convert with scalar constants: no vector lanes
    return init_is_neutral(instr)


# Reducers for which folding the init value in once more changes nothing, whatever it is:
# the accumulator starts at init and these are idempotent (max(acc, init) == acc).
_IDEMPOTENT_REDUCERS = frozenset({Opcode.MAXIMUM, Opcode.MINIMUM, Opcode.AND, Opcode.OR})
_IDENTITY = {Opcode.ADD: 0, Opcode.MULTIPLY: 1}


def init_is_neutral(instr) -> bool:
    """Whether folding the init value in once more changes nothing: true for idempotent
    reducers and for add/multiply whose init is 0/1. Reduce-window may then skip window
    positions in the padding (or between dilated base elements), where XLA folds init
    in, and a lane-split reduce may start every lane at init."""
    n = len(instr.operands) // 2
    root = instr.called[0].root
    if n != 1 or root.opcode not in _IDEMPOTENT_REDUCERS | set(_IDENTITY):
        return False
    if root.opcode in _IDEMPOTENT_REDUCERS:
        return True
    init = instr.operands[1]
    return init.opcode is Opcode.CONSTANT and bool(init.literal == _IDENTITY[root.opcode])


# Windows of at most this many positions are unrolled (pooling windows: 3x3 ... 7x7):
# with the positions constant, each bounds check is a select LLVM can hoist or drop, and
# the loop over the minor dimension vectorizes; larger windows keep a loop.
UNROLLED_WINDOW = 64


def window_interior(instr, d: int) -> tuple[int, int]:
    """The range [lo, hi) of reduce-window ``instr``'s output indices in dimension ``d``
    whose whole window lies inside the operand (no padding, no base dilation); empty
    (lo >= hi) if none."""
    w = instr.attrs["window"]
    if w.lhs_dilation[d] != 1:
        return 0, 0
    s, extent = w.stride[d], instr.operands[0].shape.dims[d]
    lo = -(-w.pad_low[d] // s)
    hi = (extent - 1 + w.pad_low[d] - (w.size[d] - 1) * w.rhs_dilation[d]) // s + 1
    return max(lo, 0), min(hi, instr.shape.leaves()[0].dims[d])


def _reduce_window(em, instr, ops, index):
    """Fold the window's positions with to_apply; positions in the padding or between
    dilated base elements hold the init value. Small windows are unrolled: an index
    that may fall outside is checked, read at 0 instead and its value replaced by init
    (a select, no branch), and not checked where the output index range makes it
    inside (``em.index_ranges``: the loop emitter's interior/border split)."""
    w = instr.attrs["window"]
    if int(np.prod(w.size)) > UNROLLED_WINDOW:
        return _reduce_window_loop(em, instr, ops, index)
    b = em.b
    n = len(instr.operands) // 2
    shape = instr.operands[0].shape
    out_dims = instr.shape.leaves()[0].dims
    ranges = em.index_ranges.get(id(instr), {})
    inits = [ops[n + k]([]) for k in range(n)]
    accs = inits
    comp = instr.called[0]
    for ks in np.ndindex(*w.size):
        inside = None
        src = []
        for d, k in enumerate(ks):
            s, rd, pl = w.stride[d], w.rhs_dilation[d], w.pad_low[d]
            p = b.mul(index[d], i64(s)) if s != 1 else index[d]
            if k * rd - pl:
                p = b.add(p, i64(k * rd - pl))
            conds = []
            if w.lhs_dilation[d] != 1:
                dil = i64(w.lhs_dilation[d])
                conds.append(b.icmp_signed("==", b.srem(p, dil), i64(0)))
                p = b.sdiv(p, dil)
            lo, hi = ranges.get(d, (0, out_dims[d]))
            if w.lhs_dilation[d] != 1 or not (
                    lo * s + k * rd - pl >= 0 and (hi - 1) * s + k * rd - pl < shape.dims[d]):
                conds.append(b.icmp_unsigned("<", p, i64(shape.dims[d])))
            for c in conds:
                inside = c if inside is None else b.and_(inside, c)
            if conds:
                p = b.select(conds[-1], p, i64(0))
            src.append(p)
        values = [ops[k](src) for k in range(n)]
        if inside is not None:
            values = [b.select(inside, v, i) for v, i in zip(values, inits)]
        result = em.apply(comp, list(accs) + values)
        accs = result if isinstance(result, tuple) else (result,)
    return tuple(accs) if n > 1 else accs[0]


def _reduce_window_loop(em, instr, ops, index):
    """Loop over the window; positions in the padding or between dilated base elements
    hold the init value (skipped where that cannot change the result)."""
    b = em.b
    n = len(instr.operands) // 2
    w = instr.attrs["window"]
    shape = instr.operands[0].shape
    accs = _accumulators(em, [ops[n + k]([]) for k in range(n)])
    with ExitStack() as loops:
        inside = ir.Constant(I1, 1)
        src = []
        for d in range(shape.rank):
            k = loops.enter_context(for_range(b, w.size[d], f"w{d}"))
            p = b.mul(index[d], i64(w.stride[d])) if w.stride[d] != 1 else index[d]
            p = b.add(p, b.mul(k, i64(w.rhs_dilation[d])) if w.rhs_dilation[d] != 1 else k)
            if w.pad_low[d]:
                p = b.sub(p, i64(w.pad_low[d]))
            if w.lhs_dilation[d] != 1:
                dil = i64(w.lhs_dilation[d])
                inside = b.and_(inside, b.icmp_signed("==", b.srem(p, dil), i64(0)))
                p = b.sdiv(p, dil)
            inside = b.and_(inside, b.icmp_unsigned("<", p, i64(shape.dims[d])))
            src.append(p)
        if init_is_neutral(instr):
            with b.if_then(inside):
                _accumulate(em, instr.called[0], accs, [ops[k](src) for k in range(n)])
        else:
            with b.if_else(inside) as (then, padding):
                with then:
                    _accumulate(em, instr.called[0], accs, [ops[k](src) for k in range(n)])
                with padding:
                    _accumulate(em, instr.called[0], accs, [ops[n + k]([]) for k in range(n)])
    return _results(em, accs)


# --- dot and convolution: one output element, looping over what it contracts --------------

def _mul_add(em, instr, acc, x, y):
    """acc + x * y in the result's compute type (integer operands widened to it first)."""
    b, out = em.b, instr.shape.dtype
    xs, ys = (convert(b, v, o.shape.dtype, out) for v, o in zip((x, y), instr.operands))
    xs, ys = to_compute(b, xs, out), to_compute(b, ys, out)
    if out.is_float:
        return b.fadd(acc, b.fmul(xs, ys))
    return b.add(acc, b.mul(xs, ys))


def _accumulate_over(em, instr, extents, body):
    """An accumulator of the result's compute type, ``body(indices, acc)`` -> new acc in
    loops over ``extents``; returns the sum narrowed to the result type."""
    b, out = em.b, instr.shape.dtype
    ty = to_compute(b, ir.Constant(llvm_type(out), 0), out).type
    acc = alloca_once(b, ty, "dot.acc")
    b.store(ir.Constant(ty, 0.0 if out.is_float else 0), acc)
    with ExitStack() as loops:
        idx = [loops.enter_context(for_range(b, n, "k")) for n in extents]
        b.store(body(idx, b.load(acc, typ=ty)), acc)
    return from_compute(b, b.load(acc, typ=ty), out)


def _dot(em, instr, ops, index):
    lhs, rhs = (o.shape for o in instr.operands)
    dn = instr.attrs["dimension_numbers"]
    nb = len(dn.lhs_batch)
    lhs_free = [d for d in range(lhs.rank) if d not in dn.lhs_batch + dn.lhs_contracting]
    rhs_free = [d for d in range(rhs.rank) if d not in dn.rhs_batch + dn.rhs_contracting]
    a_idx, b_idx = [None] * lhs.rank, [None] * rhs.rank
    for i, (la, rb) in enumerate(zip(dn.lhs_batch, dn.rhs_batch)):
        a_idx[la] = b_idx[rb] = index[i]
    for i, d in enumerate(lhs_free):
        a_idx[d] = index[nb + i]
    for i, d in enumerate(rhs_free):
        b_idx[d] = index[nb + len(lhs_free) + i]

    def body(ks, acc):
        for k, la, rb in zip(ks, dn.lhs_contracting, dn.rhs_contracting):
            a_idx[la] = b_idx[rb] = k
        return _mul_add(em, instr, acc, ops[0](list(a_idx)), ops[1](list(b_idx)))
    return _accumulate_over(em, instr, [lhs.dims[d] for d in dn.lhs_contracting], body)


def _convolution(em, instr, ops, index):
    """XLA's convolution (any dimension numbers, padding, dilations, feature groups);
    positions in the padding or between base-dilated elements contribute nothing."""
    b = em.b
    x, k = (o.shape for o in instr.operands)
    dn, w = instr.attrs["dimension_numbers"], instr.attrs["window"]
    if instr.attrs.get("batch_group_count", 1) != 1:
        raise XlacError(f"%{instr.name}: batch_group_count > 1 has no elemental rule")
    groups = instr.attrs.get("feature_group_count", 1)
    cin_g = k.dims[dn.kernel_input]
    oc = index[dn.output_feature]
    group = b.udiv(oc, i64(instr.shape.dims[dn.output_feature] // groups))
    extents = [cin_g] + list(w.size)

    def body(ks, acc):
        ci, taps = ks[0], ks[1:]
        x_idx, k_idx = [None] * x.rank, [None] * k.rank
        x_idx[dn.input_batch] = index[dn.output_batch]
        x_idx[dn.input_feature] = b.add(b.mul(group, i64(cin_g)), ci)
        k_idx[dn.kernel_output], k_idx[dn.kernel_input] = oc, ci
        inside = ir.Constant(I1, 1)
        for i, t in enumerate(taps):
            k_idx[dn.kernel_spatial[i]] = t
            p = b.add(b.mul(index[dn.output_spatial[i]], i64(w.stride[i])),
                      b.mul(t, i64(w.rhs_dilation[i])))
            p = b.sub(p, i64(w.pad_low[i]))
            if w.lhs_dilation[i] != 1:
                dil = i64(w.lhs_dilation[i])
                inside = b.and_(inside, b.icmp_signed("==", b.srem(p, dil), i64(0)))
                p = b.sdiv(p, dil)
            n = x.dims[dn.input_spatial[i]]
            inside = b.and_(inside, b.icmp_unsigned("<", p, i64(n)))
            x_idx[dn.input_spatial[i]] = b.select(inside, p, i64(0))
        summed = _mul_add(em, instr, acc, ops[0](x_idx), ops[1](k_idx))
        return b.select(inside, summed, acc)
    return _accumulate_over(em, instr, extents, body)


_TRANSCENDENTAL_UNARY = {
    Opcode.ACOS: "acos", Opcode.ACOSH: "acosh", Opcode.ASIN: "asin", Opcode.ASINH: "asinh",
    Opcode.ATAN: "atan", Opcode.ATANH: "atanh", Opcode.COSH: "cosh", Opcode.SINH: "sinh",
    Opcode.CBRT: "cbrt", Opcode.COSINE: "cos", Opcode.ERF: "erf", Opcode.EXP: "exp",
    Opcode.EXPM1: "expm1", Opcode.LOG: "log", Opcode.LOG1P: "log1p",
    Opcode.LOGISTIC: "logistic", Opcode.SINE: "sin", Opcode.TAN: "tan", Opcode.TANH: "tanh",
}

RULES: dict[Opcode, Callable] = {
    # sources and structure
    Opcode.PARAMETER: _parameter,
    Opcode.CONSTANT: _constant,
    Opcode.IOTA: _iota,
    Opcode.FUSION: _fusion,
    Opcode.TUPLE: _tuple,
    Opcode.GET_TUPLE_ELEMENT: _get_tuple_element,
    # element-wise unary
    **{op: _unary(_float_fn(name)) for op, name in _TRANSCENDENTAL_UNARY.items()},
    Opcode.ABS: _unary(_llvm_fn("fabs"), _int_abs),
    Opcode.CEIL: _unary(_llvm_fn("ceil")),
    Opcode.FLOOR: _unary(_llvm_fn("floor")),
    Opcode.IS_FINITE: _is_finite,
    Opcode.NEGATE: _unary(lambda em, x: em.b.fneg(x), lambda em, x, dt: em.b.neg(x)),
    Opcode.NOT: _unary(None, _not),
    Opcode.ROUND_NEAREST_AFZ: _unary(_llvm_fn("round")),
    Opcode.ROUND_NEAREST_EVEN: _unary(_round_even),
    Opcode.RSQRT: _unary(_rsqrt),
    Opcode.SIGN: _unary(_float_sign, _int_sign),
    Opcode.SQRT: _unary(_llvm_fn("sqrt")),
    Opcode.CONVERT: _convert,
    Opcode.BITCAST_CONVERT: _bitcast_convert,
    # element-wise binary
    Opcode.ADD: _binary(lambda em, x, y: em.b.fadd(x, y), lambda em, x, y, dt: em.b.add(x, y)),
    Opcode.SUBTRACT: _binary(lambda em, x, y: em.b.fsub(x, y),
                             lambda em, x, y, dt: em.b.sub(x, y)),
    Opcode.MULTIPLY: _binary(lambda em, x, y: em.b.fmul(x, y),
                             lambda em, x, y, dt: em.b.mul(x, y)),
    Opcode.DIVIDE: _binary(lambda em, x, y: em.b.fdiv(x, y), _int_divide),
    Opcode.REMAINDER: _binary(_float_remainder, _int_remainder),
    Opcode.MAXIMUM: _binary(_float_max, _int_max),
    Opcode.MINIMUM: _binary(_float_min, _int_min),
    Opcode.POWER: _binary(_float_fn("pow"), _int_power),
    Opcode.ATAN2: _binary(_float_fn("atan2")),
    Opcode.AND: _binary(None, lambda em, x, y, dt: em.b.and_(x, y)),
    Opcode.OR: _binary(None, lambda em, x, y, dt: em.b.or_(x, y)),
    Opcode.XOR: _binary(None, lambda em, x, y, dt: em.b.xor(x, y)),
    Opcode.SHIFT_LEFT: _binary(None, _shift("shl")),
    Opcode.SHIFT_RIGHT_ARITHMETIC: _binary(None, _shift("ashr")),
    Opcode.SHIFT_RIGHT_LOGICAL: _binary(None, _shift("lshr")),
    Opcode.COMPARE: _compare,
    # element-wise ternary
    Opcode.SELECT: _select,
    Opcode.CLAMP: _clamp,
    # movement
    Opcode.BITCAST: _bitcast,
    Opcode.BROADCAST: _broadcast,
    Opcode.CONCATENATE: _concatenate,
    Opcode.COPY: _identity,
    Opcode.GATHER: _gather,
    Opcode.PAD: _pad,
    Opcode.RESHAPE: _reshape,
    Opcode.REVERSE: _reverse,
    Opcode.SLICE: _slice,
    Opcode.TRANSPOSE: _transpose,
    Opcode.DYNAMIC_SLICE: _dynamic_slice,
    Opcode.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
    # reductions
    Opcode.REDUCE: _reduce,
    Opcode.REDUCE_WINDOW: _reduce_window,
    # contractions (inside output fusions; alone they are kernels)
    Opcode.DOT: _dot,
    Opcode.CONVOLUTION: _convolution,
}
