"""The CUDA target end to end without a GPU: objects compiled with ``cuda-emulated``
carry the same kernel IR compiled for this machine, which the stand-in driver
(fake_libcuda.c, named by XLAC_CUDA_DRIVER) runs block by block, each thread a fiber.

Every model of the benchmark runs against onnxruntime with the block's threads in
forward and in reverse order (a missing barrier passes in one order only); the host
path (``NAME_run_cuda``) and the device path (``NAME_run_device`` on device arrays) give
the same outputs; a C program links the object and xlac_cuda.c and runs it; every
driver failure comes back as its status, never a crash.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
import xlac.runtime_c
from xlac.hlo import XlacError

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))
from models import MODELS, graph_inputs  # noqa: E402


def compile_emulated(model: onnx.ModelProto, folder: Path, name: str = "model") -> Path:
    out = folder / f"{name}.o"
    xlac.compile(model, out, target="cuda-emulated")
    return out


def reference(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check_close(got, want, rtol=1e-4, atol=1e-5):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * scale)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_benchmark_model_matches_onnxruntime_in_both_thread_orders(name, driver, tmp_path,
                                                                   monkeypatch):
    model = MODELS[name]()
    feeds = graph_inputs(model, np.random.default_rng(0))
    want = reference(model, feeds)
    m = xlac.load(compile_emulated(model, tmp_path))
    assert isinstance(m, xlac.CudaModel)
    for order in ("forward", "reverse"):
        monkeypatch.setenv("XLAC_FAKE_CUDA_ORDER", order)
        check_close(m(*feeds.values()), want)


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _value(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def softmax_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((300, 1000))
                                .astype(np.float32), "w")
    return _model([helper.make_node("MatMul", ["x", "w"], ["t"]),
                   helper.make_node("Softmax", ["t"], ["y"], axis=-1),
                   helper.make_node("ReduceMax", ["t"], ["m"], keepdims=0)],
                  [_value("x", (3, 300))], [_value("y", (3, 1000)), _value("m", ())], [w])


def if_model() -> onnx.ModelProto:
    then = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["r"])], "then", [],
                             [_value("r", (4, 5))])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["r"])], "else", [],
                              [_value("r", (4, 5))])
    return _model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                   helper.make_node("Greater", ["s", "zero"], ["c"]),
                   helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                  [_value("x", (4, 5))], [_value("y", (4, 5))],
                  [numpy_helper.from_array(np.array(0, dtype=np.float32), "zero")])


def topk_model() -> onnx.ModelProto:
    k = numpy_helper.from_array(np.array([7], dtype=np.int64), "k")
    return _model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)],
                  [_value("x", (5, 300))],
                  [_value("v", (5, 7)), _value("i", (5, 7), TensorProto.INT64)], [k])


@pytest.mark.parametrize("make", [softmax_model, if_model, topk_model],
                         ids=lambda f: f.__name__)
def test_reductions_branches_and_routines(make, driver, tmp_path, monkeypatch):
    model = make()
    m = xlac.load(compile_emulated(model, tmp_path))
    rng = np.random.default_rng(2)
    for sign in (1, -1):       # both branches of the If
        feeds = {i.name: sign * np.abs(rng.standard_normal(
            [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32))
            for i in model.graph.input}
        want = reference(model, feeds)
        for order in ("forward", "reverse"):
            monkeypatch.setenv("XLAC_FAKE_CUDA_ORDER", order)
            check_close(m(*feeds.values()), want)


class DeviceArray:
    """A numpy array presented as device memory: the stand-in driver's device memory is
    host memory, so its address is a valid device address there."""

    def __init__(self, a: np.ndarray):
        self.a = a
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str,
                                         "data": (a.ctypes.data, False), "version": 3,
                                         "strides": None}


def test_run_device_takes_device_arrays_without_a_copy(driver, tmp_path):
    model = MODELS["lenet5"]()
    feeds = graph_inputs(model, np.random.default_rng(3))
    m = xlac.load(compile_emulated(model, tmp_path))
    (x,) = feeds.values()
    out = np.full(m.outputs[0].shape, np.nan, dtype=np.float32)
    raw = np.zeros(m.device_arena_size + 256, dtype=np.uint8)
    skip = (-raw.ctypes.data) % 256
    arena = raw[skip:skip + m.device_arena_size]
    m.run_device([DeviceArray(x)], [DeviceArray(out)], DeviceArray(arena))
    np.testing.assert_array_equal(out, m(x)[0])
    with pytest.raises(XlacError, match="must be a float32"):
        m.run_device([DeviceArray(x.astype(np.float64))], [DeviceArray(out)],
                     DeviceArray(arena))
    with pytest.raises(XlacError, match="device array"):
        m.run_device([x], [DeviceArray(out)], DeviceArray(arena))


def _small_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    return _model([helper.make_node("Add", ["x", "w"], ["t"]),
                   helper.make_node("Relu", ["t"], ["y"])],
                  [_value("x", (2, 3))], [_value("y", (2, 3))], [w])


@pytest.mark.parametrize("env, status, what", [
    ({"XLAC_CUDA_DRIVER": "/nonexistent/libcuda.so.1"}, 3, "cannot be loaded"),
    ({"XLAC_FAKE_CUDA_DEVICES": "0"}, 4, "no CUDA device"),
    ({"XLAC_FAKE_CUDA_FAIL": "cuInit=100"}, 4, "no CUDA device"),
    ({"XLAC_FAKE_CUDA_VERSION": "10020"}, 5, "driver is older"),
    ({"XLAC_FAKE_CUDA_FAIL": "cuMemAlloc_v2=2"}, 7, "out of CUDA device memory"),
    ({"XLAC_FAKE_CUDA_FAIL": "cuModuleGetFunction=500"}, 8, r"CUDA error 500"),
])
def test_driver_failures_at_init_are_statuses(env, status, what, driver, tmp_path,
                                              monkeypatch):
    obj = compile_emulated(_small_model(), tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(XlacError, match=f"status {status}: .*{what}"):
        xlac.load(obj)


def test_a_failed_launch_is_a_status(driver, tmp_path, monkeypatch):
    m = xlac.load(compile_emulated(_small_model(), tmp_path))
    x = np.ones((2, 3), dtype=np.float32)
    monkeypatch.setenv("XLAC_FAKE_CUDA_FAIL", "cuLaunchKernel=719")
    with pytest.raises(XlacError, match="status 8: .*CUDA error 719"):
        m(x)
    monkeypatch.delenv("XLAC_FAKE_CUDA_FAIL")


C_PROGRAM = r"""
#include <stdio.h>
#include "model.h"
int main(void) {
  model_cuda_ctx ctx;
  if (sizeof ctx != model_cuda_ctx_size()) { printf("ctx size\n"); return 2; }
  int s = model_cuda_init(&ctx, 0);
  if (s) { printf("init %d %s\n", s, xlac_status_string(s)); return 1; }
  float x[6] = {-4, -1, 0, 1, 2, 3}, y[6];
  const void *in[1] = {x};
  void *out[1] = {y};
  s = model_run_cuda(&ctx, in, out);
  model_cuda_release(&ctx);
  if (s) { printf("run %d %s\n", s, xlac_status_string(s)); return 1; }
  for (int i = 0; i < 6; i++) printf("%g ", y[i]);
  printf("\n");
  return 0;
}
"""


def test_a_c_program_links_the_object_and_runs_it(driver, tmp_path):
    obj = compile_emulated(_small_model(), tmp_path)
    (tmp_path / "main.c").write_text(C_PROGRAM)
    runtime = Path(xlac.runtime_c.__file__).parent
    exe = tmp_path / "main"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic",
                    f"-I{runtime}", f"-I{tmp_path}", str(tmp_path / "main.c"), str(obj),
                    str(runtime / "xlac_cuda.c"), str(runtime / "xlac_runtime.c"), "-ldl",
                    "-o", str(exe)], check=True)
    done = subprocess.run([str(exe)], capture_output=True, text=True,
                          env={**os.environ, "XLAC_CUDA_DRIVER": str(driver)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert [float(v) for v in done.stdout.split()] == [0, 0, 2, 4, 6, 8]
    # Without a driver the same program gets a status, not a crash.
    done = subprocess.run([str(exe)], capture_output=True, text=True,
                          env={**os.environ, "XLAC_CUDA_DRIVER": str(tmp_path / "none.so")})
    assert done.returncode == 1 and done.stdout.startswith("init 3 ")


def test_onnx_backend_runs_on_the_cuda_device(driver):
    import xlac.backend
    model = _small_model()
    assert xlac.backend.supports_device("CUDA") and not xlac.backend.supports_device("FPGA")
    rep = xlac.backend.prepare(model, "CUDA:0", target="cuda-emulated")
    x = np.linspace(-4, 3, 6, dtype=np.float32).reshape(2, 3)
    (y,) = rep.run([x])
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(y, np.maximum(x + w, np.float32(0)))


def test_run_command_compiles_for_cuda(driver, tmp_path, capsys):
    from xlac.main import main
    path = tmp_path / "small.onnx"
    onnx.save(_small_model(), path)
    assert main(["run", str(path), "--target", "cuda-emulated"]) == 0
    assert "output y: float32[2, 3]" in capsys.readouterr().out
    obj = compile_emulated(_small_model(), tmp_path)
    assert main(["run", str(obj), "--target", "cuda"]) == 1
    assert "--target apply when compiling" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["ds_cnn", "resnet8"])
def test_int8_models_match_the_host_build_bit_for_bit(name, driver, tmp_path):
    # Integer arithmetic: the GPU's kernels must give the host build's bits.
    sys.path.insert(0, str(HERE.parent))
    from quantized_models import host_outputs, quantized
    model = quantized(name + "_int8")
    feeds = graph_inputs(model, np.random.default_rng(4))
    want = host_outputs(model, list(feeds.values()), tmp_path)
    got = xlac.load(compile_emulated(model, tmp_path, "cuda_model"))(*feeds.values())
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
