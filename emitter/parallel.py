"""NAME_run_parallel: which steps become tasks for the caller's parallel-for, and how a
task finds its part.

The object starts no thread. The parallel compute function walks the same steps as
NAME_compute; a step worth splitting stores its pointers in a small context on the
stack and calls ``pool->parallel_for(pool->ctx, task, context, n)`` with
n = min(pool->threads, the step's cap); task i computes part i of n:

- an element loop (fusion, element-wise, reduce, gather...): a range of its outermost
  dimension of more than one element (``loop_split``), the dimensions above it being 1;
- a dot on the fast paths: its first batch loop, else row blocks (MR rows) or column
  blocks (NR columns), whichever costs the slowest task less (row blocks pack all of
  B again); a matrix-vector product: row blocks;
- a convolution on the fast paths: images, else groups (depthwise), else blocks of MR
  output channels or, for the implicit GEMM, blocks of NR output pixels, whichever
  costs the slowest task less (``kernel_split``): a channel block packs every im2col
  sliver again, a pixel block only its own (``ConvGemm.pixel_range``); ChannelConv
  likewise by panels of output channels or blocks of output rows
  (``ChannelConv.row_range``); a Winograd kernel transforms only its part's weights.

A part runs the same kernel code (its own copy, see entry.py) on a sub-problem: the
pointers moved by the part's start, one size argument set to the part's length. Each
output element is computed by the same instructions in the same order as in one
thread, so the results are bit for bit those of NAME_run.

Per-thread scratch: task 0 uses the kernel's scratch where the buffer assignment put
it; task i > 0 uses slot i - 1 of ``thread_scratch`` bytes at ``scratch_base`` (the
arena size rounded up to its alignment), so NAME_ARENA_SIZE is unchanged and a pool of
n threads needs ``scratch_base + (n - 1) * thread_scratch`` bytes (the header's
NAME_ARENA_SIZE_THREADS(n)).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum, auto
from math import prod

from llvmlite import ir

from ..hlo import Instruction
from .irutil import I64, PTR, VOID, gep_bytes, i64
from .kernels.conv.channel_conv import ChannelConv
from .kernels.conv.depthwise import Depthwise
from .kernels.conv.depthwise_rows import DepthwiseRows
from .kernels.conv.geometry import ConvKernel, ConvSizes
from .kernels.conv.implicit_gemm import ConvGemm
from .kernels.conv.row_conv import RowConv
from .kernels.dot import DotSizes, FastDot, PackedWeightsDot
from .kernels.function import KernelPlan
from .kernels.gemm import Tiling
from .loops import LOOP_BODIES

# Least work per task: below it a step's parallel-for costs more than it saves (waking
# a worker takes some microseconds). Multiply-adds for kernels, elements for loops.
MIN_KERNEL_WORK = 1 << 17
MIN_LOOP_WORK = 1 << 14
# A depthwise multiply-add takes about as long as this many of a GEMM's: each input
# value feeds one output channel, not a tile of them (benchmarks/conv_tuning.md).
DEPTHWISE_COST = 4
# Matrix-vector rows per unit.
GEMV_ROWS = 8


class Axis(Enum):
    """What a kernel call is split along: a part computes a range of one of its sizes."""
    IMAGES = auto()         # ConvSizes.batch
    GROUPS = auto()         # ConvSizes.groups
    CHANNELS = auto()       # ConvSizes.cout_g: output channels
    PIXELS = auto()         # ConvSizes.pixels: ConvGemm.pixel_range finds its part
    ROWS = auto()           # ConvSizes.rows: ChannelConv.row_range finds its part
    BATCH = auto()          # DotSizes.batch[0].extent
    M = auto()              # DotSizes.m
    N = auto()              # DotSizes.n


# The sizes of the part of ``n`` from ``lo`` of a call of sizes ``s``, per axis.
_PARTS = {
    Axis.IMAGES: lambda s, lo, n: replace(s, batch=n),
    Axis.GROUPS: lambda s, lo, n: replace(s, groups=n),
    Axis.CHANNELS: lambda s, lo, n: replace(s, cout_g=n),
    Axis.PIXELS: lambda s, lo, n: replace(s, pixels=(lo, n)),
    Axis.ROWS: lambda s, lo, n: replace(s, rows=(lo, n)),
    Axis.BATCH: lambda s, lo, n: replace(s, batch=(replace(s.batch[0], extent=n),
                                                   *s.batch[1:])),
    Axis.M: lambda s, lo, n: replace(s, m=n),
    Axis.N: lambda s, lo, n: replace(s, n=n),
}


@dataclass(frozen=True)
class Split:
    """A step split along ``axis``, of ``total``, in units of ``unit``; a part [lo, hi)
    moves the out / lhs / rhs pointers by lo * ``strides`` elements (none where the
    kernel finds its part itself: PIXELS, ROWS) and runs with its sizes cut to the part
    (``arguments``). ``cap``: the most parts worth making. ``channels``: output
    channels per unit of the axis, by which a fused epilogue's per-channel operands
    move (a convolution's or dot's bias; kernels/epilogue.py); its full-size operands
    (a residual) move as the output does. ``spec``: the kernel variant the parts run
    (None: the plan's own)."""
    axis: Axis
    total: int
    unit: int
    strides: tuple[int, int, int]
    cap: int
    channels: int = 0
    spec: object = None

    def arguments(self, b: ir.IRBuilder, sizes, lo: ir.Value, hi: ir.Value) -> list[ir.Value]:
        """The i64 size arguments of part [lo, hi) of a call of ``sizes``."""
        part = _PARTS[self.axis](sizes, lo, b.sub(hi, lo))
        return [i64(v) if isinstance(v, int) else v for v in part.arguments()]


def _split(axis, total, unit, strides, work, channels: int = 0) -> Split | None:
    cap = min(-(-total // unit), work // MIN_KERNEL_WORK)
    return Split(axis, total, unit, strides, cap, channels) if cap >= 2 else None


# What packing one element of a B sliver (a matrix's or an im2col one) costs, in
# multiply-adds of the GEMM (a masked vector load and store per NR elements against NR
# FMAs per row of A).
PACK_COST = 4
# The thread count a split is chosen for (the parts are made at run time, for the pool).
THREADS = 2


def _conv_gemm_split(spec: ConvGemm, s: ConvSizes, t: Tiling, work: int) -> Split | None:
    """One image and group of the implicit GEMM: blocks of MR output channels (A's rows)
    or of NR output pixels (its columns), whichever gives the slowest of THREADS tasks
    less to do: a channel block packs all of B again, a pixel block computes whole
    slivers (the last one partly empty)."""
    pixels = s.out_pixels
    k = s.cin_g * spec.window.window
    cout = s.cout_g
    by_m = _split(Axis.CHANNELS, cout, t.mr, (pixels, 0, k), work, 1)
    by_px = _split(Axis.PIXELS, pixels, t.nr, (0, 0, 0), work)
    if by_px is not None:
        by_px = replace(by_px, spec=replace(spec, pixel_range=True))
    return _cheaper(by_px, cout * _slowest(pixels, t.nr) * k,
                    by_m, _slowest(cout, t.mr) * pixels * k + PACK_COST * k * pixels)


def _channel_conv_split(spec: ChannelConv, s: ConvSizes, work: int) -> Split | None:
    """One image and group of ChannelConv: panels of output channels (in its packed
    weights, at the same offsets as in OIHW) or blocks of its tiles' output rows
    (``ChannelConv.row_range``), whichever gives the slowest of THREADS tasks less to do:
    a stem of 32 channels is one panel."""
    pixels, k = s.out_pixels, s.cin_g * spec.window.window
    cout, (oh, ow) = s.cout_g, s.out_sp
    by_panel = _split(Axis.CHANNELS, cout, spec.panel, (pixels, 0, k), work, 1)
    by_rows = _split(Axis.ROWS, oh, spec.rows, (0, 0, 0), work)
    if by_rows is not None:
        by_rows = replace(by_rows, spec=replace(spec, row_range=True))
    return _cheaper(by_panel, _slowest(cout, spec.panel) * pixels * k,
                    by_rows, cout * _slowest(oh, spec.rows) * ow * k)


def _cheaper(a: Split | None, cost_a: int, b: Split | None, cost_b: int) -> Split | None:
    """The split that exists, or of two the one whose slowest task has less to do (the
    first on a tie); costs in multiply-adds of the slowest of THREADS tasks."""
    if a is None or b is None:
        return a or b
    return a if cost_a <= cost_b else b


def _slowest(total: int, unit: int) -> int:
    """The most of ``total`` that one of THREADS parts of whole units gets."""
    return min(total, -(-(-(-total // unit)) // THREADS) * unit)


def kernel_split(plan: KernelPlan, t: Tiling) -> Split | None:
    """How the parallel entry splits a kernel call (None: it runs as one task)."""
    spec, s = plan.spec, plan.sizes
    if isinstance(spec, FastDot):
        return _dot_split(spec, s, t)
    if isinstance(spec, ConvKernel):
        return _conv_split(spec, s, t)
    return None


def _dot_split(spec: FastDot, s: DotSizes, t: Tiling) -> Split | None:
    """Its first batch loop, else row or column blocks (module docstring)."""
    batch = prod(loop.extent for loop in s.batch)
    m, n, k = s.m, s.n, s.k
    work = batch * m * n * k
    if s.batch and s.batch[0].extent >= 2:
        first = s.batch[0]
        return _split(Axis.BATCH, first.extent, 1, (first.sc, first.sa, first.sb), work)
    if spec.path in ("row_dot", "row_stream"):
        if spec.vector_lhs:
            return _split(Axis.N, n, GEMV_ROWS, (s.c_sn, 0, s.b_sn), work, 1)
        return _split(Axis.M, m, GEMV_ROWS, (s.c_sm, s.a_sm, 0), work)
    packed = isinstance(spec, PackedWeightsDot)
    # A column block of packed weights starts K floats on per column (whole slivers).
    by_n = _split(Axis.N, n, t.nr, (s.c_sn, 0, k if packed else s.b_sn), work, 1)
    if spec.path == "gemm_direct":
        return by_n
    by_m = _split(Axis.M, m, t.mr, (s.c_sm, s.a_sm, 0), work)
    # Column blocks pack only their own slivers of B; row blocks all pack all of it
    # (constant weights are packed already).
    packing = 0 if packed else PACK_COST * k * n
    return _cheaper(by_n, batch * m * _slowest(n, t.nr) * k,
                    by_m, batch * (_slowest(m, t.mr) * n * k + packing))


def _conv_split(spec: ConvKernel, s: ConvSizes, t: Tiling) -> Split | None:
    """Images, else groups, else output channels or the kernel's own range (module
    docstring)."""
    in_px, out_px = prod(s.in_sp), s.out_pixels
    window = spec.window.window
    cin, cout = s.cin_g * s.groups, s.cout_g * s.groups
    work = s.batch * cout * out_px * s.cin_g * window
    if isinstance(spec, (Depthwise, DepthwiseRows)):
        work *= DEPTHWISE_COST
    if s.batch >= 2:
        return _split(Axis.IMAGES, s.batch, 1, (cout * out_px, cin * in_px, 0), work)
    if s.groups >= 2:
        return _split(Axis.GROUPS, s.groups, 1,
                      (s.cout_g * out_px, s.cin_g * in_px, s.cout_g * s.cin_g * window),
                      work, s.cout_g)
    if isinstance(spec, ConvGemm):
        return _conv_gemm_split(spec, s, t, work)
    if isinstance(spec, ChannelConv):
        return _channel_conv_split(spec, s, work)
    # One image, one group: the output channels are A's rows (the weights'); RowConv's
    # in tiles of mr.
    unit = spec.mr if isinstance(spec, RowConv) else t.mr
    return _split(Axis.CHANNELS, s.cout_g, unit, (out_px, 0, s.cin_g * window), work, 1)


def loop_split(instr: Instruction) -> tuple[int, int] | None:
    """(dimension, cap) along which the parallel entry splits an element loop: the
    outermost dimension of more than one element (those above it are 1, so a range of
    it is a contiguous block of every leaf); None where the loop runs as one task."""
    if instr.opcode in LOOP_BODIES:
        return None
    shape = instr.shape.leaves()[0]
    dim = next((d for d in reversed(shape.layout) if shape.dims[d] > 1), None)
    if dim is None:
        return None
    work = max([shape.num_elements] + [o.shape.num_elements for o in instr.operands
                                       if not o.shape.is_tuple])
    cap = min(shape.dims[dim], work // MIN_LOOP_WORK)
    return (dim, cap) if cap >= 2 else None


def part(b: ir.IRBuilder, index: ir.Value, parts: ir.Value, total: int, unit: int,
         cap: int, bits: int) -> tuple[ir.Value, ir.Value]:
    """[lo, hi) (i64) of part ``index`` of ``parts`` (i64 values, parts <= ``cap``):
    whole units, as even as they go. The divisions are done in ``bits`` (size_t's
    width) where the products fit: a 32-bit target has no 64-bit divide instruction
    and would call libgcc's __udivdi3."""
    units = -(-total // unit)
    ty = ir.IntType(bits) if units * cap < (1 << bits) else I64
    if ty.width < 64:
        index, parts = b.trunc(index, ty), b.trunc(parts, ty)
    bounds = []
    for k in (index, b.add(index, ir.Constant(ty, 1))):
        at = b.udiv(b.mul(k, ir.Constant(ty, units)), parts)
        bounds.append(b.mul(at if ty.width == 64 else b.zext(at, I64), i64(unit)))
    lo, hi = bounds
    if total % unit:
        hi = b.select(b.icmp_unsigned("<", hi, i64(total)), hi, i64(total))
    return lo, hi


def emit_task(llvm_module: ir.Module, name: str, size_t: ir.IntType,
              fields: list[ir.Type], body) -> tuple[ir.Function, ir.LiteralStructType]:
    """``void name(ptr ctx, size_t i)``: ``body(b, values, i)`` with the ctx struct's
    fields loaded and ``i`` as an i64. Returns the function and the ctx type."""
    ctx_ty = ir.LiteralStructType(fields)
    fn = ir.Function(llvm_module, ir.FunctionType(VOID, [PTR, size_t]), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx, index = fn.args
    values = [b.load(b.gep(ctx, [ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), k)],
                           source_etype=ctx_ty, inbounds=True), typ=ty)
              for k, ty in enumerate(fields)]
    if size_t.width < 64:
        index = b.zext(index, I64)
    body(b, values, index)
    b.ret_void()
    return fn, ctx_ty


def moved(b: ir.IRBuilder, ptr: ir.Value, lo: ir.Value, stride: int, itemsize: int):
    """``ptr`` moved by ``lo * stride`` elements of ``itemsize`` bytes."""
    if stride == 0:
        return ptr
    return gep_bytes(b, ptr, b.mul(lo, i64(stride * itemsize)))


def thread_scratch_bytes(plans, alignment: int) -> int:
    """Bytes of one extra thread's scratch slot: the most scratch a split kernel needs,
    rounded up to the arena alignment."""
    most = max((p.scratch_bytes for p in plans), default=0)
    return -(-most // alignment) * alignment


__all__ = ["Axis", "Split", "kernel_split", "loop_split", "part", "emit_task", "moved",
           "thread_scratch_bytes", "MIN_KERNEL_WORK", "MIN_LOOP_WORK"]
