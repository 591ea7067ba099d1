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
  p = s32[2]{0} all-to-all(a), dimensions={0}
  q = s32[2]{0} all-to-all(p), dimensions={0}
  c = (s32[2]{0}, s32[]) custom-call(q), custom_call_target="lapack_sgesdd_ffi"
  ROOT r = s32[2]{0} get-tuple-element(c), index=0
}
"""
    with pytest.raises(XlacError) as info:
        import_hlo(text)
    assert str(info.value) == ("unsupported XLA ops: all-to-all at %p, %q (a collective); "
                               "custom-call lapack_sgesdd_ffi at %c (a LAPACK routine other "
                               "than potrf, trsm and getrf, which xlac expands)")


@pytest.mark.parametrize("old, new, message", [
    ("HloModule m", "HloModule m, num_partitions=2", "several devices (num_partitions=2)"),
    ("HloModule m", "HloModule m, is_scheduled=true", "HLO after XLA's optimizations"),
    ("f32[6]{0} parameter(1)", "c64[6]{0} parameter(1)", "takes or returns complex numbers"),
    ("pred[6]{0} compare", "c64[6]{0} compare", "takes or returns complex numbers"),
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


# --- complex numbers: pairs of real arrays ----------------------------------------------

COMPLEX = b"""HloModule c, entry_computation_layout={(f64[3]{0})->(f64[3]{0}, f64[], f64[3]{0})}

scale.1 {
  z.1 = c128[3]{0} parameter(0)
  k.1 = c128[] constant((0.5, -2))
  kb.1 = c128[3]{0} broadcast(k.1), dimensions={}
  ROOT m.1 = c128[3]{0} multiply(z.1, kb.1)
}

cond.2 {
  s.2 = (s32[], c128[3]{0}) parameter(0)
  i.2 = s32[] get-tuple-element(s.2), index=0
  n.2 = s32[] constant(3)
  ROOT lt.2 = pred[] compare(i.2, n.2), direction=LT
}

body.3 {
  s.3 = (s32[], c128[3]{0}) parameter(0)
  i.3 = s32[] get-tuple-element(s.3), index=0
  one.3 = s32[] constant(1)
  j.3 = s32[] add(i.3, one.3)
  z.3 = c128[3]{0} get-tuple-element(s.3), index=1
  w.3 = c128[3]{0} call(z.3), to_apply=scale.1
  ROOT t.3 = (s32[], c128[3]{0}) tuple(j.3, w.3)
}

times.4 {
  a.4 = c128[] parameter(0)
  b.4 = c128[] parameter(1)
  ROOT p.4 = c128[] multiply(a.4, b.4)
}

ENTRY main.5 {
  x.5 = f64[3]{0} parameter(0)
  rev.5 = f64[3]{0} reverse(x.5), dimensions={0}
  z.5 = c128[3]{0} complex(x.5, rev.5)
  zero.5 = s32[] constant(0)
  init.5 = (s32[], c128[3]{0}) tuple(zero.5, z.5)
  loop.5 = (s32[], c128[3]{0}) while(init.5), condition=cond.2, body=body.3
  w.5 = c128[3]{0} get-tuple-element(loop.5), index=1
  one.5 = c128[] constant((1, 0))
  prod.5 = c128[] reduce(w.5, one.5), dimensions={0}, to_apply=times.4
  d.5 = c128[3]{0} divide(w.5, z.5)
  re.5 = f64[3]{0} real(d.5)
  im.5 = f64[] imag(prod.5)
  a.5 = f64[3]{0} abs(w.5)
  ROOT out.5 = (f64[3]{0}, f64[], f64[3]{0}) tuple(re.5, im.5, a.5)
}
"""


def test_complex_values_pass_calls_loops_and_reduces_as_pairs():
    m = import_hlo(COMPLEX)
    assert {i.shape.dtype.kind for c in m.computations for i in c.instructions
            if not i.shape.is_tuple} <= {"f", "s", "pred"}
    loop = next(i for i in m.entry.instructions if i.opcode is Opcode.WHILE)
    assert [(s.dtype.name, s.dims) for s in loop.shape.tuple_shapes] == [
        ("s32", ()), ("f64", (3,)), ("f64", (3,))]
    x = np.array([1.5, -2.0, 0.25])
    z = x + 1j * x[::-1]
    w = z * (0.5 - 2j) ** 3
    got = evaluate(m, [x])
    np.testing.assert_allclose(got[0], (w / z).real, rtol=1e-14)
    np.testing.assert_allclose(got[1], np.prod(w).imag, rtol=1e-14)
    np.testing.assert_allclose(got[2], np.abs(w), rtol=1e-14)


@pytest.mark.parametrize("old, new, message", [
    (b"a.5 = f64[3]{0} abs(w.5)", b"a.5 = c128[3]{0} sqrt(w.5)",
     "sqrt of complex numbers (%a.5) is not supported"),
    (b"d.5 = c128[3]{0} divide(w.5, z.5)",
     b"d.5 = pred[3]{0} compare(w.5, z.5), direction=LT\n  dd.5 = c128[3]{0} divide(w.5, z.5)",
     "compare %d.5: complex numbers compare EQ or NE only, not LT"),
    (b"d.5 = c128[3]{0} divide(w.5, z.5)",
     b'd.5 = c128[3]{0} custom-call(w.5), custom_call_target="f"',
     "custom-call of complex numbers (%d.5) is not supported"),
    (b"k.1 = c128[] constant((0.5, -2))", b"k.1 = c128[] constant(0.5)",
     "a c128 literal holds an (re, im) pair of f64 values in each of the 1 places"),
])
def test_complex_ops_we_do_not_build_are_refused(old, new, message):
    with pytest.raises(XlacError, match=re.escape(message)):
        import_hlo(COMPLEX.replace(old, new))


def test_complex_types_are_read_only_by_the_xla_dialect():
    with pytest.raises(HloParseError, match="unknown element type 'c128'"):
        parse_module(COMPLEX.decode())
