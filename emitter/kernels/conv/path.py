"""Which kernel a convolution runs: ``conv_path``, from the instruction, the target's
tiling and its ``ConvTuning`` row (tuning.py).

The paths, in the order they are tried (the first that applies):

    naive           not f32, other dimension numbers, base dilation or batch groups
    depthwise_rows  one input channel per group, few outputs per group, 2-D, column
                    stride 2 to rows_max_stride, or 1 where a row fills over half a vector
    depthwise       the other depthwise windows
    winograd        3x3 stride 1, one group, enough channels on a large enough map
    direct          3x3 stride 1 keeping the map's size, few output channels, 64+ pixels
    rows            stems of windows up to 3x3 from rows_min_stem_pixels output pixels
    channels        constant weights, output channels a multiple of the lanes: stems,
                    windows on small maps, strided windows, 1x1 windows on small maps
    rows            the stems ChannelConv does not take, up to rows_max_cout channels
    gemm_subsample  strided 1x1 windows: the implicit GEMM packing from input rows
    gemm            the rest: the implicit GEMM
"""
from __future__ import annotations

from math import prod

from ....hlo import ConvDimensionNumbers, Instruction, Opcode, Window, dtypes
from ..gemm import Tiling
from .channel_conv import channel_tile
from .direct import DIRECT_MAX_POSITIONS
from .geometry import ConvSizes, ConvWindow
from .implicit_gemm import subsample_pieces
from .tuning import ConvTuning


def has_fast_path(instr: Instruction) -> bool:
    """An f32 convolution over N C spatial... tensors (ONNX's layout), no base dilation,
    no batch groups and not empty: what the fast kernels run (anything else is
    NaiveConv's)."""
    if instr.opcode is not Opcode.CONVOLUTION or instr.shape.dtype != dtypes.F32:
        return False
    dn, w = instr.attrs["dimension_numbers"], instr.attrs["window"]
    return (instr.attrs.get("batch_group_count", 1) == 1
            and dn == ConvDimensionNumbers.nchw(w.rank) and all(d == 1 for d in w.lhs_dilation)
            and instr.shape.num_elements > 0)


def conv_path(instr: Instruction, t: Tiling, tuning: ConvTuning,
              constant_weights: bool) -> str:
    """The path of the convolution ``instr`` (module docstring) for a target of tiling
    ``t`` and tuning row ``tuning``; ``constant_weights``: its weights are known at
    compile time (ChannelConv packs them)."""
    if not has_fast_path(instr):
        return "naive"
    w = instr.attrs["window"]
    sizes = ConvSizes.of(instr)
    pixels = sizes.out_pixels
    width = instr.shape.dims[-1]
    if sizes.cin_g == 1 and sizes.cout_g < t.mr:
        # Rows at stride 1 only where a row fills more than half a vector: narrower maps
        # (7x7, 25x5) fill Depthwise's flat vectors of pixels better.
        rows = w.rank == 2 and (2 <= w.stride[1] <= tuning.rows_max_stride
                                or w.stride[1] == 1 and 2 * width > t.lanes)
        return "depthwise_rows" if rows and prod(w.size) <= DIRECT_MAX_POSITIONS else "depthwise"
    if winograd_pays(w, sizes, t, tuning):
        return "winograd"
    if direct_pays(instr, w, sizes, t, tuning):
        return "direct"
    rows = row_conv_fits(w, sizes, width, t, tuning)
    if (rows and tuning.rows_min_stem_pixels is not None and prod(w.size) <= 9
            and pixels >= tuning.rows_min_stem_pixels):
        return "rows"
    if (constant_weights and w.rank == 2 and t.lanes >= 4 and sizes.cout_g % t.lanes == 0
            and prod(w.size) <= DIRECT_MAX_POSITIONS
            and (sizes.cin_g <= tuning.channels_max_cin
                 or prod(w.size) > 1 and (pixels <= tuning.channels_max_pixels
                                          or max(w.stride) > 1)
                 or pixels < tuning.channels_max_strided_pointwise_pixels
                 or pixels <= tuning.channels_max_pointwise_pixels
                 and all(s == 1 for s in w.stride)
                 and (sizes.cout_g % _channel_panel(instr, sizes, t, tuning) == 0
                      or sizes.cin_g >= tuning.channels_min_pointwise_cin))):
        return "channels"
    if rows:
        return "rows"
    if (w.rank == 2 and t.lanes >= tuning.subsample_min_lanes and all(k == 1 for k in w.size)
            and not any(w.pad_low) and not any(w.pad_high) and any(v > 1 for v in w.stride)
            and w.stride[1] <= tuning.subsample_max_stride
            and subsample_pieces(width, t.lanes) <= tuning.subsample_max_pieces):
        return "gemm_subsample"
    return "gemm"


def row_conv_fits(w: Window, sizes: ConvSizes, width: int, t: Tiling,
                  tuning: ConvTuning) -> bool:
    """A stem RowConv runs: 2-D, few input and output channels, a column stride it reads
    in vectors, rows wider than half a vector."""
    return (w.rank == 2 and t.lanes >= 4 and sizes.cin_g <= tuning.channels_max_cin
            and sizes.cout_g <= tuning.rows_max_cout and w.stride[1] <= tuning.rows_max_stride
            and 2 * width > t.lanes and prod(w.size) <= DIRECT_MAX_POSITIONS)


def winograd_pays(w: Window, sizes: ConvSizes, t: Tiling, tuning: ConvTuning) -> bool:
    """3x3, stride 1, dilation 1, one group, with SIMD (winograd.py), where it beats the
    implicit GEMM and ChannelConv: channels to fill its GEMMs' rows and K, and a map large
    enough to pay for transforming every channel pair's weights at each call (Cin x Cout
    per output pixel bounded)."""
    if not (w.rank == 2 and tuple(w.size) == (3, 3) and tuple(w.stride) == (1, 1)
            and tuple(w.rhs_dilation) == (1, 1) and sizes.groups == 1 and t.lanes >= 4):
        return False
    cin, cout, pixels = sizes.cin_g, sizes.cout_g, sizes.out_pixels
    return (min(cin, cout) >= tuning.winograd_min_channels and cin <= tuning.winograd_max_cin
            and pixels >= tuning.winograd_min_pixels
            and cin * cout <= tuning.winograd_max_pairs_per_pixel * pixels)


def direct_pays(instr: Instruction, w: Window, sizes: ConvSizes, t: Tiling,
                tuning: ConvTuning) -> bool:
    """3x3 windows at stride 1 that keep the map's size (``ConvWindow.contiguous``: each
    window position reads the input as it lies, vector loads masked at the borders),
    with SIMD, few output channels per group on maps that are not small: where
    DirectConv, which reads the input in place for every tile of MR channels, beats the
    implicit GEMM, whose im2col slivers are packed for only a few such tiles, and
    ChannelConv, whose vectors of channels few channels leave half empty."""
    if not (w.rank == 2 and tuple(w.size) == (3, 3) and tuple(w.rhs_dilation) == (1, 1)
            and t.lanes >= 4 and sizes.cout_g <= tuning.direct_max_cout
            and sizes.out_pixels >= tuning.direct_min_pixels):
        return False
    return ConvWindow.of(w, instr.operands[0].shape.dims[2:]).contiguous


def _channel_panel(instr: Instruction, sizes: ConvSizes, t: Tiling,
                   tuning: ConvTuning) -> int:
    """Output channels per panel of ChannelConv's tile for ``instr``."""
    window = ConvWindow.of(instr.attrs["window"], instr.operands[0].shape.dims[2:])
    return channel_tile(window, sizes, t, tuning)[0] * t.lanes
