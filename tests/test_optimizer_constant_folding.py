"""Constant folding, and its rule for broadcasts and iotas (see constant_folding.py)."""
import numpy as np

from xlac.hlo import (Builder, ConvDimensionNumbers, DotDimensionNumbers, Opcode, Shape,
                      Window, dtypes)
from xlac.hlo.evaluator import evaluate
from xlac.optimizer import ConstantFolding, DeadCodeElimination
from hlo_util import module_with

F32, S32 = dtypes.F32, dtypes.S32


def fold(m):
    changed = ConstantFolding().run(m)
    DeadCodeElimination().run(m)
    return changed


def opcodes(m):
    return [i.opcode for i in m.entry.instructions]


def test_folds_arithmetic_on_constants():
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (3,)))
    c = b.op(Opcode.ADD, b.constant(np.array([1, 2, 3], np.float32)),
             b.op(Opcode.EXP, b.constant(np.zeros(3, np.float32))))
    root = b.op(Opcode.MULTIPLY, x, c)
    m = module_with(b, root)
    assert fold(m)
    assert opcodes(m) == [Opcode.PARAMETER, Opcode.CONSTANT, Opcode.MULTIPLY]
    np.testing.assert_array_equal(root.operands[1].literal, [2, 3, 4])
    assert root.operands[1].literal.dtype == np.float32


def test_folds_a_constant_root():
    b = Builder("main")
    root = b.op(Opcode.NEGATE, b.constant(np.array([1, -2], np.int32)))
    m = module_with(b, root)
    assert fold(m)
    assert m.entry.root.opcode is Opcode.CONSTANT
    np.testing.assert_array_equal(m.entry.root.literal, [-1, 2])


def test_folds_small_broadcast():
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (4, 4)))
    root = b.op(Opcode.ADD, x, b.broadcast(b.constant(1.5), (4, 4), ()))
    m = module_with(b, root)
    arg = np.ones((4, 4), np.float32)
    before = evaluate(m, [arg])[0]
    assert fold(m)
    assert opcodes(m) == [Opcode.PARAMETER, Opcode.CONSTANT, Opcode.ADD]
    np.testing.assert_array_equal(evaluate(m, [arg])[0], before)


def test_does_not_fold_a_large_broadcast_of_a_scalar():
    # 512 KiB of 1.5s cost nothing to generate inside a fused loop.
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (256, 512)))
    root = b.op(Opcode.ADD, x, b.broadcast(b.constant(1.5), (256, 512), ()))
    m = module_with(b, root)
    assert not fold(m)
    assert Opcode.BROADCAST in opcodes(m)


def test_does_not_fold_a_large_iota():
    b = Builder("main")
    x = b.parameter(0, Shape.array(S32, (256, 512)))
    root = b.op(Opcode.ADD, x, b.iota(Shape.array(S32, (256, 512)), 1))
    m = module_with(b, root)
    assert not fold(m)


def test_folds_the_scalar_part_under_a_large_broadcast():
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (256, 512)))
    s = b.op(Opcode.ADD, b.constant(1.0), b.constant(2.0))
    root = b.op(Opcode.ADD, x, b.broadcast(s, (256, 512), ()))
    m = module_with(b, root)
    assert fold(m)
    bcast = root.operands[1]
    assert bcast.opcode is Opcode.BROADCAST
    assert bcast.operands[0].opcode is Opcode.CONSTANT and bcast.operands[0].literal == 3.0


def test_folds_a_large_broadcast_feeding_a_dot():
    # ConstantOfShape weights: the dot kernel reads its operand from memory.
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (2, 256)))
    w = b.broadcast(b.constant(0.5), (256, 256), ())
    root = b.dot(x, w, DotDimensionNumbers((), (1,), (), (0,)))
    m = module_with(b, root)
    assert fold(m)
    kernel = m.entry.root.operands[1]
    assert kernel.opcode is Opcode.CONSTANT and kernel.literal.shape == (256, 256)
    assert (kernel.literal == 0.5).all()


def test_folds_a_large_broadcast_feeding_a_convolution_through_a_reshape():
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (1, 64, 8, 8)))
    w = b.reshape(b.broadcast(b.constant(0.25), (64 * 64 * 9,), ()), (64, 64, 3, 3))
    root = b.convolution(x, w, Window.make((3, 3)), ConvDimensionNumbers.nchw(2))
    m = module_with(b, root)
    assert fold(m)
    kernel = m.entry.root.operands[1]
    assert kernel.opcode is Opcode.CONSTANT and kernel.literal.shape == (64, 64, 3, 3)


def test_folds_large_elementwise_work_on_a_large_constant():
    # Same size as its input: folding trades one weight for another.
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (128, 256)))
    w = b.constant(np.arange(128 * 256, dtype=np.float32).reshape(128, 256))
    root = b.op(Opcode.ADD, x, b.transpose(b.transpose(w, (1, 0)), (1, 0)))
    m = module_with(b, root)
    assert fold(m)
    np.testing.assert_array_equal(root.operands[1].literal, w.literal)


def test_does_not_fold_anything_that_depends_on_a_parameter():
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (3,)))
    root = b.op(Opcode.EXP, b.op(Opcode.ADD, x, b.constant(np.ones(3, np.float32))))
    m = module_with(b, root)
    assert not fold(m)
    assert len(m.entry.instructions) == 4
