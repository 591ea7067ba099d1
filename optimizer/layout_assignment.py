"""Layout assignment for integer convolutions: channels minor (NHWC in memory).

The integer kernels reduce four consecutive input channels of one pixel per instruction
(vpdpbusd, sdot, smlad on a 32-bit word: emitter/kernels/qconv.py) and vectorize over
output channels; ONNX's NCHW puts consecutive channels a whole image apart. So the
output fusion of an integer convolution (optimizer/fusion.py) takes its input and
writes its result with the channels as the minor dim: layout {1, 3, 2, 0} for the
dims N, C, H, W (minor_to_major, as XLA writes it). Logical shapes do not change;
only where elements lie in memory does.

Rules:
  - a convolution fusion's result takes the layout unless it is a model output (the C
    interface is row-major);
  - its input takes the layout where its producer computes in a loop (any layout costs
    a loop nothing: it iterates in memory order) and every other reader is
    layout-agnostic (element-wise loops, reductions, output fusions); otherwise a copy
    into the layout is inserted before the fusion (XLA's layout conversion).
Bitcasts (same bytes), dot and convolution kernels and views of other readers pin a
value's layout.
"""
from __future__ import annotations

from ..hlo import ConvDimensionNumbers, Computation, Instruction, Module, Opcode, Shape
from ..hlo.opcodes import ELEMENTWISE, MOVEMENT
from .aliasing import view_offset
from .fusion import is_output_fusion, output_fusion_core

# Readers whose code indexes their operands logically (element generators).
_AGNOSTIC = ELEMENTWISE | MOVEMENT | {Opcode.REDUCE, Opcode.REDUCE_WINDOW, Opcode.IOTA}
# Producers emitted as a loop over their result (in any layout).
_LOOPS = ELEMENTWISE | MOVEMENT | {Opcode.REDUCE, Opcode.REDUCE_WINDOW, Opcode.FUSION}


class ChannelsMinorLayout:
    name = "layout-assignment"

    def run(self, module: Module) -> bool:
        comp = module.entry
        pinned = set(module.output_instructions) | {comp.root}
        changed = False
        for fusion in [i for i in comp.instructions if channels_minor_conv(i)]:
            if fusion not in pinned and not _is_channels_minor(fusion.shape):
                fusion.shape = channels_minor(fusion.shape)
                changed = True
            changed |= _input_in_layout(comp, fusion, pinned)
        return changed


def channels_minor(shape: Shape) -> Shape:
    """``shape`` (N, C, spatial...) with the channels as the minor dim, then the spatial
    dims from the last, then the batch."""
    rank = shape.rank
    return Shape.array(shape.dtype, shape.dims, (1,) + tuple(range(rank - 1, 1, -1)) + (0,))


def _is_channels_minor(shape: Shape) -> bool:
    return shape.layout == channels_minor(shape).layout


def channels_minor_conv(instr: Instruction) -> bool:
    """An output fusion around an integer convolution over N C spatial... tensors: the
    ones whose tensors the pass lays out channels minor."""
    if not is_output_fusion(instr):
        return False
    core = output_fusion_core(instr.called[0])
    return (core.opcode is Opcode.CONVOLUTION and core.shape.rank >= 3
            and core.attrs["dimension_numbers"] == ConvDimensionNumbers.nchw(core.shape.rank - 2)
            and core.shape.dtype.is_integer)


def _input_position(fusion: Instruction) -> int:
    """The operand number of the convolution's input (through the fused pad, if any)."""
    fused = fusion.called[0]
    x = output_fusion_core(fused).operands[0]
    if x.opcode is Opcode.PAD:
        x = x.operands[0]
    return x.number


def _agnostic_reader(user: Instruction, value: Instruction) -> bool:
    """Whether ``user`` reads ``value`` in any layout: through element generators, or as
    the input of a channels-minor convolution."""
    if is_output_fusion(user):
        fused = user.called[0]
        core = output_fusion_core(fused)
        param = fused.parameters[user.operands.index(value)]
        feeds_core = param in core.operands or any(
            o.opcode is Opcode.PAD and o.operands[0] is param for o in core.operands)
        return not feeds_core or (channels_minor_conv(user)
                                  and param.number == _input_position(user))
    if user.opcode is Opcode.FUSION:
        return user.attrs["kind"] == "kLoop"
    return user.opcode in _AGNOSTIC and user.opcode is not Opcode.BITCAST


def _input_in_layout(comp: Computation, fusion: Instruction, pinned) -> bool:
    k = _input_position(fusion)
    x = fusion.operands[k]
    if _is_channels_minor(x.shape):
        return False
    users = comp.users()[x]
    if (x.opcode in _LOOPS and x not in pinned and not x.shape.is_tuple
            and not (x.opcode is Opcode.FUSION and x.attrs["kind"] != "kLoop"
                     and not channels_minor_conv(x))
            and x.opcode is not Opcode.BITCAST
            and all(_agnostic_reader(u, x) for u in users)
            and view_offset(x) is None):
        x.shape = channels_minor(x.shape)
        return True
    copy = comp.add(Instruction(Opcode.COPY, channels_minor(x.shape), [x], name="copy",
                                metadata=x.metadata))
    fusion.operands[k] = copy
    comp.sort()
    return True
