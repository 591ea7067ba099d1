"""Transformer ONNX ops: Attention (opsets 23-25), FlexAttention (ai.onnx.preview),
RotaryEmbedding, SwiGLU, CausalConvWithState and LinearAttention.

Attention is two batched HLO dots with a softmax between them. The query, scaled,
becomes (B, Hkv, G, Sq, D), G = Hq / Hkv query heads per key/value head (a 3-D
query without grouping stays (B, Sq, Hkv, 1, D)), and the dots take K and V as they
come, (B, Hkv, S, D) or (B, S, Hkv, D), with the KV heads as a batch dim:
grouped-query attention reads each KV head once, never a repeated copy, and 3-D keys
and values are never transposed. The scores come out (B, Hkv, G, Sq, Skv), or
(B, Hkv, Sq, 1, Skv). Masks (boolean or additive, causal, sliding window, the
nonpad_kv_seqlen padding) are built as one bias in the canonical (B, Hkv, G, Sq, Skv)
order with size-1 dims where they do not vary, and broadcast into the score loop by
fusion.

Arithmetic follows the ONNX reference where rounding is visible (f16 and bf16: one
bf16 ulp is 4e-3): Q and K are scaled by sqrt(scale) before the dot, as the spec's
pattern does, the probabilities are stored in the input type before the second dot,
and sums accumulate as numpy's do (f16 in f32, bf16 in bf16). f32 and f64 scale Q
once and divide by the softmax denominator after the second dot (on Sq x Dv values,
not Sq x Skv): the probabilities are never stored, only exp(scores - max).
"""
from __future__ import annotations

from math import sqrt

import numpy as np

from ...hlo import (ConvDimensionNumbers, DotDimensionNumbers, GatherDimensionNumbers, Opcode,
                    Shape, Window, dtypes)
from ...hlo.while_loop import WhileLoop
from .activations import swish_of
from .context import node_label
from .subgraph import inline_graph
from .registry import register
from .types import hlo_dtype

PREVIEW = "ai.onnx.preview"
_PATTERN_ROUNDING = (dtypes.F16, dtypes.BF16)


def _sum_type(dtype):
    """numpy sums f16 in f32 (pairwise float accumulators), bf16 (ml_dtypes) in bf16."""
    return dtypes.F32 if dtype == dtypes.F16 else dtype


def _fill_like(ctx, x, value):
    return ctx.full(value, x.shape.dtype, x.shape.dims)


def _and(ctx, a, c):
    if a is None:
        return c
    dims = tuple(np.broadcast_shapes(a.shape.dims, c.shape.dims))
    return ctx.b.op(Opcode.AND, ctx.broadcast_to(a, dims), ctx.broadcast_to(c, dims))


def _softmax_parts(ctx, x, guarded):
    """(exp(x - max), sum of it) over the last dim of ``x``; the sum keeps the other dims.

    ``guarded``: x may hold rows that are all -inf (fully masked). Their max counts as
    0 and their sum as 1, so those rows come out 0, never NaN (the ONNX reference).
    """
    b = ctx.b
    last = x.shape.rank - 1
    kept = tuple(range(last))
    dt = x.shape.dtype
    m = ctx.reduce(x, (last,), Opcode.MAXIMUM, -np.inf)
    if guarded:
        m = b.op(Opcode.SELECT, b.compare(m, _fill_like(ctx, m, -np.inf), "EQ"),
                 _fill_like(ctx, m, 0), m)
    e = b.op(Opcode.EXP, b.op(Opcode.SUBTRACT, x, b.broadcast(m, x.shape.dims, kept)))
    total = b.convert(ctx.reduce(b.convert(e, _sum_type(dt)), (last,), Opcode.ADD, 0), dt)
    if guarded:
        total = b.op(Opcode.SELECT, b.compare(total, _fill_like(ctx, total, 0), "EQ"),
                     _fill_like(ctx, total, 1), total)
    return e, total


# -- Attention ------------------------------------------------------------------------

class _Heads:
    """The head geometry of one Attention node and the layouts of Q, K and V.

    ``q`` is (B, Hq, Sq, D) or (B, Sq, Hq, D); ``q5`` makes the first dot's operand of
    it. ``k`` and ``v`` are 4-D, (B, Hkv, S, d) (``kv_seq_dim`` 2) or (B, S, Hkv, d)
    (``kv_seq_dim`` 1). ``q_major``: the scores come out (B, Hkv, G, Sq, Skv), else
    (B, Hkv, Sq, 1, Skv) (a 3-D query without grouping, which is never transposed).
    """

    def __init__(self, ctx, node, q, k, v):
        b = ctx.b
        rank = q.shape.rank
        if rank not in (3, 4) or k.shape.rank != rank or v.shape.rank != rank:
            raise ctx.error(node, f"Q, K and V must all be 3-D or all 4-D, got {q.shape}, "
                                  f"{k.shape}, {v.shape}")
        q_heads, kv_heads = ctx.attr(node, "q_num_heads", None), \
            ctx.attr(node, "kv_num_heads", None)
        if rank == 3:
            if q_heads is None or kv_heads is None:
                raise ctx.error(node, "3-D Q, K and V need q_num_heads and kv_num_heads")
            for what, x, h in (("Q", q, q_heads), ("K", k, kv_heads), ("V", v, kv_heads)):
                if h <= 0 or x.shape.dims[2] % h:
                    raise ctx.error(node, f"{what} {x.shape}: hidden size is not a multiple "
                                          f"of {h} heads")
            self.batch, self.sq = q.shape.dims[:2]
            self.hq, self.hkv = q_heads, kv_heads
            q = b.reshape(q, (self.batch, self.sq, q_heads, q.shape.dims[2] // q_heads))
            k = b.reshape(k, k.shape.dims[:2] + (kv_heads, k.shape.dims[2] // kv_heads))
            v = b.reshape(v, v.shape.dims[:2] + (kv_heads, v.shape.dims[2] // kv_heads))
            self.kv_seq_dim = 1
        else:
            self.batch, self.hq, self.sq = q.shape.dims[:3]
            self.hkv = k.shape.dims[1]
            if (q_heads not in (None, self.hq) or kv_heads not in (None, self.hkv)):
                raise ctx.error(node, f"q_num_heads/kv_num_heads disagree with {q.shape}, "
                                      f"{k.shape}")
            self.kv_seq_dim = 2
        if self.hkv <= 0 or self.hq % self.hkv:
            raise ctx.error(node, f"{self.hq} query heads are not a multiple of {self.hkv} "
                                  f"key/value heads")
        if v.shape.dims[3 - self.kv_seq_dim] != self.hkv or \
                v.shape.dims[self.kv_seq_dim] != k.shape.dims[self.kv_seq_dim]:
            raise ctx.error(node, f"K {k.shape} and V {v.shape} do not match")
        self.g = self.hq // self.hkv
        self.q_major = rank == 4 or self.g > 1
        self.head_size = q.shape.dims[3]
        if k.shape.dims[3] != self.head_size:
            raise ctx.error(node, f"Q and K head sizes differ: {q.shape}, {k.shape}")
        self.q, self.k, self.v = q, k, v
        self.rank = rank

    def q5(self, ctx, q, scale=None):
        """The query as the first dot's operand, (B, Hkv, G, Sq, D) or (B, Sq, Hkv, 1, D),
        times the scalar instruction ``scale`` if given. A grouped 3-D query is transposed
        (in the loop that scales it) so that one product runs over G x Sq rows: left
        strided, G would be the rows and Sq a loop repacking K per query."""
        b = ctx.b
        d = q.shape.dims
        if self.rank == 4:
            q = b.reshape(q, (d[0], self.hkv, self.g) + d[2:])
        else:
            q = b.reshape(q, d[:2] + (self.hkv, self.g, d[3]))
            if self.q_major:
                q = b.transpose(q, (0, 2, 3, 1, 4))
        if scale is not None:
            q = b.op(Opcode.MULTIPLY, q, b.broadcast(scale, q.shape.dims, ()))
        return q

    def to_kv_major(self, ctx, x):
        """K or V as (B, Hkv, S, d)."""
        return ctx.b.transpose(x, (0, 2, 1, 3)) if self.kv_seq_dim == 1 else x

    def scores_perm(self):
        """Canonical (B, Hkv, G, Sq, Skv) <-> the dots' order (a self-inverse perm)."""
        return (0, 1, 2, 3, 4) if self.q_major else (0, 1, 3, 2, 4)


def _q_dot_k(ctx, heads, q5, k):
    """(B, Hkv, G, Sq, Skv) or (B, Hkv, Sq, 1, Skv) scores: Q5 . K^T over D."""
    q_batch = (0, 1) if heads.q_major else (0, 2)
    kv_batch = (0, 3 - heads.kv_seq_dim)
    return ctx.b.dot(q5, k, DotDimensionNumbers(q_batch, (4,), kv_batch, (3,)))


def _p_dot_v(ctx, heads, p, v):
    """Probabilities (the scores' layout) . V over the key sequence."""
    kv_batch = (0, 3 - heads.kv_seq_dim)
    return ctx.b.dot(p, v, DotDimensionNumbers((0, 1), (4,), kv_batch, (heads.kv_seq_dim,)))


def _canonical_mask(ctx, node, heads, mask, total):
    """attn_mask as (B|1, Hkv|1, G|1, Sq|1, total): padded to ``total`` keys (with False
    or -inf), right-aligned to (batch, heads, Sq, keys), the heads split by KV head."""
    b = ctx.b
    if mask.shape.rank > 4 or mask.shape.rank < 1:
        raise ctx.error(node, f"attn_mask {mask.shape} must have rank 1 to 4")
    is_bool = mask.shape.dtype.is_pred
    short = total - mask.shape.dims[-1]
    if short < 0:
        raise ctx.error(node, f"attn_mask {mask.shape} has more than the {total} keys")
    if short:
        fill = ctx.scalar(False if is_bool else -np.inf, mask.shape.dtype)
        mask = b.pad(mask, fill, (0,) * mask.shape.rank, (0,) * (mask.shape.rank - 1) + (short,))
    mb, mh, mq, mk = (1,) * (4 - mask.shape.rank) + mask.shape.dims
    if mh == heads.hq:
        split = (heads.hkv, heads.g)
    elif mh == 1:
        split = (1, 1)
    else:
        raise ctx.error(node, f"attn_mask {mask.shape} does not broadcast to {heads.hq} heads")
    if mb not in (1, heads.batch) or mq not in (1, heads.sq):
        raise ctx.error(node, f"attn_mask {mask.shape} does not broadcast to "
                              f"({heads.batch}, {heads.hq}, {heads.sq}, {total})")
    return b.reshape(mask, (mb,) + split + (mq, mk))


def _positions(ctx, heads, total, offset):
    """(i + offset, j) as s64 (B|1, 1, 1, Sq, total): the absolute query position and the
    key index; ``offset`` is an int or a (B,) s64 instruction."""
    b = ctx.b
    if isinstance(offset, int):
        shape = Shape.array(dtypes.S64, (1, 1, 1, heads.sq, total))
        i = b.op(Opcode.ADD, b.iota(shape, 3), ctx.full(offset, dtypes.S64, shape.dims))
        return i, b.iota(shape, 4)
    shape = Shape.array(dtypes.S64, (heads.batch, 1, 1, heads.sq, total))
    i = b.op(Opcode.ADD, b.iota(shape, 3), b.broadcast(offset, shape.dims, (0,)))
    return i, b.iota(shape, 4)


def _attention_bias(ctx, node, heads, mask, nonpad, past_len, total):
    """The additive bias of the scores (0 or -inf where a key is masked, plus a float
    mask) in the query type, canonical order with size-1 dims; None without masks."""
    b = ctx.b
    t1 = heads.q.shape.dtype
    allowed, additive = None, None
    if mask is not None:
        mask = _canonical_mask(ctx, node, heads, mask, total)
        if mask.shape.dtype.is_pred:
            allowed = mask
        else:
            additive = b.convert(mask, t1)
    causal = ctx.attr(node, "is_causal", 0)
    left = ctx.attr(node, "left_window_size", -1)
    right = ctx.attr(node, "right_window_size", -1)
    if left < -1 or right < -1:
        raise ctx.error(node, "left_window_size and right_window_size must be -1 or >= 0")
    if causal or left >= 0 or right >= 0:
        # Bottom-right alignment: query i sits at absolute position i + offset, offset =
        # the cached keys before the block (past_key's length, or nonpad - Sq per batch).
        if nonpad is not None:
            offset = b.op(Opcode.SUBTRACT, nonpad, ctx.full(heads.sq, dtypes.S64,
                                                            nonpad.shape.dims))
        else:
            offset = past_len
        i, j = _positions(ctx, heads, total, offset)
        if causal:
            allowed = _and(ctx, allowed, b.compare(j, i, "LE"))
        if left >= 0:
            allowed = _and(ctx, allowed, b.compare(b.op(Opcode.SUBTRACT, i, j),
                                                   _fill_like(ctx, i, left), "LE"))
        if right >= 0:
            allowed = _and(ctx, allowed, b.compare(b.op(Opcode.SUBTRACT, j, i),
                                                   _fill_like(ctx, i, right), "LE"))
    if nonpad is not None:
        shape = Shape.array(dtypes.S64, (heads.batch, 1, 1, 1, total))
        limit = b.broadcast(nonpad, shape.dims, (0,))
        allowed = _and(ctx, allowed, b.compare(b.iota(shape, 4), limit, "LT"))
    if allowed is None:
        return additive
    if additive is None:
        additive = ctx.full(0, t1, (1,) * 5)
    dims = tuple(np.broadcast_shapes(allowed.shape.dims, additive.shape.dims))
    return b.op(Opcode.SELECT, ctx.broadcast_to(allowed, dims),
                ctx.broadcast_to(additive, dims), ctx.full(-np.inf, t1, dims))


@register("Attention", since=23)
def attention(ctx, node):
    b = ctx.b
    q, k, v = (ctx.input(node, i) for i in range(3))
    mask = ctx.input(node, 3)
    past_k, past_v = ctx.input(node, 4), ctx.input(node, 5)
    nonpad = ctx.input(node, 6)
    if (past_k is None) != (past_v is None):
        raise ctx.error(node, "past_key and past_value must be given together")
    if nonpad is not None and past_k is not None:
        raise ctx.error(node, "nonpad_kv_seqlen cannot be combined with past_key/past_value")
    t1 = q.shape.dtype
    if not t1.is_float or k.shape.dtype != t1 or v.shape.dtype != t1:
        raise ctx.error(node, f"Q, K and V must share one floating-point type, got "
                              f"{q.shape}, {k.shape}, {v.shape}")
    heads = _Heads(ctx, node, q, k, v)
    k, v = heads.k, heads.v
    past_len = 0
    if past_k is not None:
        k = b.concatenate([past_k, heads.to_kv_major(ctx, k)], 2)
        v = b.concatenate([past_v, heads.to_kv_major(ctx, v)], 2)
        past_len = past_k.shape.dims[2]
        heads.kv_seq_dim = 2
    # (B, Hkv, S, d) for the present outputs: a transposing copy of 3-D K and V
    wanted = [len(node.output) > i and bool(node.output[i]) for i in range(4)]
    present_k = heads.to_kv_major(ctx, k) if wanted[1] else None
    present_v = heads.to_kv_major(ctx, v) if wanted[2] else None
    total = k.shape.dims[heads.kv_seq_dim]
    if nonpad is not None and nonpad.shape.dims != (heads.batch,):
        raise ctx.error(node, f"nonpad_kv_seqlen {nonpad.shape} must have shape "
                              f"({heads.batch},)")

    # Q . K^T, scaled: sqrt(scale) on each of Q and K where the rounding shows (f16,
    # bf16), else the whole scale on Q (D values per query, not Skv scores).
    scale = ctx.attr(node, "scale", None)
    scale = 1 / sqrt(heads.head_size) if scale is None else scale
    if t1 in _PATTERN_ROUNDING:
        root = ctx.scalar(sqrt(scale), t1)          # rounded to T1, as the reference
        q5 = heads.q5(ctx, heads.q, root)
        k = b.op(Opcode.MULTIPLY, k, b.broadcast(root, k.shape.dims, ()))
    else:
        q5 = heads.q5(ctx, heads.q, ctx.scalar(scale, t1))
    raw = _q_dot_k(ctx, heads, q5, k)
    softcap = ctx.attr(node, "softcap", 0.0)
    capped = raw
    if softcap > 0:
        capped = b.op(Opcode.MULTIPLY, b.op(Opcode.TANH, b.op(
            Opcode.DIVIDE, raw, _fill_like(ctx, raw, softcap))), _fill_like(ctx, raw, softcap))

    perm = heads.scores_perm()
    canonical_dims = tuple(raw.shape.dims[p] for p in perm)
    bias = _attention_bias(ctx, node, heads, mask, nonpad, past_len, total)
    x = capped
    if bias is not None:
        full = b.transpose(ctx.broadcast_to(bias, canonical_dims), perm)
        x = b.op(Opcode.ADD, capped, full)
    biased = x
    precision = ctx.attr(node, "softmax_precision", None)
    sp = t1 if precision is None else hlo_dtype(precision, "softmax_precision")
    if not sp.is_float:
        raise ctx.error(node, f"softmax_precision {sp} is not a floating-point type")
    e, total_e = _softmax_parts(ctx, b.convert(x, sp), guarded=bias is not None)
    kept = (0, 1, 2, 3)
    row_dead = None
    if bias is not None:
        # A row whose bias is -inf everywhere attends nothing: its output is 0.
        worst = ctx.reduce(bias, (4,), Opcode.MAXIMUM, -np.inf)
        dead = b.compare(worst, _fill_like(ctx, worst, -np.inf), "EQ")
        row_dead = b.transpose(ctx.broadcast_to(dead, canonical_dims[:4]), perm[:4])

    mode = ctx.attr(node, "qk_matmul_output_mode", 0)
    if mode not in (0, 1, 2, 3):
        raise ctx.error(node, f"qk_matmul_output_mode must be 0 to 3, got {mode}")
    wants_probs = mode == 3 and wanted[3]
    if t1 == sp and t1 not in _PATTERN_ROUNDING and not wants_probs:
        # exp(x - max) . V, then divided by the row sums: the probabilities are never stored
        y = _p_dot_v(ctx, heads, e, v)
        y = b.op(Opcode.DIVIDE, y, b.broadcast(total_e, y.shape.dims, kept))
        probs = None
    else:
        probs = b.op(Opcode.DIVIDE, e, b.broadcast(total_e, e.shape.dims, kept))
        if row_dead is not None:
            probs = b.op(Opcode.SELECT, b.broadcast(row_dead, probs.shape.dims, kept),
                         _fill_like(ctx, probs, 0), probs)
        probs = b.convert(probs, t1)
        y = _p_dot_v(ctx, heads, probs, v)
    if row_dead is not None and probs is None:
        y = b.op(Opcode.SELECT, b.broadcast(row_dead, y.shape.dims, kept),
                 _fill_like(ctx, y, 0), y)

    dv = y.shape.dims[4]
    if heads.rank == 4:
        y = b.reshape(y, (heads.batch, heads.hq, heads.sq, dv))
    else:               # to (B, Sq, Hkv, G, Dv)
        to_rows = (0, 3, 1, 2, 4) if heads.q_major else (0, 2, 1, 3, 4)
        y = b.reshape(b.transpose(y, to_rows), (heads.batch, heads.sq, heads.hq * dv))
    qk = {0: raw, 1: capped, 2: biased, 3: probs}[mode] if wanted[3] else None
    if qk is not None:
        qk = b.reshape(b.transpose(qk, perm), (heads.batch, heads.hq, heads.sq, total))
        qk = b.convert(qk, t1)
    return [y, present_k, present_v, qk]


# -- FlexAttention --------------------------------------------------------------------

@register("FlexAttention", since=1, domain=PREVIEW)
def flex_attention(ctx, node):
    # Softmax(score_mod(Q . K^T * scale)) then prob_mod, . V; the modifiers are subgraphs
    # on the (B, Hq, Sq, Skv) tensor, inlined. Scores and probabilities are in
    # softmax_precision, by default f32 for f16/bf16 inputs and the input type otherwise.
    b = ctx.b
    q, k, v = (ctx.input(node, i) for i in range(3))
    if q.shape.rank != 4:
        raise ctx.error(node, f"Q, K and V must be 4-D, got {q.shape}, {k.shape}, {v.shape}")
    t1 = q.shape.dtype
    heads = _Heads(ctx, node, q, k, v)
    precision = ctx.attr(node, "softmax_precision", None)
    if precision is not None:
        sp = hlo_dtype(precision, "softmax_precision")
    else:
        sp = dtypes.F32 if t1.bits < 32 else t1
    scale = ctx.attr(node, "scale", None)
    scale = 1 / sqrt(heads.head_size) if scale is None else scale
    root = ctx.scalar(np.sqrt(np.float32(scale)), t1)   # sqrt in f32, then T1: the reference
    q5 = heads.q5(ctx, heads.q, root)
    k = b.op(Opcode.MULTIPLY, heads.k, b.broadcast(root, heads.k.shape.dims, ()))
    scores = b.convert(_q_dot_k(ctx, heads, q5, k), sp)
    dims4 = (heads.batch, heads.hq, heads.sq, scores.shape.dims[4])

    def modified(attr, x):
        graph = ctx.attr(node, attr, None)
        if graph is None:
            return x
        (y,) = inline_graph(ctx, graph, [b.reshape(x, dims4)])
        if y.shape.dims != dims4 or y.shape.dtype != sp:
            raise ctx.error(node, f"{attr} must return {sp}{list(dims4)}, got {y.shape}")
        return b.reshape(y, x.shape.dims)

    e, total = _softmax_parts(ctx, modified("score_mod", scores), guarded=False)
    probs = b.op(Opcode.DIVIDE, e, b.broadcast(total, e.shape.dims, (0, 1, 2, 3)))
    probs = modified("prob_mod", probs)
    y = _p_dot_v(ctx, heads, probs, b.convert(heads.v, sp))
    return [b.convert(b.reshape(y, dims4[:3] + (y.shape.dims[4],)), t1)]


# -- RotaryEmbedding ------------------------------------------------------------------

@register("RotaryEmbedding", since=23)
def rotary_embedding(ctx, node):
    # The first rotary_embedding_dim features of each head are rotated as rd/2 pairs,
    # (x1, x2) -> (cos x1 - sin x2, sin x1 + cos x2): pairs are the two halves, or
    # neighbours (interleaved). cos/sin come from the caches at position_ids.
    x, cos, sin, pos = (ctx.input(node, i) for i in range(4))
    return [rotary_of(ctx, node, x, cos, sin, pos, ctx.attr(node, "interleaved", 0),
                      ctx.attr(node, "rotary_embedding_dim", 0), ctx.attr(node, "num_heads", 0))]


def rotary_of(ctx, node, x, cos, sin, pos, interleaved, rd, num_heads):
    """``x`` (B, N, S, h) or (B, S, N * h) rotated; cos and sin are caches read at the
    (B, S) ``pos``, or (B, S, rd / 2) without it."""
    b = ctx.b
    if x.shape.rank == 4:
        batch, _, seq, d = x.shape.dims
        x4, cache_dims = x, (0, 2, 3)
    elif x.shape.rank == 3:
        batch, seq, hidden = x.shape.dims
        if num_heads <= 0 or hidden % num_heads:
            raise ctx.error(node, f"a 3-D input {x.shape} needs num_heads dividing its "
                                  f"hidden size, got num_heads={num_heads}")
        d = hidden // num_heads
        x4, cache_dims = b.reshape(x, (batch, seq, num_heads, d)), (0, 1, 3)
    else:
        raise ctx.error(node, f"input must be 3-D or 4-D, got {x.shape}")
    rd = rd or d
    if rd % 2 or rd > d:
        raise ctx.error(node, f"rotary_embedding_dim {rd} must be even and at most the "
                              f"head size {d}")
    half = rd // 2
    if pos is not None:
        if pos.shape.dims != (batch, seq) or cos.shape.rank != 2:
            raise ctx.error(node, f"position_ids {pos.shape} must be ({batch}, {seq}) and "
                                  f"the caches 2-D, got {cos.shape}")
        dn = GatherDimensionNumbers((2,), (0,), (0,), 2)
        cos = b.gather(cos, pos, dn, (1, cos.shape.dims[1]))
        sin = b.gather(sin, pos, dn, (1, sin.shape.dims[1]))
    for what, c in (("cos_cache", cos), ("sin_cache", sin)):
        if c.shape.dims != (batch, seq, half):
            raise ctx.error(node, f"{what} gives {c.shape.dims}, expected "
                                  f"({batch}, {seq}, {half}) for rotary_embedding_dim {rd}")
    cos = b.broadcast(cos, x4.shape.dims[:3] + (half,), cache_dims)
    sin = b.broadcast(sin, x4.shape.dims[:3] + (half,), cache_dims)

    def part(start, stop, stride=1):
        lead = x4.shape.dims[:3]
        return b.slice(x4, (0, 0, 0, start), lead + (stop,), (1, 1, 1, stride))

    x1, x2 = (part(0, rd, 2), part(1, rd, 2)) if interleaved else \
        (part(0, half), part(half, rd))
    def mul(p, q):
        return b.op(Opcode.MULTIPLY, p, q)

    real = b.op(Opcode.SUBTRACT, mul(cos, x1), mul(sin, x2))
    imag = b.op(Opcode.ADD, mul(sin, x1), mul(cos, x2))
    if interleaved:
        pairs = [b.reshape(t, t.shape.dims + (1,)) for t in (real, imag)]
        rotated = b.reshape(b.concatenate(pairs, 4), real.shape.dims[:3] + (rd,))
    else:
        rotated = b.concatenate([real, imag], 3)
    if rd < d:
        rotated = b.concatenate([rotated, part(rd, d)], 3)
    return b.reshape(rotated, x.shape.dims)


# -- SwiGLU, CausalConvWithState ----------------------------------------------------------

@register("SwiGLU", since=28)
def swiglu(ctx, node):
    # y = a * sigmoid(alpha * a) * b, a and b of one shape (no broadcasting).
    a, g = ctx.input(node, 0), ctx.input(node, 1)
    if a.shape != g.shape:
        raise ctx.error(node, f"A {a.shape} and B {g.shape} must have one shape and type")
    return [ctx.b.op(Opcode.MULTIPLY, swish_of(ctx, a, ctx.attr(node, "alpha", 1.0)), g)]


@register("CausalConvWithState", since=27)
def causal_conv_with_state(ctx, node):
    # A depthwise 1-D convolution over (B, C, L) whose left context is past_state (the
    # last k-1 inputs of the previous call; zeros without it), optionally followed by
    # SiLU. present_state is the last k-1 positions of past_state ++ input.
    b = ctx.b
    x, w, bias, past = (ctx.input(node, i) for i in range(4))
    activation = ctx.attr(node, "activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise ctx.error(node, f"unsupported activation '{activation}'")
    if x.shape.rank != 3 or w.shape.rank != 3:
        raise ctx.error(node, f"input (B, C, L) and weight (C, 1, k) must be 3-D, got "
                              f"{x.shape}, {w.shape}")
    batch, channels, length = x.shape.dims
    k = w.shape.dims[2]
    if w.shape.dims[:2] != (channels, 1) or k < 1:
        raise ctx.error(node, f"weight {w.shape} must be ({channels}, 1, k)")
    if past is None:
        padded = b.pad(x, ctx.scalar(0, x.shape.dtype), (0, 0, k - 1), (0, 0, 0))
    else:
        if past.shape.dims != (batch, channels, k - 1):
            raise ctx.error(node, f"past_state {past.shape} must be ({batch}, {channels}, "
                                  f"{k - 1})")
        padded = b.concatenate([past, x], 2)
    y = b.convolution(padded, w, Window.make((k,)), ConvDimensionNumbers.nchw(1),
                      feature_group_count=channels)
    if bias is not None:
        y = b.op(Opcode.ADD, y, b.broadcast(bias, y.shape.dims, (1,)))
    if activation != "none":
        y = swish_of(ctx, y)
    present = b.slice(padded, (0, 0, length), (batch, channels, length + k - 1))
    return [y, present]


# -- LinearAttention ------------------------------------------------------------------

# Sequences up to this many tokens are unrolled, longer ones are a while over the tokens.
# Measured (gated_delta, B 1, 8 heads of 64): unrolled runs about 1.4x faster per token
# (the loop body's fused state update reads its token through a dynamic-slice, the
# unrolled one through a static slice) but compiles in time growing with T, faster than
# linearly: 4 tokens 0.55 s against 0.23 s, 8: 1.1 s, 16: 4 s against 0.23 s.
MAX_UNROLLED_STEPS = 8
_UPDATE_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True),
                 "gated_delta": (True, True)}      # rule -> (gating, delta correction)


def _heads_of(ctx, node, what, x, shape, heads, per_head_sizes):
    """A packed (B, T, heads * d) input as (B, T, heads, d), d one of ``per_head_sizes``."""
    if x.shape.rank != 3 or x.shape.dims[:2] != shape or \
            x.shape.dims[2] not in tuple(heads * n for n in per_head_sizes):
        raise ctx.error(node, f"{what} {x.shape} must be ({shape[0]}, {shape[1]}, "
                              f"{' or '.join(str(heads * n) for n in per_head_sizes)})")
    return ctx.b.reshape(x, shape + (heads, x.shape.dims[2] // heads))


def _over(b, x, dims):
    """``x`` (leading dims of ``dims``, size 1 where it does not vary) broadcast to ``dims``."""
    kept = [i for i, n in enumerate(x.shape.dims) if n == dims[i]]
    return b.broadcast(b.reshape(x, [x.shape.dims[i] for i in kept]), tuple(dims), kept)


@register("LinearAttention", since=27, ignore=("chunk_size",))   # a tuning hint
def linear_attention(ctx, node):
    # The recurrence over T in f32, one step per token as the reference runs it. Per
    # step, with the state S (B, Hkv, dk, dv):
    #   gated:  S *= exp(g_t)                (g_t per KV head or per key dim)
    #   delta:  v_t = beta_t * (v_t - S^T k_t)
    #   S += k_t (outer) v_t;   o_t = scale * q_t^T S, query head h reading KV head h // G
    # Longer than MAX_UNROLLED_STEPS, it is a while over the tokens carrying S and the
    # output (each step writes its row with dynamic-update-slice), so the body has the
    # size of one step whatever T; the inputs' conversions to f32 and exp(decay) are done
    # for all steps before the loop.
    b = ctx.b
    q, k, v, past, decay, beta = (ctx.input(node, i) for i in range(6))
    rule = ctx.attr(node, "update_rule", "gated_delta")
    if rule not in _UPDATE_RULES:
        raise ctx.error(node, f"unknown update_rule '{rule}'")
    gating, delta = _UPDATE_RULES[rule]
    for what, x, needed in (("decay", decay, gating), ("beta", beta, delta)):
        if (x is not None) != needed:
            raise ctx.error(node, f"update_rule '{rule}' {'needs' if needed else 'takes no'} "
                                  f"{what} input")
    hq, hkv = ctx.attr(node, "q_num_heads"), ctx.attr(node, "kv_num_heads")
    if hkv <= 0 or hq <= 0 or hq % hkv:
        raise ctx.error(node, f"q_num_heads {hq} must be a positive multiple of "
                              f"kv_num_heads {hkv}")
    if q.shape.rank != 3:
        raise ctx.error(node, f"query must be (B, T, H*d), got {q.shape}")
    bt = q.shape.dims[:2]
    batch, steps = bt
    if q.shape.dims[2] % hq:
        raise ctx.error(node, f"query {q.shape} does not split into {hq} heads")
    dk = q.shape.dims[2] // hq
    f32 = dtypes.F32
    q4 = b.convert(b.reshape(q, bt + (hq, dk)), f32)
    k4 = b.convert(_heads_of(ctx, node, "key", k, bt, hkv, (dk,)), f32)
    if v.shape.rank != 3 or v.shape.dims[2] % hkv:
        raise ctx.error(node, f"value {v.shape} does not split into {hkv} heads")
    dv = v.shape.dims[2] // hkv
    v4 = b.convert(_heads_of(ctx, node, "value", v, bt, hkv, (dv,)), f32)
    state_shape = (batch, hkv, dk, dv)
    if past is not None:
        if past.shape.dims != state_shape:
            raise ctx.error(node, f"past_state {past.shape} must be {state_shape}")
        state, state_type = b.convert(past, f32), past.shape.dtype
    else:
        state, state_type = ctx.full(0, f32, state_shape), q.shape.dtype
    inputs = {"q": q4, "k": k4, "v": v4}
    if gating:
        decay = b.convert(_heads_of(ctx, node, "decay", decay, bt, hkv, (1, dk)), f32)
        inputs["decay"] = b.op(Opcode.EXP, decay)
    if delta:
        if beta.shape.dims not in (bt + (hkv,), bt + (1,)):
            raise ctx.error(node, f"beta {beta.shape} must be ({batch}, {steps}, {hkv} or 1)")
        inputs["beta"] = b.convert(beta, f32)
    scale = ctx.attr(node, "scale", 0.0) or 1 / sqrt(dk)

    def step(b, state, at):
        """One token: the new state and o_t (B, 1, Hq * dv); ``at(name)`` is the token's
        slice of an input, (B, ...)."""
        k_t, v_t = at("k"), at("v")                              # (B, Hkv, dk), (B, Hkv, dv)
        if gating:     # exp(decay) (B, Hkv, 1 or dk) scales the rows of S
            state = b.op(Opcode.MULTIPLY, state, _over(b, at("decay"), state_shape))
        if delta:
            # retrieved[b, h, m] = sum_d S[b, h, d, m] k_t[b, h, d]
            retrieved = b.dot(state, k_t, DotDimensionNumbers((0, 1), (2,), (0, 1), (2,)))
            v_t = b.op(Opcode.MULTIPLY, _over(b, at("beta"), v_t.shape.dims),
                       b.op(Opcode.SUBTRACT, v_t, retrieved))
        outer = b.op(Opcode.MULTIPLY, b.broadcast(k_t, state_shape, (0, 1, 2)),
                     b.broadcast(v_t, state_shape, (0, 1, 3)))
        state = b.op(Opcode.ADD, state, outer)
        q_t = b.reshape(at("q"), (batch, hkv, hq // hkv, dk))
        o_t = b.dot(q_t, state, DotDimensionNumbers((0, 1), (3,), (0, 1), (2,)))
        o_t = b.op(Opcode.MULTIPLY, o_t, b.broadcast(b.constant(np.float32(scale), f32),
                                                     o_t.shape.dims, ()))  # (B, Hkv, G, dv)
        return state, b.reshape(o_t, (batch, 1, hq * dv))

    def token(b, x, t, slice_at):
        """Token t of a (B, T, ...) tensor, as (B, ...)."""
        rest = x.shape.dims[2:]
        return b.reshape(slice_at(b, x, t, (batch, 1) + rest), (batch,) + rest)

    if steps <= MAX_UNROLLED_STEPS:
        def static(b, x, t, sizes):
            return b.slice(x, (0, t) + (0,) * (len(sizes) - 2), (batch, t + 1) + sizes[2:])
        outputs = []
        for t in range(steps):
            state, o_t = step(b, state, lambda name: token(b, inputs[name], t, static))
            outputs.append(o_t)
        y = b.concatenate(outputs, 1)
    else:
        s64 = dtypes.S64
        lp = WhileLoop(ctx, node_label(node), [ctx.scalar(0, s64), state,
                                               ctx.full(0, f32, (batch, steps, hq * dv))])
        t, body_state, body_y = lp.body_elements
        body = lp.body
        captured = {name: lp.capture(x)[1] for name, x in inputs.items()}
        zero = body.constant(0, s64)

        def dynamic(b, x, t, sizes):
            return b.op(Opcode.DYNAMIC_SLICE, x, zero, t, *[zero] * (len(sizes) - 2),
                        dynamic_slice_sizes=sizes)
        new_state, o_t = step(body, body_state,
                              lambda name: token(body, captured[name], t, dynamic))
        new_y = body.op(Opcode.DYNAMIC_UPDATE_SLICE, body_y, o_t, zero, t, zero)
        cond = lp.cond.compare(lp.cond_elements[0], lp.cond.constant(steps, s64), "LT")
        _, state, y = lp.finish(cond, [body.op(Opcode.ADD, t, body.constant(1, s64)),
                                       new_state, new_y])[:3]
    return [b.convert(y, q.shape.dtype), b.convert(state, state_type)]
