"""The verifier: a good module passes; each kind of breakage is caught and named."""
import numpy as np
import pytest

from xlac.hlo import Computation, Instruction, Shape, dtypes
from xlac.hlo.text import parse_module
from xlac.hlo.verifier import VerifierError, verify

GOOD = """
HloModule good

%add (x: f32[]{}, y: f32[]{}) -> f32[]{} {
  %x = f32[]{} parameter(0)
  %y = f32[]{} parameter(1)
  ROOT %add = f32[]{} add(f32[]{} %x, f32[]{} %y)
}

ENTRY %main (p0: f32[2,3]{1,0}, p1: f32[2]{0}) -> f32[2]{0} {
  %p0 = f32[2,3]{1,0} parameter(0)
  %p1 = f32[2]{0} parameter(1)
  %c = f32[]{} constant(0)
  %r = f32[2]{0} reduce(f32[2,3]{1,0} %p0, f32[]{} %c), dimensions={1}, to_apply=%add
  ROOT %sum = f32[2]{0} add(f32[2]{0} %r, f32[2]{0} %p1)
}
"""


def good():
    return parse_module(GOOD)


def _instr(comp: Computation, name: str) -> Instruction:
    return next(i for i in comp.instructions if i.name == name)


def test_does_not_reject_a_good_module():
    verify(good())


def test_does_not_reject_a_non_default_layout():
    m = good()
    p0 = _instr(m.entry, "p0")
    p0.shape = Shape.array(dtypes.F32, (2, 3), (0, 1))
    verify(m)


def _break_operand_from_other_computation(m):
    _instr(m.entry, "sum").operands[0] = _instr(m.computations[0], "x")


def _break_use_before_def(m):
    ins = m.entry.instructions
    ins.insert(0, ins.pop(ins.index(_instr(m.entry, "r"))))


def _break_duplicate_name(m):
    _instr(m.entry, "p1").name = "p0"


def _break_wrong_shape(m):
    _instr(m.entry, "r").shape = Shape.array(dtypes.F32, (3,))


def _break_wrong_type(m):
    _instr(m.entry, "sum").shape = Shape.array(dtypes.S32, (2,))


def _break_parameter_gap(m):
    _instr(m.entry, "p1").attrs["number"] = 2


def _break_callee_not_in_module(m):
    m.remove_computation(m.computations[0])


def _break_callee_after_caller(m):
    m.computations.reverse()


def _break_root_missing(m):
    m.entry.root = None


def _break_root_elsewhere(m):
    m.entry.root = m.computations[0].root


def _break_literal_dtype(m):
    _instr(m.entry, "c").literal = np.array(0, np.float64)


def _break_literal_dims(m):
    _instr(m.entry, "c").literal = np.zeros((1,), np.float32)


def _break_layout(m):
    _instr(m.entry, "p0").shape = Shape(dtypes.F32, (2, 3), (0, 0))


def _break_unknown_attribute(m):
    _instr(m.entry, "sum").attrs["dimensions"] = (0,)


def _break_missing_attribute(m):
    del _instr(m.entry, "r").attrs["dimensions"]


def _break_reducer_type(m):
    add = m.computations[0]
    for name in ("x", "y", "add"):
        _instr(add, name).shape = Shape.array(dtypes.S32, ())


def _break_entry_not_in_module(m):
    m.entry = Computation("stray")


def _break_duplicate_computation_name(m):
    m.computations[0].name = "main"


def _break_instruction_twice(m):
    m.entry.instructions.append(_instr(m.entry, "sum"))


BREAKAGES = [
    (_break_operand_from_other_computation, "main", "sum", "operand %x is not in this"),
    (_break_use_before_def, "main", "r", "operand %p0 is defined after its use"),
    (_break_duplicate_name, "main", "p0", "name is empty or not unique"),
    (_break_wrong_shape, "main", "r", "shape f32[3]{0} is not the inferred f32[2]{0}"),
    (_break_wrong_type, "main", "sum", "is not the inferred f32[2]{0}"),
    (_break_parameter_gap, "main", None, "parameter numbers [0, 2] are not 0..1"),
    (_break_callee_not_in_module, "main", "r", "called computation %add is not in the module"),
    (_break_callee_after_caller, "main", "r", "%add is not before its caller"),
    (_break_root_missing, "main", None, "no root"),
    (_break_root_elsewhere, "main", None, "root %add is not in the computation"),
    (_break_literal_dtype, "main", "c", "literal float64[] does not match shape f32[]{}"),
    (_break_literal_dims, "main", "c", "literal float32[1] does not match"),
    (_break_layout, "main", "p0", "layout {0,0} is not a permutation"),
    (_break_unknown_attribute, "main", "sum", "add takes no attribute dimensions"),
    (_break_missing_attribute, "main", "r", "reduce is missing attribute 'dimensions'"),
    (_break_reducer_type, "main", "r", "to_apply %add must map (f32[]{}, f32[]{}) -> f32[]{}"),
]


@pytest.mark.parametrize("breakage, comp, instr, message", BREAKAGES,
                         ids=[b[0].__name__[7:] for b in BREAKAGES])
def test_catches(breakage, comp, instr, message):
    m = good()
    breakage(m)
    with pytest.raises(VerifierError) as info:
        verify(m)
    where = f"computation %{comp}" + (f", instruction %{instr}" if instr else "")
    assert str(info.value).startswith(where + ": "), str(info.value)
    assert message in str(info.value)


@pytest.mark.parametrize("breakage, message", [
    (_break_entry_not_in_module, "entry computation is not in the module"),
    (_break_duplicate_computation_name, "two computations named %main"),
    (_break_instruction_twice, "an instruction appears twice"),
])
def test_catches_module_level(breakage, message):
    m = good()
    breakage(m)
    with pytest.raises(VerifierError, match=message):
        verify(m)


def test_catches_bad_fusion_kind():
    m = parse_module("""
HloModule f

%fused (param_0: f32[4]{0}) -> f32[4]{0} {
  %param_0 = f32[4]{0} parameter(0)
  ROOT %negate = f32[4]{0} negate(f32[4]{0} %param_0)
}

ENTRY %main (a: f32[4]{0}) -> f32[4]{0} {
  %a = f32[4]{0} parameter(0)
  ROOT %fusion = f32[4]{0} fusion(f32[4]{0} %a), kind=kLoop, calls=%fused
}
""")
    verify(m)
    m.entry.root.attrs["kind"] = "kWhatever"
    with pytest.raises(VerifierError, match="instruction %fusion: fusion kind 'kWhatever'"):
        verify(m)


def test_catches_bad_sort_comparator():
    m = parse_module("""
HloModule s

%less (x: f32[]{}, y: f32[]{}) -> pred[]{} {
  %x = f32[]{} parameter(0)
  %y = f32[]{} parameter(1)
  ROOT %lt = pred[]{} compare(f32[]{} %x, f32[]{} %y), direction=LT
}

ENTRY %main (a: f32[4,3]{1,0}) -> f32[4,3]{1,0} {
  %a = f32[4,3]{1,0} parameter(0)
  ROOT %sort = f32[4,3]{1,0} sort(f32[4,3]{1,0} %a), dimensions={0}, to_apply=%less
}
""")
    verify(m)
    less = m.computations[0]
    less.root = _instr(less, "x")     # returns f32, not pred
    with pytest.raises(VerifierError, match="comparator %less must map .* -> pred"):
        verify(m)


def test_verifier_error_is_a_value_error():
    assert issubclass(VerifierError, ValueError)


LOOP = """
HloModule loop

%cond (s: (s32[]{}, f32[2]{0})) -> pred[]{} {
  %s = (s32[]{}, f32[2]{0}) parameter(0)
  %i = s32[]{} get-tuple-element((s32[]{}, f32[2]{0}) %s), index=0
  %n = s32[]{} constant(3)
  ROOT %lt = pred[]{} compare(s32[]{} %i, s32[]{} %n), direction=LT
}

%body (t: (s32[]{}, f32[2]{0})) -> (s32[]{}, f32[2]{0}) {
  %t = (s32[]{}, f32[2]{0}) parameter(0)
  %j = s32[]{} get-tuple-element((s32[]{}, f32[2]{0}) %t), index=0
  %x = f32[2]{0} get-tuple-element((s32[]{}, f32[2]{0}) %t), index=1
  %y = f32[2]{0} negate(f32[2]{0} %x)
  ROOT %r = (s32[]{}, f32[2]{0}) tuple(s32[]{} %j, f32[2]{0} %y)
}

%branch (a: f32[2]{0}) -> f32[2]{0} {
  ROOT %a = f32[2]{0} parameter(0)
}

ENTRY %main (x0: f32[2]{0}, p: pred[]{}) -> f32[2]{0} {
  %x0 = f32[2]{0} parameter(0)
  %p = pred[]{} parameter(1)
  %zero = s32[]{} constant(0)
  %init = (s32[]{}, f32[2]{0}) tuple(s32[]{} %zero, f32[2]{0} %x0)
  %w = (s32[]{}, f32[2]{0}) while((s32[]{}, f32[2]{0}) %init), condition=%cond, body=%body
  %out = f32[2]{0} get-tuple-element((s32[]{}, f32[2]{0}) %w), index=1
  ROOT %c = f32[2]{0} conditional(pred[]{} %p, f32[2]{0} %out, f32[2]{0} %x0), true_computation=%branch, false_computation=%branch
}
"""


def _comp(m, name):
    return next(c for c in m.computations if c.name == name)


def _break_body_root(m):
    body = _comp(m, "body")
    body.root = _instr(body, "y")


def _break_condition_root(m):
    cond = _comp(m, "cond")
    cond.root = _instr(cond, "i")


def _break_body_parameter(m):
    _instr(m.entry, "w").called[1] = _comp(m, "branch")


def _break_branch_parameter(m):
    _instr(_comp(m, "branch"), "a").shape = Shape.array(dtypes.F32, (3,))
    _comp(m, "branch").root.shape = Shape.array(dtypes.F32, (3,))


def _break_branch_count(m):
    _instr(m.entry, "c").called.pop()


@pytest.mark.parametrize("breakage, instr, message", [
    (_break_body_root, "w", "while body %body returns f32[2]{0}"),
    (_break_condition_root, "w", "while condition %cond must return pred[]"),
    (_break_body_parameter, "w", "while body %branch takes f32[2]{0}, the operand is"),
    (_break_branch_parameter, "c", "branch 0 %branch takes f32[3]{0}"),
    (_break_branch_count, "c", "conditional has 1 branches and 2 branch operands"),
], ids=lambda v: getattr(v, "__name__", "")[7:] or None)
def test_catches_control_flow(breakage, instr, message):
    m = parse_module(LOOP)
    verify(m)
    breakage(m)
    with pytest.raises(VerifierError) as info:
        verify(m)
    assert f"instruction %{instr}: " in str(info.value) and message in str(info.value), \
        str(info.value)


SCATTER = """
HloModule s

%add (x: f32[]{}, y: f32[]{}) -> f32[]{} {
  %x = f32[]{} parameter(0)
  %y = f32[]{} parameter(1)
  ROOT %add = f32[]{} add(f32[]{} %x, f32[]{} %y)
}

ENTRY %main (a: f32[5,3]{1,0}, i: s32[2,1]{1,0}, u: f32[2,3]{1,0}) -> f32[5,3]{1,0} {
  %a = f32[5,3]{1,0} parameter(0)
  %i = s32[2,1]{1,0} parameter(1)
  %u = f32[2,3]{1,0} parameter(2)
  ROOT %scatter = f32[5,3]{1,0} scatter(f32[5,3]{1,0} %a, s32[2,1]{1,0} %i, f32[2,3]{1,0} %u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}
"""


def _scatter_numbers(**changes):
    from dataclasses import replace

    def breakage(m):
        root = m.entry.root
        root.attrs["dimension_numbers"] = replace(root.attrs["dimension_numbers"], **changes)
    return breakage


def _scatter_update_type(m):
    add = m.computations[0]
    for name in ("x", "y", "add"):
        _instr(add, name).shape = Shape.array(dtypes.S32, ())


@pytest.mark.parametrize("breakage, message", [
    (_scatter_update_type, "to_apply %add must map (f32[]{}, f32[]{}) -> f32[]{}"),
    (_scatter_numbers(update_window_dims=(0,)), "do not match the indices"),
    (_scatter_numbers(inserted_window_dims=()), "do not add up to the rank"),
    (_scatter_numbers(scatter_dims_to_operand_dims=(0, 1)), "the index vector 1"),
    (_scatter_numbers(index_vector_dim=3), "index_vector_dim 3 out of range"),
    (_scatter_numbers(input_batching_dims=(1,), scatter_indices_batching_dims=(0,)),
     "do not add up to the rank"),
], ids=["update_type", "window_dims", "inserted_dims", "index_vector", "index_vector_dim",
        "batching_dims"])
def test_catches_bad_scatter(breakage, message):
    m = parse_module(SCATTER)
    verify(m)
    breakage(m)
    with pytest.raises(VerifierError) as info:
        verify(m)
    assert "instruction %scatter" in str(info.value) and message in str(info.value)
