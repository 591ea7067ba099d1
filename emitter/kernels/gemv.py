"""Matrix-vector products (batch-1 fully connected layers): ``out[r] = sum_k Mat[r,k] v[k]``.

These are memory bound (a 25088 x 4096 weight is read once, 400 MB), so both paths
read the matrix in long contiguous runs and keep the vector side in cache:

- ``emit_row_dot``: rows contiguous in k (ONNX Gemm with transB=1). RB rows at a time,
  each accumulated over k in vector registers, then summed across lanes.
- ``emit_row_stream``: columns contiguous in r (MatMul x[1,K] . W[K,N]). The output
  row stays in L1; each step adds KB matrix rows scaled by broadcast vector elements.
"""
from __future__ import annotations

from llvmlite import ir

from ..irutil import alloca_once, for_range, i64
from .vec import (F32, fma, hsum, lane_mask, load_vec, masked_load, masked_store, offset_ptr,
                  splat, store_vec, vec_type, zeros)

ROW_BLOCK = 4       # rows of the row-dot path sharing each load of the vector
UNROLL = 2          # independent vector accumulators per row (hides FMA latency)
K_BLOCK = 4         # matrix rows added per pass over the output in the row-stream path


def emit_row_dot(b: ir.IRBuilder, lanes: int, rows: int, k: int, mat: ir.Value, sr: int,
                 vec: ir.Value, out: ir.Value, so: int) -> None:
    """Mat[r, k] at mat[r*sr + k], v[k] at vec[k], out[r] at out[r*so]."""
    full = rows - rows % ROW_BLOCK
    with for_range(b, full, "r", step=ROW_BLOCK) as r:
        _row_dot_block(b, lanes, ROW_BLOCK, k, mat, sr, vec, out, so, r)
    if rows % ROW_BLOCK:
        _row_dot_block(b, lanes, rows % ROW_BLOCK, k, mat, sr, vec, out, so, i64(full))


def _row_dot_block(b, lanes, nrows, k, mat, sr, vec, out, so, r):
    vty = vec_type(F32, lanes)
    step = lanes * UNROLL
    k_full = k - k % step
    acc = [[alloca_once(b, vty, f"dot{i}.{u}") for u in range(UNROLL)] for i in range(nrows)]
    for row in acc:
        for a in row:
            b.store(zeros(vty), a)
    row_ptr = [offset_ptr(b, mat, F32, b.mul(b.add(r, i64(i)), i64(sr))) for i in range(nrows)]

    def step_at(kk, masks):
        xs = [_load(b, offset_ptr(b, vec, F32, b.add(kk, i64(u * lanes))), vty, masks[u])
              for u in range(UNROLL)]
        for i in range(nrows):
            for u in range(UNROLL):
                if masks[u] == 0:
                    continue
                w = _load(b, offset_ptr(b, row_ptr[i], F32, b.add(kk, i64(u * lanes))), vty,
                          masks[u])
                b.store(fma(b, w, xs[u], b.load(acc[i][u], typ=vty)), acc[i][u])

    with for_range(b, k_full, "k", step=step) as kk:
        step_at(kk, [lanes] * UNROLL)
    rem = k - k_full
    if rem:             # tail: one masked step
        step_at(i64(k_full), [max(0, min(lanes, rem - u * lanes)) for u in range(UNROLL)])
    for i in range(nrows):
        total = b.load(acc[i][0], typ=vty)
        for u in range(1, UNROLL):
            total = b.fadd(total, b.load(acc[i][u], typ=vty))
        b.store(hsum(b, total), offset_ptr(b, out, F32, b.mul(b.add(r, i64(i)), i64(so))))


def _load(b, ptr, vty, lanes):
    if lanes == 0:
        return zeros(vty)
    if lanes == vty.count:
        return load_vec(b, ptr, vty)
    return masked_load(b, ptr, vty, lane_mask(vty.count, lanes))


def emit_row_stream(b: ir.IRBuilder, lanes: int, rows: int, k: int, mat: ir.Value, sk: int,
                    vec: ir.Value, sv: int, out: ir.Value) -> None:
    """Mat[r, k] at mat[r + k*sk], v[k] at vec[k*sv], out[r] at out[r] (contiguous)."""
    vty = vec_type(F32, lanes)
    _over_rows(b, lanes, rows, lambda r, n: _store(b, zeros(vty), offset_ptr(b, out, F32, r), n))
    k_full = k - k % K_BLOCK

    def block(k0, nk):
        xs = [splat(b, b.load(offset_ptr(b, vec, F32, b.mul(b.add(k0, i64(j)), i64(sv))),
                              typ=F32), lanes) for j in range(nk)]
        rows_ptr = [offset_ptr(b, mat, F32, b.mul(b.add(k0, i64(j)), i64(sk)))
                    for j in range(nk)]

        def body(r, n):
            o_ptr = offset_ptr(b, out, F32, r)
            o = _load(b, o_ptr, vty, n)
            for j in range(nk):
                o = fma(b, xs[j], _load(b, offset_ptr(b, rows_ptr[j], F32, r), vty, n), o)
            _store(b, o, o_ptr, n)
        _over_rows(b, lanes, rows, body)

    with for_range(b, k_full, "k", step=K_BLOCK) as k0:
        block(k0, K_BLOCK)
    if k % K_BLOCK:
        block(i64(k_full), k % K_BLOCK)


def _over_rows(b, lanes, rows, body):
    """``body(r, lanes)`` over full vectors of rows, then once for the partial tail."""
    full = rows - rows % lanes
    with for_range(b, full, "r", step=lanes) as r:
        body(r, lanes)
    if rows % lanes:
        body(i64(full), rows % lanes)


def _store(b, val, ptr, lanes):
    if lanes == val.type.count:
        store_vec(b, val, ptr)
    else:
        masked_store(b, val, ptr, lane_mask(val.type.count, lanes))
