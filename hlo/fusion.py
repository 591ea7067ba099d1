"""What a fusion instruction is: its kind, and what an output fusion holds.

Fusion passes (optimizer/fusion.py) make these instructions and the emitter's kernels
read them; both ask the questions here, so the two cannot disagree on what a fusion
holds.
"""
from __future__ import annotations

from enum import Enum

from .ir import Computation, Instruction
from .opcodes import Opcode
from .shape import Shape


class FusionKind(str, Enum):
    """``kind=`` of a fusion (XLA's names). A str, so the text form and equality with
    the names hold."""
    LOOP = "kLoop"       # one loop nest over the root's elements, of element generators
    INPUT = "kInput"     # (parsed for XLA's dumps; no pass makes it)
    OUTPUT = "kOutput"   # a dot or convolution and the epilogue its kernel applies

    def __str__(self) -> str:
        return self.value


def is_fusion(instr: Instruction, kind: FusionKind) -> bool:
    return instr.opcode is Opcode.FUSION and instr.attrs.get("kind") == kind


def is_output_fusion(instr: Instruction) -> bool:
    return is_fusion(instr, FusionKind.OUTPUT)


def is_loop_fusion(instr: Instruction) -> bool:
    return is_fusion(instr, FusionKind.LOOP)


def output_fusion_core(fused: Computation) -> Instruction:
    """The dot or convolution of an output fusion's computation."""
    return next(i for i in fused.instructions
                if i.opcode in (Opcode.DOT, Opcode.CONVOLUTION))


def output_channel_dim(core: Instruction, shape: Shape | None = None) -> int:
    """The result dim of a dot / convolution that per-channel epilogue values vary along:
    the output feature of a convolution, the last dim of a dot (of ``shape``, where the
    epilogue reshaped the dot's result, keeping its last dim: ``keeps_columns``)."""
    if core.opcode is Opcode.CONVOLUTION:
        return core.attrs["dimension_numbers"].output_feature
    return (shape or core.shape).rank - 1


def epilogue_operand(v: Instruction, core: Instruction, shape: Shape | None = None) -> bool:
    """Whether an output fusion's epilogue may read ``v`` beside its chain: a scalar, a
    value of the accumulators' dims (or of ``shape``, the dims the epilogue is at, read
    at the same element), or a broadcast to them that varies along the output channels
    only."""
    dims = (shape or core.shape).dims
    if v.shape.is_tuple:
        return False
    if v.shape.rank == 0 or v.shape.dims == dims:
        if v.opcode is not Opcode.BROADCAST:
            return True
    if v.opcode is not Opcode.BROADCAST or v.shape.dims != dims:
        return False
    channel = output_channel_dim(core, shape)
    o = v.operands[0].shape
    return all(n == 1 or d == channel for n, d in zip(o.dims, v.attrs["dimensions"]))


def keeps_columns(u: Instruction, cur: Instruction, core: Instruction) -> bool:
    """Whether ``u`` reshapes a float dot's running value ``cur`` keeping its last dim
    and the row-major order (how the ONNX importer gives a 3-D MatMul its batch dims
    back): element i stays element i and its channel, so the kernel stores as before."""
    return (core.opcode is Opcode.DOT and u.opcode is Opcode.RESHAPE
            and u.shape.rank >= 1 and u.shape.dims[-1] == cur.shape.dims[-1]
            and u.shape.has_default_layout and cur.shape.has_default_layout)
