"""Batch separability: whether a model imported at batch size N computes each sample on
its own, so that the code compiled for one sample, run N times, gives the same outputs.

Bounded batch compiles a model once for N = 1 and runs that program sample by sample.
``check_batch_separable`` proves it right on the module imported at a batch size >= 2:
a forward dataflow gives every value either ``Batched(d, block)`` (dim d holds the
samples one after another, ``block`` indices each, and sample i depends on the inputs'
sample i only: a MatMul over [N, tokens, d] reshapes the batch into N * tokens rows) or ``Uniform(replicated)`` (depends on
no input; the same along the dims in ``replicated``), one rule per opcode. A rule that
cannot keep the samples apart raises a one-line XlacError naming the instruction.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from math import prod

import numpy as np

from ..hlo import Computation, Instruction, Module, Opcode, XlacError
from ..hlo.opcodes import ELEMENTWISE


@dataclass(frozen=True)
class Batched:
    dim: int
    block: int = 1      # indices of ``dim`` per sample


@dataclass(frozen=True)
class Uniform:
    replicated: frozenset[int]


NOWHERE = Uniform(frozenset())


def check_batch_separable(module: Module, size: int) -> dict:
    """Raise XlacError (one line) unless every output of module's entry computation is
    batched at dim 0 and depends on input sample i only through sample i of each input.
    Every entry parameter is batched at dim 0 (its dims[0] == size). Returns the value
    of every entry instruction."""
    entry = module.entry
    for k, p in enumerate(entry.parameters):
        if p.shape.is_tuple or not p.shape.dims or p.shape.dims[0] != size:
            raise XlacError(f"bounded batch: input {_port(module, 'inputs', k, p)} has shape "
                            f"{p.shape}, not a leading batch dimension of {size}")
    values = _analyze(entry, [Batched(0)] * len(entry.parameters))
    for k, out in enumerate(module.output_instructions):
        v = values[out]
        if v == Batched(0):
            continue
        where = f"bounded batch: output {_port(module, 'outputs', k, out)}"
        if isinstance(v, Batched) and v.dim:
            raise XlacError(f"{where} carries the batch at dim {v.dim}, not 0")
        if isinstance(v, Batched):
            raise XlacError(f"{where} holds {v.block} rows of dim 0 per sample, not one")
        raise XlacError(f"{where} does not depend on the batch")
    return values


def _port(module: Module, which: str, k: int, instr: Instruction) -> str:
    specs = getattr(module.signature, which, None) or []
    return f"'{specs[k].name}' (%{instr.name})" if k < len(specs) else f"%{instr.name}"


def _analyze(comp: Computation, params: list) -> dict:
    """The value of every instruction of ``comp``, its parameters bound to ``params``."""
    values: dict[Instruction, object] = {}
    for instr in comp.instructions:
        ops = [values[o] for o in instr.operands]
        if instr.opcode is Opcode.PARAMETER:
            values[instr] = params[instr.number]
        else:
            values[instr] = RULES.get(instr.opcode, _unsupported)(instr, ops)
    return values


def _root(comp: Computation, params: list):
    return _analyze(comp, params)[comp.root]


# --- errors and shared checks ----------------------------------------------------------

def _named(instr: Instruction) -> str:
    node = f" (ONNX node {instr.metadata})" if instr.metadata is not None else ""
    return f"bounded batch: {instr.opcode.text} '{instr.name}'{node}"


def _mixes(instr: Instruction, why: str) -> XlacError:
    return XlacError(f"{_named(instr)} mixes samples: {why}")


def _leaves(v) -> list:
    return [x for e in v for x in _leaves(e)] if isinstance(v, tuple) else [v]


def _batched(instr: Instruction, ops: list) -> Batched | None:
    """How the batched operands carry the batch (None: none does); the other array
    operands must then be the same for every sample (scalars always are)."""
    batched = {v for v in ops if isinstance(v, Batched)}
    if len(batched) > 1:
        raise _mixes(instr, "its operands carry the batch at different dims or blocks "
                            f"{sorted((v.dim, v.block) for v in batched)}")
    b = next(iter(batched), None)
    for v, o in zip(ops, instr.operands):
        if b is not None and isinstance(v, Uniform) and o.shape.rank and b.dim not in v.replicated:
            raise _mixes(instr, f"operand %{o.name} differs from sample to sample "
                                f"(along the batch dim {b.dim})")
    return b


def _replicated(instr: Instruction, ops: list) -> frozenset[int]:
    """The dims along which every (uniform) array operand is replicated."""
    sets = [v.replicated for v, o in zip(ops, instr.operands) if o.shape.rank]
    return frozenset.intersection(*sets) if sets else frozenset()


def _per_result(instr: Instruction, v):
    """``v`` for each result of a variadic op (a tuple of them when it has several)."""
    return tuple(v for _ in instr.shape.tuple_shapes) if instr.shape.is_tuple else v


def _join(instr: Instruction, a, b):
    """One value for ``a`` or ``b`` (a loop's state over iterations, a conditional's
    branches): uniform joins batched only where it is the same for every sample."""
    if isinstance(a, tuple):
        return tuple(_join(instr, x, y) for x, y in zip(a, b))
    if isinstance(a, Uniform) and isinstance(b, Uniform):
        return Uniform(a.replicated & b.replicated)
    if isinstance(a, Batched) and isinstance(b, Batched):
        if a != b:
            raise _mixes(instr, f"the batch moves from dim {a.dim} to dim {b.dim}")
        return a
    u, batched = (a, b) if isinstance(a, Uniform) else (b, a)
    if batched.dim not in u.replicated:
        raise _mixes(instr, f"a value that differs along the batch dim {batched.dim} "
                            f"meets a batched one")
    return batched


# --- the rules ---------------------------------------------------------------------------

def _constant(instr, ops):
    lit = instr.literal
    return Uniform(frozenset(j for j, n in enumerate(lit.shape)
                             if n <= 1 or bool(np.all(lit == lit.take([0], axis=j)))))


def _iota(instr, ops):
    return Uniform(frozenset(range(instr.shape.rank)) - {instr.attrs["iota_dimension"]})


def _elementwise(instr, ops):
    b = _batched(instr, ops)
    return b if b is not None else Uniform(_replicated(instr, ops))


def _same(instr, ops):
    return ops[0]


def _broadcast(instr, ops):
    (v,) = ops
    dims = instr.attrs["dimensions"]
    if isinstance(v, Batched):
        return Batched(dims[v.dim], v.block)
    new = frozenset(range(instr.shape.rank)) - set(dims)
    return Uniform(new | {dims[j] for j in v.replicated})


def _kept_dims(src: tuple[int, ...], dst: tuple[int, ...]) -> dict[int, int]:
    """Source dim -> result dim that a row-major reshape keeps whole: the same size after
    the same product of the dims before it."""
    at: dict[tuple[int, int], int] = {}
    p = 1
    for e, n in enumerate(dst):
        at.setdefault((p, n), e)
        p *= n
    kept, p = {}, 1
    for j, n in enumerate(src):
        if (p, n) in at:
            kept[j] = at[(p, n)]
        p *= n
    return kept


def _reshaped(instr, v: Batched, src: tuple[int, ...], dst: tuple[int, ...]) -> Batched:
    """Where a row-major reshape puts the batch: each sample is ``per`` consecutive
    elements after a prefix of ``before`` elements, so the result carries it at the first
    dim past the same prefix whose size counts the samples in whole blocks; none such, and
    samples interleave."""
    samples = src[v.dim] // v.block
    before, per = prod(src[:v.dim]), v.block * prod(src[v.dim + 1:])
    for e, n in enumerate(dst):
        if prod(dst[:e]) == before and n > 1:
            inner = prod(dst[e + 1:])
            if per % inner == 0 and n == samples * (per // inner):
                return Batched(e, per // inner)
            break
    raise _mixes(instr, f"it interleaves the samples of the batch dim {v.dim}")


def _reshape(instr, ops):
    (v,) = ops
    src = instr.operands[0].shape
    if instr.opcode is Opcode.BITCAST and not (src.has_default_layout
                                               and instr.shape.has_default_layout):
        if isinstance(v, Batched):
            raise _mixes(instr, "it reorders elements between layouts")
        return NOWHERE
    if isinstance(v, Batched):
        return _reshaped(instr, v, src.dims, instr.shape.dims)
    kept = _kept_dims(src.dims, instr.shape.dims)
    return Uniform(frozenset(kept[j] for j in v.replicated if j in kept))


def _transpose(instr, ops):
    (v,) = ops
    perm = list(instr.attrs["dimensions"])
    if isinstance(v, Batched):
        return Batched(perm.index(v.dim), v.block)
    return Uniform(frozenset(perm.index(j) for j in v.replicated))


def _slice(instr, ops):
    (v,) = ops
    s = instr.attrs["slice"]
    if isinstance(v, Batched):
        d = v.dim
        if (s.starts[d], s.limits[d], s.strides[d]) != (0, instr.operands[0].shape.dims[d], 1):
            raise _mixes(instr, f"it takes part of the batch dim {d}")
    return v


def _pad(instr, ops):
    p = instr.attrs["padding"]
    flat = [j for j in range(instr.shape.rank) if p.low[j] == p.high[j] == p.interior[j] == 0]
    b = _batched(instr, ops)
    if b is None:
        return Uniform(ops[0].replicated & set(flat))
    if b.dim not in flat:
        raise _mixes(instr, f"it pads the batch dim {b.dim}")
    return b


def _reverse(instr, ops):
    (v,) = ops
    if isinstance(v, Batched) and v.dim in instr.attrs["dimensions"]:
        raise _mixes(instr, f"it reverses the batch dim {v.dim}")
    return v


def _concatenate(instr, ops):
    c = instr.attrs["dimension"]
    b = _batched(instr, ops)
    if b is None:
        return Uniform(_replicated(instr, ops) - {c})
    if b.dim == c:
        raise _mixes(instr, f"it concatenates along the batch dim {c}")
    return b


def _gather(instr, ops):
    table, indices = ops
    dn, sizes = instr.attrs["dimension_numbers"], instr.attrs["slice_sizes"]
    if isinstance(table, Batched) and isinstance(indices, Batched):
        raise _mixes(instr, "both the operand and the indices carry the batch")
    if isinstance(indices, Batched):
        d = indices.dim
        if d == dn.index_vector_dim:
            raise _mixes(instr, f"its index vectors run along the batch dim {d}")
        if d in dn.start_indices_batching_dims:
            od = dn.operand_batching_dims[dn.start_indices_batching_dims.index(d)]
            if od not in table.replicated:
                raise _mixes(instr, f"sample i reads position i of operand dim {od}")
        batch = [e for e in range(instr.shape.rank) if e not in dn.offset_dims]
        index_dims = [j for j in range(instr.operands[1].shape.rank) if j != dn.index_vector_dim]
        return Batched(batch[index_dims.index(d)], indices.block)
    if isinstance(table, Batched):
        d = table.dim
        if (d in dn.collapsed_slice_dims or d in dn.start_index_map
                or d in dn.operand_batching_dims or sizes[d] != instr.operands[0].shape.dims[d]):
            raise _mixes(instr, f"it indexes into the batch dim {d}")
        whole = [j for j in range(instr.operands[0].shape.rank)
                 if j not in dn.collapsed_slice_dims and j not in dn.operand_batching_dims]
        return Batched(dn.offset_dims[whole.index(d)], table.block)
    return NOWHERE


def _dynamic_slice(instr, ops):
    b = _batched(instr, ops)
    if b is None:
        return Uniform(ops[0].replicated)
    if instr.attrs["dynamic_slice_sizes"][b.dim] != instr.operands[0].shape.dims[b.dim]:
        raise _mixes(instr, f"it takes part of the batch dim {b.dim}")
    return b


def _dynamic_update_slice(instr, ops):
    b = _batched(instr, ops)
    if b is None:
        return NOWHERE
    if instr.operands[1].shape.dims[b.dim] != instr.operands[0].shape.dims[b.dim]:
        raise _mixes(instr, f"it writes part of the batch dim {b.dim}")
    return b


def _convolution(instr, ops):
    lhs, rhs = ops
    dn = instr.attrs["dimension_numbers"]
    if isinstance(rhs, Batched):
        raise _mixes(instr, "its kernel carries the batch")
    if not isinstance(lhs, Batched):
        return NOWHERE
    if lhs.dim != dn.input_batch:
        raise _mixes(instr, f"it convolves over the batch dim {lhs.dim}")
    if instr.attrs["batch_group_count"] != 1:
        raise _mixes(instr, "its batch groups span samples")
    return Batched(dn.output_batch, lhs.block)


def _dot(instr, ops):
    dn = instr.attrs["dimension_numbers"]
    nb = len(dn.lhs_batch)
    sides = []      # per operand: its value, its batch dims, its dims -> result dims
    first_free = nb
    for v, o, batch, contracting in ((ops[0], instr.operands[0], dn.lhs_batch, dn.lhs_contracting),
                                     (ops[1], instr.operands[1], dn.rhs_batch, dn.rhs_contracting)):
        free = [j for j in range(o.shape.rank) if j not in batch and j not in contracting]
        to = {j: k for k, j in enumerate(batch)} | {j: first_free + k for k, j in enumerate(free)}
        sides.append((v, batch, to))
        first_free += len(free)
    out = set()
    for v, _, to in sides:
        if isinstance(v, Batched):
            if v.dim not in to:
                raise _mixes(instr, f"it contracts over the batch dim {v.dim}")
            out.add(Batched(to[v.dim], v.block))
    if len(out) > 1:
        raise _mixes(instr, "both operands carry the batch, at different result dims")
    if out:
        (result,) = out
        e = result.dim
        for v, batch, _ in sides:      # a uniform operand at a shared batch dim
            if e < nb and isinstance(v, Uniform) and batch[e] not in v.replicated:
                raise _mixes(instr, f"an operand differs from sample to sample (along "
                                    f"its batch dim {batch[e]})")
        return result
    lhs, rhs = ({to[j] for j in v.replicated if j in to} for v, _, to in sides)
    shared = set(range(nb))     # replicated there only where both operands are
    return Uniform(frozenset((lhs | rhs) - shared | (lhs & rhs & shared)))


def _reduce(instr, ops):
    reduced = instr.attrs["dimensions"]

    def renumber(j):
        return j - sum(r < j for r in reduced)

    b = _batched(instr, ops)
    if b is not None and b.dim in reduced:
        raise _mixes(instr, f"it reduces over the batch dim {b.dim}")
    if b is not None:
        return _per_result(instr, Batched(renumber(b.dim), b.block))
    rep = _replicated(instr, ops)
    return _per_result(instr, Uniform(frozenset(renumber(j) for j in rep if j not in reduced)))


def _reduce_window(instr, ops):
    w = instr.attrs["window"]

    def untouched(j):
        return (w.size[j], w.stride[j], w.pad_low[j], w.pad_high[j], w.lhs_dilation[j],
                w.rhs_dilation[j]) == (1, 1, 0, 0, 1, 1)

    b = _batched(instr, ops)
    if b is None:
        rep = _replicated(instr, ops)
        return _per_result(instr, Uniform(frozenset(j for j in rep if untouched(j))))
    if not untouched(b.dim):
        raise _mixes(instr, f"its window spans the batch dim {b.dim}")
    return _per_result(instr, b)


def _sort(instr, ops):
    c = instr.attrs["dimension"]
    b = _batched(instr, ops)
    if b is not None and b.dim == c:
        raise _mixes(instr, f"it sorts along the batch dim {c}")
    if b is None:
        return _per_result(instr, Uniform(_replicated(instr, ops) - {c}))
    return _per_result(instr, b)


def _topk(instr, ops):
    (v,) = ops
    last = instr.operands[0].shape.rank - 1
    if isinstance(v, Batched) and v.dim == last:
        raise _mixes(instr, f"it selects along the batch dim {last}")
    if isinstance(v, Uniform):
        v = Uniform(v.replicated - {last})
    return (v, v)


def _scatter(instr, ops):
    if any(isinstance(v, Batched) for v in ops):
        raise XlacError(f"{_named(instr)} reads the batch: scatter is not supported for "
                        f"bounded batch yet")
    return NOWHERE


def _tuple(instr, ops):
    return tuple(ops)


def _get_tuple_element(instr, ops):
    return ops[0][instr.attrs["index"]]


def _while(instr, ops):
    cond, body = instr.called
    state = ops[0]
    while True:     # the state only ever gains batched elements and loses replicated dims
        joined = _join(instr, state, _root(body, [state]))
        if joined == state:
            break
        state = joined
    # The condition's root is a scalar, never batched: analyzing it rejects whatever
    # reduces the batch to one.
    _root(cond, [state])
    return state


def _conditional(instr, ops):
    # The branch index is a scalar: never batched (see _while).
    results = [_root(c, [v]) for c, v in zip(instr.called, ops[1:])]
    return reduce(lambda a, b: _join(instr, a, b), results)


def _fusion(instr, ops):
    return _root(instr.called[0], ops)


def _unsupported(instr, ops):
    """An opcode without a rule (one added to the table later): fine away from the batch."""
    if any(isinstance(v, Batched) for v in _leaves(tuple(ops))):
        raise XlacError(f"{_named(instr)} reads the batch: {instr.opcode.text} is not "
                        f"supported for bounded batch")
    return _per_result(instr, NOWHERE)


RULES = {
    **{op: _elementwise for op in ELEMENTWISE},
    Opcode.CONSTANT: _constant,
    Opcode.IOTA: _iota,
    Opcode.BITCAST: _reshape,
    Opcode.BROADCAST: _broadcast,
    Opcode.CONCATENATE: _concatenate,
    Opcode.COPY: _same,
    Opcode.GATHER: _gather,
    Opcode.PAD: _pad,
    Opcode.RESHAPE: _reshape,
    Opcode.REVERSE: _reverse,
    Opcode.SCATTER: _scatter,
    Opcode.SLICE: _slice,
    Opcode.TRANSPOSE: _transpose,
    Opcode.DYNAMIC_SLICE: _dynamic_slice,
    Opcode.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
    Opcode.CONVOLUTION: _convolution,
    Opcode.DOT: _dot,
    Opcode.REDUCE: _reduce,
    Opcode.REDUCE_WINDOW: _reduce_window,
    Opcode.SORT: _sort,
    Opcode.TOPK: _topk,
    Opcode.WHILE: _while,
    Opcode.CONDITIONAL: _conditional,
    Opcode.FUSION: _fusion,
    Opcode.GET_TUPLE_ELEMENT: _get_tuple_element,
    Opcode.TUPLE: _tuple,
}
