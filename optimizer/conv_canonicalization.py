"""Convolution canonicalization: a convolution over other dimension orders (JAX's NHWC
input and HWIO kernel, say) becomes one over ONNX's order, bf01_oi01->bf01, which the
fast convolution kernels take, between transposes, as XLA's CPU backend does
(ConvCanonicalization). The kernel's transpose folds away where the kernel is a
constant; the input's and the result's are copies whose cost the convolution dwarfs.
"""
from __future__ import annotations

from ..hlo import Computation, ConvDimensionNumbers, Instruction, Opcode, Shape
from .pipeline import ComputationPass
from .rewrite import apply_replacements


class ConvCanonicalization(ComputationPass):
    name = "conv-canonicalization"

    def run_on_computation(self, comp: Computation) -> bool:
        replaced = {instr: _canonical(comp, instr) for instr in list(comp.instructions)
                    if _other_order(instr)}
        if replaced:
            apply_replacements(comp, replaced)
        return bool(replaced)


def _other_order(instr: Instruction) -> bool:
    if instr.opcode is not Opcode.CONVOLUTION:
        return False
    dn = instr.attrs["dimension_numbers"]
    return (dn != ConvDimensionNumbers.nchw(len(dn.input_spatial))
            and all(o.shape.has_default_layout for o in [instr, *instr.operands]))


def _transpose(comp: Computation, x: Instruction, perm: tuple[int, ...]) -> Instruction:
    if perm == tuple(range(len(perm))):
        return x
    shape = Shape.array(x.shape.dtype, tuple(x.shape.dims[d] for d in perm))
    return comp.add(Instruction(Opcode.TRANSPOSE, shape, [x], {"dimensions": perm}))


def _canonical(comp: Computation, conv: Instruction) -> Instruction:
    dn = conv.attrs["dimension_numbers"]
    x, k = conv.operands
    x_order = (dn.input_batch, dn.input_feature, *dn.input_spatial)
    k_order = (dn.kernel_output, dn.kernel_input, *dn.kernel_spatial)
    out_order = (dn.output_batch, dn.output_feature, *dn.output_spatial)
    attrs = dict(conv.attrs, dimension_numbers=ConvDimensionNumbers.nchw(len(dn.input_spatial)))
    shape = Shape.array(conv.shape.dtype, tuple(conv.shape.dims[d] for d in out_order))
    canonical = comp.add(Instruction(Opcode.CONVOLUTION, shape, [
        _transpose(comp, x, x_order), _transpose(comp, k, k_order)], attrs,
        metadata=conv.metadata))
    back = tuple(out_order.index(d) for d in range(len(out_order)))
    return _transpose(comp, canonical, back)
