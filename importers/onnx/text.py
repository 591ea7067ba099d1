"""TfIdfVectorizer: n-gram counts of integer token ids, weighted.

The pool of n-grams is in the attributes, so it is known at compile time and the
lowering is a fixed set of comparisons. For each gram length n and skip distance d,
n slices of the token rows, shifted by 0, d, ..., (n-1) d, give every candidate n-gram
(x[p], x[p + d], ..., x[p + (n-1) d]) at once; each is compared with every pool
n-gram of that length, the matches AND-reduced over the gram and summed over the
positions p. The counts of all grams are weighted by the mode and placed at their
output columns (a constant scatter-add, since two grams may share a column). The work
is rows x positions x pool grams x n per (n, d).

Counting follows ONNX's reference (onnx/reference/ops/op_tfidf_vectorizer.py): an
n-gram of n >= 2 is counted once per skip distance d = 1 .. max_skip_count + 1, a
unigram once only; a gram listed twice in the pool counts under its last id. String
pools are out of scope (xlac holds no strings).
"""
from __future__ import annotations

import numpy as np

from ...hlo import Opcode, ScatterDimensionNumbers, dtypes
from .registry import register


def _pool_grams(ctx, node, pool, counts, lo: int, hi: int, ids: int):
    """n -> {gram: its index among the pool's n-grams} for the pool grams of length
    lo <= n <= hi; the pool holds ``ids`` n-grams."""
    grams: dict[int, dict[tuple, int]] = {}
    ngram_id = 0
    for i, start in enumerate(counts):
        n = i + 1
        end = counts[i + 1] if i + 1 < len(counts) else len(pool)
        if not 0 <= start <= end <= len(pool):
            raise ctx.error(node, f"ngram_counts {list(counts)} do not fit a pool of "
                                  f"{len(pool)} items")
        for k in range((end - start) // n):
            if ngram_id >= ids:
                raise ctx.error(node, f"{ids} ngram_indexes for more pool n-grams")
            if lo <= n <= hi:
                gram = tuple(pool[start + k * n:start + (k + 1) * n])
                grams.setdefault(n, {})[gram] = ngram_id      # the last id wins
            ngram_id += 1
    return grams


def _count(ctx, rows, grams: dict[tuple, int], n: int, skips: int):
    """[rows, len(grams)] f32: how often each n-gram occurs in each row of ``rows``
    (s64 [R, C]), over the skip distances 1 .. ``skips``."""
    b = ctx.b
    r, c = rows.shape.dims
    pool = np.array(list(grams), dtype=np.int64).reshape(len(grams), n)
    total = None
    for d in range(1, skips + 1):
        positions = c - (n - 1) * d
        if positions <= 0:
            break
        grid = (r, positions, len(grams))
        match = None
        for j in range(n):
            tokens = b.slice(rows, (0, j * d), (r, j * d + positions))
            eq = b.compare(b.broadcast(tokens, grid, (0, 1)),
                           b.broadcast(b.constant(pool[:, j], dtypes.S64), grid, (2,)), "EQ")
            match = eq if match is None else b.op(Opcode.AND, match, eq)
        found = ctx.reduce(b.convert(match, dtypes.F32), (1,), Opcode.ADD, 0)
        total = found if total is None else b.op(Opcode.ADD, total, found)
    return total if total is not None else ctx.full(0, dtypes.F32, (r, len(grams)))


@register("TfIdfVectorizer", since=9)
def tfidf_vectorizer(ctx, node):
    b = ctx.b
    x = ctx.input(node, 0)
    if ctx.has_attr(node, "pool_strings"):
        raise ctx.out_of_scope(node, "pool_strings: its n-grams are of strings, which "
                                     "compiled code does not hold")
    if x.shape.rank > 2:
        raise ctx.error(node, f"input must be [C] or [B, C], got {x.shape}")
    mode = ctx.attr(node, "mode")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ctx.error(node, f"unknown mode {mode!r}")
    lo, hi = ctx.attr(node, "min_gram_length"), ctx.attr(node, "max_gram_length")
    skips = ctx.attr(node, "max_skip_count") + 1
    if not 1 <= lo <= hi or skips < 1:
        raise ctx.error(node, f"bad gram lengths {lo}..{hi} or max_skip_count {skips - 1}")
    indexes = np.asarray(ctx.attr(node, "ngram_indexes"), np.int64)
    width = int(indexes.max()) + 1
    if indexes.min() < 0:
        raise ctx.error(node, f"negative ngram_indexes {indexes.tolist()}")
    grams = _pool_grams(ctx, node, list(ctx.attr(node, "pool_int64s")),
                        list(ctx.attr(node, "ngram_counts")), lo, hi, len(indexes))
    weights = ctx.attr(node, "weights", None)
    if weights is not None and len(weights) != len(indexes):
        raise ctx.error(node, f"{len(weights)} weights for {len(indexes)} pool n-grams")

    dims = x.shape.dims
    rows = b.convert(b.reshape(x, (1 if len(dims) < 2 else dims[0], dims[-1] if dims else 1)),
                     dtypes.S64)
    r = rows.shape.dims[0]
    y = ctx.full(0, dtypes.F32, (r, width))
    if grams:
        ids = np.array([i for _, g in sorted(grams.items()) for i in g.values()], np.int64)
        v = b.concatenate([_count(ctx, rows, g, n, 1 if n == 1 else skips)
                           for n, g in sorted(grams.items())], 1)
        shape = v.shape.dims
        if mode == "IDF":
            # 1 (or the weight) where the gram occurs
            v = b.convert(b.compare(v, ctx.full(0, dtypes.F32, shape), "GT"), dtypes.F32)
        if mode != "TF" and weights is not None:
            # the i-th weight is the i-th pool n-gram's (ONNX's spec and onnxruntime; the
            # reference evaluator reads it by output column)
            w = b.constant(np.asarray(weights, np.float32)[ids], dtypes.F32)
            v = b.op(Opcode.MULTIPLY, v, b.broadcast(w, shape, (1,)))
        # each gram's value to its column; grams that share a column add up
        cols = b.constant(indexes[ids].reshape(-1, 1), dtypes.S64)
        dn = ScatterDimensionNumbers((0,), (1,), (1,), 1)
        y = b.scatter(y, cols, v, dn, ctx.reducer(Opcode.ADD, dtypes.F32))
    return [b.reshape(y, (width,)) if len(dims) < 2 else y]
