"""The kernel plan of a convolution: its path (path.py), then the spec of that path's
kernel with the tiles the target's tuning row gives it."""
from __future__ import annotations

from dataclasses import replace

from ....hlo import Instruction, Opcode, dtypes
from ....hlo.fusion import output_fusion_core
from ..epilogue import plan_epilogue
from ..function import KernelPlan
from ..gemm import tiling_for
from .channel_conv import ChannelConv, channel_tile
from .depthwise import Depthwise
from .depthwise_rows import DepthwiseRows
from .direct import DIRECT_MAX_POSITIONS, DirectConv
from .geometry import ConvSizes, ConvWindow
from .implicit_gemm import ConvGemm, subsample_pieces
from .naive import NaiveConv
from .path import conv_path
from .row_conv import RowConv
from .tuning import ConvTuning, conv_tuning
from .winograd import WinogradConv


def plan_conv(instr: Instruction, target, lean: bool = False,
              constant_weights: bool | None = None, *, tuning: ConvTuning | None = None,
              path: str | None = None) -> KernelPlan:
    """``lean``: a variant with no scratch where the fast path needs some (DirectConv),
    for windows of at most DIRECT_MAX_POSITIONS positions; ChannelConv needs none.
    ``constant_weights``: the weights are known at compile time (default: the kernel
    operand is a constant), so a kernel may take them packed in its own order
    (``spec.pack_weights``). ``tuning`` (default: the target's row) and ``path``
    (default: conv_path's choice) let benchmarks time the alternatives of a choice."""
    t = tiling_for(target)
    tuning = tuning or conv_tuning(target.vector_bytes, target.registers)
    if constant_weights is None:
        constant_weights = instr.operands[1].opcode is Opcode.CONSTANT
    path = path or conv_path(instr, t, tuning, constant_weights)
    if path == "naive":
        a = instr.attrs
        x, k = (o.shape for o in instr.operands)
        return KernelPlan(NaiveConv(x, k, instr.shape, a["dimension_numbers"], a["window"],
                                    a.get("feature_group_count", 1),
                                    a.get("batch_group_count", 1)))
    window = ConvWindow.of(instr.attrs["window"], instr.operands[0].shape.dims[2:])
    sizes = ConvSizes.of(instr)
    if path == "channels":
        vectors, rows, cols = channel_tile(window, sizes, t, tuning)
        return KernelPlan(ChannelConv(window, t.lanes, vectors, rows, cols), sizes)
    if path == "winograd" and not lean:
        spec = WinogradConv(window, t, 2)
        return KernelPlan(spec, sizes, spec.scratch_floats(sizes) * 4)
    if path in ("direct", "winograd") or (path in ("gemm", "gemm_subsample") and lean
                                          and window.window <= DIRECT_MAX_POSITIONS):
        return KernelPlan(DirectConv(window, t), sizes)
    if path in ("gemm", "gemm_subsample"):
        pieces = (subsample_pieces(instr.shape.dims[-1], t.lanes)
                  if path == "gemm_subsample" else 0)
        # The packed sliver of B holds at most K rows: a call with a short K (a few
        # input channels, a band of row streaming) needs less than the spec's K block.
        k_rows = min(sizes.cin_g * window.window, window.k_block(t))
        return KernelPlan(ConvGemm(window, t, pieces=pieces), sizes, k_rows * t.nr * 4)
    if path == "rows":
        mr = min(sizes.cout_g, tuning.rows_mr)
        return KernelPlan(RowConv(window, t.lanes, mr, max(1, t.registers // 2 // mr)), sizes)
    if path == "depthwise_rows":
        # Narrow images take half vectors: a 7-wide row fills 7 of 8 lanes, not of 16.
        lanes = t.lanes if 2 * instr.shape.dims[3] > t.lanes or t.lanes <= 4 else t.lanes // 2
        return KernelPlan(DepthwiseRows(window, lanes, tuning.depthwise_rows_block,
                                        tuning.depthwise_rows_unroll), sizes)
    assert path == "depthwise", path
    return KernelPlan(Depthwise(window, t.lanes), sizes)


def plan_conv_fusion(instr: Instruction, target, lean: bool = False) -> KernelPlan | None:
    """The kernel of an output fusion around an f32 convolution whose epilogue its fast
    kernel applies (plan_epilogue), else None."""
    fused = instr.called[0]
    core = output_fusion_core(fused)
    if core.opcode is not Opcode.CONVOLUTION or core.shape.dtype != dtypes.F32:
        return None
    epilogue = plan_epilogue(instr)
    plan = plan_conv(core, target, lean, instr.operands[1].opcode is Opcode.CONSTANT)
    if epilogue is None or isinstance(plan.spec, NaiveConv):
        return None
    return KernelPlan(replace(plan.spec, epilogue=epilogue), plan.sizes, plan.scratch)
