"""Dead code elimination and common subexpression elimination on HLO text."""
from hlo_util import assert_hlo, assert_same_values, parse, run_pass
from xlac.optimizer import CommonSubexpressionElimination, DeadCodeElimination

SUM = """%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add = f32[] add(%a, %b)
}
"""
MAX = """%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %maximum = f32[] maximum(%a, %b)
}
"""


# --- DCE --------------------------------------------------------------------------

DEAD = """ENTRY %main (x: f32[4], unused: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %unused = f32[4] parameter(1)
  %dead = f32[4] exponential(%x)
  %dead_too = f32[4] log(%dead)
  ROOT %r = f32[4] negate(%x)
}
"""


def test_dce_removes_unused_instructions_and_keeps_parameters():
    changed, m = run_pass(DeadCodeElimination(), DEAD)
    assert changed
    assert_hlo(m, """ENTRY %main (x: f32[4], unused: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %unused = f32[4] parameter(1)
  ROOT %r = f32[4] negate(%x)
}
""")


def test_dce_removes_uncalled_computations():
    changed, m = run_pass(DeadCodeElimination(), SUM + "\n" + MAX + """
ENTRY %main (x: f32[4]) -> f32[] {
  %x = f32[4] parameter(0)
  %zero = f32[] constant(0)
  ROOT %r = f32[] reduce(%x, %zero), dimensions={0}, to_apply=%sum
}
""")
    assert changed
    assert_hlo(m, SUM + """
ENTRY %main (x: f32[4]) -> f32[] {
  %x = f32[4] parameter(0)
  %zero = f32[] constant(0)
  ROOT %r = f32[] reduce(%x, %zero), dimensions={0}, to_apply=%sum
}
""")


LIVE = SUM + """
ENTRY %main (x: f32[4]) -> f32[] {
  %x = f32[4] parameter(0)
  %e = f32[4] exponential(%x)
  %zero = f32[] constant(0)
  ROOT %r = f32[] reduce(%e, %zero), dimensions={0}, to_apply=%sum
}
"""


def test_does_not_remove_live_code():
    changed, m = run_pass(DeadCodeElimination(), LIVE)
    assert not changed
    assert_hlo(m, LIVE)


# --- CSE --------------------------------------------------------------------------

def cse(text):
    changed, m = run_pass(CommonSubexpressionElimination(), text)
    assert_same_values(parse(text), m)
    return changed, m


def test_cse_merges_identical_instructions_and_chains():
    changed, m = cse("""ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %e1 = f32[4] exponential(%x)
  %e2 = f32[4] exponential(%x)
  %n1 = f32[4] negate(%e1)
  %n2 = f32[4] negate(%e2)
  ROOT %r = f32[4] add(%n1, %n2)
}
""")
    assert changed
    assert_hlo(m, """ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %e1 = f32[4] exponential(%x)
  %n1 = f32[4] negate(%e1)
  ROOT %r = f32[4] add(%n1, %n1)
}
""")


def test_cse_merges_constants_by_value():
    changed, m = cse("""ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %c1 = f32[4] constant({0, 1, 2, 3})
  %c2 = f32[4] constant({0, 1, 2, 3})
  %m = f32[4] multiply(%x, %c1)
  ROOT %r = f32[4] add(%m, %c2)
}
""")
    assert changed
    assert_hlo(m, """ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %c1 = f32[4] constant({0, 1, 2, 3})
  %m = f32[4] multiply(%x, %c1)
  ROOT %r = f32[4] add(%m, %c1)
}
""")


def test_cse_merges_the_root():
    changed, m = cse("""ENTRY %main (x: f32[4]) -> (f32[4], f32[4]) {
  %x = f32[4] parameter(0)
  %e1 = f32[4] exponential(%x)
  %e2 = f32[4] exponential(%x)
  ROOT %t = (f32[4], f32[4]) tuple(%e1, %e2)
}
""")
    assert changed
    assert_hlo(m, """ENTRY %main (x: f32[4]) -> (f32[4], f32[4]) {
  %x = f32[4] parameter(0)
  %e1 = f32[4] exponential(%x)
  ROOT %t = (f32[4], f32[4]) tuple(%e1, %e1)
}
""")


RESULTS = "(pred[4], pred[4], pred[4], f32[4], f32[4], s32[4], f32[4])"
DIFFERENT = """ENTRY %main (x: f32[4], y: f32[4]) -> RESULTS {
  %x = f32[4] parameter(0)
  %y = f32[4] parameter(1)
  %c1 = f32[4] constant({0, 1, 2, 3})
  %c2 = f32[4] constant({0, 1, 2, 4})
  %c3 = s32[4] constant({0, 1, 2, 3})
  %c4 = f32[4] constant({-0, 1, 2, 3})
  %r1 = pred[4] compare(%x, %c1), direction=LT
  %r2 = pred[4] compare(%x, %c2), direction=LT
  %r3 = pred[4] compare(%x, %c2), direction=GT
  %r4 = f32[4] exponential(%y)
  %r5 = f32[4] exponential(%x)
  ROOT %t = RESULTS tuple(%r1, %r2, %r3, %r4, %r5, %c3, %c4)
}
""".replace("RESULTS", RESULTS)


def test_does_not_merge_different_values():
    # c2 differs from c1 in one value, c3 in type, c4 in the sign of a zero; r3 differs
    # from r2 in an attribute, r4 from r5 in an operand.
    changed, m = cse(DIFFERENT)
    assert not changed
    assert_hlo(m, DIFFERENT)
