"""Convolution phase splitting on HLO text: a base-dilated convolution becomes dense
per-phase convolutions and an interleaving copy, with the same values; others stay."""
import numpy as np
import pytest

from xlac.hlo import Opcode
from xlac.hlo.evaluator import evaluate
from xlac.hlo.text import parse_module, print_module
from xlac.hlo.verifier import verify
from xlac.optimizer import ConvPhaseSplit, DeadCodeElimination

# A stride-2 3x3 transposed convolution of a 5x4 image (ConvTranspose pads=1,
# output_padding=1): base dilation 2, low pad 1, high pad 2.
TRANSPOSED = """
HloModule transposed

ENTRY %main (x: f32[1,2,5,4]{3,2,1,0}, k: f32[3,2,3,3]{3,2,1,0}) -> f32[1,3,10,8]{3,2,1,0} {
  %x = f32[1,2,5,4]{3,2,1,0} parameter(0)
  %k = f32[3,2,3,3]{3,2,1,0} parameter(1)
  ROOT %conv = f32[1,3,10,8]{3,2,1,0} convolution(f32[1,2,5,4]{3,2,1,0} %x, f32[3,2,3,3]{3,2,1,0} %k), window={size=3x3 pad=1_2x1_2 lhs_dilate=2x2}, dim_labels=bf01_oi01->bf01
}
"""


def _args(m, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape.dims).astype(np.float32) for p in m.entry.parameters]


def split(text):
    m = parse_module(text)
    args = _args(m)
    before = evaluate(m, args)
    changed = ConvPhaseSplit().run(m)
    DeadCodeElimination().run(m)
    verify(m)
    for a, b in zip(before, evaluate(m, args)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
    return changed, m


def convolutions(m):
    return [i for i in m.entry.instructions if i.opcode is Opcode.CONVOLUTION]


def test_transposed_convolution_splits_into_four_dense_phases():
    changed, m = split(TRANSPOSED)
    assert changed
    convs = convolutions(m)
    assert len(convs) == 4
    for c in convs:
        w = c.attrs["window"]
        assert w.lhs_dilation == (1, 1) and w.stride == (1, 1)
        assert all(p >= 0 for p in w.pad_low + w.pad_high)
        assert c.shape.dims[2:] == (5, 4)          # ceil(10 / 2), ceil(8 / 2)
    # phase taps: 2 then 1 (or 1 then 2) of the 3 kernel rows and columns
    assert sorted(c.attrs["window"].size for c in convs) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert m.entry.root.opcode is Opcode.RESHAPE      # concat -> reshape -> transpose -> reshape


def test_odd_output_is_sliced_and_dilated_window_keeps_its_taps():
    # 1-D, base dilation 3, window dilation 2, output 13 (not a multiple of 3)
    changed, m = split("""
HloModule odd

ENTRY %main (x: f32[2,1,4]{2,1,0}, k: f32[2,1,4]{2,1,0}) -> f32[2,2,13]{2,1,0} {
  %x = f32[2,1,4]{2,1,0} parameter(0)
  %k = f32[2,1,4]{2,1,0} parameter(1)
  ROOT %conv = f32[2,2,13]{2,1,0} convolution(f32[2,1,4]{2,1,0} %x, f32[2,1,4]{2,1,0} %k), window={size=4 pad=5_4 lhs_dilate=3 rhs_dilate=2}, dim_labels=bf0_oi0->bf0
}
""")
    assert changed and m.entry.root.opcode is Opcode.SLICE
    assert all(c.attrs["window"].lhs_dilation == (1,) for c in convolutions(m))


def test_phase_without_taps_is_zero():
    # a 1-wide window with base dilation 2: odd outputs read only dilation holes
    changed, m = split("""
HloModule holes

ENTRY %main (x: f32[1,1,3]{2,1,0}, k: f32[1,1,1]{2,1,0}) -> f32[1,1,5]{2,1,0} {
  %x = f32[1,1,3]{2,1,0} parameter(0)
  %k = f32[1,1,1]{2,1,0} parameter(1)
  ROOT %conv = f32[1,1,5]{2,1,0} convolution(f32[1,1,3]{2,1,0} %x, f32[1,1,1]{2,1,0} %k), window={size=1 lhs_dilate=2}, dim_labels=bf0_oi0->bf0
}
""")
    assert changed and len(convolutions(m)) == 1
    assert any(i.opcode is Opcode.BROADCAST for i in m.entry.instructions)


def test_groups_and_undilated_dims_keep_their_window():
    changed, m = split("""
HloModule mixed

ENTRY %main (x: f32[1,4,5,7]{3,2,1,0}, k: f32[6,2,3,2]{3,2,1,0}) -> f32[1,6,11,3]{3,2,1,0} {
  %x = f32[1,4,5,7]{3,2,1,0} parameter(0)
  %k = f32[6,2,3,2]{3,2,1,0} parameter(1)
  ROOT %conv = f32[1,6,11,3]{3,2,1,0} convolution(f32[1,4,5,7]{3,2,1,0} %x, f32[6,2,3,2]{3,2,1,0} %k), window={size=3x2 stride=1x3 pad=2_2x0_1}, dim_labels=bf01_oi01->bf01, feature_group_count=2
}
""".replace("pad=2_2x0_1}", "pad=2_2x0_1 lhs_dilate=2x1}"))
    assert changed
    for c in convolutions(m):
        w = c.attrs["window"]
        assert w.stride == (1, 3) and w.size[1] == 2 and (w.pad_low[1], w.pad_high[1]) == (0, 1)
        assert c.attrs["feature_group_count"] == 2


@pytest.mark.parametrize("seed", range(30))
def test_random_windows_keep_their_values(seed):
    rng = np.random.default_rng(seed)
    n, k, lhs, dil = (int(v) for v in rng.integers((1, 1, 1, 1), (7, 5, 4, 4)))
    lo, hi = (int(v) for v in rng.integers(-2, 6, 2))
    hi = max(hi, (k - 1) * dil - (n - 1) * lhs - lo)      # at least one output
    out = (n - 1) * lhs + 1 + lo + hi - (k - 1) * dil
    changed, m = split(f"""
HloModule r

ENTRY %main (x: f32[2,3,{n}]{{2,1,0}}, k: f32[2,3,{k}]{{2,1,0}}) -> f32[2,2,{out}]{{2,1,0}} {{
  %x = f32[2,3,{n}]{{2,1,0}} parameter(0)
  %k = f32[2,3,{k}]{{2,1,0}} parameter(1)
  ROOT %conv = f32[2,2,{out}]{{2,1,0}} convolution(f32[2,3,{n}]{{2,1,0}} %x, f32[2,3,{k}]{{2,1,0}} %k), window={{size={k} pad={lo}_{hi} lhs_dilate={lhs} rhs_dilate={dil}}}, dim_labels=bf0_oi0->bf0
}}
""")
    assert changed == (lhs > 1)


def test_does_not_split_a_convolution_without_base_dilation():
    text = TRANSPOSED.replace(" lhs_dilate=2x2", "").replace("10,8", "6,5")
    m = parse_module(text)
    assert not ConvPhaseSplit().run(m)
    assert print_module(m) == print_module(parse_module(text))


def test_does_not_split_a_strided_base_dilated_dim():
    text = TRANSPOSED.replace("pad=1_2x1_2", "stride=2x1 pad=1_2x1_2").replace("10,8", "5,8")
    m = parse_module(text)
    assert not ConvPhaseSplit().run(m)


def test_does_not_split_batch_groups():
    text = """
HloModule bg

ENTRY %main (x: f32[2,2,3]{2,1,0}, k: f32[2,2,2]{2,1,0}) -> f32[1,2,6]{2,1,0} {
  %x = f32[2,2,3]{2,1,0} parameter(0)
  %k = f32[2,2,2]{2,1,0} parameter(1)
  ROOT %conv = f32[1,2,6]{2,1,0} convolution(f32[2,2,3]{2,1,0} %x, f32[2,2,2]{2,1,0} %k), window={size=2 pad=1_1 lhs_dilate=2}, dim_labels=bf0_oi0->bf0, batch_group_count=2
}
"""
    m = parse_module(text)
    assert not ConvPhaseSplit().run(m)
