"""Projection sinking: a recurrent loop's input projection moved into its body.

The ONNX importer computes the input projection of every time step of an RNN, GRU or
LSTM before its loop, as real implementations do: P = X W^T (+ biases) for all steps
in one matrix product, and the body reads its step's rows of P with a dynamic-slice.
P is a buffer of steps x batch x gates live across the whole loop, often most of a
small model's arena. The other form computes each step's rows in the body from that
step's rows of X (as TensorFlow Lite Micro does): one small product per step, no such
buffer. Which form wins is the memory planner's question: ``xlac.compile`` plans the
module and its copy rewritten by this pass, and keeps the smaller arena
(``optimizer.optimize_and_plan``).

The rewrite, for each state element k of a while that
  - the loop only reads (its body returns it unchanged) and the body reads only
    through dynamic-slices, the condition and the loop's users not at all,
  - whose initial value P is computed for the loop alone (nothing else reads it) from
    a dot, element-wise ops over it and broadcasts:
each dynamic-slice of P becomes the same expression over slices of its inputs: a dot
of a slice of its lhs (its free dims sliced as the result's) and of its rhs (alike),
element-wise ops of slices, broadcasts of a slice of their operand. Inputs computed
from constants alone are cloned into the body (constant folding slices them at compile
time); the others join the loop state as read-only elements; element k leaves it.
Constant weights enter the state laid out as the importer lays out the weights of the
products it writes inside a loop (R^T): [batch, K, N], a row of them a row of the
result's columns, which the dot kernel reads in place.
"""
from __future__ import annotations

import numpy as np

from ..hlo import (Computation, DotDimensionNumbers, Instruction, Module, Opcode, Shape,
                    SliceSpec)
from ..hlo.opcodes import ELEMENTWISE
from .aliasing import loop_invariant, parameter_leaf
from .licm import rewrite_movable_loops


class ProjectionSinking:
    name = "projection-sinking"

    def run(self, module: Module) -> bool:
        return rewrite_movable_loops(module, _sink_loop)


def _sink_loop(parent: Computation, w: Instruction) -> bool:
    changed = False
    for k in reversed(range(len(w.operands[0].operands))):   # removals keep lower indices
        slices = _sinkable(parent, w, k)
        if slices is not None:
            _Sinker(parent, w).sink(k, slices)
            changed = True
    return changed


def _sinkable(parent: Computation, w: Instruction, k: int) -> list[Instruction] | None:
    """The body's dynamic-slices of state element k, if the element can leave the state."""
    init, (cond, body) = w.operands[0], w.called
    value = init.operands[k]
    if not loop_invariant(w, k) or not _projection(value) \
            or parent.users()[value] != [init] or init.operands.count(value) != 1:
        return None
    if _element_read(cond, k) or any(
            u.opcode is Opcode.GET_TUPLE_ELEMENT and u.attrs["index"] == k and parent.users()[u]
            for u in parent.users()[w]):
        return None
    users = body.users()
    slices = []
    for e in (i for i in body.instructions if _reads_element(i, k)):
        for u in users[e]:
            if u is body.root and body.root.operands.index(e) == k \
                    and body.root.operands.count(e) == 1:
                continue                    # the element passed on unchanged
            if u.opcode is not Opcode.DYNAMIC_SLICE or u.operands[0] is not e \
                    or e in u.operands[1:]:
                return None
            slices.append(u)
    return slices or None


def _reads_element(i: Instruction, k: int) -> bool:
    return parameter_leaf(i) and i.attrs["index"] == k


def _element_read(comp: Computation, k: int) -> bool:
    users = comp.users()
    return any(_reads_element(i, k) and users[i] for i in comp.instructions)


def _projection(value: Instruction) -> bool:
    """A dot under element-wise ops and broadcasts (the bias added to X W^T)."""
    if value.opcode is Opcode.DOT:
        return not value.shape.is_tuple
    if value.opcode in ELEMENTWISE and not value.shape.is_tuple:
        return any(_projection(o) for o in value.operands if o.shape.dims == value.shape.dims)
    return False


def _constant_only(value: Instruction) -> bool:
    """Computed from constants alone by ops that call nothing (so a clone is free to
    move into the body)."""
    return (value.opcode is not Opcode.PARAMETER and not value.called
            and all(_constant_only(o) for o in value.operands))


class _Sinker:
    def __init__(self, parent: Computation, w: Instruction):
        self.parent, self.w = parent, w
        self.body = w.called[1]
        self.inside: dict[Instruction, Instruction] = {}   # parent value -> body value

    def sink(self, k: int, slices: list[Instruction]) -> None:
        body = self.body
        for ds in slices:
            self.metadata = ds.metadata
            self.index_type = ds.operands[1].shape
            new = self.sliced(self.w.operands[0].operands[k], list(ds.operands[1:]),
                              list(ds.attrs["dynamic_slice_sizes"]))
            body.replace_instruction(ds, new)
        _remove_element(self.parent, self.w, k)

    def add(self, instr: Instruction) -> Instruction:
        if instr.metadata is None:
            instr.metadata = self.metadata
        return self.body.add(instr)

    def sliced(self, v: Instruction, starts: list, sizes: list[int]) -> Instruction:
        """The body's value of ``dynamic-slice(v, starts, sizes)``, ``v`` a value before
        the loop; a start of None is 0."""
        shape = Shape.array(v.shape.dtype, sizes)
        if v.opcode is Opcode.DOT:
            lhs, rhs = v.operands
            (ls, lz), (rs, rz) = (_operand_window(v, side, starts, sizes) for side in (0, 1))
            inputs = self.sliced(lhs, ls, lz)
            fixed = _fixed_starts(rs, rhs.shape.dims, rz)
            if _constant_only(rhs) and fixed is not None:
                weights, attrs = self.rows_of_columns(rhs, fixed, rz, v.attrs)
            else:
                weights, attrs = self.sliced(rhs, rs, rz), v.attrs
            return self.add(Instruction(Opcode.DOT, shape, [inputs, weights], attrs,
                                        name=v.name))
        if v.opcode in ELEMENTWISE and all(o.shape.dims == v.shape.dims for o in v.operands):
            return self.add(Instruction(v.opcode, shape,
                                        [self.sliced(o, starts, sizes) for o in v.operands],
                                        v.attrs, name=v.name))
        if v.opcode is Opcode.BROADCAST:
            dims = v.attrs["dimensions"]
            (o,) = v.operands
            inner = self.sliced(o, [starts[d] for d in dims], [sizes[d] for d in dims])
            return self.add(Instruction(Opcode.BROADCAST, shape, [inner], v.attrs, name=v.name))
        whole = self.value(v)
        if list(v.shape.dims) == sizes and all(_is_zero(s) for s in starts):
            return whole
        starts = [s if s is not None else self.add(Instruction(
            Opcode.CONSTANT, self.index_type, literal=np.zeros((), self.index_type.dtype.np)))
            for s in starts]
        return self.add(Instruction(Opcode.DYNAMIC_SLICE, shape, [whole, *starts],
                                    {"dynamic_slice_sizes": tuple(sizes)},
                                    name="dynamic-slice"))

    def rows_of_columns(self, rhs: Instruction, starts: list[int], sizes: list[int],
                        attrs: dict) -> tuple[Instruction, dict]:
        """Constant weights ``rhs``, their window at ``starts``, laid out as the
        importer's products in a loop read theirs (R^T): batch dims, then contracting
        dims, then free dims, so that a row is a row of the result's columns. Made before
        the loop (folded at compile time there), read from the state; and the dot's
        attributes for them."""
        dn = attrs["dimension_numbers"]
        batch, contracting = list(dn.rhs_batch), list(dn.rhs_contracting)
        perm = batch + contracting + [d for d in range(rhs.shape.rank)
                                      if d not in batch + contracting]
        w = rhs
        if list(sizes) != list(rhs.shape.dims):
            w = self.parent.add(Instruction(
                Opcode.SLICE, Shape.array(rhs.shape.dtype, sizes), [w],
                {"slice": SliceSpec(starts, [a + n for a, n in zip(starts, sizes)],
                                    [1] * len(sizes))}, name="slice"))
        if perm != list(range(rhs.shape.rank)):
            w = self.parent.add(Instruction(
                Opcode.TRANSPOSE, Shape.array(rhs.shape.dtype, [sizes[d] for d in perm]),
                [w], {"dimensions": tuple(perm)}, name="transpose"))
        if w not in self.inside:        # in the state: a transpose in the body would
            self.inside[w] = _add_element(self.parent, self.w, w)   # fold into the dot
        n = len(batch)
        return self.inside[w], {**attrs, "dimension_numbers": DotDimensionNumbers(
            dn.lhs_batch, dn.lhs_contracting, tuple(range(n)),
            tuple(range(n, n + len(contracting))))}

    def value(self, v: Instruction) -> Instruction:
        """``v`` (a value before the loop) in the body: cloned where constants alone
        make it, else read from a new element of the state."""
        if v not in self.inside:
            if _constant_only(v):
                ops = [self.value(o) for o in v.operands]
                self.inside[v] = self.add(Instruction(v.opcode, v.shape, ops, v.attrs, v.called,
                                                      v.literal, v.name, v.metadata))
            else:
                self.inside[v] = _add_element(self.parent, self.w, v)
        return self.inside[v]


def _operand_window(dot: Instruction, side: int, starts: list, sizes: list[int]):
    """The starts and sizes of operand ``side`` of ``dot`` that its result's window
    (``starts``, ``sizes``) reads: batch and free dims as the result's, contracting dims
    whole."""
    dn = dot.attrs["dimension_numbers"]
    operand = dot.operands[side]
    batch = dn.lhs_batch if side == 0 else dn.rhs_batch
    contracting = dn.lhs_contracting if side == 0 else dn.rhs_contracting
    lhs_free = [d for d in range(dot.operands[0].shape.rank)
                if d not in dn.lhs_batch + dn.lhs_contracting]
    free = [d for d in range(operand.shape.rank) if d not in batch + contracting]
    first_free = len(batch) + (0 if side == 0 else len(lhs_free))
    out_starts, out_sizes = [], []
    for d in range(operand.shape.rank):
        if d in batch:
            r = batch.index(d)
        elif d in contracting:
            out_starts.append(None)
            out_sizes.append(operand.shape.dims[d])
            continue
        else:
            r = first_free + free.index(d)
        out_starts.append(starts[r])
        out_sizes.append(sizes[r])
    return out_starts, out_sizes


def _fixed_starts(starts: list, dims, sizes: list[int]) -> list[int] | None:
    """The starts as numbers, clamped as dynamic-slice clamps them, if all are
    constants (None: 0)."""
    out = []
    for s, d, n in zip(starts, dims, sizes):
        if s is not None and s.opcode is not Opcode.CONSTANT:
            return None
        value = 0 if s is None else int(s.literal)
        out.append(min(max(value, 0), d - n))
    return out


def _is_zero(s: Instruction | None) -> bool:
    return s is None or (s.opcode is Opcode.CONSTANT and not np.any(s.literal))


def _add_element(parent: Computation, w: Instruction, v: Instruction) -> Instruction:
    """Append ``v`` (computed before ``w``) to the loop's state, the body passing it on;
    returns the body's read of it."""
    init, body = w.operands[0], w.called[1]
    index = len(init.operands)
    init.operands.append(v)
    _restate(w, Shape.tuple_([o.shape for o in init.operands]))
    (p,) = body.parameters
    element = body.add(Instruction(Opcode.GET_TUPLE_ELEMENT, v.shape, [p], {"index": index},
                                   name=v.name))
    body.root.operands.append(element)
    body.root.shape = init.shape
    return element


def _remove_element(parent: Computation, w: Instruction, k: int) -> None:
    """Drop element ``k`` (read by nothing any more) from the loop's state."""
    init, (cond, body) = w.operands[0], w.called
    del init.operands[k]
    del body.root.operands[k]
    _restate(w, Shape.tuple_([o.shape for o in init.operands]))
    body.root.shape = init.shape
    for comp, of in ((cond, cond.parameters[0]), (body, body.parameters[0]), (parent, w)):
        for i in list(comp.instructions):
            if i.opcode is Opcode.GET_TUPLE_ELEMENT and i.operands[0] is of:
                if i.attrs["index"] == k:
                    comp.remove(i)          # unused: _sinkable checked
                elif i.attrs["index"] > k:
                    i.attrs = {**i.attrs, "index": i.attrs["index"] - 1}
    for comp in (cond, body, parent):
        comp.sort()


def _restate(w: Instruction, state: Shape) -> None:
    w.operands[0].shape = w.shape = state
    for callee in w.called:
        callee.parameters[0].shape = state
