"""onnxruntime's contrib attention ops (com.microsoft): Attention, MultiHeadAttention,
GroupQueryAttention and RotaryEmbedding, as its CPU kernels compute them.

Both attend per head, softmax(Q . K^T * scale + bias) . V, with Q and K^T as the dots read
them (no transposed copy) and the softmax divided after the second dot (transformer.py's
``_softmax_parts``). onnxruntime's masks differ from ONNX's: a masked score gets
``mask_filter_value`` (default -10000) *added*, not -inf, once for the mask and once more
for the causal (unidirectional) cut, so a fully masked row comes out as the softmax of
its masked scores, as onnxruntime's does. The key padding mask (``mask_index``) is one of

    (B)        keys from mask_index[b] on are masked (right padding)
    (2B)       and keys before mask_index[B + b] (left padding too)
    (B, T)     raw: keys whose mask value is 0 are masked
    (B, S, T)  raw, per query

with T the keys, past ones included. Past keys and values come before the new ones.
GroupQueryAttention masks by leaving keys out (-inf), as its kernel's softmax does.
"""
from __future__ import annotations

from math import sqrt

import numpy as np

from ...hlo import DotDimensionNumbers, Opcode, Shape, dtypes
from .math import matmul_of
from .registry import MS, register
from .transformer import _softmax_parts, rotary_of


def _heads(ctx, x, n):
    """(B, S, n * h) -> (B, n, S, h)."""
    batch, seq, hidden = x.shape.dims
    return ctx.b.transpose(ctx.b.reshape(x, (batch, seq, n, hidden // n)), (0, 2, 1, 3))


def _mask_bias(ctx, node, mask, batch, seq, total, past, causal, filt, dt):
    """The additive bias of onnxruntime's masks, (B|1, 1, S|1, T) in ``dt``; None without
    one. ``past``: the keys before the new ones, where the causal cut of query i lies."""
    b = ctx.b

    def filled(masked):
        zero, value = ctx.full(0, dt, masked.shape.dims), ctx.full(filt, dt, masked.shape.dims)
        return b.op(Opcode.SELECT, masked, value, zero)

    bias = None
    if mask is not None:
        bias = filled(_masked_keys(ctx, node, mask, batch, seq, total))
    if causal:
        shape = Shape.array(dtypes.S64, (1, 1, seq, total))
        i = b.op(Opcode.ADD, b.iota(shape, 2), ctx.full(past, dtypes.S64, shape.dims))
        cut = filled(b.compare(b.iota(shape, 3), i, "GT"))
        bias = cut if bias is None else ctx.binary(node, Opcode.ADD, bias, cut)
    return bias


def _masked_keys(ctx, node, mask, batch, seq, total):
    """PRED (B, 1, S|1, T): true where mask_index masks a key."""
    b, dims = ctx.b, mask.shape.dims
    if not mask.shape.dtype.is_integer:
        raise ctx.error(node, f"mask_index {mask.shape} must be int32")
    if dims in ((batch, total), (batch, seq, total)):
        raw = b.reshape(mask, (batch, 1, seq if mask.shape.rank == 3 else 1, total))
        return b.compare(raw, ctx.full(0, mask.shape.dtype, raw.shape.dims), "LE")
    if dims not in ((batch,), (2 * batch,)):
        raise ctx.error(node, f"mask_index {mask.shape} must be ({batch}), ({2 * batch}), "
                              f"({batch}, {total}) or ({batch}, {seq}, {total})")
    shape = Shape.array(mask.shape.dtype, (batch, 1, 1, total))
    key = b.iota(shape, 3)

    def bound(start):
        return b.broadcast(b.slice(mask, (start,), (start + batch,)), shape.dims, (0,))

    masked = b.compare(key, bound(0), "GE")
    if dims == (2 * batch,):
        masked = b.op(Opcode.OR, masked, b.compare(key, bound(batch), "LT"))
    return masked


def _attend(ctx, node, q, k, v, bias, scale):
    """softmax(Q . K^T * scale + bias) . V for Q (B, N, S, h), K (B, N, T, h),
    V (B, N, T, hv) and ``bias`` broadcast to (B, N, S, T); the result (B, S, N * hv)."""
    b = ctx.b
    batch, heads, seq, _ = q.shape.dims
    dt = q.shape.dtype
    q = b.op(Opcode.MULTIPLY, q, ctx.full(scale, dt, q.shape.dims))
    scores = b.dot(q, k, DotDimensionNumbers((0, 1), (3,), (0, 1), (3,)))
    if bias is not None:
        scores = ctx.binary(node, Opcode.ADD, scores, bias)
    e, total = _softmax_parts(ctx, scores, guarded=False)
    y = b.dot(e, v, DotDimensionNumbers((0, 1), (3,), (0, 1), (2,)))
    y = b.op(Opcode.DIVIDE, y, b.broadcast(total, y.shape.dims, (0, 1, 2)))
    return b.reshape(b.transpose(y, (0, 2, 1, 3)), (batch, seq, heads * y.shape.dims[3]))


def _scores_bias(ctx, node, mask, attn_bias, batch, heads, seq, total, past, dt):
    """What is added to the scores: the masks' bias (``unidirectional`` and
    ``mask_filter_value`` attributes) plus ``attention_bias``; None without either."""
    bias = _mask_bias(ctx, node, mask, batch, seq, total, past,
                      ctx.attr(node, "unidirectional", 0), _mask_filter_value(ctx, node), dt)
    attn_bias = _attention_bias(ctx, node, attn_bias, batch, heads, seq, total)
    if attn_bias is None:
        return bias
    return attn_bias if bias is None else ctx.binary(node, Opcode.ADD, bias, attn_bias)


def _mask_filter_value(ctx, node):
    return ctx.attr(node, "mask_filter_value", -10000.0)


def _attention_bias(ctx, node, bias, batch, heads, seq, total):
    """attention_bias (B|1, N|1, S, T), checked."""
    if bias is not None and (bias.shape.rank != 4 or bias.shape.dims[2:] != (seq, total)
                             or bias.shape.dims[0] not in (1, batch)
                             or bias.shape.dims[1] not in (1, heads)):
        raise ctx.error(node, f"attention_bias {bias.shape} must be ({batch} or 1, {heads} "
                              f"or 1, {seq}, {total})")
    return bias


def _with_past(ctx, node, x, past, what):
    """(B, N, P + L, h): the past's keys or values before ``x``'s (B, N, L, h)."""
    if past is None:
        return x
    if past.shape.dims[:2] + past.shape.dims[3:] != x.shape.dims[:2] + x.shape.dims[3:]:
        raise ctx.error(node, f"{what} {past.shape} does not fit {x.shape}")
    return ctx.b.concatenate([past, x], 2)


def _refuse(ctx, node, attribute, value):
    if ctx.attr(node, attribute, 0):
        raise ctx.error(node, f"{attribute}={value} is not supported")


@register("Attention", since=1, domain=MS)
def attention(ctx, node):
    # input (B, S, In) . weights (In, Dq + Dk + Dv) + bias, split into Q, K, V of
    # qkv_hidden_sizes (default three equal parts); past (2, B, N, P, h) -> present
    # (2, B, N, P + S, h). The shared past/present buffer (past_sequence_length) and the
    # rotary embedding are refused.
    b = ctx.b
    x, w, proj_bias, mask, past, attn_bias = (ctx.input(node, i) for i in range(6))
    heads = ctx.attr(node, "num_heads")
    _refuse(ctx, node, "past_present_share_buffer", 1)
    _refuse(ctx, node, "do_rotary", 1)
    ctx.attr(node, "rotary_embedding_dim", 0)          # only read with do_rotary
    if x.shape.rank != 3 or w.shape.rank != 2 or w.shape.dims[0] != x.shape.dims[2]:
        raise ctx.error(node, f"input {x.shape} must be (B, S, In) and weights {w.shape} "
                              f"(In, Dq + Dk + Dv)")
    sizes = tuple(ctx.attr(node, "qkv_hidden_sizes", (w.shape.dims[1] // 3,) * 3))
    if len(sizes) != 3 or sum(sizes) != w.shape.dims[1] or sizes[0] != sizes[1] or \
            any(n <= 0 or n % heads for n in sizes):
        raise ctx.error(node, f"qkv_hidden_sizes {list(sizes)} must split weights "
                              f"{w.shape} into Q and K of one size and V, each a multiple "
                              f"of {heads} heads")
    batch, seq, _ = x.shape.dims
    qkv = matmul_of(ctx, node, x, w)
    if proj_bias is not None:
        qkv = ctx.binary(node, Opcode.ADD, qkv, proj_bias)
    starts = (0, sizes[0], sizes[0] + sizes[1], sum(sizes))
    q, k, v = (_heads(ctx, b.slice(qkv, (0, 0, lo), (batch, seq, hi)), heads)
               for lo, hi in zip(starts, starts[1:]))
    past_len = 0
    if past is not None:
        if past.shape.rank != 5 or past.shape.dims[0] != 2:
            raise ctx.error(node, f"past {past.shape} must be (2, B, N, P, h)")
        past_len = past.shape.dims[3]
        part = past.shape.dims[1:]
        k = _with_past(ctx, node, k, b.reshape(b.slice(past, (0,) * 5, (1,) + part), part),
                       "past")
        v = _with_past(ctx, node, v, b.reshape(b.slice(past, (1, 0, 0, 0, 0), (2,) + part),
                                                part), "past")
    present = b.concatenate([b.reshape(t, (1,) + t.shape.dims) for t in (k, v)], 0) \
        if k.shape == v.shape else None
    bias = _scores_bias(ctx, node, mask, attn_bias, batch, heads, seq, k.shape.dims[2],
                        past_len, x.shape.dtype)
    scale = ctx.attr(node, "scale", 0.0) or 1 / sqrt(sizes[0] // heads)
    return [_attend(ctx, node, q, k, v, bias, scale), present]


@register("RotaryEmbedding", since=1, domain=MS)
def rotary_embedding(ctx, node):
    # ONNX's RotaryEmbedding, but position_ids are required: (B, S), or (1,) the position
    # of the first token (then s + offset for every sequence). Without num_heads a 3-D
    # input's heads are as wide as the caches' rows make the rotated part.
    b = ctx.b
    x, pos, cos, sin = (ctx.input(node, i) for i in range(4))
    _refuse(ctx, node, "is_packed_batching", 1)
    if ctx.attr(node, "scale", 1.0) != 1.0:
        raise ctx.error(node, "scale other than 1 is not supported")
    rd = ctx.attr(node, "rotary_embedding_dim", 0)
    heads = ctx.attr(node, "num_heads", 0)
    if x.shape.rank == 3 and not heads:
        if rd or cos.shape.rank != 2 or x.shape.dims[2] % (2 * cos.shape.dims[1]):
            raise ctx.error(node, f"a 3-D input {x.shape} needs num_heads with "
                                  f"rotary_embedding_dim, or caches whose rows are half a head")
        heads = x.shape.dims[2] // (2 * cos.shape.dims[1])
    batch, seq = (x.shape.dims[0], x.shape.dims[2] if x.shape.rank == 4 else x.shape.dims[1])
    if pos.shape.dims == (1,):
        shape = Shape.array(pos.shape.dtype, (batch, seq))
        pos = b.op(Opcode.ADD, b.iota(shape, 1), b.broadcast(b.reshape(pos, ()), shape.dims, ()))
    return [rotary_of(ctx, node, x, cos, sin, pos, ctx.attr(node, "interleaved", 0), rd, heads)]


@register("MultiHeadAttention", since=1, domain=MS)
def multi_head_attention(ctx, node):
    # query (B, S, D), key (B, L, D) and value (B, L, Dv), each + its part of bias
    # (D + D + Dv); past_key/past_value (B, N, P, h) -> present_key/present_value
    # (B, N, P + L, h). The packed forms (query (B, S, N, 3, h), key (B, L, N, 2, h)),
    # pre-split keys (B, N, L, h), beam search's cache_indirection and the qk output are
    # not supported.
    b = ctx.b
    q, k, v, proj_bias, mask, attn_bias, past_k, past_v = (ctx.input(node, i)
                                                            for i in range(8))
    heads = ctx.attr(node, "num_heads")
    if k is None or v is None or any(t.shape.rank != 3 for t in (q, k, v)) or \
            q.shape.dims[2] != k.shape.dims[2] or k.shape.dims[:2] != v.shape.dims[:2] or \
            q.shape.dims[2] % heads or v.shape.dims[2] % heads:
        raise ctx.error(node, f"query, key and value must be (B, S, D), (B, L, D), (B, L, Dv) "
                              f"with D and Dv multiples of {heads} heads (the packed and "
                              f"pre-split forms are not supported)")
    if (past_k is None) != (past_v is None):
        raise ctx.error(node, "past_key and past_value must be given together")
    if proj_bias is not None:
        d, dv = q.shape.dims[2], v.shape.dims[2]
        if proj_bias.shape.dims != (2 * d + dv,):
            raise ctx.error(node, f"bias {proj_bias.shape} must be ({2 * d + dv},)")
        q, k, v = (ctx.binary(node, Opcode.ADD, t, b.slice(proj_bias, (lo,), (lo + n,)))
                   for t, lo, n in ((q, 0, d), (k, d, d), (v, 2 * d, dv)))
    batch, seq, _ = q.shape.dims
    k = _with_past(ctx, node, _heads(ctx, k, heads), past_k, "past_key")
    v = _with_past(ctx, node, _heads(ctx, v, heads), past_v, "past_value")
    past_len = 0 if past_k is None else past_k.shape.dims[2]
    bias = _scores_bias(ctx, node, mask, attn_bias, batch, heads, seq, k.shape.dims[2],
                        past_len, q.shape.dtype)
    scale = ctx.attr(node, "scale", 0.0) or 1 / sqrt(q.shape.dims[2] // heads)
    return [_attend(ctx, node, _heads(ctx, q, heads), k, v, bias, scale), k, v]


@register("GroupQueryAttention", since=1, domain=MS)
def group_query_attention(ctx, node):
    # onnxruntime's CPU kernel. query (B, S, N h) with key and value (B, S, Nkv h), or all
    # three packed in query (B, S, (N + 2 Nkv) h); past_key/past_value (B, Nkv, P, h);
    # seqlens_k (B) each sequence's keys less one; total_sequence_length a compile-time
    # scalar: S == total is a first prompt (no past keys), else each sequence has
    # seqlens_k + 1 - S past keys, its new ones follow them in present (B, Nkv,
    # max(total, P), h), zeros beyond. Query s sees keys up to its own, the last
    # local_window_size of them where that is > 0; scores are scaled, then softcapped
    # (softcap * tanh(x / softcap)). do_rotary rotates the new queries and keys at their
    # positions. Padded first prompts (seqlens_k + 1 < S) are left as onnxruntime leaves
    # them, undefined.
    b = ctx.b
    q, k, v, past_k, past_v, seqlens, _, cos, sin = (ctx.input(node, i) for i in range(9))
    heads, kv_heads = ctx.attr(node, "num_heads"), ctx.attr(node, "kv_num_heads")
    _refuse(ctx, node, "smooth_softmax", 1)
    _refuse(ctx, node, "qk_output", "non-zero")
    if any(node.input[9:]):
        raise ctx.error(node, "position_ids, attention_bias and head_sink are not supported")
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise ctx.error(node, f"num_heads={heads} must be a multiple of kv_num_heads={kv_heads}")
    total = int(ctx.const_input(node, 6, "total_sequence_length").reshape(-1)[0])
    if k is None:
        q, k, v = _unpacked_qkv(ctx, node, q, heads, kv_heads)
    batch, seq, width = q.shape.dims
    h = width // heads
    if width % heads or any(t is None or t.shape.dims != (batch, seq, kv_heads * h)
                            for t in (k, v)):
        raise ctx.error(node, f"query {q.shape} must be (B, S, {heads} h) and key and value "
                              f"(B, S, {kv_heads} h)")
    if (past_k is None) != (past_v is None) or seqlens is None or \
            seqlens.shape.dims != (batch,):
        raise ctx.error(node, f"needs seqlens_k ({batch}) and past_key with past_value or "
                              f"neither")
    if seq not in (1, total) and batch != 1:
        raise ctx.error(node, "a prompt after past keys (1 < S != total_sequence_length) "
                              "needs batch 1")
    first = seq == total
    past_len = ctx.full(0, dtypes.S64, (batch,)) if first else \
        b.op(Opcode.ADD, b.convert(seqlens, dtypes.S64), ctx.full(1 - seq, dtypes.S64, (batch,)))
    qh, kh, vh = _heads(ctx, q, heads), _heads(ctx, k, kv_heads), _heads(ctx, v, kv_heads)
    interleaved = ctx.attr(node, "rotary_interleaved", 0)
    if ctx.attr(node, "do_rotary", 0):
        if cos is None or sin is None or cos.shape.rank != 2:
            raise ctx.error(node, "do_rotary needs 2-D cos_cache and sin_cache")
        shape = Shape.array(dtypes.S64, (batch, seq))
        pos = b.op(Opcode.ADD, b.iota(shape, 1), b.broadcast(past_len, shape.dims, (0,)))
        rd = 2 * cos.shape.dims[1]
        qh = rotary_of(ctx, node, qh, cos, sin, pos, interleaved, rd, heads)
        kh = rotary_of(ctx, node, kh, cos, sin, pos, interleaved, rd, kv_heads)
    present_len = max(total, past_k.shape.dims[2] if past_k is not None else 0)
    pk = _present(ctx, node, kh, past_k, past_len, present_len)
    pv = _present(ctx, node, vh, past_v, past_len, present_len)
    scores = _grouped_scores(ctx, node, qh, pk, past_len, ctx.attr(node, "scale", 0.0) or
                             1 / sqrt(h))
    e, denominator = _softmax_parts(ctx, scores, guarded=False)
    y = b.dot(e, pv, DotDimensionNumbers((0, 1), (3,), (0, 1), (2,)))     # (B, Nkv, G S, h)
    y = b.op(Opcode.DIVIDE, y, b.broadcast(denominator, y.shape.dims, (0, 1, 2)))
    y = b.reshape(y, (batch, kv_heads, heads // kv_heads, seq, h))
    return [b.reshape(b.transpose(y, (0, 3, 1, 2, 4)), (batch, seq, heads * h)), pk, pv]


def _unpacked_qkv(ctx, node, qkv, heads, kv_heads):
    """Q, K, V of a packed (B, S, (N + 2 Nkv) h)."""
    batch, seq, width = qkv.shape.dims
    if width % (heads + 2 * kv_heads):
        raise ctx.error(node, f"packed query {qkv.shape} is not (B, S, ({heads} + 2 x "
                              f"{kv_heads}) h)")
    h = width // (heads + 2 * kv_heads)
    ends = (0, heads * h, (heads + kv_heads) * h, width)
    return [ctx.b.slice(qkv, (0, 0, lo), (batch, seq, hi)) for lo, hi in zip(ends, ends[1:])]


def _present(ctx, node, new, past, past_len, length: int):
    """(B, Nkv, length, h): per sequence its past_len first past rows, ``new`` after them,
    zeros beyond (onnxruntime clears present before copying)."""
    b = ctx.b
    batch, kv_heads, _, h = new.shape.dims
    dims = (batch, kv_heads, length, h)
    base = ctx.full(0, new.shape.dtype, dims)
    if past is not None:
        if past.shape.dims[:2] + past.shape.dims[3:] != (batch, kv_heads, h):
            raise ctx.error(node, f"past {past.shape} does not fit keys {new.shape}")
        filler = ctx.full(0, new.shape.dtype, (batch, kv_heads, length - past.shape.dims[2], h))
        kept = b.compare(b.iota(Shape.array(dtypes.S64, dims), 2),
                         b.broadcast(past_len, dims, (0,)), "LT")
        base = b.op(Opcode.SELECT, kept, b.concatenate([past, filler], 2), base)
    zero = ctx.scalar(0, dtypes.S64)
    rows = []
    for i in range(batch):
        at = b.reshape(b.slice(past_len, (i,), (i + 1,)), ())
        row = b.slice(base, (i, 0, 0, 0), (i + 1,) + dims[1:])
        part = b.slice(new, (i, 0, 0, 0), (i + 1,) + new.shape.dims[1:])
        rows.append(b.op(Opcode.DYNAMIC_UPDATE_SLICE, row, part, zero, zero, at, zero))
    return b.concatenate(rows, 0) if batch > 1 else rows[0]


def _grouped_scores(ctx, node, q, keys, past_len, scale):
    """Q (B, N, S, h) . K^T with K (B, Nkv, T, h), each KV head read by its N / Nkv query
    heads as one (B, Nkv, G S, T) dot, scaled and softcapped, -inf where query s does not
    see key j: j > past_len + s, or j <= past_len + s - local_window_size (onnxruntime's
    window: the query's own key and the window - 1 before it)."""
    b = ctx.b
    batch, heads, seq, h = q.shape.dims
    kv_heads, length = keys.shape.dims[1], keys.shape.dims[2]
    groups = heads // kv_heads
    dt = q.shape.dtype
    q = b.reshape(b.op(Opcode.MULTIPLY, q, ctx.full(scale, dt, q.shape.dims)),
                  (batch, kv_heads, groups * seq, h))
    scores = b.dot(q, keys, DotDimensionNumbers((0, 1), (3,), (0, 1), (3,)))
    softcap = ctx.attr(node, "softcap", 0.0)
    if softcap > 0:
        cap = ctx.full(softcap, dt, scores.shape.dims)
        scores = b.op(Opcode.MULTIPLY, cap, b.op(Opcode.TANH, b.op(Opcode.DIVIDE, scores, cap)))
    dims = (batch, 1, 1, seq, length)
    own = b.op(Opcode.ADD, b.broadcast(past_len, dims, (0,)),
               b.iota(Shape.array(dtypes.S64, dims), 3))          # query s's own key
    key = b.iota(Shape.array(dtypes.S64, dims), 4)
    seen = b.compare(key, own, "LE")
    window = ctx.attr(node, "local_window_size", -1)
    if window > 0:
        start = b.op(Opcode.SUBTRACT, own, ctx.full(window - 1, dtypes.S64, dims))
        seen = b.op(Opcode.AND, seen, b.compare(key, start, "GE"))
    full = (batch, kv_heads, groups, seq, length)
    seen = b.reshape(b.broadcast(b.reshape(seen, (batch, seq, length)), full, (0, 3, 4)),
                     scores.shape.dims)
    return b.op(Opcode.SELECT, seen, scores, ctx.full(-np.inf, dt, scores.shape.dims))
