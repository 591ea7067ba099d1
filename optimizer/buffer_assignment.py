"""Buffer assignment: where every value of the entry computation, and of the
computations its whiles and conditionals call, lives.

Contract with the emitter (xlac.emitter):
  - ``BufferAssignment.order`` is the schedule: every entry instruction once,
    operands before users. The emitter emits code in this order.
  - ``computations[c]`` is the assignment of a computation a while or conditional
    calls (control_flow.py makes each called from one site): its ``order`` is the
    code of the loop condition, loop body or branch. Its values are located in the
    same dictionaries as the entry's (``location``, ``scratch``, ``in_place``...),
    arena offsets included: a callee's arena is the scratch of its caller's step
    (``scratch[caller]``), so its bytes may overlap any buffer not live across that
    step. Inside a callee, 'input' k is element k of its parameter (where the caller's
    operand element lies) and 'output' k the place of its output k: element k of the
    loop state for a body (where the init's element k lies: the state is updated
    there, see aliasing.py), element k of the conditional's result for a branch. A
    body or branch output located elsewhere is copied there at the end of the body
    or branch; a condition's result is read where it is.
  - ``location(instr)`` says where an array value lives:
      space 'input'    -> inputs[index] + offset   (entry parameters)
      space 'output'   -> outputs[index] + offset  (written straight into the caller's buffer)
      space 'arena'    -> arena + offset
      space 'constant' -> the read-only global the emitter makes for that constant
      space 'none'     -> no storage (tuples)
    Views (reshape, bitcast, a contiguous slice) are located in their operand's
    bytes at ``aliasing.view_offset``; a get-tuple-element of a tuple instruction is
    located where that element is; of a tuple-shaped op (a multi-output reduce),
    which owns one buffer holding its elements in order, each at a multiple of
    ``alignment``, it is located at the op's offset plus
    ``aliasing.tuple_element_offset(shape, index, alignment)``.
  - A concatenation in ``concats_in_place`` emits no loop: the producers of its
    operands computed into their slices of it; the emitter copies in only the
    operands located elsewhere.
  - An instruction in ``in_place`` is located where the operand owner it maps to
    was: it overwrites it (element-wise, so each element is read before it is
    written).
  - Model output k is ``module.output_instructions[k]``; if its location is not
    ('output', k, 0) the emitter copies it there at the end (a parameter or a
    constant returned directly, or one value returned twice).
  - ``scratch[instr]`` (arena) is temporary memory for that instruction's kernel,
    valid only while it runs, for the instructions the ``scratch`` callback asked for;
    kernels in ``lean_kernels`` are emitted as their variant with the least scratch.
  - Arena buffers whose lifetimes overlap never share bytes, except by the rules
    above: a buffer is live from its defining instruction to its last reader
    (readers of its views included), so a result never overlaps its operands
    unless it overwrites one in place. Every arena offset of an owner that is not
    in a concatenation's slice is a multiple of ``alignment``.
  - ``blocks`` lists the arena over the schedule for reports (where memory goes):
    every arena buffer and kernel scratch with its bytes and live steps.
  - ``slice(instr)`` is where ``instr``'s bytes are, resolved all the way (a
    ``BufferSlice``; a tuple of them for a tuple-shaped value, one per element): views
    and tuple elements followed to their buffer, a callee's parameter elements and
    outputs to its caller's operands and results. Backends read locations from it
    and derive none of their own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..hlo import Computation, Instruction, Module, Opcode, XlacError
from ..hlo.opcodes import CONTROL_FLOW
from .aliasing import align_up, element_source, parameter_leaf, tuple_element_offset, view_offset
from .control_flow import ControlFlowPreparation, caller_of, planned_computations
from .heap_simulator import PACKING_ORDERS, BestFitHeap, HeapResult, PeakHeap, simulate
from .memory_model import MemoryModel, Scratch, ScratchFn
from .packing import improve_packing
from .scheduling import check_order

__all__ = ["ArenaBlock", "BufferLocation", "BufferAssignment", "BufferSlice", "assign_buffers"]


@dataclass(frozen=True)
class BufferLocation:
    space: str        # 'input' | 'output' | 'arena' | 'constant' | 'none'
    index: int = 0    # input / output number
    offset: int = 0   # bytes: into the arena, or into the input / output buffer


@dataclass(frozen=True)
class BufferSlice:
    """``size`` bytes at ``offset`` into the arena, into the caller's input or output
    ``index``, or into the global of ``constant`` (XLA's BufferAllocation::Slice)."""
    space: str                          # 'arena' | 'input' | 'output' | 'constant'
    index: int = 0
    offset: int = 0
    size: int = 0
    constant: Instruction | None = None

    @property
    def start(self) -> tuple:
        """Where the bytes begin: equal starts are the same bytes."""
        return self.space, self.index, self.offset, self.constant

    def at(self, offset: int, size: int) -> "BufferSlice":
        """``size`` bytes ``offset`` bytes into this slice."""
        return BufferSlice(self.space, self.index, self.offset + offset, size, self.constant)

    def overlaps(self, size: int, other: "BufferSlice", other_size: int) -> bool:
        """Whether ``size`` bytes from here and ``other_size`` from ``other`` share one
        (constants never change, so they never conflict)."""
        if self.space == "constant" or (self.space, self.index) != (other.space, other.index):
            return False
        return self.offset < other.offset + other_size and other.offset < self.offset + size

    def __str__(self) -> str:
        where = f"%{self.constant.name}" if self.space == "constant" else (
            "arena" if self.space == "arena" else f"{self.space}{self.index}")
        return f"{where}[{self.offset}:+{self.size}]"


@dataclass(frozen=True)
class ArenaBlock:
    """Bytes of the arena held over steps ``start`` .. ``end`` of the order (both
    included; ``end`` is len(order) for a value copied into an output at the end)."""
    owners: tuple[Instruction, ...]   # the instructions writing it: one, or a concatenation
                                      # and the producers computed into its slices
    offset: int
    size: int
    start: int
    end: int
    scratch: bool = False             # a kernel's temporary memory (owners: that kernel)
    overwrites: Instruction | None = None   # written in place over this owner's bytes


@dataclass
class BufferAssignment:
    order: list[Instruction]
    locations: dict[Instruction, BufferLocation]
    arena_size: int
    alignment: int
    naive_bytes: int = 0          # sum of all arena-resident buffers, no reuse
    lower_bound: int = 0          # max bytes live at once for ``order``
    stats: dict = field(default_factory=dict)
    scratch: dict[Instruction, BufferLocation] = field(default_factory=dict)
    # Concatenations whose operands' producers wrote straight into their slices:
    # the emitter copies in only the operands that live elsewhere.
    concats_in_place: set[Instruction] = field(default_factory=set)
    in_place: dict[Instruction, Instruction] = field(default_factory=dict)   # -> overwritten owner
    # Kernels to emit as their variant with the least scratch (memory_plan.py): their
    # ``scratch`` slots are sized for it.
    lean_kernels: set[Instruction] = field(default_factory=set)
    blocks: list[ArenaBlock] = field(default_factory=list)
    # The assignments of the computations whiles and conditionals call.
    computations: dict[Computation, "BufferAssignment"] = field(default_factory=dict)
    # Every value's bytes, resolved (``resolve_slices``): the entry's and its callees'.
    slices: dict[Instruction, "BufferSlice | tuple"] = field(default_factory=dict)

    def location(self, instr: Instruction) -> BufferLocation:
        return self.locations[instr]

    def is_view(self, instr: Instruction) -> bool:
        """Whether ``instr`` is a view of its operand's bytes (reshape, bitcast, a
        contiguous slice): no code computes it."""
        return view_offset(instr) is not None

    def slice(self, instr: Instruction) -> "BufferSlice | tuple":
        """Where the value of ``instr`` is: a BufferSlice, or one per element of a tuple."""
        return self.slices[instr]

    def leaves(self, instr: Instruction) -> tuple:
        """The slices of the arrays ``instr``'s value consists of."""
        s = self.slices[instr]
        return s if isinstance(s, tuple) else (s,)

    def base(self, instr: Instruction) -> BufferSlice:
        """Where the bytes of an array value, or of a tuple-shaped op's buffer, start."""
        s = self.slices[instr]
        return s[0] if isinstance(s, tuple) else s

    def scratch_slice(self, instr: Instruction, size: int) -> BufferSlice:
        """The kernel scratch of ``instr`` (``size`` bytes: what the kernel asked for)."""
        loc = self.scratch[instr]
        return BufferSlice(loc.space, loc.index, loc.offset, size)


# Plans one computation: (computation, scratch callback, lean scratch callback) -> its
# assignment, arena offsets relative to its own arena.
ComputationPlanner = Callable[[Computation, ScratchFn | None, ScratchFn | None],
                              BufferAssignment]


def assign_buffers(module: Module, order: list[Instruction] | None = None,
                   alignment: int = 64, scratch: ScratchFn | None = None,
                   model: MemoryModel | None = None) -> BufferAssignment:
    """Place every value of ``order`` (default: the entry's order) and pack the arena;
    the computations whiles and conditionals call are placed in their own order
    (``plan_module``).

    The arena is packed by global best fit under each of ``PACKING_ORDERS``; the
    smallest is kept, then improved by local search (packing.py) until it equals
    the peak of live bytes or stops improving (``stats['packing']`` names the
    winner). ``model`` (built for ``alignment`` and ``scratch``) may be passed in
    when the caller already has it.
    """
    if model is not None or not _has_control_flow(module):
        assignment = assign_computation(module, module.entry, order, alignment, scratch, model)
        resolve_slices(module, assignment)
        return assignment

    def plan(comp, scratch_of, _lean):
        given = _with_inserted(comp, order) if comp is module.entry and order else None
        return assign_computation(module, comp, given, alignment, scratch_of)
    return plan_module(module, alignment, scratch, None, plan)


def _with_inserted(comp: Computation, order: list[Instruction]) -> list[Instruction]:
    """``order`` (made before ControlFlowPreparation) with the copies it inserted, each
    just before its first user."""
    known, members = set(order), set(comp.instructions)
    added = [i for i in comp.instructions if i not in known]
    if not added and known <= members:
        return order
    out: list[Instruction] = []
    placed: set[Instruction] = set()

    def place(i: Instruction) -> None:
        if i in placed:
            return
        for o in i.operands:
            place(o)
        placed.add(i)
        out.append(i)
    for i in order:
        if i in members:
            place(i)
    for i in added:
        place(i)
    return out


def _has_control_flow(module: Module) -> bool:
    return any(i.opcode in CONTROL_FLOW for i in module.entry.instructions)


def plan_module(module: Module, alignment: int, scratch: ScratchFn | None,
                lean_scratch: ScratchFn | None, plan: ComputationPlanner) -> BufferAssignment:
    """Plan the entry and its control-flow callees with ``plan``, callees first: a while
    or conditional needs, as the scratch of its step, the largest arena of the
    computations it calls (they never run at once). Then every callee's arena offsets
    are moved to where its caller's scratch landed. Runs ControlFlowPreparation first."""
    if _has_control_flow(module):
        ControlFlowPreparation().run(module)
    own: dict[Instruction, int] = {}               # control-flow step -> callee arena bytes

    def with_callees(fn: ScratchFn | None) -> ScratchFn | None:
        if fn is None and not own:
            return None
        return lambda i: own[i] if i in own else (fn(i) if fn else 0)

    plans: dict[Computation, BufferAssignment] = {}
    for comp in planned_computations(module):          # callees first
        plans[comp] = plan(comp, with_callees(scratch), with_callees(lean_scratch))
        if comp is not module.entry:
            caller = caller_of(module, comp)
            own[caller] = max(own.get(caller, 0), plans[comp].arena_size)
    top = plans.pop(module.entry)
    for comp in reversed(planned_computations(module)):   # callers first: bases known
        if comp is module.entry:
            continue
        sub = plans[comp]
        caller = caller_of(module, comp)
        base = top.scratch[caller].offset if caller in top.scratch else 0
        sub.locations = {i: _moved(loc, base) for i, loc in sub.locations.items()}
        sub.scratch = {i: _moved(loc, base) for i, loc in sub.scratch.items()}
        top.locations.update(sub.locations)
        top.scratch.update(sub.scratch)
        top.in_place.update(sub.in_place)
        top.concats_in_place |= sub.concats_in_place
        top.lean_kernels |= sub.lean_kernels
        top.computations[comp] = sub
    resolve_slices(module, top)
    return top


def _moved(loc: BufferLocation, base: int) -> BufferLocation:
    if loc.space != "arena":
        return loc
    return BufferLocation("arena", 0, loc.offset + base)


def assign_computation(module: Module, comp: Computation,
                       order: list[Instruction] | None = None, alignment: int = 64,
                       scratch: ScratchFn | None = None,
                       model: MemoryModel | None = None) -> BufferAssignment:
    """``assign_buffers`` for one computation, its arena offsets relative to its own
    arena; control-flow steps need their callees' arena as scratch (``plan_module``)."""
    order = list(order if order is not None else comp.instructions)
    check_order(module, order, comp)
    model = model or MemoryModel(module, alignment, scratch, computation=comp)
    sim = model.events(order)
    lower_bound = simulate(sim.events, PeakHeap()).size
    packings = {name: simulate(sim.events, BestFitHeap(alignment, key))
                for name, key in PACKING_ORDERS.items()}
    best = min(packings, key=lambda name: packings[name].size)
    heap: HeapResult = packings[best]
    if align_up(lower_bound, alignment) < heap.size:
        improved = improve_packing(sim.events, alignment, PACKING_ORDERS[best], lower_bound)
        if improved.size < heap.size:
            heap, best = improved, f"{best}+local-search"

    locs: dict[Instruction, BufferLocation] = {}
    for i in order:
        locs[i] = _location(i, locs, model, sim.storage, heap.offsets, alignment)
    scratch_locs = {key.instr: BufferLocation("arena", 0, off)
                    for key, off in heap.offsets.items() if isinstance(key, Scratch)}
    stats = {"packing": best, **{f"arena_{name}": r.size for name, r in packings.items()},
             "views": sum(1 for i in order if view_offset(i) is not None),
             "concat_slots": len(model.concat_slots), "in_place": len(sim.in_place)}
    naive = sum(b.size for b in model.arena) + sum(model.scratch.values())
    concats = {c for c, _ in model.concat_slots.values()}
    return BufferAssignment(order, locs, heap.size, alignment, naive_bytes=naive,
                            lower_bound=lower_bound, stats=stats, scratch=scratch_locs,
                            concats_in_place=concats, in_place=dict(sim.in_place),
                            blocks=_blocks(order, model, sim, heap.offsets))


def _blocks(order, model: MemoryModel, sim, offsets: dict) -> list[ArenaBlock]:
    """The arena over the schedule: each arena buffer at its storage's offset (an
    in-place result at the bytes it overwrites), then each kernel's scratch."""
    pos = {i: t for t, i in enumerate(order)}
    blocks = []
    for b in model.arena:
        start, end = sim.ranges[b]
        storage = sim.storage[b]
        blocks.append(ArenaBlock(tuple(b.definers), offsets[storage], b.size, start, end,
                                 overwrites=sim.in_place.get(b.root)))
    for key, offset in offsets.items():
        if isinstance(key, Scratch):
            t = pos[key.instr]
            blocks.append(ArenaBlock((key.instr,), offset, model.scratch[key.instr], t, t,
                                     scratch=True))
    return sorted(blocks, key=lambda k: (k.start, k.scratch, k.offset))


def _location(i: Instruction, locs: dict[Instruction, BufferLocation], model: MemoryModel,
              storage: dict, offsets: dict, alignment: int) -> BufferLocation:
    if i.opcode is Opcode.PARAMETER:
        return BufferLocation("none") if i.shape.is_tuple else BufferLocation("input", i.number)
    if parameter_leaf(i):
        return BufferLocation("input", i.attrs["index"])
    if i.opcode is Opcode.CONSTANT:
        return BufferLocation("constant")
    if i.opcode in (Opcode.TUPLE, Opcode.WHILE):
        return BufferLocation("none")
    view = view_offset(i)
    if view is not None:
        base = locs[i.operands[0]]
        return BufferLocation(base.space, base.index, base.offset + view)
    if i.opcode is Opcode.GET_TUPLE_ELEMENT:
        t, k = i.operands[0], i.attrs["index"]
        src = element_source(t, k)
        if src is not None:
            return locs[src]
        base = locs[t]
        return BufferLocation(base.space, base.index,
                              base.offset + tuple_element_offset(t.shape, k, alignment))
    buf, off = model.placement[i]
    if buf.output is not None:
        return BufferLocation("output", buf.output, off)
    # Zero-byte buffers take no part in packing; any offset will do.
    return BufferLocation("arena", 0, offsets.get(storage.get(buf, buf), 0) + off)


@dataclass(frozen=True)
class _Frame:
    """Where a computation's parameter elements and outputs are: for the entry the
    caller's buffers; for a loop condition or body the loop state's elements
    (``outputs`` None for the condition, whose result is read where it is); for a
    branch its operand's elements and the conditional's result's."""
    inputs: tuple
    outputs: tuple | None


def resolve_slices(module: Module, assignment: BufferAssignment) -> None:
    """Fill ``assignment.slices``: every value of the entry and of the computations its
    whiles and conditionals call, following views, tuple elements and, into a callee,
    its frame."""
    slices = assignment.slices
    slices.clear()

    def owned(instr: Instruction, frame: _Frame) -> BufferSlice:
        loc = assignment.location(instr)
        size = instr.shape.byte_size
        if loc.space == "arena":
            return BufferSlice("arena", 0, loc.offset, size)
        if loc.space in ("input", "output"):
            ports = frame.inputs if loc.space == "input" else frame.outputs
            return ports[loc.index].at(loc.offset, size)
        raise XlacError(f"%{instr.name}: buffer assignment placed a computed value in "
                        f"'{loc.space}'")

    def resolve(instr: Instruction, frame: _Frame) -> BufferSlice | tuple:
        op = instr.opcode
        if op is Opcode.PARAMETER:
            return frame.inputs if instr.shape.is_tuple else frame.inputs[instr.number]
        if parameter_leaf(instr):
            return frame.inputs[instr.attrs["index"]]
        if op is Opcode.CONSTANT:
            return BufferSlice("constant", 0, 0, instr.shape.byte_size, instr)
        if op is Opcode.TUPLE:
            return tuple(slices[o] for o in instr.operands)
        if op is Opcode.WHILE:          # the state lives where the init's elements do
            return slices[instr.operands[0]]
        if op is Opcode.GET_TUPLE_ELEMENT:
            return slices[instr.operands[0]][instr.attrs["index"]]
        view = view_offset(instr)
        if view is not None:            # reshape, bitcast, contiguous slice
            return slices[instr.operands[0]].at(view, instr.shape.byte_size)
        base = owned(instr, frame)
        if not instr.shape.is_tuple:
            return base
        return tuple(base.at(tuple_element_offset(instr.shape, k, assignment.alignment),
                             leaf.byte_size)
                     for k, leaf in enumerate(instr.shape.tuple_shapes))

    def walk(comp: Computation, order: list[Instruction], frame: _Frame) -> None:
        for instr in order:
            slices[instr] = resolve(instr, frame)
            if instr.opcode is Opcode.WHILE:
                cond, body = instr.called
                state = _leaves(slices[instr])
                walk(cond, assignment.computations[cond].order, _Frame(state, None))
                walk(body, assignment.computations[body].order, _Frame(state, state))
            elif instr.opcode is Opcode.CONDITIONAL:
                results = _leaves(slices[instr])
                for k, branch in enumerate(instr.called):
                    walk(branch, assignment.computations[branch].order,
                         _Frame(_leaves(slices[instr.operands[k + 1]]), results))

    entry = _Frame(tuple(BufferSlice("input", k, 0, p.shape.byte_size)
                         for k, p in enumerate(module.entry.parameters)),
                   tuple(BufferSlice("output", k, 0, o.shape.byte_size)
                         for k, o in enumerate(module.output_instructions)))
    walk(module.entry, assignment.order, entry)


def _leaves(s: BufferSlice | tuple) -> tuple:
    return s if isinstance(s, tuple) else (s,)
