"""Kernels for the compute-bound ops (dot, convolution), generated as LLVM IR.

Each kernel is one internal function ``void name(ptr out, ptr op0, ptr op1[, ptr scratch])``
over dense row-major arrays; the scratch argument exists iff ``scratch_bytes`` > 0.
``target`` needs only ``.vector_bytes`` (the SIMD register width that sizes the tiles).
"""
from __future__ import annotations

from llvmlite import ir

from ...hlo import Instruction, Opcode, XlacError
from .conv import conv_scratch_bytes, emit_conv
from .dot import dot_scratch_bytes, emit_dot

_EMITTERS = {Opcode.DOT: (emit_dot, dot_scratch_bytes),
             Opcode.CONVOLUTION: (emit_conv, conv_scratch_bytes)}


def _rule(instr: Instruction):
    try:
        return _EMITTERS[instr.opcode]
    except KeyError:
        raise XlacError(f"no kernel for opcode '{instr.opcode.text}' (%{instr.name})") from None


def emit_kernel(llvm_module: ir.Module, instr: Instruction, name: str, target) -> ir.Function:
    """Add the function ``name`` computing ``instr`` (a dot or a convolution)."""
    return _rule(instr)[0](llvm_module, instr, name, target)


def scratch_bytes(instr: Instruction, target) -> int:
    """Bytes of scratch memory the kernel of ``instr`` needs (0 if none)."""
    return _rule(instr)[1](instr, target)


__all__ = ["emit_kernel", "scratch_bytes"]
