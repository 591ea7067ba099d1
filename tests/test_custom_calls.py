"""Custom calls: a custom-call of StableHLO or HLO text becomes a call of the C function
the linking program defines (emitter/custom_call.py's signature), declared in the
header; xlac.load takes Python callables or C files for them (cli/custom_calls.py)."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

import xlac
from xlac import runtime_c
from xlac.hlo import Opcode
from xlac.hlo.text import parse_module, print_module
from xlac.importers.hlo import import_hlo
from xlac.importers.stablehlo import import_stablehlo
from xlac.main import main

PROGRAM = b"""module @m {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
    %0 = stablehlo.custom_call @my_axpy(%arg0, %arg1) {backend_config = "2.5"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %1 = stablehlo.tanh %0 : tensor<4xf32>
    %2:2 = stablehlo.custom_call @my_split(%1) : (tensor<4xf32>) -> (tensor<2xf32>, tensor<2xi32>)
    %3 = stablehlo.convert %2#1 : (tensor<2xi32>) -> tensor<2xf32>
    %4 = stablehlo.concatenate %3, %2#0, dim = 0 : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
    return %4, %0 : tensor<4xf32>, tensor<4xf32>
  }
}
"""
X = np.array([1, 2, 3, 4], np.float32)
Y = np.array([0.5, -0.5, 0, 1], np.float32)


def my_axpy(x, y, opaque):
    return float(opaque) * x + y


def my_split(x, opaque):
    assert opaque == b""
    return x[:2], (x[2:] * 1000).astype(np.int32)


def expected():
    a = 2.5 * X + Y
    t = np.tanh(a)
    return [np.concatenate([(t[2:] * 1000).astype(np.int32).astype(np.float32), t[:2]]), a]


IMPL_C = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
void my_axpy(void *out, const void **in, const char *opaque, size_t n) {
    char text[16] = {0};
    memcpy(text, opaque, n < 15 ? n : 15);
    float a = strtof(text, NULL);
    const float *x = in[0], *y = in[1];
    float *o = out;
    for (int i = 0; i < 4; ++i) o[i] = a * x[i] + y[i];
}
void my_split(void *out, const void **in, const char *opaque, size_t n) {
    void **outs = out;
    const float *x = in[0];
    float *head = outs[0];
    int32_t *tail = outs[1];
    (void)opaque; (void)n;
    head[0] = x[0]; head[1] = x[1];
    tail[0] = (int32_t)(x[2] * 1000); tail[1] = (int32_t)(x[3] * 1000);
}
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("custom")
    return xlac.compile(PROGRAM, folder / "m.o", name="m"), folder


def _assert_expected(got):
    for g, w in zip(got, expected(), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_python_callables_run_in_the_loaded_model(compiled):
    result, _ = compiled
    m = xlac.load(result.output, custom_calls={"my_axpy": my_axpy, "my_split": my_split})
    _assert_expected(m(X, Y))


def test_a_c_file_and_a_callable_together(compiled):
    result, folder = compiled
    (folder / "axpy.c").write_text(IMPL_C.split("void my_split")[0])
    m = xlac.load(result.output, custom_calls={"my_axpy": folder / "axpy.c",
                                               "my_split": my_split})
    _assert_expected(m(X, Y))


def test_header_declares_the_targets_and_a_c_program_links_them(compiled):
    result, folder = compiled
    header = (folder / "m.h").read_text()
    assert "void my_axpy(void *out, const void **in, const char *opaque, size_t opaque_len);" \
        in header
    assert "/* xlac custom call my_split: out (f32[2], s32[2]); in f32[4] */" in header
    assert "my_axpy" not in header.split("C library")[1].split("*/")[0]   # not libc's
    (folder / "impl.c").write_text(IMPL_C)
    (folder / "main.c").write_text(r"""
#include <stdio.h>
#include "m.h"
static unsigned char arena[m_ARENA_SIZE + 1] __attribute__((aligned(64)));
int main(void) {
    float x[4] = {1, 2, 3, 4}, y[4] = {0.5f, -0.5f, 0, 1}, a[4], b[4];
    if (m_run(x, y, a, b, arena) != 0) return 1;
    for (int i = 0; i < 4; ++i) printf("%.9g %.9g\n", a[i], b[i]);
    return 0;
}
""")
    subprocess.run(["cc", "-std=gnu99", "-Wall", "-Werror", f"-I{folder}",
                    f"-I{runtime_c.__path__[0]}", str(folder / "main.c"), str(folder / "impl.c"),
                    str(result.output), "-lm", "-o", str(folder / "app")], check=True)
    out = subprocess.run([str(folder / "app")], capture_output=True, text=True, check=True)
    got = np.array(out.stdout.split(), np.float32).reshape(4, 2).T
    _assert_expected(list(got))


def test_load_names_the_missing_implementations(compiled):
    result, _ = compiled
    with pytest.raises(xlac.XlacError, match=r"calls my_axpy, my_split \(custom calls\): give "
                       r"their implementations, custom_calls=\{'my_axpy': fn, 'my_split': fn\}"):
        xlac.load(result.output)
    with pytest.raises(xlac.XlacError, match="makes no custom call other"):
        xlac.load(result.output, custom_calls={"my_axpy": my_axpy, "my_split": my_split,
                                               "other": my_axpy})


def test_an_exception_in_a_callable_fails_the_call(compiled):
    result, _ = compiled

    def broken(x, y, opaque):
        raise ValueError("broken kernel")
    m = xlac.load(result.output, custom_calls={"my_axpy": broken, "my_split": my_split})
    with pytest.raises(ValueError, match="broken kernel"):
        m(X, Y)
    m = xlac.load(result.output, custom_calls={"my_axpy": my_axpy,
                                               "my_split": lambda x, opaque: x})
    with pytest.raises(xlac.XlacError, match=r"my_split returned 1 array\(s\), the call makes 2"):
        m(X, Y)


def test_custom_calls_are_never_folded_and_round_trip_as_hlo_text():
    module = import_stablehlo(PROGRAM)
    calls = [i for i in module.entry.instructions if i.opcode is Opcode.CUSTOM_CALL]
    assert [c.attrs["custom_call_target"] for c in calls] == ["my_axpy", "my_split"]
    assert calls[0].attrs["backend_config"] == "2.5"
    text = print_module(module)
    assert 'custom-call(f32[4]{0} %arg0, f32[4]{0} %arg1), custom_call_target="my_axpy", ' \
        'backend_config="2.5"' in text
    assert print_module(parse_module(text)) == text


HLO = b"""HloModule m

ENTRY main.1 {
  x.1 = f32[3]{0} parameter(0)
  ROOT c.1 = f32[3]{0} custom-call(x.1), custom_call_target="twice", api_version=API_VERSION_STATUS_RETURNING_UNIFIED, backend_config="k=2"
}
"""


def test_hlo_text_custom_calls_compile_too(tmp_path):
    m = import_hlo(HLO)
    call = m.entry.root
    assert call.opcode is Opcode.CUSTOM_CALL and call.attrs["backend_config"] == "k=2"
    result = xlac.compile(HLO, tmp_path / "t.o")
    model = xlac.load(result.output, custom_calls={
        "twice": lambda x, opaque: x * int(opaque.split(b"=")[1])})
    np.testing.assert_array_equal(model(np.arange(3, dtype=np.float32))[0], [0, 2, 4])


@pytest.mark.parametrize("old, new, message", [
    (b'custom_call_target="twice"', b'custom_call_target="xla_ffi_python_cpu_callback"',
     "a Python callback"),
    (b'custom_call_target="twice"', b'custom_call_target="lapack_sgesdd_ffi"',
     "a LAPACK routine other than potrf, trsm and getrf"),
    (b'custom_call_target="twice"', b'custom_call_target="__cudnn$conv"',
     "not a C identifier"),
])
def test_library_calls_we_cannot_make_are_refused(old, new, message):
    with pytest.raises(xlac.XlacError, match=message):
        import_hlo(HLO.replace(old, new))


def test_side_effecting_calls_are_refused():
    text = HLO.replace(b'backend_config="k=2"', b'backend_config="k=2", '
                       b'custom_call_has_side_effect=true')
    with pytest.raises(xlac.XlacError, match="has side effects"):
        import_hlo(text)


def test_the_cuda_target_refuses_custom_calls(tmp_path, capsys):
    path = tmp_path / "t.hlo"
    path.write_bytes(HLO)
    assert main([str(path), "-o", str(tmp_path / "t.o"), "--target", "cuda"]) == 1
    assert "the CUDA target runs no host functions" in capsys.readouterr().err


# --- ONNX ops of custom domains ---------------------------------------------------------

def fancy_model(with_value_info: bool = True):
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    f = helper.make_tensor_value_info("f", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("FancyOp", ["x"], ["f"], domain="com.example", alpha=0.5,
                              mode="fast", axes=[1, 2]),
             helper.make_node("Relu", ["f"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y], value_info=[f] if with_value_info else [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.example", 1)])


def fancy_op(x, opaque):
    import json
    config = json.loads(opaque)
    assert config == {"alpha": 0.5, "axes": [1, 2], "mode": "fast"}
    return x * config["alpha"] - 1


def test_an_onnx_custom_op_becomes_a_custom_call(tmp_path):
    result = xlac.compile(fancy_model(), tmp_path / "f.o",
                          custom_ops={"com.example.FancyOp": "fancy_op"})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    m = xlac.load(result.output, custom_calls={"fancy_op": fancy_op})
    np.testing.assert_array_equal(m(x)[0], np.maximum(x * 0.5 - 1, 0))


def test_the_command_line_maps_custom_ops(tmp_path, capsys):
    import onnx
    onnx.save(fancy_model(), tmp_path / "f.onnx")
    out = str(tmp_path / "f.o")
    assert main([str(tmp_path / "f.onnx"), "-o", out]) == 1
    assert "unsupported ONNX ops: com.example.FancyOp (node 'f')" in capsys.readouterr().err
    assert main([str(tmp_path / "f.onnx"), "-o", out,
                 "--custom-op", "com.example.FancyOp=fancy_op"]) == 0
    assert "void fancy_op(" in (tmp_path / "f.h").read_text()
    assert main([str(tmp_path / "f.onnx"), "-o", out, "--custom-op", "FancyOp"]) == 1
    assert "--custom-op takes DOMAIN.OP=FUNCTION, got 'FancyOp'" in capsys.readouterr().err


def test_a_custom_op_output_needs_its_shape_in_the_model(tmp_path):
    with pytest.raises(xlac.XlacError, match="output 'f' of custom op com.example.FancyOp "
                       r"\(node 'f'\) has no static shape: give its type and shape"):
        xlac.compile(fancy_model(with_value_info=False), tmp_path / "f.o",
                     custom_ops={"com.example.FancyOp": "fancy_op"})
    with pytest.raises(xlac.XlacError, match="custom_ops maps 'domain.OpType' to a C function"):
        xlac.compile(fancy_model(), tmp_path / "f.o",
                     custom_ops={"com.example.FancyOp": "not a symbol"})
