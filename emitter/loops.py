"""The loop emitter: one internal function per elemental instruction (a fusion or an
unfused element-wise, movement, reduce, reduce-window, gather or iota op) or
dynamic-update-slice.

    void op(ptr out, ptr operand_a, ptr operand_b, ...)

loops over the output shape, most major dimension outermost, so the innermost loop
walks memory with unit stride and LLVM vectorizes it; each output element is the
element generator's value at that index. Pointer arguments are ``noalias`` where the
caller says the buffer assignment keeps them apart, which is what lets LLVM vectorize
without run-time overlap checks. Constant operands are not passed: the generator
reads them from their globals (or folds them as immediates).
"""
from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Callable, Sequence

from llvmlite import ir

from ..hlo import Instruction, Opcode, Shape, XlacError
from ..hlo.fusion import is_loop_fusion
from .elemental import ElementalEmitter, Generator, clamped_starts, window_interior
from .indexing import linearize
from .irutil import I64, PTR, VOID, for_range, gep_bytes, gep_elem, llvm_type
from .pooling import plan_pool_rows


def access_align(offset: int, base_align: int, itemsize: int) -> int:
    """Alignment of element accesses through a pointer ``offset`` bytes past a base aligned
    to ``base_align``: the element size when that holds, else the largest power of two
    dividing both."""
    align = base_align
    while align > 1 and offset % align:
        align //= 2
    return min(align, itemsize)


@dataclass(frozen=True)
class PointerArg:
    """How the function may treat one pointer: ``align`` of its base for element accesses,
    ``noalias`` if no other pointer of the call touches the bytes it writes or reads,
    ``is_output`` for an operand the result overwrites in place: it is read through the
    output pointer, so LLVM sees element j read before it is written and still vectorizes."""
    align: int
    noalias: bool
    is_output: bool = False


def buffer_reader(b: ir.IRBuilder, ptr: ir.Value, shape: Shape, align: int) -> Generator:
    ty = llvm_type(shape.dtype)
    align = min(align, shape.dtype.itemsize)

    def read(index):
        return b.load(gep_elem(b, ptr, ty, linearize(b, index, shape.dims, shape.layout)),
                      typ=ty, align=align)
    return read


def emit_loop_nest(b: ir.IRBuilder, shape: Shape, body: Callable[[list], None],
                   bounds: dict | None = None, cuts: Sequence[int] = (),
                   on_range: Callable[[int, int], None] | None = None) -> None:
    """``body(index)`` inside loops over ``shape``, most major dimension outermost;
    ``bounds`` maps a dimension to the (start, end) i64 values its loop runs over
    instead of its whole extent; ``cuts`` (without bounds on the minor dimension) split
    the innermost loop into one loop per range between them, each with its own body,
    ``on_range(lo, hi)`` called before each is emitted."""
    index: list = [None] * shape.rank
    bounds = bounds or {}
    order = list(reversed(shape.layout))
    with ExitStack() as loops:
        for d in order[:-1]:
            start, end = bounds.get(d, (0, shape.dims[d]))
            index[d] = loops.enter_context(for_range(b, end, f"i{d}", start=start))
        if not order:
            body(index)
            return
        d = order[-1]
        start, end = bounds.get(d, (0, shape.dims[d]))
        points = [start, *cuts, end] if d not in bounds else [start, end]
        for lo, hi in zip(points, points[1:]):
            if on_range is not None and d not in bounds:
                on_range(lo, hi)
            with for_range(b, hi, f"i{d}", start=lo) as i:
                index[d] = i
                body(list(index))


def concatenation_cuts(instr: Instruction) -> list[int]:
    """Where a concatenation that ``instr`` computes (itself, or inside a loop fusion) along
    the minor dimension of ``instr``'s result switches operands, when it has the result's
    dimensions: split there, each innermost loop reads one operand, so the branch that
    picks it folds away and the loop vectorizes (a quantized U-Net's requantizing
    concatenation, channels minor, of an upsampled map and a skip connection)."""
    shape = instr.shape
    if shape.is_tuple or shape.rank == 0:
        return []
    body = _loop_fusion_body(instr)
    candidates = body.instructions if body is not None else [instr]
    minor = shape.layout[0]
    cuts: set[int] = set()
    for c in candidates:
        if (c.opcode is Opcode.CONCATENATE and c.shape.dims == shape.dims
                and c.attrs["dimension"] == minor):
            offset = 0
            for o in c.operands[:-1]:
                offset += o.shape.dims[minor]
                cuts.add(offset)
    return sorted(cut for cut in cuts if 0 < cut < shape.dims[minor])


def window_root(instr: Instruction) -> Instruction | None:
    """The reduce-window whose output index is the loop's index: ``instr`` itself, the
    root of its loop fusion or what that root divides (average pooling; None if none)."""
    body = _loop_fusion_body(instr)
    root = body.root if body is not None else instr
    if root.opcode is Opcode.DIVIDE and body is not None:
        root = root.operands[0]
    return root if root.opcode is Opcode.REDUCE_WINDOW else None


def _loop_fusion_body(instr: Instruction):
    """The computation a loop fusion calls, else None."""
    if is_loop_fusion(instr):
        return instr.called[0]
    return None


def window_cuts(instr: Instruction) -> list[int]:
    """Where the innermost loop splits into border and interior for a reduce-window
    ``window_root``: the interior's window never leaves the operand, so its code has no
    bounds checks (elemental.py's unrolled reduce-window) and vectorizes."""
    rw = window_root(instr)
    if rw is None or instr.shape.is_tuple and rw is not instr or rw.shape.leaves()[0].rank == 0:
        return []
    minor = rw.shape.leaves()[0].layout[0]
    lo, hi = window_interior(rw, minor)
    extent = rw.shape.leaves()[0].dims[minor]
    return [c for c in (lo, hi) if 0 < c < extent] if lo < hi else []


def row_major_root_reshape(instr: Instruction) -> Instruction | None:
    """The reshape at the root of loop fusion ``instr`` where its operand, it and the
    fusion's result are row-major and the outermost dim is kept (the parallel entry's
    split, ``parallel.loop_split``, stays valid): element p of the operand is element p
    of the result, so the loop runs over the operand's dims and needs no division to
    split the result's (where that keeps an innermost loop of ``VECTOR_RUN``). Heads
    merged after attention ((heads, seq, d) transposed to (seq, heads, d), reshaped to
    (seq, heads * d)) then copy rows of d elements."""
    body = _loop_fusion_body(instr)
    if body is None or body.root.opcode is not Opcode.RESHAPE or instr.shape.is_tuple:
        return None
    root, src = body.root, body.root.operands[0].shape
    if not (root.shape.has_default_layout and src.has_default_layout
            and instr.shape.has_default_layout) or src.rank == 0 or root.shape.rank == 0 or \
            src.dims[0] != root.shape.dims[0] or \
            src.dims[-1] < min(VECTOR_RUN, root.shape.dims[-1]):
        return None
    return root


# An innermost loop at least this long (or as long as the result's) vectorizes as well.
VECTOR_RUN = 16


def passed_operands(instr: Instruction) -> list[int]:
    """Operand numbers that travel as pointer arguments (all but constants)."""
    return [k for k, o in enumerate(instr.operands) if o.opcode is not Opcode.CONSTANT]


def operand_function(llvm_module: ir.Module, instr: Instruction, name: str, out: PointerArg,
                     operands: Sequence[PointerArg], extra: Sequence[ir.Type] = ()):
    """Declare ``void name(ptr out, ptr operand..., extra...)``, one pointer per entry of
    ``passed_operands(instr)``, internal and nounwind, the pointers that alias nothing
    marked noalias; returns it and a builder at its entry."""
    passed = passed_operands(instr)
    fn = ir.Function(llvm_module, ir.FunctionType(VOID, [PTR] * (1 + len(passed)) + list(extra)),
                     name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    for arg, info in zip(fn.args, [out, *operands]):
        if info.noalias:
            arg.add_attribute("noalias")
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def operand_generators(em: ElementalEmitter, b: ir.IRBuilder, fn: ir.Function,
                       instr: Instruction, operands: Sequence[PointerArg]) -> list:
    """One element generator per operand of ``instr``: a passed operand is read from its
    pointer argument (through the output pointer where it is written in place), any
    other (a constant the function embeds) is generated by ``em``."""
    passed = passed_operands(instr)
    gens: list = []
    for k, o in enumerate(instr.operands):
        if k not in passed:
            gens.append(em.generator(o, []))
            continue
        if o.shape.is_tuple:
            raise XlacError(f"%{instr.name}: tuple-shaped operand %{o.name} is not supported")
        pos = passed.index(k)
        ptr = fn.args[0] if operands[pos].is_output else fn.args[1 + pos]
        gens.append(buffer_reader(b, ptr, o.shape, operands[pos].align))
    return gens


def emit_elemental_function(llvm_module: ir.Module, instr: Instruction, name: str,
                            em_factory: Callable[[ir.IRBuilder], ElementalEmitter],
                            out: PointerArg, operands: Sequence[PointerArg],
                            offsets: Sequence[int],
                            split_dim: int | None = None, vector_bytes: int = 0):
    """Define ``void name(ptr out, ptr operand...)`` computing ``instr``; ``operands`` holds
    one PointerArg per entry of ``passed_operands(instr)``; ``offsets``: where the result's
    elements lie, in bytes from ``out`` ([0] for an array). A dynamic-update-slice is a copy of its
    operand and a loop over its update (``LOOP_BODIES``). The C library functions the
    code calls are in the ``libcalls`` of the emitter ``em_factory`` made.
    ``split_dim``: the function takes two more arguments, i64 ``lo, hi``, and computes
    only the elements whose index in that dimension lies in [lo, hi) (a task of the
    parallel entry, parallel.py). ``vector_bytes``: the target's SIMD width, for the
    max/min pooling rows of pooling.py (0: element loops only)."""
    passed = passed_operands(instr)
    fn, b = operand_function(llvm_module, instr, name, out, operands,
                             [I64, I64] if split_dim is not None else [])
    em = em_factory(b)
    gens = operand_generators(em, b, fn, instr, operands)
    if instr.opcode in LOOP_BODIES:
        in_place = 0 in passed and operands[passed.index(0)].is_output
        LOOP_BODIES[instr.opcode](em, instr, gens, fn.args[0], out.align, in_place)
        b.ret_void()
        return fn
    bounds = {split_dim: tuple(fn.args[-2:])} if split_dim is not None else None
    pool = plan_pool_rows(instr, vector_bytes, split_dim)
    if pool is not None and all(k in passed and not operands[passed.index(k)].is_output
                                for k in pool.operands):
        pointers = [fn.args[1 + passed.index(k)] for k in pool.operands]
        pool.emit(em, fn.args[0], pointers, bounds and bounds[split_dim], split_dim)
        b.ret_void()
        return fn
    generate = em.generator(instr, gens)
    leaves = instr.shape.leaves()
    if instr.shape.is_tuple and any(s.is_tuple for s in instr.shape.tuple_shapes):
        raise XlacError(f"%{instr.name}: nested tuple result {instr.shape} is not supported")
    if any(leaf.dims != leaves[0].dims for leaf in leaves):
        raise XlacError(f"%{instr.name}: tuple leaves of different dimensions ({instr.shape})")
    targets = [(gep_bytes(b, fn.args[0], off), leaf, access_align(off, out.align,
                                                                   leaf.dtype.itemsize))
               for off, leaf in zip(offsets, leaves)]

    def store(index):
        value = generate(index)
        values = value if instr.shape.is_tuple else (value,)
        for v, (ptr, leaf, align) in zip(values, targets):
            at = linearize(b, index, leaf.dims, leaf.layout)
            b.store(v, gep_elem(b, ptr, llvm_type(leaf.dtype), at), align=align)

    cuts = sorted(set(concatenation_cuts(instr)) | set(window_cuts(instr)))
    reshape = row_major_root_reshape(instr)
    if reshape is not None and not cuts and split_dim in (None, 0):
        # the loop over the reshape's operand stores each element at its linear position
        src = reshape.operands[0].shape
        value = em.computation_generator(instr.called[0], gens, value=reshape.operands[0])
        ptr, leaf, align = targets[0]
        emit_loop_nest(b, src, lambda index: b.store(
            value(index), gep_elem(b, ptr, llvm_type(leaf.dtype),
                                   linearize(b, index, src.dims, src.layout)), align=align),
            bounds)
        b.ret_void()
        return fn
    on_range = None
    rw = window_root(instr)
    if rw is not None and leaves[0].rank != 0:
        minor = leaves[0].layout[0]

        def on_range(lo, hi):
            em.index_ranges[id(rw)] = {minor: (lo, hi)}
    emit_loop_nest(b, leaves[0], store, bounds, cuts, on_range)
    b.ret_void()
    return fn


def _dynamic_update_slice_body(em: ElementalEmitter, instr: Instruction, gens,
                               out_ptr: ir.Value, align: int, in_place: bool) -> None:
    """The result starts as a copy of the operand (none when it overwrites the operand in
    place, as a loop's state does each iteration); then only the update's window is
    written, at the clamped start."""
    b = em.b
    shape = instr.shape
    ty = llvm_type(shape.dtype)
    align = min(align, shape.dtype.itemsize)

    def element(index):
        return gep_elem(b, out_ptr, ty, linearize(b, index, shape.dims, shape.layout))

    if not in_place:
        emit_loop_nest(b, shape, lambda index: b.store(gens[0](index), element(index),
                                                       align=align))
    starts = clamped_starts(em, instr, gens, 2, instr.operands[1].shape.dims)
    emit_loop_nest(b, instr.operands[1].shape, lambda u: b.store(
        gens[1](u), element([b.add(s, i, flags=["nsw"]) for s, i in zip(starts, u)]),
        align=align))


# Ops that are no element generator but a loop body of their own:
# body(em, instr, operand generators, out pointer, out alignment, operand 0 in place).
LOOP_BODIES = {Opcode.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice_body}
