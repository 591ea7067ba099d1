"""Convolution kernels: ``plan_conv`` and ``plan_conv_fusion`` plan one.

Fast paths, f32 with ONNX's layout (input/output N C spatial..., kernel O I spatial...),
batch_group_count 1 and no base (lhs) dilation; any stride, padding, window dilation,
feature groups and number of spatial dims. One kernel per module:

- ``implicit_gemm.py`` ``ConvGemm``: per image and group, the weights times an im2col
  matrix that is never built (gemm.py packs one sliver of it at a time).
- ``depthwise.py`` ``Depthwise``: one input channel per group, vectors of output pixels.
- ``depthwise_rows.py`` ``DepthwiseRows``: the same along output rows (2-D windows), wide
  loads and a shuffle in place of gathers.
- ``row_conv.py`` ``RowConv``: stems of few channels along output rows, weights as they
  come.
- ``direct.py`` ``DirectConv``: any channels, tiles of output channels by pixels, the
  input read in place: no scratch, the ``lean`` variant of the paths that have some.
- ``winograd.py`` ``WinogradConv``: F(2x2, 3x3) for 3x3 stride-1 windows of one group.
- ``channel_conv.py`` ``ChannelConv``: output channels in lanes, constant weights packed
  at compile time (``pack_weights``), the input read in place: no scratch.
- ``naive.py`` ``NaiveConv``: everything else, a loop nest for the exact shapes.

``geometry.py`` holds what they share: the window they are compiled from
(``ConvWindow``), the sizes of a call (``ConvSizes``: batch, groups, channels and image
sizes are run-time arguments, so e.g. every 1x1 convolution of a model shares one
function) and the coordinates of vectors of pixels. ``path.py`` chooses the path from
the target's tiling and its row of ``tuning.py``'s table; ``plan.py`` makes the plan.

Each fast kernel applies the epilogue of its output fusion (epilogue.py: the bias,
scale, activation and residual add the optimizer's output fusion fuses after a float convolution)
to the results in registers before storing them.
"""
from .path import has_fast_path
from .plan import plan_conv, plan_conv_fusion

__all__ = ["has_fast_path", "plan_conv", "plan_conv_fusion"]
