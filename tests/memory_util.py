"""Checks shared by the buffer assignment and aliasing tests: an independent liveness
check of an assignment, and an executor that runs the schedule on memory laid out as
assigned (any two values that wrongly share bytes corrupt the result)."""
import numpy as np

from xlac.hlo import Opcode
from xlac.hlo.evaluator import evaluate_instruction
from xlac.optimizer import BufferLocation, MemoryModel, check_order, simulate_peak
from xlac.optimizer.aliasing import (buffer_size, buffers_of, owns_buffer, tuple_element_offset,
                                    view_offset)


def live_intervals(m, order, comp=None):
    """Independent liveness: [def, last reader] in schedule positions, readers of views
    included; outputs not in output buffers live to the end."""
    comp = comp or m.entry
    pos = {i: t for t, i in enumerate(order)}
    ranges = {}
    for t, i in enumerate(order):
        for o in i.operands:
            for owner in buffers_of(o):
                lo, hi = ranges.get(owner, (pos[owner], pos[owner]))
                ranges[owner] = (lo, max(hi, t))
    for owner in (o for out in comp.outputs for o in buffers_of(out) if o in pos):
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


def check_assignment(m, ba, scratch_of=lambda i: 0, computation=None):
    """No two owners share bytes while both are live, except by the aliasing rules:
    a producer inside its concatenation's slice, and an in-place write over an
    operand whose last reader it is. ``computation``: check that callee's assignment
    (``callee_assignment``) instead of the entry's; a while's or conditional's scratch
    is its callees' arena."""
    comp = computation or m.entry
    scratch_of = with_callee_arenas(ba, scratch_of)
    order = ba.order
    check_order(m, order, comp)
    pos = {i: t for t, i in enumerate(order)}
    intervals = live_intervals(m, order, comp)
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
        if i not in pos:                  # a callee's: checked with its own assignment
            continue
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
    assert ba.lower_bound == simulate_peak(
        MemoryModel(m, ba.alignment, scratch_of, computation=comp), order)


def with_callee_arenas(ba, scratch_of):
    """The scratch of a while's or conditional's step: its callees' largest arena."""
    sizes = {}
    for comp, sub in ba.computations.items():
        for i in ba.scratch:
            if comp in i.called:
                sizes[i] = max(sizes.get(i, 0), sub.arena_size)
    return lambda i: sizes[i] if i in sizes else scratch_of(i)


def callee_assignment(m, ba, comp):
    """A callee's assignment with its arena offsets relative to its own arena (where
    its caller's scratch starts), as it was planned."""
    import copy
    from xlac.optimizer.control_flow import caller_of
    caller = caller_of(m, comp)
    base = ba.scratch[caller].offset if caller in ba.scratch else 0
    sub = copy.copy(ba.computations[comp])

    def moved(loc):
        return loc if loc.space != "arena" else BufferLocation("arena", 0, loc.offset - base)
    sub.locations = {i: moved(loc) for i, loc in sub.locations.items()}
    sub.scratch = {i: moved(loc) for i, loc in sub.scratch.items()}
    nested = {c: s for c, s in ba.computations.items() if caller_of(m, c) in sub.order}
    sub.computations = nested
    return sub


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




# --- control flow ------------------------------------------------------------------

def run_with_control_flow(m, ba, args, scratch_of=lambda i: 0):
    """``run_on_assigned_memory`` for modules with whiles and conditionals: every value
    of the entry and of each callee is stored where ``ba`` says (a callee's parameter
    elements and outputs where its caller's operand and result elements are); loops and
    branches run their callees' orders. Returns the outputs."""
    from xlac.optimizer.aliasing import parameter_leaf, tuple_element_offset
    arena = np.zeros(ba.arena_size, np.uint8)
    outs = [np.zeros(o.shape.byte_size, np.uint8) for o in m.output_instructions]
    ins = [np.ascontiguousarray(a).view(np.uint8).reshape(-1) for a in args]
    places = {}                        # instruction -> (space, index, offset) or a tuple of them

    def owned(instr, frame):
        loc = ba.location(instr)
        if loc.space == "arena":
            return ("arena", 0, loc.offset)
        space, index, offset = (frame[0] if loc.space == "input" else frame[1])[loc.index]
        return (space, index, offset + loc.offset)

    def resolve(i, frame):
        if i.opcode is Opcode.PARAMETER:
            p = frame[0] if i.shape.is_tuple else frame[0][i.number]
        elif parameter_leaf(i):
            p = frame[0][i.attrs["index"]]
        elif i.opcode is Opcode.CONSTANT:
            p = ("constant", i, 0)
        elif i.opcode is Opcode.TUPLE:
            p = tuple(places[o] for o in i.operands)
        elif i.opcode is Opcode.WHILE:
            p = places[i.operands[0]]
        elif i.opcode is Opcode.GET_TUPLE_ELEMENT:
            p = places[i.operands[0]][i.attrs["index"]]
        elif view_offset(i) is not None:
            space, index, offset = places[i.operands[0]]
            p = (space, index, offset + view_offset(i))
        else:
            base = owned(i, frame)
            p = base if not i.shape.is_tuple else tuple(
                (base[0], base[1], base[2] + tuple_element_offset(i.shape, k, ba.alignment))
                for k in range(len(i.shape.tuple_shapes)))
        places[i] = p

    def memory(place, nbytes):
        space, index, offset = place
        if space == "constant":
            return np.ascontiguousarray(index.literal).view(np.uint8).reshape(-1)
        buf = {"arena": arena, "input": ins[index] if space == "input" else None,
               "output": outs[index] if space == "output" else None}[space]
        return buf[offset:offset + nbytes]

    def read_place(place, shape):
        if isinstance(place, tuple) and isinstance(place[0], tuple):
            return tuple(read_place(p, s) for p, s in zip(place, shape.tuple_shapes))
        return memory(place, shape.byte_size).view(shape.dtype.np).reshape(shape.dims).copy()

    def write_place(place, shape, value):
        if shape.is_tuple:
            for p, s, v in zip(place, shape.tuple_shapes, value):
                write_place(p, s, v)
            return
        raw = np.ascontiguousarray(value, shape.dtype.np).view(np.uint8).reshape(-1)
        memory(place, shape.byte_size)[:] = raw

    def leaves(i):
        p = places[i]
        return p if isinstance(p[0], tuple) else (p,)

    def run(comp, order, frame):
        for i in order:
            resolve(i, frame)
            if i.opcode in (Opcode.PARAMETER, Opcode.CONSTANT, Opcode.TUPLE,
                            Opcode.GET_TUPLE_ELEMENT) or parameter_leaf(i) \
                    or view_offset(i) is not None:
                continue
            if i.opcode is Opcode.WHILE:
                cond, body = i.called
                state = leaves(i)
                while True:
                    run(cond, ba.computations[cond].order, (state, None))
                    if not read_place(places[cond.root], cond.root.shape):
                        break
                    run(body, ba.computations[body].order, (state, state))
                continue
            if i.opcode is Opcode.CONDITIONAL:
                index = int(read_place(places[i.operands[0]], i.operands[0].shape))
                n = len(i.called)
                k = (0 if index else 1) if i.operands[0].shape.dtype.is_pred else \
                    (index if 0 <= index < n else n - 1)
                branch = i.called[k]
                run(branch, ba.computations[branch].order,
                    (leaves(i.operands[k + 1]), leaves(i)))
                continue
            if i in ba.scratch:                       # the kernel scribbles on its scratch
                off = ba.scratch[i].offset
                arena[off:off + scratch_of(i)] = 0xA5
            value = evaluate_instruction(i, [read_place(places[o], o.shape) for o in i.operands])
            write_place(places[i], i.shape, value)
        if frame[1] is not None:
            for out, target in zip(comp.outputs, frame[1]):
                if places[out] != target:
                    write_place(target, out.shape, read_place(places[out], out.shape))

    entry = (tuple(("input", k, 0) for k in range(len(args))),
             tuple(("output", k, 0) for k in range(len(outs))))
    run(m.entry, ba.order, entry)
    return [memory(("output", k, 0), o.shape.byte_size).view(o.shape.dtype.np)
            .reshape(o.shape.dims).copy() for k, o in enumerate(m.output_instructions)]
