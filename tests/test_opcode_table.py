"""Completeness of the opcode table: every opcode has one rule in each stage."""
import pytest

from xlac.hlo import Opcode
from xlac.hlo import evaluator, shape_inference
from xlac.emitter import elemental, kernels


def test_every_opcode_has_a_shape_rule():
    assert set(shape_inference.RULES) == set(Opcode)


def test_every_opcode_has_an_evaluator_rule():
    assert set(evaluator.RULES) == set(Opcode)


def test_every_opcode_has_an_emitter_rule():
    missing = set(Opcode) - set(elemental.RULES)
    assert not missing, sorted(o.text for o in missing)


def test_dot_and_convolution_also_have_kernels():
    assert {Opcode.DOT, Opcode.CONVOLUTION} <= set(kernels._EMITTERS)


@pytest.mark.parametrize("op", list(Opcode), ids=lambda o: o.text)
def test_opcode_text_names_are_unique_and_lookup_works(op):
    assert Opcode(op.text) is op
