"""What the generic passes and the memory planner ask of a backend.

A backend (``backends.CpuBackend``; a CUDA one later) knows which instructions its
kernels compute, what they absorb, which layouts they read and how much scratch they
need. The passes hold the algorithms and ask it these questions; no pass names a
CPU fact. As XLA's generic passes take their backend's callbacks (TransposeFolding's
``CanFoldTransposeOperand``, a fusion pass's ``ShouldFuse``), these are the seams.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from ..hlo import Instruction, Opcode


class EpilogueStyle(Enum):
    """How a kernel takes in the element-wise ops after its dot or convolution
    (``OutputFusion``)."""
    # An integer contraction: the chain after it cut back to its narrowest value (the
    # requantization) and the constant pad of its input.
    REQUANTIZE = "requantize"
    # A float kernel: the f32 ops it applies to its results in registers, any DAG of
    # ``FusionPolicy.epilogue_ops`` with one exit.
    REGISTERS = "registers"


@dataclass(frozen=True)
class FusionPolicy:
    """What a backend's kernels apply around their dot or convolution."""
    epilogue_ops: frozenset[Opcode]     # a REGISTERS epilogue's ops
    max_epilogue: int                   # at most this many in one


@dataclass(frozen=True)
class LayoutConstraint:
    """The layouts (minor_to_major) a kernel reads one operand in and writes its result in
    (``LayoutAssignment``)."""
    operand: int
    operand_layout: tuple[int, ...]
    result_layout: tuple[int, ...]


class BackendPolicy(Protocol):
    """The questions of the optimizer's passes (``make_pipeline``)."""
    fusion: FusionPolicy
    # f32 arithmetic is a library call on the target (no FPU): ``QuantizedArithmetic``
    # requantizes in fixed point where that gives the float path's integers.
    soft_float: bool
    # The convolution kernels take ONNX's dimension order only (bf01_oi01->bf01):
    # ``ConvCanonicalization`` transposes other orders onto it.
    convolutions_in_onnx_order: bool

    def epilogue_style(self, core: Instruction) -> EpilogueStyle | None:
        """How the kernel of the dot or convolution ``core`` takes the ops after it,
        None where it takes none."""

    def kernel_reads_operands(self, instr: Instruction) -> bool:
        """Whether ``instr`` runs as a kernel that reads its operands from memory: a known
        operand of it must be a real constant (``ConstantFolding``)."""

    def dot_folds_transpose(self, dot: Instruction) -> bool:
        """Whether the dot kernel reads an operand through any strides, so a transpose
        of it folds into the dot's dimension numbers (``AlgebraicSimplifier``)."""

    def layout_constraint(self, instr: Instruction) -> LayoutConstraint | None:
        """The layouts the kernel of ``instr`` wants, if any (``LayoutAssignment``)."""


class MemoryPolicy(Protocol):
    """The questions of the memory planner (``plan_memory``)."""
    alignment: int                      # of every arena buffer: NAME_ARENA_ALIGN

    def scratch_bytes(self, instr: Instruction, lean: bool = False) -> int:
        """Bytes of temporary memory the kernel of ``instr`` needs while it runs (0 if
        none); ``lean``: its variant with the least scratch."""
