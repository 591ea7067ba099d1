"""The CUDA backend: kernels for an NVIDIA GPU and a host object that launches them.

    backend = make_backend("cuda", cpu="sm_90")        # backends/
    optimize(module, backend); assignment = plan_memory(module, backend)
    artifact = backend.emit(module, assignment, EmitOptions("model"))

Two targets: the host's (the object's own code: the program table and the entries,
which call runtime_c/xlac_cuda.c) and ``nvptx64-nvidia-cuda`` at the chosen
architecture (``--cpu``, sm_80 by default) for the kernels. Every instruction runs as
a loop of element generators, one grid-stride kernel per step (emitter/cuda/), except
f32 dots, which run a tiled shared-memory kernel (emitter/cuda/dot.py), f32 2-D
convolutions, which run it as implicit GEMM where their groups are worth a GEMM and a
direct kernel where they are narrower (depthwise; emitter/cuda/conv.py),
and sort, topk and scatter, which run their CPU routine in one thread. The dot and
convolution kernels take the element-wise ops after them (``EpilogueStyle.REGISTERS``:
bias, activation, residual, a folded BatchNorm, GELU): the optimizer's output fusion puts
them into one fusion, whose kernel's store applies them (emitter/cuda/epilogue.py). No
operand layout is asked for.

``emulated``: the kernels are also compiled for the host, into an image a stand-in
driver runs (tests/cuda), so the whole path runs on machines without a GPU.
"""
from __future__ import annotations

from ..emitter import sort
from ..emitter.cuda.conv import plan_conv
from ..emitter.cuda.dot import plan_dot
from ..emitter.cuda.render import render_cuda
from ..emitter.kernels.epilogue import EPILOGUE_OPS
from ..emitter.render import Artifact, EmitOptions
from ..emitter.scatter import emit_scatter_function
from ..emitter.sort import emit_sort_function, emit_topk_function
from ..emitter.target import TargetInfo, make_target
from ..hlo import Instruction, Module, Opcode, XlacError
from ..optimizer.buffer_assignment import BufferAssignment
from ..optimizer.policy import EpilogueStyle, FusionPolicy, LayoutConstraint
from .cpu import KernelChoice

# At most this many ops in a kernel's epilogue: the store applies it to each element of a
# thread's micro-tile (16 of them), unrolled.
MAX_EPILOGUE = 16

DEVICE_TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_80"
# Element buffers in the device arena start on this many bytes: a 16-byte access of any
# element type never straddles.
ARENA_ALIGN = 16

_ROUTINES = {Opcode.SORT: emit_sort_function, Opcode.TOPK: emit_topk_function,
             Opcode.SCATTER: emit_scatter_function}
# Kernels of this backend's own, tried in order: plan(instr) -> a plan with
# ``emit(module, instr, name, hooks, weights, out, operands) -> (fn, blocks, threads)``
# (the kernel takes out, every operand, then the weights), or None.
_DEVICE_KERNELS: tuple = (plan_dot,       # emitter/cuda/dot.py: tiled f32 dots
                           plan_conv)      # emitter/cuda/conv.py: implicit GEMM, direct


def is_cuda_target(triple: str | None) -> bool:
    return triple is not None and (triple in ("cuda", "cuda-emulated")
                                   or triple.startswith("nvptx"))


class CudaBackend:
    name = "cuda"

    def __init__(self, host: TargetInfo, host_machine, device: TargetInfo, device_machine,
                 opt_level: int = 2, emulated: bool = False):
        self.target = host                  # the host object's
        self.machine = host_machine
        self.device = device
        self.device_machine = device_machine
        self.opt_level = opt_level
        self.emulated = emulated
        self.fusion = FusionPolicy(EPILOGUE_OPS, MAX_EPILOGUE)
        self.soft_float = False
        self.convolutions_in_onnx_order = False    # emitter/cuda/conv: any dimension order

    # -- the optimizer's questions (optimizer/policy.py) ---------------------------------

    @property
    def alignment(self) -> int:
        return ARENA_ALIGN

    def epilogue_style(self, core: Instruction) -> EpilogueStyle | None:
        """REGISTERS for an f32 dot or convolution that a kernel of this backend's takes
        (plan_dot / plan_conv: its store applies the epilogue); None for the rest, which
        run as loops."""
        plan = {Opcode.DOT: plan_dot, Opcode.CONVOLUTION: plan_conv}.get(core.opcode)
        if plan is None or core.shape.is_tuple or plan(core) is None:
            return None
        return EpilogueStyle.REGISTERS

    def kernel_reads_operands(self, instr: Instruction) -> bool:
        return False

    def dot_folds_transpose(self, dot: Instruction) -> bool:
        return False

    def layout_constraint(self, instr: Instruction) -> LayoutConstraint | None:
        return None

    def scratch_bytes(self, instr: Instruction, lean: bool = False) -> int:
        return sort.scratch_bytes(instr) if instr.opcode is Opcode.SORT else 0

    # -- the kernel registry -------------------------------------------------------------

    def kernel(self, instr: Instruction, lean: bool = False) -> KernelChoice | None:
        for plan_kernel in _DEVICE_KERNELS:
            plan = plan_kernel(instr)
            if plan is not None:
                return KernelChoice("device", type(plan).__name__, plan,
                                    tuple(range(len(instr.operands))))
        routine = _ROUTINES.get(instr.opcode)
        if routine is None:
            return None
        passed = tuple(k for k, o in enumerate(instr.operands) if o.opcode is not Opcode.CONSTANT)
        return KernelChoice("routine", instr.opcode.text, routine, passed,
                            self.scratch_bytes(instr))

    # -- code -----------------------------------------------------------------------------

    def emit(self, module: Module, assignment: BufferAssignment, options: EmitOptions,
             kinds=("obj",)) -> Artifact:
        calls = [i.attrs["custom_call_target"] for c in module.computations
                 for i in c.instructions if i.opcode is Opcode.CUSTOM_CALL]
        if calls:
            raise XlacError(f"the program calls {', '.join(sorted(set(calls)))} (custom "
                            "calls): the CUDA target runs no host functions; compile for "
                            "the CPU")
        return render_cuda(self, module, assignment, options, kinds)

    @staticmethod
    def for_target(triple: str, cpu: str | None, features: str | None,
                   opt_level: int) -> "CudaBackend":
        host, host_machine = make_target(None, None, None, opt_level)
        device, device_machine = make_target(DEVICE_TRIPLE, cpu or DEFAULT_ARCH, features,
                                             opt_level)
        return CudaBackend(host, host_machine, device, device_machine, opt_level,
                           emulated=triple == "cuda-emulated")
