"""Scatter (XLA's scatter with one operand), emitted as one function:

    void scatter(ptr out, ptr operand, ptr indices, ptr updates)

The result starts as a copy of the operand (no copy at all when the memory plan
overwrites the operand in place: its pointer is then the output's); then, in the
updates' row-major order, each update element is combined by ``to_apply`` into the
result element it addresses. An update window that does not fit inside the operand
is skipped whole, as XLA's scatter expander does.
"""
from __future__ import annotations

from typing import Callable, Sequence

from llvmlite import ir

from ..hlo import Instruction
from .elemental import ElementalEmitter, index_value
from .indexing import linearize
from .irutil import I1, gep_elem, i64, llvm_type
from .loops import (PointerArg, emit_loop_nest, operand_function, operand_generators,
                    passed_operands)


def emit_scatter_function(llvm_module: ir.Module, instr: Instruction, name: str,
                          em_factory: Callable[[ir.IRBuilder], ElementalEmitter],
                          out: PointerArg, operands: Sequence[PointerArg],
                          offsets: Sequence[int]) -> ir.Function:
    """Define ``void name(ptr out, ptr operand...)`` computing the scatter ``instr``;
    ``operands`` holds one PointerArg per ``passed_operands(instr)`` (an operand 0 that
    is written in place is read through the output pointer)."""
    passed = passed_operands(instr)
    fn, b = operand_function(llvm_module, instr, name, out, operands)
    em = em_factory(b)
    gens = operand_generators(em, b, fn, instr, operands)
    in_place = 0 in passed and operands[passed.index(0)].is_output
    _scatter_body(em, instr, gens, fn.args[0], out.align, in_place)
    b.ret_void()
    return fn


def _scatter_body(em: ElementalEmitter, instr: Instruction, gens, out_ptr: ir.Value,
                  align: int, in_place: bool) -> None:
    b = em.b
    shape = instr.shape
    operand, indices, updates = gens
    idx_shape, upd_shape = instr.operands[1].shape, instr.operands[2].shape
    dn = instr.attrs["dimension_numbers"]
    ty = llvm_type(shape.dtype)
    align = min(align, shape.dtype.itemsize)

    def element(index):
        return gep_elem(b, out_ptr, ty, linearize(b, index, shape.dims, shape.layout))

    if not in_place:
        emit_loop_nest(b, shape, lambda index: b.store(operand(index), element(index),
                                                       align=align))
    uwd, ivd = dn.update_window_dims, dn.index_vector_dim
    scatter_dims = [d for d in range(upd_shape.rank) if d not in uwd]
    window_operand_dims = [d for d in range(shape.rank)
                           if d not in dn.inserted_window_dims + dn.input_batching_dims]

    def update(u):
        batch = [u[d] for d in scatter_dims]
        valid = ir.Constant(I1, 1)
        target = []
        for d in range(shape.rank):
            if d in dn.scatter_dims_to_operand_dims:
                k = dn.scatter_dims_to_operand_dims.index(d)
                at = batch[:ivd] + [i64(k)] + batch[ivd:] if ivd < idx_shape.rank else batch
                start = index_value(b, indices(at), idx_shape.dtype)
            elif d in dn.input_batching_dims:
                sd = dn.scatter_indices_batching_dims[dn.input_batching_dims.index(d)]
                start = batch[sd if sd < ivd else sd - 1]
            else:
                start = i64(0)
            if d in window_operand_dims:
                ud = uwd[window_operand_dims.index(d)]
                size, offset = upd_shape.dims[ud], u[ud]
            else:
                size, offset = 1, None
            if d in dn.scatter_dims_to_operand_dims:
                # 0 <= start <= dim - size, one unsigned compare
                valid = b.and_(valid, b.icmp_unsigned("<=", start, i64(shape.dims[d] - size)))
            target.append(start if offset is None else b.add(start, offset))
        value = updates(u)
        with b.if_then(valid):
            ptr = element(target)
            old = b.load(ptr, typ=ty, align=align)
            b.store(em.apply(instr.called[0], [old, value]), ptr, align=align)

    emit_loop_nest(b, upd_shape, update)
