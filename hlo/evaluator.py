"""The numpy reference evaluator: one rule per opcode, following XLA's semantics.

    evaluate(module, args) -> [one array per model output]
    evaluate_computation(comp, args) -> array, or tuple of arrays for tuple shapes
    evaluate_instruction(instr, operand_values) -> value   (constant folding uses it)

Values are numpy arrays in the instruction's element type (f32 stays f32, pred
is numpy bool, the narrow types are ml_dtypes arrays) or tuples of values. Floats
narrower than f32 (f16, bf16, the float8 and float4 types) are computed in f32 and
rounded back after every op, as XLA's CPU backend does; integers narrower than a
byte are computed in 8 bits and wrapped back. Both happen in one place, ``_conform``.
A value returned by ``evaluate_instruction`` may share memory with its operands
(reshape and transpose are views): do not mutate it.
"""
from __future__ import annotations

import math
from math import prod
from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from . import dtypes
from .attributes import Window
from .errors import XlacError
from .ir import Computation, Instruction, Module
from .opcodes import ELEMENTWISE, Opcode
from .shape import Shape
from .shape_inference import window_output_size


# --- entry points ----------------------------------------------------------

def evaluate(module: Module, args) -> list[np.ndarray]:
    """Run the entry computation; ``args[i]`` is parameter i (cast to its element type)."""
    entry = module.entry
    params = entry.parameters
    if len(args) != len(params):
        raise XlacError(f"module {module.name} takes {len(params)} arguments, got {len(args)}")
    arrays = []
    for p, a in zip(params, args):
        a = np.asarray(a)
        if a.shape != p.shape.dims:
            raise XlacError(f"argument {p.number} (%{p.name}) has shape {a.shape}, "
                            f"expected {p.shape.dims}")
        arrays.append(a.astype(p.shape.dtype.np, copy=False))
    value = evaluate_computation(entry, arrays)
    # A tuple-shaped root (a tuple, or a variadic reduce) gives one output per element.
    outputs = list(value) if entry.root.shape.is_tuple else [value]
    # Copies: results must not alias the arguments or the module's literals.
    return [np.array(v, order="C") for v in outputs]


def evaluate_computation(comp: Computation, args) -> np.ndarray | tuple:
    """Evaluate ``comp`` with ``args[i]`` bound to parameter i."""
    params = comp.parameters
    if len(args) != len(params):
        raise XlacError(f"computation {comp.name} takes {len(params)} arguments, "
                        f"got {len(args)}")
    order = comp.reachable()
    last_use = {id(o): n for n, i in enumerate(order) for o in i.operands}
    values = {id(p): args[p.number] for p in params}
    for n, instr in enumerate(order):
        if instr.opcode is not Opcode.PARAMETER:
            values[id(instr)] = evaluate_instruction(
                instr, [values[id(o)] for o in instr.operands])
        # Drop values after their last use: whole CNNs run through here.
        for o in instr.operands:
            if last_use[id(o)] == n and o is not comp.root:
                values.pop(id(o), None)
    return values[id(comp.root)]


def evaluate_instruction(instr: Instruction, operand_values) -> np.ndarray | tuple:
    """The value of ``instr`` given the values of its operands."""
    # Integer overflow wraps and float overflow gives inf as in XLA: no warnings.
    with np.errstate(all="ignore"):
        return _conform(RULES[instr.opcode](instr, list(operand_values)), instr.shape)


def _conform(value, shape: Shape) -> np.ndarray | tuple:
    """Round to the instruction's element type (narrow floats were computed in f32)."""
    if shape.is_tuple:
        return tuple(value)
    return np.asarray(value, dtype=shape.dtype.np)


# Narrow types -> the numpy type they are computed in.
_WIDENED = {**{d.np: np.dtype(np.float32) for d in dtypes.ALL if d.is_narrow_float},
            **{d.np: np.dtype(f"{'i' if d.kind == 's' else 'u'}1")
               for d in dtypes.ALL if d.is_sub_byte}}


def _widen(x: np.ndarray) -> np.ndarray:
    """Narrow floats -> f32, sub-byte integers -> 8 bits, for computing; others as is."""
    x = np.asarray(x)
    wide = _WIDENED.get(x.dtype)
    return x if wide is None else x.astype(wide)


# --- sources and structure -------------------------------------------------

def _parameter(instr, ops):
    raise XlacError(f"parameter %{instr.name} has no value outside a call of its computation")


def _constant(instr, ops):
    if instr.literal is None:
        raise XlacError(f"constant %{instr.name} has no literal")
    return instr.literal


def _iota(instr, ops):
    s, d = instr.shape, instr.attrs["iota_dimension"]
    line = np.arange(s.dims[d]).astype(s.dtype.np)
    return np.broadcast_to(line.reshape([s.dims[d] if e == d else 1 for e in range(s.rank)]),
                           s.dims).copy()


def _tuple(instr, ops):
    return tuple(ops)


def _get_tuple_element(instr, ops):
    return ops[0][instr.attrs["index"]]


def _fusion(instr, ops):
    return evaluate_computation(instr.called[0], ops)


# --- element-wise ----------------------------------------------------------

def _elementwise(fn: Callable) -> Callable:
    """The rule of an element-wise op computing ``fn`` on its (widened) operands."""
    def rule(instr, ops):
        try:
            return fn(*[_widen(x) for x in ops])
        except TypeError:     # numpy has no loop for these types: e.g. and(f32, f32)
            raise _undefined(instr) from None
    return rule


def _undefined(instr) -> XlacError:
    types = ", ".join(str(o.shape.dtype) for o in instr.operands)
    return XlacError(f"%{instr.name}: {instr.opcode.text} is not defined for ({types})")


def _is_int(x: np.ndarray) -> bool:
    return x.dtype.kind in "iu"


_erf_object = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    return np.asarray(_erf_object(x), dtype=np.float64).astype(x.dtype)


def _round_half_away_from_zero(x):
    # x - trunc(x) is exact; floor(|x| + 0.5) is not (0.49999997f + 0.5f rounds to 1).
    t = np.trunc(x)
    return t + np.where(np.abs(x - t) >= 0.5, np.sign(x), 0)


def _int_div_rem(a, b):
    """C/XLA integer division: the quotient truncates toward zero and the remainder takes
    the dividend's sign; x/0 = -1 and x%0 = x; INT_MIN/-1 = INT_MIN and INT_MIN%-1 = 0."""
    zero = b == 0
    safe = np.where(zero, 1, b).astype(b.dtype)
    if a.dtype.kind == "i":
        safe = np.where((a == np.iinfo(a.dtype).min) & (b == -1), 1, safe).astype(b.dtype)
    rem = np.fmod(a, safe)
    quot = (a - rem) // safe                      # exact: a - rem is a multiple of safe
    all_ones = np.invert(np.zeros_like(quot))     # -1 in signed and unsigned types
    return np.where(zero, all_ones, quot), np.where(zero, a, rem)


def _divide(a, b):
    return _int_div_rem(a, b)[0] if _is_int(a) else np.divide(a, b)


def _remainder(a, b):
    return _int_div_rem(a, b)[1] if _is_int(a) else np.fmod(a, b)


def _power(a, b):
    if not _is_int(a):
        return np.power(a, b)
    # Integer pow with a negative exponent is 1 for a base of 1 and 0 otherwise (XLA).
    negative = b < 0
    r = np.power(a, np.where(negative, 0, b).astype(b.dtype))
    return np.where(negative, (a == 1).astype(a.dtype), r)


def _shift_amount(n, bits):
    """XLA reads the shift amount as unsigned; amounts >= the bit width are out of range.
    ``bits`` is the element type's width (4 for s4, computed in 8-bit arrays)."""
    unsigned = np.dtype(f"u{n.dtype.itemsize}")
    amount = n.view(unsigned) & np.array((1 << bits) - 1, unsigned)
    in_range = amount < bits
    return np.where(in_range, amount, 0).astype(unsigned), in_range


def _shift_left(x, n, bits):
    amount, in_range = _shift_amount(n, bits)
    return np.where(in_range, np.left_shift(x, amount.astype(x.dtype)), 0)


def _shift_right_logical(x, n, bits):
    amount, in_range = _shift_amount(n, bits)
    unsigned = amount.dtype
    field = x.view(unsigned) & np.array((1 << bits) - 1, unsigned)   # drop sign extension
    return np.where(in_range, np.right_shift(field, amount), 0).astype(unsigned).view(x.dtype)


def _shift_right_arithmetic(x, n, bits):
    amount, in_range = _shift_amount(n, bits)
    signed = np.dtype(f"i{x.dtype.itemsize}")
    # Out-of-range amounts fill with the sign bit, like a shift by width - 1; the value
    # is sign-extended from ``bits`` first (u4 in a byte reads as s4).
    spare = 8 * x.dtype.itemsize - bits
    v = np.left_shift(x.view(signed), spare) >> spare if spare else x.view(signed)
    amount = np.where(in_range, amount, bits - 1).astype(signed)
    return np.right_shift(v, amount).view(x.dtype)


def _shift(fn: Callable) -> Callable:
    def rule(instr, ops):
        dtype = instr.operands[0].shape.dtype
        if not dtype.is_integer:
            raise _undefined(instr)
        return fn(*[_widen(x) for x in ops], dtype.bits)
    return rule


_UNARY: dict[Opcode, Callable] = {
    Opcode.ABS: np.abs,
    Opcode.ACOS: np.arccos,
    Opcode.ACOSH: np.arccosh,
    Opcode.ASIN: np.arcsin,
    Opcode.ASINH: np.arcsinh,
    Opcode.ATAN: np.arctan,
    Opcode.ATANH: np.arctanh,
    Opcode.CBRT: np.cbrt,
    Opcode.CEIL: np.ceil,
    Opcode.COSH: np.cosh,
    Opcode.COSINE: np.cos,
    Opcode.ERF: _erf,
    Opcode.EXP: np.exp,
    Opcode.EXPM1: np.expm1,
    Opcode.FLOOR: np.floor,
    Opcode.IS_FINITE: np.isfinite,
    Opcode.LOG: np.log,
    Opcode.LOG1P: np.log1p,
    Opcode.LOGISTIC: lambda x: 1 / (1 + np.exp(-x)),
    Opcode.NEGATE: np.negative,
    Opcode.NOT: np.invert,                       # logical on pred, bitwise on integers
    Opcode.ROUND_NEAREST_AFZ: _round_half_away_from_zero,
    Opcode.ROUND_NEAREST_EVEN: np.rint,
    Opcode.RSQRT: lambda x: 1 / np.sqrt(x),
    Opcode.SIGN: np.sign,
    Opcode.SINE: np.sin,
    Opcode.SINH: np.sinh,
    Opcode.SQRT: np.sqrt,
    Opcode.TAN: np.tan,
    Opcode.TANH: np.tanh,
}

_BINARY: dict[Opcode, Callable] = {
    Opcode.ADD: np.add,
    Opcode.AND: np.bitwise_and,                  # logical on pred, bitwise on integers
    Opcode.ATAN2: np.arctan2,
    Opcode.DIVIDE: _divide,
    Opcode.MAXIMUM: np.maximum,                  # NaN-propagating, as in XLA
    Opcode.MINIMUM: np.minimum,
    Opcode.MULTIPLY: np.multiply,
    Opcode.OR: np.bitwise_or,
    Opcode.POWER: _power,
    Opcode.REMAINDER: _remainder,
    Opcode.SUBTRACT: np.subtract,
    Opcode.XOR: np.bitwise_xor,
}

_TERNARY: dict[Opcode, Callable] = {
    Opcode.CLAMP: lambda lo, x, hi: np.minimum(np.maximum(x, lo), hi),
    Opcode.SELECT: np.where,
}

_COMPARISONS = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less,
                "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal}


def _compare(instr, ops):
    a, b = (_widen(x) for x in ops)
    return _COMPARISONS[instr.attrs["direction"]](a, b)


def _convert(instr, ops):
    x, to = _widen(ops[0]), instr.shape.dtype
    if to.is_pred:
        return x != 0
    if to.is_integer and x.dtype.kind == "f":
        # Truncate toward zero, saturate out-of-range values, NaN -> 0 (XLA's conversion).
        info = to.info
        t = np.trunc(x.astype(np.float64))
        # float(max) rounds up for 64 bits, so only values strictly inside are cast.
        inside = np.where((t > info.min) & (t < float(info.max)), t, 0).astype(to.np)
        return np.where(t <= info.min, info.min,
                        np.where(t >= float(info.max), info.max, inside)).astype(to.np)
    if to.is_narrow_float and to != dtypes.F16 and x.dtype == np.float64:
        # ml_dtypes rounds f64 through f32, twice; rounding to odd first keeps the sticky
        # bit, so that the second rounding is the one correct rounding.
        x = _round_to_odd_f32(x)
    return x.astype(to.np)


def _round_to_odd_f32(x: np.ndarray) -> np.ndarray:
    """f64 -> f32 truncating toward zero, with the last bit set where that was inexact."""
    t = x.astype(np.float32)
    t = np.where(np.abs(t.astype(np.float64)) > np.abs(x), np.nextafter(t, np.float32(0)), t)
    inexact = (t.astype(np.float64) != x) & ~np.isnan(x)
    return np.where(inexact, (t.view(np.uint32) | 1).view(np.float32), t)


def _bitcast_convert(instr, ops):
    # Sub-byte values are held in the low bits of a byte by both types: a view.
    return ops[0].view(instr.shape.dtype.np)


# --- data movement ---------------------------------------------------------

def _major_to_minor(shape: Shape) -> tuple[int, ...]:
    return tuple(reversed(shape.layout))


def _bitcast(instr, ops):
    """Same bytes, new shape: reinterpret the operand's physical (layout) order."""
    src, dst = instr.operands[0].shape, instr.shape
    physical = np.transpose(ops[0], _major_to_minor(src)).ravel()
    order = _major_to_minor(dst)
    arranged = physical.reshape([dst.dims[d] for d in order])
    return np.transpose(arranged, np.argsort(order))


def _reshape(instr, ops):
    return ops[0].reshape(instr.shape.dims)       # logical row-major, whatever the layout


def _broadcast(instr, ops):
    (x,) = ops
    placed = [1] * instr.shape.rank
    for i, d in enumerate(instr.attrs["dimensions"]):
        placed[d] = x.shape[i]
    return np.broadcast_to(x.reshape(placed), instr.shape.dims).copy()


def _concatenate(instr, ops):
    return np.concatenate(ops, axis=instr.attrs["dimension"])


def _copy(instr, ops):
    return ops[0].copy()


def _pad_array(x, value, low, high, interior) -> np.ndarray:
    """XLA pad: ``interior`` fill between elements, then ``low``/``high`` (negative crops)."""
    spans = [n + max(n - 1, 0) * it for n, it in zip(x.shape, interior)]
    grown = [max(lo, 0) + s + max(hi, 0) for lo, s, hi in zip(low, spans, high)]
    out = np.full(grown, value, dtype=x.dtype)
    out[tuple(slice(max(lo, 0), max(lo, 0) + s, it + 1)
              for lo, s, it in zip(low, spans, interior))] = x
    return out[tuple(slice(max(-lo, 0), g - max(-hi, 0)) for lo, g, hi in zip(low, grown, high))]


def _pad(instr, ops):
    p = instr.attrs["padding"]
    return _pad_array(ops[0], ops[1], p.low, p.high, p.interior)


def _reverse(instr, ops):
    return np.flip(ops[0], axis=tuple(instr.attrs["dimensions"]))


def _slice(instr, ops):
    s = instr.attrs["slice"]
    return ops[0][tuple(slice(a, b, st) for a, b, st in zip(s.starts, s.limits, s.strides))]


def _transpose(instr, ops):
    return np.transpose(ops[0], instr.attrs["dimensions"])


def _index_vectors(idx: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """Start indices with the index vector last (an implicit one made explicit), as int64;
    unsigned values too big for int64 saturate (they are out of range either way)."""
    if index_vector_dim == idx.ndim:
        idx = idx[..., None]
    else:
        idx = np.moveaxis(idx, index_vector_dim, -1)
    if idx.dtype == np.uint64:
        idx = np.minimum(idx, np.uint64(np.iinfo(np.int64).max))
    return idx.astype(np.int64)


def _batch_position(sd: int, index_vector_dim: int) -> int:
    """Position of start-indices dim ``sd`` among the batch dims (the index vector dim
    left out)."""
    return sd if sd < index_vector_dim else sd - 1


def _gather(instr, ops):
    x, idx = ops
    dn, sizes = instr.attrs["dimension_numbers"], tuple(instr.attrs["slice_sizes"])
    idx = _index_vectors(idx, dn.index_vector_dim)
    batch, rank = idx.shape[:-1], x.ndim
    nb = len(batch)
    # One index array per operand dim, shaped batch + slice_sizes: start + offset.
    index = []
    for d in range(rank):
        offset = np.arange(sizes[d]).reshape(
            (1,) * nb + tuple(sizes[d] if e == d else 1 for e in range(rank)))
        if d in dn.start_index_map:
            start = idx[..., dn.start_index_map.index(d)]
            # XLA clamps every start so that the whole slice stays inside the operand.
            start = np.clip(start, 0, x.shape[d] - sizes[d]).reshape(batch + (1,) * rank)
            offset = start + offset
        elif d in dn.operand_batching_dims:
            pos = _batch_position(
                dn.start_indices_batching_dims[dn.operand_batching_dims.index(d)],
                dn.index_vector_dim)
            offset = np.arange(batch[pos]).reshape(
                tuple(batch[pos] if e == pos else 1 for e in range(nb)) + (1,) * rank)
        index.append(offset)
    dropped = dn.collapsed_slice_dims + dn.operand_batching_dims
    slices = np.broadcast_to(x[tuple(index)], batch + sizes)
    slices = slices.reshape(batch + tuple(s for d, s in enumerate(sizes) if d not in dropped))
    # Result dims: offset_dims take the kept slice dims in order, the rest the batch dims.
    perm, b, o = [], 0, nb
    for d in range(slices.ndim):
        if d in dn.offset_dims:
            perm.append(o)
            o += 1
        else:
            perm.append(b)
            b += 1
    return np.transpose(slices, perm)


def _clamped_starts(x_dims, sizes, starts) -> list[int]:
    """XLA clamps each start index so that the slice stays inside the operand."""
    return [int(min(max(int(np.asarray(v)), 0), n - s)) for v, n, s in zip(starts, x_dims, sizes)]


def _dynamic_slice(instr, ops):
    x, sizes = ops[0], instr.attrs["dynamic_slice_sizes"]
    starts = _clamped_starts(x.shape, sizes, ops[1:])
    return x[tuple(slice(a, a + s) for a, s in zip(starts, sizes))].copy()


def _dynamic_update_slice(instr, ops):
    x, u = ops[0], ops[1]
    starts = _clamped_starts(x.shape, u.shape, ops[2:])
    out = x.copy()
    out[tuple(slice(a, a + s) for a, s in zip(starts, u.shape))] = u
    return out


# --- control flow ------------------------------------------------------------

def _while(instr, ops):
    cond, body = instr.called
    state = ops[0]
    while bool(evaluate_computation(cond, [state])):
        state = evaluate_computation(body, [state])
    return state


def _conditional(instr, ops):
    index = ops[0][()]
    n = len(instr.called)
    if instr.operands[0].shape.dtype == dtypes.PRED:
        k = 0 if index else 1
    else:                                  # out of range: the last branch, as in XLA
        k = int(index) if 0 <= int(index) < n else n - 1
    return evaluate_computation(instr.called[k], [ops[k + 1]])


def scatter_targets(operand_dims, idx: np.ndarray, update_dims, dn):
    """Where each update element goes: one int64 array per operand dim, shaped like the
    updates, and a mask of the elements whose window lies inside the operand (XLA
    skips a whole update window that does not fit, as its scatter expander does)."""
    idx = _index_vectors(idx, dn.index_vector_dim)
    rank, urank = len(operand_dims), len(update_dims)
    uwd = dn.update_window_dims
    scatter_dims = [d for d in range(urank) if d not in uwd]
    window_operand_dims = [d for d in range(rank)
                           if d not in dn.inserted_window_dims + dn.input_batching_dims]
    # The update's scatter dims index the start-index vectors.
    grid = np.indices(update_dims, sparse=True) if urank else []
    vector = idx[tuple(grid[d] for d in scatter_dims)] if urank else idx
    vector = np.broadcast_to(vector, tuple(update_dims) + idx.shape[-1:])
    valid = np.ones(update_dims, bool)
    targets = []
    for d in range(rank):
        if d in dn.scatter_dims_to_operand_dims:
            start = vector[..., dn.scatter_dims_to_operand_dims.index(d)]
        elif d in dn.input_batching_dims:
            pos = _batch_position(
                dn.scatter_indices_batching_dims[dn.input_batching_dims.index(d)],
                dn.index_vector_dim)
            start = grid[scatter_dims[pos]]
        else:
            start = np.zeros((), np.int64)
        if d in window_operand_dims:
            ud = uwd[window_operand_dims.index(d)]
            size, offset = update_dims[ud], grid[ud]
        else:
            size, offset = 1, 0
        valid &= (start >= 0) & (start <= operand_dims[d] - size)
        targets.append(np.broadcast_to(start + offset, update_dims))
    return targets, valid


def _scatter(instr, ops):
    x, idx, upd = ops
    dn, comp = instr.attrs["dimension_numbers"], instr.called[0]
    out = np.array(_widen(x), copy=True)
    upd = _widen(upd)
    targets, valid = scatter_targets(x.shape, idx, upd.shape, dn)
    where = tuple(t[valid] for t in targets)     # row-major update order
    values = upd[valid]
    ufunc = _reducer_ufunc(comp)
    linear = np.ravel_multi_index(where, out.shape) if out.ndim else np.zeros(
        len(values), np.int64)
    if ufunc is not None:
        ufunc.at(out.reshape(-1), linear, values)
    elif comp.root is comp.parameters[1]:
        # Replacement: the last update of an element wins, as in a sequential loop.
        last = len(linear) - 1 - np.unique(linear[::-1], return_index=True)[1]
        out.reshape(-1)[linear[last]] = values[last]
    else:
        flat = out.reshape(-1)
        for k, v in zip(linear, values):
            flat[k] = evaluate_computation(comp, [np.asarray(flat[k]), np.asarray(v)])
    return out


# --- compute -----------------------------------------------------------------

def _accumulating(instr, ops) -> list[np.ndarray]:
    """Dot and convolution operands in the type they accumulate in: integer operands of
    a wider integer result (u8 x s8 -> s32) are widened to it first, so nothing wraps
    at the operands' width."""
    out = instr.shape.dtype
    if out.is_integer and any(o.shape.dtype != out for o in instr.operands):
        return [np.asarray(x).astype(out.np) for x in ops]
    return [_widen(x) for x in ops]


def _dot(instr, ops):
    a, b = _accumulating(instr, ops)
    dn = instr.attrs["dimension_numbers"]
    a_free = [d for d in range(a.ndim) if d not in dn.lhs_batch + dn.lhs_contracting]
    b_free = [d for d in range(b.ndim) if d not in dn.rhs_batch + dn.rhs_contracting]
    nbatch = prod(a.shape[d] for d in dn.lhs_batch)
    k = prod(a.shape[d] for d in dn.lhs_contracting)
    lhs = np.transpose(a, dn.lhs_batch + tuple(a_free) + dn.lhs_contracting)
    rhs = np.transpose(b, dn.rhs_batch + dn.rhs_contracting + tuple(b_free))
    lhs = lhs.reshape(nbatch, prod(a.shape[d] for d in a_free), k)
    rhs = rhs.reshape(nbatch, k, prod(b.shape[d] for d in b_free))
    return np.matmul(lhs, rhs).reshape(instr.shape.dims)


def _window_view(x, fill, w: Window, axes) -> np.ndarray:
    """Windows of ``x`` along ``axes`` (padded and base-dilated with ``fill``): the dims of
    ``x`` with output extents at ``axes``, then the window extents appended."""
    low, high, interior = [0] * x.ndim, [0] * x.ndim, [0] * x.ndim
    for i, a in enumerate(axes):
        low[a], high[a], interior[a] = w.pad_low[i], w.pad_high[i], w.lhs_dilation[i] - 1
    padded = _pad_array(x, fill, low, high, interior)
    extents = [(s - 1) * d + 1 for s, d in zip(w.size, w.rhs_dilation)]
    view = sliding_window_view(padded, extents, axis=tuple(axes))
    index = [slice(None)] * x.ndim
    for i, a in enumerate(axes):
        index[a] = slice(None, None, w.stride[i])
    return view[tuple(index) + tuple(slice(None, None, d) for d in w.rhs_dilation)]


def _convolution(instr, ops):
    w, dn = instr.attrs["window"], instr.attrs["dimension_numbers"]
    fg = instr.attrs.get("feature_group_count", 1)
    bg = instr.attrs.get("batch_group_count", 1)
    if fg > 1 and bg > 1:
        raise XlacError(f"convolution %{instr.name}: feature_group_count and batch_group_count "
                        f"cannot both exceed 1")
    nsp = len(dn.input_spatial)
    # Canonical layouts: input (N, C, spatial...), kernel (O, I, spatial...).
    x, k = _accumulating(instr, ops)
    x = np.transpose(x, (dn.input_batch, dn.input_feature) + dn.input_spatial)
    k = np.transpose(k, (dn.kernel_output, dn.kernel_input) + dn.kernel_spatial)
    (n, c), o = x.shape[:2], k.shape[0]
    out_spatial = [window_output_size(x.shape[2 + i], w, i) for i in range(nsp)]
    if instr.shape.num_elements == 0:
        out = np.zeros([n // bg, o] + out_spatial, dtype=x.dtype)
    else:
        # im2col: (N, C, P..., K...) windows, split into groups (StableHLO: feature groups
        # split C and O; batch groups split N and O; both into contiguous chunks).
        win = _window_view(x, np.zeros((), x.dtype), w, range(2, 2 + nsp))
        g, nb, cg, npos, nk = fg * bg, n // bg, c // fg, prod(out_spatial), prod(w.size)
        win = win.reshape((bg, nb, fg, cg) + win.shape[2:])
        lhs = win.transpose((0, 2, 1) + tuple(range(4, 4 + nsp)) + (3,)
                            + tuple(range(4 + nsp, 4 + 2 * nsp)))
        lhs = lhs.reshape(g, nb * npos, cg * nk)
        rhs = k.reshape((g, o // g) + k.shape[1:])
        rhs = rhs.transpose((0, 2) + tuple(range(3, 3 + nsp)) + (1,)).reshape(g, cg * nk, o // g)
        out = np.matmul(lhs, rhs).reshape([g, nb] + out_spatial + [o // g])
        out = out.transpose((1, 0, 2 + nsp) + tuple(range(2, 2 + nsp))).reshape(
            [nb, o] + out_spatial)
    # Back to the output's dimension numbers: canonical axis j goes to result dim order[j].
    order = (dn.output_batch, dn.output_feature) + dn.output_spatial
    return np.transpose(out, np.argsort(order))


# Reducers recognised as a numpy ufunc: to_apply = op(p0, p1).
_UFUNC_REDUCERS = {
    Opcode.ADD: np.add, Opcode.MULTIPLY: np.multiply, Opcode.MAXIMUM: np.maximum,
    Opcode.MINIMUM: np.minimum, Opcode.AND: np.bitwise_and, Opcode.OR: np.bitwise_or,
    Opcode.XOR: np.bitwise_xor,
}
# Ops that act element by element on their operands, so that a scalar reducer may be run
# on vectors of accumulators at once.
_VECTORIZABLE = ELEMENTWISE | {Opcode.PARAMETER, Opcode.CONSTANT, Opcode.TUPLE,
                               Opcode.GET_TUPLE_ELEMENT, Opcode.COPY}


def _reducer_ufunc(comp: Computation):
    """The ufunc ``comp`` computes when it is add/multiply/max/min/and/or/xor(p0, p1)."""
    params, root = comp.parameters, comp.root
    if len(params) != 2 or root.opcode not in _UFUNC_REDUCERS:
        return None
    if {id(o) for o in root.operands} != {id(p) for p in params}:
        return None
    return _UFUNC_REDUCERS[root.opcode]


def _fold(comp: Computation, rows: list[np.ndarray], inits: list) -> list[np.ndarray]:
    """Reduce each row of the (M, R) arrays ``rows`` with ``comp``, starting from ``inits``
    and taking elements in order: acc = comp(acc..., row[j]...)."""
    m, r = rows[0].shape
    if all(i.opcode in _VECTORIZABLE for i in comp.instructions):
        acc = [np.broadcast_to(i, (m,)) for i in inits]   # all M rows at once
        for j in range(r):
            acc = _as_list(evaluate_computation(comp, acc + [x[:, j] for x in rows]))
        return [np.broadcast_to(a, (m,)) for a in acc]
    out = [np.empty(m, dtype=np.asarray(i).dtype) for i in inits]
    for row in range(m):
        acc = list(inits)
        for j in range(r):
            acc = _as_list(evaluate_computation(comp, acc + [np.asarray(x[row, j])
                                                             for x in rows]))
        for o, a in zip(out, acc):
            o[row] = a
    return out


def _as_list(value) -> list:
    return list(value) if isinstance(value, tuple) else [value]


def _results(values):
    return values[0] if len(values) == 1 else tuple(values)


def _reduce(instr, ops):
    n = len(ops) // 2
    xs, inits = ops[:n], ops[n:]
    dims = tuple(instr.attrs["dimensions"])
    comp = instr.called[0]
    ufunc = _reducer_ufunc(comp) if n == 1 else None
    if ufunc is not None:
        x = _widen(xs[0])
        return ufunc.reduce(x, axis=dims, dtype=x.dtype, initial=_widen(inits[0])[()])
    kept = [d for d in range(xs[0].ndim) if d not in dims]
    out_dims = [xs[0].shape[d] for d in kept]
    rows = [np.transpose(x, kept + list(dims)).reshape(prod(out_dims),
                                                       prod(x.shape[d] for d in dims))
            for x in xs]
    return _results([v.reshape(out_dims) for v in _fold(comp, rows, inits)])


def _reduce_window(instr, ops):
    n = len(ops) // 2
    xs, inits = ops[:n], ops[n:]
    w, comp = instr.attrs["window"], instr.called[0]
    rank = xs[0].ndim
    out_dims = [window_output_size(xs[0].shape[d], w, d) for d in range(rank)]
    if prod(out_dims) == 0:
        return _results([np.empty(out_dims, dtype=x.dtype) for x in xs])
    # StableHLO: padding and base-dilation holes take the init value; each window is then
    # reduced from the init value.
    views = [_window_view(_widen(x), _widen(i), w, range(rank)) for x, i in zip(xs, inits)]
    ufunc = _reducer_ufunc(comp) if n == 1 else None
    if ufunc is not None:
        v = views[0]
        return ufunc.reduce(v, axis=tuple(range(rank, 2 * rank)), dtype=v.dtype,
                            initial=_widen(inits[0])[()])
    rows = [v.reshape(prod(out_dims), prod(w.size)) for v in views]
    return _results([v.reshape(out_dims) for v in _fold(comp, rows, inits)])


def _comparator(comp: Computation, xs: list[np.ndarray]) -> Callable:
    """``less(a, b)``: the comparator on the elements at (rows, n) index arrays ``a`` and
    ``b`` of the (rows, n) operands ``xs``, for all pairs at once where its ops allow."""
    vectorized = all(i.opcode in _VECTORIZABLE for i in comp.instructions)

    def less(a, b):
        args = [v for x in xs for v in (np.take_along_axis(x, a, 1),
                                        np.take_along_axis(x, b, 1))]
        if vectorized:
            return np.broadcast_to(evaluate_computation(comp, args), a.shape)
        out = np.empty(a.shape, dtype=bool)
        for k in np.ndindex(a.shape):
            out[k] = evaluate_computation(comp, [np.asarray(v[k]) for v in args])
        return out
    return less


def _stable_sort_permutation(less: Callable, rows: int, n: int) -> np.ndarray:
    """Per row, the stable order ``less`` defines: a bottom-up merge sort run on all rows
    and slots at once. Merging runs L and R, an element of L moves past the elements of
    R that are less than it, one of R past the elements of L it is not less than; both
    counts are prefix lengths (the runs are sorted), found by binary search: O(log^2 n)
    comparator evaluations, each over every element."""
    perm = np.broadcast_to(np.arange(n), (rows, n)).copy()
    slot = np.arange(n)
    width = 1
    while width < n:
        start = slot // (2 * width) * (2 * width)
        mid, end = np.minimum(start + width, n), np.minimum(start + 2 * width, n)
        left = slot < mid
        offset = np.where(left, slot - start, slot - mid)
        other = np.where(left, mid, start)
        lo = np.zeros((rows, n), dtype=np.int64)
        hi = np.broadcast_to(np.where(left, end - mid, mid - start), (rows, n)).copy()
        while True:
            active = lo < hi
            if not active.any():
                break
            m = (lo + hi) // 2
            partner = np.take_along_axis(perm, np.minimum(other + m, n - 1), 1)
            before = np.where(left, less(partner, perm), ~less(perm, partner))
            lo = np.where(active & before, m + 1, lo)
            hi = np.where(active & ~before, m, hi)
        merged = np.empty_like(perm)
        np.put_along_axis(merged, start + offset + lo, perm, 1)
        perm = merged
        width *= 2
    return perm


def _sort(instr, ops):
    """XLA sort: a stable sort satisfies both settings of ``is_stable``."""
    d = instr.attrs["dimension"]
    moved = [np.moveaxis(x, d, -1) for x in ops]
    lead, n = moved[0].shape[:-1], moved[0].shape[-1]
    rows = prod(lead)
    flat = [x.reshape(rows, n) for x in moved]
    if rows * n == 0:
        return _results([np.array(x) for x in ops])
    perm = _stable_sort_permutation(_comparator(instr.called[0], flat), rows, n)
    return _results([np.moveaxis(np.take_along_axis(x, perm, 1).reshape(lead + (n,)), -1, d)
                     for x in flat])


def _custom_call(instr, ops):
    raise XlacError(f"custom-call %{instr.name} calls {instr.attrs['custom_call_target']}, "
                    "which only the program that links the object defines")


def _topk(instr, ops):
    """The stable order of the values, best first: for ``largest`` NaN, then +inf down
    to -inf; for smallest -inf up, NaN last; equal values (-0 == +0) by index."""
    x = _widen(ops[0])
    k, largest = instr.attrs["k"], instr.attrs["largest"]
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        keys = (np.where(nan, 0, -x if largest else x), nan != largest)
    else:
        keys = (np.invert(x) if largest else x,)       # ~x reverses the order of integers
    order = np.lexsort(keys, axis=-1)[..., :k]        # the last key sorts first
    return (np.take_along_axis(np.asarray(ops[0]), order, -1), order.astype(np.int32))


# --- the table -----------------------------------------------------------------

RULES: dict[Opcode, Callable] = {
    Opcode.PARAMETER: _parameter,
    Opcode.CONSTANT: _constant,
    Opcode.IOTA: _iota,
    **{op: _elementwise(fn) for op, fn in _UNARY.items()},
    Opcode.CONVERT: _convert,
    **{op: _elementwise(fn) for op, fn in _BINARY.items()},
    Opcode.SHIFT_LEFT: _shift(_shift_left),
    Opcode.SHIFT_RIGHT_ARITHMETIC: _shift(_shift_right_arithmetic),
    Opcode.SHIFT_RIGHT_LOGICAL: _shift(_shift_right_logical),
    Opcode.BITCAST_CONVERT: _bitcast_convert,
    Opcode.COMPARE: _compare,
    **{op: _elementwise(fn) for op, fn in _TERNARY.items()},
    Opcode.BITCAST: _bitcast,
    Opcode.BROADCAST: _broadcast,
    Opcode.CONCATENATE: _concatenate,
    Opcode.COPY: _copy,
    Opcode.GATHER: _gather,
    Opcode.PAD: _pad,
    Opcode.RESHAPE: _reshape,
    Opcode.REVERSE: _reverse,
    Opcode.SCATTER: _scatter,
    Opcode.SLICE: _slice,
    Opcode.TRANSPOSE: _transpose,
    Opcode.DYNAMIC_SLICE: _dynamic_slice,
    Opcode.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
    Opcode.WHILE: _while,
    Opcode.CONDITIONAL: _conditional,
    Opcode.CONVOLUTION: _convolution,
    Opcode.DOT: _dot,
    Opcode.REDUCE: _reduce,
    Opcode.REDUCE_WINDOW: _reduce_window,
    Opcode.SORT: _sort,
    Opcode.TOPK: _topk,
    Opcode.CUSTOM_CALL: _custom_call,
    Opcode.FUSION: _fusion,
    Opcode.GET_TUPLE_ELEMENT: _get_tuple_element,
    Opcode.TUPLE: _tuple,
}
