"""Control-flow ONNX ops: If, Loop and Scan, lowered to HLO conditional and while.

If becomes a conditional whose branches are the two subgraphs (or, when the
condition is known at compile time, the chosen subgraph inlined). Loop and Scan
become a while over a flat state: an s64 step counter, the loop-carried values, the
scan inputs and run-time captured values (read only), and one accumulator per scan
output that each step writes one slice of (dynamic-update-slice, in place). Scan
outputs need the trip count at compile time: Scan's is the scan inputs' length,
Loop's must be M known and a condition that stays true.

Sequences and optionals known at compile time (sequence.py) go through as the tensors
they hold (``context.flatten``): into a chosen branch as they are, into a branch chosen
at run time or a loop body as captured or loop-carried tensors. Both branches must
return, and a while's body must carry on, values of one layout (kind, length,
presence, shapes). A Loop that carries a sequence or an optional and whose trip count
and condition are known at compile time is unrolled instead (its body inlined once per
iteration, the iteration number a constant), so that its sequences may grow and
positions computed from the iteration number are known: SequenceMap's function body is
such a loop. Where the while cannot hold such a loop, its trip count and condition are
asked for as constant inputs.
"""
from __future__ import annotations

import numpy as np
import onnx

from ...hlo import Builder, Instruction, Opcode, XlacError, dtypes
from ...hlo.while_loop import WhileLoop
from .context import (ConstantInputNeeded, DataDependentShape, ImportContext, OptionalValue,
                      Sequence, flatten, kind_of, node_label, rebuild, structure)
from .registry import register
from .scope import LOOP_CHANGES_STRUCTURE, RUN_TIME_STRUCTURE
from .subgraph import Captures, free_names, lower_subgraph

S64 = dtypes.S64
# Most iterations a Loop carrying a sequence or an optional is unrolled into (each one
# the body's code once more); a longer one is a while, which keeps its layout or fails.
UNROLL_LIMIT = 1024


def _scalar(b: Builder, x: Instruction, dtype: dtypes.DType, what: str) -> Instruction:
    """A one-element tensor as a scalar of ``dtype``."""
    if x.shape.num_elements != 1:
        raise XlacError(f"{what} must hold one element, got {x.shape}")
    return b.convert(b.reshape(x, ()), dtype)


def _like_declared(b: Builder, x: Instruction, vi: onnx.ValueInfoProto) -> Instruction:
    """``x`` reshaped to a subgraph input's declared dims where they are all known and
    hold as many elements (a scalar declared [1])."""
    tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if tt is None or not tt.HasField("shape"):
        return x
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    if None in dims or tuple(dims) == x.shape.dims:
        return x
    count = 1
    for d in dims:
        count *= d
    return b.reshape(x, dims) if count == x.shape.num_elements else x


# -- If ----------------------------------------------------------------------------

@register("If", since=1)
def if_(ctx: ImportContext, node):
    label = node_label(node)
    cond = ctx.input(node, 0)
    graphs = (ctx.attr(node, "then_branch"), ctx.attr(node, "else_branch"))
    known = ctx.value_of(cond)
    if known is not None:
        if known.size != 1:
            raise ctx.error(node, f"the condition must hold one element, got {cond.shape}")
        chosen = graphs[0] if bool(known.reshape(-1)[0]) else graphs[1]
        bindings = {n: ctx.values[n] for n in free_names(chosen) if n in ctx.values}
        return lower_subgraph(ctx, chosen, ctx.b, bindings, f"If node '{label}'", inline=True)
    branches, operands, results = [], [], []
    for graph, which in zip(graphs, ("then_branch", "else_branch")):
        scope = f"the {which} of If node '{label}'"
        captures = Captures(ctx, free_names(graph), scope)
        operand = ctx.b.tuple([x for _, x in captures.values])
        b = Builder(f"{label}_{which}")
        p = b.parameter(0, operand.shape, "captured")
        elements = [b.get_tuple_element(p, k) for k in range(len(captures.values))]
        outs = lower_subgraph(ctx, graph, b, captures.bind(b, elements), scope)
        results.append(outs)
        branches.append(b)
        operands.append(operand)
    then_outs, else_outs = results
    if len(then_outs) != len(else_outs) or not then_outs:
        raise ctx.error(node, f"the branches return {len(then_outs)} and {len(else_outs)} "
                              f"values")
    for k, (t, e) in enumerate(zip(then_outs, else_outs)):
        if structure(t) == structure(e):
            continue
        if isinstance(t, Instruction) and isinstance(e, Instruction):
            raise ctx.error(node, f"output {k} is {t.shape} in then_branch but {e.shape} in "
                                  f"else_branch; xlac needs one static shape")
        why = (f"output {k} is {_describe(t)} in then_branch but {_describe(e)} in "
               "else_branch")
        _ask_for_inputs(ctx, node, ((0, "condition"),),
                        f"{why}, which compiled code holds only with the branch chosen")
        raise ctx.out_of_scope(node, f"{why}, and the condition is known only at run time: "
                                     f"{RUN_TIME_STRUCTURE}")
    # Sequences and optionals leave the conditional as the tensors they hold.
    flat = [[x for y in outs for x in flatten(y)] for outs in results]
    if not flat[0]:
        return then_outs            # nothing held at run time: empty sequences, no values
    called = []
    for b, outs in zip(branches, flat):
        root = outs[0] if len(outs) == 1 else b.tuple(outs)
        called.append(ctx.module.add_computation(b.build(root)))
    pred = _scalar(ctx.b, cond, dtypes.PRED, f"If node '{label}': the condition")
    c = ctx.b.op(Opcode.CONDITIONAL, pred, *operands, called=called, name=label)
    tensors = [c] if len(flat[0]) == 1 else \
        [ctx.b.get_tuple_element(c, k) for k in range(len(flat[0]))]
    tensors = iter(tensors)
    return [rebuild(t, tensors) for t in then_outs]


def _ask_for_inputs(ctx: ImportContext, node, inputs, why: str) -> None:
    """Raise ``ConstantInputNeeded`` (noting ``why``) for the first of ``inputs`` ((index,
    what) pairs) not known at compile time that comes from small model inputs, which a
    caller may pin; return where none does."""
    for i, what in inputs:
        if i >= len(node.input) or not node.input[i]:
            continue
        try:
            ctx.const_input(node, i, what)
        except DataDependentShape:
            return                  # computed from data: no pinning helps
        except ConstantInputNeeded as e:
            note = f" ({node.op_type} node '{node_label(node)}': {why})"
            raise ConstantInputNeeded(f"{e}{note}", e.inputs, cli=f"{e.cli}{note}") from None
        except XlacError:
            return


def _describe(value) -> str:
    """A value's kind and what fixes its layout, for messages."""
    def text(x):
        return f"{x.shape.dtype}[{','.join(map(str, x.shape.dims))}]"
    if isinstance(value, Sequence):
        return ("a sequence of " + (", ".join(map(text, value.items)) if value.items
                                    else f"no {value.dtype} tensors"))
    if isinstance(value, OptionalValue):
        return "an empty optional" if value.value is None else \
            f"an optional holding {_describe(value.value)}"
    return f"a tensor {text(value)}"


# -- Loop ---------------------------------------------------------------------------

@register("Loop", since=1)
def loop(ctx: ImportContext, node):
    body = ctx.attr(node, "body")
    trip, cond = ctx.input(node, 0), ctx.input(node, 1)
    carried = [ctx.any_input(node, i) for i in range(2, len(node.input))]
    if any(x is None for x in carried):
        raise ctx.error(node, "a loop-carried value is missing")
    n = len(carried)
    if len(body.input) != 2 + n or len(body.output) < 1 + n:
        raise ctx.error(node, f"the body takes {len(body.input)} inputs and returns "
                              f"{len(body.output)} values for {n} loop-carried values")
    if all(isinstance(v, Instruction) for v in carried):
        return _while_loop(ctx, node, body, carried)
    m_value = ctx.value_of(trip) if trip is not None else None
    keep = ctx.value_of(cond) if cond is not None else np.array(True)
    if m_value is not None and keep is not None:
        try:
            return _unrolled_loop(ctx, node, body, carried, int(m_value.reshape(-1)[0]),
                                  bool(keep.reshape(-1)[0]))
        except _NotUnrolled:
            pass        # a while, then; what the unrolling built is dead code
    try:
        return _while_loop(ctx, node, body, carried)
    except ConstantInputNeeded:
        raise
    except XlacError:
        # Unrolled, the loop may change its sequences' layout and know its iteration
        # number: ask for what unrolling needs where it comes from model inputs.
        _ask_for_inputs(ctx, node, ((0, "trip count M"), (1, "condition")),
                        "it carries a sequence or an optional that a while cannot hold; "
                        "with its trip count and condition known it is unrolled")
        raise


class _NotUnrolled(Exception):
    """A loop to compile as a while after all: it runs more than UNROLL_LIMIT iterations,
    or its body computes its condition at run time."""


def _unrolled_loop(ctx: ImportContext, node, body, carried: list, trip_count: int,
                   keep: bool) -> list:
    """The body inlined once per iteration, the iteration number a constant, while the
    condition (the body's, known at compile time too, else ``_NotUnrolled``) holds."""
    label = node_label(node)
    if trip_count > UNROLL_LIMIT:
        raise _NotUnrolled()
    n = len(carried)
    outer = {name: ctx.values[name] for name in free_names(body) if name in ctx.values}
    values, rows = list(carried), [[] for _ in body.output[1 + n:]]
    for i in range(trip_count):
        if not keep:
            break
        bindings = dict(outer)
        bindings[body.input[0].name] = _like_declared(ctx.b, ctx.scalar(i, S64), body.input[0])
        bindings[body.input[1].name] = _like_declared(ctx.b, ctx.scalar(keep, dtypes.PRED),
                                                      body.input[1])
        bindings.update((vi.name, v) for vi, v in zip(body.input[2:], values))
        outs = lower_subgraph(ctx, body, ctx.b, bindings, f"the body of Loop node '{label}' "
                              f"(iteration {i})", inline=True)
        if node.input[1:2] and node.input[1]:
            # Without a condition input, the body's condition output is ignored (ONNX).
            known = ctx.value_of(outs[0])
            if known is None:
                raise _NotUnrolled()
            keep = bool(known.reshape(-1)[0])
        values = outs[1:1 + n]
        for r, y in zip(rows, outs[1 + n:]):
            if not isinstance(y, Instruction):
                raise ctx.error(node, f"a scan output of the body is {kind_of(y)}, where a "
                                      "tensor is expected")
            r.append(ctx.b.reshape(y, (1,) + y.shape.dims))
    if any(not r for r in rows):
        raise ctx.error(node, "an unrolled loop that runs no iteration has scan outputs of "
                              "no known shape")
    return values + [r[0] if len(r) == 1 else ctx.b.concatenate(r, 0) for r in rows]


def _while_loop(ctx: ImportContext, node, body, carried: list) -> list:
    label = node_label(node)
    scope = f"the body of Loop node '{label}'"
    trip, cond = ctx.input(node, 0), ctx.input(node, 1)
    n = len(carried)
    scans = len(body.output) - 1 - n
    b = ctx.b
    trip_count = None                  # the number of iterations, when known
    if scans:
        # Each scan output is [trip count, ...]: the count must be static.
        if trip is None:
            raise ctx.error(node, "scan outputs need a static trip count: give the trip "
                                  "count M")
        trip_count = int(ctx.const_input(node, 0, "trip count M").reshape(-1)[0])
        if cond is not None and not bool(ctx.const_input(node, 1, "condition").reshape(-1)[0]):
            trip_count = 0
    m_value = ctx.value_of(trip) if trip is not None else None
    keep0 = (_scalar(b, cond, dtypes.PRED, f"Loop node '{label}': the condition")
             if cond is not None else ctx.scalar(True, dtypes.PRED))
    captures = Captures(ctx, free_names(body), scope)
    # Loop-carried sequences and optionals travel as the tensors they hold.
    flat = [x for v in carried for x in flatten(v)]
    lp = WhileLoop(ctx, label, [ctx.scalar(0, S64), keep0, *flat])
    cb, bb = lp.cond, lp.body
    if trip is None:
        m = None
    elif m_value is not None:
        m = cb.constant(int(m_value.reshape(-1)[0]), S64)
    else:
        m = lp.capture(_scalar(b, trip, S64, f"Loop node '{label}': M"))[0]
    captured = [lp.capture(x)[1] for _, x in captures.values]
    i, keep, *state = lp.body_elements[:2 + len(flat)]
    bindings = {body.input[0].name: _like_declared(bb, i, body.input[0]),
                body.input[1].name: _like_declared(bb, keep, body.input[1])}
    state = iter(state)
    bindings.update((vi.name, rebuild(v, state)) for vi, v in zip(body.input[2:], carried))
    bindings.update(captures.bind(bb, captured))
    outs = lower_subgraph(ctx, body, bb, bindings, scope)
    # Without a condition input, the body's condition output is ignored (ONNX).
    keep_out = keep if cond is None else \
        _scalar(bb, outs[0], dtypes.PRED, f"{scope}: the condition output")
    if scans and keep_out is not keep and not _is_true(ctx, keep_out):
        raise ctx.error(node, "scan outputs need a static trip count, but the body computes "
                              "its condition (it may stop early)")
    for k, (v, y) in enumerate(zip(carried, outs[1:1 + n])):
        if structure(v) != structure(y) and not (isinstance(v, Instruction)
                                                 and isinstance(y, Instruction)):
            raise ctx.out_of_scope(node, f"loop-carried value {k} ('{node.input[2 + k]}') "
                                         f"enters as {_describe(v)} and the body returns "
                                         f"{_describe(y)}: {LOOP_CHANGES_STRUCTURE}")
    for y in outs[1 + n:]:
        if not isinstance(y, Instruction):
            raise ctx.error(node, f"a scan output of the body is {kind_of(y)}, where a "
                                  "tensor is expected")
    next_i = bb.op(Opcode.ADD, i, bb.constant(1, S64))
    new = [next_i, keep_out, *[x for y in outs[1:1 + n] for x in flatten(y)]]
    # Accumulators: scan output j of step i is row i of a [trip count, ...] array.
    rows = max(trip_count or 0, 1)
    for y in outs[1 + n:]:
        init = ctx.full(0, y.shape.dtype, (rows,) + y.shape.dims)
        _, acc = lp.add(init)
        zero = bb.constant(0, S64)
        new.append(bb.op(Opcode.DYNAMIC_UPDATE_SLICE, acc, bb.reshape(y, (1,) + y.shape.dims),
                         i, *[zero] * y.shape.rank))
    ci, ckeep = lp.cond_elements[0], lp.cond_elements[1]
    go = ckeep if m is None else cb.op(Opcode.AND, ckeep, cb.compare(ci, m, "LT"))
    results = lp.finish(go, new)
    finals = iter(results[2:2 + len(flat)])
    finals = [rebuild(v, finals) for v in carried]
    accs = results[len(results) - scans:] if scans else []
    if trip_count is not None and trip_count < rows:        # a loop that never runs
        accs = [b.slice(a, (0,) * a.shape.rank, (0,) + a.shape.dims[1:]) for a in accs]
    return finals + accs


def _is_true(ctx: ImportContext, x: Instruction) -> bool:
    value = ctx.value_of(x)
    return value is not None and bool(value)


# -- Scan ---------------------------------------------------------------------------

def _axes(ctx, node, name: str, count: int, ranks) -> list[int]:
    axes = list(ctx.attr(node, name, (0,) * count))
    if len(axes) != count:
        raise ctx.error(node, f"'{name}' has {len(axes)} values, expected {count}")
    out = []
    for a, r in zip(axes, ranks):
        if not -r <= a < r:
            raise ctx.error(node, f"{name} value {a} is out of range for rank {r}")
        out.append(a % r)
    return out


def _directions(ctx, node, name: str, count: int) -> list[int]:
    d = list(ctx.attr(node, name, (0,) * count))
    if len(d) != count or any(v not in (0, 1) for v in d):
        raise ctx.error(node, f"'{name}' must hold {count} values of 0 or 1, got {d}")
    return d


@register("Scan", since=9)
def scan(ctx: ImportContext, node):
    body = ctx.attr(node, "body")
    m = ctx.attr(node, "num_scan_inputs")
    inputs = [ctx.input(node, i) for i in range(len(node.input))]
    n = len(inputs) - m
    if m < 1 or n < 0 or any(x is None for x in inputs):
        raise ctx.error(node, f"num_scan_inputs {m} does not fit its {len(inputs)} inputs")
    states, xs = inputs[:n], inputs[n:]
    in_axes = _axes(ctx, node, "scan_input_axes", m, [x.shape.rank for x in xs])
    in_dirs = _directions(ctx, node, "scan_input_directions", m)
    k = len(body.output) - n
    out_axes = list(ctx.attr(node, "scan_output_axes", (0,) * k))
    out_dirs = _directions(ctx, node, "scan_output_directions", k)
    if len(out_axes) != k:
        raise ctx.error(node, f"'scan_output_axes' has {len(out_axes)} values, expected {k}")
    return _scan(ctx, node, body, states, xs, in_axes, in_dirs, out_axes, out_dirs)


@register("Scan", since=8)
def scan_v8(ctx: ImportContext, node):
    """Scan-8: every input has a batch dimension first (the scan axis is the next one);
    the body runs on one batch element. Each batch element is its own loop."""
    body = ctx.attr(node, "body")
    m = ctx.attr(node, "num_scan_inputs")
    lens = ctx.input(node, 0)
    inputs = [ctx.input(node, i) for i in range(1, len(node.input))]
    n = len(inputs) - m
    if m < 1 or n < 0 or any(x is None for x in inputs):
        raise ctx.error(node, f"num_scan_inputs {m} does not fit its {len(inputs)} inputs")
    xs = inputs[n:]
    dirs = _directions(ctx, node, "directions", m)
    if any(x.shape.rank < 2 for x in inputs):
        raise ctx.error(node, "every input needs a batch dimension (and scan inputs a "
                              "sequence dimension)")
    batch = inputs[0].shape.dims[0]
    length = xs[0].shape.dims[1]
    if lens is not None:
        given = ctx.const_input(node, 0, "sequence_lens").reshape(-1)
        if any(int(v) != length for v in given):
            raise ctx.error(node, f"sequence_lens {given.tolist()} shorter than the sequence "
                                  f"length {length} are not supported")
    b = ctx.b
    per_batch = []
    for e in range(batch):
        one = [b.reshape(b.slice(x, (e,) + (0,) * (x.shape.rank - 1),
                                 (e + 1,) + x.shape.dims[1:]), x.shape.dims[1:])
               for x in inputs]
        k = len(body.output) - n
        per_batch.append(_scan(ctx, node, body, one[:n], one[n:], [0] * m, dirs,
                               [0] * k, [0] * k))
    return [b.concatenate([b.reshape(r[j], (1,) + r[j].shape.dims) for r in per_batch], 0)
            for j in range(len(per_batch[0]))]


def _scan(ctx: ImportContext, node, body, states, xs, in_axes, in_dirs, out_axes,
          out_dirs) -> list[Instruction]:
    label = node_label(node)
    scope = f"the body of Scan node '{label}'"
    lengths = {x.shape.dims[a] for x, a in zip(xs, in_axes)}
    if len(lengths) != 1:
        raise ctx.error(node, f"the scan inputs differ in length: {sorted(lengths)}")
    (length,) = lengths
    n, m = len(states), len(xs)
    if len(body.input) != n + m or len(body.output) < n:
        raise ctx.error(node, f"the body takes {len(body.input)} inputs and returns "
                              f"{len(body.output)} values for {n} states and {m} scan inputs")
    captures = Captures(ctx, free_names(body), scope)
    lp = WhileLoop(ctx, label, [ctx.scalar(0, S64), *states])
    bb = lp.body
    t = lp.body_elements[0]
    state = lp.body_elements[1:1 + n]
    scanned = [lp.capture(x)[1] for x in xs]
    captured = [lp.capture(x)[1] for _, x in captures.values]
    last = bb.constant(length - 1, S64)
    back = bb.op(Opcode.SUBTRACT, last, t) if 1 in in_dirs + out_dirs else None
    zero = bb.constant(0, S64)
    bindings = {vi.name: x for vi, x in zip(body.input[:n], state)}
    for vi, x, axis, d in zip(body.input[n:], scanned, in_axes, in_dirs):
        at = back if d else t
        sizes = list(x.shape.dims)
        sizes[axis] = 1
        part = bb.op(Opcode.DYNAMIC_SLICE, x, *[at if a == axis else zero
                                               for a in range(x.shape.rank)],
                     dynamic_slice_sizes=tuple(sizes))
        bindings[vi.name] = bb.reshape(part, x.shape.dims[:axis] + x.shape.dims[axis + 1:])
    bindings.update(captures.bind(bb, captured))
    outs = lower_subgraph(ctx, body, bb, bindings, scope)
    new = [bb.op(Opcode.ADD, t, bb.constant(1, S64)), *outs[:n]]
    for y, axis, d in zip(outs[n:], out_axes, out_dirs):
        rank = y.shape.rank + 1
        if not -rank <= axis < rank:
            raise ctx.error(node, f"scan_output_axes value {axis} is out of range for rank "
                                  f"{rank}")
        axis %= rank
        dims = y.shape.dims[:axis] + (length,) + y.shape.dims[axis:]
        _, acc = lp.add(ctx.full(0, y.shape.dtype, dims))
        row = bb.reshape(y, y.shape.dims[:axis] + (1,) + y.shape.dims[axis:])
        at = back if d else t
        new.append(bb.op(Opcode.DYNAMIC_UPDATE_SLICE, acc, row,
                         *[at if a == axis else zero for a in range(rank)]))
    cond = lp.cond.compare(lp.cond_elements[0], lp.cond.constant(length, S64), "LT")
    results = lp.finish(cond, new)
    scans = len(outs) - n
    return results[1:1 + n] + (results[len(results) - scans:] if scans else [])
