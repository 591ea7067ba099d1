"""Dead code elimination and common subexpression elimination."""
import numpy as np

from xlac.hlo import Builder, Opcode, Shape, dtypes, scalar_computation
from xlac.hlo.evaluator import evaluate
from xlac.optimizer import CommonSubexpressionElimination, DeadCodeElimination
from hlo_util import module_with

F32 = dtypes.F32
X = Shape.array(F32, (4,))


# --- DCE --------------------------------------------------------------------------

def test_dce_removes_unused_instructions_and_keeps_parameters():
    b = Builder("main")
    x, unused = b.parameter(0, X), b.parameter(1, X)
    dead = b.op(Opcode.EXP, x)
    b.op(Opcode.LOG, dead)
    root = b.op(Opcode.NEGATE, x)
    m = module_with(b, root)
    assert DeadCodeElimination().run(m)
    assert m.entry.instructions == [x, unused, root]


def test_dce_removes_uncalled_computations():
    b = Builder("main")
    x = b.parameter(0, X)
    used = scalar_computation("sum", Opcode.ADD, F32)
    unused = scalar_computation("max", Opcode.MAXIMUM, F32)
    root = b.reduce(x, b.constant(0.0), (0,), used)
    m = module_with(b, root, used, unused)
    assert DeadCodeElimination().run(m)
    assert m.computations == [used, m.entry]


def test_does_not_remove_live_code():
    b = Builder("main")
    x = b.parameter(0, X)
    add = scalar_computation("sum", Opcode.ADD, F32)
    root = b.reduce(b.op(Opcode.EXP, x), b.constant(0.0), (0,), add)
    m = module_with(b, root, add)
    before = list(m.entry.instructions)
    assert not DeadCodeElimination().run(m)
    assert m.entry.instructions == before and len(m.computations) == 2


# --- CSE --------------------------------------------------------------------------

def test_cse_merges_identical_instructions_and_chains():
    b = Builder("main")
    x = b.parameter(0, X)
    e1, e2 = b.op(Opcode.EXP, x), b.op(Opcode.EXP, x)
    n1, n2 = b.op(Opcode.NEGATE, e1), b.op(Opcode.NEGATE, e2)
    root = b.op(Opcode.ADD, n1, n2)
    m = module_with(b, root)
    arg = np.linspace(-1, 1, 4, dtype=np.float32)
    before = evaluate(m, [arg])
    assert CommonSubexpressionElimination().run(m)
    assert root.operands == [n1, n1]
    assert [i.opcode for i in m.entry.instructions] == [
        Opcode.PARAMETER, Opcode.EXP, Opcode.NEGATE, Opcode.ADD]
    np.testing.assert_array_equal(evaluate(m, [arg])[0], before[0])


def test_cse_merges_constants_by_value():
    b = Builder("main")
    x = b.parameter(0, X)
    c1 = b.constant(np.arange(4, dtype=np.float32))
    c2 = b.constant(np.arange(4, dtype=np.float32))
    root = b.op(Opcode.ADD, b.op(Opcode.MULTIPLY, x, c1), c2)
    m = module_with(b, root)
    assert CommonSubexpressionElimination().run(m)
    assert root.operands[1] is c1


def test_cse_merges_the_root():
    b = Builder("main")
    x = b.parameter(0, X)
    e1, e2 = b.op(Opcode.EXP, x), b.op(Opcode.EXP, x)
    root = b.tuple([e1, e2])
    m = module_with(b, root)
    assert CommonSubexpressionElimination().run(m)
    assert m.entry.root.operands == [e1, e1]


def test_does_not_merge_different_values():
    b = Builder("main")
    x, y = b.parameter(0, X), b.parameter(1, X)
    c1 = b.constant(np.array([0.0, 1, 2, 3], np.float32))
    c2 = b.constant(np.array([0.0, 1, 2, 4], np.float32))
    c3 = b.constant(np.array([0, 1, 2, 3], np.int32))              # same values, other type
    c4 = b.constant(np.array([-0.0, 1, 2, 3], np.float32))         # -0.0 differs from 0.0
    r1 = b.op(Opcode.COMPARE, x, c1, direction="LT")
    r2 = b.op(Opcode.COMPARE, x, c2, direction="LT")
    r3 = b.op(Opcode.COMPARE, x, c2, direction="GT")              # other attribute
    r4 = b.op(Opcode.EXP, y)                                       # other operand
    r5 = b.op(Opcode.EXP, x)
    root = b.tuple([r1, r2, r3, r4, r5, c3, c4])
    m = module_with(b, root)
    assert not CommonSubexpressionElimination().run(m)
    assert len(m.entry.instructions) == 12
