"""Constant folding on HLO text, and its rule for broadcasts and iotas (see
constant_folding.py): small values fold, large ones only where a kernel reads them from
memory or folding does not expand them."""
import numpy as np

from hlo_util import CPU, assert_hlo, assert_same_values, parse, run_pass
from xlac.optimizer import ConstantFolding, DeadCodeElimination


def fold(text):
    """Fold (then remove dead code); the values must not change."""
    changed, m = run_pass([ConstantFolding(CPU), DeadCodeElimination()], text)
    assert_same_values(parse(text), m)
    return changed, m


def test_folds_arithmetic_on_constants():
    changed, m = fold("""ENTRY %main (x: f32[3]) -> f32[3] {
  %x = f32[3] parameter(0)
  %c = f32[3] constant({1, 2, 3})
  %zeros = f32[3] constant({0, 0, 0})
  %e = f32[3] exponential(%zeros)
  %a = f32[3] add(%c, %e)
  ROOT %r = f32[3] multiply(%x, %a)
}
""")
    assert changed
    assert_hlo(m, """ENTRY %main (x: f32[3]) -> f32[3] {
  %x = f32[3] parameter(0)
  %a.1 = f32[3] constant({2, 3, 4})
  ROOT %r = f32[3] multiply(%x, %a.1)
}
""")


def test_folds_a_constant_root():
    changed, m = fold("""ENTRY %main () -> s32[2] {
  %c = s32[2] constant({1, -2})
  ROOT %r = s32[2] negate(%c)
}
""")
    assert changed
    assert_hlo(m, """ENTRY %main () -> s32[2] {
  ROOT %r.1 = s32[2] constant({-1, 2})
}
""")


def test_folds_small_broadcast():
    changed, m = fold("""ENTRY %main (x: f32[2,2]) -> f32[2,2] {
  %x = f32[2,2] parameter(0)
  %c = f32[] constant(1.5)
  %b = f32[2,2] broadcast(%c), dimensions={}
  ROOT %r = f32[2,2] add(%x, %b)
}
""")
    assert changed
    assert_hlo(m, """ENTRY %main (x: f32[2,2]) -> f32[2,2] {
  %x = f32[2,2] parameter(0)
  %b.1 = f32[2,2] constant({ {1.5, 1.5}, {1.5, 1.5} })
  ROOT %r = f32[2,2] add(%x, %b.1)
}
""")


LARGE_BROADCAST = """ENTRY %main (x: f32[256,512]) -> f32[256,512] {
  %x = f32[256,512] parameter(0)
  %c = f32[] constant(1.5)
  %b = f32[256,512] broadcast(%c), dimensions={}
  ROOT %r = f32[256,512] add(%x, %b)
}
"""


def test_does_not_fold_a_large_broadcast_of_a_scalar():
    # 512 KiB of 1.5s cost nothing to generate inside a fused loop.
    changed, m = fold(LARGE_BROADCAST)
    assert not changed
    assert_hlo(m, LARGE_BROADCAST)


LARGE_IOTA = """ENTRY %main (x: s32[256,512]) -> s32[256,512] {
  %x = s32[256,512] parameter(0)
  %i = s32[256,512] iota(), iota_dimension=1
  ROOT %r = s32[256,512] add(%x, %i)
}
"""


def test_does_not_fold_a_large_iota():
    changed, m = fold(LARGE_IOTA)
    assert not changed
    assert_hlo(m, LARGE_IOTA)


def test_folds_the_scalar_part_under_a_large_broadcast():
    changed, m = fold("""ENTRY %main (x: f32[256,512]) -> f32[256,512] {
  %x = f32[256,512] parameter(0)
  %one = f32[] constant(1)
  %two = f32[] constant(2)
  %s = f32[] add(%one, %two)
  %b = f32[256,512] broadcast(%s), dimensions={}
  ROOT %r = f32[256,512] add(%x, %b)
}
""")
    assert changed
    assert_hlo(m, """ENTRY %main (x: f32[256,512]) -> f32[256,512] {
  %x = f32[256,512] parameter(0)
  %s.1 = f32[] constant(3)
  %b = f32[256,512] broadcast(%s.1), dimensions={}
  ROOT %r = f32[256,512] add(%x, %b)
}
""")


def test_folds_a_large_broadcast_feeding_a_dot():
    # ConstantOfShape weights: the dot kernel reads its operand from memory.
    changed, m = fold("""ENTRY %main (x: f32[2,256]) -> f32[2,256] {
  %x = f32[2,256] parameter(0)
  %c = f32[] constant(0.5)
  %w = f32[256,256] broadcast(%c), dimensions={}
  ROOT %r = f32[2,256] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""")
    assert changed
    assert_hlo(m, """ENTRY %main (x: f32[2,256]) -> f32[2,256] {
  %x = f32[2,256] parameter(0)
  %w.1 = f32[256,256] constant({...})
  ROOT %r = f32[2,256] dot(%x, %w.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""")
    assert (m.entry.root.operands[1].literal == 0.5).all()


def test_folds_a_large_broadcast_feeding_a_convolution_through_a_reshape():
    changed, m = fold("""ENTRY %main (x: f32[1,64,8,8]) -> f32[1,64,6,6] {
  %x = f32[1,64,8,8] parameter(0)
  %c = f32[] constant(0.25)
  %b = f32[36864] broadcast(%c), dimensions={}
  %w = f32[64,64,3,3] reshape(%b)
  ROOT %r = f32[1,64,6,6] convolution(%x, %w), window={size=3x3}, dim_labels=bf01_oi01->bf01
}
""")
    assert changed
    assert_hlo(m, """ENTRY %main (x: f32[1,64,8,8]) -> f32[1,64,6,6] {
  %x = f32[1,64,8,8] parameter(0)
  %w.1 = f32[64,64,3,3] constant({...})
  ROOT %r = f32[1,64,6,6] convolution(%x, %w.1), window={size=3x3}, dim_labels=bf01_oi01->bf01
}
""")
    assert (m.entry.root.operands[1].literal == 0.25).all()


def test_folds_large_elementwise_work_on_a_large_constant():
    # Same size as its input: folding trades one weight for another.
    w = np.arange(128 * 256, dtype=np.float32).reshape(128, 256)
    text = """ENTRY %main (x: f32[128,256]) -> f32[128,256] {
  %x = f32[128,256] parameter(0)
  %w = f32[128,256] constant(W)
  %t = f32[256,128] transpose(%w), dimensions={1,0}
  %tt = f32[128,256] transpose(%t), dimensions={1,0}
  ROOT %r = f32[128,256] add(%x, %tt)
}
""".replace("W", "{" + ", ".join("{" + ", ".join(f"{v:g}" for v in row) + "}" for row in w)
            + "}")
    changed, m = fold(text)
    assert changed
    assert_hlo(m, """ENTRY %main (x: f32[128,256]) -> f32[128,256] {
  %x = f32[128,256] parameter(0)
  %tt.1 = f32[128,256] constant({...})
  ROOT %r = f32[128,256] add(%x, %tt.1)
}
""")
    np.testing.assert_array_equal(m.entry.root.operands[1].literal, w)


def _literal(w: np.ndarray) -> str:
    return "{" + ", ".join("{" + ", ".join(f"{v:g}" for v in row) + "}" for row in w) + "}"


def _dot_of_weights_from(source: str, dims: str, expand: str) -> str:
    """A dot whose weights (f32[64,64]) are ``expand`` of a u8 or s8 constant."""
    w = np.arange(64 * 64).reshape(64, 64) % 100
    w = w[:, :32] if dims == "64,32" else w
    return f"""ENTRY %main (x: f32[2,64]) -> f32[2,64] {{
  %x = f32[2,64] parameter(0)
  %p = {source}[{dims}] constant({_literal(w)})
  %c = f32[{dims}] convert(%p)
  {expand}
  ROOT %r = f32[2,64] dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
}}
"""


def test_does_not_fold_weights_unpacked_to_more_than_four_times_their_bytes():
    # 4-bit weights packed two a byte (MatMulNBits) become f32 in the arena, per call.
    changed, _ = fold(_dot_of_weights_from(
        "u8", "64,32", "%w = f32[64,64] concatenate(%c, %c), dimensions={1}"))
    assert not changed


def test_folds_int8_weights_dequantized_for_a_dot():
    # four times the bytes: folded, as dequantized int8 weights always were
    changed, m = fold(_dot_of_weights_from(
        "s8", "64,64", "%w = f32[64,64] multiply(%c, %c)"))
    assert changed and m.entry.root.operands[1].opcode.name == "CONSTANT"


DEPENDS_ON_X = """ENTRY %main (x: f32[3]) -> f32[3] {
  %x = f32[3] parameter(0)
  %ones = f32[3] constant({1, 1, 1})
  %a = f32[3] add(%x, %ones)
  ROOT %r = f32[3] exponential(%a)
}
"""


def test_does_not_fold_anything_that_depends_on_a_parameter():
    changed, m = fold(DEPENDS_ON_X)
    assert not changed
    assert_hlo(m, DEPENDS_ON_X)
