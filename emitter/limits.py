"""Does the model fit the target? Sizes against its address space and the code's indices.

Every buffer is addressed as a base pointer plus a byte offset (LLVM's getelementptr, a
signed pointer-sized integer), so no tensor, constant or arena may exceed PTRDIFF_MAX of
the triple (2 GiB - 1 on 32-bit targets), and all of them together must fit its
address space. The convolution kernels also keep output-pixel coordinates in 32-bit
lanes (kernels/conv/geometry.py, LaneCoords). A model past a limit would compile into
code that silently wraps around; it is an error naming the tensor instead.
"""
from __future__ import annotations

from math import prod

from ..hlo import Module, Opcode, XlacError
from ..optimizer.buffer_assignment import BufferAssignment
from .interface import ModelInterface
from .target import TargetInfo

# kernels/conv/geometry.py: LaneCoords holds output coordinates and pixel numbers as i32.
MAX_CONV_OUTPUT_PIXELS = (1 << 31) - 1


def _fmt(n: int) -> str:
    return f"{n:,} bytes"


def check_fits(module: Module, assignment: BufferAssignment, interface: ModelInterface,
               target: TargetInfo) -> None:
    """Raise XlacError for the first tensor, constant or arena the target cannot hold."""
    limit = target.max_object_bytes
    where = f"the {target.pointer_bits}-bit target {target.triple}"

    def too_big(what: str, size: int) -> XlacError:
        return XlacError(f"{what} takes {_fmt(size)}, more than one object can have on "
                         f"{where} ({_fmt(limit)})")

    for kind, ports in (("input", interface.inputs), ("output", interface.outputs)):
        for p in ports:
            if p.size_bytes > limit:
                dims = "x".join(map(str, p.dims)) or "scalar"
                raise too_big(f"{kind} '{p.name}' ({p.dtype.name}[{dims}])", p.size_bytes)
    weights = 0
    for comp in module.computations:
        for instr in comp.instructions:
            # The source model's node, where the instruction knows it.
            node = f" of {instr.metadata}" if instr.metadata is not None else ""
            for leaf in instr.shape.leaves():
                if leaf.byte_size > limit:
                    raise too_big(f"tensor %{instr.name}{node} ({leaf})", leaf.byte_size)
            if instr.opcode is Opcode.CONSTANT:
                weights += instr.shape.byte_size
            if instr.opcode is Opcode.CONVOLUTION:
                pixels = prod(instr.shape.dims[2:])
                if pixels > MAX_CONV_OUTPUT_PIXELS:
                    raise XlacError(
                        f"convolution %{instr.name}{node} ({instr.shape}) has {pixels:,} output "
                        f"pixels per image; the convolution kernels count pixels in 32 bits "
                        f"(at most {MAX_CONV_OUTPUT_PIXELS:,})")
    if assignment.arena_size > limit:
        raise too_big("the arena", assignment.arena_size)
    space = 1 << target.pointer_bits
    if weights + assignment.arena_size >= space:
        raise XlacError(f"the weights ({_fmt(weights)}) and the arena "
                        f"({_fmt(assignment.arena_size)}) together exceed the "
                        f"{target.pointer_bits}-bit address space of {target.triple}")
