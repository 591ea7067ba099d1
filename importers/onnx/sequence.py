"""Sequence and optional ONNX ops on values that live only inside the graph.

Compiled code holds dense tensors of fixed shape, so a sequence or an optional as a
model input or output stays out of scope (scope.py). Inside the graph neither needs a
run-time representation when what it holds is known at compile time: a sequence is
the tuple of its elements' instructions (``context.Sequence``: its length is a
constant, each element keeps its own shape) and an optional is its value or None
(``context.OptionalValue``). The ops below only rearrange those tuples; the tensors
move through ordinary HLO (slices, reshapes, concatenations), and positions must be
known at compile time (``ctx.const_input``). SequenceMap inlines its body once per
element.
"""
from __future__ import annotations

from ...hlo import dtypes
from .context import ImportContext, OptionalValue, Sequence, kind_of, node_label, normalize_axis
from .registry import register
from .subgraph import free_names, lower_subgraph
from .types import hlo_dtype


def _position(ctx: ImportContext, node, i: int, n: int, default: int, insert: bool) -> int:
    """Input ``i``, a position into a sequence of ``n`` elements counted from the end when
    negative: in [-n, n - 1], or [-n, n] for an insertion; ``default`` when absent."""
    given = ctx.const_input(node, i, "position", None)
    if given is None:
        return default
    if given.size != 1:
        raise ctx.error(node, f"the position must be a scalar, got shape {list(given.shape)}")
    p = int(given.reshape(-1)[0])
    high = n if insert else n - 1
    if not -n <= p <= high:
        raise ctx.error(node, f"position {p} is out of range for a sequence of {n} "
                              f"element{'s' if n != 1 else ''} ([{-n}, {high}])")
    return p + n if p < 0 else p


def _same_type(ctx: ImportContext, node, dtype: dtypes.DType, xs) -> None:
    for x in xs:
        if x.shape.dtype != dtype:
            raise ctx.error(node, f"a sequence of {dtype} cannot hold a tensor of "
                                  f"{x.shape.dtype}")


@register("SequenceEmpty", since=11)
def sequence_empty(ctx, node):
    dtype = hlo_dtype(ctx.attr(node, "dtype", 1), f"SequenceEmpty node '{node_label(node)}'")
    return [Sequence((), dtype)]


@register("SequenceConstruct", since=11)
def sequence_construct(ctx, node):
    xs = ctx.inputs(node)
    if not xs:
        raise ctx.error(node, "needs at least one input")
    _same_type(ctx, node, xs[0].shape.dtype, xs[1:])
    return [Sequence(tuple(xs), xs[0].shape.dtype)]


@register("SequenceLength", since=11)
def sequence_length(ctx, node):
    return [ctx.scalar(len(ctx.sequence_input(node, 0).items), dtypes.S64)]


@register("SequenceAt", since=11)
def sequence_at(ctx, node):
    seq = ctx.sequence_input(node, 0)
    if ctx.input(node, 1) is None:
        raise ctx.error(node, "missing input 1 (position)")
    return [seq.items[_position(ctx, node, 1, len(seq.items), 0, insert=False)]]


@register("SequenceInsert", since=11)
def sequence_insert(ctx, node):
    seq = ctx.sequence_input(node, 0)
    x = ctx.input(node, 1)
    if x is None:
        raise ctx.error(node, "missing input 1 (tensor)")
    _same_type(ctx, node, seq.dtype, [x])
    n = len(seq.items)
    p = _position(ctx, node, 2, n, n, insert=True)
    return [Sequence(seq.items[:p] + (x,) + seq.items[p:], seq.dtype)]


@register("SequenceErase", since=11)
def sequence_erase(ctx, node):
    seq = ctx.sequence_input(node, 0)
    n = len(seq.items)
    if n == 0:
        raise ctx.error(node, "erases from an empty sequence")
    p = _position(ctx, node, 1, n, n - 1, insert=False)
    return [Sequence(seq.items[:p] + seq.items[p + 1:], seq.dtype)]


@register("SplitToSequence", since=11)
def split_to_sequence(ctx, node):
    x = ctx.input(node, 0)
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis", 0), x.shape.rank)
    keepdims = ctx.attr(node, "keepdims", 1)
    split = ctx.const_input(node, 1, "split", None)
    n = x.shape.dims[axis]
    b = ctx.b
    if split is None:
        # One element per index along axis (split 1), which keepdims=0 drops.
        sizes = [1] * n
    elif split.ndim == 0:
        # Chunks of that size; the last one is smaller when it does not divide.
        chunk = int(split)
        if chunk <= 0:
            raise ctx.error(node, f"split {chunk} must be positive")
        sizes = [min(chunk, n - s) for s in range(0, n, chunk)]
    else:
        sizes = [int(s) for s in split.reshape(-1)]
        if any(s < 0 for s in sizes) or sum(sizes) != n:
            raise ctx.error(node, f"split {sizes} does not cut {n} along axis {axis}")
    items, start = [], 0
    for s in sizes:
        lo, hi = [0] * x.shape.rank, list(x.shape.dims)
        lo[axis], hi[axis] = start, start + s
        part = b.slice(x, lo, hi)
        if split is None and not keepdims:
            part = b.reshape(part, x.shape.dims[:axis] + x.shape.dims[axis + 1:])
        items.append(part)
        start += s
    return [Sequence(tuple(items), x.shape.dtype)]


@register("ConcatFromSequence", since=11)
def concat_from_sequence(ctx, node):
    seq = ctx.sequence_input(node, 0)
    axis = ctx.attr(node, "axis")
    new_axis = ctx.attr(node, "new_axis", 0)
    if not seq.items:
        raise ctx.error(node, "concatenates an empty sequence, whose result has no shape")
    xs = list(seq.items)
    rank = xs[0].shape.rank
    if new_axis:
        # Stacked: each element gets a dimension of 1 at axis, in [-rank - 1, rank].
        axis = normalize_axis(ctx, node, axis, rank + 1)
        xs = [ctx.b.reshape(x, x.shape.dims[:axis] + (1,) + x.shape.dims[axis:]) for x in xs]
    else:
        axis = normalize_axis(ctx, node, axis, rank)
    return [ctx.b.concatenate(xs, axis)]


@register("SequenceMap", since=17)
def sequence_map(ctx, node):
    """The body once per element, inlined: element k of every sequence input and each
    tensor input as it is."""
    body = ctx.attr(node, "body")
    label = node_label(node)
    inputs = [ctx.any_input(node, i) for i in range(len(node.input))]
    if not inputs or not isinstance(inputs[0], Sequence):
        raise ctx.error(node, "input 0 must be a sequence")
    for i, x in enumerate(inputs):
        if x is None or isinstance(x, OptionalValue):
            raise ctx.error(node, f"input {i} is {'absent' if x is None else kind_of(x)}, "
                                  "where a sequence or a tensor is expected")
    n = len(inputs[0].items)
    for i, x in enumerate(inputs):
        if isinstance(x, Sequence) and len(x.items) != n:
            raise ctx.error(node, f"input {i} holds {len(x.items)} elements, input 0 {n}")
    if len(body.input) != len(inputs):
        raise ctx.error(node, f"the body takes {len(body.input)} inputs, given {len(inputs)}")
    outer = {name: ctx.values[name] for name in free_names(body) if name in ctx.values}
    results = [[] for _ in body.output]
    for k in range(n):
        bindings = dict(outer)
        bindings.update((vi.name, x.items[k] if isinstance(x, Sequence) else x)
                        for vi, x in zip(body.input, inputs))
        outs = lower_subgraph(ctx, body, ctx.b, bindings, f"the body of SequenceMap node "
                              f"'{label}'", inline=True)
        for r, y in zip(results, outs):
            if isinstance(y, (Sequence, OptionalValue)):
                raise ctx.error(node, f"the body returns {kind_of(y)}, where a tensor is "
                                      "expected")
            r.append(y)
    # An empty map still has element types: the body's declared ones.
    types = [hlo_dtype(vi.type.tensor_type.elem_type, f"output '{vi.name}' of the body of "
                       f"SequenceMap node '{label}'") for vi in body.output]
    for r, dtype in zip(results, types):
        _same_type(ctx, node, dtype, r)
    return [Sequence(tuple(r), dtype) for r, dtype in zip(results, types)]


@register("Optional", since=15)
def optional(ctx, node):
    x = ctx.any_input(node, 0)
    ctx.attr(node, "type", None)      # the type of an empty optional: nothing to hold
    if x is None and not ctx.has_attr(node, "type"):
        raise ctx.error(node, "an empty Optional needs the 'type' attribute")
    if isinstance(x, OptionalValue):
        raise ctx.error(node, "input 0 is an optional, where a tensor or a sequence is "
                              "expected")
    return [OptionalValue(x)]


@register("OptionalHasElement", since=15)
def optional_has_element(ctx, node):
    # From opset 18 the input may be a tensor or a sequence (present) or absent (empty).
    x = ctx.any_input(node, 0)
    present = x.value is not None if isinstance(x, OptionalValue) else x is not None
    return [ctx.scalar(present, dtypes.PRED)]


@register("OptionalGetElement", since=15)
def optional_get_element(ctx, node):
    x = ctx.any_input(node, 0)
    if x is None:
        raise ctx.error(node, "missing input 0")
    if not isinstance(x, OptionalValue):
        return [x]              # opset 18: a tensor or a sequence is its own element
    if x.value is None:
        raise ctx.error(node, f"input '{node.input[0]}' is an empty optional (known at "
                              "compile time), which has no element to get")
    return [x.value]
