"""The HLO importer's rules for what XLA writes beyond our IR, on small HLO text
modules (no JAX needed): each is parsed, then evaluated against numpy."""
from __future__ import annotations

import re

import numpy as np
import pytest

from xlac.hlo import Opcode, XlacError
from xlac.hlo.evaluator import evaluate
from xlac.hlo.text import HloParseError, parse_module
from xlac.importers.hlo import import_hlo, is_hlo_text

CALLS = b"""HloModule jit_f, entry_computation_layout={(f32[3]{0})->(f32[3]{0}, f32[3]{0})}

twice.1 {
  a.1 = f32[3]{0} parameter(0)
  ROOT add.1 = f32[3]{0} add(a.1, a.1)
}

outer.2 {
  b.1 = f32[3]{0} parameter(0)
  c.1 = f32[3]{0} call(b.1), to_apply=twice.1
  ROOT m.1 = f32[3]{0} multiply(c.1, b.1)
}

ENTRY main.3 {
  x.1 = f32[3]{0} parameter(0)
  y.1 = f32[3]{0} call(x.1), to_apply=outer.2, frontend_attributes={inlineable="true"}
  z.1 = f32[3]{0} opt-barrier(y.1)
  ROOT t.1 = (f32[3]{0}, f32[3]{0}) tuple(z.1, x.1)
}
"""


def test_calls_are_inlined_and_their_computations_dropped():
    m = import_hlo(CALLS)
    assert [c.name for c in m.computations] == ["main.3"]
    assert {i.opcode for i in m.entry.instructions} == {
        Opcode.PARAMETER, Opcode.ADD, Opcode.MULTIPLY, Opcode.TUPLE}
    x = np.array([1, 2, 3], np.float32)
    got = evaluate(m, [x])
    np.testing.assert_array_equal(got[0], 2 * x * x)
    assert [s.name for s in m.signature.inputs] == ["x"]
    assert [s.name for s in m.signature.outputs] == ["out0", "out1"]


@pytest.mark.parametrize("old, new, message", [
    (b"call(b.1), to_apply=twice.1", b"call(b.1, b.1), to_apply=twice.1",
     "call %c.1 does not match %twice.1's signature"),
    (b"call(b.1), to_apply=twice.1", b"call(b.1)", "call %c.1 needs to_apply"),
    (b"opt-barrier(y.1)", b"opt-barrier(y.1, x.1)", "opt-barrier %z.1 takes one operand"),
])
def test_malformed_calls_are_errors(old, new, message):
    with pytest.raises(HloParseError, match=re.escape(message)):
        import_hlo(CALLS.replace(old, new))


TOTAL_ORDER = b"""HloModule m

ENTRY main {
  a = f32[6]{0} parameter(0)
  b = f32[6]{0} parameter(1)
  ROOT lt = pred[6]{0} compare(a, b), direction=LT, type=TOTALORDER
}
"""


def test_total_order_compare_orders_signed_zeros_and_nans():
    m = import_hlo(TOTAL_ORDER)
    assert Opcode.BITCAST_CONVERT in {i.opcode for i in m.entry.instructions}
    a = np.array([-0.0, 0.0, -np.nan, np.inf, -np.inf, 1.0], np.float32)
    b = np.array([0.0, -0.0, -np.inf, np.nan, -np.nan, 2.0], np.float32)
    got, = evaluate(m, [a, b])
    assert got.tolist() == [True, False, True, True, False, True]


@pytest.mark.parametrize("attribute, message", [
    ("sharding={devices=[2]0,1}", "sharded over several devices"),
    ("frobnicate=3", "unsupported attribute frobnicate=3 of XLA op exponential"),
])
def test_attributes_that_change_the_meaning_are_refused(attribute, message):
    text = b"HloModule m\n\nENTRY main {\n  a = f32[2]{0} parameter(0)\n  ROOT e = f32[2]{0} " \
        b"exponential(a), " + attribute.encode() + b"\n}\n"
    with pytest.raises(HloParseError, match=message):
        import_hlo(text)


@pytest.mark.parametrize("sharding", ["{replicated}", "{maximal device=0}",
                                      "{devices=[1,1]0}"])
def test_single_device_sharding_and_xla_hints_are_dropped(sharding):
    text = (b"HloModule m\n\nENTRY main {\n  a = f32[2,2]{1,0} parameter(0), sharding="
            + sharding.encode() + b"\n  ROOT d = f32[2,2]{0,1} dot(a, a), "
            b"lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
            b"operand_precision={highest,highest}, metadata={op_name=\"jit(f)/dot\"}\n}\n")
    m = import_hlo(text)
    assert m.entry.root.shape.has_default_layout        # layouts are XLA's hints
    a = np.arange(4, dtype=np.float32).reshape(2, 2)
    np.testing.assert_array_equal(evaluate(m, [a])[0], a @ a)


def test_every_missing_op_is_listed_once():
    text = b"""HloModule m

ENTRY main {
  a = s32[2]{0} parameter(0)
  p = s32[2]{0} fft(a), fft_type=FFT, fft_length={2}
  q = s32[2]{0} fft(p), fft_type=FFT, fft_length={2}
  c = (s32[2]{0}, s32[]) custom-call(q), custom_call_target="lapack_sgesdd_ffi"
  ROOT r = s32[2]{0} get-tuple-element(c), index=0
}
"""
    with pytest.raises(XlacError) as info:
        import_hlo(text)
    assert str(info.value) == ("unsupported XLA ops: fft at %p, %q (complex numbers: xlac "
                               "reads them from StableHLO, lowered.as_text()); "
                               "custom-call lapack_sgesdd_ffi at %c (a LAPACK routine other "
                               "than potrf, trsm and getrf, which xlac expands)")


@pytest.mark.parametrize("old, new, message", [
    ("HloModule m", "HloModule m, num_partitions=2", "several devices (num_partitions=2)"),
    ("HloModule m", "HloModule m, is_scheduled=true", "HLO after XLA's optimizations"),
    ("f32[6]{0} parameter(1)", "c64[6]{0} parameter(1)", "complex numbers"),
    ("f32[6]{0} parameter(1)", "f32[<=6]{0} parameter(1)", "dynamic dimensions"),
])
def test_programs_we_do_not_read_are_refused(old, new, message):
    text = TOTAL_ORDER.replace(old.encode(), new.encode())
    with pytest.raises(XlacError, match=re.escape(message)):
        import_hlo(text)


def test_stablehlo_is_told_apart_and_refused():
    text = b"module @jit_f attributes {mhlo.num_partitions = 1 : i32} {\n}\n"
    assert is_hlo_text(text)
    with pytest.raises(XlacError, match="StableHLO"):
        import_hlo(text)


def test_content_decides_the_format(tmp_path):
    (tmp_path / "f.onnx").write_bytes(b"\n  " + TOTAL_ORDER)
    assert is_hlo_text(tmp_path / "f.onnx") and is_hlo_text(TOTAL_ORDER)
    assert not is_hlo_text(b"\x08\x07\x12\x04onnx") and not is_hlo_text(tmp_path / "none")


MAP = b"""HloModule m

scaled_sum.1 {
  a.1 = f32[] parameter(0)
  b.1 = f32[] parameter(1)
  two.1 = f32[] constant(2)
  t.1 = f32[] multiply(a.1, two.1)
  ROOT s.1 = f32[] add(t.1, b.1)
}

ENTRY main.2 {
  x.1 = f32[2,3]{1,0} parameter(0)
  y.1 = f32[2,3]{1,0} parameter(1)
  ROOT m.1 = f32[2,3]{1,0} map(x.1, y.1), dimensions={0,1}, to_apply=scaled_sum.1
}
"""


def test_map_applies_its_computation_element_by_element():
    m = import_hlo(MAP)
    assert Opcode.ADD in {i.opcode for i in m.entry.instructions}
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(evaluate(m, [x, y])[0], 2 * x + y)


def test_map_does_not_take_a_computation_of_other_ops():
    text = MAP.replace(b"ROOT s.1 = f32[] add(t.1, b.1)",
                       b"r.1 = f32[1]{0} reshape(t.1)\n  ROOT s.1 = f32[] reshape(r.1)")
    with pytest.raises(XlacError, match="map applies %scaled_sum.1, which uses reshape"):
        import_hlo(text)


SOLVE = b"""HloModule m

ENTRY main.1 {
  a.1 = f32[3,3]{1,0} parameter(0)
  b.1 = f32[3,2]{1,0} parameter(1)
  l.1 = f32[3,3]{1,0} cholesky(a.1), lower=true
  ROOT x.1 = f32[3,2]{1,0} triangular-solve(l.1, b.1), left_side=true, lower=true, transpose_a=NO_TRANSPOSE
}
"""


def test_cholesky_and_triangular_solve_become_loops():
    m = import_hlo(SOLVE)
    assert [i.opcode for i in m.entry.instructions].count(Opcode.WHILE) == 2
    a = np.array([[4, 2, 0], [2, 5, 1], [0, 1, 3]], np.float32)
    a_garbage_above = a + np.triu(np.full((3, 3), 100, np.float32), 1)   # never read
    b = np.arange(6, dtype=np.float32).reshape(3, 2)
    x = evaluate(m, [a_garbage_above, b])[0]
    l_ = np.linalg.cholesky(a.astype(np.float64))
    np.testing.assert_allclose(x, np.linalg.solve(l_, b), rtol=1e-6, atol=1e-6)


def test_triangular_solve_does_not_read_the_other_triangle_when_upper():
    text = SOLVE.replace(b"lower=true, transpose_a", b"lower=false, transpose_a")
    m = import_hlo(text)
    a = np.array([[4, 2, 0], [2, 5, 1], [0, 1, 3]], np.float32)
    b = np.arange(6, dtype=np.float32).reshape(3, 2)
    l_ = np.linalg.cholesky(a.astype(np.float64))
    # the solve reads the factor's upper triangle: its diagonal only, zeros above
    np.testing.assert_allclose(evaluate(m, [a, b])[0], b / np.diag(l_)[:, None], rtol=1e-6)


BATCH_NORM = b"""HloModule m

ENTRY main.1 {
  x.1 = f32[4,2]{1,0} parameter(0)
  s.1 = f32[2]{0} parameter(1)
  o.1 = f32[2]{0} parameter(2)
  t.1 = (f32[4,2]{1,0}, f32[2]{0}, f32[2]{0}) batch-norm-training(x.1, s.1, o.1), epsilon=0.5, feature_index=1
  y.1 = f32[4,2]{1,0} get-tuple-element(t.1), index=0
  m.1 = f32[2]{0} get-tuple-element(t.1), index=1
  v.1 = f32[2]{0} get-tuple-element(t.1), index=2
  ROOT i.1 = f32[4,2]{1,0} batch-norm-inference(y.1, s.1, o.1, m.1, v.1), epsilon=0.5, feature_index=1
}
"""


def test_batch_norms_become_reductions_and_element_wise_math():
    m = import_hlo(BATCH_NORM)
    assert {Opcode.REDUCE, Opcode.RSQRT} <= {i.opcode for i in m.entry.instructions}
    x = np.array([[1, 10], [2, 20], [3, 30], [6, 40]], np.float32)
    s, o = np.array([2, 1], np.float32), np.array([0, 5], np.float32)
    y = (x - x.mean(0)) / np.sqrt(x.var(0) + 0.5) * s + o
    want = (y - x.mean(0)) / np.sqrt(x.var(0) + 0.5) * s + o     # x's statistics
    np.testing.assert_allclose(evaluate(m, [x, s, o])[0], want, rtol=1e-5, atol=1e-5)


def test_a_malformed_expanded_op_is_an_error_at_its_line():
    text = b"""HloModule m

ENTRY main.1 {
  x.1 = f32[3]{0} parameter(0)
  ROOT r.1 = f32[3]{0} reduce-precision(x.1), exponent_bits=5
}
"""
    with pytest.raises(HloParseError, match=r"line 5, column \d+: malformed reduce-precision "
                       r"%r.1 \(KeyError: 'mantissa_bits'\)"):
        import_hlo(text)
