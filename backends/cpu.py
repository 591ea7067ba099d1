"""The CPU backend: one object for everything that differs between targets.

    backend = make_backend("aarch64-unknown-linux-gnu", cpu="cortex-a76")   # backends/
    optimize(module, backend)                     # its fusion and layout policy
    assignment = plan_memory(module, backend)     # its alignment and kernel scratch
    artifact = backend.emit(module, assignment, EmitOptions("model"))

``CpuBackend`` owns the target (triple, CPU, features, vector width, registers: a
``TargetInfo`` and LLVM's TargetMachine), answers the optimizer's questions
(optimizer/policy.py: which kernels take which epilogues, which operands they read from
memory, which layouts they want, how much scratch they need) and keeps the kernel
registry: ``kernel(instr)`` is the one place that says which instructions run as
kernels and which as loops of element generators. ``emit`` builds the step list
(emitter/steps.py) and renders it (emitter/render.py). A second backend (CUDA)
implements the same methods and renders the same steps its own way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..emitter import kernels, sort
from ..emitter.kernels.conv import has_fast_path
from ..emitter.kernels.dot import columns_are_channels
from ..emitter.kernels.epilogue import EPILOGUE_OPS
from ..emitter.kernels.qconv import channels_minor_input, plan_quantized
from ..emitter.custom_call import emit_custom_call_function
from ..emitter.render import Artifact, EmitOptions, render
from ..emitter.scatter import emit_scatter_function
from ..emitter.sort import emit_sort_function, emit_topk_function
from ..emitter.target import TargetInfo, make_target
from ..hlo import Instruction, Module, Opcode, dtypes
from ..hlo.shape import channels_minor
from ..optimizer.buffer_assignment import BufferAssignment
from ..optimizer.policy import EpilogueStyle, FusionPolicy, LayoutConstraint

# At most this many ops in a float kernel's epilogue: each kernel inlines it in every
# tile shape.
MAX_EPILOGUE = 24


@dataclass(frozen=True)
class KernelChoice:
    """What runs one instruction that is not a loop: a dot or convolution kernel (the
    ``plan`` a KernelPlan: a shared function of its spec), a quantized kernel compiled
    for its layer (a QuantizedKernel), or a routine of its own (sort, topk, scatter:
    ``plan`` the function that emits it)."""
    kind: str                          # 'kernel' | 'quantized' | 'routine'
    name: str                          # what --emit steps prints
    plan: object
    passed: tuple[int, ...]            # the operands it takes, in order
    scratch_bytes: int = 0


_ROUTINES: dict[Opcode, Callable] = {Opcode.SORT: emit_sort_function,
                                     Opcode.TOPK: emit_topk_function,
                                     Opcode.SCATTER: emit_scatter_function,
                                     Opcode.CUSTOM_CALL: emit_custom_call_function}


class CpuBackend:
    name = "cpu"

    def __init__(self, target: TargetInfo, machine, opt_level: int = 2):
        self.target = target
        self.machine = machine          # llvmlite's TargetMachine
        self.opt_level = opt_level
        self.fusion = FusionPolicy(EPILOGUE_OPS, MAX_EPILOGUE)
        self.convolutions_in_onnx_order = True     # emitter/kernels/conv: NCHW, OIHW

    # -- the optimizer's questions (optimizer/policy.py) ---------------------------------

    @property
    def soft_float(self) -> bool:
        family = self.target.triple.split("-", 1)[0]
        if family.startswith(("thumb", "arm")):
            return "+fpregs" not in self.target.required
        if family.startswith("riscv"):
            return "+f" not in self.target.required
        return False

    @property
    def alignment(self) -> int:
        return self.target.arena_align

    def epilogue_style(self, core: Instruction) -> EpilogueStyle | None:
        if core.shape.is_tuple:
            return None
        if core.shape.dtype.is_integer:
            return EpilogueStyle.REQUANTIZE     # kernels/qconv.py, else an element loop
        if has_fast_path(core) or columns_are_channels(core):
            return EpilogueStyle.REGISTERS      # kernels/epilogue.py
        return None

    def kernel_reads_operands(self, instr: Instruction) -> bool:
        return instr.opcode in (Opcode.DOT, Opcode.CONVOLUTION)

    def dot_folds_transpose(self, dot: Instruction) -> bool:
        # The f32 kernels take any strides (B's rows contiguous, as K^T in attention, are
        # packed by columns) with one contracting dim (they merge any other into it).
        return (dot.shape.dtype == dtypes.F32
                and len(dot.attrs["dimension_numbers"].lhs_contracting) == 1)

    def layout_constraint(self, instr: Instruction) -> LayoutConstraint | None:
        k = channels_minor_input(instr)
        if k is None:
            return None
        return LayoutConstraint(k, channels_minor(instr.operands[k].shape).layout,
                                channels_minor(instr.shape).layout)

    def scratch_bytes(self, instr: Instruction, lean: bool = False) -> int:
        if instr.opcode is Opcode.SORT:
            return sort.scratch_bytes(instr)
        if not kernels.is_kernel(instr, self.target):
            return 0
        return kernels.scratch_bytes(instr, self.target, lean)

    # -- the kernel registry -------------------------------------------------------------

    def kernel(self, instr: Instruction, lean: bool = False) -> KernelChoice | None:
        """What runs ``instr``, or None: a loop of element generators. ``lean``: the
        variant with the least scratch (the planner's ``lean_kernels``)."""
        if kernels.is_kernel(instr, self.target):
            plan = kernels.plan_kernel(instr, self.target, lean)
            return KernelChoice("kernel", type(plan.spec).__name__, plan,
                                tuple(range(len(instr.operands))), plan.scratch_bytes)
        routine = _ROUTINES.get(instr.opcode)
        if routine is not None:
            # a custom call's function reads constants from memory too
            passed = (tuple(range(len(instr.operands))) if instr.opcode is Opcode.CUSTOM_CALL
                      else _not_constant(instr))
            return KernelChoice("routine", instr.opcode.text, routine, passed,
                                self.scratch_bytes(instr))
        quantized = plan_quantized(instr, self.target)
        if quantized is not None:
            return KernelChoice("quantized", quantized.name, quantized, tuple(quantized.passed))
        return None

    # -- code -----------------------------------------------------------------------------

    def emit(self, module: Module, assignment: BufferAssignment, options: EmitOptions,
             kinds=("obj",)) -> Artifact:
        """The object code, assembly or LLVM IR (``kinds``) and the header of ``module``
        (emitter/render.py)."""
        return render(self, module, assignment, options, kinds)

    @staticmethod
    def for_target(triple: str | None, cpu: str | None, features: str | None,
                   opt_level: int) -> "CpuBackend":
        target, machine = make_target(triple, cpu, features, opt_level)
        return CpuBackend(target, machine, opt_level)


def _not_constant(instr: Instruction) -> tuple[int, ...]:
    return tuple(k for k, o in enumerate(instr.operands) if o.opcode is not Opcode.CONSTANT)
