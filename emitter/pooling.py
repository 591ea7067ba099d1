"""Max, min and sum pooling along output rows, and average pooling's divide.

A reduce-window whose reducer is maximum, minimum or add over the two minor dimensions
of a row-major array (ONNX's MaxPool in NCHW, a 1-D pool over N C W), computed as the
loop of an element loop function (loops.py) but a vector of ``lanes`` output columns of
one row at a time instead of one element at a time. The element loop vectorizes only its
interior columns and leaves per row a scalar remainder and border whose nine NaN-aware
compares per element cost more than the vectors: ResNet-18's 3x3/2 pool on 64 x 112 x
112 took 170 us, onnxruntime's NCHW MaxPool 105 us. Average pooling is a loop fusion
whose root divides the window sums by the count (a constant, or with padding a count
per output position that all planes share; fusion.py's ``_averaged_sum``): the rows
divide each vector of sums by the vector of counts before storing it.

Per vector of output columns ``ox0 .. ox0 + lanes``, the input columns its windows read
(``col0 = ox0 * sw - pw`` onwards, ``span`` of them) are loaded as ``chunks`` vectors
per window row and combined over the window rows first, as they lie in memory; then,
per window column kx, one or two shuffles pick the element ``kx * dw + j * sw`` of the
chunks for lane j (wide loads and shuffles, no gathers), and the window columns are
combined. Positions in the padding hold init and init joins the fold once, as the
reduce-window's semantics say (init not at all where it is the reducer's identity).
Maximum and minimum are associative and commutative as elemental.py computes them
(NaN-propagating; any NaN in a window gives NaN), so the order of the fold does not
change the result; a float sum may differ from the element loop's in the last bits
(rows before columns here, row-major positions there).

Rows whose window rows all lie in the image and vectors whose columns do read with plain
loads; the border rows replace window rows outside the image by init (a select), the
border vectors (compile-time positions, unrolled) and the last, partial vector load
through constant masks with init in the masked lanes and store through a mask.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np
from llvmlite import ir

from ..hlo import Instruction, Opcode, dtypes
from ..hlo.fusion import is_loop_fusion
from .elemental import RULES, ElementalEmitter, window_interior
from .irutil import I1, I32, for_range, i64, llvm_type
from .kernels.vec import F32, const_vec, masked_load, masked_store, offset_ptr, splat, vec_type

_REDUCERS = {Opcode.MAXIMUM: "max", Opcode.MINIMUM: "min", Opcode.ADD: "add"}
_DTYPES = (dtypes.F32, dtypes.S8, dtypes.U8, dtypes.S16, dtypes.U16, dtypes.S32, dtypes.U32)
# Chunks of input columns per vector of outputs (span / lanes, rounded up): a 3x3/2
# window takes 3, stride 4 and wider windows up to 5; beyond, the element loop.
MAX_CHUNKS = 6
# Border vectors are unrolled at compile time; a window wider than the image on a long
# row would unroll them all.
MAX_BORDER_VECTORS = 8


@dataclass(frozen=True)
class PoolRows:
    """What ``plan_pool_rows`` found: the reduce-window, which operand of the loop
    function holds its input, the init value and the vector shape; for average pooling
    the divide at the loop fusion's root and its divisor: a constant, or the operand
    holding one per output row and column (``counts``), the same for every plane."""
    rw: Instruction
    operand: int           # index into the loop function's operands (instr.operands)
    init: ir.Constant
    neutral: bool          # init is the reducer's identity: it never changes a result
    lanes: int
    chunks: int
    divide: Instruction | None = None
    divisor: ir.Constant | None = None
    counts: int | None = None

    @property
    def operands(self) -> tuple[int, ...]:
        """The operands the rows read through pointers."""
        return (self.operand,) + ((self.counts,) if self.counts is not None else ())

    @property
    def elem(self) -> ir.Type:
        return llvm_type(self.rw.shape.dtype)

    def emit(self, em: ElementalEmitter, out: ir.Value, pointers: list[ir.Value],
             bounds: tuple[ir.Value, ir.Value] | None, split_dim: int | None) -> None:
        """The whole result at ``out`` from the ``operands`` at ``pointers``; ``bounds``:
        only the output indices in [lo, hi) of dimension ``split_dim``."""
        x, counts = pointers[0], pointers[1] if self.counts is not None else None
        b, rw = em.b, self.rw
        dims = rw.shape.dims
        rank = len(dims)
        oh, ow = dims[-2:]
        ih, iw = rw.operands[0].shape.dims[-2:]
        planes = prod(dims[:-2])
        p_lo, p_hi, r_lo, r_hi = i64(0), i64(planes), i64(0), i64(oh)
        if bounds is not None and split_dim < rank - 2:
            inner = i64(prod(dims[split_dim + 1:-2]))
            p_lo, p_hi = b.mul(bounds[0], inner), b.mul(bounds[1], inner)
        elif bounds is not None:
            r_lo, r_hi = bounds
        rows_in, rows_out = window_interior(rw, rank - 2)
        if rows_in >= rows_out:
            segments = [(0, oh, True)]
        else:
            segments = [(0, rows_in, True), (rows_in, rows_out, False), (rows_out, oh, True)]
        with for_range(b, p_hi, "plane", start=p_lo) as p:
            src = offset_ptr(b, x, self.elem, b.mul(p, i64(ih * iw)))
            dst = offset_ptr(b, out, self.elem, b.mul(p, i64(oh * ow)))
            for start, stop, checked in segments:
                if start >= stop:
                    continue
                lo = _max(b, i64(start), r_lo)
                hi = _min(b, i64(stop), r_hi)
                with for_range(b, hi, "oy", start=lo) as oy:
                    _Row(self, em, src, dst, counts, oy, checked).emit()


def _max(b, x, y):
    return b.select(b.icmp_signed(">", x, y), x, y)


def _min(b, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


def plan_pool_rows(instr: Instruction, vector_bytes: int,
                   split_dim: int | None = None) -> PoolRows | None:
    """The row code for ``instr`` (a reduce-window, or a loop fusion that is one over a
    parameter or divides one by a ``_divisor``) where it applies, else None (the element
    loop computes it)."""
    rw, operand, init, divide = _reduce_window_of(instr)
    if rw is None or vector_bytes < 16:
        return None
    shape, x = rw.shape, rw.operands[0].shape
    rank = shape.rank
    row_major = tuple(range(rank - 1, -1, -1))
    w = rw.attrs["window"]
    comp = rw.called[0]
    root = comp.root
    # The loop function stores in its instruction's layout and reads its operand's,
    # which a fusion's may not share with its body (channels-minor quantized maps).
    if (rank < 2 or shape.dtype not in _DTYPES or x.dtype != shape.dtype
            or any(s.layout != row_major for s in (shape, x, instr.shape,
                                                   instr.operands[operand].shape))
            or root.opcode not in _REDUCERS or set(root.operands) != set(comp.parameters)
            or len(comp.parameters) != 2 or init is None
            or split_dim == rank - 1 or shape.num_elements == 0
            or any(v != 1 for v in w.lhs_dilation)
            or any((w.size[d], w.stride[d], w.pad_low[d], w.pad_high[d]) != (1, 1, 0, 0)
                   for d in range(rank - 2))):
        return None
    lanes = vector_bytes // shape.dtype.itemsize
    ow, iw = shape.dims[-1], x.dims[-1]
    # Narrow rows take narrower vectors: a 7-wide row fills 7 of 8 lanes, not of 16.
    while lanes > 4 and 2 * ow <= lanes:
        lanes //= 2
    kw, sw, dw = w.size[-1], w.stride[-1], w.rhs_dilation[-1]
    span = sw * (lanes - 1) + (kw - 1) * dw + 1
    chunks = -(-span // lanes)
    vectors = -(-ow // lanes)
    cols_in, cols_out = window_interior(rw, rank - 1)
    v_lo, v_hi = _interior_vectors(cols_in, cols_out, lanes, vectors)
    if chunks > MAX_CHUNKS or v_lo + vectors - v_hi > MAX_BORDER_VECTORS:
        return None
    divisor = counts = None
    if divide is not None:
        divisor, counts = _divisor(instr, divide)
        if shape.dtype != dtypes.F32 or (divisor, counts) == (None, None):
            return None
    value = np.asarray(init.literal).item()
    identity = _identity(shape.dtype, _REDUCERS[root.opcode])
    neutral = np.asarray(value, shape.dtype.np).tobytes() == \
        np.asarray(identity, shape.dtype.np).tobytes()      # -0.0 for a float sum, not +0.0
    elem = llvm_type(shape.dtype)
    return PoolRows(rw, operand, ir.Constant(elem, value), neutral, lanes, chunks, divide,
                    divisor, counts)


def _reduce_window_of(instr: Instruction):
    """(reduce-window, operand of ``instr`` holding its input, its constant init, the
    divide of it at the root) for a single-operand reduce-window, or a loop fusion whose
    root is one over a parameter or divides one (average pooling); Nones otherwise."""
    none = None, None, None, None
    if instr.opcode is Opcode.REDUCE_WINDOW:
        if len(instr.operands) != 2 or instr.operands[0].opcode is Opcode.CONSTANT:
            return none
        init = instr.operands[1] if instr.operands[1].opcode is Opcode.CONSTANT else None
        return instr, 0, init, None
    if not is_loop_fusion(instr):
        return none
    rw, divide = instr.called[0].root, None
    if rw.opcode is Opcode.DIVIDE:
        rw, divide = rw.operands[0], rw
    if rw.opcode is not Opcode.REDUCE_WINDOW or len(rw.operands) != 2:
        return none
    x, init = rw.operands
    if x.opcode is not Opcode.PARAMETER:
        return none
    operand = x.attrs["number"]
    if instr.operands[operand].opcode is Opcode.CONSTANT:
        return none
    return rw, operand, _constant(instr, init), divide


def _constant(instr: Instruction, v: Instruction) -> Instruction | None:
    """The constant ``v`` is in loop fusion ``instr``'s computation (itself, or the
    constant operand of ``instr`` that parameter ``v`` stands for), else None."""
    if v.opcode is Opcode.PARAMETER:
        v = instr.operands[v.attrs["number"]]
    return v if v.opcode is Opcode.CONSTANT else None


def _divisor(instr: Instruction, divide: Instruction):
    """(constant, None) where ``divide`` (the root of loop fusion ``instr``) divides by a
    broadcast scalar constant; (None, k) where it divides by a broadcast along the
    planes of operand k, which holds one value per output row and column, row-major (with
    padding, average pooling's count); (None, None) otherwise."""
    d = divide.operands[1]
    if d.opcode is not Opcode.BROADCAST:
        return None, None
    src = d.operands[0]
    c = _constant(instr, src)
    if c is not None and c.shape.rank == 0:
        return ir.Constant(F32, float(np.asarray(c.literal).item())), None
    rank = d.shape.rank
    # (rows, columns) of each plane, the dims of size 1 left out: src must hold them in
    # this order, nothing else, and row-major (then a reshape of it leaves them in place)
    kept = [(k, n) for k, n in zip(d.attrs["dimensions"], src.shape.dims) if n != 1]
    plane = [(k, d.shape.dims[k]) for k in (rank - 2, rank - 1) if d.shape.dims[k] != 1]
    if kept != plane:
        return None, None
    if src.opcode is Opcode.RESHAPE:
        src = src.operands[0]
        if [n for n in src.shape.dims if n != 1] != [n for _, n in plane]:
            return None, None
    if src.opcode is not Opcode.PARAMETER or src.shape.dtype != dtypes.F32:
        return None, None
    k = src.attrs["number"]
    if instr.operands[k].opcode is Opcode.CONSTANT or \
            not (src.shape.has_default_layout and instr.operands[k].shape.has_default_layout
                 and d.operands[0].shape.has_default_layout):
        return None, None
    return None, k


def _identity(dtype, reducer: str):
    if reducer == "add":
        return -0.0 if dtype.is_float else 0
    if dtype.is_float:
        return -np.inf if reducer == "max" else np.inf
    info = np.iinfo(dtype.np)
    return info.min if reducer == "max" else info.max


def _interior_vectors(cols_in: int, cols_out: int, lanes: int, vectors: int):
    """Vectors [v_lo, v_hi) of a row whose lanes are all real and read only columns
    inside the image (the output columns [cols_in, cols_out) do)."""
    v_lo = -(-cols_in // lanes)
    v_hi = min(cols_out // lanes, vectors) if cols_in < cols_out else v_lo
    return v_lo, max(v_lo, v_hi)


class _Row:
    """The code of output row ``oy`` of one plane; ``checked``: some window rows may lie
    outside the image."""

    def __init__(self, plan: PoolRows, em: ElementalEmitter, src, dst, counts, oy,
                 checked: bool):
        self.plan, self.em, self.b = plan, em, em.b
        rw = plan.rw
        self.w = rw.attrs["window"]
        self.comp = rw.called[0]
        self.ih, self.iw = rw.operands[0].shape.dims[-2:]
        self.ow = rw.shape.dims[-1]
        self.vty = vec_type(plan.elem, plan.lanes)
        self.align = rw.shape.dtype.itemsize
        self.init = splat(self.b, plan.init, plan.lanes)
        b, w = self.b, self.w
        (kh, sh, ph, dh) = (w.size[-2], w.stride[-2], w.pad_low[-2], w.rhs_dilation[-2])
        self.rows, self.valid = [], []
        for ky in range(kh):
            iy = b.add(b.mul(oy, i64(sh)), i64(ky * dh - ph))
            valid = None
            if checked:
                valid = b.icmp_unsigned("<", iy, i64(self.ih))
                iy = b.select(valid, iy, i64(0))
            self.rows.append(offset_ptr(b, src, plan.elem, b.mul(iy, i64(self.iw))))
            self.valid.append(valid)
        self.out_row = offset_ptr(b, dst, plan.elem, b.mul(oy, i64(self.ow)))
        self.counts_row = None if counts is None else \
            offset_ptr(b, counts, F32, b.mul(oy, i64(self.ow)))

    def emit(self) -> None:
        plan = self.plan
        lanes = plan.lanes
        vectors = -(-self.ow // lanes)
        cols_in, cols_out = window_interior(plan.rw, plan.rw.shape.rank - 1)
        v_lo, v_hi = _interior_vectors(cols_in, cols_out, lanes, vectors)
        for v in range(v_lo):
            self._vector(i64(v * lanes), v * lanes)
        with for_range(self.b, i64(v_hi * lanes), "ox", start=i64(v_lo * lanes),
                       step=lanes) as ox0:
            self._vector(ox0, None)
        for v in range(v_hi, vectors):
            self._vector(i64(v * lanes), v * lanes)

    def _vector(self, ox0: ir.Value, static: int | None) -> None:
        """Output columns ox0 .. ox0 + lanes; ``static``: ox0 known at compile time (a
        border or the last vector: masked), None for an interior vector."""
        b, plan, w = self.b, self.plan, self.w
        lanes, elem = plan.lanes, plan.elem
        kw, sw, pw, dw = w.size[-1], w.stride[-1], w.pad_low[-1], w.rhs_dilation[-1]
        real = lanes if static is None else min(lanes, self.ow - static)
        span = sw * (real - 1) + (kw - 1) * dw + 1
        col0 = b.sub(b.mul(ox0, i64(sw)), i64(pw))
        masks = []
        for c in range(plan.chunks):
            need = [c * lanes + e < span and (static is None or
                                              0 <= static * sw - pw + c * lanes + e < self.iw)
                    for e in range(lanes)]
            masks.append(None if all(need) else const_vec(I1, need) if any(need) else False)
        # The window rows combined, per chunk of columns as they lie.
        chunks = []
        for c, mask in enumerate(masks):
            acc = None
            for row, valid in zip(self.rows, self.valid):
                if mask is False:           # all padding: init per window row (a sum's)
                    x = self.init
                else:
                    ptr = offset_ptr(b, row, elem, b.add(col0, i64(c * lanes)))
                    x = (b.load(ptr, typ=self.vty, align=self.align) if mask is None
                         else masked_load(b, ptr, self.vty, mask, self.align, self.init))
                    if valid is not None:
                        x = b.select(valid, x, self.init)
                acc = x if acc is None else self.em.apply(self.comp, [acc, x])
            chunks.append(acc)
        # The window columns: lane j of column kx is element kx * dw + j * sw.
        result = None if plan.neutral else self.init
        for kx in range(kw):
            x = _pick(b, chunks, [kx * dw + j * sw for j in range(lanes)], lanes)
            result = x if result is None else self.em.apply(self.comp, [result, x])
        store = None if real == lanes else const_vec(I1, [j < real for j in range(lanes)])
        if plan.divide is not None:
            result = self._divided(result, ox0, store)
        ptr = offset_ptr(b, self.out_row, elem, ox0)
        if store is None:
            b.store(result, ptr, align=self.align)
        else:
            masked_store(b, result, ptr, store, self.align)

    def _divided(self, sums: ir.Value, ox0: ir.Value, mask) -> ir.Value:
        """Average pooling: the root's divide (elemental.py's rule) of the vector of sums
        by the divisor's vector (the lanes outside ``mask``, not stored, divide by 1)."""
        b, plan = self.b, self.plan
        if plan.divisor is not None:
            d = splat(b, plan.divisor, plan.lanes)
        else:
            ptr = offset_ptr(b, self.counts_row, F32, ox0)
            d = (b.load(ptr, typ=self.vty, align=4) if mask is None else
                 masked_load(b, ptr, self.vty, mask, 4, splat(b, ir.Constant(F32, 1.0),
                                                                   plan.lanes)))
        return RULES[Opcode.DIVIDE](self.em, plan.divide, [lambda _: sums, lambda _: d], [])


def _pick(b: ir.IRBuilder, chunks: list[ir.Value], index: list[int], lanes: int) -> ir.Value:
    """The vector whose lane j is element ``index[j]`` of the chunks laid end to end:
    one two-source shuffle per chunk it reads past the first two. Indices past the last
    chunk (lanes that are not real) read its last element."""
    last = len(chunks) * lanes - 1
    index = [min(i, last) for i in index]
    sources = sorted({i // lanes for i in index})
    if sources == [index[0] // lanes] and index == list(range(index[0], index[0] + lanes)) \
            and index[0] % lanes == 0:
        return chunks[sources[0]]
    first = sources[0]
    second = sources[1] if len(sources) > 1 else first
    pos = [(i - first * lanes) if i // lanes == first else
           (lanes + i - second * lanes) if i // lanes == second else 0 for i in index]
    v = b.shuffle_vector(chunks[first], chunks[second], const_vec(I32, pos))
    for s in sources[2:]:
        pos = [lanes + i - s * lanes if i // lanes == s else j for j, i in enumerate(index)]
        v = b.shuffle_vector(v, chunks[s], const_vec(I32, pos))
    return v
