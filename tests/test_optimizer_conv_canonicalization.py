"""Convolution canonicalization on HLO text: a convolution over another dimension order
becomes one over bf01_oi01->bf01 between transposes, with the same values; one already
in that order stays as it is."""
import numpy as np
import pytest

from xlac.hlo import ConvDimensionNumbers, Opcode
from xlac.hlo.evaluator import evaluate
from xlac.hlo.text import parse_module
from xlac.hlo.verifier import verify
from xlac.optimizer import ConvCanonicalization, DeadCodeElimination

# JAX's NHWC input and HWIO kernel, stride 2, feature groups 2
NHWC = """
HloModule nhwc

ENTRY %main (x: f32[2,7,6,4]{3,2,1,0}, k: f32[3,2,2,6]{3,2,1,0}) -> f32[2,4,3,6]{3,2,1,0} {
  %x = f32[2,7,6,4]{3,2,1,0} parameter(0)
  %k = f32[3,2,2,6]{3,2,1,0} parameter(1)
  ROOT %conv = f32[2,4,3,6]{3,2,1,0} convolution(f32[2,7,6,4]{3,2,1,0} %x, f32[3,2,2,6]{3,2,1,0} %k), window={size=3x2 stride=2x2 pad=1_1x0_1}, dim_labels=b01f_01io->b01f, feature_group_count=2
}
"""
# a 1-d convolution whose output puts the feature first and the batch last
ODD_1D = """
HloModule odd

ENTRY %main (x: f32[5,3,9]{2,1,0}, k: f32[2,5,4]{2,1,0}) -> f32[4,9,2]{2,1,0} {
  %x = f32[5,3,9]{2,1,0} parameter(0)
  %k = f32[2,5,4]{2,1,0} parameter(1)
  ROOT %conv = f32[4,9,2]{2,1,0} convolution(f32[5,3,9]{2,1,0} %x, f32[2,5,4]{2,1,0} %k), window={size=2}, dim_labels=f0b_0io->fb0
}
"""
NCHW = """
HloModule nchw

ENTRY %main (x: f32[2,4,7,6]{3,2,1,0}, k: f32[6,2,3,2]{3,2,1,0}) -> f32[2,6,4,3]{3,2,1,0} {
  %x = f32[2,4,7,6]{3,2,1,0} parameter(0)
  %k = f32[6,2,3,2]{3,2,1,0} parameter(1)
  ROOT %conv = f32[2,6,4,3]{3,2,1,0} convolution(f32[2,4,7,6]{3,2,1,0} %x, f32[6,2,3,2]{3,2,1,0} %k), window={size=3x2 stride=2x2 pad=1_1x0_1}, dim_labels=bf01_oi01->bf01, feature_group_count=2
}
"""


def canonicalize(text):
    m = parse_module(text)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in m.entry.parameters]
    before = evaluate(m, args)
    changed = ConvCanonicalization().run(m)
    DeadCodeElimination().run(m)
    verify(m)
    for a, b in zip(before, evaluate(m, args)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
    return changed, m


def _conv(m):
    conv, = [i for i in m.entry.instructions if i.opcode is Opcode.CONVOLUTION]
    return conv


@pytest.mark.parametrize("text, rank", [(NHWC, 2), (ODD_1D, 1)])
def test_other_orders_become_onnx_order_between_transposes(text, rank):
    changed, m = canonicalize(text)
    assert changed
    conv = _conv(m)
    assert conv.attrs["dimension_numbers"] == ConvDimensionNumbers.nchw(rank)
    assert [o.opcode for o in conv.operands] == [Opcode.TRANSPOSE, Opcode.TRANSPOSE]
    assert m.entry.root.opcode is Opcode.TRANSPOSE and m.entry.root.operands == [conv]


def test_window_and_groups_are_kept():
    _, m = canonicalize(NHWC)
    conv = _conv(m)
    assert conv.attrs["window"].stride == (2, 2) and conv.attrs["feature_group_count"] == 2
    assert conv.shape.dims == (2, 6, 4, 3)


def test_does_not_touch_a_convolution_in_onnx_order():
    m = parse_module(NCHW)
    assert not ConvCanonicalization().run(m)
    assert m.entry.root.opcode is Opcode.CONVOLUTION
