"""Pipelines and ``optimize`` end to end: every ONNX op case of tests/onnx_ops.py and a
few of the onnx package's light CNNs, optimized, scheduled and run on assigned memory."""
import os
import sys

import numpy as np
import onnx
import pytest

from xlac.hlo import Opcode, Shape, dtypes
from xlac.hlo.evaluator import evaluate
from xlac.hlo.verifier import VerifierError
from xlac.importers.onnx import import_onnx
from xlac.optimizer import Pipeline, assign_buffers, make_pipeline, optimize, schedule

sys.path.insert(0, os.path.dirname(__file__))
from onnx_ops import CASES  # noqa: E402
from hlo_util import CPU, assert_hlo, assert_same_values, parse  # noqa: E402
from memory_util import (check_assignment, run_on_assigned_memory,  # noqa: E402
                         run_with_control_flow)

F32 = dtypes.F32


class Recorder:
    """A pass that records its runs and reports a change ``changes`` times."""

    def __init__(self, name, log, changes=0):
        self.name, self.log, self.changes = name, log, changes

    def run(self, module):
        self.log.append(self.name)
        self.changes -= 1
        return self.changes >= 0


SMALL = """ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %one = f32[] constant(1)
  %ones = f32[4] broadcast(%one), dimensions={}
  %dead = f32[4] log(%x)
  %m = f32[4] multiply(%x, %ones)
  %e = f32[4] exponential(%m)
  ROOT %t = f32[4] tanh(%e)
}
"""


def small_module():
    return parse(SMALL)


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
    optimize(m, CPU, opt_level=0)
    assert_hlo(m, SMALL.replace("  %dead = f32[4] log(%x)\n", ""))


def test_optimize_O2_simplifies_then_fuses():
    m = small_module()
    dumps = []
    optimize(m, CPU, opt_level=2, dump=lambda name, mod: dumps.append(name))
    assert_hlo(m, """%fused_computation (param_x: f32[4]) -> f32[4] {
  %param_x = f32[4] parameter(0)
  %e = f32[4] exponential(%param_x)
  ROOT %t = f32[4] tanh(%e)
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  ROOT %fusion = f32[4] fusion(%x), kind=kLoop, calls=%fused_computation
}
""")
    assert "simplify/algsimp" in dumps and "O2/fusion" in dumps
    assert_same_values(small_module(), m)


def test_optimize_is_idempotent():
    m = parse("""ENTRY %main (x: f32[256,256]) -> f32[256,256] {
  %x = f32[256,256] parameter(0)
  %e = f32[256,256] exponential(%x)
  %i = f32[256,256] iota(), iota_dimension=1
  ROOT %r = f32[256,256] add(%e, %i)
}
""")
    optimize(m, CPU)
    assert not make_pipeline(2, CPU).run(m)
    # The large iota is generated inside the loop, never folded into 256 KiB of data.
    assert_hlo(m, """%fused_computation (param_x: f32[256,256]) -> f32[256,256] {
  %param_x = f32[256,256] parameter(0)
  %e = f32[256,256] exponential(%param_x)
  %i = f32[256,256] iota(), iota_dimension=1
  ROOT %r = f32[256,256] add(%e, %i)
}

ENTRY %main (x: f32[256,256]) -> f32[256,256] {
  %x = f32[256,256] parameter(0)
  ROOT %fusion = f32[256,256] fusion(%x), kind=kLoop, calls=%fused_computation
}
""")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_onnx_op_case_survives_the_whole_middle_end(case):
    m = import_onnx(case.build())
    args = list(case.inputs)
    want = evaluate(m, args)
    optimize(m, CPU, verify=True)
    for got, w in zip(evaluate(m, args), want):
        np.testing.assert_allclose(got, w, rtol=case.rtol, atol=case.atol)
    ba = assign_buffers(m, schedule(m))
    check_assignment(m, ba)
    run = run_with_control_flow if ba.computations else run_on_assigned_memory
    for got, w in zip(run(m, ba, args), want):
        np.testing.assert_allclose(got, w, rtol=case.rtol, atol=case.atol)


LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")


@pytest.mark.parametrize("name", ["squeezenet", "inception_v1", "resnet50"])
def test_light_cnn_memory_plan(name):
    m = import_onnx(onnx.load(os.path.join(LIGHT_DIR, f"light_{name}.onnx")))
    optimize(m, CPU)
    assert any(i.opcode is Opcode.FUSION for i in m.entry.instructions)
    for i in m.entry.instructions:
        if i.opcode is Opcode.FUSION:
            # a dot / convolution never goes into a loop; a float convolution's output
            # fusion holds it and its bias and activation, no other
            cores = [f for f in i.called[0].instructions
                     if f.opcode in (Opcode.DOT, Opcode.CONVOLUTION)]
            assert len(cores) == (1 if i.attrs["kind"] == "kOutput" else 0)
    ba = assign_buffers(m, schedule(m))
    check_assignment(m, ba)
    # Reuse must pay: the arena is a fraction of the sum of all intermediates (SqueezeNet:
    # 1/2.98 since its convolutions' ReLUs went into their kernels, whose outputs the sum
    # no longer counts twice; the arena is unchanged, at its lower bound).
    assert ba.lower_bound <= ba.arena_size < ba.naive_bytes / 2.5
