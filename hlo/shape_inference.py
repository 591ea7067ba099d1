"""One shape rule per opcode, following XLA's operation semantics.

``infer_shape(opcode, operand_shapes, attrs, called, result)`` returns the
result shape. ``result`` is the declared shape for ops whose result cannot be
derived from operands (parameter, constant, iota, convert, reshape, bitcast,
broadcast); the rule checks it. The verifier calls the same rules.
"""
from __future__ import annotations

import re
from typing import Callable

from . import dtypes
from .attributes import Window
from .opcodes import (BINARY_ELEMENTWISE, COMPARISON_DIRECTIONS, UNARY_ELEMENTWISE, Opcode)
from .shape import Shape


class ShapeError(ValueError):
    pass


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ShapeError(msg)


def _array(s: Shape, what: str) -> Shape:
    _check(not s.is_tuple, f"{what} must be an array, got {s}")
    return s


def _need_result(result: Shape | None, op: Opcode) -> Shape:
    _check(result is not None, f"{op.text} needs its result shape")
    return result


# --- rules -----------------------------------------------------------------

def _source(op, ops, attrs, called, result):
    return _need_result(result, op)


def _iota(op, ops, attrs, called, result):
    r = _need_result(result, op)
    _check(0 <= attrs["iota_dimension"] < r.rank, f"iota_dimension out of range for {r}")
    return r


def _unary(op, ops, attrs, called, result):
    (x,) = ops
    _array(x, op.text)
    if op in (Opcode.CONVERT, Opcode.BITCAST_CONVERT):
        r = _need_result(result, op)
        _check(r.dims == x.dims, f"{op.text} changes dims {x} -> {r}")
        _check(op is Opcode.CONVERT or r.dtype.bits == x.dtype.bits,
               f"bitcast-convert changes the bit width: {x} -> {r}")
        return r
    if op is Opcode.IS_FINITE:
        _check(x.dtype.is_float, "is-finite needs a float operand")
        return x.with_dtype(dtypes.PRED)
    if op is Opcode.NOT:
        _check(not x.dtype.is_float, "not needs an integer or pred operand")
    return Shape.array(x.dtype, x.dims)


def _binary(op, ops, attrs, called, result):
    a, b = (_array(s, op.text) for s in ops)
    _check(a.dims == b.dims, f"{op.text} operands differ in dims: {a} vs {b}")
    _check(a.dtype == b.dtype, f"{op.text} operands differ in type: {a} vs {b}")
    if op is Opcode.COMPARE:
        _check(attrs.get("direction") in COMPARISON_DIRECTIONS,
               f"bad comparison direction {attrs.get('direction')}")
        return a.with_dtype(dtypes.PRED)
    return Shape.array(a.dtype, a.dims)


def _select(op, ops, attrs, called, result):
    p, t, f = (_array(s, op.text) for s in ops)
    _check(p.dtype == dtypes.PRED, "select predicate must be pred")
    _check(t.dims == f.dims == p.dims and t.dtype == f.dtype,
           f"select operands disagree: {p}, {t}, {f}")
    return Shape.array(t.dtype, t.dims)


def _clamp(op, ops, attrs, called, result):
    lo, x, hi = (_array(s, op.text) for s in ops)
    for b in (lo, hi):
        _check(b.dtype == x.dtype and (b.rank == 0 or b.dims == x.dims),
               f"clamp bound {b} does not fit operand {x}")
    return Shape.array(x.dtype, x.dims)


def _reshape(op, ops, attrs, called, result):
    (x,) = ops
    r = _need_result(result, op)
    _check(r.num_elements == _array(x, op.text).num_elements,
           f"{op.text} changes element count: {x} -> {r}")
    _check(r.dtype == x.dtype, f"{op.text} changes element type: {x} -> {r}")
    return r


def _copy(op, ops, attrs, called, result):
    (x,) = ops
    return x


def _broadcast(op, ops, attrs, called, result):
    (x,) = ops
    r = _need_result(result, op)
    dims = attrs["dimensions"]
    _check(len(dims) == x.rank, f"broadcast dimensions {dims} do not match operand {x}")
    _check(len(set(dims)) == len(dims) and list(dims) == sorted(dims),
           f"broadcast dimensions {dims} must be increasing")
    for i, d in enumerate(dims):
        _check(0 <= d < r.rank and x.dims[i] in (1, r.dims[d]),
               f"broadcast of {x} to {r} along {dims} is invalid")
    _check(r.dtype == x.dtype, "broadcast changes element type")
    return r


def _transpose(op, ops, attrs, called, result):
    (x,) = ops
    perm = attrs["dimensions"]
    _check(sorted(perm) == list(range(x.rank)), f"transpose {perm} is no permutation of {x}")
    return x.with_dims([x.dims[p] for p in perm])


def _reverse(op, ops, attrs, called, result):
    (x,) = ops
    _check(all(0 <= d < x.rank for d in attrs["dimensions"]), "reverse dimension out of range")
    return Shape.array(x.dtype, x.dims)


def _slice(op, ops, attrs, called, result):
    (x,) = ops
    s = attrs["slice"]
    _check(len(s.starts) == len(s.limits) == len(s.strides) == x.rank,
           f"slice rank does not match {x}")
    dims = []
    for d, (a, b, st) in enumerate(zip(s.starts, s.limits, s.strides)):
        _check(0 <= a <= b <= x.dims[d] and st >= 1, f"slice [{a}:{b}:{st}] out of {x}")
        dims.append((b - a + st - 1) // st)
    return x.with_dims(dims)


def _concatenate(op, ops, attrs, called, result):
    _check(len(ops) >= 1, "concatenate needs operands")
    d = attrs["dimension"]
    first = ops[0]
    _check(0 <= d < first.rank, f"concatenate dimension {d} out of range")
    total = 0
    for s in ops:
        _check(s.dtype == first.dtype and s.rank == first.rank and all(
            s.dims[i] == first.dims[i] for i in range(s.rank) if i != d),
            f"concatenate operands disagree: {first} vs {s}")
        total += s.dims[d]
    dims = list(first.dims)
    dims[d] = total
    return first.with_dims(dims)


def _pad(op, ops, attrs, called, result):
    x, v = ops
    _check(v.rank == 0 and v.dtype == x.dtype, "pad value must be a scalar of the operand type")
    p = attrs["padding"]
    _check(len(p.low) == len(p.high) == len(p.interior) == x.rank, "padding rank mismatch")
    dims = []
    for n, lo, hi, it in zip(x.dims, p.low, p.high, p.interior):
        _check(it >= 0, "negative interior padding")
        size = lo + hi + n + max(n - 1, 0) * it
        _check(size >= 0, "padding leaves a negative size")
        dims.append(size)
    return x.with_dims(dims)


def _accumulation_type(op, a: Shape, b: Shape, result: Shape | None) -> dtypes.DType:
    """The result element type of a dot or convolution: the operands' type, or (XLA's
    preferred_element_type) a declared integer type at least as wide as integer operands,
    which may then differ in type themselves (u8 x s8 -> s32: quantized arithmetic)."""
    want = result.dtype if result is not None and not result.is_tuple else a.dtype
    if want == a.dtype == b.dtype:
        return want
    _check(a.dtype.is_integer and b.dtype.is_integer and want.is_integer
           and want.bits >= max(a.dtype.bits, b.dtype.bits),
           f"{op.text} operands {a} and {b} do not accumulate in {want}: types differ only "
           f"for integer operands and a wider integer result")
    return want


def _dot(op, ops, attrs, called, result):
    a, b = ops
    dn = attrs["dimension_numbers"]
    acc = _accumulation_type(op, a, b, result)
    _check(len(dn.lhs_batch) == len(dn.rhs_batch), "dot batch dims differ in count")
    _check(len(dn.lhs_contracting) == len(dn.rhs_contracting), "dot contracting dims differ")
    for la, rb in zip(dn.lhs_batch, dn.rhs_batch):
        _check(a.dims[la] == b.dims[rb], "dot batch dims differ in size")
    for la, rb in zip(dn.lhs_contracting, dn.rhs_contracting):
        _check(a.dims[la] == b.dims[rb], f"dot contracting dims differ in size: {a} . {b}")
    lhs_free = [d for d in range(a.rank) if d not in dn.lhs_batch + dn.lhs_contracting]
    rhs_free = [d for d in range(b.rank) if d not in dn.rhs_batch + dn.rhs_contracting]
    dims = ([a.dims[d] for d in dn.lhs_batch] + [a.dims[d] for d in lhs_free]
            + [b.dims[d] for d in rhs_free])
    return Shape.array(acc, dims)


def window_output_size(n: int, w: Window, i: int) -> int:
    """Output extent of a window along dimension i over an input extent n."""
    base = (n - 1) * w.lhs_dilation[i] + 1 if n > 0 else 0
    padded = base + w.pad_low[i] + w.pad_high[i]
    eff = (w.size[i] - 1) * w.rhs_dilation[i] + 1
    if padded < eff:
        return 0
    return (padded - eff) // w.stride[i] + 1


def _convolution(op, ops, attrs, called, result):
    x, k = ops
    w, dn = attrs["window"], attrs["dimension_numbers"]
    fg, bg = attrs.get("feature_group_count", 1), attrs.get("batch_group_count", 1)
    nsp = len(dn.input_spatial)
    acc = _accumulation_type(op, x, k, result)
    _check(x.rank == k.rank == nsp + 2 and w.rank == nsp, "convolution rank mismatch")
    cin = x.dims[dn.input_feature]
    _check(cin % fg == 0 and k.dims[dn.kernel_input] * fg == cin,
           f"kernel input features {k.dims[dn.kernel_input]} x groups {fg} != {cin}")
    cout = k.dims[dn.kernel_output]
    _check(cout % fg == 0 and cout % bg == 0, "output features not divisible by group count")
    _check(x.dims[dn.input_batch] % bg == 0, "batch not divisible by batch_group_count")
    for i in range(nsp):
        _check(k.dims[dn.kernel_spatial[i]] == w.size[i], "window size != kernel size")
    dims = [0] * (nsp + 2)
    dims[dn.output_batch] = x.dims[dn.input_batch] // bg
    dims[dn.output_feature] = cout
    for i in range(nsp):
        dims[dn.output_spatial[i]] = window_output_size(x.dims[dn.input_spatial[i]], w, i)
    return Shape.array(acc, dims)


def _reduction_computation_check(called, n, dtypes_):
    _check(len(called) == 1, "reduction needs one to_apply computation")
    params = called[0].parameters
    _check(len(params) == 2 * n, f"to_apply must take {2 * n} scalar parameters")


def _reduce(op, ops, attrs, called, result):
    n = len(ops) // 2
    _check(len(ops) == 2 * n and n >= 1, "reduce takes N operands and N init values")
    xs, inits = ops[:n], ops[n:]
    dims = attrs["dimensions"]
    _reduction_computation_check(called, n, [x.dtype for x in xs])
    for x, i in zip(xs, inits):
        _check(x.dims == xs[0].dims, "reduce operands differ in dims")
        _check(i.rank == 0 and i.dtype == x.dtype, "reduce init must be a scalar of the type")
    _check(all(0 <= d < xs[0].rank for d in dims) and len(set(dims)) == len(dims),
           f"bad reduce dimensions {dims}")
    outs = [x.with_dims([s for d, s in enumerate(x.dims) if d not in dims]) for x in xs]
    return outs[0] if n == 1 else Shape.tuple_(outs)


def _reduce_window(op, ops, attrs, called, result):
    n = len(ops) // 2
    _check(len(ops) == 2 * n and n >= 1, "reduce-window takes N operands and N init values")
    xs, inits = ops[:n], ops[n:]
    w = attrs["window"]
    _reduction_computation_check(called, n, [x.dtype for x in xs])
    _check(w.rank == xs[0].rank, "reduce-window window rank != operand rank")
    for x, i in zip(xs, inits):
        _check(i.rank == 0 and i.dtype == x.dtype, "reduce-window init must be a scalar")
    outs = [x.with_dims([window_output_size(x.dims[d], w, d) for d in range(x.rank)])
            for x in xs]
    return outs[0] if n == 1 else Shape.tuple_(outs)


def _custom_call(op, ops, attrs, called, result):
    """What the function computes is the text's to say: the declared result."""
    r = _need_result(result, op)
    target = attrs.get("custom_call_target", "")
    _check(re.fullmatch(r"[A-Za-z_]\w*", target) is not None,
           f"custom-call target '{target}' is not a C identifier")
    for s in ops:
        _check(not s.is_tuple, "custom-call operands are arrays")
    return r


def _sort(op, ops, attrs, called, result):
    """XLA sort: the operands (same dims) are permuted together along ``dimension`` into
    the order the comparator defines; one operand gives an array, several a tuple."""
    _check(len(ops) >= 1, "sort needs operands")
    for x in ops:
        _array(x, op.text)
        _check(x.dims == ops[0].dims, f"sort operands differ in dims: {ops[0]} vs {x}")
    d = attrs["dimension"]
    _check(0 <= d < ops[0].rank, f"sort dimension {d} out of range for {ops[0]}")
    _check(len(called) == 1, "sort needs one comparator computation")
    _check(len(called[0].parameters) == 2 * len(ops),
           f"the comparator must take {2 * len(ops)} scalar parameters")
    outs = [Shape.array(x.dtype, x.dims, x.layout) for x in ops]
    return outs[0] if len(ops) == 1 else Shape.tuple_(outs)


def _topk(op, ops, attrs, called, result):
    """XLA TopK: along the last dimension, the k largest (smallest) values in order and
    their indices (s32), equal values by the lower index."""
    (x,) = ops
    _array(x, op.text)
    _check(x.rank >= 1, "topk needs an operand of rank >= 1")
    k = attrs["k"]
    _check(0 <= k <= x.dims[-1], f"topk k={k} is outside [0, {x.dims[-1]}] for {x}")
    _check(not x.dtype.is_pred, "topk needs numbers")
    dims = x.dims[:-1] + (k,)
    return Shape.tuple_([Shape.array(x.dtype, dims), Shape.array(dtypes.S32, dims)])


def _distinct_dims(dims, rank: int, what: str) -> None:
    _check(all(0 <= d < rank for d in dims) and len(set(dims)) == len(dims),
           f"{what} {tuple(dims)} must be distinct dims below {rank}")


def _batching_dims(x, idx, ivd, index_map, operand_dims, indices_dims, map_name: str,
                   indices_name: str) -> None:
    """Gather's and scatter's batching dims (XLA): the index map names none of the
    operand's; as many on each side, pairwise equal in size; the indices' are distinct
    and exclude the index vector dim."""
    _check(all(d not in operand_dims for d in index_map),
           f"{map_name} names an operand batching dim")
    _check(len(operand_dims) == len(indices_dims),
           "operand and indices batching dims differ in count")
    _distinct_dims(indices_dims, idx.rank, indices_name)
    _check(ivd not in indices_dims, "index_vector_dim is a batching dim")
    for od, sd in zip(operand_dims, indices_dims):
        _check(x.dims[od] == idx.dims[sd], f"batching dims differ in size: operand dim {od} "
                                           f"of {x} vs indices dim {sd} of {idx}")


def _gather(op, ops, attrs, called, result):
    x, idx = ops
    dn, sizes = attrs["dimension_numbers"], attrs["slice_sizes"]
    _check(idx.dtype.is_integer, "gather indices must be integers")
    _check(len(sizes) == x.rank, "slice_sizes rank != operand rank")
    _check(all(0 <= s <= n for s, n in zip(sizes, x.dims)), "slice_sizes exceed operand")
    ivd = dn.index_vector_dim
    _check(0 <= ivd <= idx.rank, f"index_vector_dim {ivd} out of range for {idx}")
    _check(list(dn.offset_dims) == sorted(set(dn.offset_dims)), "offset_dims must be sorted")
    _distinct_dims(dn.collapsed_slice_dims + dn.operand_batching_dims, x.rank,
                   "collapsed_slice_dims and operand_batching_dims")
    _distinct_dims(dn.start_index_map, x.rank, "start_index_map")
    _check(all(sizes[d] <= 1 for d in dn.collapsed_slice_dims), "collapsed dims must be size 1")
    _check(all(sizes[d] == 1 for d in dn.operand_batching_dims),
           "operand batching dims must have slice size 1")
    _batching_dims(x, idx, ivd, dn.start_index_map, dn.operand_batching_dims,
                   dn.start_indices_batching_dims, "start_index_map",
                   "start_indices_batching_dims")
    idx_dims = list(idx.dims)
    if ivd < idx.rank:
        _check(idx_dims[ivd] == len(dn.start_index_map), "index vector length mismatch")
        batch = idx_dims[:ivd] + idx_dims[ivd + 1:]
    else:
        _check(len(dn.start_index_map) == 1, "implicit index vector needs one start index")
        batch = idx_dims
    offsets = [s for d, s in enumerate(sizes)
               if d not in dn.collapsed_slice_dims + dn.operand_batching_dims]
    rank = len(batch) + len(offsets)
    _check(len(dn.offset_dims) == len(offsets), "offset_dims count mismatch")
    _check(all(d < rank for d in dn.offset_dims), "offset_dims out of range")
    dims, bi, oi = [], 0, 0
    for d in range(rank):
        if d in dn.offset_dims:
            dims.append(offsets[oi]); oi += 1
        else:
            dims.append(batch[bi]); bi += 1
    return x.with_dims(dims)


def _start_indices(op, x, indices, first: int) -> None:
    _check(len(indices) == x.rank, f"{op.text} takes one start index per dimension of {x}, "
                                   f"got {len(indices)}")
    for k, s in enumerate(indices):
        _check(not s.is_tuple and s.rank == 0 and s.dtype.is_integer,
               f"{op.text} start index {first + k} must be an integer scalar, got {s}")
        _check(s.dtype == indices[0].dtype, f"{op.text} start indices differ in type")


def _dynamic_slice(op, ops, attrs, called, result):
    _check(len(ops) >= 1, "dynamic-slice needs an operand")
    x = _array(ops[0], op.text)
    _start_indices(op, x, ops[1:], 1)
    sizes = attrs["dynamic_slice_sizes"]
    _check(len(sizes) == x.rank and all(0 <= s <= n for s, n in zip(sizes, x.dims)),
           f"dynamic_slice_sizes {tuple(sizes)} do not fit {x}")
    return x.with_dims(sizes)


def _dynamic_update_slice(op, ops, attrs, called, result):
    _check(len(ops) >= 2, "dynamic-update-slice needs an operand and an update")
    x, u = _array(ops[0], op.text), _array(ops[1], op.text)
    _check(u.dtype == x.dtype and u.rank == x.rank
           and all(a <= b for a, b in zip(u.dims, x.dims)),
           f"update {u} does not fit operand {x}")
    _start_indices(op, x, ops[2:], 2)
    return Shape.array(x.dtype, x.dims)


def _one_parameter(comp, what: str, shape: Shape) -> None:
    params = comp.parameters
    _check(len(params) == 1, f"{what} %{comp.name} must take one parameter, "
                             f"it takes {len(params)}")
    _check(compatible(params[0].shape, shape),
           f"{what} %{comp.name} takes {params[0].shape}, the operand is {shape}")


def compatible(a: Shape, b: Shape) -> bool:
    """Same element types and dimensions, tuples element by element; layouts ignored."""
    if a.is_tuple or b.is_tuple:
        return (a.is_tuple and b.is_tuple and len(a.tuple_shapes) == len(b.tuple_shapes)
                and all(map(compatible, a.tuple_shapes, b.tuple_shapes)))
    return a.dtype == b.dtype and a.dims == b.dims


def _while(op, ops, attrs, called, result):
    """XLA while: ``condition`` maps the state to pred[], ``body`` maps it to the next
    state; the result is the state when the condition is false."""
    (state,) = ops
    _check(len(called) == 2, "while calls a condition and a body")
    cond, body = called
    _one_parameter(cond, "while condition", state)
    _one_parameter(body, "while body", state)
    r = cond.root.shape
    _check(not r.is_tuple and r.dtype == dtypes.PRED and r.rank == 0,
           f"while condition %{cond.name} must return pred[], it returns {r}")
    _check(compatible(body.root.shape, state),
           f"while body %{body.name} returns {body.root.shape}, the state is {state}")
    return state


def _conditional(op, ops, attrs, called, result):
    """XLA conditional: a pred index picks called[0] (true) or called[1] (false); an s32
    index picks branch i, or the last branch when i is out of range. Branch i takes
    operand i + 1."""
    _check(len(ops) >= 2, "conditional needs a branch index and branch operands")
    index = ops[0]
    _check(not index.is_tuple and index.rank == 0
           and index.dtype in (dtypes.PRED, dtypes.S32),
           f"conditional branch index must be pred[] or s32[], got {index}")
    _check(len(called) == len(ops) - 1 >= 1, f"conditional has {len(called)} branches "
                                             f"and {len(ops) - 1} branch operands")
    _check(index.dtype != dtypes.PRED or len(called) == 2,
           "a conditional on a pred has two branches")
    for k, (comp, operand) in enumerate(zip(called, ops[1:])):
        _one_parameter(comp, f"branch {k}", operand)
    out = called[0].root.shape
    for k, comp in enumerate(called[1:], 1):
        _check(compatible(comp.root.shape, out),
               f"branch {k} returns {comp.root.shape}, branch 0 returns {out}")
    return out


def _scatter(op, ops, attrs, called, result):
    """XLA scatter with one operand: the result has the operand's shape."""
    x, idx, upd = (_array(s, op.text) for s in ops)
    dn = attrs["dimension_numbers"]
    _check(idx.dtype.is_integer, "scatter indices must be integers")
    _check(upd.dtype == x.dtype, f"scatter updates {upd} differ in type from operand {x}")
    ivd = dn.index_vector_dim
    _check(0 <= ivd <= idx.rank, f"index_vector_dim {ivd} out of range for {idx}")
    uwd = dn.update_window_dims
    _check(list(uwd) == sorted(set(uwd)), "update_window_dims must be sorted")
    _distinct_dims(uwd, upd.rank, "update_window_dims")
    _distinct_dims(dn.inserted_window_dims + dn.input_batching_dims, x.rank,
                   "inserted_window_dims and input_batching_dims")
    _check(len(uwd) + len(dn.inserted_window_dims) + len(dn.input_batching_dims) == x.rank,
           f"window dims, inserted dims and batching dims do not add up to the rank of {x}")
    vector = idx.dims[ivd] if ivd < idx.rank else 1
    _check(len(dn.scatter_dims_to_operand_dims) == vector,
           f"scatter_dims_to_operand_dims has {len(dn.scatter_dims_to_operand_dims)} dims, "
           f"the index vector {vector}")
    _distinct_dims(dn.scatter_dims_to_operand_dims, x.rank, "scatter_dims_to_operand_dims")
    _batching_dims(x, idx, ivd, dn.scatter_dims_to_operand_dims, dn.input_batching_dims,
                   dn.scatter_indices_batching_dims, "scatter_dims_to_operand_dims",
                   "scatter_indices_batching_dims")
    scatter_dims = [d for d in range(upd.rank) if d not in uwd]
    batch = [n for d, n in enumerate(idx.dims) if d != ivd]
    _check([upd.dims[d] for d in scatter_dims] == batch,
           f"updates {upd} do not match the indices {idx} outside update_window_dims")
    window_operand_dims = [d for d in range(x.rank)
                           if d not in dn.inserted_window_dims + dn.input_batching_dims]
    for ud, od in zip(uwd, window_operand_dims):
        _check(upd.dims[ud] <= x.dims[od], f"update window dim {ud} of {upd} exceeds "
                                           f"operand dim {od} of {x}")
    _check(len(called) == 1 and len(called[0].parameters) == 2,
           "scatter needs a to_apply computation of two scalars")
    return Shape.array(x.dtype, x.dims)


def _fusion(op, ops, attrs, called, result):
    _check(len(called) == 1, "fusion calls one computation")
    params = called[0].parameters
    _check(len(params) == len(ops), "fusion operand count != fused parameters")
    for p, s in zip(params, ops):
        _check(p.shape.dims == s.dims and p.shape.dtype == s.dtype,
               f"fusion operand {s} does not match parameter {p.shape}")
    return called[0].root.shape


def _tuple(op, ops, attrs, called, result):
    return Shape.tuple_(ops)


def _get_tuple_element(op, ops, attrs, called, result):
    (t,) = ops
    _check(t.is_tuple and 0 <= attrs["index"] < len(t.tuple_shapes), "bad tuple index")
    return t.tuple_shapes[attrs["index"]]


def _ternary(op, ops, attrs, called, result):
    return (_select if op is Opcode.SELECT else _clamp)(op, ops, attrs, called, result)


RULES: dict[Opcode, Callable] = {
    Opcode.PARAMETER: _source,
    Opcode.CONSTANT: _source,
    Opcode.IOTA: _iota,
    **{op: _unary for op in UNARY_ELEMENTWISE},
    **{op: _binary for op in BINARY_ELEMENTWISE},
    Opcode.SELECT: _ternary,
    Opcode.CLAMP: _ternary,
    Opcode.BITCAST: _reshape,
    Opcode.RESHAPE: _reshape,
    Opcode.BROADCAST: _broadcast,
    Opcode.CONCATENATE: _concatenate,
    Opcode.COPY: _copy,
    Opcode.GATHER: _gather,
    Opcode.PAD: _pad,
    Opcode.REVERSE: _reverse,
    Opcode.SCATTER: _scatter,
    Opcode.SLICE: _slice,
    Opcode.TRANSPOSE: _transpose,
    Opcode.CONVOLUTION: _convolution,
    Opcode.DOT: _dot,
    Opcode.REDUCE: _reduce,
    Opcode.REDUCE_WINDOW: _reduce_window,
    Opcode.SORT: _sort,
    Opcode.TOPK: _topk,
    Opcode.CUSTOM_CALL: _custom_call,
    Opcode.DYNAMIC_SLICE: _dynamic_slice,
    Opcode.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
    Opcode.WHILE: _while,
    Opcode.CONDITIONAL: _conditional,
    Opcode.FUSION: _fusion,
    Opcode.GET_TUPLE_ELEMENT: _get_tuple_element,
    Opcode.TUPLE: _tuple,
}


def infer_shape(opcode: Opcode, operand_shapes, attrs=None, called=(), result=None) -> Shape:
    attrs = attrs or {}
    if opcode.arity >= 0:
        _check(len(operand_shapes) == opcode.arity,
               f"{opcode.text} takes {opcode.arity} operands, got {len(operand_shapes)}")
    for a in opcode.attrs:
        if a not in attrs and a not in ("feature_group_count", "batch_group_count",
                                         "is_stable"):
            raise ShapeError(f"{opcode.text} is missing attribute '{a}'")
    return RULES[opcode](opcode, list(operand_shapes), attrs, list(called), result)
