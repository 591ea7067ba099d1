"""The thresholds of the path choice and the tile shapes of the kernels, per target: one
``ConvTuning`` row per (vector bytes, registers), picked by ``conv_tuning``.

The thresholds were measured on one Zen 5 core with AVX-512; the rows of 16 registers
take them as they are, with tiles sized to their registers, and the AVX2 row adds
what a Zen 3 core measured (``rows_min_stem_pixels``). benchmarks/conv_tuning.md
lists each field's measurements and the benchmarks/kernels.py cases that repeat them; a
target that measures otherwise brings its own row.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ConvTuning:
    """One target's row: each field with why it exists (its measurements:
    benchmarks/conv_tuning.md)."""
    # DirectConv for 3x3 stride-1 windows that keep the map's size (path.direct_pays).
    direct_max_cout: int        # more: the GEMM's packed slivers serve enough channel tiles
    direct_min_pixels: int      # fewer: ChannelConv's vectors of channels stay fuller
    # Winograd F(2x2, 3x3) for 3x3 stride-1 windows of one group (path.winograd_pays).
    winograd_min_channels: int  # fewer: its GEMMs' rows and K run short
    winograd_max_cin: int       # its scratch holds a block of tiles of every input channel
    winograd_min_pixels: int    # fewer: much of its tiles' GEMM columns is padding
    # Cin x Cout per output pixel: more, and transforming the weights at each call costs
    # more than it saves.
    winograd_max_pairs_per_pixel: int
    # ChannelConv (output channels in lanes, constant weights).
    channels_max_cin: int       # stems: the GEMM's K is short, its gathers cost its FMAs
    channels_max_pixels: int    # windows on small maps, where vectors of pixels go empty
    # Strided 1x1 windows below this many pixels; above, the GEMM packs them from input
    # rows (SubsamplePacker).
    channels_max_strided_pointwise_pixels: int
    # 1x1 windows at stride 1 up to this many pixels, from 64 pixels up only where the
    # output channels fill the tile's panels or K is this long.
    channels_max_pointwise_pixels: int
    channels_min_pointwise_cin: int
    channels_vectors: int       # per tile: at one, the broadcasts, not the FMAs, set the pace
    channels_cols: int          # the most pixels of a tile along a row
    # A 1x1 window's tile with 32 registers: this many vectors by this many accumulators
    # (2 vectors by 28 left LLVM too few registers for its broadcasts).
    pointwise_vectors: int
    pointwise_accumulators: int
    # RowConv: the stems ChannelConv does not take, up to this many output channels,
    # this many per tile (each input vector feeds that many FMAs).
    rows_max_cout: int
    rows_mr: int
    # ... and, from this many output pixels, the stems of windows up to 3x3 that
    # ChannelConv would take (None: ChannelConv keeps them).
    rows_min_stem_pixels: int | None
    # DepthwiseRows and RowConv read stride x lanes columns per vector and keep every
    # stride-th; wider strides keep Depthwise's gathers (and RowConv the GEMM).
    rows_max_stride: int
    # DepthwiseRows' interior in steps of this many output rows by this many vectors.
    depthwise_rows_block: int
    depthwise_rows_unroll: int
    # SubsamplePacker (the GEMM of strided 1x1 windows): a read of stride x lanes columns
    # per piece, the most output rows a vector of pixels lies on, and the lanes its
    # masked reads need (16-byte vectors, SSE and NEON, have no masked loads).
    subsample_max_stride: int
    subsample_max_pieces: int
    subsample_min_lanes: int


ZEN5_AVX512 = ConvTuning(
    direct_max_cout=32, direct_min_pixels=64,
    winograd_min_channels=32, winograd_max_cin=256, winograd_min_pixels=100,
    winograd_max_pairs_per_pixel=128,
    channels_max_cin=4, channels_max_pixels=256, channels_max_strided_pointwise_pixels=64,
    channels_max_pointwise_pixels=196, channels_min_pointwise_cin=128, channels_vectors=2,
    channels_cols=14, pointwise_vectors=3, pointwise_accumulators=24,
    rows_max_cout=32, rows_mr=8, rows_min_stem_pixels=None, rows_max_stride=4,
    depthwise_rows_block=4, depthwise_rows_unroll=2,
    subsample_max_stride=4, subsample_max_pieces=4, subsample_min_lanes=8)

# 4 rows by 2 vectors of accumulators and a 3x3 window's 9 weights need 32 registers.
SIXTEEN_REGISTERS = replace(ZEN5_AVX512, depthwise_rows_block=1, depthwise_rows_unroll=4)

# On Zen 3, RowConv ran 3x3 stems (3 -> 8 to 32 channels, stride 1 and 2) from 32 x 32
# output pixels in 0.41 to 0.95 of ChannelConv's time (benchmarks/conv_tuning.md).
ZEN3_AVX2 = replace(SIXTEEN_REGISTERS, rows_min_stem_pixels=1024)

TUNING = {
    (64, 32): ZEN5_AVX512,          # AVX-512
    (32, 16): ZEN3_AVX2,            # AVX2
    (16, 16): SIXTEEN_REGISTERS,    # SSE, NEON, RISC-V V, as TargetInfo counts them
    (4, 16): SIXTEEN_REGISTERS,     # no SIMD
}


def conv_tuning(vector_bytes: int, registers: int) -> ConvTuning:
    """The row of a target; a pair the table lacks takes the row of its registers."""
    return TUNING.get((vector_bytes, registers),
                      ZEN5_AVX512 if registers >= 32 else SIXTEEN_REGISTERS)
