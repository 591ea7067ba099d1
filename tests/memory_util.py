"""Checks shared by the buffer assignment and aliasing tests: an independent liveness
check of an assignment, and an executor that runs the schedule on memory laid out as
assigned (any two values that wrongly share bytes corrupt the result)."""
import numpy as np

from xlac.hlo import Opcode
from xlac.hlo.evaluator import evaluate_instruction
from xlac.optimizer import BufferLocation, MemoryModel, check_order, simulate_peak
from xlac.optimizer.aliasing import (buffer_size, buffers_of, owns_buffer, tuple_element_offset,
                                    view_offset)


def live_intervals(m, order):
    """Independent liveness: [def, last reader] in schedule positions, readers of views
    included; outputs not in output buffers live to the end."""
    pos = {i: t for t, i in enumerate(order)}
    ranges = {}
    for t, i in enumerate(order):
        for o in i.operands:
            for owner in buffers_of(o):
                lo, hi = ranges.get(owner, (pos[owner], pos[owner]))
                ranges[owner] = (lo, max(hi, t))
    for owner in (o for out in m.output_instructions for o in buffers_of(out)):
        ranges[owner] = (ranges.get(owner, (pos[owner],))[0], len(order))
    return ranges


def slot_containers(ba):
    """Owner -> the concatenation it was written into (its location is its slice)."""
    out = {}
    for c in ba.concats_in_place:
        loc, offset = ba.location(c), 0
        for o in c.operands:
            if ba.location(o) == BufferLocation(loc.space, loc.index, loc.offset + offset):
                out[o] = c
            offset += o.shape.byte_size
    return out


def check_assignment(m, ba, scratch_of=lambda i: 0):
    """No two owners share bytes while both are live, except by the aliasing rules:
    a producer inside its concatenation's slice, and an in-place write over an
    operand whose last reader it is."""
    order = ba.order
    check_order(m, order)
    pos = {i: t for t, i in enumerate(order)}
    intervals = live_intervals(m, order)
    containers = slot_containers(ba)
    slots = {ba.location(o) for o in containers}        # may sit at any element offset

    def group(i):                    # i and the concatenations holding it
        chain = [i]
        while chain[-1] in containers:
            chain.append(containers[chain[-1]])
        return chain

    boxes = []                     # (first step, last step, first byte, end byte, owner)
    for i in order:
        loc = ba.location(i)
        size = buffer_size(i.shape, ba.alignment)     # tuple elements each aligned
        if loc.space == "arena":
            assert loc.offset + size <= ba.arena_size
            if owns_buffer(i) and size:
                if loc not in slots:
                    assert loc.offset % ba.alignment == 0
                lo, hi = intervals.get(i, (pos[i], pos[i]))
                boxes.append((lo, hi, loc.offset, loc.offset + size, i))
        off = view_offset(i)
        if off is not None:
            base = ba.location(i.operands[0])
            assert loc == BufferLocation(base.space, base.index, base.offset + off)
    for i, loc in ba.scratch.items():
        t = pos[i]
        assert loc.offset % ba.alignment == 0
        boxes.append((t, t, loc.offset, loc.offset + scratch_of(i), None))
    for n, (a0, a1, b0, b1, x) in enumerate(boxes):
        for c0, c1, d0, d1, y in boxes[:n]:
            if not (a0 <= c1 and c0 <= a1 and b0 < d1 and d0 < b1):
                continue
            if x is not None and y is not None:
                if x in group(y) or y in group(x):
                    continue
                # In place: the writer starts where every owner of the victim's group ends.
                if (x in ba.in_place and ba.in_place[x] in group(y) and c1 == a0 == pos[x]) or \
                        (y in ba.in_place and ba.in_place[y] in group(x) and a1 == c0 == pos[y]):
                    continue
            raise AssertionError(f"overlapping buffers {x} and {y}")
    # The arena is what the assignment uses, no more: the highest byte of any arena
    # value or scratch, aligned.
    top = max((d1 for _, _, _, d1, _ in boxes), default=0)
    assert ba.arena_size == -(-top // ba.alignment) * ba.alignment
    assert ba.lower_bound <= ba.arena_size
    assert ba.lower_bound <= ba.naive_bytes
    assert ba.lower_bound == simulate_peak(MemoryModel(m, ba.alignment, scratch_of), order)


def run_on_assigned_memory(m, ba, args, scratch_of=lambda i: 0):
    """Execute ``ba.order`` with every value stored where ``ba`` says; return the outputs."""
    arena = np.zeros(ba.arena_size, np.uint8)
    outs = [np.zeros(o.shape.byte_size, np.uint8) for o in m.output_instructions]
    ins = [np.ascontiguousarray(a).view(np.uint8).reshape(-1) for a in args]

    def memory(instr, offset=0, size=None):
        loc = ba.location(instr)
        space = {"arena": arena, "input": ins[loc.index] if loc.space == "input" else None,
                 "output": outs[loc.index] if loc.space == "output" else None}[loc.space]
        start = loc.offset + offset
        return space[start:start + (instr.shape.byte_size if size is None else size)]

    def store(instr, value):
        # a tuple-shaped owner (a variadic reduce, a sort) holds its elements in turn
        shapes = instr.shape.tuple_shapes if instr.shape.is_tuple else (instr.shape,)
        values = value if instr.shape.is_tuple else (value,)
        for k, (s, v) in enumerate(zip(shapes, values)):
            at = tuple_element_offset(instr.shape, k, ba.alignment) if instr.shape.is_tuple \
                else 0
            memory(instr, at, s.byte_size)[:] = \
                np.ascontiguousarray(v, s.dtype.np).view(np.uint8).reshape(-1)

    def read(instr):
        if instr.opcode is Opcode.CONSTANT:
            return instr.literal
        return memory(instr).view(instr.shape.dtype.np).reshape(instr.shape.dims)

    for i in ba.order:
        if i.opcode in (Opcode.PARAMETER, Opcode.CONSTANT, Opcode.TUPLE,
                        Opcode.GET_TUPLE_ELEMENT) or view_offset(i) is not None:
            continue
        if i in ba.scratch:                           # the kernel scribbles on its scratch
            off = ba.scratch[i].offset
            arena[off:off + scratch_of(i)] = 0xA5
        store(i, evaluate_instruction(i, [read(o) for o in i.operands]))
    return [read(o).copy() for o in m.output_instructions]


def args_for(m, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape.dims).astype(np.float32) for p in m.entry.parameters]


