"""Completeness of the opcode table: every opcode has one rule in each stage."""
import pytest

from xlac.hlo import Opcode
from xlac.hlo.opcodes import CONTROL_FLOW
from xlac.hlo import evaluator, shape_inference
from xlac.emitter import custom_call, elemental, kernels, scatter, sort


def test_every_opcode_has_a_shape_rule():
    assert set(shape_inference.RULES) == set(Opcode)


def test_every_opcode_has_an_evaluator_rule():
    assert set(evaluator.RULES) == set(Opcode)


# Emitted as a whole rather than element by element: sort and topk (emitter/sort.py),
# scatter (emitter/scatter.py), custom calls (emitter/custom_call.py), and control flow
# (the called computations' code in a loop or a branch, by the entry emitter). Dot and
# convolution have element rules (for fused computations no kernel implements) and
# kernels too.
_NOT_ELEMENTAL = {Opcode.SORT, Opcode.TOPK, Opcode.SCATTER, Opcode.CUSTOM_CALL} | CONTROL_FLOW


def test_every_opcode_has_an_emitter_rule():
    missing = set(Opcode) - set(elemental.RULES) - _NOT_ELEMENTAL
    assert not missing, sorted(o.text for o in missing)
    assert callable(sort.emit_sort_function) and callable(sort.emit_topk_function)
    assert callable(scatter.emit_scatter_function)
    assert callable(custom_call.emit_custom_call_function)


def test_dot_and_convolution_also_have_kernels():
    assert {Opcode.DOT, Opcode.CONVOLUTION} <= set(kernels._EMITTERS)


@pytest.mark.parametrize("op", list(Opcode), ids=lambda o: o.text)
def test_opcode_text_names_are_unique_and_lookup_works(op):
    assert Opcode(op.text) is op
