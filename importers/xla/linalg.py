"""Linear algebra: XLA's cholesky and triangular-solve, an LU with partial pivoting, and
the LAPACK calls of JAX's CPU lowering (potrf, trsm, getrf) mapped onto them. Loops
over a matrix dimension are while loops, one column or row per trip, vectorized across
the others and across batch dimensions, so a program's size does not grow with the
matrix."""
from __future__ import annotations

import re

import numpy as np

from ...hlo import Builder, Instruction, Opcode, Shape, XlacError
from ...hlo.while_loop import WhileLoop
from .common import (S32, Where, batch_dot, choose, counter_below, full, logical_and,
                     matrix_batch, reduce_along, scalar, slice_at, spread, swap_last,
                     update_at)


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
        a = swap_last(b, a)
    batch, n, m = matrix_batch(a, "cholesky")
    if n != m:
        raise XlacError(f"cholesky takes square matrices, got {a.shape}")
    nb, dt = len(batch), a.shape.dtype
    loop = WhileLoop(where, "cholesky", [scalar(b, 0, S32), full(b, 0, dt, a.shape.dims),
                                        full(b, 0, S32, batch)])
    _, a_in = loop.capture(a)
    j, factor, info = loop.body_elements[:3]
    bb = loop.body
    zero = scalar(bb, 0, S32)
    zeros = [zero] * nb
    vec = (*batch, n)
    row_j = slice_at(bb, factor, zeros + [j, zero], (*batch, 1, n), vec)
    sums = batch_dot(bb, factor, row_j, nb + 1, nb, nb)                  # (*B, n)
    col = slice_at(bb, a_in, zeros + [zero, j], (*batch, n, 1), vec)
    d = bb.op(Opcode.SUBTRACT, slice_at(bb, col, zeros + [j], (*batch, 1), batch),
              slice_at(bb, sums, zeros + [j], (*batch, 1), batch))
    l_jj = bb.op(Opcode.SQRT, d)
    l_jj_vec = spread(bb, l_jj, vec, range(nb))
    below = bb.op(Opcode.DIVIDE, bb.op(Opcode.SUBTRACT, col, sums), l_jj_vec)
    i = bb.iota(Shape.array(S32, vec), nb)
    jv = spread(bb, j, vec, ())
    new = choose(bb, bb.compare(i, jv, "GT"), below,
                  choose(bb, bb.compare(i, jv, "EQ"), l_jj_vec, full(bb, 0, dt, vec)))
    factor = update_at(bb, factor, new, zeros + [zero, j], (*batch, n, 1))
    failed = bb.op(Opcode.NOT, bb.compare(d, full(bb, 0, dt, batch), "GT"))
    first = logical_and(bb, failed, bb.compare(info, full(bb, 0, S32, batch), "EQ"))
    j1 = bb.op(Opcode.ADD, j, scalar(bb, 1, S32))
    info = choose(bb, first, spread(bb, j1, batch, ()), info)
    _, factor, info = loop.finish(counter_below(loop, n), [j1, factor, info])[:3]
    return (factor if lower else swap_last(b, factor)), info


# --- triangular solve ---------------------------------------------------------------------

def triangular_solve(where: Where, a: Instruction, rhs: Instruction, left_side: bool,
                     lower: bool, unit_diagonal: bool, transpose_a: bool) -> Instruction:
    """x with op(a) x = rhs (left side) or x op(a) = rhs, op(a) = a or a^T, reading
    only a's ``lower`` or upper triangle. Every case becomes forward substitution:
    a^T swaps the triangles, the right side is the left side transposed, and an
    upper triangle is a lower one with both index orders reversed."""
    b = where.b
    batch, m, _ = matrix_batch(a, "triangular-solve")
    a = _triangle(b, a, lower, unit_diagonal)
    if transpose_a:
        a, lower = swap_last(b, a), not lower
    if not left_side:
        a, lower, rhs = swap_last(b, a), not lower, swap_last(b, rhs)
    rank = a.shape.rank
    if not lower:
        a, rhs = b.reverse(a, (rank - 2, rank - 1)), b.reverse(rhs, (rank - 2,))
    x = _forward_substitution(where, a, rhs)
    if not lower:
        x = b.reverse(x, (rank - 2,))
    return x if left_side else swap_last(b, x)


def _triangle(b: Builder, a: Instruction, lower: bool, unit_diagonal: bool) -> Instruction:
    """a with the other triangle zero (LAPACK and XLA never read it) and, for a unit
    diagonal, ones on it."""
    dims = a.shape.dims
    rows = b.iota(Shape.array(S32, dims), len(dims) - 2)
    cols = b.iota(Shape.array(S32, dims), len(dims) - 1)
    zero = full(b, 0, a.shape.dtype, dims)
    a = choose(b, b.compare(rows, cols, "GE" if lower else "LE"), a, zero)
    if unit_diagonal:
        a = choose(b, b.compare(rows, cols, "EQ"), full(b, 1, a.shape.dtype, dims), a)
    return a


def _forward_substitution(where: Where, a: Instruction, rhs: Instruction) -> Instruction:
    """Row i: x_i = (rhs_i - sum_k<i a_ik x_k) / a_ii; rows not yet solved are zero, so
    the sum is one vector-matrix product."""
    b = where.b
    batch, m, _ = matrix_batch(a, "triangular-solve")
    n = rhs.shape.dims[-1]
    nb, dt = len(batch), a.shape.dtype
    loop = WhileLoop(where, "triangular_solve", [scalar(b, 0, S32),
                                                full(b, 0, dt, rhs.shape.dims)])
    _, a_in = loop.capture(a)
    _, rhs_in = loop.capture(rhs)
    i, x = loop.body_elements[:2]
    bb = loop.body
    zero = scalar(bb, 0, S32)
    zeros = [zero] * nb
    row = slice_at(bb, a_in, zeros + [i, zero], (*batch, 1, m), (*batch, m))
    sums = batch_dot(bb, row, x, nb, nb, nb)                                 # (*B, n)
    r = slice_at(bb, rhs_in, zeros + [i, zero], (*batch, 1, n), (*batch, n))
    a_ii = slice_at(bb, row, zeros + [i], (*batch, 1), batch)
    x_i = bb.op(Opcode.DIVIDE, bb.op(Opcode.SUBTRACT, r, sums),
                spread(bb, a_ii, (*batch, n), range(nb)))
    x = update_at(bb, x, x_i, zeros + [i, zero], (*batch, 1, n))
    i1 = bb.op(Opcode.ADD, i, scalar(bb, 1, S32))
    _, x = loop.finish(counter_below(loop, m), [i1, x])[:2]
    return x


# --- LU with partial pivoting -------------------------------------------------------------

def lu(where: Where, a: Instruction) -> tuple[Instruction, Instruction, Instruction]:
    """LAPACK's getrf: (l and u in one matrix, the 0-based pivot row of each step, info:
    0, or j + 1 for the first zero pivot). Step j takes the first row i >= j with the
    largest |a_ij|, swaps it with row j, and eliminates below it (unblocked, as
    LAPACK's getf2)."""
    b = where.b
    batch, m, n = matrix_batch(a, "lu")
    k = min(m, n)
    nb, dt = len(batch), a.shape.dtype
    loop = WhileLoop(where, "lu", [scalar(b, 0, S32), a, full(b, 0, S32, (*batch, k)),
                                  full(b, 0, S32, batch)])
    j, x, pivots, info = loop.body_elements[:4]
    bb = loop.body
    zero = scalar(bb, 0, S32)
    zeros = [zero] * nb
    col_dims, row_dims, mat = (*batch, m), (*batch, n), (*batch, m, n)
    i_col = bb.iota(Shape.array(S32, col_dims), nb)
    j_col = spread(bb, j, col_dims, ())
    col = slice_at(bb, x, zeros + [zero, j], (*batch, m, 1), col_dims)
    candidates = choose(bb, bb.compare(i_col, j_col, "GE"), bb.op(Opcode.ABS, col),
                         full(bb, -1, dt, col_dims))
    biggest = reduce_along(where, bb, candidates, Opcode.MAXIMUM, -np.inf, nb)
    at_max = bb.compare(candidates, spread(bb, biggest, col_dims, range(nb)), "EQ")
    p = reduce_along(where, bb, choose(bb, at_max, i_col, full(bb, m, S32, col_dims)), Opcode.MINIMUM,
                m, nb)
    p = choose(bb, bb.compare(p, full(bb, m, S32, batch), "EQ"), spread(bb, j, batch, ()),
                p)                                    # a column of NaNs: no swap
    # swap rows j and p (p differs across the batch: rows picked by select and sum)
    rows = bb.iota(Shape.array(S32, mat), nb)
    is_p = bb.compare(rows, spread(bb, p, mat, range(nb)), "EQ")
    row_p = reduce_along(where, bb, choose(bb, is_p, x, full(bb, 0, dt, mat)), Opcode.ADD, 0, nb)
    row_j = slice_at(bb, x, zeros + [j, zero], (*batch, 1, n), row_dims)
    row_axes = (*range(nb), nb + 1)
    is_j = bb.compare(rows, spread(bb, j, mat, ()), "EQ")
    x = choose(bb, is_j, spread(bb, row_p, mat, row_axes),
                choose(bb, is_p, spread(bb, row_j, mat, row_axes), x))
    # eliminate below row j
    pivot = slice_at(bb, row_p, zeros + [j], (*batch, 1), batch)
    nonzero = bb.compare(pivot, full(bb, 0, dt, batch), "NE")
    col = slice_at(bb, x, zeros + [zero, j], (*batch, m, 1), col_dims)
    scaled = choose(bb, spread(bb, nonzero, col_dims, range(nb)),
                     bb.op(Opcode.DIVIDE, col, spread(bb, pivot, col_dims, range(nb))), col)
    cols = bb.iota(Shape.array(S32, mat), nb + 1)
    j_mat = spread(bb, j, mat, ())
    below, right = bb.compare(rows, j_mat, "GT"), bb.compare(cols, j_mat, "GT")
    outer = bb.op(Opcode.MULTIPLY, spread(bb, scaled, mat, range(nb + 1)),
                  spread(bb, row_p, mat, row_axes))
    x = choose(bb, logical_and(bb, below, right), bb.op(Opcode.SUBTRACT, x, outer), x)
    x = choose(bb, logical_and(bb, below, bb.compare(cols, j_mat, "EQ")),
                spread(bb, scaled, mat, range(nb + 1)), x)
    pivots = update_at(bb, pivots, p, zeros + [j], (*batch, 1))
    j1 = bb.op(Opcode.ADD, j, scalar(bb, 1, S32))
    first = logical_and(bb, bb.op(Opcode.NOT, nonzero),
                 bb.compare(info, full(bb, 0, S32, batch), "EQ"))
    info = choose(bb, first, spread(bb, j1, batch, ()), info)
    _, x, pivots, info = loop.finish(counter_below(loop, k), [j1, x, pivots, info])
    return x, pivots, info


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
        return [choose(b, inside, factor, a), info]
    if kind == "trsm":
        a, rhs = operands
        return [triangular_solve(where, a, rhs, left_side=config.get("side", _L) == _L,
                                 lower=config.get("uplo", _L) == _L,
                                 unit_diagonal=config.get("diag", _N) == _U,
                                 transpose_a=config.get("trans_x", _N) != _N)]
    (a,) = operands
    factors, pivots, info = lu(where, a)
    one = full(b, 1, S32, pivots.shape.dims)
    return [factors, b.op(Opcode.ADD, pivots, one), info]


def backend_config(text: str) -> dict[str, int]:
    """``{uplo = 76 : ui8, side = 76 : ui8}`` -> {"uplo": 76, "side": 76}."""
    return {k: int(v) for k, v in re.findall(r"(\w+)\s*=\s*(-?\d+)", text)}
