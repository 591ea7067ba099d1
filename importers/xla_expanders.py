"""XLA's ops that our opcode table lacks, expanded into ours, as XLA's own expander
passes do for its CPU backend (CholeskyExpander, TriangularSolveExpander,
SelectAndScatterExpander, the reduce-precision emitter): the HLO and StableHLO
importers share them, and the LAPACK calls JAX's CPU lowering writes map onto them.

Each takes ``where``, the computation being built (``Where``: its module and a
Builder over it), and operands, and returns the result values. Loops over a matrix
dimension are while loops (one column or row per trip, vectorized across the others
and across batch dimensions), so a program's size does not grow with the matrix.
"""
from __future__ import annotations

import re
from math import prod

import numpy as np

from ..hlo import (Builder, Computation, DotDimensionNumbers, Instruction, Module, Opcode,
                   ScatterDimensionNumbers, Shape, Window, XlacError, dtypes)
from ..hlo.builder import scalar_computation
from ..hlo.opcodes import BINARY_ELEMENTWISE, UNARY_ELEMENTWISE
from ..hlo.while_loop import WhileLoop

S32, PRED = dtypes.S32, dtypes.PRED


class Where:
    """A computation under construction: what WhileLoop and the expanders build in."""

    def __init__(self, module: Module, computation: Computation):
        self.module = module
        self.b = Builder.on(computation)


# --- small builders --------------------------------------------------------------------

def _scalar(b: Builder, value, dtype) -> Instruction:
    return b.constant(np.array(value, dtype.np), dtype)


def _full(b: Builder, value, dtype, dims) -> Instruction:
    return b.broadcast(_scalar(b, value, dtype), tuple(dims), ())


def _spread(b: Builder, x: Instruction, dims, kept) -> Instruction:
    """x broadcast to ``dims``, its dimensions going to ``kept``."""
    return b.broadcast(x, tuple(dims), tuple(kept))


def _select(b: Builder, p, x, y) -> Instruction:
    return b.op(Opcode.SELECT, p, x, y)


def _and(b: Builder, x, y) -> Instruction:
    return b.op(Opcode.AND, x, y)


def _swap_last(b: Builder, x: Instruction) -> Instruction:
    perm = list(range(x.shape.rank))
    perm[-2:] = perm[-1], perm[-2]
    return b.transpose(x, perm)


def _slice_at(b: Builder, x: Instruction, starts, sizes, dims) -> Instruction:
    """dynamic-slice of x at ``starts`` (scalar instructions) reshaped to ``dims``."""
    s = b.op(Opcode.DYNAMIC_SLICE, x, *starts, dynamic_slice_sizes=tuple(sizes))
    return b.reshape(s, tuple(dims))


def _update_at(b: Builder, x: Instruction, update: Instruction, starts, sizes) -> Instruction:
    return b.op(Opcode.DYNAMIC_UPDATE_SLICE, x, b.reshape(update, tuple(sizes)), *starts)


def _matrix_batch(x: Instruction, what: str) -> tuple[list[int], int, int]:
    if x.shape.rank < 2:
        raise XlacError(f"{what} takes matrices (rank 2 and more), got {x.shape}")
    *batch, m, n = x.shape.dims
    return batch, m, n


def _counter_below(loop: WhileLoop, limit: int) -> Instruction:
    """The condition ``state[0] < limit``."""
    c = loop.cond
    return c.compare(loop.cond_elements[0], _scalar(c, limit, S32), "LT")


def _batch_dot(b: Builder, x, y, x_contracting: int, y_contracting: int, nb: int):
    dims = tuple(range(nb))
    return b.dot(x, y, DotDimensionNumbers(dims, (x_contracting,), dims, (y_contracting,)))


# --- cholesky ---------------------------------------------------------------------------

def cholesky(where: Where, a: Instruction, lower: bool = True) -> tuple[Instruction,
                                                                          Instruction]:
    """(the factor, LAPACK's info): l with a = l l^T (lower), or u with a = u^T u, reading
    only that triangle of a; the other triangle is zero. info is 0, or j + 1 for the
    first column j whose pivot is not positive (the factor then holds NaNs, as
    XLA's does). Column j: l_jj = sqrt(a_jj - sum_k<j l_jk^2), l_ij = (a_ij -
    sum_k<j l_ik l_jk) / l_jj for i > j; columns not yet made are zero, so the sums
    are one matrix-vector product."""
    b = where.b
    if not lower:
        a = _swap_last(b, a)
    batch, n, m = _matrix_batch(a, "cholesky")
    if n != m:
        raise XlacError(f"cholesky takes square matrices, got {a.shape}")
    nb, dt = len(batch), a.shape.dtype
    loop = WhileLoop(where, "cholesky", [_scalar(b, 0, S32), _full(b, 0, dt, a.shape.dims),
                                        _full(b, 0, S32, batch)])
    _, a_in = loop.capture(a)
    j, factor, info = loop.body_elements[:3]
    bb = loop.body
    zero = _scalar(bb, 0, S32)
    zeros = [zero] * nb
    vec = (*batch, n)
    row_j = _slice_at(bb, factor, zeros + [j, zero], (*batch, 1, n), vec)
    sums = _batch_dot(bb, factor, row_j, nb + 1, nb, nb)                  # (*B, n)
    col = _slice_at(bb, a_in, zeros + [zero, j], (*batch, n, 1), vec)
    d = bb.op(Opcode.SUBTRACT, _slice_at(bb, col, zeros + [j], (*batch, 1), batch),
              _slice_at(bb, sums, zeros + [j], (*batch, 1), batch))
    l_jj = bb.op(Opcode.SQRT, d)
    l_jj_vec = _spread(bb, l_jj, vec, range(nb))
    below = bb.op(Opcode.DIVIDE, bb.op(Opcode.SUBTRACT, col, sums), l_jj_vec)
    i = bb.iota(Shape.array(S32, vec), nb)
    jv = _spread(bb, j, vec, ())
    new = _select(bb, bb.compare(i, jv, "GT"), below,
                  _select(bb, bb.compare(i, jv, "EQ"), l_jj_vec, _full(bb, 0, dt, vec)))
    factor = _update_at(bb, factor, new, zeros + [zero, j], (*batch, n, 1))
    failed = bb.op(Opcode.NOT, bb.compare(d, _full(bb, 0, dt, batch), "GT"))
    first = _and(bb, failed, bb.compare(info, _full(bb, 0, S32, batch), "EQ"))
    j1 = bb.op(Opcode.ADD, j, _scalar(bb, 1, S32))
    info = _select(bb, first, _spread(bb, j1, batch, ()), info)
    _, factor, info = loop.finish(_counter_below(loop, n), [j1, factor, info])[:3]
    return (factor if lower else _swap_last(b, factor)), info


# --- triangular solve ---------------------------------------------------------------------

def triangular_solve(where: Where, a: Instruction, rhs: Instruction, left_side: bool,
                     lower: bool, unit_diagonal: bool, transpose_a: bool) -> Instruction:
    """x with op(a) x = rhs (left side) or x op(a) = rhs, op(a) = a or a^T, reading
    only a's ``lower`` or upper triangle. Every case becomes forward substitution:
    a^T swaps the triangles, the right side is the left side transposed, and an
    upper triangle is a lower one with both index orders reversed."""
    b = where.b
    batch, m, _ = _matrix_batch(a, "triangular-solve")
    a = _triangle(b, a, lower, unit_diagonal)
    if transpose_a:
        a, lower = _swap_last(b, a), not lower
    if not left_side:
        a, lower, rhs = _swap_last(b, a), not lower, _swap_last(b, rhs)
    rank = a.shape.rank
    if not lower:
        a, rhs = b.reverse(a, (rank - 2, rank - 1)), b.reverse(rhs, (rank - 2,))
    x = _forward_substitution(where, a, rhs)
    if not lower:
        x = b.reverse(x, (rank - 2,))
    return x if left_side else _swap_last(b, x)


def _triangle(b: Builder, a: Instruction, lower: bool, unit_diagonal: bool) -> Instruction:
    """a with the other triangle zero (LAPACK and XLA never read it) and, for a unit
    diagonal, ones on it."""
    dims = a.shape.dims
    rows = b.iota(Shape.array(S32, dims), len(dims) - 2)
    cols = b.iota(Shape.array(S32, dims), len(dims) - 1)
    zero = _full(b, 0, a.shape.dtype, dims)
    a = _select(b, b.compare(rows, cols, "GE" if lower else "LE"), a, zero)
    if unit_diagonal:
        a = _select(b, b.compare(rows, cols, "EQ"), _full(b, 1, a.shape.dtype, dims), a)
    return a


def _forward_substitution(where: Where, a: Instruction, rhs: Instruction) -> Instruction:
    """Row i: x_i = (rhs_i - sum_k<i a_ik x_k) / a_ii; rows not yet solved are zero, so
    the sum is one vector-matrix product."""
    b = where.b
    batch, m, _ = _matrix_batch(a, "triangular-solve")
    n = rhs.shape.dims[-1]
    nb, dt = len(batch), a.shape.dtype
    loop = WhileLoop(where, "triangular_solve", [_scalar(b, 0, S32),
                                                _full(b, 0, dt, rhs.shape.dims)])
    _, a_in = loop.capture(a)
    _, rhs_in = loop.capture(rhs)
    i, x = loop.body_elements[:2]
    bb = loop.body
    zero = _scalar(bb, 0, S32)
    zeros = [zero] * nb
    row = _slice_at(bb, a_in, zeros + [i, zero], (*batch, 1, m), (*batch, m))
    sums = _batch_dot(bb, row, x, nb, nb, nb)                                 # (*B, n)
    r = _slice_at(bb, rhs_in, zeros + [i, zero], (*batch, 1, n), (*batch, n))
    a_ii = _slice_at(bb, row, zeros + [i], (*batch, 1), batch)
    x_i = bb.op(Opcode.DIVIDE, bb.op(Opcode.SUBTRACT, r, sums),
                _spread(bb, a_ii, (*batch, n), range(nb)))
    x = _update_at(bb, x, x_i, zeros + [i, zero], (*batch, 1, n))
    i1 = bb.op(Opcode.ADD, i, _scalar(bb, 1, S32))
    _, x = loop.finish(_counter_below(loop, m), [i1, x])[:2]
    return x


# --- LU with partial pivoting -------------------------------------------------------------

def lu(where: Where, a: Instruction) -> tuple[Instruction, Instruction, Instruction]:
    """LAPACK's getrf: (l and u in one matrix, the 0-based pivot row of each step, info:
    0, or j + 1 for the first zero pivot). Step j takes the first row i >= j with the
    largest |a_ij|, swaps it with row j, and eliminates below it (unblocked, as
    LAPACK's getf2)."""
    b = where.b
    batch, m, n = _matrix_batch(a, "lu")
    k = min(m, n)
    nb, dt = len(batch), a.shape.dtype
    loop = WhileLoop(where, "lu", [_scalar(b, 0, S32), a, _full(b, 0, S32, (*batch, k)),
                                  _full(b, 0, S32, batch)])
    j, x, pivots, info = loop.body_elements[:4]
    bb = loop.body
    zero = _scalar(bb, 0, S32)
    zeros = [zero] * nb
    col_dims, row_dims, mat = (*batch, m), (*batch, n), (*batch, m, n)
    i_col = bb.iota(Shape.array(S32, col_dims), nb)
    j_col = _spread(bb, j, col_dims, ())
    col = _slice_at(bb, x, zeros + [zero, j], (*batch, m, 1), col_dims)
    candidates = _select(bb, bb.compare(i_col, j_col, "GE"), bb.op(Opcode.ABS, col),
                         _full(bb, -1, dt, col_dims))
    biggest = _reduce(where, bb, candidates, Opcode.MAXIMUM, -np.inf, nb)
    at_max = bb.compare(candidates, _spread(bb, biggest, col_dims, range(nb)), "EQ")
    p = _reduce(where, bb, _select(bb, at_max, i_col, _full(bb, m, S32, col_dims)), Opcode.MINIMUM,
                m, nb)
    p = _select(bb, bb.compare(p, _full(bb, m, S32, batch), "EQ"), _spread(bb, j, batch, ()),
                p)                                    # a column of NaNs: no swap
    # swap rows j and p (p differs across the batch: rows picked by select and sum)
    rows = bb.iota(Shape.array(S32, mat), nb)
    is_p = bb.compare(rows, _spread(bb, p, mat, range(nb)), "EQ")
    row_p = _reduce(where, bb, _select(bb, is_p, x, _full(bb, 0, dt, mat)), Opcode.ADD, 0, nb)
    row_j = _slice_at(bb, x, zeros + [j, zero], (*batch, 1, n), row_dims)
    row_axes = (*range(nb), nb + 1)
    is_j = bb.compare(rows, _spread(bb, j, mat, ()), "EQ")
    x = _select(bb, is_j, _spread(bb, row_p, mat, row_axes),
                _select(bb, is_p, _spread(bb, row_j, mat, row_axes), x))
    # eliminate below row j
    pivot = _slice_at(bb, row_p, zeros + [j], (*batch, 1), batch)
    nonzero = bb.compare(pivot, _full(bb, 0, dt, batch), "NE")
    col = _slice_at(bb, x, zeros + [zero, j], (*batch, m, 1), col_dims)
    scaled = _select(bb, _spread(bb, nonzero, col_dims, range(nb)),
                     bb.op(Opcode.DIVIDE, col, _spread(bb, pivot, col_dims, range(nb))), col)
    cols = bb.iota(Shape.array(S32, mat), nb + 1)
    j_mat = _spread(bb, j, mat, ())
    below, right = bb.compare(rows, j_mat, "GT"), bb.compare(cols, j_mat, "GT")
    outer = bb.op(Opcode.MULTIPLY, _spread(bb, scaled, mat, range(nb + 1)),
                  _spread(bb, row_p, mat, row_axes))
    x = _select(bb, _and(bb, below, right), bb.op(Opcode.SUBTRACT, x, outer), x)
    x = _select(bb, _and(bb, below, bb.compare(cols, j_mat, "EQ")),
                _spread(bb, scaled, mat, range(nb + 1)), x)
    pivots = _update_at(bb, pivots, p, zeros + [j], (*batch, 1))
    j1 = bb.op(Opcode.ADD, j, _scalar(bb, 1, S32))
    first = _and(bb, bb.op(Opcode.NOT, nonzero),
                 bb.compare(info, _full(bb, 0, S32, batch), "EQ"))
    info = _select(bb, first, _spread(bb, j1, batch, ()), info)
    _, x, pivots, info = loop.finish(_counter_below(loop, k), [j1, x, pivots, info])
    return x, pivots, info


def _reduce(where: Where, b: Builder, x: Instruction, opcode: Opcode, init,
            dim: int) -> Instruction:
    dt = x.shape.dtype
    return b.reduce(x, _scalar(b, init, dt), (dim,), where.module.add_computation(
        scalar_computation(f"{opcode.text}_{dt}", opcode, dt)))


# --- select-and-scatter ----------------------------------------------------------------

def select_and_scatter(where: Where, operand: Instruction, source: Instruction,
                       init: Instruction, select: Computation, scatter: Computation,
                       window: Window) -> Instruction:
    """Each window of ``operand`` (padding never chosen) picks one element: the first,
    then each next one that ``select(chosen, next)`` does not keep the chosen over.
    Its source value is combined into the result (``init`` everywhere) by ``scatter``.
    A variadic reduce-window over (valid, value, flat index) finds the elements; one
    scatter into the flat result combines them."""
    b = where.b
    dims, dt = operand.shape.dims, operand.shape.dtype
    count = prod(dims)
    flat = b.reshape(b.iota(Shape.array(S32, (count,)), 0), dims)
    valid = _full(b, True, PRED, dims)
    chooser = where.module.add_computation(_chooser(select, dt))
    inits = [_scalar(b, False, PRED), _scalar(b, 0, dt), _scalar(b, 0, S32)]
    chosen = b.op(Opcode.REDUCE_WINDOW, valid, operand, flat, *inits, called=[chooser],
                  window=window)
    ok, _, index = (b.get_tuple_element(chosen, k) for k in range(3))
    if ok.shape.dims != source.shape.dims:
        raise XlacError(f"select-and-scatter: source {source.shape} does not match the "
                        f"windows {ok.shape}")
    n = prod(ok.shape.dims)
    index = _select(b, ok, index, _full(b, count, S32, ok.shape.dims))   # out of range: none
    out = b.broadcast(init, (count,), ())
    numbers = ScatterDimensionNumbers((), (0,), (0,), 1)
    out = b.scatter(out, b.reshape(index, (n, 1)), b.reshape(source, (n,)), numbers, scatter)
    return b.reshape(out, dims)


def _chooser(select: Computation, dtype) -> Computation:
    """(valid, value, index) x 2 -> the chosen triple: the first unless it is invalid or
    the second is valid and ``select(first, second)`` is false."""
    c = Builder(f"choose_{select.name}")
    v0, x0, i0, v1, x1, i1 = (c.parameter(k, Shape.array(t, ()), n) for k, (t, n) in enumerate(
        [(PRED, "valid0"), (dtype, "x0"), (S32, "i0"), (PRED, "valid1"), (dtype, "x1"),
         (S32, "i1")]))
    keeps = inline(c, select, [x0, x1])
    first = _and(c, v0, c.op(Opcode.OR, c.op(Opcode.NOT, v1), keeps))
    return c.build(c.tuple([c.op(Opcode.OR, v0, v1), _select(c, first, x0, x1),
                            _select(c, first, i0, i1)]))


def inline(b: Builder, comp: Computation, args: list[Instruction]) -> Instruction:
    """``comp``'s instructions added to ``b`` with its parameters replaced by ``args``;
    its root's value."""
    mapped = {id(p): a for p, a in zip(comp.parameters, args, strict=True)}
    for i in comp.instructions:
        if i.opcode is not Opcode.PARAMETER:
            mapped[id(i)] = b.computation.add(Instruction(
                i.opcode, i.shape, [mapped[id(o)] for o in i.operands], i.attrs, i.called,
                i.literal, i.name))
    return mapped[id(comp.root)]


# --- map -------------------------------------------------------------------------------

_MAPPABLE = frozenset(UNARY_ELEMENTWISE) | frozenset(BINARY_ELEMENTWISE) | {
    Opcode.SELECT, Opcode.CLAMP, Opcode.CONVERT, Opcode.BITCAST_CONVERT, Opcode.COMPARE}


def map_elementwise(b: Builder, operands: list[Instruction], comp: Computation) -> Instruction:
    """``comp`` (scalars -> scalar) applied element by element: its element-wise ops
    over the arrays, its constants broadcast."""
    dims = operands[0].shape.dims
    mapped = {id(p): a for p, a in zip(comp.parameters, operands, strict=True)}
    for i in comp.instructions:
        if i.opcode is Opcode.PARAMETER:
            continue
        if i.opcode is Opcode.CONSTANT:
            mapped[id(i)] = b.broadcast(b.computation.add(Instruction(
                Opcode.CONSTANT, i.shape, literal=i.literal)), dims, ())
        elif i.opcode in _MAPPABLE:
            mapped[id(i)] = b.computation.add(Instruction(
                i.opcode, Shape.array(i.shape.dtype, dims), [mapped[id(o)] for o in i.operands],
                i.attrs))
        else:
            raise XlacError(f"map applies %{comp.name}, which uses {i.opcode.text}: xlac maps "
                            "element-wise computations only")
    return mapped[id(comp.root)]


# --- reduce-precision ------------------------------------------------------------------

_BITS = {16: dtypes.U16, 32: dtypes.U32, 64: dtypes.U64}
_FORMAT = {dtypes.F16: (5, 10), dtypes.BF16: (8, 7), dtypes.F32: (8, 23), dtypes.F64: (11, 52)}


def reduce_precision(b: Builder, x: Instruction, exponent_bits: int,
                     mantissa_bits: int) -> Instruction:
    """x rounded to a float of ``exponent_bits`` and ``mantissa_bits`` and back, as XLA
    does on the bits: the mantissa rounded to nearest even, then exponents past the
    new range to infinity or (below it) to zero of the same sign; NaNs stay NaN."""
    dt = x.shape.dtype
    if dt not in _FORMAT:
        raise XlacError(f"reduce-precision of {dt.name}: it takes floats")
    src_exp, src_man = _FORMAT[dt]
    u = _BITS[dt.bits]
    dims = x.shape.dims
    bits = b.op(Opcode.BITCAST_CONVERT, x, shape=x.shape.with_dtype(u))

    def k(value):
        return _full(b, value, u, dims)

    def op(opcode, *xs):
        return b.op(opcode, *xs)
    if mantissa_bits < src_man:
        drop = src_man - mantissa_bits
        last = 1 << drop
        odd = op(Opcode.SHIFT_RIGHT_LOGICAL, op(Opcode.AND, bits, k(last)), k(drop))
        bias = op(Opcode.ADD, odd, k((last >> 1) - 1))
        mask = ((1 << dt.bits) - 1) ^ (last - 1)
        bits = op(Opcode.AND, op(Opcode.ADD, bits, bias), k(mask))
    if exponent_bits < src_exp:
        sign_mask = 1 << (dt.bits - 1)
        exp_mask = ((1 << src_exp) - 1) << src_man
        src_bias = (1 << (src_exp - 1)) - 1
        new_bias = (1 << (exponent_bits - 1)) - 1
        exponent = op(Opcode.AND, bits, k(exp_mask))
        overflows = b.compare(exponent, k((src_bias + new_bias) << src_man), "GT")
        underflows = b.compare(exponent, k((src_bias - new_bias) << src_man), "LE")
        signed_zero = op(Opcode.AND, bits, k(sign_mask))
        signed_inf = op(Opcode.OR, signed_zero, k(exp_mask))
        bits = _select(b, overflows, signed_inf, _select(b, underflows, signed_zero, bits))
    out = b.op(Opcode.BITCAST_CONVERT, bits, shape=x.shape)
    return _select(b, b.compare(x, x, "NE"), x, out)


# --- the LAPACK calls of JAX's CPU lowering -------------------------------------------------

_LAPACK = re.compile(r"lapack_([sd])(potrf|trsm|getrf)_ffi")
_L, _U, _N = ord("L"), ord("U"), ord("N")


def is_lapack_call(target: str) -> bool:
    """A custom-call target that ``lapack_call`` builds (real types)."""
    return _LAPACK.fullmatch(target) is not None


def refused_call(target: str) -> str | None:
    """Why a custom call cannot become a call of the C function ``target`` the program
    that links the object defines, or None: a library JAX or XLA call themselves (other
    LAPACK routines, Python callbacks, GPU libraries)."""
    if is_lapack_call(target):
        return None
    if target.startswith("lapack_"):
        return "a LAPACK routine other than potrf, trsm and getrf, which xlac expands"
    if "python" in target and "callback" in target:
        return "a Python callback (jax.pure_callback, jax.debug.print): it runs Python"
    if re.fullmatch(r"[A-Za-z_]\w*", target) is None:
        return "not a C identifier, so no C function of the program can be it"
    return None


def lapack_call(where: Where, target: str, operands: list[Instruction],
                config: dict[str, int]) -> list[Instruction]:
    """The results of JAX's LAPACK custom call ``target`` (its backend_config's uplo,
    side, trans_x and diag are the characters LAPACK takes). The matrices' layouts
    are column-major, as LAPACK wants them; their values are the arrays' as written.
    potrf -> (the factor, the other triangle as given; info), trsm -> x,
    getrf -> (l and u, 1-based pivots, info)."""
    kind = _LAPACK.fullmatch(target).group(2)
    b = where.b
    if kind == "potrf":
        (a,) = operands
        lower = config.get("uplo", _L) == _L
        factor, info = cholesky(where, a, lower)
        dims = a.shape.dims
        rows = b.iota(Shape.array(S32, dims), len(dims) - 2)
        cols = b.iota(Shape.array(S32, dims), len(dims) - 1)
        inside = b.compare(rows, cols, "GE" if lower else "LE")
        return [_select(b, inside, factor, a), info]
    if kind == "trsm":
        a, rhs = operands
        return [triangular_solve(where, a, rhs, left_side=config.get("side", _L) == _L,
                                 lower=config.get("uplo", _L) == _L,
                                 unit_diagonal=config.get("diag", _N) == _U,
                                 transpose_a=config.get("trans_x", _N) != _N)]
    (a,) = operands
    factors, pivots, info = lu(where, a)
    one = _full(b, 1, S32, pivots.shape.dims)
    return [factors, b.op(Opcode.ADD, pivots, one), info]


def backend_config(text: str) -> dict[str, int]:
    """``{uplo = 76 : ui8, side = 76 : ui8}`` -> {"uplo": 76, "side": 76}."""
    return {k: int(v) for k, v in re.findall(r"(\w+)\s*=\s*(-?\d+)", text)}


# --- bitcast-convert between widths ---------------------------------------------------------

_UNSIGNED = {8: dtypes.U8, 16: dtypes.U16, 32: dtypes.U32, 64: dtypes.U64}


def bitcast_convert(b: Builder, x: Instruction, out: Shape) -> Instruction:
    """x's bits as ``out``'s element type. Between widths, r narrow elements (the last
    dimension, of size r) make one wide element, the first the least significant, as
    in memory on a little-endian machine: XLA's CPU result."""
    src, dst = x.shape.dtype, out.dtype
    if src.bits == dst.bits:
        return b.op(Opcode.BITCAST_CONVERT, x, shape=out)
    if src.bits not in _UNSIGNED or dst.bits not in _UNSIGNED:
        raise XlacError(f"bitcast-convert from {src.name} to {dst.name}: widths of 8 to 64 "
                        "bits only")
    if src.bits < dst.bits:
        r = dst.bits // src.bits
        if x.shape.dims[-1:] != (r,) or x.shape.dims[:-1] != out.dims:
            raise XlacError(f"bitcast-convert {x.shape} -> {out}: the last dimension must "
                            f"hold the {r} parts")
        parts = _as_unsigned(b, x)
        wide = _UNSIGNED[dst.bits]
        acc = None
        for k in range(r):
            part = b.reshape(b.slice(parts, (0,) * (x.shape.rank - 1) + (k,),
                                     x.shape.dims[:-1] + (k + 1,)), out.dims)
            part = b.convert(part, wide)
            if k:
                part = b.op(Opcode.SHIFT_LEFT, part, _full(b, k * src.bits, wide, out.dims))
            acc = part if acc is None else b.op(Opcode.OR, acc, part)
        return b.op(Opcode.BITCAST_CONVERT, acc, shape=out) if dst != wide else acc
    r = src.bits // dst.bits
    if out.dims != x.shape.dims + (r,):
        raise XlacError(f"bitcast-convert {x.shape} -> {out}: the result must add a last "
                        f"dimension of the {r} parts")
    u = _as_unsigned(b, x)
    narrow = _UNSIGNED[dst.bits]
    parts = []
    for k in range(r):
        part = b.op(Opcode.SHIFT_RIGHT_LOGICAL, u, _full(b, k * dst.bits, u.shape.dtype,
                                                         x.shape.dims)) if k else u
        parts.append(b.reshape(b.convert(part, narrow), x.shape.dims + (1,)))
    joined = b.concatenate(parts, x.shape.rank)
    return b.op(Opcode.BITCAST_CONVERT, joined, shape=out) if dst != narrow else joined


def _as_unsigned(b: Builder, x: Instruction) -> Instruction:
    u = _UNSIGNED[x.shape.dtype.bits]
    if x.shape.dtype == u:
        return x
    return b.op(Opcode.BITCAST_CONVERT, x, shape=x.shape.with_dtype(u))


# --- rng-bit-generator ---------------------------------------------------------------------

U64, U32 = dtypes.U64, dtypes.U32
# XLA's CPU backend runs DEFAULT as Philox.
RNG_ALGORITHMS = ("DEFAULT", "THREE_FRY", "PHILOX")


def rng_bit_generator(b: Builder, algorithm: str, state: Instruction,
                      out: Shape) -> tuple[Instruction, Instruction]:
    """(the new state, random bits of ``out``'s unsigned type), bit for bit as XLA's
    RngBitGeneratorExpander: the state is u64[2+] = (key, counter...). ThreeFry-2x32
    (20 rounds) hashes (counter + element index) as two u32 halves; Philox-4x32 (10
    rounds) hashes a 128-bit counter, four u32 per call."""
    if state.shape.dtype != U64 or state.shape.rank != 1 or state.shape.dims[0] < 2:
        raise XlacError(f"rng-bit-generator takes a u64[2] or u64[3] state, got {state.shape}")
    if out.dtype.kind != "u" or out.dtype.bits not in (8, 16, 32, 64):
        raise XlacError(f"rng-bit-generator of {out.dtype.name}: xlac makes unsigned bits")
    key = b.reshape(b.slice(state, (0,), (1,)), ())
    if algorithm == "THREE_FRY":
        counter = b.slice(state, (1,), (2,))
        bits, new_counter = _threefry_bits(b, key, counter, out)
    elif algorithm in ("PHILOX", "DEFAULT"):
        n = state.shape.dims[0]
        counter = b.slice(state, (1,), (3,)) if n >= 3 else b.reverse(state, (0,))
        bits, new_counter = _philox_bits(b, key, counter, out)
        if n < 3:
            new_counter = b.slice(new_counter, (0,), (1,))
    else:
        raise XlacError(f"rng-bit-generator algorithm {algorithm}: xlac knows "
                        f"{', '.join(RNG_ALGORITHMS)}")
    return b.concatenate([b.reshape(key, (1,)), new_counter], 0), bits


def _u(b: Builder, value: int, dtype, dims=()) -> Instruction:
    return _full(b, value, dtype, dims) if dims else _scalar(b, value, dtype)


def _halves(b: Builder, x: Instruction) -> tuple[Instruction, Instruction]:
    """A u64's low and high u32."""
    high = b.op(Opcode.SHIFT_RIGHT_LOGICAL, x, _u(b, 32, U64, x.shape.dims))
    return b.convert(x, U32), b.convert(high, U32)


def _join(b: Builder, low: Instruction, high: Instruction) -> Instruction:
    wide = b.op(Opcode.SHIFT_LEFT, b.convert(high, U64), _u(b, 32, U64, high.shape.dims))
    return b.op(Opcode.OR, b.convert(low, U64), wide)


def _bits_of(b: Builder, bits32: Instruction, out: Shape) -> Instruction:
    return b.convert(bits32, out.dtype) if out.dtype.bits < 32 else bits32


def _threefry_bits(b, key, counter, out: Shape):
    keys = _halves(b, key)
    if out.dtype.bits == 64:
        inputs, new_counter = _threefry_inputs(b, counter, out.dims)
        x0, x1 = _threefry2x32(b, inputs, keys)
        return _join(b, x0, x1), new_counter
    half, concat_dims, split, joined = _split_halves(out.dims)
    inputs, new_counter = _threefry_inputs(b, counter, half)
    x0, x1 = _threefry2x32(b, inputs, keys)
    if not out.dims:
        return _bits_of(b, b.reshape(x0, ()), out), new_counter
    both = b.concatenate([x0, x1], joined)                       # concat_dims
    rounded = list(out.dims)
    rounded[split] = concat_dims[split] * 2
    both = b.reshape(both, tuple(rounded))
    if rounded[split] != out.dims[split]:
        both = b.slice(both, (0,) * len(rounded), out.dims)
    return _bits_of(b, both, out), new_counter


def _split_halves(dims):
    """XLA's SplitShapeIntoHalves: (half dims, concat dims, the split dim, the dim the
    halves are joined along). The split dim is the first even one, else the largest."""
    if not dims:
        return (1,), (2,), 0, 0
    split = next((i for i, d in enumerate(dims) if d % 2 == 0), None)
    if split is None:
        split = max(range(len(dims)), key=lambda i: (dims[i], -i))
    half, concat = [], []
    for i, d in enumerate(dims):
        if i == split:
            half += [-(-d // 2), 1]
            concat += [-(-d // 2), 2]
        else:
            half.append(d)
            concat.append(d)
    return tuple(half), tuple(concat), split, split + 1


def _threefry_inputs(b, counter, dims):
    """(the (low, high) u32 halves of counter + each element's row-major index over
    the dims of size 2 and more, the counter advanced by the element count)."""
    x = b.broadcast(b.reshape(counter, ()), tuple(dims), ())
    stride = 1
    for i in range(len(dims) - 1, -1, -1):
        if dims[i] < 2:
            continue
        step = b.op(Opcode.MULTIPLY, b.iota(Shape.array(U64, tuple(dims)), i),
                    _u(b, stride, U64, dims))
        x = b.op(Opcode.ADD, x, step)
        stride *= dims[i]
    advanced = b.op(Opcode.ADD, counter, _u(b, prod(dims), U64, (1,)))
    return _halves(b, x), advanced


_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)


def _threefry2x32(b, inputs, keys):
    """Threefry-2x32, 20 rounds (Salmon et al., SC 2011)."""
    dims = inputs[0].shape.dims

    def k(v):
        return _u(b, v, U32, dims)

    def add(x, y):
        return b.op(Opcode.ADD, x, y)

    def spread(s):
        return b.broadcast(s, dims, ())
    ks = [spread(keys[0]), spread(keys[1])]
    ks.append(b.op(Opcode.XOR, b.op(Opcode.XOR, k(0x1BD11BDA), ks[0]), ks[1]))
    x = [add(inputs[0], ks[0]), add(inputs[1], ks[1])]
    for group in range(5):
        for r in _ROTATIONS[4 * (group % 2):4 * (group % 2) + 4]:
            x[0] = add(x[0], x[1])
            rotated = b.op(Opcode.OR, b.op(Opcode.SHIFT_LEFT, x[1], k(r)),
                           b.op(Opcode.SHIFT_RIGHT_LOGICAL, x[1], k(32 - r)))
            x[1] = b.op(Opcode.XOR, x[0], rotated)
        x[0] = add(x[0], ks[(group + 1) % 3])
        x[1] = add(add(x[1], ks[(group + 2) % 3]), k(group + 1))
    return x[0], x[1]


def _philox_bits(b, key, counter, out: Shape):
    n = prod(out.dims)
    wide = out.dtype.bits == 64
    words = _philox_words(b, key, counter, 2 * n if wide else n)
    new_counter = words.pop()
    if wide:
        words = [_join(b, words[0], words[1]), _join(b, words[2], words[3])]
    per = len(words)
    rows = words[0].shape.dims[0]
    mixed = b.reshape(b.concatenate([b.reshape(w, (rows, 1)) for w in words], 1), (rows * per,))
    if rows * per != n:
        mixed = b.slice(mixed, (0,), (n,))
    return _bits_of(b, b.reshape(mixed, out.dims), out), new_counter


_PHILOX_W = (0x9E3779B9, 0xBB67AE85)
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)


def _philox_words(b, key, counter, n):
    """Philox-4x32 (10 rounds) of the 128-bit counter + i, i < ceil(n / 4): its four u32
    words, then the counter advanced past them."""
    calls = -(-n // 4)
    low, high = (b.reshape(b.slice(counter, (k,), (k + 1,)), ()) for k in (0, 1))
    i = b.iota(Shape.array(U64, (calls,)), 0)
    low_i = b.op(Opcode.ADD, b.broadcast(low, (calls,), ()), i)
    carry = b.compare(low_i, b.broadcast(low, (calls,), ()), "LT")
    high_i = _select(b, carry, b.broadcast(b.op(Opcode.ADD, high, _u(b, 1, U64)), (calls,), ()),
                     b.broadcast(high, (calls,), ()))
    x = [*_halves(b, low_i), *_halves(b, high_i)]
    keys = [b.broadcast(h, (calls,), ()) for h in _halves(b, key)]
    for _ in range(10):
        hi0, lo0 = _mul_hi_lo(b, x[0], _PHILOX_M[0])
        hi1, lo1 = _mul_hi_lo(b, x[2], _PHILOX_M[1])
        x = [b.op(Opcode.XOR, b.op(Opcode.XOR, hi1, x[1]), keys[0]), lo1,
             b.op(Opcode.XOR, b.op(Opcode.XOR, hi0, x[3]), keys[1]), lo0]
        keys = [b.op(Opcode.ADD, kk, _u(b, w, U32, (calls,))) for kk, w in zip(keys, _PHILOX_W)]
    new_low = b.op(Opcode.ADD, low, _u(b, calls, U64))
    new_high = _select(b, b.compare(new_low, low, "LT"), b.op(Opcode.ADD, high, _u(b, 1, U64)),
                       high)
    return x + [b.concatenate([b.reshape(new_low, (1,)), b.reshape(new_high, (1,))], 0)]


def _mul_hi_lo(b, x, m):
    product = b.op(Opcode.MULTIPLY, b.convert(x, U64), _u(b, m, U64, x.shape.dims))
    low, high = _halves(b, product)
    return high, low


# --- batch normalization --------------------------------------------------------------------

def _per_feature(b: Builder, v: Instruction, dims, feature: int) -> Instruction:
    return b.broadcast(v, tuple(dims), (feature,))


def _feature_mean(b: Builder, where: Where, x: Instruction, feature: int) -> Instruction:
    dims = x.shape.dims
    others = tuple(d for d in range(len(dims)) if d != feature)
    total = b.reduce(x, _scalar(b, 0, x.shape.dtype), others, where.module.add_computation(
        scalar_computation(f"add_{x.shape.dtype}", Opcode.ADD, x.shape.dtype)))
    count = prod(dims) // dims[feature]
    return b.op(Opcode.DIVIDE, total, _full(b, count, x.shape.dtype, (dims[feature],)))


def _normalize(b: Builder, x, scale, offset, mean, variance, epsilon: float, feature: int):
    dims, dt = x.shape.dims, x.shape.dtype
    inv = b.op(Opcode.RSQRT, b.op(Opcode.ADD, variance, _full(b, epsilon, dt, variance.shape.dims)))
    factor = _per_feature(b, b.op(Opcode.MULTIPLY, scale, inv), dims, feature)
    centered = b.op(Opcode.SUBTRACT, x, _per_feature(b, mean, dims, feature))
    return b.op(Opcode.ADD, b.op(Opcode.MULTIPLY, centered, factor),
                _per_feature(b, offset, dims, feature))


def batch_norm_inference(where: Where, x, scale, offset, mean, variance, epsilon: float,
                         feature: int) -> Instruction:
    """(x - mean) * scale / sqrt(variance + epsilon) + offset, per feature."""
    return _normalize(where.b, x, scale, offset, mean, variance, epsilon, feature)


def batch_norm_training(where: Where, x, scale, offset, epsilon: float,
                        feature: int) -> list[Instruction]:
    """(x normalized with its own statistics, their mean, their (biased) variance)."""
    b = where.b
    mean = _feature_mean(b, where, x, feature)
    centered = b.op(Opcode.SUBTRACT, x, _per_feature(b, mean, x.shape.dims, feature))
    variance = _feature_mean(b, where, b.op(Opcode.MULTIPLY, centered, centered), feature)
    return [_normalize(b, x, scale, offset, mean, variance, epsilon, feature), mean, variance]


def batch_norm_grad(where: Where, x, scale, mean, variance, grad_out, epsilon: float,
                    feature: int) -> list[Instruction]:
    """(d x, d scale, d offset) of batch_norm_training, as XLA's BatchNormExpander:
    d offset = sum dy, d scale = sum dy (x - mean) / sqrt(var + eps), d x = scale /
    sqrt(var + eps) (dy - mean(dy) - (x - mean) mean(dy (x - mean)) / (var + eps))."""
    b = where.b
    dims, dt = x.shape.dims, x.shape.dtype
    count = prod(dims) // dims[feature]
    fdims = (dims[feature],)
    centered = b.op(Opcode.SUBTRACT, x, _per_feature(b, mean, dims, feature))
    var_eps = b.op(Opcode.ADD, variance, _full(b, epsilon, dt, fdims))
    inv = b.op(Opcode.RSQRT, var_eps)
    mean_dy = _feature_mean(b, where, grad_out, feature)
    mean_dy_c = _feature_mean(b, where, b.op(Opcode.MULTIPLY, grad_out, centered), feature)
    n = _full(b, count, dt, fdims)
    grad_offset = b.op(Opcode.MULTIPLY, mean_dy, n)
    grad_scale = b.op(Opcode.MULTIPLY, b.op(Opcode.MULTIPLY, mean_dy_c, n), inv)
    coef = b.op(Opcode.DIVIDE, mean_dy_c, var_eps)
    inner = b.op(Opcode.SUBTRACT, b.op(Opcode.SUBTRACT, grad_out, _per_feature(
        b, mean_dy, dims, feature)), b.op(Opcode.MULTIPLY, centered, _per_feature(
            b, coef, dims, feature)))
    grad_x = b.op(Opcode.MULTIPLY, inner, _per_feature(
        b, b.op(Opcode.MULTIPLY, scale, inv), dims, feature))
    return [grad_x, grad_scale, grad_offset]
