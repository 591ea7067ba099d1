"""Alias analysis: which values own storage, which only name someone else's, and
which may be written straight into another value's storage.

A value *owns a buffer* unless it is a view (reshape, bitcast, a contiguous
slice: bytes of its operand, at ``view_offset``), a get-tuple-element (an
element of its operand's storage), a tuple (no storage: its elements live
where they are) or a while: as in XLA, the loop state, the body's parameter and
root and the while's result share one storage per element, the storage of the
init tuple's element (control_flow.py inserts copies where that is not safe), so
``buffers_of(while)`` is its init's. Owned buffers live in one of four places:
the caller's input buffers (entry parameters), read-only data (constants), the
caller's output buffers (model outputs, see ``output_slots``), or the arena. A
tuple-shaped value computed by one op (a multi-output reduce, a conditional)
owns one buffer holding its elements one after another, each starting at a
multiple of the alignment (``tuple_element_offset``).

Inside a while body or condition or a conditional branch, the parameter's
elements (``parameter_leaf``: a get-tuple-element of the parameter) are bytes the
caller placed, as entry parameters are; they count as owners of their own, so
that each element is tracked apart. The computation's outputs (``output_slots``)
are the loop state's elements or the conditional's result.

Two rules let one owner's bytes serve another, so nothing is copied:
  - ``concat_slots``: a concatenation along its outermost non-unit dimension is
    one contiguous block per operand, so each operand's producer writes straight
    into its slice of the result, and the concatenation itself emits no code.
  - ``in_place_operands``: an element-wise op (or loop fusion) whose output
    element j reads an operand only at element j may write its result over that
    operand, provided nothing reads the operand later; so may a scatter over its
    operand 0. Whether that holds depends
    on the schedule, so the heap simulator decides it (``memory_model``).
"""
from __future__ import annotations

from ..hlo import Computation, Instruction, Opcode, Shape
from ..hlo.fusion import is_loop_fusion
from ..hlo.opcodes import ELEMENTWISE

# Always views: same bytes, new shape (row-major layouts on both sides).
VIEW_OPCODES = frozenset({Opcode.RESHAPE, Opcode.BITCAST})


def align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def _contiguous_slice_offset(instr: Instruction) -> int | None:
    """Byte offset of a stride-1 slice that is one contiguous block of its operand:
    unit extent in the dims before some dim a, full extent after it."""
    spec, dims = instr.attrs["slice"], instr.operands[0].shape.dims
    if any(st != 1 for st in spec.strides):
        return None
    rank = len(dims)
    a = 0
    while a < rank - 1 and spec.limits[a] - spec.starts[a] == 1:
        a += 1
    if any(spec.starts[d] != 0 or spec.limits[d] != dims[d] for d in range(a + 1, rank)):
        return None
    linear = 0
    for d in range(rank):
        linear = linear * dims[d] + spec.starts[d]
    return linear * instr.shape.dtype.itemsize


def row_major_in_memory(shape: Shape) -> bool:
    """Whether the elements lie in row-major order: the default layout, or one that only
    moves dims of extent 1 (an NHWC [1, C, 1, 1] is also an NCHW one)."""
    if shape.has_default_layout:
        return True
    wide = [d for d in reversed(shape.layout) if shape.dims[d] != 1]
    return wide == sorted(wide)


def view_offset(instr: Instruction) -> int | None:
    """Byte offset into its operand's bytes if ``instr`` is a view, else None."""
    if instr.opcode not in VIEW_OPCODES and instr.opcode is not Opcode.SLICE:
        return None
    if instr.shape.is_tuple:
        return None
    src = instr.operands[0].shape
    if instr.opcode is Opcode.RESHAPE:
        if not (row_major_in_memory(instr.shape) and row_major_in_memory(src)):
            return None
        return 0
    if not (instr.shape.has_default_layout and src.has_default_layout):
        return None
    if instr.opcode is Opcode.SLICE:
        return _contiguous_slice_offset(instr)
    return 0


def is_view(instr: Instruction) -> bool:
    return view_offset(instr) is not None


_NO_STORAGE = frozenset({Opcode.GET_TUPLE_ELEMENT, Opcode.TUPLE, Opcode.WHILE})


def owns_buffer(instr: Instruction) -> bool:
    return not (is_view(instr) or instr.opcode in _NO_STORAGE)


def element_source(t: Instruction, k: int) -> Instruction | None:
    """The instruction whose value is element ``k`` of the tuple-shaped ``t``, where the
    structure says so: a tuple's operand k; a while's element lives where its init's
    does. None when ``t`` holds its elements itself (a multi-output op, a parameter)."""
    while t.opcode is Opcode.WHILE:
        t = t.operands[0]
    return t.operands[k] if t.opcode is Opcode.TUPLE else None


def parameter_leaf(instr: Instruction) -> bool:
    """An element of a tuple-shaped parameter: bytes the caller placed."""
    return (instr.opcode is Opcode.GET_TUPLE_ELEMENT
            and instr.operands[0].opcode is Opcode.PARAMETER)


def loop_invariant(w: Instruction, k: int) -> bool:
    """Whether element ``k`` of the while ``w``'s state passes through its body unchanged
    (the body returns its parameter's element k there): the loop only reads it."""
    root = w.called[1].root
    if root.opcode is not Opcode.TUPLE:
        return False
    out = root.operands[k]
    return parameter_leaf(out) and out.attrs["index"] == k


def loop_state_owners(comp: Computation) -> set[Instruction]:
    """The owners of the state elements the whiles of ``comp`` overwrite."""
    owners: set[Instruction] = set()
    for w in comp.instructions:
        if w.opcode is Opcode.WHILE:
            for k in range(len(w.shape.tuple_shapes or ())):
                if not loop_invariant(w, k):
                    src = element_source(w, k)
                    owners.update(buffers_of(src) if src is not None else ())
    return owners


def buffers_of(instr: Instruction, stop: Instruction | None = None) -> list[Instruction]:
    """The owners of the storage that reading ``instr`` reads (several for a tuple);
    with ``stop`` (a while), leaving out what it reads through that while's result."""
    out: list[Instruction] = []
    stack = [instr]
    while stack:
        i = stack.pop()
        if i is stop or (stop is not None and i.opcode is Opcode.GET_TUPLE_ELEMENT
                         and i.operands[0] is stop):
            continue
        if is_view(i):
            stack.append(i.operands[0])
        elif parameter_leaf(i):
            if i not in out:
                out.append(i)
        elif i.opcode is Opcode.GET_TUPLE_ELEMENT:
            t = i.operands[0]
            stack.append(element_source(t, i.attrs["index"]) or t)
        elif i.opcode is Opcode.TUPLE:
            stack.extend(i.operands)
        elif i.opcode is Opcode.WHILE:
            stack.append(i.operands[0])
        elif i not in out:
            out.append(i)
    return out


def buffer_size(shape: Shape, alignment: int) -> int:
    """Bytes of the buffer holding a value of ``shape`` (tuple elements aligned)."""
    if not shape.is_tuple:
        return shape.byte_size
    return sum(align_up(buffer_size(s, alignment), alignment) for s in shape.tuple_shapes)


def tuple_element_offset(shape: Shape, index: int, alignment: int) -> int:
    """Byte offset of element ``index`` inside the buffer of a tuple-shaped value."""
    return sum(align_up(buffer_size(s, alignment), alignment)
               for s in shape.tuple_shapes[:index])


def output_slots(comp: Computation, loop_body: bool = False) -> dict[Instruction, int]:
    """Owners computed straight into the place of output k of ``comp`` (the caller's
    output buffer k for the entry; element k of the loop state for a while body; element
    k of the conditional's result for a branch).

    Output k gets the owner of its value when that owner is computed by ``comp`` (not
    a parameter, a parameter's element or a constant), is an array, is the whole of
    the output's bytes (not a slice of a larger value), and has not already been given
    an earlier output (one value returned twice is copied by the emitter).
    A producer that such an owner overwrites in place and nothing else reads
    computes into the output too (``_in_place_chain``).

    In a loop body output k's place also holds parameter element k, the state the
    iteration started from: a producer may write there only once nothing can still
    read that element, that is when every reader of it is among the producer's
    operands, directly or not, or is the producer itself reading it element by element
    (``in_place_operands``) — so in any order of the body (XLA's copy insertion asks
    the same of the dataflow order). The chain stops at the first producer for which
    that fails.
    """
    slots: dict[Instruction, int] = {}
    outputs = comp.outputs
    for k, out in enumerate(outputs):
        owners = buffers_of(out)
        if len(owners) != 1:
            continue
        owner = owners[0]
        if (owner.opcode in (Opcode.PARAMETER, Opcode.CONSTANT) or not owns_buffer(owner)
                or owner.shape.is_tuple or owner.shape.byte_size != out.shape.byte_size
                or owner in slots):
            continue
        slots[owner] = k
    # Down a chain of in-place producers (a bias add after a matrix product): the first
    # computes into the output and the rest overwrite it there.
    users = comp.users()
    for owner, k in list(slots.items()):
        for q in _in_place_chain(owner, users, lambda q: q not in slots
                                 and _produced_in_slot(q, {})):
            slots[q] = k
    if loop_body:
        slots = _after_the_old_state(comp, slots, users)
    return slots


def _after_the_old_state(comp: Computation, slots: dict[Instruction, int],
                         users) -> dict[Instruction, int]:
    """The slots of a loop body where writing cannot clobber the old state element."""
    leaves = {i.attrs["index"]: i for i in comp.instructions if parameter_leaf(i)}
    readers: dict[int, set[Instruction]] = {}
    for i in comp.instructions:
        if i is comp.root:
            continue
        for o in i.operands:
            for owner in buffers_of(o):
                if owner in leaves.values():
                    readers.setdefault(owner.attrs["index"], set()).add(i)
    kept: dict[Instruction, int] = {}
    by_output: dict[int, list[Instruction]] = {}
    for q, k in slots.items():               # a chain, from the output down
        by_output.setdefault(k, []).append(q)
    for k, chain in by_output.items():
        leaf = leaves.get(k)
        for q in chain:
            before = operands_closure(q)
            if not all(r in before or (r is q and _reads_only_in_place(q, leaf))
                       for r in readers.get(k, ())):
                break
            kept[q] = k
    return kept


def operands_closure(instr: Instruction) -> set[Instruction]:
    """Every instruction ``instr`` depends on (its operands, theirs, ...)."""
    seen: set[Instruction] = set()
    stack = list(instr.operands)
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(i.operands)
    return seen


def _reads_only_in_place(instr: Instruction, leaf: Instruction) -> bool:
    """Whether ``instr`` reads ``leaf`` only through operands it may overwrite in place."""
    eligible = in_place_operands(instr)
    return all(k in eligible for k, o in enumerate(instr.operands) if leaf in buffers_of(o))


def _produced_in_slot(operand: Instruction, claimed: dict) -> bool:
    """Whether ``operand``'s producer can write its value into a concatenation's slice."""
    return (owns_buffer(operand) and operand not in claimed and not operand.shape.is_tuple
            and operand.shape.byte_size > 0 and operand.shape.has_default_layout
            and operand.opcode not in (Opcode.PARAMETER, Opcode.CONSTANT))


def concat_slots(comp: Computation, excluded=frozenset(),
                 overwritten=frozenset()) -> dict[Instruction, tuple[Instruction, int]]:
    """Producers written straight into a concatenation: producer -> (concat, byte offset).

    A concatenation qualifies when it is ``concat_of_blocks``. An operand qualifies
    when it owns its buffer, is an array computed by the model (not a parameter or
    constant, not in ``excluded``, e.g. owners written into the caller's outputs)
    and appears in no other slot. Concats are
    visited last first, so a concatenation feeding a later one (DenseNet's growing
    feature map) becomes a prefix of it: the block is built once, never copied.
    Operands that cannot take a slot keep their buffers and are copied in. A
    producer ``q`` that a slot's producer overwrites in place (``in_place_operands``)
    and nothing else reads is given the same slot (it is not an operand of the
    concatenation). A concatenation in ``overwritten`` (one a user overwrites in place
    whatever the order, as in an output's or a slot's chain), or placed inside one,
    takes only operands it alone reads: a reader scheduled after the overwrite would
    find the slice gone.
    """
    claimed: dict[Instruction, tuple[Instruction, int]] = {}
    users = comp.users()
    overwritten = set(overwritten)     # grows by the concatenations placed inside one
    for c in reversed(comp.instructions):
        if not concat_of_blocks(c):
            continue
        offset = 0
        for o in c.operands:
            if (c.operands.count(o) == 1 and _produced_in_slot(o, claimed)
                    and o not in excluded
                    and (c not in overwritten or set(users[o]) == {c})):
                claimed[o] = (c, offset)
                if c in overwritten:
                    overwritten.add(o)
                # Down a chain of in-place producers (a ReLU after a convolution): the
                # first computes into the slot and the rest overwrite it there.
                for q in _in_place_chain(o, users, lambda q: q not in excluded
                                         and _produced_in_slot(q, claimed)):
                    claimed[q] = (c, offset)
                    # The one above overwrites q whatever the order: a concatenation q
                    # keeps no slot producer another instruction reads.
                    overwritten.add(q)
            offset += o.shape.byte_size
    return claimed


def concat_of_blocks(c: Instruction) -> bool:
    """A row-major concatenation whose operands are contiguous blocks of its result
    (every dim before the concat dim has extent 1)."""
    return (c.opcode is Opcode.CONCATENATE and not c.shape.is_tuple
            and c.shape.has_default_layout
            and all(n == 1 for n in c.shape.dims[:c.attrs["dimension"]]))


def _in_place_chain(p: Instruction, users, accept) -> list[Instruction]:
    """The producers below ``p`` that can compute where ``p`` does: each one's value is
    an operand that the one above may overwrite and that nothing else reads, and is
    ``accept``ed; the chain stops at the first that is not."""
    chain = []
    while True:
        q = next((p.operands[k] for k in in_place_operands(p)
                  if view_offset(p.operands[k]) is None and len(set(users[p.operands[k]])) == 1
                  and p.operands.count(p.operands[k]) == 1), None)
        if q is None or not accept(q):
            return chain
        chain.append(q)
        p = q


def in_place_operands(instr: Instruction) -> list[int]:
    """Operand numbers whose bytes ``instr`` may overwrite with its result.

    Operand k qualifies when the result has its byte size, element size and layout and
    output element j reads operand k only at element j: ``instr`` is element-wise,
    or a loop fusion whose parameter k reaches the root through element-wise ops and
    reshapes alone (a reshape keeps the row-major order: a dot's (M, N) result
    reshaped to (1, M, N) for its bias and activation). A dynamic-update-slice's or a
    scatter's operand 0 qualifies too: each starts from a copy of it, which in place is
    no copy at all, and then writes only its window or its updates. The operand may be
    read through a view of the same bytes.
    """
    if instr.shape.is_tuple:
        return []
    if instr.opcode in ELEMENTWISE:
        candidates = list(range(len(instr.operands)))
    elif instr.opcode in (Opcode.DYNAMIC_UPDATE_SLICE, Opcode.SCATTER):
        candidates = [0]
    elif is_loop_fusion(instr):
        fused = instr.called[0]
        candidates = [k for k, p in enumerate(fused.parameters)
                      if _reaches_root_elementwise(fused, p)]
    else:
        return []
    out = []
    for k in candidates:
        o = instr.operands[k]
        if (o.shape.byte_size == instr.shape.byte_size and not o.shape.is_tuple
                and o.shape.dtype.itemsize == instr.shape.dtype.itemsize
                and o.shape.layout == instr.shape.layout and view_offset(o) in (None, 0)):
            out.append(k)
    return out


def _reaches_root_elementwise(fused: Computation, param: Instruction) -> bool:
    """Every instruction that reads ``param`` (directly or not) is element-wise or a
    reshape, with ``param``'s element count and row-major layouts, so that its element j
    depends on ``param``'s element j alone; and the root is one of them."""
    users = fused.users()
    seen, stack = {param}, [param]
    while stack:
        for u in users[stack.pop()]:
            if u.opcode not in ELEMENTWISE | {Opcode.RESHAPE, Opcode.BITCAST} or \
                    u.shape.num_elements != param.shape.num_elements or \
                    not (u.shape.has_default_layout and param.shape.has_default_layout):
                return False
            if u not in seen:
                seen.add(u)
                stack.append(u)
    return fused.root in seen and fused.root is not param
