"""Alias analysis: which values own storage, which only name someone else's, and
which may be written straight into another value's storage.

A value *owns a buffer* unless it is a view (reshape, bitcast, a contiguous
slice: bytes of its operand, at ``view_offset``), a get-tuple-element (an
element of its operand's storage) or a tuple (no storage: its elements live
where they are). Owned buffers live in one of four places: the caller's input
buffers (entry parameters), read-only data (constants), the caller's output
buffers (model outputs, see ``output_slots``), or the arena. A tuple-shaped
value computed by one op (a multi-output reduce) owns one buffer holding its
elements one after another, each starting at a multiple of the alignment
(``tuple_element_offset``).

Two rules let one owner's bytes serve another, so nothing is copied:
  - ``concat_slots``: a concatenation along its outermost non-unit dimension is
    one contiguous block per operand, so each operand's producer writes straight
    into its slice of the result, and the concatenation itself emits no code.
  - ``in_place_operands``: an element-wise op (or loop fusion) whose output
    element j reads an operand only at element j may write its result over that
    operand, provided nothing reads the operand later. Whether that holds depends
    on the schedule, so the heap simulator decides it (``memory_model``).
"""
from __future__ import annotations

from ..hlo import Computation, Instruction, Module, Opcode, Shape
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


def owns_buffer(instr: Instruction) -> bool:
    return not (is_view(instr) or instr.opcode in (Opcode.GET_TUPLE_ELEMENT, Opcode.TUPLE))


def buffers_of(instr: Instruction) -> list[Instruction]:
    """The owners of the storage that reading ``instr`` reads (several for a tuple)."""
    out: list[Instruction] = []
    stack = [instr]
    while stack:
        i = stack.pop()
        if is_view(i):
            stack.append(i.operands[0])
        elif i.opcode is Opcode.GET_TUPLE_ELEMENT:
            t = i.operands[0]
            stack.append(t.operands[i.attrs["index"]] if t.opcode is Opcode.TUPLE else t)
        elif i.opcode is Opcode.TUPLE:
            stack.extend(i.operands)
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


def output_slots(module: Module) -> dict[Instruction, int]:
    """Owners computed straight into the caller's output buffer k.

    Output k gets the owner of its value when that owner is computed by the
    model (not a parameter or constant), is an array, is the whole of the
    output's bytes (not a slice of a larger value), and has not already been
    given an earlier output (one value returned twice is copied by the emitter).
    A producer that such an owner overwrites in place and nothing else reads
    computes into the output too (``_in_place_chain``).
    """
    slots: dict[Instruction, int] = {}
    for k, out in enumerate(module.output_instructions):
        owners = buffers_of(out)
        if len(owners) != 1:
            continue
        owner = owners[0]
        if (owner.opcode in (Opcode.PARAMETER, Opcode.CONSTANT) or owner.shape.is_tuple
                or owner.shape.byte_size != out.shape.byte_size or owner in slots):
            continue
        slots[owner] = k
    # Down a chain of in-place producers (a bias add after a matrix product): the first
    # computes into the output and the rest overwrite it there.
    users = module.entry.users()
    for owner, k in list(slots.items()):
        for q in _in_place_chain(owner, users, lambda q: q not in slots
                                 and _produced_in_slot(q, {})):
            slots[q] = k
    return slots


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
    whatever the order, as in an output's chain), or placed inside one, takes only
    operands it alone reads: a reader scheduled after the overwrite would find the
    slice gone.
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
    or a loop fusion whose parameter k reaches the root through element-wise ops
    alone. The operand may be read through a view of the same bytes.
    """
    if instr.shape.is_tuple:
        return []
    if instr.opcode in ELEMENTWISE:
        candidates = list(range(len(instr.operands)))
    elif instr.opcode is Opcode.FUSION and instr.attrs.get("kind") == "kLoop":
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
    """Every instruction that reads ``param`` (directly or not) is element-wise with
    ``param``'s dims, and the root is one of them."""
    users = fused.users()
    seen, stack = {param}, [param]
    while stack:
        for u in users[stack.pop()]:
            if u.opcode not in ELEMENTWISE or u.shape.dims != param.shape.dims:
                return False
            if u not in seen:
                seen.add(u)
                stack.append(u)
    return fused.root in seen and fused.root is not param
