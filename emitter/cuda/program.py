"""The CUDA program: the step list (emitter/steps.py) as device kernels and the table
of launches, copies and control flow that runtime_c/xlac_cuda.c carries out.

    program = build_program(steps, assignment, device_module, hooks, blob)
    program.kernels    # names, in the order of the kernel handles
    program.steps      # xlac_cuda_step records; program.ranges[0] is the whole run

A Loop step becomes a grid-stride kernel; a routine (sort, topk, scatter) a
one-thread kernel; a Copy a device-to-device copy; a While and a Conditional read
their predicate or index back to the host, which picks the steps that follow.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...hlo import Instruction, XlacError
from ...optimizer.buffer_assignment import BufferAssignment, BufferSlice
from ..abi import CUDA_ENUMS, CUDA_HEADER
from ..loops import PointerArg
from ..steps import Conditional, Copy, Kernel, Loop, While
from .kernels import WeightsBlob, launch_size, loop_kernel, routine_kernel

_SPACE, _OP = CUDA_ENUMS["xlac_cuda_space"], CUDA_ENUMS["xlac_cuda_op"]
ARENA, INPUT, OUTPUT, WEIGHTS = (_SPACE[f"XLAC_CUDA_{n}"]
                                 for n in ("ARENA", "INPUT", "OUTPUT", "WEIGHTS"))
LAUNCH, COPY, WHILE, IF, SWITCH = (_OP[f"XLAC_CUDA_{n}"]
                                   for n in ("LAUNCH", "COPY", "WHILE", "IF", "SWITCH"))
MAX_ARGS = int(re.search(r"#define XLAC_CUDA_MAX_ARGS (\d+)", CUDA_HEADER.read_text()).group(1))
# Device buffers (cuMemAlloc, the device arena) start on 256-byte boundaries.
DEVICE_ALIGN = 256
_SPACES = {"arena": ARENA, "input": INPUT, "output": OUTPUT}


@dataclass(frozen=True)
class LaunchArg:
    space: int
    index: int
    offset: int


@dataclass(frozen=True)
class StepRecord:
    op: int
    a: int = 0
    b: int = 0
    c: int = 0
    d: int = 0
    e: int = 0
    bytes: int = 0


@dataclass
class Program:
    kernels: list[str] = field(default_factory=list)
    kernel_params: list[int] = field(default_factory=list)   # .param count per kernel
    steps: list[StepRecord] = field(default_factory=list)
    ranges: list[tuple[int, int]] = field(default_factory=list)
    args: list[LaunchArg] = field(default_factory=list)


class _Builder:
    def __init__(self, assignment: BufferAssignment, llvm_module, hooks, blob: WeightsBlob,
                 prefix: str):
        self.assignment = assignment
        self.module = llvm_module
        self.hooks = hooks
        self.blob = blob
        self.prefix = prefix
        self.program = Program()

    # -- arguments --
    def arg(self, s: BufferSlice) -> LaunchArg:
        if s.space == "constant":
            return LaunchArg(WEIGHTS, 0, self.blob.offset_of(s.constant) + s.offset)
        return LaunchArg(_SPACES[s.space], s.index, s.offset)

    def args(self, slices) -> int:
        first = len(self.program.args)
        self.program.args.extend(self.arg(s) for s in slices)
        return first

    def weights_arg(self) -> LaunchArg:
        return LaunchArg(WEIGHTS, 0, 0)

    def align(self, s: BufferSlice, itemsize: int) -> int:
        base = {"arena": DEVICE_ALIGN, "constant": 64}.get(s.space, itemsize)
        align = base
        while align > 1 and s.offset % align:
            align //= 2
        return align

    # -- steps --
    def range_of(self, steps) -> int:
        """Record ``steps`` (nested ranges first, so each range is contiguous) and
        return the number of their range."""
        records = [self.step(s) for s in steps]
        first = len(self.program.steps)
        self.program.steps.extend(records)
        self.program.ranges.append((first, len(records)))
        return len(self.program.ranges) - 1

    def step(self, s) -> StepRecord:
        if isinstance(s, (Loop, Kernel)):
            return self.launch(s)
        if isinstance(s, Copy):
            first = self.args([s.dst, s.src])
            return StepRecord(COPY, b=first, bytes=s.instr.shape.byte_size)
        if isinstance(s, While):
            cond = self.range_of(s.condition)
            body = self.range_of(s.body)
            return StepRecord(WHILE, a=self.args([s.predicate]), b=cond, c=body)
        assert isinstance(s, Conditional)
        ranges = [self.range_of(branch) for branch in s.branches]
        # The branch ranges must be consecutive: record them again in order.
        first = len(self.program.ranges)
        self.program.ranges.extend(self.program.ranges[r] for r in ranges)
        op = IF if s.instr.operands[0].shape.dtype.is_pred else SWITCH
        return StepRecord(op, a=self.args([s.index]), b=first, c=len(ranges))

    def launch(self, s: Loop | Kernel) -> StepRecord:
        instr: Instruction = s.instr
        leaves = s.result if isinstance(s.result, tuple) else (s.result,)
        out = leaves[0]
        size = instr.shape.byte_size
        item = instr.shape.leaves()[0].dtype.itemsize
        operands = [(p, instr.operands[k].shape) for p, k in zip(s.operands, s.passed)]
        in_place = [p.start == out.start and o.byte_size == size for p, o in operands]
        # noalias where no other pointer of the launch touches the bytes: the loads
        # then go through the read-only cache (ld.global.nc).
        out_arg = PointerArg(self.align(out, item),
                             not any(out.overlaps(size, p, o.byte_size)
                                     for (p, o), same in zip(operands, in_place) if not same))
        operand_args = [PointerArg(out_arg.align, False, True) if same else
                        PointerArg(self.align(p, o.leaves()[0].dtype.itemsize
                                              if o.leaves() else 1),
                                   not p.overlaps(o.byte_size, out, size))
                        for (p, o), same in zip(operands, in_place)]
        offsets = [leaf.offset - out.offset for leaf in leaves]
        # PTX names: letters, digits and underscores; the number keeps them apart.
        clean = re.sub(r"\W", "_", instr.name)
        name = f"{self.prefix}k{len(self.program.kernels)}_{clean}"
        slices = [out, *s.operands]
        if isinstance(s, Loop):
            fn, elements = loop_kernel(self.module, instr, name, self.hooks, self.blob,
                                       out_arg, operand_args, offsets)
            blocks, threads = launch_size(elements)
        elif s.kernel.kind == "device":
            # A kernel of the backend's own (emitter/cuda/: a tiled dot, ...): its plan
            # emits it and says how it is launched.
            fn, blocks, threads = s.kernel.plan.emit(self.module, instr, name, self.hooks,
                                                     self.blob, out_arg, operand_args)
        else:
            if s.kernel.kind != "routine":
                raise XlacError(f"%{instr.name}: the CUDA backend has no {s.kernel.name} kernel")
            if s.scratch is not None:
                slices.append(s.scratch)
            fn = routine_kernel(self.module, instr, name, self.hooks, self.blob, s.kernel.plan,
                                out_arg, operand_args, offsets, s.scratch is not None)
            blocks, threads = 1, 1
        params = len(slices) + 1
        if params > MAX_ARGS:
            raise XlacError(f"%{instr.name}: {params} kernel arguments; the CUDA runtime "
                            f"passes at most {MAX_ARGS}")
        first = self.args(slices)
        self.program.args.append(self.weights_arg())
        self.program.kernels.append(fn.name)
        self.program.kernel_params.append(params)
        return StepRecord(LAUNCH, a=len(self.program.kernels) - 1, b=first, c=params,
                          d=blocks, e=threads)


def build_program(steps, assignment: BufferAssignment, llvm_module, hooks,
                  blob: WeightsBlob, prefix: str) -> Program:
    """Kernels for ``steps`` in ``llvm_module``, and the program that runs them; range 0
    is the whole run."""
    b = _Builder(assignment, llvm_module, hooks, blob, prefix)
    # The whole run must be range 0: reserve it, fill it last.
    b.program.ranges.append((0, 0))
    records = [b.step(s) for s in steps]
    first = len(b.program.steps)
    b.program.steps.extend(records)
    b.program.ranges[0] = (first, len(records))
    return b.program
