"""Layout assignment: the layouts a backend's kernels read and write.

A backend may want a kernel's result and one of its operands in a layout of its own
(``BackendPolicy.layout_constraint``): the CPU's integer convolutions take their input
and write their result channels minor (NHWC in memory, layout {1, 3, 2, 0} for N, C,
H, W as XLA writes minor_to_major). Logical shapes do not change; only where elements
lie in memory does.

Rules:
  - a constrained instruction's result takes its layout unless it is a model output
    (the C interface is row-major);
  - its operand takes the layout where its producer computes in a loop (any layout
    costs a loop nothing: it iterates in memory order) and every other reader is
    layout-agnostic (element-wise loops, reductions, output fusions reading it beside
    their kernel's operands, a kernel constrained to the same layout); otherwise a copy
    into the layout is inserted before it (XLA's layout conversion).
Bitcasts (same bytes), dot and convolution kernels and views of other readers pin a
value's layout.
"""
from __future__ import annotations

from ..hlo import Computation, Instruction, Module, Opcode, Shape
from ..hlo.fusion import is_loop_fusion, is_output_fusion, output_fusion_core
from ..hlo.opcodes import ELEMENTWISE, MOVEMENT
from .aliasing import view_offset
from .policy import BackendPolicy, LayoutConstraint

# Readers whose code indexes their operands logically (element generators).
_AGNOSTIC = ELEMENTWISE | MOVEMENT | {Opcode.REDUCE, Opcode.REDUCE_WINDOW, Opcode.IOTA}
# Producers emitted as a loop over their result (in any layout).
_LOOPS = ELEMENTWISE | MOVEMENT | {Opcode.REDUCE, Opcode.REDUCE_WINDOW, Opcode.FUSION}


class LayoutAssignment:
    name = "layout-assignment"

    def __init__(self, policy: BackendPolicy):
        self.policy = policy

    def run(self, module: Module) -> bool:
        comp = module.entry
        pinned = set(module.output_instructions) | {comp.root}
        changed = False
        for instr in list(comp.instructions):
            wanted = self.policy.layout_constraint(instr)
            if wanted is None:
                continue
            if instr not in pinned and instr.shape.layout != wanted.result_layout:
                instr.shape = _laid_out(instr.shape, wanted.result_layout)
                changed = True
            changed |= self._operand_in_layout(comp, instr, wanted, pinned)
        return changed

    def _agnostic_reader(self, user: Instruction, value: Instruction,
                         layout: tuple[int, ...]) -> bool:
        """Whether ``user`` reads ``value`` in any layout: through element generators,
        beside an output fusion's kernel, or as the operand a kernel wants in
        ``layout``."""
        if is_output_fusion(user):
            fused = user.called[0]
            core = output_fusion_core(fused)
            param = fused.parameters[user.operands.index(value)]
            feeds_core = param in core.operands or any(
                o.opcode is Opcode.PAD and o.operands[0] is param for o in core.operands)
            wanted = self.policy.layout_constraint(user)
            return not feeds_core or (wanted is not None and wanted.operand == param.number
                                      and wanted.operand_layout == layout)
        if user.opcode is Opcode.FUSION:
            return is_loop_fusion(user)
        return user.opcode in _AGNOSTIC and user.opcode is not Opcode.BITCAST

    def _operand_in_layout(self, comp: Computation, instr: Instruction,
                           wanted: LayoutConstraint, pinned) -> bool:
        k, layout = wanted.operand, wanted.operand_layout
        x = instr.operands[k]
        if x.shape.layout == layout:
            return False
        users = comp.users()[x]
        if (x.opcode in _LOOPS and x not in pinned and not x.shape.is_tuple
                and not (x.opcode is Opcode.FUSION and not is_loop_fusion(x)
                         and self.policy.layout_constraint(x) is None)
                and x.opcode is not Opcode.BITCAST
                and all(self._agnostic_reader(u, x, layout) for u in users)
                and view_offset(x) is None):
            x.shape = _laid_out(x.shape, layout)
            return True
        copy = comp.add(Instruction(Opcode.COPY, _laid_out(x.shape, layout), [x], name="copy",
                                    metadata=x.metadata))
        instr.operands[k] = copy
        comp.sort()
        return True


def _laid_out(shape: Shape, layout: tuple[int, ...]) -> Shape:
    return Shape.array(shape.dtype, shape.dims, layout)
