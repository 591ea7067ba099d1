"""Control flow before memory planning: the while and conditional callees in the form
the memory planner and the emitter rely on, and the copies that make XLA's buffer
sharing safe.

The planner gives every while/conditional callee one place in the arena, so each is
called from one site (``flatten_call_graph``, XLA's FlattenCallGraph). As in XLA's
buffer assignment, a while's init element, its body's parameter element, its
body's root element and its result element are one storage: the init element's
(aliasing.py). That needs (XLA's CopyInsertion):

  - an init element the loop overwrites to be a buffer nothing else reads while
    or after the loop runs: not a parameter or constant, not given twice, and every
    other reader of its bytes an operand of the while, directly or not (so it runs
    before the loop in any order); otherwise the init element is a copy (or, for a
    value computed from constants alone, such as zeros, that computation again);
  - a body root element the loop overwrites to be a buffer the body computes, given
    once: not the parameter's element (a rotation of the state) or a constant;
    otherwise a copy. Whether the body may compute it straight into the state
    (before every read of the old element) is the memory model's question
    (aliasing.output_slots).

Invariant elements (the body returns its parameter's element k at k) are only read,
so they stay where they are, constants included; a constant one is also sunk into
the body and the condition (XLA's WhileLoopConstantSinking), where fusion can fold it.

The form: a while's state, init and body root are flat tuples (a ``tuple``
instruction for the init and the roots), a branch returning a tuple returns a
``tuple`` instruction, and a parameter's element k is read by one get-tuple-element.
"""
from __future__ import annotations

from ..hlo import Computation, Instruction, Module, Opcode, Shape, XlacError
from ..hlo.opcodes import CONTROL_FLOW
from .aliasing import buffers_of, loop_invariant, operands_closure, owns_buffer, parameter_leaf


def caller_of(module: Module, comp: Computation) -> Instruction | None:
    """The while or conditional that calls ``comp``, if any."""
    for c in module.computations:
        for i in c.instructions:
            if i.opcode in CONTROL_FLOW and any(x is comp for x in i.called):
                return i
    return None


def planned_computations(module: Module) -> list[Computation]:
    """The computations with an order and buffers of their own: the entry and, below
    it, the computations its whiles and conditionals call; callees first."""
    wanted = {id(module.entry)}
    for comp in reversed(module.computations):       # callers before callees
        if id(comp) in wanted:
            for i in comp.instructions:
                if i.opcode in CONTROL_FLOW:
                    wanted.update(id(c) for c in i.called)
    return [c for c in module.computations if id(c) in wanted]


class ControlFlowPreparation:
    """Flatten the call graph, canonicalize whiles and branches, sink invariant
    constants, insert the copies buffer sharing needs. Run after optimization, before
    memory planning (the simplifier would remove the copies)."""
    name = "control-flow-preparation"

    def run(self, module: Module) -> bool:
        changed = flatten_call_graph(module)
        for comp in planned_computations(module):
            for instr in list(comp.instructions):
                if instr.opcode is Opcode.WHILE:
                    changed |= _canonicalize_while(module, comp, instr)
                elif instr.opcode is Opcode.CONDITIONAL:
                    changed |= any([_tuple_root(c) for c in instr.called])
        for comp in planned_computations(module):
            changed |= _one_read_per_element(comp)
        for comp in planned_computations(module):
            for instr in list(comp.instructions):
                if instr.opcode is Opcode.WHILE:
                    changed |= _sink_constants(instr)
                    changed |= _copy_init(comp, instr)
                    changed |= _copy_body_root(instr)
        return changed


# --- one call site per callee ------------------------------------------------------

def flatten_call_graph(module: Module) -> bool:
    """Clone every while/conditional callee called from more than one site (the clones
    of a callee's own callees included)."""
    changed = False
    seen: set[int] = set()
    for comp in reversed(planned_computations(module)):       # callers first
        for instr in comp.instructions:
            if instr.opcode not in CONTROL_FLOW:
                continue
            for n, callee in enumerate(instr.called):
                if id(callee) in seen:
                    instr.called[n] = _clone(module, callee, before=comp)
                    changed = True
                seen.add(id(instr.called[n]))
    return changed


def _clone(module: Module, comp: Computation, before: Computation) -> Computation:
    clone = Computation(comp.name)
    mapped: dict[Instruction, Instruction] = {}
    for i in comp.instructions:
        called = i.called
        if i.opcode in CONTROL_FLOW:
            called = [_clone(module, c, before) for c in i.called]
        mapped[i] = clone.add(Instruction(i.opcode, i.shape, [mapped[o] for o in i.operands],
                                          i.attrs, called, i.literal, i.name, i.metadata))
    clone.root = mapped[comp.root]
    return module.add_computation(clone, before=before)


# --- the canonical form --------------------------------------------------------------

def _flat_tuple(shape: Shape, what: str) -> None:
    if any(s.is_tuple for s in shape.tuple_shapes):
        raise XlacError(f"{what}: nested tuples in a loop state or branch result are not "
                        f"supported ({shape})")


def _as_tuple(comp: Computation, value: Instruction) -> Instruction:
    """``value`` (tuple-shaped) as a tuple instruction of its elements."""
    if value.opcode is Opcode.TUPLE:
        return value
    elements = [comp.add(Instruction(Opcode.GET_TUPLE_ELEMENT, s, [value], {"index": k}))
                for k, s in enumerate(value.shape.tuple_shapes)]
    return comp.add(Instruction(Opcode.TUPLE, value.shape, elements))


def _tuple_root(comp: Computation) -> bool:
    root = comp.root
    if not root.shape.is_tuple or root.opcode is Opcode.TUPLE:
        return False
    _flat_tuple(root.shape, f"%{comp.name}")
    comp.root = _as_tuple(comp, root)
    return True


def _canonicalize_while(module: Module, comp: Computation, w: Instruction) -> bool:
    changed = False
    if not w.shape.is_tuple:
        _wrap_array_state(comp, w)
        changed = True
    _flat_tuple(w.shape, f"while %{w.name}")
    init = w.operands[0]
    if init.opcode is not Opcode.TUPLE:
        w.operands[0] = _as_tuple(comp, init)
        comp.sort()
        changed = True
    return _tuple_root(w.called[1]) or changed


def _wrap_array_state(comp: Computation, w: Instruction) -> None:
    """An array state x becomes the 1-tuple (x): the condition and the body read it from
    their parameter's element 0, the body returns (body(x)), users read element 0."""
    array = w.shape
    state = Shape.tuple_([array])
    for callee in w.called:
        (p,) = callee.parameters
        leaf = callee.add(Instruction(Opcode.GET_TUPLE_ELEMENT, array, [p], {"index": 0}))
        callee.replace_all_uses(p, leaf)
        leaf.operands = [p]
        p.shape = state
        if callee is w.called[1]:
            callee.root = callee.add(Instruction(Opcode.TUPLE, state, [callee.root]))
        callee.sort()
    users = [u for u in comp.instructions if w in u.operands]
    w.operands = [comp.add(Instruction(Opcode.TUPLE, state, w.operands))]
    w.shape = state
    result = comp.add(Instruction(Opcode.GET_TUPLE_ELEMENT, array, [w], {"index": 0}))
    for u in users:
        u.operands = [result if o is w else o for o in u.operands]
    if comp.root is w:
        comp.root = result
    comp.sort()


def _one_read_per_element(comp: Computation) -> bool:
    """One get-tuple-element per element of each tuple-shaped parameter: the memory model
    tracks an element by that instruction."""
    first: dict[tuple[int, int], Instruction] = {}
    replaced: dict[Instruction, Instruction] = {}
    for i in comp.instructions:
        if parameter_leaf(i):
            key = (id(i.operands[0]), i.attrs["index"])
            if key in first:
                replaced[i] = first[key]
            else:
                first[key] = i
    if not replaced:
        return False
    for i in comp.instructions:
        i.operands = [replaced.get(o, o) for o in i.operands]
    comp.root = replaced.get(comp.root, comp.root)
    comp.instructions = [i for i in comp.instructions if i not in replaced]
    return True


# --- constants and copies ---------------------------------------------------------------

def _sink_constants(w: Instruction) -> bool:
    """Invariant constant elements become constants of the condition and the body."""
    init = w.operands[0]
    changed = False
    for k, value in enumerate(init.operands):
        if value.opcode is not Opcode.CONSTANT or not loop_invariant(w, k):
            continue
        for callee in w.called:
            leaf = _leaf(callee, k)
            keep = callee.root if callee is w.called[1] else None
            users = [u for u in callee.instructions if leaf in u.operands and u is not keep]
            if leaf is None or not users:
                continue
            const = callee.add(Instruction(Opcode.CONSTANT, value.shape, literal=value.literal,
                                           name=value.name))
            for u in users:
                u.operands = [const if o is leaf else o for o in u.operands]
            callee.sort()
            changed = True
    return changed


def _leaf(comp: Computation, k: int) -> Instruction | None:
    return next((i for i in comp.instructions if parameter_leaf(i) and i.attrs["index"] == k),
                None)


def _copy(comp: Computation, value: Instruction) -> Instruction:
    """A fresh buffer holding ``value``: a second evaluation of it where that reads
    nothing but constants (zeros broadcast into a state: it then fills the loop's
    buffer itself), else a copy."""
    if value.opcode in (Opcode.FUSION, Opcode.BROADCAST, Opcode.IOTA) and \
            all(o.opcode is Opcode.CONSTANT for o in value.operands):
        return comp.add(Instruction(value.opcode, value.shape, value.operands, value.attrs,
                                    value.called, name=f"{value.name}.again",
                                    metadata=value.metadata))
    return comp.add(Instruction(Opcode.COPY, value.shape, [value], name=f"{value.name}.copy",
                                metadata=value.metadata))


def _computed_owner(value: Instruction) -> Instruction | None:
    """The owner of ``value``'s bytes if one buffer the computation computes holds exactly
    them (not a parameter, a parameter's element, a constant, a slice of a larger
    buffer or an element of a tuple-shaped op's)."""
    owners = buffers_of(value)
    if len(owners) != 1:
        return None
    owner = owners[0]
    if (not owns_buffer(owner) or owner.opcode in (Opcode.PARAMETER, Opcode.CONSTANT)
            or owner.shape.is_tuple or owner.shape.byte_size != value.shape.byte_size):
        return None
    return owner


def _copy_init(comp: Computation, w: Instruction) -> bool:
    before = operands_closure(w)
    return _copy_shared_elements(comp, w, w.operands[0],
                                 lambda owner: _read_only_before(comp, owner, w, before))


def _copy_body_root(w: Instruction) -> bool:
    body = w.called[1]
    return _copy_shared_elements(body, w, body.root)


def _copy_shared_elements(comp: Computation, w: Instruction, state: Instruction,
                          usable=lambda owner: True) -> bool:
    """Copy the elements of ``state`` (a tuple in ``comp`` that becomes ``w``'s loop state:
    its init or its body's root) that the loop overwrites but whose bytes are no buffer
    of their own: held by no single computed buffer, by one another element holds, or by
    one ``usable`` refuses. True if it copied any."""
    taken = {o for k, v in enumerate(state.operands) if loop_invariant(w, k)
             for o in buffers_of(v)}
    changed = False
    for k, value in enumerate(state.operands):
        if loop_invariant(w, k):
            continue
        owner = _computed_owner(value)
        if owner is None or owner in taken or not usable(owner):
            state.operands[k] = _copy(comp, value)
            owner = state.operands[k]
            changed = True
        taken.add(owner)
    if changed:
        comp.sort()
    return changed


def _read_only_before(comp: Computation, owner: Instruction, w: Instruction,
                      before: set[Instruction]) -> bool:
    """Whether every instruction that reads ``owner``'s bytes other than through ``w``
    is one ``w`` depends on (so it runs before the loop overwrites them)."""
    for i in comp.instructions:
        if i is w or i is w.operands[0]:
            continue
        if any(owner in buffers_of(o, stop=w) for o in i.operands) and i not in before:
            return False
    return True
