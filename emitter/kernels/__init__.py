"""Kernels for the compute-bound ops (dot, convolution), generated as LLVM IR.

Each kernel is one internal function
``void name(ptr out, ptr op0, ptr op1[, ptr op2...][, ptr scratch], i64 size...)`` over
dense row-major arrays (op2... are what an output fusion's epilogue reads: a float
convolution's or dot's bias, scale, activation bounds and residual); the scratch
argument exists iff ``scratch_bytes`` > 0, and the trailing i64 arguments are
``kernel_arguments(instr, target)``. Instructions with equal
``kernel_key`` run the same function with their own arguments (function.py).
``target`` needs only ``.vector_bytes`` (the SIMD register width that sizes the tiles).
"""
from __future__ import annotations

from typing import Hashable

from llvmlite import ir

from ...hlo import Instruction, Opcode, XlacError
from ...hlo.fusion import is_output_fusion
from .conv import plan_conv, plan_conv_fusion
from .dot import plan_dot, plan_dot_fusion
from .function import KernelPlan, kernel_function

_EMITTERS = {Opcode.DOT: plan_dot, Opcode.CONVOLUTION: plan_conv}


def is_kernel(instr: Instruction, target) -> bool:
    """Whether ``instr`` runs as a kernel: a dot, a convolution, or an output fusion
    whose epilogue a float kernel applies (conv.plan_conv_fusion, dot.plan_dot_fusion)."""
    if instr.opcode in _EMITTERS:
        return True
    return is_output_fusion(instr) and _plan_fusion(instr, target) is not None


def _plan_fusion(instr: Instruction, target, lean: bool = False) -> KernelPlan | None:
    return plan_conv_fusion(instr, target, lean) or plan_dot_fusion(instr, target)


def plan_kernel(instr: Instruction, target, lean: bool = False) -> KernelPlan:
    """The shared code (``spec``) and the run-time sizes of the kernel of ``instr``.
    ``lean`` asks for a variant that needs no scratch, where one exists (convolutions);
    otherwise it changes nothing."""
    plan = _EMITTERS.get(instr.opcode)
    if plan is not None:
        return plan(instr, target, lean)
    fused = _plan_fusion(instr, target, lean) if instr.opcode is Opcode.FUSION else None
    if fused is None:
        raise XlacError(f"no kernel for opcode '{instr.opcode.text}' (%{instr.name})")
    return fused


def kernel_key(instr: Instruction, target, lean: bool = False) -> tuple[Opcode, Hashable]:
    """Instructions with equal keys can call one function (with their own arguments):
    the opcode and the spec the code is compiled from."""
    return instr.opcode, plan_kernel(instr, target, lean).spec


def emit_kernel(llvm_module: ir.Module, instr: Instruction, name: str, target,
                lean: bool = False) -> ir.Function:
    """Add the function ``name`` computing ``instr`` (a dot or a convolution) and every
    instruction with the same ``kernel_key``."""
    return kernel_function(llvm_module, name, plan_kernel(instr, target, lean).spec)


def kernel_arguments(instr: Instruction, target, lean: bool = False) -> list[int]:
    """The i64 values a call passes after the pointers (the sizes of ``instr``)."""
    return plan_kernel(instr, target, lean).arguments


def scratch_bytes(instr: Instruction, target, lean: bool = False) -> int:
    """Bytes of scratch memory the kernel of ``instr`` needs (0 if none)."""
    return plan_kernel(instr, target, lean).scratch_bytes


__all__ = ["emit_kernel", "is_kernel", "kernel_arguments", "kernel_key", "plan_kernel",
           "scratch_bytes"]
