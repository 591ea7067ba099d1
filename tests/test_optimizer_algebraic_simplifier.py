"""Algebraic simplifier: one positive case per rule, plus cases it must leave alone."""
import numpy as np
import pytest

from xlac.hlo import Builder, Instruction, Module, Opcode, Shape, dtypes
from xlac.hlo.evaluator import evaluate
from xlac.optimizer import AlgebraicSimplifier, DeadCodeElimination

F32, S32 = dtypes.F32, dtypes.S32


def make_module(build, dtype=F32, dims=(2, 3)):
    """``build(b, x)`` returns the root over one parameter x of ``dtype[dims]``."""
    b = Builder("main")
    x = b.parameter(0, Shape.array(dtype, dims), "x")
    m = Module("m")
    m.add_computation(b.build(build(b, x)), entry=True)
    return m, x


def simplify(m):
    changed = AlgebraicSimplifier().run(m)
    DeadCodeElimination().run(m)
    return changed


def check_numerics(build, dtype=F32, dims=(2, 3)):
    m, _ = make_module(build, dtype, dims)
    arg = (np.arange(np.prod(dims)).reshape(dims) - 2).astype(dtype.np)
    before = evaluate(m, [arg])
    simplify(m)
    after = evaluate(m, [arg])
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


def full(b, value, like, dtype=F32):
    """A splat as XLA writes it: broadcast of a scalar constant."""
    return b.broadcast(b.constant(value, dtype), like.shape.dims, ())


# Each case builds an expression that must simplify to the parameter x itself.
TO_X = {
    "add_zero": lambda b, x: b.op(Opcode.ADD, x, full(b, 0.0, x)),
    "add_zero_left": lambda b, x: b.op(Opcode.ADD, b.constant(np.zeros((2, 3), np.float32)), x),
    "subtract_zero": lambda b, x: b.op(Opcode.SUBTRACT, x, full(b, 0.0, x)),
    "multiply_one": lambda b, x: b.op(Opcode.MULTIPLY, full(b, 1.0, x), x),
    "divide_one": lambda b, x: b.op(Opcode.DIVIDE, x, full(b, 1.0, x)),
    "negate_negate": lambda b, x: b.op(Opcode.NEGATE, b.op(Opcode.NEGATE, x)),
    "convert_same": lambda b, x: b.op(Opcode.CONVERT, x, shape=x.shape),
    "reshape_same": lambda b, x: b.op(Opcode.RESHAPE, x, shape=x.shape),
    "bitcast_same": lambda b, x: b.op(Opcode.BITCAST, x, shape=x.shape),
    "copy": lambda b, x: b.op(Opcode.COPY, x),
    "transpose_identity": lambda b, x: b.op(Opcode.TRANSPOSE, x, dimensions=(0, 1)),
    "slice_whole": lambda b, x: b.slice(x, (0, 0), (2, 3)),
    "concatenate_one": lambda b, x: b.op(Opcode.CONCATENATE, x, dimension=0),
    "pad_zero": lambda b, x: b.pad(x, b.constant(0.0), (0, 0), (0, 0)),
    "broadcast_same": lambda b, x: b.op(Opcode.BROADCAST, x, shape=x.shape, dimensions=(0, 1)),
    "gte_of_tuple": lambda b, x: b.get_tuple_element(b.tuple([b.op(Opcode.EXP, x), x]), 1),
}


@pytest.mark.parametrize("name", sorted(TO_X))
def test_rule_simplifies_to_operand(name):
    m, x = make_module(TO_X[name])
    assert simplify(m)
    assert m.entry.root is x
    check_numerics(TO_X[name])


def test_multiply_by_integer_zero_is_zero():
    build = lambda b, x: b.op(Opcode.MULTIPLY, x, full(b, 0, x, S32))   # noqa: E731
    m, x = make_module(build, S32)
    assert simplify(m)
    assert m.entry.root.opcode is Opcode.BROADCAST
    assert x not in m.entry.root.operands
    check_numerics(build, S32)


def test_does_not_multiply_float_by_zero():
    # x * 0.0 is NaN for x = inf: not a rewrite for floats.
    m, _ = make_module(lambda b, x: b.op(Opcode.MULTIPLY, x, full(b, 0.0, x)))
    assert not simplify(m)
    assert m.entry.root.opcode is Opcode.MULTIPLY


def test_reshape_of_reshape_is_one_reshape():
    build = lambda b, x: b.reshape(b.reshape(x, (3, 2)), (6,))   # noqa: E731
    m, x = make_module(build)
    assert simplify(m)
    root = m.entry.root
    assert root.opcode is Opcode.RESHAPE and root.operands == [x] and root.shape.dims == (6,)
    check_numerics(build)


def test_transpose_of_transpose_composes():
    build = lambda b, x: b.transpose(b.transpose(x, (1, 2, 0)), (2, 0, 1))   # noqa: E731
    m, x = make_module(build, dims=(2, 3, 4))
    assert simplify(m)
    # The two permutations are inverses: the composed identity transpose then goes too.
    while simplify(m):
        pass
    assert m.entry.root is x
    check_numerics(build, dims=(2, 3, 4))


def test_transpose_of_transpose_non_inverse():
    build = lambda b, x: b.transpose(b.transpose(x, (1, 0, 2)), (0, 2, 1))   # noqa: E731
    m, x = make_module(build, dims=(2, 3, 4))
    assert simplify(m)
    root = m.entry.root
    assert root.opcode is Opcode.TRANSPOSE and root.operands == [x]
    assert root.attrs["dimensions"] == (1, 2, 0)
    check_numerics(build, dims=(2, 3, 4))


def test_splat_recognised_through_reshape_of_constant():
    def build(b, x):
        return b.op(Opcode.ADD, x, b.reshape(b.constant(np.zeros(6, np.float32)), (2, 3)))
    m, x = make_module(build)
    assert simplify(m)
    assert m.entry.root is x


@pytest.mark.parametrize("build", [
    lambda b, x: b.op(Opcode.ADD, x, full(b, 1.0, x)),                               # not zero
    lambda b, x: b.op(Opcode.ADD, x, b.constant(np.array([[0, 1, 0], [0, 0, 0]], np.float32))),
    lambda b, x: b.op(Opcode.SUBTRACT, full(b, 0.0, x), x),                          # 0 - x
    lambda b, x: b.op(Opcode.DIVIDE, full(b, 1.0, x), x),                            # 1 / x
    lambda b, x: b.op(Opcode.NEGATE, b.op(Opcode.ABS, x)),
    lambda b, x: b.transpose(x, (1, 0)),
    lambda b, x: b.slice(x, (0, 1), (2, 3)),
    lambda b, x: b.pad(x, b.constant(0.0), (1, 0), (0, 0)),
    lambda b, x: b.reshape(x, (3, 2)),
    lambda b, x: b.computation.add(Instruction(                                      # relayout
        Opcode.COPY, Shape.array(F32, (2, 3), (0, 1)), [x])),
], ids=["add_one", "add_non_splat", "zero_minus_x", "one_over_x", "negate_abs", "transpose",
        "slice_part", "pad_nonzero", "reshape", "copy_relayout"])
def test_does_not_rewrite(build):
    m, _ = make_module(build)
    before = m.entry.root
    assert not AlgebraicSimplifier().run(m)
    assert m.entry.root is before


def test_does_not_treat_negative_zero_bits_of_nonsplat_as_splat():
    from xlac.optimizer.algebraic_simplifier import splat_value
    b = Builder("c")
    c = b.constant(np.array([0.0, -0.0], np.float32))
    assert splat_value(c) is None
    assert splat_value(b.constant(np.array([2, 2, 2], np.int32))) == 2


def _hoistable(b, x):
    # (bcast(x) * bcast(exp(x))) + bcast(2): the ops run on x's 3 elements, not on 2x3.
    wide = lambda v: b.broadcast(v, (2, 3), (1,))         # noqa: E731
    prod = b.op(Opcode.MULTIPLY, wide(x), wide(b.op(Opcode.EXP, x)))
    return b.op(Opcode.ADD, prod, b.broadcast(b.constant(2.0), (2, 3), ()))


def test_elementwise_op_of_broadcasts_runs_before_the_broadcast():
    m, x = make_module(_hoistable, dims=(3,))
    assert simplify(m)
    root = m.entry.root
    assert root.opcode is Opcode.BROADCAST and root.attrs["dimensions"] == (1,)
    inner = root.operands[0]
    assert inner.opcode is Opcode.ADD and inner.shape.dims == (3,)
    assert inner.operands[0].opcode is Opcode.MULTIPLY
    check_numerics(_hoistable, dims=(3,))


def test_broadcasts_along_different_dims_stay():
    def build(b, x):
        return b.op(Opcode.ADD, b.broadcast(x, (3, 3), (0,)), b.broadcast(x, (3, 3), (1,)))
    m, _ = make_module(build, dims=(3,))
    before = m.entry.root
    assert not AlgebraicSimplifier().run(m)
    assert m.entry.root is before
