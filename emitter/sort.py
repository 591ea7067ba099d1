"""Sort (XLA's sort): a stable merge sort of each row, emitted as one function; and
TopK (XLA's topk, below): a heap selection of each row.

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

from ..hlo import Instruction, Shape, XlacError, dtypes
from .elemental import ElementalEmitter
from .indexing import linearize
from .irutil import (I32, I64, PTR, VOID, alloca_once, for_range, gep_bytes, gep_elem, i64,
                     llvm_type)
from .loops import (PointerArg, access_align, buffer_reader, operand_function,
                    passed_operands)
from .scalar import is_unsigned_like, pred_to_i1, to_compute

RUN = 16        # insertion-sorted run length; longer rows are merged from such runs
_ROW_ALIGN = 16


def _align_up(n: int, a: int) -> int:
    return -(-n // a) * a


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
    return sum(_align_up(n * o.shape.dtype.itemsize, _ROW_ALIGN) for o in instr.operands)


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
                       offsets: Sequence[int]) -> ir.Function:
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
            [gep_bytes(b, fn.args[0], off) for off in offsets],
            [linearize(b, index, leaf.dims, leaf.layout) for leaf in leaves],
            [_layout_stride(leaf, dim) for leaf in leaves], types,
            [access_align(off, out.align, leaf.dtype.itemsize)
             for off, leaf in zip(offsets, leaves)])
        buffers = [outputs]
        if with_scratch:
            rows, at = [], 0
            for leaf in leaves:
                rows.append(at)
                at += _align_up(n * leaf.dtype.itemsize, _ROW_ALIGN)
            buffers.append(_Rows([gep_bytes(b, fn.args[-1], off) for off in rows],
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
    the left run goes first. Branch-free while both runs last (the comparison picks the
    element and advances one side: data-dependent branches would mispredict half the
    time on unordered input), then the rest of the unfinished run is copied."""
    fn = b.block.function
    left, right, out = (alloca_once(b, I64, name) for name in ("left", "right", "out"))
    b.store(lo, left)
    b.store(mid, right)
    b.store(lo, out)
    head, body, done = (fn.append_basic_block(f"merge.{s}") for s in ("head", "body", "done"))
    b.branch(head)
    b.position_at_end(head)
    i, j = b.load(left, typ=I64), b.load(right, typ=I64)
    b.cbranch(b.and_(b.icmp_signed("<", i, mid), b.icmp_signed("<", j, hi)), body, done)
    b.position_at_end(body)
    lhs, rhs = src.load(b, i), src.load(b, j)
    take = less(rhs, lhs)
    k = b.load(out, typ=I64)
    dst.store(b, k, [b.select(take, r, l) for l, r in zip(lhs, rhs)])
    step = b.zext(take, I64)
    b.store(b.add(j, step), right)
    b.store(b.add(i, b.sub(i64(1), step)), left)
    b.store(b.add(k, i64(1)), out)
    b.branch(head)
    b.position_at_end(done)
    for ptr, end in ((left, mid), (right, hi)):
        start = b.load(ptr, typ=I64)
        with for_range(b, end, "rest", start=start) as t:
            at = b.add(b.load(out, typ=I64), b.sub(t, start))
            dst.store(b, at, src.load(b, t))
        b.store(b.add(b.load(out, typ=I64), b.sub(end, start)), out)


# --- TopK -------------------------------------------------------------------------------

def emit_topk_function(llvm_module: ir.Module, instr: Instruction, name: str,
                       em_factory: Callable[[ir.IRBuilder], ElementalEmitter],
                       out: PointerArg, operands: Sequence[PointerArg],
                       offsets: Sequence[int]) -> ir.Function:
    """Define ``void name(ptr out[, ptr operand])`` computing the topk ``instr``.

    Per row, the output row itself holds a binary heap of the k best (value, index)
    pairs seen so far with the worst at its root: built from the first k elements,
    each later element that beats the root replaces it and sifts down, and a final
    heap sort puts the best first. O(n log k) comparisons whatever the input, no
    scratch; elements that cannot enter cost one predictable comparison with the root.
    Equal values rank by index, so the pairs are totally ordered and the lower index
    of equal values wins, as a stable sort would have it."""
    passed = passed_operands(instr)
    fn, b = operand_function(llvm_module, instr, name, out, operands)
    em = em_factory(b)
    x = instr.operands[0]
    if passed:
        read = buffer_reader(b, fn.args[1], x.shape, operands[0].align)
    else:
        read = em.generator(x, [])
    values, indices = instr.shape.tuple_shapes
    if not (values.has_default_layout and indices.has_default_layout):
        raise XlacError(f"%{instr.name}: topk results need the default layout")
    k, n = instr.attrs["k"], x.shape.dims[-1]
    worse = _worse(b, x.shape.dtype, instr.attrs["largest"])
    if k == 0:
        b.ret_void()
        return fn
    with ExitStack() as loops:
        index = [loops.enter_context(for_range(b, d, f"i{d}")) for d in x.shape.dims[:-1]]
        row = linearize(b, index + [i64(0)], values.dims, values.layout)
        heap = _Rows([gep_bytes(b, fn.args[0], off) for off in offsets], [row, row], [1, 1],
                     [llvm_type(values.dtype), llvm_type(dtypes.S32)],
                     [access_align(off, out.align, s.dtype.itemsize)
                      for off, s in zip(offsets, (values, indices))])
        with for_range(b, k, "fill") as i:
            heap.store(b, i, [read(index + [i]), b.trunc(i, I32)])
        with for_range(b, k // 2, "heapify") as t:
            p = b.sub(i64(k // 2 - 1), t)
            _sift_down(b, heap, p, i64(k), heap.load(b, p), worse)
        with for_range(b, n, "scan", start=k) as i:
            candidate = [read(index + [i]), b.trunc(i, I32)]
            with b.if_then(worse(heap.load(b, i64(0)), candidate), likely=False):
                _sift_down(b, heap, i64(0), i64(k), candidate, worse)
        with for_range(b, k - 1, "heapsort") as t:
            end = b.sub(i64(k - 1), t)
            last = heap.load(b, end)
            heap.store(b, end, heap.load(b, i64(0)))
            _sift_down(b, heap, i64(0), end, last, worse)
    b.ret_void()
    return fn


def _worse(b: ir.IRBuilder, dtype, largest: bool):
    """``worse(p, q)``: whether pair p = (value, index) ranks after pair q, i.e. q has
    the better value (larger or smaller; NaN above every number), or an equal one at
    a lower index."""
    def value_order(x, y):
        """(x better than y, x equal to y) as i1."""
        if dtype.is_float:
            x, y = to_compute(b, x, dtype), to_compute(b, y, dtype)
            x_nan, y_nan = b.fcmp_unordered("uno", x, x), b.fcmp_unordered("uno", y, y)
            if largest:
                better = b.or_(b.fcmp_ordered(">", x, y), b.and_(x_nan, b.not_(y_nan)))
            else:
                better = b.or_(b.fcmp_ordered("<", x, y), b.and_(y_nan, b.not_(x_nan)))
            return better, b.or_(b.fcmp_ordered("==", x, y), b.and_(x_nan, y_nan))
        cmp = b.icmp_unsigned if is_unsigned_like(dtype) else b.icmp_signed
        return cmp(">" if largest else "<", x, y), b.icmp_signed("==", x, y)

    def worse(p, q):
        better, equal = value_order(q[0], p[0])
        return b.or_(better, b.and_(equal, b.icmp_signed("<", q[1], p[1])))
    return worse


def _sift_down(b: ir.IRBuilder, heap: _Rows, start, end, item, worse) -> None:
    """Place ``item`` at hole ``start`` of the heap [0, end) whose root is the worst:
    while a child ranks below ``item``, the lower-ranked child moves up into the hole."""
    fn = b.block.function
    hole = alloca_once(b, I64, "hole")
    b.store(start, hole)
    head, check, down, done = (fn.append_basic_block(f"sift.{s}")
                               for s in ("head", "check", "down", "done"))
    b.branch(head)
    b.position_at_end(head)
    p = b.load(hole, typ=I64)
    child = b.add(b.mul(p, i64(2)), i64(1))
    b.cbranch(b.icmp_signed("<", child, end), check, done)
    b.position_at_end(check)
    left = heap.load(b, child)
    sibling = b.add(child, i64(1))
    has_right = b.icmp_signed("<", sibling, end)
    # the right child, where it exists, read at a valid position either way
    right = heap.load(b, b.select(has_right, sibling, child))
    take_right = b.and_(has_right, worse(right, left))
    c = b.select(take_right, sibling, child)
    lowest = [b.select(take_right, r, l) for l, r in zip(left, right)]
    b.cbranch(worse(lowest, item), down, done)
    b.position_at_end(down)
    heap.store(b, p, lowest)
    b.store(c, hole)
    b.branch(head)
    b.position_at_end(done)
    heap.store(b, b.load(hole, typ=I64), item)
