"""Matrix-vector products (batch-1 fully connected layers): ``out[r] = sum_k Mat[r,k] v[k]``.

These are memory bound (a 25088 x 4096 weight is read once, 400 MB), so both paths
read the matrix in long contiguous runs and keep the vector side in cache:

- ``emit_row_dot``: rows contiguous in k (ONNX Gemm with transB=1). RB rows at a time,
  each accumulated over k in vector registers, then summed across lanes.
- ``emit_row_stream``: columns contiguous in r (MatMul x[1,K] . W[K,N]). The output
  row stays in L1; each step adds KB matrix rows scaled by broadcast vector elements.

Sizes and strides are run-time i64 values; tails use run-time lane masks or one-row
(one-k) steps, so the code does not depend on the sizes.
"""
from __future__ import annotations

from llvmlite import ir

from ..irutil import alloca_once, for_range, i64
from .sizes import first_lanes
from .vec import (F32, fma, hsum, load_vec, masked_load, masked_store, offset_ptr, splat,
                  store_vec, vec_type, zeros)

ROW_BLOCK = 4       # rows of the row-dot path sharing each load of the vector
UNROLL = 2          # independent vector accumulators per row (hides FMA latency)
K_BLOCK = 4         # matrix rows added per pass over the output in the row-stream path


def _round_down(b, x, step: int):
    """x - x % step for a power-of-two step."""
    return b.and_(x, i64(-step))


def emit_row_dot(b: ir.IRBuilder, lanes: int, rows, k, mat: ir.Value, sr,
                 vec: ir.Value, out: ir.Value, so, epilogue=None) -> None:
    """Mat[r, k] at mat[r*sr + k], v[k] at vec[k], out[r] at out[r*so];
    ``epilogue(b, value, r)`` maps each sum before it is stored."""
    full = _round_down(b, rows, ROW_BLOCK)
    with for_range(b, full, "r", step=ROW_BLOCK) as r:
        _row_dot_block(b, lanes, ROW_BLOCK, k, mat, sr, vec, out, so, r, epilogue)
    with for_range(b, rows, "r1", start=full) as r:
        _row_dot_block(b, lanes, 1, k, mat, sr, vec, out, so, r, epilogue)


def _row_dot_block(b, lanes, nrows, k, mat, sr, vec, out, so, r, epilogue):
    vty = vec_type(F32, lanes)
    step = lanes * UNROLL
    k_full = _round_down(b, k, step)
    acc = [[alloca_once(b, vty, f"dot{i}.{u}") for u in range(UNROLL)] for i in range(nrows)]
    for row in acc:
        for a in row:
            b.store(zeros(vty), a)
    row_ptr = [offset_ptr(b, mat, F32, b.mul(b.add(r, i64(i)), sr)) for i in range(nrows)]

    def step_at(kk, masks):
        xs = [_load(b, offset_ptr(b, vec, F32, b.add(kk, i64(u * lanes))), vty, masks[u])
              for u in range(UNROLL)]
        for i in range(nrows):
            for u in range(UNROLL):
                w = _load(b, offset_ptr(b, row_ptr[i], F32, b.add(kk, i64(u * lanes))), vty,
                          masks[u])
                b.store(fma(b, w, xs[u], b.load(acc[i][u], typ=vty)), acc[i][u])

    with for_range(b, k_full, "k", step=step) as kk:
        step_at(kk, [None] * UNROLL)
    rem = b.sub(k, k_full)
    with b.if_then(b.icmp_signed(">", rem, i64(0))):        # tail: one masked step
        step_at(k_full, [first_lanes(b, lanes, u * lanes, rem) for u in range(UNROLL)])
    for i in range(nrows):
        total = b.load(acc[i][0], typ=vty)
        for u in range(1, UNROLL):
            total = b.fadd(total, b.load(acc[i][u], typ=vty))
        row = b.add(r, i64(i))
        value = hsum(b, total)
        if epilogue is not None:
            value = epilogue(b, value, row)
        b.store(value, offset_ptr(b, out, F32, b.mul(row, so)))


def _load(b, ptr, vty, mask):
    return load_vec(b, ptr, vty) if mask is None else masked_load(b, ptr, vty, mask)


def _store(b, val, ptr, mask):
    if mask is None:
        store_vec(b, val, ptr)
    else:
        masked_store(b, val, ptr, mask)


def emit_row_stream(b: ir.IRBuilder, lanes: int, rows, k, mat: ir.Value, sk,
                    vec: ir.Value, sv, out: ir.Value, epilogue=None) -> None:
    """Mat[r, k] at mat[r + k*sk], v[k] at vec[k*sv], out[r] at out[r] (contiguous);
    ``epilogue(b, value, 0, r, mask)`` maps each vector of the finished row in one pass
    over it (in L1 still)."""
    vty = vec_type(F32, lanes)
    _over_rows(b, lanes, rows,
               lambda r, mask: _store(b, zeros(vty), offset_ptr(b, out, F32, r), mask))

    def block(k0, nk):
        xs = [splat(b, b.load(offset_ptr(b, vec, F32, b.mul(b.add(k0, i64(j)), sv)),
                              typ=F32), lanes) for j in range(nk)]
        rows_ptr = [offset_ptr(b, mat, F32, b.mul(b.add(k0, i64(j)), sk)) for j in range(nk)]

        def body(r, mask):
            o_ptr = offset_ptr(b, out, F32, r)
            o = _load(b, o_ptr, vty, mask)
            for j in range(nk):
                o = fma(b, xs[j], _load(b, offset_ptr(b, rows_ptr[j], F32, r), vty, mask), o)
            _store(b, o, o_ptr, mask)
        _over_rows(b, lanes, rows, body)

    k_full = _round_down(b, k, K_BLOCK)
    with for_range(b, k_full, "k", step=K_BLOCK) as k0:
        block(k0, K_BLOCK)
    with for_range(b, k, "k1", start=k_full) as k0:       # the last k % K_BLOCK rows
        block(k0, 1)
    if epilogue is not None:
        def finish(r, mask):
            o_ptr = offset_ptr(b, out, F32, r)
            _store(b, epilogue(b, _load(b, o_ptr, vty, mask), i64(0), r, mask), o_ptr, mask)
        _over_rows(b, lanes, rows, finish)


def _over_rows(b, lanes, rows, body):
    """``body(r, mask)`` over full vectors of rows, then once for the masked tail."""
    full = _round_down(b, rows, lanes)
    with for_range(b, full, "r", step=lanes) as r:
        body(r, None)
    rem = b.sub(rows, full)
    with b.if_then(b.icmp_signed(">", rem, i64(0))):
        body(full, first_lanes(b, lanes, 0, rem))
