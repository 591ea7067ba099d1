"""Loop fusion: what fuses, what must not, and that values do not change."""
import numpy as np

from xlac.hlo import (Builder, DotDimensionNumbers, Opcode, Shape, Window, dtypes,
                      scalar_computation)
from xlac.hlo.evaluator import evaluate
from xlac.optimizer import DeadCodeElimination, InstructionFusion
from hlo_util import module_with

F32 = dtypes.F32
X = Shape.array(F32, (4, 8))


def fuse_and_check(m, nargs=1):
    """Run fusion; check the values and the fusion invariants; return the entry opcodes."""
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in m.entry.parameters]
    before = evaluate(m, args)
    changed = InstructionFusion().run(m)
    DeadCodeElimination().run(m)
    for a, b in zip(before, evaluate(m, args)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    names = [c.name for c in m.computations]
    for i in m.entry.instructions:
        if i.opcode is Opcode.FUSION:
            fused = i.called[0]
            assert i.attrs["kind"] == "kLoop"
            assert names.index(fused.name) < names.index(m.entry.name)   # callees first
            assert [p.number for p in fused.parameters] == list(range(len(i.operands)))
            assert [p.shape for p in fused.parameters] == [o.shape for o in i.operands]
            assert len(set(map(id, i.operands))) == len(i.operands)
    return changed, [i.opcode for i in m.entry.instructions]


def fused_opcodes(fusion):
    return [i.opcode for i in fusion.called[0].instructions if i.opcode is not Opcode.PARAMETER]


def test_elementwise_chain_becomes_one_fusion():
    b = Builder("main")
    x, y = b.parameter(0, X), b.parameter(1, X)
    root = b.op(Opcode.TANH, b.op(Opcode.MULTIPLY, b.op(Opcode.EXP, x), y))
    m = module_with(b, root)
    changed, ops = fuse_and_check(m)
    assert changed and ops == [Opcode.PARAMETER, Opcode.PARAMETER, Opcode.FUSION]
    fusion = m.entry.root
    assert fusion.operands == [y, x] or fusion.operands == [x, y]
    assert sorted(o.text for o in fused_opcodes(fusion)) == ["exponential", "multiply", "tanh"]


def test_movement_ops_and_scalar_constants_fuse():
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (8, 4)))
    t = b.transpose(x, (1, 0))
    s = b.broadcast(b.constant(2.0), (4, 8), ())
    root = b.op(Opcode.ADD, t, s)
    m = module_with(b, root)
    _, ops = fuse_and_check(m)
    assert ops == [Opcode.PARAMETER, Opcode.FUSION]
    assert m.entry.root.operands == [x]


def test_reduce_consumes_its_producers_and_init():
    b = Builder("main")
    x = b.parameter(0, X)
    add = scalar_computation("sum", Opcode.ADD, F32)
    root = b.reduce(b.op(Opcode.EXP, x), b.constant(0.0), (1,), add)
    m = module_with(b, root, add)
    _, ops = fuse_and_check(m)
    assert ops == [Opcode.PARAMETER, Opcode.FUSION]
    assert fused_opcodes(m.entry.root)[-1] is Opcode.REDUCE
    assert m.entry.root.called[0].root.called == [add]


def test_cheap_producer_is_duplicated_into_each_user():
    b = Builder("main")
    x, y = b.parameter(0, X), b.parameter(1, Shape.array(F32, (8,)))
    yb = b.broadcast(y, (4, 8), (1,))
    root = b.tuple([b.op(Opcode.ADD, x, yb), b.op(Opcode.MULTIPLY, x, yb)])
    m = module_with(b, root)
    _, ops = fuse_and_check(m)
    assert ops.count(Opcode.FUSION) == 2 and Opcode.BROADCAST not in ops


def test_does_not_duplicate_expensive_producers():
    b = Builder("main")
    x = b.parameter(0, X)
    e = b.op(Opcode.EXP, x)
    root = b.tuple([b.op(Opcode.NEGATE, e), b.op(Opcode.ABS, e)])
    m = module_with(b, root)
    changed, ops = fuse_and_check(m)
    assert not changed and ops.count(Opcode.EXP) == 1


def pool_of_lrn_like(window):
    """max-pool(x / (x * x + 1) ** 0.75): the power and the divide are expensive, the
    square and the add cheap."""
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (1, 2, 9, 9)))
    sq = b.op(Opcode.ADD, b.op(Opcode.MULTIPLY, x, x),
              b.broadcast(b.constant(1.0), x.shape.dims, ()))
    p = b.op(Opcode.POWER, sq, b.broadcast(b.constant(0.75), x.shape.dims, ()))
    mx = scalar_computation("max", Opcode.MAXIMUM, F32)
    root = b.reduce_window(b.op(Opcode.DIVIDE, x, p), b.constant(float("-inf")), window, mx)
    return module_with(b, root, mx)


def test_expensive_producer_stays_out_of_overlapping_windows():
    # 3x3 stride 2 windows read most elements twice or four times: the power and the
    # divide would be recomputed per read, so they get a loop of their own (which also
    # keeps x and the power from both being live under the pool).
    m = pool_of_lrn_like(Window.make((1, 1, 3, 3), (1, 1, 2, 2)))
    _, ops = fuse_and_check(m)
    assert ops.count(Opcode.FUSION) == 2
    pool, = [i for i in m.entry.instructions if i.opcode is Opcode.FUSION
             and i.called[0].root.opcode is Opcode.REDUCE_WINDOW]
    assert Opcode.POWER not in fused_opcodes(pool)
    assert Opcode.DIVIDE not in fused_opcodes(pool)
    (divide,) = pool.operands
    assert {Opcode.POWER, Opcode.DIVIDE} <= set(fused_opcodes(divide))


def test_expensive_producer_fuses_into_disjoint_windows():
    m = pool_of_lrn_like(Window.make((1, 1, 3, 3), (1, 1, 3, 3)))
    _, ops = fuse_and_check(m)
    assert ops == [Opcode.PARAMETER, Opcode.FUSION]
    assert Opcode.POWER in fused_opcodes(m.entry.root)


def test_expensive_producer_stays_out_of_an_expanding_broadcast():
    b = Builder("main")
    y = b.parameter(0, Shape.array(F32, (8,)))
    root = b.op(Opcode.NEGATE, b.broadcast(b.op(Opcode.TANH, y), (4, 8), (1,)))
    m = module_with(b, root)
    _, ops = fuse_and_check(m)
    assert ops == [Opcode.PARAMETER, Opcode.TANH, Opcode.FUSION]
    assert Opcode.TANH not in fused_opcodes(m.entry.root)


def test_does_not_fuse_into_or_out_of_dot():
    b = Builder("main")
    x, w = b.parameter(0, X), b.parameter(1, Shape.array(F32, (8, 3)))
    d = b.dot(b.op(Opcode.EXP, x), b.transpose(b.transpose(w, (1, 0)), (1, 0)),
              DotDimensionNumbers((), (1,), (), (0,)))
    root = b.op(Opcode.NEGATE, d)
    m = module_with(b, root)
    _, ops = fuse_and_check(m)
    dot = next(i for i in m.entry.instructions if i.opcode is Opcode.DOT)
    assert m.entry.root.opcode is Opcode.NEGATE and m.entry.root.operands == [dot]
    # The producers of the dot's operands fused among themselves, not into the dot.
    assert [o.opcode for o in dot.operands] == [Opcode.EXP, Opcode.FUSION]


def test_does_not_fuse_away_a_model_output():
    b = Builder("main")
    x = b.parameter(0, X)
    e = b.op(Opcode.EXP, x)
    root = b.tuple([e, b.op(Opcode.NEGATE, e)])
    m = module_with(b, root)
    changed, ops = fuse_and_check(m)
    assert not changed and Opcode.EXP in ops


def test_does_not_fuse_reduce_as_a_producer():
    b = Builder("main")
    x = b.parameter(0, X)
    add = scalar_computation("sum", Opcode.ADD, F32)
    r = b.reduce(x, b.constant(0.0), (1,), add)
    root = b.op(Opcode.NEGATE, r)
    m = module_with(b, root, add)
    fuse_and_check(m)
    assert m.entry.root.opcode is Opcode.NEGATE
    assert m.entry.root.operands[0].opcode is Opcode.FUSION           # the reduce + its init
    assert fused_opcodes(m.entry.root.operands[0])[-1] is Opcode.REDUCE


def test_existing_fusion_grows():
    b = Builder("main")
    x = b.parameter(0, X)
    root = b.op(Opcode.NEGATE, b.op(Opcode.EXP, x))
    m = module_with(b, root)
    fuse_and_check(m)
    fusion = m.entry.root
    # Put a new producer in front of the fusion and fuse again.
    ab = b.op(Opcode.ABS, x)
    m.entry.replace_all_uses(x, ab)
    ab.operands = [x]
    m.entry.sort()
    changed, ops = fuse_and_check(m)
    assert changed and ops == [Opcode.PARAMETER, Opcode.FUSION] and m.entry.root is fusion
    assert Opcode.ABS in fused_opcodes(fusion)


def test_fusion_on_hlo_text():
    from xlac.hlo.text import parse_module, print_module
    m = parse_module("""HloModule m

ENTRY %main (x: f32[4], y: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %y = f32[4]{0} parameter(1)
  %e = f32[4]{0} exponential(f32[4]{0} %x)
  ROOT %m = f32[4]{0} multiply(f32[4]{0} %e, f32[4]{0} %y)
}
""")
    assert InstructionFusion().run(m)
    assert print_module(m) == """HloModule m

%fused_computation (param_y: f32[4]{0}, param_x: f32[4]{0}) -> f32[4]{0} {
  %param_y = f32[4]{0} parameter(0)
  %param_x = f32[4]{0} parameter(1)
  %e = f32[4]{0} exponential(f32[4]{0} %param_x)
  ROOT %m = f32[4]{0} multiply(f32[4]{0} %e, f32[4]{0} %param_y)
}

ENTRY %main (x: f32[4]{0}, y: f32[4]{0}) -> f32[4]{0} {
  %x = f32[4]{0} parameter(0)
  %y = f32[4]{0} parameter(1)
  ROOT %fusion = f32[4]{0} fusion(f32[4]{0} %y, f32[4]{0} %x), kind=kLoop, calls=%fused_computation
}
"""
