"""The epilogue of an output fusion, applied by the CUDA backend's tiled kernels as they
store (dot.py's MatrixStore, for dots and convolutions).

    core, epilogue = unpack(instr)     # a dot / convolution, or an output fusion of one
    apply = epilogue.bind(b, fn, blob, operands)
    value = apply(index, acc)          # the fusion root's element at the core's ``index``

An output fusion (optimizer/fusion.py, ``EpilogueStyle.REGISTERS``: the backend takes
the ops after an f32 dot or convolution whose kernel it has) holds the core, reading
parameters 0 and 1, and element-wise ops after it (the policy's ``epilogue_ops``: a
bias or scale per output channel, ReLU, clamp, GELU's erf, a residual add...). The
kernel's store computes, at each element of its micro-tile, the fused computation's
root with the accumulator standing in for the core (``computation_generator`` with an
override): the element generators of the CPU's loops (emitter/elemental.py), so the
kernel computes what an element loop would. What the epilogue reads besides the core
(the fusion's operands from 2 on: a bias, a residual, a folded BatchNorm's scale and
shift) it reads through its launch pointers at that element's index; the constants in
it are immediates or read through the weights pointer (KernelConstants).

The store hands ``apply`` the core's index; where the fusion reshapes the dot's result
keeping its columns (``keeps_columns``: the ONNX importer giving a 3-D MatMul its batch
dims back), the root's index is the row-major position's in the root's dims.
"""
from __future__ import annotations

from typing import Sequence

from llvmlite import ir

from ...hlo import Instruction, Opcode
from ...hlo.fusion import is_output_fusion, output_fusion_core
from ..elemental import ElementalEmitter
from ..indexing import reshape_index
from ..loops import PointerArg, buffer_reader
from .kernels import KernelConstants, WeightsBlob


class StoreEpilogue:
    """The element-wise ops of output fusion ``fusion`` after its core."""

    def __init__(self, fusion: Instruction, core: Instruction):
        self.fusion, self.core = fusion, core
        self.fused = fusion.called[0]

    @property
    def root_dims(self) -> tuple[int, ...]:
        return self.fusion.shape.dims

    def bind(self, b: ir.IRBuilder, fn: ir.Function, blob: WeightsBlob,
             operands: Sequence[PointerArg]):
        """``apply(index, acc)``: the root's value at the core's element ``index`` (i64
        values, one per dim of the core's result) whose accumulator is ``acc``, emitted
        at ``b``; the kernel ``fn`` takes (out, operand..., weights), ``operands``
        describing its operand pointers."""
        em = ElementalEmitter(b, KernelConstants(blob, b, fn.args[-1]))
        gens = [buffer_reader(b, fn.args[0] if info.is_output else fn.args[1 + k], o.shape,
                              info.align)
                for k, (o, info) in enumerate(zip(self.fusion.operands, operands))]
        core_dims, root_dims = self.core.shape.dims, self.root_dims

        def apply(index: list, acc: ir.Value) -> ir.Value:
            # A generator per element: the memo of one never mixes two elements'
            # accumulators (LLVM merges the loads they share, a bias per row).
            root = em.computation_generator(self.fused, gens,
                                            overrides={self.core: lambda _: acc})
            if root_dims != core_dims:
                index = reshape_index(b, index, core_dims, root_dims)
            return root(index)
        return apply


def unpack(instr: Instruction) -> tuple[Instruction | None, StoreEpilogue | None]:
    """(the dot or convolution, None) for one, (its core, its epilogue) for an output
    fusion whose core reads parameters 0 and 1 and whose root is f32 of the core's
    element count, (None, None) for anything else."""
    if instr.opcode in (Opcode.DOT, Opcode.CONVOLUTION):
        return instr, None
    if not is_output_fusion(instr) or instr.shape.is_tuple:
        return None, None
    fused = instr.called[0]
    core = output_fusion_core(fused)
    if [o.opcode for o in core.operands] != [Opcode.PARAMETER] * 2 or \
            [o.attrs["number"] for o in core.operands] != [0, 1]:
        return None, None
    if instr.shape.dtype != core.shape.dtype or \
            instr.shape.num_elements != core.shape.num_elements:
        return None, None
    if instr.shape.dims != core.shape.dims and not (
            instr.shape.has_default_layout and core.shape.has_default_layout):
        return None, None
    return core, StoreEpilogue(instr, core)
