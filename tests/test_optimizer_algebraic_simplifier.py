"""Algebraic simplifier on HLO text: one case per rule, and for each rule a case it must
leave alone. Every rewrite is also evaluated before and after."""
import pytest

from hlo_util import CPU, assert_hlo, assert_same_values, parse, run_pass
from xlac.optimizer import AlgebraicSimplifier, DeadCodeElimination
from xlac.optimizer.algebraic_simplifier import splat_value


def simplify(text):
    """Simplify (then remove dead code); the values must not change."""
    changed, m = run_pass([AlgebraicSimplifier(CPU), DeadCodeElimination()], text)
    assert_same_values(parse(text), m)
    return changed, m


def entry(body, x="f32[2,3]", result="f32[2,3]"):
    """A module over one parameter %x whose entry holds ``body``."""
    return f"ENTRY %main (x: {x}) -> {result} {{\n  %x = {x} parameter(0)\n{body}}}\n"


X_ONLY = entry("")

# Each rewrites its root to the parameter %x.
TO_X = {
    "add_zero": """  %zero = f32[] constant(0)
  %b = f32[2,3] broadcast(%zero), dimensions={}
  ROOT %r = f32[2,3] add(%x, %b)
""",
    "add_zero_left": """  %zeros = f32[2,3] constant({ {0, 0, 0}, {0, 0, 0} })
  ROOT %r = f32[2,3] add(%zeros, %x)
""",
    "subtract_zero": """  %zero = f32[] constant(0)
  %b = f32[2,3] broadcast(%zero), dimensions={}
  ROOT %r = f32[2,3] subtract(%x, %b)
""",
    "multiply_one": """  %one = f32[] constant(1)
  %b = f32[2,3] broadcast(%one), dimensions={}
  ROOT %r = f32[2,3] multiply(%b, %x)
""",
    "divide_one": """  %one = f32[] constant(1)
  %b = f32[2,3] broadcast(%one), dimensions={}
  ROOT %r = f32[2,3] divide(%x, %b)
""",
    "power_one": """  %one = f32[] constant(1)
  %b = f32[2,3] broadcast(%one), dimensions={}
  ROOT %r = f32[2,3] power(%x, %b)
""",
    "negate_negate": """  %n = f32[2,3] negate(%x)
  ROOT %r = f32[2,3] negate(%n)
""",
    "convert_same": "  ROOT %r = f32[2,3] convert(%x)\n",
    "reshape_same": "  ROOT %r = f32[2,3] reshape(%x)\n",
    "bitcast_same": "  ROOT %r = f32[2,3] bitcast(%x)\n",
    "copy": "  ROOT %r = f32[2,3] copy(%x)\n",
    "transpose_identity": "  ROOT %r = f32[2,3] transpose(%x), dimensions={0,1}\n",
    "slice_whole": "  ROOT %r = f32[2,3] slice(%x), slice={[0:2], [0:3]}\n",
    "concatenate_one": "  ROOT %r = f32[2,3] concatenate(%x), dimensions={0}\n",
    "pad_zero": """  %zero = f32[] constant(0)
  ROOT %r = f32[2,3] pad(%x, %zero), padding=0_0x0_0
""",
    "broadcast_same": "  ROOT %r = f32[2,3] broadcast(%x), dimensions={0,1}\n",
    "gte_of_tuple": """  %e = f32[2,3] exponential(%x)
  %t = (f32[2,3], f32[2,3]) tuple(%e, %x)
  ROOT %r = f32[2,3] get-tuple-element(%t), index=1
""",
    # A zero splat seen through a reshape of a constant.
    "add_zero_through_reshape": """  %zeros = f32[6] constant({0, 0, 0, 0, 0, 0})
  %z = f32[2,3] reshape(%zeros)
  ROOT %r = f32[2,3] add(%x, %z)
""",
}


@pytest.mark.parametrize("name", sorted(TO_X))
def test_rule_simplifies_to_operand(name):
    changed, m = simplify(entry(TO_X[name]))
    assert changed
    assert_hlo(m, X_ONLY)


def test_multiply_by_integer_zero_is_zero():
    changed, m = simplify(entry("""  %zero = s32[] constant(0)
  %b = s32[2,3] broadcast(%zero), dimensions={}
  ROOT %r = s32[2,3] multiply(%x, %b)
""", x="s32[2,3]", result="s32[2,3]"))
    assert changed
    assert_hlo(m, """ENTRY %main (x: s32[2,3]) -> s32[2,3] {
  %x = s32[2,3] parameter(0)
  %zero = s32[] constant(0)
  ROOT %b = s32[2,3] broadcast(%zero), dimensions={}
}
""")


def test_square_is_a_multiply():
    changed, m = simplify(entry("""  %two = f32[] constant(2)
  %b = f32[2,3] broadcast(%two), dimensions={}
  ROOT %r = f32[2,3] power(%x, %b)
"""))
    assert changed
    assert_hlo(m, entry("  ROOT %r.1 = f32[2,3] multiply(%x, %x)\n"))


def test_integer_square_is_a_multiply():
    changed, m = simplify(entry("""  %two = s32[] constant(2)
  %b = s32[2,3] broadcast(%two), dimensions={}
  ROOT %r = s32[2,3] power(%x, %b)
""", x="s32[2,3]", result="s32[2,3]"))
    assert changed
    assert_hlo(m, entry("  ROOT %r.1 = s32[2,3] multiply(%x, %x)\n", x="s32[2,3]",
                        result="s32[2,3]"))


def test_float_power_minus_one_is_a_reciprocal():
    changed, m = simplify(entry("""  %m = f32[] constant(-1)
  %b = f32[2,3] broadcast(%m), dimensions={}
  ROOT %r = f32[2,3] power(%x, %b)
"""))
    assert changed
    assert_hlo(m, entry("""  %constant = f32[] constant(1)
  %broadcast = f32[2,3] broadcast(%constant), dimensions={}
  ROOT %r.1 = f32[2,3] divide(%broadcast, %x)
"""))


def test_reshape_of_reshape_is_one_reshape():
    changed, m = simplify(entry("""  %a = f32[3,2] reshape(%x)
  ROOT %r = f32[6] reshape(%a)
""", result="f32[6]"))
    assert changed
    assert_hlo(m, entry("  ROOT %r.1 = f32[6] reshape(%x)\n", result="f32[6]"))


def test_transpose_of_inverse_transpose_is_its_operand():
    # The composed permutation is the identity; the next walk removes it.
    text = entry("""  %a = f32[3,4,2] transpose(%x), dimensions={1,2,0}
  ROOT %r = f32[2,3,4] transpose(%a), dimensions={2,0,1}
""", x="f32[2,3,4]", result="f32[2,3,4]")
    changed, m = simplify(text)
    assert changed
    assert_hlo(m, entry("  ROOT %r.1 = f32[2,3,4] transpose(%x), dimensions={0,1,2}\n",
                        x="f32[2,3,4]", result="f32[2,3,4]"))
    assert AlgebraicSimplifier(CPU).run(m)
    DeadCodeElimination().run(m)
    assert_hlo(m, entry("", x="f32[2,3,4]", result="f32[2,3,4]"))


def test_transpose_of_transpose_composes():
    changed, m = simplify(entry("""  %a = f32[3,2,4] transpose(%x), dimensions={1,0,2}
  ROOT %r = f32[3,4,2] transpose(%a), dimensions={0,2,1}
""", x="f32[2,3,4]", result="f32[3,4,2]"))
    assert changed
    assert_hlo(m, entry("  ROOT %r.1 = f32[3,4,2] transpose(%x), dimensions={1,2,0}\n",
                        x="f32[2,3,4]", result="f32[3,4,2]"))


def test_transpose_of_unit_dims_is_a_reshape():
    # Only the dims of extent 1 move: the elements keep their order, a view.
    changed, m = simplify(entry("""  %t = f32[4,1,3] transpose(%x), dimensions={1,0,2}
  ROOT %r = f32[4,1,3] exponential(%t)
""", x="f32[1,4,3]", result="f32[4,1,3]"))
    assert changed
    assert_hlo(m, entry("""  %t.1 = f32[4,1,3] reshape(%x)
  ROOT %r = f32[4,1,3] exponential(%t.1)
""", x="f32[1,4,3]", result="f32[4,1,3]"))


def test_does_not_turn_a_transpose_of_real_dims_into_a_reshape():
    changed, _ = simplify(entry("  ROOT %r = f32[1,3,4] transpose(%x), dimensions={0,2,1}\n",
                                x="f32[1,4,3]", result="f32[1,3,4]"))
    assert not changed


HOISTABLE = entry("""  %bx = f32[2,3] broadcast(%x), dimensions={1}
  %e = f32[3] exponential(%x)
  %be = f32[2,3] broadcast(%e), dimensions={1}
  %m = f32[2,3] multiply(%bx, %be)
  %two = f32[] constant(2)
  %b2 = f32[2,3] broadcast(%two), dimensions={}
  ROOT %r = f32[2,3] add(%m, %b2)
""", x="f32[3]")


def test_elementwise_op_of_broadcasts_runs_before_the_broadcast():
    # (bcast(x) * bcast(exp(x))) + bcast(2): the ops run on x's 3 elements, not on 2x3.
    changed, m = simplify(HOISTABLE)
    assert changed
    assert_hlo(m, entry("""  %e = f32[3] exponential(%x)
  %two = f32[] constant(2)
  %multiply = f32[3] multiply(%x, %e)
  %broadcast.1 = f32[3] broadcast(%two), dimensions={}
  %add = f32[3] add(%multiply, %broadcast.1)
  ROOT %broadcast.2 = f32[2,3] broadcast(%add), dimensions={1}
""", x="f32[3]"))


# One case per rule that looks like its pattern and must stay as it is.
UNCHANGED = {
    "add_one": """  %one = f32[] constant(1)
  %b = f32[2,3] broadcast(%one), dimensions={}
  ROOT %r = f32[2,3] add(%x, %b)
""",
    "add_non_splat": """  %c = f32[2,3] constant({ {0, 1, 0}, {0, 0, 0} })
  ROOT %r = f32[2,3] add(%x, %c)
""",
    # 0 - x is not x
    "zero_minus_x": """  %zero = f32[] constant(0)
  %b = f32[2,3] broadcast(%zero), dimensions={}
  ROOT %r = f32[2,3] subtract(%b, %x)
""",
    "multiply_two": """  %two = f32[] constant(2)
  %b = f32[2,3] broadcast(%two), dimensions={}
  ROOT %r = f32[2,3] multiply(%x, %b)
""",
    # x * 0.0 is NaN for x = inf, -0 for x < 0: not a rewrite for floats.
    "multiply_float_zero": """  %zero = f32[] constant(0)
  %b = f32[2,3] broadcast(%zero), dimensions={}
  ROOT %r = f32[2,3] multiply(%x, %b)
""",
    # 1 / x is not x
    "one_over_x": """  %one = f32[] constant(1)
  %b = f32[2,3] broadcast(%one), dimensions={}
  ROOT %r = f32[2,3] divide(%b, %x)
""",
    # sqrt(-0) is -0 and sqrt(-inf) NaN where pow gives +0 and +inf; x*x*x rounds twice
    "power_half": """  %h = f32[] constant(0.5)
  %b = f32[2,3] broadcast(%h), dimensions={}
  ROOT %r = f32[2,3] power(%x, %b)
""",
    "power_three": """  %t = f32[] constant(3)
  %b = f32[2,3] broadcast(%t), dimensions={}
  ROOT %r = f32[2,3] power(%x, %b)
""",
    "power_non_splat": """  %c = f32[2,3] constant({ {2, 2, 2}, {2, 2, 1} })
  ROOT %r = f32[2,3] power(%x, %c)
""",
    # integer pow(x, -1) is 0 for |x| > 1 where 1 / x divides
    "integer_power_minus_one": """  %m = s32[] constant(-1)
  %b = s32[2,3] broadcast(%m), dimensions={}
  ROOT %r = s32[2,3] power(%x, %b)
""",
    "negate_abs": """  %a = f32[2,3] abs(%x)
  ROOT %r = f32[2,3] negate(%a)
""",
    "convert_other_type": "  ROOT %r = f64[2,3] convert(%x)\n",
    "reshape": "  ROOT %r = f32[3,2] reshape(%x)\n",
    # a relayout moves bytes
    "copy_relayout": "  ROOT %r = f32[2,3]{0,1} copy(%x)\n",
    "reshape_of_transpose": """  %t = f32[3,2] transpose(%x), dimensions={1,0}
  ROOT %r = f32[6] reshape(%t)
""",
    "transpose": "  ROOT %r = f32[3,2] transpose(%x), dimensions={1,0}\n",
    "transpose_of_reverse": """  %v = f32[2,3] reverse(%x), dimensions={0}
  ROOT %r = f32[3,2] transpose(%v), dimensions={1,0}
""",
    "slice_part": "  ROOT %r = f32[2,2] slice(%x), slice={[0:2], [1:3]}\n",
    "concatenate_two": "  ROOT %r = f32[4,3] concatenate(%x, %x), dimensions={0}\n",
    "pad_nonzero": """  %zero = f32[] constant(0)
  ROOT %r = f32[3,3] pad(%x, %zero), padding=1_0x0_0
""",
    "broadcast_wider": "  ROOT %r = f32[4,2,3] broadcast(%x), dimensions={1,2}\n",
    "broadcasts_along_different_dims": """  %a = f32[3,3] broadcast(%x), dimensions={0}
  %b = f32[3,3] broadcast(%x), dimensions={1}
  ROOT %r = f32[3,3] add(%a, %b)
""",
}
SHAPES = {"integer_power_minus_one": ("s32[2,3]", "s32[2,3]"),
          "convert_other_type": ("f32[2,3]", "f64[2,3]"), "reshape": ("f32[2,3]", "f32[3,2]"),
          "reshape_of_transpose": ("f32[2,3]", "f32[6]"),
          "transpose": ("f32[2,3]", "f32[3,2]"), "transpose_of_reverse": ("f32[2,3]", "f32[3,2]"),
          "slice_part": ("f32[2,3]", "f32[2,2]"), "concatenate_two": ("f32[2,3]", "f32[4,3]"),
          "pad_nonzero": ("f32[2,3]", "f32[3,3]"), "broadcast_wider": ("f32[2,3]", "f32[4,2,3]"),
          "broadcasts_along_different_dims": ("f32[3]", "f32[3,3]")}


@pytest.mark.parametrize("name", sorted(UNCHANGED))
def test_does_not_rewrite(name):
    x, result = SHAPES.get(name, ("f32[2,3]", "f32[2,3]"))
    text = entry(UNCHANGED[name], x=x, result=result)
    changed, m = run_pass(AlgebraicSimplifier(CPU), text)
    assert not changed
    assert_hlo(m, text)


def test_does_not_rewrite_get_tuple_element_of_a_non_tuple():
    text = """ENTRY %main (p: (f32[2,3], f32[3])) -> f32[3] {
  %p = (f32[2,3], f32[3]) parameter(0)
  ROOT %r = f32[3] get-tuple-element(%p), index=1
}
"""
    changed, m = run_pass(AlgebraicSimplifier(CPU), text)
    assert not changed
    assert_hlo(m, text)


def test_does_not_treat_negative_zero_bits_of_nonsplat_as_splat():
    m = parse("""ENTRY %main () -> (f32[2], s32[3]) {
  %z = f32[2] constant({0, -0})
  %twos = s32[3] constant({2, 2, 2})
  ROOT %t = (f32[2], s32[3]) tuple(%z, %twos)
}
""")
    z, twos = m.entry.root.operands
    assert splat_value(z) is None
    assert splat_value(twos) == 2


# dot(transpose(x), y) => dot(x, y) with the dims renamed (attention's Q . K^T)
ATTENTION_KT = """
ENTRY %main (q: f32[4,6,5], k: f32[6,20]) -> f32[4,6,6] {
  %q = f32[4,6,5] parameter(0)
  %k = f32[6,20] parameter(1)
  %kh = f32[6,4,5] reshape(%k)
  %kt = f32[4,5,6] transpose(%kh), dimensions={1,2,0}
  ROOT %s = f32[4,6,6] dot(%q, %kt), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}
"""


def test_dot_reads_a_transposed_operand_in_place():
    changed, m = simplify(ATTENTION_KT)
    assert changed
    dot = m.entry.root
    assert dot.opcode.text == "dot" and dot.operands[1].opcode.text == "reshape"
    dn = dot.attrs["dimension_numbers"]
    assert (dn.rhs_batch, dn.rhs_contracting) == ((1,), (2,))


def test_dot_reads_a_transposed_lhs_in_place():
    changed, m = simplify("""
ENTRY %main (a: f32[5,3], b: f32[5,4]) -> f32[3,4] {
  %a = f32[5,3] parameter(0)
  %b = f32[5,4] parameter(1)
  %at = f32[3,5] transpose(%a), dimensions={1,0}
  ROOT %d = f32[3,4] dot(%at, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""")
    assert changed and m.entry.root.operands[0].opcode.text == "parameter"


@pytest.mark.parametrize("text", [
    # the transpose swaps two free dims: the result's dims would come out in another order
    """
ENTRY %main (a: f32[2,3,5], b: f32[5,4]) -> f32[3,2,4] {
  %a = f32[2,3,5] parameter(0)
  %b = f32[5,4] parameter(1)
  %at = f32[3,2,5] transpose(%a), dimensions={1,0,2}
  ROOT %d = f32[3,2,4] dot(%at, %b), lhs_contracting_dims={2}, rhs_contracting_dims={0}
}
""",
    # not f32: the integer kernels read their operands in their own layouts
    """
ENTRY %main (a: s32[5,3], b: s32[5,4]) -> s32[3,4] {
  %a = s32[5,3] parameter(0)
  %b = s32[5,4] parameter(1)
  %at = s32[3,5] transpose(%a), dimensions={1,0}
  ROOT %d = s32[3,4] dot(%at, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""",
    # two contracting dims: in another order they might not merge into one stride
    """
ENTRY %main (a: f32[3,4,5], b: f32[5,4,2]) -> f32[3,2] {
  %a = f32[3,4,5] parameter(0)
  %b = f32[5,4,2] parameter(1)
  %bt = f32[4,5,2] transpose(%b), dimensions={1,0,2}
  ROOT %d = f32[3,2] dot(%a, %bt), lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}
}
"""], ids=["free_dims_reordered", "integer", "two_contracting"])
def test_does_not_fold_a_transpose_into_a_dot(text):
    changed, m = simplify(text)
    assert not changed


def _conv(x, k, y, window, groups=1):
    """A module convolving %x with the parameter %k (NCHW, OIHW)."""
    return f"""
ENTRY %main (x: {x}, k: {k}) -> {y} {{
  %x = {x} parameter(0)
  %k = {k} parameter(1)
  ROOT %c = {y} convolution({x} %x, {k} %k), window={{{window}}}, dim_labels=bf01_oi01->bf01, feature_group_count={groups}
}}
"""


def test_convolution_drops_taps_that_read_only_padding():
    # A 5x5 depthwise window padded by 2 on a 2x2 map: rows and columns 0 and 4 of the
    # window meet the image at no output position; the middle 3x3 padded by 1 remains.
    changed, m = simplify(_conv("f32[1,4,2,2]", "f32[4,1,5,5]", "f32[1,4,2,2]",
                                "size=5x5 pad=2_2x2_2", groups=4))
    assert changed
    assert_hlo(m, """
ENTRY %main (x: f32[1,4,2,2], k: f32[4,1,5,5]) -> f32[1,4,2,2] {
  %x = f32[1,4,2,2] parameter(0)
  %k = f32[4,1,5,5] parameter(1)
  %slice = f32[4,1,3,3] slice(%k), slice={[0:4], [0:1], [1:4], [1:4]}
  ROOT %c.1 = f32[1,4,2,2] convolution(%x, %slice), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, feature_group_count=4
}
""")


def test_convolution_drops_taps_at_one_end_with_strides_and_dilation():
    # Rows: a 3-row window, stride 2, padded 0 above and 3 below, on 2 rows: output row 0
    # reads rows 0..2, output row 1 rows 2..4, so window row 2 meets only padding.
    # Columns: dilation 2, padded 2 on both sides, on 2 columns: taps 0 and 2 land on
    # columns -2 and 2 (output column 0) and -1 and 3 (column 1); tap 1 alone remains.
    changed, m = simplify(_conv("f32[1,2,2,2]", "f32[3,2,3,3]", "f32[1,3,2,2]",
                                "size=3x3 stride=2x1 pad=0_3x2_2 rhs_dilate=1x2"))
    assert changed
    conv = m.entry.root
    w = conv.attrs["window"]
    assert (w.size, w.pad_low, w.pad_high) == ((2, 1), (0, 0), (2, 0))
    assert conv.operands[1].shape.dims == (3, 2, 2, 1)


@pytest.mark.parametrize("text", [
    # every tap of the 5x5 window meets the 4x4 map at some output position
    _conv("f32[1,4,4,4]", "f32[4,1,5,5]", "f32[1,4,4,4]", "size=5x5 pad=2_2x2_2", groups=4),
    # a base-dilated (transposed) convolution: its holes are not padding at the ends
    _conv("f32[1,2,2,2]", "f32[3,2,5,5]", "f32[1,3,3,3]", "size=5x5 pad=2_2x2_2 lhs_dilate=2x2"),
    # trimming would need negative padding: dilated by 2 and padded by 1, tap 0 meets
    # only padding and tap 1 starts one row into the image
    _conv("f32[1,1,2,1]", "f32[1,1,3,1]", "f32[1,1,1,1]",
          "size=3x1 stride=3x1 pad=1_2x0_0 rhs_dilate=2x1"),
], ids=["every_tap_read", "base_dilated", "negative_padding"])
def test_does_not_drop_convolution_taps(text):
    changed, m = simplify(text)
    assert not changed
