"""Sort (XLA's sort): a stable merge sort of each row, emitted as one function

    void sort(ptr out, ptr operand..., [ptr scratch])

A row is the line of elements along the sort dimension at one index of the other
dimensions; the operands' rows are permuted together, in the order the comparator
defines (``comparator(lhs0, rhs0, lhs1, rhs1, ...)`` true: lhs goes first).

Per row: the operands are copied into a start buffer, runs of ``RUN`` elements are
insertion-sorted there, then merge passes of doubling width move the row back and
forth between the output and a scratch row in the arena. The start buffer is chosen
by the parity of the number of passes so that the last one lands in the output. Rows
of at most ``RUN`` elements (TopK over a few classes, the usual case) are
insertion-sorted in the output and need no scratch. Merge sort rather than a
bitonic network or a heap: it is stable (what ONNX's TopK tie rule needs, and
``is_stable``), O(n log n) comparisons whatever the input, and its scratch is one row.
Every merge takes from the right run only when the comparator says its element goes
strictly first, and insertion shifts only past strictly greater elements: stable.
"""
from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Callable, Sequence

from llvmlite import ir

from ..hlo import Instruction, Shape
from ..optimizer.aliasing import align_up
from .elemental import ElementalEmitter
from .indexing import linearize
from .irutil import I64, PTR, VOID, alloca_once, for_range, gep_bytes, gep_elem, i64, llvm_type
from .loops import PointerArg, access_align, buffer_reader, leaf_offsets, passed_operands
from .scalar import pred_to_i1

RUN = 16        # insertion-sorted run length; longer rows are merged from such runs
_ROW_ALIGN = 16


def _row_length(instr: Instruction) -> int:
    return instr.operands[0].shape.dims[instr.attrs["dimension"]]


def _merge_passes(n: int) -> int:
    passes, width = 0, RUN
    while width < n:
        passes, width = passes + 1, width * 2
    return passes


def scratch_bytes(instr: Instruction) -> int:
    """One row of every operand, when the row needs merge passes."""
    n = _row_length(instr)
    if _merge_passes(n) == 0:
        return 0
    return sum(align_up(n * o.shape.dtype.itemsize, _ROW_ALIGN) for o in instr.operands)


@dataclass
class _Rows:
    """The current row of every operand in one buffer: element i of operand k is at
    ``bases[k] + (starts[k] + i * strides[k])`` elements."""
    bases: list
    starts: list
    strides: list
    types: list
    aligns: list

    def pointer(self, b: ir.IRBuilder, k: int, i: ir.Value) -> ir.Value:
        at = i if self.strides[k] == 1 else b.mul(i, i64(self.strides[k]))
        if self.starts[k] is not None:
            at = b.add(self.starts[k], at)
        return gep_elem(b, self.bases[k], self.types[k], at)

    def load(self, b: ir.IRBuilder, i: ir.Value) -> list:
        return [b.load(self.pointer(b, k, i), typ=t, align=a)
                for k, (t, a) in enumerate(zip(self.types, self.aligns))]

    def store(self, b: ir.IRBuilder, i: ir.Value, values: Sequence) -> None:
        for k, (v, a) in enumerate(zip(values, self.aligns)):
            b.store(v, self.pointer(b, k, i), align=a)


def _layout_stride(shape: Shape, dim: int) -> int:
    """Elements between neighbours along ``dim`` in ``shape``'s layout."""
    stride = 1
    for d in shape.layout:
        if d == dim:
            return stride
        stride *= shape.dims[d]
    raise ValueError(dim)


def emit_sort_function(llvm_module: ir.Module, instr: Instruction, name: str,
                       em_factory: Callable[[ir.IRBuilder], ElementalEmitter],
                       out: PointerArg, operands: Sequence[PointerArg],
                       alignment: int) -> ir.Function:
    """Define ``void name(ptr out, ptr operand..., [ptr scratch])`` computing the sort
    ``instr``; ``operands`` holds one PointerArg per ``passed_operands(instr)``."""
    passed = passed_operands(instr)
    with_scratch = scratch_bytes(instr) > 0
    nargs = 1 + len(passed) + with_scratch
    fn = ir.Function(llvm_module, ir.FunctionType(VOID, [PTR] * nargs), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    for arg, info in zip(fn.args, [out, *operands]):
        if info.noalias:
            arg.add_attribute("noalias")
    if with_scratch:
        fn.args[-1].add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    em = em_factory(b)
    reads = []
    for k, o in enumerate(instr.operands):
        if k in passed:
            pos = passed.index(k)
            reads.append(buffer_reader(b, fn.args[1 + pos], o.shape, operands[pos].align))
        else:
            reads.append(em.generator(o, []))

    dim, n = instr.attrs["dimension"], _row_length(instr)
    leaves = instr.shape.leaves()
    types = [llvm_type(leaf.dtype) for leaf in leaves]
    comparator = instr.called[0]

    def less(x: list, y: list) -> ir.Value:
        return pred_to_i1(b, em.apply(comparator, [v for pair in zip(x, y) for v in pair]))

    shape = leaves[0]
    index: list = [None] * shape.rank
    with ExitStack() as loops:
        for d in reversed(shape.layout):
            if d != dim:
                index[d] = loops.enter_context(for_range(b, shape.dims[d], f"i{d}"))
        index[dim] = i64(0)
        outputs = _Rows(
            [gep_bytes(b, fn.args[0], off) for off in leaf_offsets(instr.shape, alignment)],
            [linearize(b, index, leaf.dims, leaf.layout) for leaf in leaves],
            [_layout_stride(leaf, dim) for leaf in leaves], types,
            [access_align(off, out.align, leaf.dtype.itemsize)
             for off, leaf in zip(leaf_offsets(instr.shape, alignment), leaves)])
        buffers = [outputs]
        if with_scratch:
            offsets, at = [], 0
            for leaf in leaves:
                offsets.append(at)
                at += align_up(n * leaf.dtype.itemsize, _ROW_ALIGN)
            buffers.append(_Rows([gep_bytes(b, fn.args[-1], off) for off in offsets],
                                 [None] * len(leaves), [1] * len(leaves), types,
                                 [leaf.dtype.itemsize for leaf in leaves]))
        passes = _merge_passes(n)
        current = passes % 2          # the start buffer: the last pass ends in the output
        start = buffers[current]
        with for_range(b, n, "copy") as i:
            full = list(index)
            full[dim] = i
            start.store(b, i, [r(full) for r in reads])
        with for_range(b, n, "run", step=RUN) as lo:
            _insertion_sort(b, start, lo, _imin(b, b.add(lo, i64(RUN)), i64(n)), less)
        width = RUN
        for _ in range(passes):
            src, dst = buffers[current], buffers[1 - current]
            with for_range(b, n, "merge", step=2 * width) as lo:
                mid = _imin(b, b.add(lo, i64(width)), i64(n))
                hi = _imin(b, b.add(lo, i64(2 * width)), i64(n))
                _merge(b, src, dst, lo, mid, hi, less)
            current, width = 1 - current, width * 2
    b.ret_void()
    return fn


def _imin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def _insertion_sort(b: ir.IRBuilder, rows: _Rows, lo, hi, less) -> None:
    """Stable insertion sort of elements [lo, hi) of ``rows``."""
    fn = b.block.function
    hole = alloca_once(b, I64, "hole")
    with for_range(b, hi, "ins", start=b.add(lo, i64(1))) as t:
        key = rows.load(b, t)
        b.store(t, hole)
        head, test, shift, done = (fn.append_basic_block(f"ins.{s}")
                                   for s in ("head", "test", "shift", "done"))
        b.branch(head)
        b.position_at_end(head)
        p = b.load(hole, typ=I64)
        b.cbranch(b.icmp_signed(">", p, lo), test, done)
        b.position_at_end(test)
        before = b.sub(p, i64(1))
        prev = rows.load(b, before)
        b.cbranch(less(key, prev), shift, done)
        b.position_at_end(shift)
        rows.store(b, p, prev)
        b.store(before, hole)
        b.branch(head)
        b.position_at_end(done)
        rows.store(b, b.load(hole, typ=I64), key)


def _merge(b: ir.IRBuilder, src: _Rows, dst: _Rows, lo, mid, hi, less) -> None:
    """Merge sorted [lo, mid) and [mid, hi) of ``src`` into [lo, hi) of ``dst``; on ties
    the left run goes first."""
    fn = b.block.function
    left, right = alloca_once(b, I64, "left"), alloca_once(b, I64, "right")
    b.store(lo, left)
    b.store(mid, right)
    with for_range(b, hi, "out", start=lo) as k:
        i, j = b.load(left, typ=I64), b.load(right, typ=I64)
        has_left, compare, take_left, take_right, next_ = (
            fn.append_basic_block(f"merge.{s}")
            for s in ("has_left", "compare", "take_left", "take_right", "next"))
        b.cbranch(b.icmp_signed(">=", i, mid), take_right, has_left)
        b.position_at_end(has_left)
        b.cbranch(b.icmp_signed(">=", j, hi), take_left, compare)
        b.position_at_end(compare)
        b.cbranch(less(src.load(b, j), src.load(b, i)), take_right, take_left)
        for block, ptr, at in ((take_left, left, i), (take_right, right, j)):
            b.position_at_end(block)
            dst.store(b, k, src.load(b, at))
            b.store(b.add(at, i64(1)), ptr)
            b.branch(next_)
        b.position_at_end(next_)
