"""Algebraic simplification: local rewrites that remove work without changing values.

``RULES`` maps an opcode to its rewrite rules. A rule takes the instruction and
returns the instruction that replaces it (an existing one, or a new one not yet
in the computation), or None when it does not apply. A replacement always has
exactly the instruction's shape, layout included. Each rule states its algebra.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..hlo import Computation, DotDimensionNumbers, Instruction, Opcode, SliceSpec, Window
from ..hlo.opcodes import ELEMENTWISE
from .pipeline import ComputationPass
from .policy import BackendPolicy
from .rewrite import apply_replacements

Rule = Callable[[Instruction], "Instruction | None"]


class AlgebraicSimplifier(ComputationPass):
    """``RULES``, and the rules that ask the backend: ``dot_of_transpose``."""
    name = "algsimp"

    def __init__(self, policy: BackendPolicy):
        self.rules = {**RULES, Opcode.DOT: (lambda dot: dot_of_transpose(dot, policy),)}

    def run_on_computation(self, comp: Computation) -> bool:
        return _simplify_computation(comp, self.rules)


def _simplify_computation(comp: Computation, rules: dict[Opcode, tuple[Rule, ...]]) -> bool:
    replaced: dict[Instruction, Instruction] = {}
    present = set(comp.instructions)
    # One walk in def-before-use order. Operands are redirected to their
    # replacements first, so rules see the current graph; new instructions are
    # appended (not visited again this walk) and put in order at the end.
    for instr in list(comp.instructions):
        instr.operands = [replaced.get(o, o) for o in instr.operands]
        for rule in rules.get(instr.opcode, ()):
            new = rule(instr)
            if new is not None:
                _add_new(comp, new, present, instr.metadata)
                replaced[instr] = new
                break
    if replaced:
        apply_replacements(comp, replaced)
    return bool(replaced)


def _add_new(comp: Computation, instr: Instruction, present: set[Instruction],
             metadata) -> None:
    """Add ``instr`` and the new instructions it reads (a rule may build a small chain),
    all from the source node of the instruction they replace."""
    if instr in present:
        return
    for o in instr.operands:
        _add_new(comp, o, present, metadata)
    if instr.metadata is None:
        instr.metadata = metadata
    comp.add(instr)
    present.add(instr)


# --- recognising constants ------------------------------------------------------

def splat_value(instr: Instruction):
    """The single value of every element of ``instr`` if it is a constant with all
    elements equal, or a broadcast / reshape of one; else None."""
    while instr.opcode in (Opcode.BROADCAST, Opcode.RESHAPE, Opcode.BITCAST):
        instr = instr.operands[0]
    if instr.opcode is not Opcode.CONSTANT or instr.literal.size == 0:
        return None
    flat = instr.literal.reshape(-1)
    first = flat[0]
    # Compare bytes, not values: -0.0 == 0.0 and NaN != NaN would mislead.
    if not (flat.view(np.uint8).reshape(flat.size, -1) == flat[:1].view(np.uint8)).all():
        return None
    return first


def _is_splat(instr: Instruction, value) -> bool:
    v = splat_value(instr)
    return v is not None and v == value


def _same_shape(a: Instruction, b: Instruction) -> bool:
    return a.shape == b.shape


def _is_identity_perm(perm) -> bool:
    return tuple(perm) == tuple(range(len(perm)))


# --- element-wise rules -----------------------------------------------------------

def add_zero(instr):
    # add(x, 0) => x ; add(0, x) => x
    a, b = instr.operands
    if _is_splat(b, 0) and _same_shape(a, instr):
        return a
    if _is_splat(a, 0) and _same_shape(b, instr):
        return b
    return None


def subtract_zero(instr):
    # subtract(x, 0) => x
    a, b = instr.operands
    return a if _is_splat(b, 0) and _same_shape(a, instr) else None


def multiply_one(instr):
    # multiply(x, 1) => x ; multiply(1, x) => x
    a, b = instr.operands
    if _is_splat(b, 1) and _same_shape(a, instr):
        return a
    if _is_splat(a, 1) and _same_shape(b, instr):
        return b
    return None


def multiply_zero(instr):
    # multiply(x, 0) => 0 for integers only: for floats x*0 is NaN when x is inf or NaN,
    # and -0 when x < 0. The zero operand already has the result's shape.
    if not instr.shape.dtype.is_integer:
        return None
    for z in instr.operands:
        if _is_splat(z, 0) and _same_shape(z, instr):
            return z
    return None


def divide_one(instr):
    # divide(x, 1) => x
    a, b = instr.operands
    return a if _is_splat(b, 1) and _same_shape(a, instr) else None


def power_small_integer(instr):
    # power(x, 1) => x ; power(x, 2) => x * x ; power(x, -1) => 1 / x (floats): one
    # correctly rounded op where pow costs a log and an exp per element (an RMS norm's
    # square).
    # pow(x, 0.5) stays: sqrt differs at -0 and -inf.
    a, e = instr.operands
    v = splat_value(e)
    if v is None or not _same_shape(a, instr):
        return None
    if v == 1:
        return a
    if v == 2:
        return Instruction(Opcode.MULTIPLY, instr.shape, [a, a], name=instr.name)
    if v == -1 and instr.shape.dtype.is_float:
        return Instruction(Opcode.DIVIDE, instr.shape, [_splat_like(instr, 1), a],
                           name=instr.name)
    return None


def _splat_like(instr, value):
    """``value`` broadcast to ``instr``'s shape (a new scalar constant)."""
    scalar = Instruction(Opcode.CONSTANT, instr.shape.with_dims(()), [],
                         literal=np.asarray(value, instr.shape.dtype.np))
    return Instruction(Opcode.BROADCAST, instr.shape, [scalar], {"dimensions": ()})


def negate_negate(instr):
    # negate(negate(x)) => x
    (a,) = instr.operands
    if a.opcode is Opcode.NEGATE and _same_shape(a.operands[0], instr):
        return a.operands[0]
    return None


def convert_same_type(instr):
    # convert(x) to x's own type => x
    (a,) = instr.operands
    return a if _same_shape(a, instr) else None


# --- movement rules ---------------------------------------------------------------

def reshape_same_shape(instr):
    # reshape(x) to x's own shape => x  (also bitcast, copy: same bytes, same shape)
    (a,) = instr.operands
    return a if _same_shape(a, instr) else None


def reshape_reshape(instr):
    # reshape(reshape(x)) => reshape(x): only the final dims matter
    (a,) = instr.operands
    if a.opcode is not Opcode.RESHAPE:
        return None
    return Instruction(Opcode.RESHAPE, instr.shape, [a.operands[0]], name=instr.name)


def transpose_identity(instr):
    # transpose(x, identity) => x
    (a,) = instr.operands
    if _is_identity_perm(instr.attrs["dimensions"]) and _same_shape(a, instr):
        return a
    return None


def transpose_transpose(instr):
    # transpose(transpose(x, p), q) => transpose(x, r) with r[i] = p[q[i]]
    (a,) = instr.operands
    if a.opcode is not Opcode.TRANSPOSE:
        return None
    p, q = a.attrs["dimensions"], instr.attrs["dimensions"]
    perm = tuple(p[i] for i in q)
    return Instruction(Opcode.TRANSPOSE, instr.shape, [a.operands[0]],
                       {"dimensions": perm}, name=instr.name)


def transpose_of_unit_dims(instr):
    # transpose(x, p) => reshape(x) when p moves only dims of extent 1: the elements keep
    # their order, so the result is a view of x (a batch-first RNN input at batch 1)
    (a,) = instr.operands
    kept = [d for d in instr.attrs["dimensions"] if a.shape.dims[d] != 1]
    if kept != sorted(kept) or not (a.shape.has_default_layout
                                    and instr.shape.has_default_layout):
        return None
    return Instruction(Opcode.RESHAPE, instr.shape, [a], name=instr.name)


def slice_whole(instr):
    # slice(x, [0:n:1] in every dim) => x
    (a,) = instr.operands
    s = instr.attrs["slice"]
    whole = (all(v == 0 for v in s.starts) and s.limits == a.shape.dims
             and all(v == 1 for v in s.strides))
    return a if whole and _same_shape(a, instr) else None


def concatenate_one(instr):
    # concatenate(x) => x
    if len(instr.operands) == 1 and _same_shape(instr.operands[0], instr):
        return instr.operands[0]
    return None


def pad_zero(instr):
    # pad(x, v, low=0, high=0, interior=0) => x
    a = instr.operands[0]
    p = instr.attrs["padding"]
    if any(p.low) or any(p.high) or any(p.interior):
        return None
    return a if _same_shape(a, instr) else None


def broadcast_same_shape(instr):
    # broadcast(x) to x's own dims along the identity mapping => x
    (a,) = instr.operands
    if _is_identity_perm(instr.attrs["dimensions"]) and _same_shape(a, instr):
        return a
    return None


def elementwise_of_broadcasts(instr):
    # op(broadcast(a, D), broadcast(b, D), broadcast(s, {})) => broadcast(op(a, b, s'), D)
    # where a and b have the same dims and s' is the scalar s broadcast to them: the op
    # runs on the small operands (folded, if constant: a batch norm's scale and shift
    # stay per channel instead of becoming feature-map-sized constants).
    ops = instr.operands
    if not ops or any(o.opcode is not Opcode.BROADCAST for o in ops):
        return None
    wide = [o for o in ops if o.operands[0].shape.rank > 0]
    if wide and any(o.attrs["dimensions"] != wide[0].attrs["dimensions"]
                    or o.operands[0].shape.dims != wide[0].operands[0].shape.dims
                    for o in wide):
        return None
    if not wide and instr.shape.rank == 0:
        return None
    dims = wide[0].operands[0].shape.dims if wide else ()
    mapping = wide[0].attrs["dimensions"] if wide else ()
    narrow = []
    for o in ops:
        src = o.operands[0]
        if src.shape.dims != dims:          # a scalar, broadcast to the narrow dims
            src = Instruction(Opcode.BROADCAST, src.shape.with_dims(dims), [src],
                              {"dimensions": ()})
        narrow.append(src)
    inner = Instruction(instr.opcode, instr.shape.with_dims(dims), narrow, dict(instr.attrs))
    return Instruction(Opcode.BROADCAST, instr.shape, [inner], {"dimensions": mapping})


def dot_of_transpose(instr, policy: BackendPolicy):
    # dot(transpose(x, p), y) => dot(x, y), each dim d of the transpose's named as x's
    # p[d] (XLA's TransposeFolding), and alike for y, where the backend's dot kernel
    # takes any strides (``dot_folds_transpose``), so the transposed copy is never
    # made; for transposes whose free dims keep their order (the result's dims are the
    # free dims in order).
    if not policy.dot_folds_transpose(instr):
        return None
    dn = instr.attrs["dimension_numbers"]
    sides = [list(dn.lhs_batch), list(dn.lhs_contracting), list(dn.rhs_batch),
             list(dn.rhs_contracting)]
    operands = list(instr.operands)
    for k, t in enumerate(instr.operands):
        if t.opcode is not Opcode.TRANSPOSE or not (
                t.shape.has_default_layout and t.operands[0].shape.has_default_layout):
            continue
        perm = t.attrs["dimensions"]
        batch, contracting = sides[2 * k], sides[2 * k + 1]
        free = [perm[d] for d in range(t.shape.rank) if d not in batch + contracting]
        if free != sorted(free):
            continue
        sides[2 * k] = [perm[d] for d in batch]
        sides[2 * k + 1] = [perm[d] for d in contracting]
        operands[k] = t.operands[0]
    if operands == instr.operands:
        return None
    return Instruction(Opcode.DOT, instr.shape, operands,
                       {**instr.attrs, "dimension_numbers": DotDimensionNumbers(*sides)},
                       name=instr.name)


def convolution_unread_taps(instr):
    # conv(x, k) with window taps at its ends that meet only padding at every output
    # position => conv(x, slice(k)) over the taps that meet the image, the padding
    # lowered by what was cut (the result's size stays): those taps multiply zeros.
    # A 5x5 window on a 2x2 map reads the image through its middle 3x3 alone.
    x, k = instr.operands
    w, dn = instr.attrs["window"], instr.attrs["dimension_numbers"]
    if any(d != 1 for d in w.lhs_dilation):
        return None
    first, last = [], []
    for i, (n, o) in enumerate(zip((x.shape.dims[d] for d in dn.input_spatial),
                                   (instr.shape.dims[d] for d in dn.output_spatial))):
        s, d, pad = w.stride[i], w.rhs_dilation[i], w.pad_low[i]
        read = [t for t in range(w.size[i])
                if any(0 <= y * s + t * d - pad < n for y in range(o))]
        if not read:
            return None
        first.append(read[0])
        last.append(read[-1])
    pad_low = tuple(p - t * d for p, t, d in zip(w.pad_low, first, w.rhs_dilation))
    pad_high = tuple(p - (size - 1 - t) * d
                     for p, size, t, d in zip(w.pad_high, w.size, last, w.rhs_dilation))
    size = tuple(b - a + 1 for a, b in zip(first, last))
    if size == w.size or min(pad_low + pad_high) < 0:
        return None
    starts, limits = [0] * k.shape.rank, list(k.shape.dims)
    for i, d in enumerate(dn.kernel_spatial):
        starts[d], limits[d] = first[i], last[i] + 1
    dims = tuple(b - a for a, b in zip(starts, limits))
    taps = Instruction(Opcode.SLICE, k.shape.with_dims(dims), [k],
                       {"slice": SliceSpec(starts, limits, (1,) * k.shape.rank)})
    window = Window(size, w.stride, pad_low, pad_high, w.lhs_dilation, w.rhs_dilation)
    return Instruction(Opcode.CONVOLUTION, instr.shape, [x, taps],
                       {**instr.attrs, "window": window}, name=instr.name)


def get_tuple_element_of_tuple(instr):
    # get-tuple-element(tuple(x0, ..., xn), k) => xk
    (t,) = instr.operands
    if t.opcode is Opcode.TUPLE:
        return t.operands[instr.attrs["index"]]
    return None


RULES: dict[Opcode, tuple[Rule, ...]] = {
    Opcode.ADD: (add_zero,),
    Opcode.SUBTRACT: (subtract_zero,),
    Opcode.MULTIPLY: (multiply_one, multiply_zero),
    Opcode.DIVIDE: (divide_one,),
    Opcode.POWER: (power_small_integer,),
    Opcode.NEGATE: (negate_negate,),
    Opcode.CONVERT: (convert_same_type,),
    Opcode.RESHAPE: (reshape_same_shape, reshape_reshape),
    Opcode.BITCAST: (reshape_same_shape,),
    Opcode.COPY: (reshape_same_shape,),
    Opcode.TRANSPOSE: (transpose_identity, transpose_transpose, transpose_of_unit_dims),
    Opcode.SLICE: (slice_whole,),
    Opcode.CONCATENATE: (concatenate_one,),
    Opcode.PAD: (pad_zero,),
    Opcode.BROADCAST: (broadcast_same_shape,),
    Opcode.GET_TUPLE_ELEMENT: (get_tuple_element_of_tuple,),
    Opcode.CONVOLUTION: (convolution_unread_taps,),
}
# Every element-wise op: its own rules first, then hoisting it above broadcasts.
RULES = {**RULES, **{op: RULES.get(op, ()) + (elementwise_of_broadcasts,)
                     for op in ELEMENTWISE}}
