"""Loop fusion on HLO text: what fuses, what must not, and that values do not change."""
import numpy as np

from hlo_util import CPU, assert_hlo, named, parse, run_pass
from xlac.hlo import Opcode
from xlac.hlo.evaluator import evaluate
from xlac.optimizer import DeadCodeElimination, InstructionFusion

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


def fuse(text):
    """Fuse (then remove dead code); check the values and the fusion invariants."""
    changed, m = run_pass([InstructionFusion(CPU), DeadCodeElimination()], text)
    before = parse(text)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32)
            for p in before.entry.parameters]
    for a, b in zip(evaluate(before, args), evaluate(m, args), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-6)
    for i in m.entry.instructions:
        if i.opcode is Opcode.FUSION:
            fused = i.called[0]
            assert i.attrs["kind"] == "kLoop"
            assert [p.number for p in fused.parameters] == list(range(len(i.operands)))
            assert [p.shape for p in fused.parameters] == [o.shape for o in i.operands]
            assert len(set(map(id, i.operands))) == len(i.operands)
    return changed, m


def test_elementwise_chain_becomes_one_fusion():
    changed, m = fuse("""ENTRY %main (x: f32[4,8], y: f32[4,8]) -> f32[4,8] {
  %x = f32[4,8] parameter(0)
  %y = f32[4,8] parameter(1)
  %e = f32[4,8] exponential(%x)
  %m = f32[4,8] multiply(%e, %y)
  ROOT %t = f32[4,8] tanh(%m)
}
""")
    assert changed
    assert_hlo(m, """%fused_computation (param_y: f32[4,8], param_x: f32[4,8]) -> f32[4,8] {
  %param_y = f32[4,8] parameter(0)
  %param_x = f32[4,8] parameter(1)
  %e = f32[4,8] exponential(%param_x)
  %m = f32[4,8] multiply(%e, %param_y)
  ROOT %t = f32[4,8] tanh(%m)
}

ENTRY %main (x: f32[4,8], y: f32[4,8]) -> f32[4,8] {
  %x = f32[4,8] parameter(0)
  %y = f32[4,8] parameter(1)
  ROOT %fusion = f32[4,8] fusion(%y, %x), kind=kLoop, calls=%fused_computation
}
""")


def test_movement_ops_and_scalar_constants_fuse():
    changed, m = fuse("""ENTRY %main (x: f32[8,4]) -> f32[4,8] {
  %x = f32[8,4] parameter(0)
  %t = f32[4,8] transpose(%x), dimensions={1,0}
  %two = f32[] constant(2)
  %s = f32[4,8] broadcast(%two), dimensions={}
  ROOT %a = f32[4,8] add(%t, %s)
}
""")
    assert changed
    assert_hlo(m, """%fused_computation (param_x: f32[8,4]) -> f32[4,8] {
  %param_x = f32[8,4] parameter(0)
  %t = f32[4,8] transpose(%param_x), dimensions={1,0}
  %two = f32[] constant(2)
  %s = f32[4,8] broadcast(%two), dimensions={}
  ROOT %a = f32[4,8] add(%t, %s)
}

ENTRY %main (x: f32[8,4]) -> f32[4,8] {
  %x = f32[8,4] parameter(0)
  ROOT %fusion = f32[4,8] fusion(%x), kind=kLoop, calls=%fused_computation
}
""")


def test_reduce_consumes_its_producers_and_init():
    changed, m = fuse(SUM + """
ENTRY %main (x: f32[4,8]) -> f32[4] {
  %x = f32[4,8] parameter(0)
  %e = f32[4,8] exponential(%x)
  %zero = f32[] constant(0)
  ROOT %r = f32[4] reduce(%e, %zero), dimensions={1}, to_apply=%sum
}
""")
    assert changed
    assert_hlo(m, SUM + """
%fused_computation (param_x: f32[4,8]) -> f32[4] {
  %param_x = f32[4,8] parameter(0)
  %e = f32[4,8] exponential(%param_x)
  %zero = f32[] constant(0)
  ROOT %r = f32[4] reduce(%e, %zero), dimensions={1}, to_apply=%sum
}

ENTRY %main (x: f32[4,8]) -> f32[4] {
  %x = f32[4,8] parameter(0)
  ROOT %fusion = f32[4] fusion(%x), kind=kLoop, calls=%fused_computation
}
""")


def test_cheap_producer_is_duplicated_into_each_user():
    changed, m = fuse("""ENTRY %main (x: f32[4,8], y: f32[8]) -> (f32[4,8], f32[4,8]) {
  %x = f32[4,8] parameter(0)
  %y = f32[8] parameter(1)
  %yb = f32[4,8] broadcast(%y), dimensions={1}
  %a = f32[4,8] add(%x, %yb)
  %m = f32[4,8] multiply(%x, %yb)
  ROOT %t = (f32[4,8], f32[4,8]) tuple(%a, %m)
}
""")
    assert changed
    assert_hlo(m, """%fused_computation (param_x: f32[4,8], param_y: f32[8]) -> f32[4,8] {
  %param_x = f32[4,8] parameter(0)
  %param_y = f32[8] parameter(1)
  %yb = f32[4,8] broadcast(%param_y), dimensions={1}
  ROOT %m = f32[4,8] multiply(%param_x, %yb)
}

%fused_computation.1 (param_x: f32[4,8], param_y: f32[8]) -> f32[4,8] {
  %param_x = f32[4,8] parameter(0)
  %param_y = f32[8] parameter(1)
  %yb = f32[4,8] broadcast(%param_y), dimensions={1}
  ROOT %a = f32[4,8] add(%param_x, %yb)
}

ENTRY %main (x: f32[4,8], y: f32[8]) -> (f32[4,8], f32[4,8]) {
  %x = f32[4,8] parameter(0)
  %y = f32[8] parameter(1)
  %fusion.1 = f32[4,8] fusion(%x, %y), kind=kLoop, calls=%fused_computation.1
  %fusion = f32[4,8] fusion(%x, %y), kind=kLoop, calls=%fused_computation
  ROOT %t = (f32[4,8], f32[4,8]) tuple(%fusion.1, %fusion)
}
""")


EXPENSIVE_SHARED = """ENTRY %main (x: f32[4,8]) -> (f32[4,8], f32[4,8]) {
  %x = f32[4,8] parameter(0)
  %e = f32[4,8] exponential(%x)
  %n = f32[4,8] negate(%e)
  %a = f32[4,8] abs(%e)
  ROOT %t = (f32[4,8], f32[4,8]) tuple(%n, %a)
}
"""


def test_does_not_duplicate_expensive_producers():
    changed, m = fuse(EXPENSIVE_SHARED)
    assert not changed
    assert_hlo(m, EXPENSIVE_SHARED)


def pool_of_lrn_like(stride):
    """max-pool(x / (x * x + 1) ** 0.75) with 3x3 windows: the power and the divide are
    expensive, the square and the add cheap."""
    out = {2: 4, 3: 3}[stride]
    return MAX + f"""
ENTRY %main (x: f32[1,2,9,9]) -> f32[1,2,{out},{out}] {{
  %x = f32[1,2,9,9] parameter(0)
  %xx = f32[1,2,9,9] multiply(%x, %x)
  %one = f32[] constant(1)
  %ones = f32[1,2,9,9] broadcast(%one), dimensions={{}}
  %sq = f32[1,2,9,9] add(%xx, %ones)
  %k = f32[] constant(0.75)
  %ks = f32[1,2,9,9] broadcast(%k), dimensions={{}}
  %p = f32[1,2,9,9] power(%sq, %ks)
  %d = f32[1,2,9,9] divide(%x, %p)
  %ninf = f32[] constant(-inf)
  ROOT %pool = f32[1,2,{out},{out}] reduce-window(%d, %ninf), window={{size=1x1x3x3 \
stride=1x1x{stride}x{stride}}}, to_apply=%max
}}
"""


LRN_BODY = """  %xx = f32[1,2,9,9] multiply(%param_x, %param_x)
  %one = f32[] constant(1)
  %ones = f32[1,2,9,9] broadcast(%one), dimensions={}
  %sq = f32[1,2,9,9] add(%xx, %ones)
  %k = f32[] constant(0.75)
  %ks = f32[1,2,9,9] broadcast(%k), dimensions={}
  %p = f32[1,2,9,9] power(%sq, %ks)
"""


def test_expensive_producer_stays_out_of_overlapping_windows():
    # 3x3 stride 2 windows read most elements twice or four times: the power and the
    # divide would be recomputed per read, so they get a loop of their own (which also
    # keeps x and the power from both being live under the pool).
    changed, m = fuse(pool_of_lrn_like(stride=2))
    assert changed
    assert_hlo(m, MAX + """
%fused_computation (param_d: f32[1,2,9,9]) -> f32[1,2,4,4] {
  %param_d = f32[1,2,9,9] parameter(0)
  %ninf = f32[] constant(-inf)
  ROOT %pool = f32[1,2,4,4] reduce-window(%param_d, %ninf), window={size=1x1x3x3 \
stride=1x1x2x2}, to_apply=%max
}

%fused_computation.1 (param_x: f32[1,2,9,9]) -> f32[1,2,9,9] {
  %param_x = f32[1,2,9,9] parameter(0)
""" + LRN_BODY + """  ROOT %d = f32[1,2,9,9] divide(%param_x, %p)
}

ENTRY %main (x: f32[1,2,9,9]) -> f32[1,2,4,4] {
  %x = f32[1,2,9,9] parameter(0)
  %fusion.1 = f32[1,2,9,9] fusion(%x), kind=kLoop, calls=%fused_computation.1
  ROOT %fusion = f32[1,2,4,4] fusion(%fusion.1), kind=kLoop, calls=%fused_computation
}
""")


def test_expensive_producer_fuses_into_disjoint_windows():
    changed, m = fuse(pool_of_lrn_like(stride=3))
    assert changed
    assert_hlo(m, MAX + """
%fused_computation (param_x: f32[1,2,9,9]) -> f32[1,2,3,3] {
  %param_x = f32[1,2,9,9] parameter(0)
""" + LRN_BODY + """  %d = f32[1,2,9,9] divide(%param_x, %p)
  %ninf = f32[] constant(-inf)
  ROOT %pool = f32[1,2,3,3] reduce-window(%d, %ninf), window={size=1x1x3x3 \
stride=1x1x3x3}, to_apply=%max
}

ENTRY %main (x: f32[1,2,9,9]) -> f32[1,2,3,3] {
  %x = f32[1,2,9,9] parameter(0)
  ROOT %fusion = f32[1,2,3,3] fusion(%x), kind=kLoop, calls=%fused_computation
}
""")


def test_expensive_producer_stays_out_of_an_expanding_broadcast():
    changed, m = fuse("""ENTRY %main (y: f32[8]) -> f32[4,8] {
  %y = f32[8] parameter(0)
  %t = f32[8] tanh(%y)
  %b = f32[4,8] broadcast(%t), dimensions={1}
  ROOT %n = f32[4,8] negate(%b)
}
""")
    assert changed
    assert_hlo(m, """%fused_computation (param_t: f32[8]) -> f32[4,8] {
  %param_t = f32[8] parameter(0)
  %b = f32[4,8] broadcast(%param_t), dimensions={1}
  ROOT %n = f32[4,8] negate(%b)
}

ENTRY %main (y: f32[8]) -> f32[4,8] {
  %y = f32[8] parameter(0)
  %t = f32[8] tanh(%y)
  ROOT %fusion = f32[4,8] fusion(%t), kind=kLoop, calls=%fused_computation
}
""")


def test_does_not_fuse_into_or_out_of_dot():
    # The producers of the dot's operands fuse among themselves (exp alone stays as it
    # is), never into the dot, nor the dot into its user.
    changed, m = fuse("""ENTRY %main (x: f32[4,8], w: f32[8,3]) -> f32[4,3] {
  %x = f32[4,8] parameter(0)
  %w = f32[8,3] parameter(1)
  %e = f32[4,8] exponential(%x)
  %wt = f32[3,8] transpose(%w), dimensions={1,0}
  %wtt = f32[8,3] transpose(%wt), dimensions={1,0}
  %d = f32[4,3] dot(%e, %wtt), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %n = f32[4,3] negate(%d)
}
""")
    assert changed
    assert_hlo(m, """%fused_computation (param_w: f32[8,3]) -> f32[8,3] {
  %param_w = f32[8,3] parameter(0)
  %wt = f32[3,8] transpose(%param_w), dimensions={1,0}
  ROOT %wtt = f32[8,3] transpose(%wt), dimensions={1,0}
}

ENTRY %main (x: f32[4,8], w: f32[8,3]) -> f32[4,3] {
  %x = f32[4,8] parameter(0)
  %w = f32[8,3] parameter(1)
  %e = f32[4,8] exponential(%x)
  %fusion = f32[8,3] fusion(%w), kind=kLoop, calls=%fused_computation
  %d = f32[4,3] dot(%e, %fusion), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %n = f32[4,3] negate(%d)
}
""")


MODEL_OUTPUT = """ENTRY %main (x: f32[4,8]) -> (f32[4,8], f32[4,8]) {
  %x = f32[4,8] parameter(0)
  %e = f32[4,8] exponential(%x)
  %n = f32[4,8] negate(%e)
  ROOT %t = (f32[4,8], f32[4,8]) tuple(%e, %n)
}
"""


def test_does_not_fuse_away_a_model_output():
    changed, m = fuse(MODEL_OUTPUT)
    assert not changed
    assert_hlo(m, MODEL_OUTPUT)


def test_does_not_fuse_reduce_as_a_producer():
    # The reduce takes its init into a fusion of its own; the negate stays outside.
    changed, m = fuse(SUM + """
ENTRY %main (x: f32[4,8]) -> f32[4] {
  %x = f32[4,8] parameter(0)
  %zero = f32[] constant(0)
  %r = f32[4] reduce(%x, %zero), dimensions={1}, to_apply=%sum
  ROOT %n = f32[4] negate(%r)
}
""")
    assert changed
    assert_hlo(m, SUM + """
%fused_computation (param_x: f32[4,8]) -> f32[4] {
  %param_x = f32[4,8] parameter(0)
  %zero = f32[] constant(0)
  ROOT %r = f32[4] reduce(%param_x, %zero), dimensions={1}, to_apply=%sum
}

ENTRY %main (x: f32[4,8]) -> f32[4] {
  %x = f32[4,8] parameter(0)
  %fusion = f32[4] fusion(%x), kind=kLoop, calls=%fused_computation
  ROOT %n = f32[4] negate(%fusion)
}
""")


def test_reduce_fuses_into_a_narrowing_user():
    # A Resize's weighted sum requantized to 8 bits: the f32 sums never take memory.
    changed, m = fuse(SUM + """
ENTRY %main (x: f32[4,8]) -> s8[4] {
  %x = f32[4,8] parameter(0)
  %zero = f32[] constant(0)
  %r = f32[4] reduce(%x, %zero), dimensions={1}, to_apply=%sum
  %lo = f32[] constant(-128)
  %hi = f32[] constant(127)
  %c = f32[4] clamp(%lo, %r, %hi)
  ROOT %q = s8[4] convert(%c)
}
""")
    assert changed
    assert_hlo(m, SUM + """
%fused_computation (param_x: f32[4,8]) -> s8[4] {
  %lo = f32[] constant(-128)
  %param_x = f32[4,8] parameter(0)
  %zero = f32[] constant(0)
  %r = f32[4] reduce(%param_x, %zero), dimensions={1}, to_apply=%sum
  %hi = f32[] constant(127)
  %c = f32[4] clamp(%lo, %r, %hi)
  ROOT %q = s8[4] convert(%c)
}

ENTRY %main (x: f32[4,8]) -> s8[4] {
  %x = f32[4,8] parameter(0)
  ROOT %fusion = s8[4] fusion(%x), kind=kLoop, calls=%fused_computation
}
""")


def test_does_not_fuse_a_narrowing_reduce_read_per_column():
    # The broadcast reads each sum eight times: fused, each would be summed eight times.
    changed, m = fuse(SUM + """
ENTRY %main (x: f32[4,8]) -> s8[4,8] {
  %x = f32[4,8] parameter(0)
  %zero = f32[] constant(0)
  %r = f32[4] reduce(%x, %zero), dimensions={1}, to_apply=%sum
  %b = f32[4,8] broadcast(%r), dimensions={0}
  ROOT %q = s8[4,8] convert(%b)
}
""")
    assert changed
    assert _reduce_roots(m) == 1
    assert all(i.opcode is not Opcode.REDUCE for i in m.entry.root.called[0].instructions)


def test_does_not_fuse_a_reduce_with_two_users():
    changed, m = fuse(SUM + """
ENTRY %main (x: f32[4,8]) -> (s8[4], s8[4]) {
  %x = f32[4,8] parameter(0)
  %zero = f32[] constant(0)
  %r = f32[4] reduce(%x, %zero), dimensions={1}, to_apply=%sum
  %q = s8[4] convert(%r)
  %n = f32[4] negate(%r)
  %p = s8[4] convert(%n)
  ROOT %t = (s8[4], s8[4]) tuple(%q, %p)
}
""")
    assert changed
    assert _reduce_roots(m) == 1


def _reduce_roots(m) -> int:
    """How many fusions of the entry are a reduce's own loop."""
    return sum(f.opcode is Opcode.FUSION and f.called[0].root.opcode is Opcode.REDUCE
               for f in m.entry.instructions)


AVERAGE_POOL = SUM + """
ENTRY %main (x: f32[1,2,7,9], n: f32[1,1,4,5]) -> f32[1,2,4,5] {
  %x = f32[1,2,7,9] parameter(0)
  %n = f32[1,1,4,5] parameter(1)
  %zero = f32[] constant(0)
  %s = f32[1,2,4,5] reduce-window(%x, %zero), window={size=1x1x3x3 stride=1x1x2x2 \
pad=0_0x0_0x1_1x1_1}, to_apply=%sum
  %r = f32[4,5] reshape(%n)
  %nb = f32[1,2,4,5] broadcast(%r), dimensions={2,3}
  ROOT %avg = f32[1,2,4,5] divide(%s, %nb)
}
"""


def test_average_pool_sum_fuses_into_its_divide():
    # The pooling rows divide each vector of sums by its counts: the sums take no memory.
    changed, m = fuse(AVERAGE_POOL)
    assert changed
    assert_hlo(m, SUM + """
%fused_computation (param_x: f32[1,2,7,9], param_n: f32[1,1,4,5]) -> f32[1,2,4,5] {
  %param_x = f32[1,2,7,9] parameter(0)
  %zero = f32[] constant(0)
  %s = f32[1,2,4,5] reduce-window(%param_x, %zero), window={size=1x1x3x3 stride=1x1x2x2 \
pad=0_0x0_0x1_1x1_1}, to_apply=%sum
  %param_n = f32[1,1,4,5] parameter(1)
  %r = f32[4,5] reshape(%param_n)
  %nb = f32[1,2,4,5] broadcast(%r), dimensions={2,3}
  ROOT %avg = f32[1,2,4,5] divide(%s, %nb)
}

ENTRY %main (x: f32[1,2,7,9], n: f32[1,1,4,5]) -> f32[1,2,4,5] {
  %x = f32[1,2,7,9] parameter(0)
  %n = f32[1,1,4,5] parameter(1)
  ROOT %fusion = f32[1,2,4,5] fusion(%x, %n), kind=kLoop, calls=%fused_computation
}
""")


def test_does_not_fuse_a_window_sum_into_other_users():
    # A divisor, a second user, another element-wise root: the sum keeps its own loop.
    for text in (AVERAGE_POOL.replace("divide(%s, %nb)", "divide(%nb, %s)"),
                 AVERAGE_POOL.replace("divide(%s, %nb)", "maximum(%s, %nb)"),
                 AVERAGE_POOL.replace("-> f32[1,2,4,5] {\n  %x", "-> (f32[1,2,4,5], "
                                      "f32[1,2,4,5]) {\n  %x").replace(
                     "ROOT %avg = f32[1,2,4,5] divide(%s, %nb)",
                     "%avg = f32[1,2,4,5] divide(%s, %nb)\n  %e = f32[1,2,4,5] exponential(%s)"
                     "\n  ROOT %t = (f32[1,2,4,5], f32[1,2,4,5]) tuple(%avg, %e)")):
        _, m = fuse(text)
        assert sum(f.opcode is Opcode.FUSION
                   and f.called[0].root.opcode is Opcode.REDUCE_WINDOW
                   for f in m.entry.instructions) == 1, text


def test_existing_fusion_grows():
    changed, m = fuse("""%fused_computation (param_x: f32[4,8]) -> f32[4,8] {
  %param_x = f32[4,8] parameter(0)
  %e = f32[4,8] exponential(%param_x)
  ROOT %n = f32[4,8] negate(%e)
}

ENTRY %main (x: f32[4,8]) -> f32[4,8] {
  %x = f32[4,8] parameter(0)
  %ab = f32[4,8] abs(%x)
  ROOT %fusion = f32[4,8] fusion(%ab), kind=kLoop, calls=%fused_computation
}
""")
    assert changed
    assert_hlo(m, """%fused_computation (param_x.1: f32[4,8]) -> f32[4,8] {
  %param_x.1 = f32[4,8] parameter(0)
  %ab = f32[4,8] abs(%param_x.1)
  %e = f32[4,8] exponential(%ab)
  ROOT %n = f32[4,8] negate(%e)
}

ENTRY %main (x: f32[4,8]) -> f32[4,8] {
  %x = f32[4,8] parameter(0)
  ROOT %fusion = f32[4,8] fusion(%x), kind=kLoop, calls=%fused_computation
}
""")


GATHER_TAPS = SUM + """
ENTRY %main (x: f32[2,4]) -> RESULT {
  %x = f32[2,4] parameter(0)
  %i = s64[8,2] constant({ {0, 1}, {0, 1}, {0, 1}, {1, 2}, {1, 2}, {2, 3}, {2, 3}, {3, 3} })
  %w = f32[8,2] constant({ {1, 0}, {0.75, 0.25}, {0.25, 0.75}, {0.75, 0.25}, {0.25, 0.75}, {0.75, 0.25}, {0.25, 0.75}, {1, 0} })
  %g = f32[2,8,2] gather(%x, %i), offset_dims={0}, collapsed_slice_dims={1}, start_index_map={1}, index_vector_dim=2, slice_sizes={2,1}
  %wb = f32[2,8,2] broadcast(%w), dimensions={1,2}
  %m = f32[2,8,2] multiply(%g, %wb)
  %zero = f32[] constant(0)
  %r = f32[2,8] reduce(%m, %zero), dimensions={2}, to_apply=%sum
ROOT
}
"""


def test_gather_fuses_into_a_weighted_sum():
    # Linear interpolation as Resize lowers it: the taps are never stored.
    changed, m = fuse(GATHER_TAPS.replace("RESULT", "f32[2,8]").replace(
        "ROOT\n", "  ROOT %t = f32[2,8] negate(%r)\n"))
    assert changed
    assert_hlo(m, SUM + """
%fused_computation (param_x: f32[2,4], param_i: s64[8,2], param_w: f32[8,2]) -> f32[2,8] {
  %param_x = f32[2,4] parameter(0)
  %param_i = s64[8,2] parameter(1)
  %g = f32[2,8,2] gather(%param_x, %param_i), offset_dims={0}, collapsed_slice_dims={1}, start_index_map={1}, index_vector_dim=2, slice_sizes={2,1}
  %param_w = f32[8,2] parameter(2)
  %wb = f32[2,8,2] broadcast(%param_w), dimensions={1,2}
  %m = f32[2,8,2] multiply(%g, %wb)
  %zero = f32[] constant(0)
  ROOT %r = f32[2,8] reduce(%m, %zero), dimensions={2}, to_apply=%sum
}

ENTRY %main (x: f32[2,4]) -> f32[2,8] {
  %x = f32[2,4] parameter(0)
  %i = s64[8,2] constant({ {0, 1}, {0, 1}, {0, 1}, {1, 2}, {1, 2}, {2, 3}, {2, 3}, {3, 3} })
  %w = f32[8,2] constant({ {1, 0}, {0.75, 0.25}, {0.25, 0.75}, {0.75, 0.25}, {0.25, 0.75}, {0.75, 0.25}, {0.25, 0.75}, {1, 0} })
  %fusion = f32[2,8] fusion(%x, %i, %w), kind=kLoop, calls=%fused_computation
  ROOT %t = f32[2,8] negate(%fusion)
}
""")


def test_does_not_fuse_a_gather_with_two_users():
    changed, m = fuse(GATHER_TAPS.replace("RESULT", "(f32[2,8], f32[2,8,2])").replace(
        "ROOT\n", "  %n = f32[2,8,2] negate(%g)\n"
                   "  ROOT %t = (f32[2,8], f32[2,8,2]) tuple(%r, %n)\n"))
    assert changed
    assert named(m, "g").opcode is Opcode.GATHER
