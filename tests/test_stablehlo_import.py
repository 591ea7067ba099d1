"""StableHLO's own matters: the MLIR text forms the parser reads, regions that capture
values, refusals. Every JAX program of test_hlo_import.py is also compiled from
StableHLO there; these cases need no program of their own, or jax only to print one."""
from __future__ import annotations

import numpy as np
import pytest

import xlac
from xlac.hlo import Opcode, dtypes
from xlac.importers.stablehlo import import_stablehlo, is_stablehlo_text
from xlac.importers.stablehlo.mlir import MlirParseError, TensorType, dense_literal, parse
from xlac.main import main

F32_4 = TensorType(dtypes.F32, (4,))


def module(body: str, args: str = "%arg0: tensor<4xf32>", results: str = "tensor<4xf32>",
           attributes: str = "") -> str:
    return (f"module @m{attributes} {{\n  func.func public @main({args}) -> ({results}) {{\n"
            f"{body}\n  }}\n}}\n")


def run(text: str, *args):
    return xlac.load(xlac.compile(text.encode(), _out()).output)(*args)


_counter = iter(range(10**6))


def _out():
    import tempfile
    from pathlib import Path
    folder = Path(tempfile.mkdtemp(prefix="xlac-shlo-"))
    return folder / f"m{next(_counter)}.o"


# --- dense literals: each form MLIR prints --------------------------------------------

@pytest.mark.parametrize("body, t, want", [
    ("0.000000e+00", TensorType(dtypes.F32, (2,)), [0.0, 0.0]),                 # splat
    ("[1.5, -2.0]", TensorType(dtypes.F32, (2,)), [1.5, -2.0]),
    ("0xFF800000", TensorType(dtypes.F32, ()), -np.inf),                         # the bits
    ("0x7FC00000", TensorType(dtypes.F32, (2,)), [np.nan, np.nan]),
    ('"0x0000803F000000C0"', TensorType(dtypes.F32, (2,)), [1.0, -2.0]),          # raw bytes
    ('"0x0000803F"', TensorType(dtypes.F32, (3,)), [1.0, 1.0, 1.0]),               # raw splat
    ("[[true, false], [false, true]]", TensorType(dtypes.PRED, (2, 2)),
     [[True, False], [False, True]]),
    ("4294967295", TensorType(dtypes.U32, ()), 4294967295),                       # unsigned
    ("-1", TensorType(dtypes.S8, (2,)), [-1, -1]),
    ("0x7F80", TensorType(dtypes.BF16, ()), np.inf),
])
def test_dense_literal_forms(body, t, want):
    got = dense_literal(body, t)
    assert got.dtype == t.dtype.np and got.shape == t.dims
    np.testing.assert_array_equal(got.astype(np.float64) if t.dtype.kind == "f" else got,
                                  np.asarray(want))


def test_dense_literal_with_the_wrong_count_is_an_error():
    with pytest.raises(ValueError, match="3 values for tensor<2xf32>"):
        dense_literal("[1.0, 2.0, 3.0]", TensorType(dtypes.F32, (2,)))


# --- the parser: custom and generic forms -------------------------------------------

def test_custom_and_generic_forms_read_alike():
    custom = module("    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>\n"
                    "    return %0 : tensor<4xf32>")
    generic = ('"builtin.module"() <{sym_name = "m"}> ({\n'
               '  "func.func"() <{function_type = (tensor<4xf32>) -> tensor<4xf32>, '
               'sym_name = "main", sym_visibility = "public"}> ({\n'
               '  ^bb0(%arg0: tensor<4xf32>):\n'
               '    %0 = "stablehlo.add"(%arg0, %arg0) : (tensor<4xf32>, tensor<4xf32>) '
               '-> tensor<4xf32>\n'
               '    "func.return"(%0) : (tensor<4xf32>) -> ()\n'
               '  }) : () -> ()\n'
               '}) : () -> ()\n')
    for text in (custom, generic):
        main_fn = parse(text).functions["main"]
        add = main_fn.body.operations[0]
        assert (add.name, add.operands, add.result_types) == \
            ("stablehlo.add", ["%arg0", "%arg0"], [F32_4])
        assert is_stablehlo_text(text.encode())
        x = np.arange(4, dtype=np.float32)
        np.testing.assert_array_equal(run(text, x)[0], 2 * x)


def test_locations_and_aliases_are_skipped_and_name_the_inputs():
    text = ('#loc1 = loc("x")\n#loc2 = loc("y")\n'
            'module @m {\n  func.func public @main(%arg0: tensor<4xf32> loc("x"), '
            '%arg1: tensor<4xf32> loc("y")) -> (tensor<4xf32>) {\n'
            '    %0 = stablehlo.multiply %arg0, %arg1 : tensor<4xf32> loc(#loc2)\n'
            '    return %0 : tensor<4xf32> loc(#loc1)\n  } loc(#loc1)\n} loc(#loc1)\n')
    m = import_stablehlo(text.encode())
    assert [t.name for t in m.signature.inputs] == ["x", "y"]


def test_multiple_results_and_named_results():
    text = module(
        "    %0:2 = stablehlo.optimization_barrier %arg0, %arg0 : tensor<4xf32>, tensor<4xf32>\n"
        "    %values, %indices = chlo.top_k(%0#1, k = 2) : tensor<4xf32> -> "
        "(tensor<2xf32>, tensor<2xi32>)\n"
        "    return %values, %indices : tensor<2xf32>, tensor<2xi32>",
        results="tensor<2xf32>, tensor<2xi32>")
    values, indices = run(text, np.array([3, 9, 1, 7], np.float32))
    np.testing.assert_array_equal(values, [9, 7])
    np.testing.assert_array_equal(indices, [1, 3])


def test_parse_errors_give_line_and_column():
    text = module("    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>\n"
                  "    return %0 : tensor<4xf32\n")
    with pytest.raises(MlirParseError, match=r"^line 4, column \d+: missing '>'"):
        parse(text)


@pytest.mark.parametrize("type_text, message", [
    ("tuple<tensor<4xf32>>", "tuple types"),
    ("tensor<?x4xf32>", "dynamic shape"),
    ("tensor<4xcomplex<i32>>", "complex numbers of complex<i32>"),
    ("!stablehlo.token", "tokens"),
])
def test_types_we_do_not_compile_are_refused_by_name(type_text, message):
    with pytest.raises(MlirParseError, match=message):
        parse(module("    return %arg0 : " + type_text, args=f"%arg0: {type_text}",
                     results=type_text))


# --- regions and what they capture ------------------------------------------------

WHILE_CAPTURING = module("""\
    %c = stablehlo.constant dense<0> : tensor<i32>
    %0:2 = stablehlo.while(%i = %c, %x = %arg0) : tensor<i32>, tensor<4xf32>
    cond {
      %c3 = stablehlo.constant dense<3> : tensor<i32>
      %1 = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    } do {
      %1 = stablehlo.add %x, %arg1 : tensor<4xf32>
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %2 = stablehlo.add %i, %c1 : tensor<i32>
      stablehlo.return %2, %1 : tensor<i32>, tensor<4xf32>
    }
    return %0#1 : tensor<4xf32>""", args="%arg0: tensor<4xf32>, %arg1: tensor<4xf32>")


def test_a_while_carries_the_values_its_body_captures():
    x, y = np.arange(4, dtype=np.float32), np.full(4, 0.5, np.float32)
    np.testing.assert_array_equal(run(WHILE_CAPTURING, x, y)[0], x + 1.5)
    m = import_stablehlo(WHILE_CAPTURING.encode())
    loop, = [i for i in m.entry.instructions if i.opcode is Opcode.WHILE]
    assert len(loop.shape.tuple_shapes) == 3        # i, x and the captured %arg1


CASE_CAPTURING = module("""\
    %0 = "stablehlo.case"(%arg1) ({
      %1 = stablehlo.multiply %arg0, %arg0 : tensor<4xf32>
      stablehlo.return %1 : tensor<4xf32>
    }, {
      %1 = stablehlo.negate %arg0 : tensor<4xf32>
      stablehlo.return %1 : tensor<4xf32>
    }) : (tensor<i32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>""", args="%arg0: tensor<4xf32>, %arg1: tensor<i32>")


@pytest.mark.parametrize("index, want", [(0, lambda x: x * x), (1, lambda x: -x),
                                         (7, lambda x: -x)])      # out of range: the last
def test_case_branches_take_what_they_capture(index, want):
    x = np.arange(4, dtype=np.float32) - 1
    np.testing.assert_array_equal(run(CASE_CAPTURING, x, np.int32(index))[0], want(x))


def test_a_reducer_capturing_a_computed_value_is_refused():
    text = module("""\
    %c = stablehlo.constant dense<0.0> : tensor<f32>
    %s = stablehlo.reduce(%arg0 init: %c) across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
     reducer(%a: tensor<f32>, %b: tensor<f32>) {
      %0 = stablehlo.add %a, %b : tensor<f32>
      %1 = stablehlo.add %0, %arg1 : tensor<f32>
      stablehlo.return %1 : tensor<f32>
    }
    return %s : tensor<f32>""", args="%arg0: tensor<4xf32>, %arg1: tensor<f32>",
                  results="tensor<f32>")
    with pytest.raises(xlac.XlacError, match="uses %arg1, computed outside it; only constants"):
        import_stablehlo(text.encode())


def test_map_applies_its_region_element_by_element():
    text = module("""\
    %0 = "stablehlo.map"(%arg0, %arg1) <{dimensions = array<i64: 0>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = stablehlo.constant dense<2.0> : tensor<f32>
      %1 = stablehlo.multiply %a, %c : tensor<f32>
      %2 = stablehlo.add %1, %b : tensor<f32>
      stablehlo.return %2 : tensor<f32>
    }) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>""", args="%arg0: tensor<4xf32>, %arg1: tensor<4xf32>")
    x, y = np.arange(4, dtype=np.float32), np.full(4, 0.5, np.float32)
    np.testing.assert_array_equal(run(text, x, y)[0], 2 * x + y)


# --- refusals -------------------------------------------------------------------------

def test_every_unsupported_op_is_listed_in_one_message():
    text = module("""\
    %r = stablehlo.replica_id : tensor<ui32>
    %0 = stablehlo.convert %r : (tensor<ui32>) -> tensor<f32>
    %1 = stablehlo.custom_call @xla_python_cpu_callback(%0) : (tensor<f32>) -> tensor<4xf32>
    %2 = stablehlo.custom_call @xla_python_cpu_callback(%1) : (tensor<4xf32>) -> tensor<4xf32>
    return %2 : tensor<4xf32>""")
    with pytest.raises(xlac.XlacError, match=r"^unsupported StableHLO ops: stablehlo\."
                       r"replica_id at line 3 \(replication\); stablehlo\.custom_call "
                       r"xla_python_cpu_callback at line 5, line 6 \(a Python callback"):
        import_stablehlo(text.encode())


def test_complex_numbers_stay_inside_the_program():
    text = module("    return %arg0 : tensor<4xcomplex<f32>>", args="%arg0: tensor<4xcomplex<f32>>",
                  results="tensor<4xcomplex<f32>>")
    with pytest.raises(xlac.XlacError, match="takes or returns complex numbers"):
        import_stablehlo(text.encode())


def test_several_devices_are_refused():
    text = module("    return %arg0 : tensor<4xf32>",
                  attributes=" attributes {mhlo.num_partitions = 2 : i32}")
    with pytest.raises(xlac.XlacError, match="several devices.*num_partitions = 2"):
        import_stablehlo(text.encode())


def test_cli_reads_stablehlo_by_content_and_fails_in_one_line(tmp_path, capsys):
    path = tmp_path / "program.txt"
    path.write_text(module("    %0 = stablehlo.tanh %arg0 : tensor<4xf32>\n"
                           "    return %0 : tensor<4xf32>"))
    assert main([str(path), "-o", str(tmp_path / "prog.o")]) == 0
    assert "int prog_run(const float *arg0, float *out0, void *arena);" in \
        (tmp_path / "prog.h").read_text()
    path.write_text(module("    %0 = stablehlo.tanh %arg0 : tensor<4xf32>\n"
                           "    return %0 : tensor<4xf32"))
    assert main([str(path), "-o", str(tmp_path / "bad.o")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("xlac: error: line 4, column") and err.count("\n") == 1
    assert not (tmp_path / "bad.o").exists()


# --- batch normalization: no JAX program writes it; numpy is the reference -------------

BATCH_NORM = module("""\
    %0 = "stablehlo.batch_norm_inference"(%arg0, %arg1, %arg2, %arg3, %arg4) <{epsilon = 1.000000e-03 : f32, feature_index = 1 : i64}> : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x4xf32>
    %1:3 = "stablehlo.batch_norm_training"(%arg0, %arg1, %arg2) <{epsilon = 1.000000e-03 : f32, feature_index = 1 : i64}> : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>)
    %2:3 = "stablehlo.batch_norm_grad"(%arg0, %arg1, %1#1, %1#2, %arg5) <{epsilon = 1.000000e-03 : f32, feature_index = 1 : i64}> : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>)
    return %0, %1#0, %1#1, %1#2, %2#0, %2#1, %2#2 : tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>""",
    args=("%arg0: tensor<2x3x4xf32>, %arg1: tensor<3xf32>, %arg2: tensor<3xf32>, "
          "%arg3: tensor<3xf32>, %arg4: tensor<3xf32>, %arg5: tensor<2x3x4xf32>"),
    results=("tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, "
             "tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>"))


def _batch_norm_reference(x, scale, offset, mean, var, dy, eps=1e-3):
    x, scale, offset, mean, var, dy = (a.astype(np.float64) for a in (x, scale, offset, mean,
                                                                      var, dy))
    per = (None, slice(None), None)
    inference = (x - mean[per]) / np.sqrt(var[per] + eps) * scale[per] + offset[per]
    m, v = x.mean((0, 2)), x.var((0, 2))
    xhat = (x - m[per]) / np.sqrt(v[per] + eps)
    training = xhat * scale[per] + offset[per]
    # the gradient of sum(dy * training) by x, scale and offset
    n = x.size // x.shape[1]
    dxhat = dy * scale[per]
    dx = (dxhat - dxhat.mean((0, 2))[per] - xhat * (dxhat * xhat).mean((0, 2))[per]) \
        / np.sqrt(v[per] + eps)
    assert n == 8
    return [inference, training, m, v, dx, (dy * xhat).sum((0, 2)), dy.sum((0, 2))]


def test_batch_norms_match_their_definitions():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    scale, offset, mean = (rng.standard_normal(3).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2, 3).astype(np.float32)
    dy = rng.standard_normal((2, 3, 4)).astype(np.float32)
    got = run(BATCH_NORM, x, scale, offset, mean, var, dy)
    for g, w in zip(got, _batch_norm_reference(x, scale, offset, mean, var, dy), strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


# --- ops no JAX program of jax_cases.py writes, against numpy --------------------------

LESSER_OPS = module("""\
    %0 = chlo.is_inf %arg0 : tensor<4xf32> -> tensor<4xi1>
    %1 = chlo.is_pos_inf %arg0 : tensor<4xf32> -> tensor<4xi1>
    %2 = chlo.is_neg_inf %arg0 : tensor<4xf32> -> tensor<4xi1>
    %3 = chlo.tan %arg1 : tensor<4xf32> -> tensor<4xf32>
    %4 = stablehlo.logistic %arg1 : tensor<4xf32>
    %5 = stablehlo.round_nearest_afz %arg1 : tensor<4xf32>
    %c = stablehlo.constant dense<true> : tensor<i1>
    %8 = "stablehlo.if"(%c) ({
      %9 = stablehlo.negate %arg1 : tensor<4xf32>
      stablehlo.return %9 : tensor<4xf32>
    }, {
      stablehlo.return %arg1 : tensor<4xf32>
    }) : (tensor<i1>) -> tensor<4xf32>
    %10 = stablehlo.composite "my.square" %arg1 {decomposition = @square} : (tensor<4xf32>) -> tensor<4xf32>
    %11 = stablehlo.tan %arg1 : tensor<4xf32>
    return %0, %1, %2, %3, %5, %8, %10, %11 : tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  }
  func.func private @square(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.multiply %arg0, %arg0 : tensor<4xf32>
    return %0 : tensor<4xf32>""", args="%arg0: tensor<4xf32>, %arg1: tensor<4xf32>",
    results=", ".join(["tensor<4xi1>"] * 3 + ["tensor<4xf32>"] * 5))


def test_ops_no_jax_program_writes():
    x = np.array([np.inf, -np.inf, 1.0, np.nan], np.float32)
    y = np.array([0.5, -2.5, 2.5, 1.25], np.float32)
    got = run(LESSER_OPS, x, y)
    want = [np.isinf(x), np.isposinf(x), np.isneginf(x), np.tan(y),
            np.sign(y) * np.floor(np.abs(y) + 0.5), -y, y * y, np.tan(y)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_a_malformed_op_is_an_error_with_its_line(tmp_path, capsys):
    path = tmp_path / "bad.mlir"
    path.write_text(module("    %0 = stablehlo.broadcast_in_dim %arg0 : (tensor<4xf32>) -> "
                           "tensor<4xf32>\n    return %0 : tensor<4xf32>"))
    assert main([str(path), "-o", str(tmp_path / "bad.o")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("xlac: error: line 3: stablehlo.broadcast_in_dim: malformed op") \
        and err.count("\n") == 1


CHLO_BITS = module("""\
    %0 = chlo.square %arg0 : tensor<4xf32> -> tensor<4xf32>
    %1 = chlo.next_after %arg0, %arg1 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    %2 = chlo.mulhi %arg2, %arg3 : tensor<4xi32>, tensor<4xi32> -> tensor<4xi32>
    %3 = chlo.conj %arg0 : tensor<4xf32> -> tensor<4xf32>
    return %0, %1, %2, %3 : tensor<4xf32>, tensor<4xf32>, tensor<4xi32>, tensor<4xf32>""",
    args="%arg0: tensor<4xf32>, %arg1: tensor<4xf32>, %arg2: tensor<4xi32>, %arg3: tensor<4xi32>",
    results="tensor<4xf32>, tensor<4xf32>, tensor<4xi32>, tensor<4xf32>")


def test_chlo_square_next_after_mulhi_conj():
    x = np.array([1.0, -0.0, 0.0, -2.5], np.float32)
    y = np.array([2.0, 1.0, -1.0, -np.inf], np.float32)
    a = np.array([2**31 - 1, -7, 123456789, -2**31], np.int32)
    b = np.array([2**31 - 1, 3, -987654321, -2**31], np.int32)
    square, after, high, conj = run(CHLO_BITS, x, y, a, b)
    np.testing.assert_array_equal(square, x * x)
    np.testing.assert_array_equal(after.view(np.uint32), np.nextafter(x, y).view(np.uint32))
    np.testing.assert_array_equal(high, ((a.astype(np.int64) * b) >> 32).astype(np.int32))
    np.testing.assert_array_equal(conj, x)


def test_complex_values_pass_an_optimization_barrier_as_they_are():
    text = module("""\
    %z = stablehlo.complex %arg0, %arg1 : tensor<4xcomplex<f32>>
    %0:2 = stablehlo.optimization_barrier %z, %arg0 : tensor<4xcomplex<f32>>, tensor<4xf32>
    %1 = stablehlo.imag %0#0 : (tensor<4xcomplex<f32>>) -> tensor<4xf32>
    %2 = stablehlo.add %1, %0#1 : tensor<4xf32>
    return %2 : tensor<4xf32>""", args="%arg0: tensor<4xf32>, %arg1: tensor<4xf32>")
    x, y = np.arange(4, dtype=np.float32), np.full(4, 0.5, np.float32)
    np.testing.assert_array_equal(run(text, x, y)[0], x + y)
