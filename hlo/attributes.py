"""Typed, immutable attribute values carried in ``Instruction.attrs``.

Per opcode (see the opcode table):
  parameter          number: int
  iota               iota_dimension: int
  compare            direction: str, one of EQ NE LT LE GT GE
  broadcast          dimensions: tuple[int]   (operand dim i -> result dim dimensions[i])
  transpose          dimensions: tuple[int]   (result dim i = operand dim dimensions[i])
  reverse            dimensions: tuple[int]
  reduce             dimensions: tuple[int]   (dimensions reduced away)
  concatenate        dimension: int
  slice              slice: SliceSpec
  pad                padding: PaddingConfig
  dot                dimension_numbers: DotDimensionNumbers
  convolution        window: Window, dimension_numbers: ConvDimensionNumbers,
                     feature_group_count: int, batch_group_count: int
  reduce-window      window: Window
  sort               dimension: int (the dimension sorted along), is_stable: bool
  topk               k: int, largest: bool
  gather             dimension_numbers: GatherDimensionNumbers, slice_sizes: tuple[int]
  scatter            dimension_numbers: ScatterDimensionNumbers; to_apply combines the
                     operand's element with the update's
  get-tuple-element  index: int
  fusion             kind: str ('kLoop', 'kInput', 'kOutput')
  dynamic-slice      dynamic_slice_sizes: tuple[int]
  custom-call        custom_call_target: str (a C identifier), backend_config: str
                     (bytes the function receives, "" by default)

Called computations (``Instruction.called``), not attributes:
  reduce, reduce-window   [to_apply]
  fusion                  [the fused computation]
  while                   [condition, body]
  conditional             [true, false] for a pred index; [branch 0, ..., branch N-1]
                          for an s32 index
"""
from __future__ import annotations

from dataclasses import dataclass


def _ints(v) -> tuple[int, ...]:
    return tuple(int(x) for x in v)


@dataclass(frozen=True)
class SliceSpec:
    starts: tuple[int, ...]
    limits: tuple[int, ...]
    strides: tuple[int, ...]

    def __post_init__(self):
        for f in ("starts", "limits", "strides"):
            object.__setattr__(self, f, _ints(getattr(self, f)))


@dataclass(frozen=True)
class PaddingConfig:
    low: tuple[int, ...]        # may be negative (crops), as in XLA
    high: tuple[int, ...]
    interior: tuple[int, ...]

    def __post_init__(self):
        for f in ("low", "high", "interior"):
            object.__setattr__(self, f, _ints(getattr(self, f)))


@dataclass(frozen=True)
class Window:
    """One entry per spatial (or, for reduce-window, per operand) dimension."""
    size: tuple[int, ...]
    stride: tuple[int, ...]
    pad_low: tuple[int, ...]
    pad_high: tuple[int, ...]
    lhs_dilation: tuple[int, ...]   # base dilation
    rhs_dilation: tuple[int, ...]   # window dilation

    def __post_init__(self):
        for f in ("size", "stride", "pad_low", "pad_high", "lhs_dilation", "rhs_dilation"):
            object.__setattr__(self, f, _ints(getattr(self, f)))

    @staticmethod
    def make(size, stride=None, pad_low=None, pad_high=None, lhs_dilation=None,
             rhs_dilation=None) -> "Window":
        n = len(size)
        return Window(size, stride or (1,) * n, pad_low or (0,) * n, pad_high or (0,) * n,
                      lhs_dilation or (1,) * n, rhs_dilation or (1,) * n)

    @property
    def rank(self) -> int:
        return len(self.size)


@dataclass(frozen=True)
class ConvDimensionNumbers:
    """Which dimension of each array is batch, feature and spatial (XLA's dim_labels)."""
    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_output: int
    kernel_input: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]

    def __post_init__(self):
        for f in ("input_spatial", "kernel_spatial", "output_spatial"):
            object.__setattr__(self, f, _ints(getattr(self, f)))

    @staticmethod
    def nchw(num_spatial: int) -> "ConvDimensionNumbers":
        """ONNX's layout: input/output NC<spatial>, kernel OI<spatial> (bf01_oi01->bf01)."""
        sp = tuple(range(2, 2 + num_spatial))
        return ConvDimensionNumbers(0, 1, sp, 0, 1, sp, 0, 1, sp)


@dataclass(frozen=True)
class DotDimensionNumbers:
    lhs_batch: tuple[int, ...]
    lhs_contracting: tuple[int, ...]
    rhs_batch: tuple[int, ...]
    rhs_contracting: tuple[int, ...]

    def __post_init__(self):
        for f in ("lhs_batch", "lhs_contracting", "rhs_batch", "rhs_contracting"):
            object.__setattr__(self, f, _ints(getattr(self, f)))


@dataclass(frozen=True)
class GatherDimensionNumbers:
    """XLA's gather dimension numbers. A batching dim pairs operand dim
    ``operand_batching_dims[k]`` with start-indices dim ``start_indices_batching_dims[k]``:
    the slice for a batch position is taken at that position's own index in the operand
    (GatherElements, GatherND's batch_dims), with slice size 1 and no offset dim."""
    offset_dims: tuple[int, ...]
    collapsed_slice_dims: tuple[int, ...]
    start_index_map: tuple[int, ...]
    index_vector_dim: int
    operand_batching_dims: tuple[int, ...] = ()
    start_indices_batching_dims: tuple[int, ...] = ()

    def __post_init__(self):
        for f in ("offset_dims", "collapsed_slice_dims", "start_index_map",
                  "operand_batching_dims", "start_indices_batching_dims"):
            object.__setattr__(self, f, _ints(getattr(self, f)))


@dataclass(frozen=True)
class ScatterDimensionNumbers:
    """XLA's scatter dimension numbers: ``update_window_dims`` are the dims of the
    updates that form a window, ``inserted_window_dims`` the operand dims a window
    lacks (size 1), ``scatter_dims_to_operand_dims[k]`` the operand dim that index
    vector element k addresses, ``index_vector_dim`` the dim of the indices that holds
    the index vectors (the rank: an implicit trailing 1); batching dims as in gather."""
    update_window_dims: tuple[int, ...]
    inserted_window_dims: tuple[int, ...]
    scatter_dims_to_operand_dims: tuple[int, ...]
    index_vector_dim: int
    input_batching_dims: tuple[int, ...] = ()
    scatter_indices_batching_dims: tuple[int, ...] = ()

    def __post_init__(self):
        for f in ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                  "input_batching_dims", "scatter_indices_batching_dims"):
            object.__setattr__(self, f, _ints(getattr(self, f)))
