"""Loop-invariant code motion (XLA's WhileLoopInvariantCodeMotion).

Work a loop body repeats on values that never change across iterations runs once,
before the loop, and its result enters the loop as a read-only element of the state.
A value is invariant when it is a constant, an invariant element of the state (the
body returns it unchanged, aliasing.loop_invariant), or computed from invariant
values alone. What moves is each invariant value the rest of the body reads, with
the invariant work below it, when that work is worth a buffer live across the loop:

  - it holds real work, not only data movement and broadcasts (which fusion makes
    free inside the body) or a parameter element read as it is;
  - its result is no larger than the invariant inputs it is computed from, so the
    loop's footprint grows by at most what those already take (XLA's size inflation
    limit).

The loop's while, condition and body must be the only users of each other (the call
graph is flat, as the importer builds it); loops used whole (not element by element)
are left alone, since their state shape changes.
"""
from __future__ import annotations

from ..hlo import Computation, Instruction, Module, Opcode, Shape
from ..hlo.opcodes import CONTROL_FLOW
from .aliasing import loop_invariant, parameter_leaf

# Data movement and broadcasts: cheap to repeat, fused into their users for free.
_CHEAP = frozenset({
    Opcode.BROADCAST, Opcode.IOTA, Opcode.RESHAPE, Opcode.BITCAST, Opcode.TRANSPOSE,
    Opcode.SLICE, Opcode.CONVERT, Opcode.COPY, Opcode.CONCATENATE, Opcode.PAD,
    Opcode.REVERSE, Opcode.CONSTANT, Opcode.GET_TUPLE_ELEMENT,
})
_NEVER = frozenset({Opcode.PARAMETER, Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT}) | CONTROL_FLOW


class WhileLoopInvariantCodeMotion:
    name = "licm"

    def run(self, module: Module) -> bool:
        return rewrite_movable_loops(module, _hoist)


def rewrite_movable_loops(module: Module, rewrite) -> bool:
    """``rewrite(computation, while)`` for each while of ``module`` whose state may change
    shape (``movable_loop``), found before any change; whether one changed."""
    loops = [(comp, w) for comp in list(module.computations) for w in list(comp.instructions)
             if w.opcode is Opcode.WHILE and movable_loop(module, comp, w)]
    changed = False
    for comp, w in loops:
        changed |= rewrite(comp, w)
    return changed


def movable_loop(module: Module, comp: Computation, w: Instruction) -> bool:
    """Whether the state of ``w`` may change shape: its init and body root are tuple
    instructions, it alone calls its condition and body, and its users read it element
    by element."""
    cond, body = w.called
    if not (w.shape.is_tuple and w.operands[0].opcode is Opcode.TUPLE
            and body.root.opcode is Opcode.TUPLE and cond is not body):
        return False
    callers = [i for c in module.computations for i in c.instructions
               if i.called and any(x is cond or x is body for x in i.called)]
    whole = [u for u in comp.instructions if w in u.operands
             and u.opcode is not Opcode.GET_TUPLE_ELEMENT] + ([w] if comp.root is w else [])
    return callers == [w] and not whole


def _hoist(parent: Computation, w: Instruction) -> bool:
    body = w.called[1]
    invariant: set[Instruction] = set()
    for i in body.instructions:          # operands first
        if i.opcode is Opcode.CONSTANT:
            invariant.add(i)
        elif parameter_leaf(i):
            if loop_invariant(w, i.attrs["index"]):
                invariant.add(i)
        elif i.opcode not in _NEVER and i.operands and all(o in invariant for o in i.operands):
            invariant.add(i)
    users = body.users()
    frontier = [i for i in body.instructions
                if i in invariant and not i.shape.is_tuple and i.opcode is not Opcode.CONSTANT
                and not parameter_leaf(i) and any(u not in invariant for u in users[i])]
    moved = [f for f in frontier if _worth_it(f)]
    for f in moved:
        _move(parent, w, f)
    return bool(moved)


def _inputs_and_work(f: Instruction):
    """The invariant leaves (parameter elements, constants) below ``f``, and whether any
    instruction on the way does real work."""
    leaves, work, seen, stack = set(), False, set(), [f]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if i.opcode is Opcode.CONSTANT or parameter_leaf(i):
            leaves.add(i)
            continue
        work |= i.opcode not in _CHEAP
        stack.extend(i.operands)
    return leaves, work


def _worth_it(f: Instruction) -> bool:
    leaves, work = _inputs_and_work(f)
    return work and f.shape.byte_size <= sum(x.shape.byte_size for x in leaves)


def _move(parent: Computation, w: Instruction, f: Instruction) -> None:
    """Compute ``f`` before ``w`` and read it from a new element of the state."""
    init = w.operands[0]
    mapped: dict[Instruction, Instruction] = {}

    def clone(i: Instruction) -> Instruction:
        if i not in mapped:
            if parameter_leaf(i):
                mapped[i] = init.operands[i.attrs["index"]]
            else:
                ops = [clone(o) for o in i.operands]
                mapped[i] = parent.add(Instruction(i.opcode, i.shape, ops, i.attrs, i.called,
                                                   i.literal, i.name, i.metadata))
        return mapped[i]

    value = clone(f)
    index = len(init.operands)
    init.operands.append(value)
    state = Shape.tuple_([o.shape for o in init.operands])
    init.shape = w.shape = state
    for callee in w.called:
        (p,) = callee.parameters
        p.shape = state
    body = w.called[1]
    (p,) = body.parameters
    element = body.add(Instruction(Opcode.GET_TUPLE_ELEMENT, f.shape, [p], {"index": index},
                                   name=f"{f.name}.hoisted"))
    for i in body.instructions:
        if i is not element:
            i.operands = [element if o is f else o for o in i.operands]
    body.root.operands.append(element)
    body.root.shape = state
    body.sort()
    parent.sort()
