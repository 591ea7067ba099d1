"""Quantized kernels: integer convolutions and dots with their requantization epilogue.

An output fusion (optimizer/fusion.py) holds a convolution or dot accumulating s8/u8
activations times s8 weights in s32, and the element-wise epilogue that makes the
result of the accumulators (the requantization, a residual add...). These kernels
compute

    C[m, n] = sum_k X(m, k) W(k, n)

with m an output pixel (a convolution's image, row and column; a row of a dot's lhs), n
an output channel, k = (window tap, input channel). Activations are channels minor
(optimizer/layout_assignment.py; a dot's rows are), so the four channels k..k+3 of one
tap are one 32-bit word of the input: one ``IntDot.dot4`` multiplies that word,
broadcast, by four weights for each of L output channels. The weights are constants,
packed at compile time in the order the loops read them -- [group][panel][tap]
[channel / 4][NR outputs][4], zeros past the last channel -- together with the
per-channel sums that the activation shift of ``IntDot.flip`` needs. No weights are
packed at run time and no scratch is taken from the arena.

Loops, per image and group: panels of NR = NV x L output channels (the panel's
weights stay in cache), tiles of MR pixels, then the taps (unrolled) and the channel
words of a tap, with MR x NV accumulators in registers. A tap that can leave the image
reads the pad value (the zero point) there, decided once per tap and pixel. The tile
then goes through a small stack buffer to the epilogue: for each pixel, a loop over
the tile's channels built from the fused computation's element generators with the
accumulators in place of the contraction; it runs along the output's minor dim, which
LLVM vectorizes.

Where a tap holds fewer channels than a word (a stem's 1 or 3), a word per tap would be
mostly zero bytes: the tile's pixels' whole windows, tap-major and channel-minor, are
packed into words in a stack buffer first (``_patch_bytes``; the pad value outside the
image), once per tile, and every panel then reduces over those words as one tap, the
weights packed in the same order.

Depthwise convolutions (one input and one output channel per group) get their own
loop: L channels in lanes, the taps two at a time (``IntDot.dot2``), the weights
packed as i16 pairs [tap pair][channel][2].

On the M-profile DSP extension (``smlad``, one 32-bit lane) the loops change shape, as
CMSIS-NN's do: an ungrouped kernel takes each tile's windows unpacked into halfword
pairs once, in a stack buffer, and then every panel of two channels over them
(``_emit_pairs``); a depthwise one takes four channels per word of activations, each
channel its own accumulator (smlabb / smlatt), the channels past the last four as above.

Each kernel is compiled for its layer (sizes, weights and epilogue are constants).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import ceil

import numpy as np
from llvmlite import ir

from ...hlo import ConvDimensionNumbers, Instruction, Opcode, dtypes
from ...hlo.fusion import is_output_fusion, output_fusion_core
from ...hlo.shape import channels_minor
from ..elemental import ElementalEmitter
from ..indexing import linearize
from ..irutil import I8, I32, PTR, VOID, alloca_once, for_range, gep_elem, i64, llvm_type
from ..loops import buffer_reader
from .intdot import I16, IntDot, dsp_call, halfword_pairs, int_dot_for
from .vec import const_vec, lane_mask, masked_load, offset_ptr, vec_type

_WORD = 4           # k per dot4: one 32-bit word of activations


def channels_minor_input(instr: Instruction) -> int | None:
    """The operand an output fusion around an integer convolution over N C spatial...
    tensors takes its input from, which it reads, and its result, which it writes,
    channels minor: the kernels reduce four consecutive input channels of one pixel per
    instruction (vpdpbusd, sdot, smlad on a 32-bit word) and vectorize over output
    channels, where NCHW puts consecutive channels a whole image apart. None for any
    other instruction."""
    if not is_output_fusion(instr):
        return None
    core = output_fusion_core(instr.called[0])
    if not (core.opcode is Opcode.CONVOLUTION and core.shape.rank >= 3
            and core.attrs["dimension_numbers"] == ConvDimensionNumbers.nchw(core.shape.rank - 2)
            and core.shape.dtype.is_integer):
        return None
    x = core.operands[0]
    if x.opcode is Opcode.PAD:      # the fused pad of the input
        x = x.operands[0]
    return x.number


def _acc_type(lanes: int) -> ir.Type:
    return vec_type(I32, lanes) if lanes > 1 else I32


def _tile_shape(dot: IntDot, registers: int, outputs: int, pixels: int) -> tuple[int, int]:
    """(MR pixels, NV vectors of outputs) of a kernel over ``pixels`` pixels: MR x NV
    accumulators, NV weight vectors and a couple of temporaries in the register file (the
    target's ``registers``; sdot's tile counts all 32 of NEON)."""
    if dot.kind == "smlad":
        return 2, 2                     # 2 x 2 accumulators beside the unpacked halves
    if dot.lanes == 1:
        # 6 accumulators and 2 + 3 operands fit 13 registers without spills; a dot of
        # one row takes 4 outputs per activation
        return (1, 4) if pixels == 1 else (2, 3)
    regs = 32 if dot.kind == "sdot" else registers
    nv = max(1, min(4 if regs == 32 else 2, ceil(outputs / dot.lanes)))
    spare = 4 if dot.kind == "avx2" else 2
    return max(1, min(8, (regs - nv - spare) // nv)), nv


@dataclass(frozen=True)
class _Panel:
    start: int          # first output channel of the group
    vectors: int        # NV: L output channels each
    count: int          # how many panels of this width follow one another


@dataclass(eq=False)
class QuantizedKernel:
    """The kernel of one output fusion (or None from ``plan_quantized``)."""
    instr: Instruction
    dot: IntDot
    registers: int                      # the target's vector registers
    x_k: int                            # fusion operand: the activations
    depthwise: bool
    # geometry (a dot is one image of 1 x M pixels, one tap, K channels)
    n: int
    c: int                              # input channels
    h: int
    w: int
    oh: int
    ow: int
    groups: int
    cout: int
    taps: tuple[tuple[int, int], ...]   # (dy, dx) of each tap, before the stride
    stride: tuple[int, int]
    pad: tuple[int, int]                # low padding (rows, columns)
    pad_value: int
    x_stride: tuple[int, int, int, int]     # element strides of x: n, c, h, w
    weights: np.ndarray                 # [cout, cin_g, taps] as int64
    out_index: str                      # "nchw" | "mn": how C[m, n] indexes the result
    passed: list[int] = field(default_factory=list)
    bias: np.ndarray | None = None      # per-channel constants added to the accumulators
    accumulated: Instruction | None = None  # the value the accumulators stand for
    no_nans: bool = False               # the epilogue cannot meet a NaN
    float_abi: str | None = None        # the target's (TargetInfo.float_abi)

    @property
    def cin_g(self) -> int:
        return self.c // self.groups

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups

    @property
    def x_signed(self) -> bool:
        core = output_fusion_core(self.instr.called[0])
        return core.operands[0].shape.dtype == dtypes.S8

    # -- emission --
    @property
    def name(self) -> str:
        """What ``xlac --emit steps`` calls it."""
        what = "depthwise convolution" if self.depthwise else (
            "convolution" if self.out_index == "nchw" else "dot")
        return f"quantized {what} ({self.dot.kind})"

    def emit(self, llvm_module: ir.Module, name: str, constants) -> ir.Function:
        fn = ir.Function(llvm_module, ir.FunctionType(VOID, [PTR] * (1 + len(self.passed))),
                         name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        for arg in fn.args:
            arg.add_attribute("noalias")
        entry = fn.append_basic_block("entry")
        body = fn.append_basic_block("body")
        b = ir.IRBuilder(entry)
        b.branch(body)
        b.position_at_end(body)
        ptrs = dict(zip(self.passed, fn.args[1:]))
        em = ElementalEmitter(b, constants, self.float_abi, no_nans=self.no_nans)
        if self.depthwise:
            _DepthwiseEmitter(self, b, fn.args[0], ptrs, em, constants).emit()
        else:
            _GemmEmitter(self, b, fn.args[0], ptrs, em, constants).emit()
        b.ret_void()
        return fn


def plan_quantized(instr: Instruction, target) -> QuantizedKernel | None:
    """The kernel of an output fusion around an s8/u8 x s8 -> s32 convolution (channels
    minor, no base dilation) or dot (rows of the lhs contiguous, constant rhs), else
    None: the fusion is then emitted as a loop of element generators."""
    if not is_output_fusion(instr):
        return None
    fused = instr.called[0]
    core = output_fusion_core(fused)
    if core.shape.dtype != dtypes.S32:
        return None
    plan = _plan_conv if core.opcode is Opcode.CONVOLUTION else _plan_dot
    kernel = plan(instr, fused, core, target)
    if kernel is not None:
        kernel.passed = [k for k, o in enumerate(instr.operands)
                         if o.opcode is not Opcode.CONSTANT]
        channel = 1
        kernel.bias, kernel.accumulated = _folded_adds(instr, fused, core, channel,
                                                       kernel.cout)
        kernel.no_nans = _nan_free(instr, fused, core)
        kernel.float_abi = target.float_abi
    return kernel


def _channel_constant(instr, fused_value, channel: int, count: int) -> np.ndarray | None:
    """The values of an integer broadcast of a constant along the channel dim (or of a
    scalar constant), as ``count`` int64, else None."""
    v = fused_value
    if v.opcode is not Opcode.BROADCAST:
        return None
    src = v.operands[0]
    if src.opcode is Opcode.PARAMETER:
        src = instr.operands[src.number]
    if src.opcode is not Opcode.CONSTANT or not src.shape.dtype.is_integer:
        return None
    if src.shape.rank == 0:
        return np.full(count, int(src.literal), np.int64)
    if v.attrs["dimensions"] != (channel,) or src.shape.dims != (count,):
        return None
    return src.literal.astype(np.int64)


def _folded_adds(instr, fused, core, channel: int, count: int):
    """The per-channel integer constants the epilogue adds to the accumulators before
    anything else (the zero point correction, an integer bias): the kernel starts its
    accumulators from their sum instead (integer adds are exact in any order). Returns
    (the sum, the value the accumulators then stand for)."""
    users = fused.users()
    total, top = np.zeros(count, np.int64), core
    while len(users[top]) == 1 and top is not fused.root:
        u = users[top][0]
        if u.opcode is not Opcode.ADD or u.shape.dtype != dtypes.S32 \
                or u.operands.count(top) != 1:
            break
        other = u.operands[1] if u.operands[0] is top else u.operands[0]
        values = _channel_constant(instr, other, channel, count)
        if values is None:
            break
        total, top = total + values, u
    return total, top


# Element-wise ops that, on finite operands, give finite values or infinities (never NaN
# unless magnitudes pass 3e38, which integers times quantization scales do not).
_FINITE_OPS = frozenset({Opcode.CONVERT, Opcode.ADD, Opcode.MULTIPLY, Opcode.SUBTRACT,
                         Opcode.ROUND_NEAREST_EVEN, Opcode.ROUND_NEAREST_AFZ, Opcode.CLAMP,
                         Opcode.MAXIMUM, Opcode.MINIMUM, Opcode.BROADCAST, Opcode.RESHAPE,
                         Opcode.PARAMETER, Opcode.CONSTANT, Opcode.DIVIDE, Opcode.PAD,
                         Opcode.CONVOLUTION, Opcode.DOT, Opcode.BITCAST_CONVERT})


def _nan_free(instr, fused, core) -> bool:
    """Whether no float in the epilogue can be NaN: it reads integers and finite
    constants, divides by nonzero constants only, and uses the ops above."""
    for i in fused.instructions:
        if i.opcode not in _FINITE_OPS:
            return False
        if i.opcode is Opcode.CONSTANT and i.shape.dtype.is_float \
                and not np.isfinite(i.literal.astype(np.float64)).all():
            return False
        if i.opcode is Opcode.DIVIDE:
            d = i.operands[1]
            while d.opcode in (Opcode.BROADCAST, Opcode.RESHAPE):
                d = d.operands[0]
            if d.opcode is Opcode.PARAMETER:
                d = instr.operands[d.number]
            if d.opcode is not Opcode.CONSTANT or not (np.isfinite(d.literal.astype(np.float64))
                                                       & (d.literal != 0)).all():
                return False
    for p, o in zip(fused.parameters, instr.operands):
        if o.shape.dtype.is_float and not (o.opcode is Opcode.CONSTANT and np.isfinite(
                o.literal.astype(np.float64)).all()):
            return False
    return True


def _weights_of(instr, param) -> np.ndarray | None:
    if param.opcode is not Opcode.PARAMETER:
        return None
    w = instr.operands[param.number]
    if w.opcode is not Opcode.CONSTANT or w.shape.dtype != dtypes.S8:
        return None
    return w.literal.astype(np.int64)


def _dot_for(target, weights: np.ndarray) -> IntDot:
    dot = int_dot_for(target)
    if dot.kind == "avx2" and weights.size and weights.min() < -127:
        # vpsignb cannot negate -128: the exact sign trick needs |w| <= 127
        return IntDot("generic", dot.lanes, "any")
    return dot


def _plan_conv(instr, fused, core, target) -> QuantizedKernel | None:
    dn, win = core.attrs["dimension_numbers"], core.attrs["window"]
    if (core.shape.rank != 4 or dn != ConvDimensionNumbers.nchw(2)
            or core.attrs.get("batch_group_count", 1) != 1
            or any(d != 1 for d in win.lhs_dilation)):
        return None
    x_src, w_param = core.operands
    pad_low, pad_value = list(win.pad_low), 0
    if x_src.opcode is Opcode.PAD:
        p = x_src.attrs["padding"]
        value = x_src.operands[1]
        if (any(p.interior) or p.low[:2] != (0, 0) or p.high[:2] != (0, 0)
                or min(p.low + p.high) < 0 or any(win.pad_low) or any(win.pad_high)
                or value.opcode is not Opcode.CONSTANT):
            return None
        pad_low, pad_value = list(p.low[2:]), int(value.literal)
        x_src = x_src.operands[0]
    if x_src.opcode is not Opcode.PARAMETER:
        return None
    x = instr.operands[x_src.number]
    weights = _weights_of(instr, w_param)
    if (weights is None or x.shape.dtype not in (dtypes.S8, dtypes.U8)
            or x.shape.layout != channels_minor(x.shape).layout):
        return None
    n, c, h, w = x.shape.dims
    cout, cin_g, kh, kw = weights.shape
    groups = core.attrs.get("feature_group_count", 1)
    _, _, oh, ow = core.shape.dims
    dot = _dot_for(target, weights)
    taps = tuple((dy * win.rhs_dilation[0], dx * win.rhs_dilation[1])
                 for dy in range(kh) for dx in range(kw))
    depthwise = cin_g == 1 and cout == groups
    return QuantizedKernel(
        instr, dot, target.registers, x_src.number, depthwise, n, c, h, w, oh, ow, groups,
        cout, taps, tuple(win.stride), tuple(pad_low), pad_value, (h * w * c, 1, w * c, c),
        weights.reshape(cout, cin_g, kh * kw), "nchw")


def _plan_dot(instr, fused, core, target) -> QuantizedKernel | None:
    dn = core.attrs["dimension_numbers"]
    a, w_param = core.operands
    if (a.opcode is not Opcode.PARAMETER or core.shape.rank != 2 or dn.lhs_batch
            or dn.lhs_contracting != (1,) or len(dn.rhs_contracting) != 1):
        return None
    x = instr.operands[a.number]
    weights = _weights_of(instr, w_param)
    if (weights is None or a.shape.dtype not in (dtypes.S8, dtypes.U8)
            or not x.shape.has_default_layout):
        return None
    if dn.rhs_contracting == (0,):
        weights = weights.T                 # [N, K]
    m, k = x.shape.dims
    nout = weights.shape[0]
    return QuantizedKernel(
        instr, _dot_for(target, weights), target.registers, a.number, False, 1, k, 1,
        m, 1, m, 1, nout, ((0, 0),), (1, 1), (0, 0), 0, (0, 1, 0, k),
        weights.reshape(nout, k, 1), "mn")


# --- shared pieces ------------------------------------------------------------------

def _operand_readers(k: QuantizedKernel, b: ir.IRBuilder, em: ElementalEmitter, ptrs) -> list:
    """A generator per operand of the fusion, in parameter order."""
    instr = k.instr
    params = []
    for p in instr.called[0].parameters:
        o = instr.operands[p.number]
        if o.opcode is Opcode.CONSTANT:
            params.append(em.generator(o, []))
        else:
            params.append(buffer_reader(b, ptrs[p.number], o.shape, o.shape.dtype.itemsize))
    return params


def _epilogue(k: QuantizedKernel, b: ir.IRBuilder, em: ElementalEmitter, ptrs, out,
              index: list, tile_value) -> None:
    """Store the fusion's result at ``index`` (of the result), ``tile_value()`` being
    the accumulator there."""
    instr = k.instr
    fused = instr.called[0]
    # readers of every operand; the contraction's are simply never called
    gen = em.computation_generator(fused, _operand_readers(k, b, em, ptrs),
                                   {k.accumulated: lambda idx: tile_value()})
    shape = instr.shape
    ty = llvm_type(shape.dtype)
    b.store(gen(index), gep_elem(b, out, ty, linearize(b, index, shape.dims, shape.layout)))


def _pack_words(dot: IntDot, weights: np.ndarray, groups: int, panels: list[_Panel],
                flip: int, bias: np.ndarray):
    """Weights [cout, cin_g, taps] -> bytes [group][panel][tap][c/4][NR][4], and the
    accumulators' start per output channel in the same panel order: the folded bias
    - flip * 128 * the channel's weight sum."""
    cout, cin_g, taps = weights.shape
    cout_g, words = cout // groups, ceil(cin_g / _WORD)
    chunks, starts = [], []
    for g in range(groups):
        for panel in panels:
            nr = panel.vectors * dot.lanes
            for p in range(panel.count):
                first = g * cout_g + panel.start + p * nr
                rows = weights[first:min(first + nr, (g + 1) * cout_g)]
                block = np.zeros((taps, words * _WORD, nr), np.int64)
                block[:, :cin_g, :len(rows)] = rows.transpose(2, 1, 0)
                # [tap][c4][4][nr] -> [tap][c4][nr][4]
                block = block.reshape(taps, words, _WORD, nr).transpose(0, 1, 3, 2)
                chunks.append(block.astype(np.int8).tobytes())
                start = np.zeros(nr, np.int64)
                start[:len(rows)] = (bias[first:first + len(rows)]
                                     - flip * 128 * rows.sum(axis=(1, 2)))
                starts.append(start.astype(np.int32).tobytes())
    return b"".join(chunks), b"".join(starts)


# The most stack the smlad kernels' unpacked windows take (MR pixels of 8 bytes per word).
_PAIRS_BYTES = 4096


def _patch_bytes(k: QuantizedKernel) -> int:
    """A window's bytes (taps x input channels) where packing windows into words saves
    words over a word per tap (1 to 3 input channels, or a ragged last word), for an
    ungrouped convolution with windows that fit a small stack buffer; else 0."""
    taps = len(k.taps)
    size = taps * k.cin_g
    if (k.depthwise or k.groups != 1 or taps == 1 or size > 512
            or ceil(size / _WORD) >= taps * ceil(k.cin_g / _WORD)):
        return 0
    return size


def _panels(cout_g: int, nv: int, lanes: int) -> list[_Panel]:
    """Full panels of NV vectors, then one narrower panel for the last channels."""
    nr = nv * lanes
    full, rest = divmod(cout_g, nr)
    out = [_Panel(0, nv, full)] if full else []
    if rest:
        out.append(_Panel(full * nr, ceil(rest / lanes), 1))
    return out


def _stack_buffer(b: ir.IRBuilder, words: int, name: str) -> ir.Value:
    """``words`` i32 on the stack, as an opaque pointer (vectors are stored through it;
    llvmlite types an alloca's pointer by what it allocates)."""
    buf = alloca_once(b, ir.ArrayType(I32, words), name)
    buf.type = PTR
    return buf


def _zeros(lanes: int) -> ir.Constant:
    return const_vec(I32, [0] * lanes) if lanes > 1 else ir.Constant(I32, 0)


def _tap_reach(k: QuantizedKernel, dy: int, dx: int) -> bool:
    """Whether tap (dy, dx) reads outside the image for some output pixel."""
    top, left = dy - k.pad[0], dx - k.pad[1]
    bottom = (k.oh - 1) * k.stride[0] + top
    right = (k.ow - 1) * k.stride[1] + left
    return top < 0 or left < 0 or bottom >= k.h or right >= k.w


def _tap_base(k: QuantizedKernel, b, x, img, oy, ox, dy, dx, channel):
    """(pointer to the tap's first channel for output pixel (oy, ox), None or the i1 that
    it is inside the image; outside, the pointer is x itself, in bounds)."""
    sn, _, sh, sw = k.x_stride
    iy = b.sub(b.add(b.mul(oy, i64(k.stride[0])), i64(dy)), i64(k.pad[0]))
    ix = b.sub(b.add(b.mul(ox, i64(k.stride[1])), i64(dx)), i64(k.pad[1]))
    inside = None
    if _tap_reach(k, dy, dx):
        inside = b.and_(b.icmp_unsigned("<", iy, i64(k.h)), b.icmp_unsigned("<", ix, i64(k.w)))
        iy, ix = b.select(inside, iy, i64(0)), b.select(inside, ix, i64(0))
    off = b.add(b.add(b.mul(img, i64(sn)), b.mul(iy, i64(sh))),
                b.add(b.mul(ix, i64(sw)), channel))
    return b.gep(x, [off], source_etype=I8), inside


# --- convolution / dot ----------------------------------------------------------------

class _GemmEmitter:
    def __init__(self, k: QuantizedKernel, b, out, ptrs, em, constants):
        self.k, self.b, self.out, self.ptrs, self.em = k, b, out, ptrs, em
        self.dot = k.dot
        self.mr, self.nv = _tile_shape(k.dot, k.registers, k.cout_g, k.oh * k.ow)
        self.mr = min(self.mr, k.oh * k.ow)         # a dot of one row: one row per tile
        self.panels = _panels(k.cout_g, self.nv, k.dot.lanes)
        self.flip = k.dot.flip(k.x_signed)
        # Patches: a few input channels (a stem's 1 or 3) leave most bytes of each tap's
        # words zero; the tile's pixels' whole windows are packed into words once, then
        # every panel of output channels reduces over them as one tap.
        self.patch = _patch_bytes(k)
        self.words = ceil((self.patch or k.cin_g) / _WORD)
        weights = k.weights
        if self.patch:
            weights = weights.transpose(0, 2, 1).reshape(k.cout, self.patch, 1)
        packed, starts = _pack_words(k.dot, weights, k.groups, self.panels, self.flip,
                                     k.bias)
        self.wbase = constants.global_for_bytes(packed)
        self.sbase = constants.global_for_bytes(starts) \
            if np.frombuffer(starts, np.int32).any() else None
        # smlad: the tile's windows widened into halfword pairs once (``_emit_pairs``),
        # so each panel unpacks only its weights.
        window = (1 if self.patch else len(k.taps)) * self.words
        self.pairs = window if (k.dot.kind == "smlad" and k.groups == 1
                                and self.mr * window * 8 <= _PAIRS_BYTES) else 0

    def emit(self):
        if self.pairs:
            return self._emit_pairs()
        if self.patch:
            return self._emit_patches()
        k, b, lanes = self.k, self.b, self.dot.lanes
        taps = len(k.taps)
        group_bytes = len(self.k.weights) and sum(
            p.count * taps * self.words * p.vectors * lanes * _WORD for p in self.panels)
        group_starts = sum(p.count * p.vectors * lanes * 4 for p in self.panels)
        with for_range(b, k.n, "img") as img:
            with for_range(b, k.groups, "grp") as g:
                wdone, sdone = 0, 0
                for panel in self.panels:
                    nr = panel.vectors * lanes
                    size = taps * self.words * nr * _WORD
                    cols = min(nr, k.cout_g - panel.start)
                    with for_range(b, panel.count, "panel") as p:
                        woff = b.add(b.mul(g, i64(group_bytes)), b.add(i64(wdone),
                                                                      b.mul(p, i64(size))))
                        soff = b.add(b.mul(g, i64(group_starts)), b.add(i64(sdone),
                                                                       b.mul(p, i64(nr * 4))))
                        n0 = b.add(b.mul(g, i64(k.cout_g)), b.add(i64(panel.start),
                                                                  b.mul(p, i64(nr))))
                        with for_range(b, k.oh * k.ow, "m", step=self.mr) as m0:
                            self._tile(img, g, n0, panel.vectors, cols, woff, soff, m0)
                    wdone += panel.count * size
                    sdone += panel.count * nr * 4

    def _emit_patches(self):
        """Per tile of MR pixels: their windows packed into a stack buffer (the pad value
        outside the image, zeros after the last byte of a word), then every panel of
        output channels over those words."""
        k, b = self.k, self.b
        row = self.words * _WORD
        patch = alloca_once(b, ir.ArrayType(I8, self.mr * row), "patch")
        patch.type = PTR
        with for_range(b, k.n, "img") as img:
            with for_range(b, k.oh * k.ow, "m", step=self.mr) as m0:
                oys, oxs = self._pixels(m0)
                for i in range(self.mr):
                    self._pack_patch(b.gep(patch, [i64(i * row)], source_etype=I8), img,
                                     oys[i], oxs[i])
                bases = [(b.gep(patch, [i64(i * row)], source_etype=I8), None)
                         for i in range(self.mr)]
                self._panel_tiles(self.words, lambda n0, nv, cols, woff, soff: self._tile(
                    img, i64(0), n0, nv, cols, woff, soff, m0, patches=bases))

    def _panel_tiles(self, words: int, tile):
        """``tile(n0, nv, cols, woff, soff)`` for every panel of output channels of an
        ungrouped kernel whose channels take ``words`` words of weights each: its first
        channel, vectors, channels and its weights' and start values' byte offsets."""
        k, b, lanes = self.k, self.b, self.dot.lanes
        wdone, sdone = 0, 0
        for panel in self.panels:
            nr = panel.vectors * lanes
            size = words * nr * _WORD
            with for_range(b, panel.count, "panel") as p:
                tile(b.add(i64(panel.start), b.mul(p, i64(nr))), panel.vectors,
                     min(nr, k.cout - panel.start), b.add(i64(wdone), b.mul(p, i64(size))),
                     b.add(i64(sdone), b.mul(p, i64(nr * 4))))
            wdone += panel.count * size
            sdone += panel.count * nr * 4

    def _emit_pairs(self):
        """smlad with the activations unpacked once per tile: each pixel's window as
        words of halfword pairs (bytes 0, 2 and 1, 3 of each word of activations, after
        the flip) in a stack buffer, which every panel of two output channels then
        multiplies with its weights, unpacked as it reads them: per four products of a
        pixel one smlad, per word of weights two sxtb16 shared by both pixels."""
        k, b = self.k, self.b
        row = self.pairs * 8
        pairs = alloca_once(b, ir.ArrayType(I8, self.mr * row), "pairs")
        pairs.type = PTR
        if self.patch:
            patch = alloca_once(b, ir.ArrayType(I8, self.mr * self.words * _WORD), "patch")
            patch.type = PTR
        x = self.ptrs[k.x_k]
        pad_word = ir.Constant(I32, (k.pad_value & 0xFF) * 0x01010101)
        with for_range(b, k.n, "img") as img:
            with for_range(b, k.oh * k.ow, "m", step=self.mr) as m0:
                oys, oxs = self._pixels(m0)
                for i in range(self.mr):
                    dst = b.gep(pairs, [i64(i * row)], source_etype=I8)
                    if self.patch:
                        src = b.gep(patch, [i64(i * self.words * _WORD)], source_etype=I8)
                        self._pack_patch(src, img, oys[i], oxs[i])
                        with for_range(b, self.words, "pw") as j:
                            self._store_pair(dst, j, self._load_word(src, j))
                        continue
                    for t, (dy, dx) in enumerate(k.taps):
                        base, inside = _tap_base(k, b, x, img, oys[i], oxs[i], dy, dx, i64(0))

                        def put(c4, word, t=t, inside=inside):
                            if inside is not None:
                                word = b.select(inside, word, pad_word)
                            self._store_pair(dst, b.add(i64(t * self.words), c4), word)
                        full = k.cin_g // _WORD
                        if full:
                            with for_range(b, full, "c4") as c4:
                                put(c4, self._load_word(base, c4))
                        if k.cin_g % _WORD:
                            put(i64(full), self._load_tail(base, i64(full)))
                self._panel_tiles(self.pairs, lambda n0, nv, cols, woff, soff:
                                  self._tile_pairs(img, n0, nv, cols, woff, soff, m0, pairs))

    def _store_pair(self, dst, index, word):
        """Word ``index`` of a pixel's window, flipped and unpacked, at dst + 8 index."""
        b = self.b
        if self.flip:
            word = b.xor(word, ir.Constant(I32, 0x80808080))
        at = b.gep(dst, [b.mul(index, i64(8))], source_etype=I8)
        x02, x13 = halfword_pairs(b, word)
        b.store(x02, at, align=4)
        b.store(x13, b.gep(at, [i64(4)], source_etype=I8), align=4)

    def _tile_pairs(self, img, n0, nv, cols, woff, soff, m0, pairs):
        """MR pixels (their unpacked windows in ``pairs``) by NV output channels."""
        b = self.b
        row = self.pairs * 8
        acc = [[alloca_once(b, I32, f"acc{i}.{v}") for v in range(nv)] for i in range(self.mr)]
        for r in acc:
            for a in r:
                b.store(ir.Constant(I32, 0), a)
        wpanel = b.gep(self.wbase, [woff], source_etype=I8)
        with for_range(b, self.pairs, "w") as w:
            wrow = b.gep(wpanel, [b.mul(w, i64(nv * _WORD))], source_etype=I8)
            xs = [b.gep(pairs, [b.add(i64(i * row), b.mul(w, i64(8)))], source_etype=I8)
                  for i in range(self.mr)]
            x = [(b.load(p, typ=I32, align=4),
                  b.load(b.gep(p, [i64(4)], source_etype=I8), typ=I32, align=4)) for p in xs]
            for v in range(nv):
                word = b.load(b.gep(wrow, [i64(v * _WORD)], source_etype=I8), typ=I32,
                              align=1)
                w02, w13 = halfword_pairs(b, word)
                for i, (x02, x13) in enumerate(x):
                    old = b.load(acc[i][v], typ=I32)
                    b.store(dsp_call(b, "smlad", w13, x13, dsp_call(b, "smlad", w02, x02, old)),
                            acc[i][v])
        self._store_tile(img, n0, nv, cols, m0, soff, acc)

    def _pack_patch(self, dst, img, oy, ox):
        """The window of output pixel (oy, ox), tap-major and channel-minor, into the
        bytes at ``dst``."""
        k, b = self.k, self.b
        x = self.ptrs[k.x_k]
        pad = ir.Constant(I8, k.pad_value & 0xFF)
        for t, (dy, dx) in enumerate(k.taps):
            base, inside = _tap_base(k, b, x, img, oy, ox, dy, dx, i64(0))
            for c in range(k.cin_g):
                v = b.load(b.gep(base, [i64(c)], source_etype=I8), typ=I8)
                if inside is not None:
                    v = b.select(inside, v, pad)
                b.store(v, b.gep(dst, [i64(t * k.cin_g + c)], source_etype=I8))
        for j in range(self.patch, self.words * _WORD):
            b.store(ir.Constant(I8, 0), b.gep(dst, [i64(j)], source_etype=I8))

    def _pixels(self, m0):
        """(rows, columns) of the tile's MR output pixels; past the last, the last."""
        k, b = self.k, self.b
        last = i64(k.oh * k.ow - 1)
        ps = [b.select(b.icmp_signed("<", b.add(m0, i64(i)), last), b.add(m0, i64(i)), last)
              for i in range(self.mr)]
        return [b.udiv(p, i64(k.ow)) for p in ps], [b.urem(p, i64(k.ow)) for p in ps]

    def _tile(self, img, g, n0, nv, cols, woff, soff, m0, patches=None):
        """MR pixels from m0 by NV x L output channels from n0 (``patches``: the
        pixels' packed windows, read as one tap)."""
        k, b, dot = self.k, self.b, self.dot
        lanes, mr = dot.lanes, self.mr
        aty = _acc_type(dot.acc_lanes)
        wty = vec_type(I8, _WORD * lanes)
        oys, oxs = self._pixels(m0) if patches is None else (None, None)
        acc = [[alloca_once(b, aty, f"acc{i}.{v}") for v in range(nv)] for i in range(mr)]
        for row in acc:
            for a in row:
                b.store(_zeros(dot.acc_lanes), a)
        x = self.ptrs[k.x_k]
        cin = self.words * _WORD if patches is not None else k.cin_g
        full = cin // _WORD
        pad_word = ir.Constant(I32, (k.pad_value & 0xFF) * 0x01010101)
        mask = ir.Constant(I32, 0x80808080)
        wpanel = b.gep(self.wbase, [woff], source_etype=I8)
        channel = b.mul(g, i64(k.cin_g))
        for t, (dy, dx) in enumerate(k.taps if patches is None else [(0, 0)]):
            taps = patches or [_tap_base(k, b, x, img, oys[i], oxs[i], dy, dx, channel)
                               for i in range(mr)]
            wtap = b.gep(wpanel, [i64(t * self.words * nv * lanes * _WORD)], source_etype=I8)

            def step(c4, tail, taps=taps, wtap=wtap):
                xs = []
                for i, (base, inside) in enumerate(taps):
                    word = self._load_tail(base, c4) if tail else self._load_word(base, c4)
                    if inside is not None:
                        word = b.select(inside, word, pad_word)
                    xs.append(b.xor(word, mask) if self.flip else word)
                wrow = b.gep(wtap, [b.mul(c4, i64(nv * lanes * _WORD))], source_etype=I8)
                ws = [b.load(b.gep(wrow, [i64(v * lanes * _WORD)], source_etype=I8), typ=wty,
                             align=1) for v in range(nv)]
                for i in range(mr):
                    for v in range(nv):
                        old = b.load(acc[i][v], typ=aty)
                        b.store(dot.dot4(b, old, ws[v], xs[i], k.x_signed), acc[i][v])

            if full:
                with for_range(b, full, "c4") as c4:
                    step(c4, False)
            if cin % _WORD:
                step(i64(full), True)
        self._store_tile(img, n0, nv, cols, m0, soff, acc)

    def _load_word(self, base, c4):
        b = self.b
        return b.load(b.gep(base, [b.mul(c4, i64(_WORD))], source_etype=I8), typ=I32, align=1)

    def _load_tail(self, base, c4):
        """The last channels of a tap, fewer than four, byte by byte: a word would read
        past the end of the last pixel."""
        b, k = self.b, self.k
        word = ir.Constant(I32, 0)
        for t in range(k.cin_g % _WORD):
            byte = b.load(b.gep(base, [i64(k.cin_g // _WORD * _WORD + t)], source_etype=I8),
                          typ=I8)
            word = b.or_(word, b.shl(b.zext(byte, I32), ir.Constant(I32, 8 * t)))
        return word

    def _store_tile(self, img, n0, nv, cols, m0, soff, acc):
        """The accumulators plus their start values through a stack buffer to the
        epilogue, pixel by pixel."""
        k, b, dot = self.k, self.b, self.dot
        lanes = dot.lanes
        aty = _acc_type(lanes)
        nr = nv * lanes
        tile = _stack_buffer(b, self.mr * nr, "tile")
        for v in range(nv):
            start = None
            if self.sbase is not None:
                at = b.gep(self.sbase, [b.add(soff, i64(v * lanes * 4))], source_etype=I8)
                start = b.load(at, typ=aty, align=4)
            for i in range(self.mr):
                value = dot.finish(b, b.load(acc[i][v], typ=_acc_type(dot.acc_lanes)))
                if start is not None:
                    value = b.add(value, start)
                b.store(value, offset_ptr(b, tile, I32, i * nr + v * lanes), align=4)
        for i in range(self.mr):
            m = b.add(m0, i64(i))
            with b.if_then(b.icmp_signed("<", m, i64(k.oh * k.ow))):
                if k.out_index == "nchw":
                    oy, ox = b.udiv(m, i64(k.ow)), b.urem(m, i64(k.ow))
                with for_range(b, cols, "j") as j:
                    ch = b.add(n0, j)
                    index = [img, ch, oy, ox] if k.out_index == "nchw" else [m, ch]

                    def value(i=i, j=j):
                        return b.load(offset_ptr(b, tile, I32, b.add(i64(i * nr), j)),
                                      typ=I32)
                    _epilogue(k, b, self.em, self.ptrs, self.out, index, value)


# --- depthwise ------------------------------------------------------------------------

class _DepthwiseEmitter:
    """out[c, pixel] = sum_t w[c, t] x[c, pixel + tap t], L channels per vector."""

    def __init__(self, k: QuantizedKernel, b, out, ptrs, em, constants):
        self.k, self.b, self.out, self.ptrs, self.em = k, b, out, ptrs, em
        self.dot = k.dot
        self.lanes = k.dot.lanes
        self.cpad = ceil(k.c / self.lanes) * self.lanes
        pairs = ceil(len(k.taps) / 2)
        packed = np.zeros((pairs, self.cpad, 2), np.int64)
        for t in range(len(k.taps)):
            packed[t // 2, :k.c, t % 2] = k.weights[:, 0, t]
        self.wbase = constants.global_for_bytes(packed.astype(np.int16).tobytes())
        starts = np.zeros(self.cpad, np.int64)
        starts[:k.c] = k.bias
        self.sbase = constants.global_for_bytes(starts.astype(np.int32).tobytes()) \
            if starts.any() else None
        # smlad (M-profile DSP): four channels per word of activations, unpacked into
        # halfword pairs (0, 2) and (1, 3) by sxtb16 (uxtb16 for u8), each multiplied into
        # its own accumulator (smlabb, smlatt) by weights packed as the same pairs:
        # [channel / 4][tap][(w0, w2), (w1, w3)]. A tap outside the image reads a row of
        # the pad value instead of the input, chosen once per pixel.
        self.quads = k.c // _WORD if k.dot.kind == "smlad" else 0
        if self.quads:
            w = k.weights[:self.quads * _WORD, 0, :].reshape(self.quads, _WORD, -1)
            pairs = np.stack([w[:, [0, 2], :], w[:, [1, 3], :]], axis=2)  # [q][2][2][tap]
            self.wquad = constants.global_for_bytes(
                pairs.transpose(0, 3, 2, 1).astype(np.int16).tobytes())
            self.pad_row = constants.global_for_bytes(bytes([k.pad_value & 0xFF]) * k.c)

    def emit(self):
        k, b = self.k, self.b
        lanes = self.lanes
        first = self.quads * _WORD
        full, rest = divmod(k.c - first, lanes)
        x = self.ptrs[k.x_k]
        with for_range(b, k.n, "img") as img:
            with for_range(b, k.oh * k.ow, "m") as m:
                oy, ox = b.udiv(m, i64(k.ow)), b.urem(m, i64(k.ow))
                taps = [_tap_base(k, b, x, img, oy, ox, dy, dx, i64(0)) for dy, dx in k.taps]
                if self.quads:
                    rows = [base if inside is None else b.select(inside, base, self.pad_row)
                            for base, inside in taps]
                    with for_range(b, self.quads, "cq") as cq:
                        self._quad(img, oy, ox, rows, cq)
                if full:
                    with for_range(b, full, "cv") as cv:
                        self._vector(img, oy, ox, taps, b.add(i64(first),
                                                              b.mul(cv, i64(lanes))), lanes)
                if rest:
                    self._vector(img, oy, ox, taps, i64(first + full * lanes), rest)

    def _quad(self, img, oy, ox, rows, cq):
        """Channels 4 cq .. 4 cq + 3 of one pixel, ``rows`` each tap's input there."""
        k, b = self.k, self.b
        c0 = b.mul(cq, i64(_WORD))
        if self.sbase is not None:
            acc = [b.load(offset_ptr(b, self.sbase, I32, b.add(c0, i64(j))), typ=I32, align=4)
                   for j in range(_WORD)]
        else:
            acc = [ir.Constant(I32, 0)] * _WORD
        wq = b.gep(self.wquad, [b.mul(cq, i64(len(rows) * 8))], source_etype=I8)
        for t, row in enumerate(rows):
            xw = b.load(b.gep(row, [c0], source_etype=I8), typ=I32, align=1)
            x02, x13 = halfword_pairs(b, xw, k.x_signed)
            w02 = b.load(b.gep(wq, [i64(8 * t)], source_etype=I8), typ=I32, align=4)
            w13 = b.load(b.gep(wq, [i64(8 * t + 4)], source_etype=I8), typ=I32, align=4)
            acc = [dsp_call(b, "smlabb", x02, w02, acc[0]),
                   dsp_call(b, "smlabb", x13, w13, acc[1]),
                   dsp_call(b, "smlatt", x02, w02, acc[2]),
                   dsp_call(b, "smlatt", x13, w13, acc[3])]
        tile = _stack_buffer(b, _WORD, "dwquad")
        for j in range(_WORD):
            b.store(acc[j], offset_ptr(b, tile, I32, j), align=4)
        self._store(img, oy, ox, c0, _WORD, tile)

    def _store(self, img, oy, ox, c0, count, tile):
        """Channels c0 .. c0 + count - 1 of pixel (oy, ox), their accumulators in
        ``tile``, through the epilogue to the output."""
        k, b = self.k, self.b
        with for_range(b, count, "j") as j:
            index = [img, b.add(c0, j), oy, ox]

            def value(j=j):
                return b.load(offset_ptr(b, tile, I32, j), typ=I32)
            _epilogue(k, b, self.em, self.ptrs, self.out, index, value)

    def _load(self, base, inside, c0, count):
        """``count`` channels from c0 (the rest of the vector 0) as i16 lanes."""
        k, b, lanes = self.k, self.b, self.lanes
        ptr = b.gep(base, [c0], source_etype=I8)
        if lanes == 1:
            v = b.load(ptr, typ=I8)
        elif count == lanes:
            v = b.load(ptr, typ=vec_type(I8, lanes), align=1)
        else:
            v = masked_load(b, ptr, vec_type(I8, lanes), lane_mask(lanes, count), align=1)
        hty = vec_type(I16, lanes) if lanes > 1 else I16
        v = b.sext(v, hty) if k.x_signed else b.zext(v, hty)
        if inside is None:
            return v
        pad = const_vec(I16, [k.pad_value] * lanes) if lanes > 1 else ir.Constant(I16,
                                                                                   k.pad_value)
        return b.select(inside, v, pad)

    def _vector(self, img, oy, ox, taps, c0, count):
        b = self.b
        lanes = self.lanes
        acc = _zeros(lanes)
        if self.sbase is not None:
            acc = b.load(offset_ptr(b, self.sbase, I32, c0), typ=_acc_type(lanes), align=4)
        zero = const_vec(I16, [0] * lanes) if lanes > 1 else ir.Constant(I16, 0)
        for pair in range(ceil(len(taps) / 2)):
            x0 = self._load(*taps[2 * pair], c0, count)
            x1 = self._load(*taps[2 * pair + 1], c0, count) if 2 * pair + 1 < len(taps) \
                else zero
            # (pair, channel) holds two i16: one i32 per channel
            wptr = b.gep(self.wbase, [b.add(i64(pair * self.cpad), c0)], source_etype=I32)
            w01 = b.load(wptr, typ=vec_type(I16, 2 * lanes), align=2)
            acc = self.dot.dot2(b, acc, x0, x1, w01)
        tile = _stack_buffer(b, lanes, "dwtile")
        b.store(acc, offset_ptr(b, tile, I32, 0), align=4)
        self._store(img, oy, ox, c0, count, tile)
