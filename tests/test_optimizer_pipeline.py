"""Pipelines and ``optimize`` end to end: every ONNX op case of tests/onnx_ops.py and a
few of the onnx package's light CNNs, optimized, scheduled and run on assigned memory."""
import os
import sys

import numpy as np
import onnx
import pytest

from xlac.hlo import Builder, Module, Opcode, Shape, dtypes
from xlac.hlo.evaluator import evaluate
from xlac.hlo.verifier import VerifierError
from xlac.importers.onnx import import_onnx
from xlac.optimizer import Pipeline, assign_buffers, make_pipeline, optimize, schedule

sys.path.insert(0, os.path.dirname(__file__))
from onnx_ops import CASES  # noqa: E402
from test_optimizer_buffer_assignment import (check_assignment,  # noqa: E402
                                              run_on_assigned_memory)

F32 = dtypes.F32


class Recorder:
    """A pass that records its runs and reports a change ``changes`` times."""

    def __init__(self, name, log, changes=0):
        self.name, self.log, self.changes = name, log, changes

    def run(self, module):
        self.log.append(self.name)
        self.changes -= 1
        return self.changes >= 0


def small_module():
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (4,)))
    one = b.broadcast(b.constant(1.0), (4,), ())
    b.op(Opcode.LOG, x)                                              # dead
    root = b.op(Opcode.TANH, b.op(Opcode.EXP, b.op(Opcode.MULTIPLY, x, one)))
    m = Module("m")
    m.add_computation(b.build(root), entry=True)
    return m


def test_pipeline_runs_passes_in_order_and_dumps_after_changes():
    log, dumps = [], []
    p = Pipeline("p", [Recorder("a", log, 1), Recorder("b", log)],
                 dump=lambda name, m: dumps.append(name))
    assert p.run(small_module())
    assert log == ["a", "b"] and dumps == ["p/a"]


def test_fixed_point_pipeline_repeats_until_nothing_changes():
    log = []
    p = Pipeline("p", [Recorder("a", log, 2), Recorder("b", log, 1)], fixed_point=True)
    assert p.run(small_module())
    assert log == ["a", "b", "a", "b", "a", "b"]


def test_fixed_point_pipeline_stops_after_max_rounds():
    log = []
    p = Pipeline("p", [Recorder("a", log, 10 ** 6)], fixed_point=True)
    assert p.run(small_module())
    assert len(log) == Pipeline.MAX_ROUNDS


def test_nested_pipeline_dumps_each_inner_pass_once():
    log, dumps = [], []
    dump = lambda name, m: dumps.append(name)   # noqa: E731
    inner = Pipeline("inner", [Recorder("a", log, 1)], dump=dump)
    assert Pipeline("outer", [inner, Recorder("b", log, 1)], dump=dump).run(small_module())
    assert dumps == ["inner/a", "outer/b"]


def test_pipeline_verifies_after_each_pass():
    class Breaker:
        name = "breaker"

        def run(self, module):
            module.entry.root.shape = Shape.array(F32, (5,))   # lies about its shape
            return True

    with pytest.raises(VerifierError):
        Pipeline("p", [Breaker()], verify=True).run(small_module())


def test_optimize_O0_only_removes_dead_code():
    m = small_module()
    optimize(m, opt_level=0)
    assert [i.opcode for i in m.entry.instructions] == [
        Opcode.PARAMETER, Opcode.CONSTANT, Opcode.BROADCAST, Opcode.MULTIPLY, Opcode.EXP,
        Opcode.TANH]


def test_optimize_O2_simplifies_then_fuses():
    m = small_module()
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    want = evaluate(m, [x])[0]
    dumps = []
    optimize(m, opt_level=2, dump=lambda name, mod: dumps.append(name))
    assert [i.opcode for i in m.entry.instructions] == [Opcode.PARAMETER, Opcode.FUSION]
    fused = m.entry.root.called[0]
    assert [i.opcode for i in fused.instructions] == [Opcode.PARAMETER, Opcode.EXP, Opcode.TANH]
    assert [c.name for c in m.computations] == [fused.name, m.entry.name]
    assert "simplify/algsimp" in dumps and "O2/fusion" in dumps
    np.testing.assert_array_equal(evaluate(m, [x])[0], want)


def test_optimize_is_idempotent():
    b = Builder("main")
    big = Shape.array(F32, (256, 256))
    x = b.parameter(0, big)
    root = b.op(Opcode.ADD, b.op(Opcode.EXP, x), b.iota(big, 1))
    m = Module("m")
    m.add_computation(b.build(root), entry=True)
    optimize(m)
    assert not make_pipeline(2).run(m)
    # The large iota is generated inside the loop, never folded into 256 KiB of data.
    assert Opcode.IOTA in [i.opcode for i in m.entry.root.called[0].instructions]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_onnx_op_case_survives_the_whole_middle_end(case):
    m = import_onnx(case.build())
    args = list(case.inputs)
    want = evaluate(m, args)
    optimize(m, verify=True)
    for got, w in zip(evaluate(m, args), want):
        np.testing.assert_allclose(got, w, rtol=case.rtol, atol=case.atol)
    ba = assign_buffers(m, schedule(m))
    check_assignment(m, ba)
    for got, w in zip(run_on_assigned_memory(m, ba, args), want):
        np.testing.assert_allclose(got, w, rtol=case.rtol, atol=case.atol)


LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")


@pytest.mark.parametrize("name", ["squeezenet", "inception_v1", "resnet50"])
def test_light_cnn_memory_plan(name):
    m = import_onnx(onnx.load(os.path.join(LIGHT_DIR, f"light_{name}.onnx")))
    optimize(m)
    assert any(i.opcode is Opcode.FUSION for i in m.entry.instructions)
    for i in m.entry.instructions:
        if i.opcode is Opcode.FUSION:                  # dot / convolution never fused
            assert not any(f.opcode in (Opcode.DOT, Opcode.CONVOLUTION)
                           for f in i.called[0].instructions)
    ba = assign_buffers(m, schedule(m))
    check_assignment(m, ba)
    # Reuse must pay: the arena is a fraction of the sum of all intermediates.
    assert ba.lower_bound <= ba.arena_size < ba.naive_bytes / 3
