"""The CUDA target's kernels through NVIDIA's assembler, on machines without a GPU.

Every model of the benchmark (benchmarks/models.py: CNNs, depthwise convolutions, a BERT
encoder, MLPs, recurrent loops) and a few single ops are compiled for ``cuda`` at sm_80
and sm_90; ``ptxas`` (the ``nvidia-cuda-nvcc-cu12`` wheel of the test extra, or one on
the PATH) must accept the PTX with warnings as errors, and the host's launch table must
agree with the kernels' ``.param`` lists (a launch passing fewer arguments than the
kernel reads would read garbage on the GPU).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from xlac.backends import make_backend
from xlac.emitter import EmitOptions
from xlac.emitter.cuda.ptxas import assemble, compute_capability, driver_version_for, find_ptxas
from xlac.hlo import XlacError
from xlac.importers.onnx import import_onnx
from xlac.optimizer import optimize, plan_memory

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from models import MODELS  # noqa: E402

ARCHS = ("sm_80", "sm_90")
PTXAS = find_ptxas()


def cuda_artifact(model: onnx.ModelProto, arch: str, kinds=("asm",)):
    module = import_onnx(model)
    backend = make_backend("cuda", arch)
    optimize(module, backend)
    assignment = plan_memory(module, backend)
    return backend.emit(module, assignment, EmitOptions("model"), kinds)


def entry_params(ptx: str) -> dict[str, int]:
    """Kernel name -> the number of its .param entries."""
    found = {}
    for name, params in re.findall(r"\.entry (\w+)\(\s*(.*?)\)", ptx, re.S):
        found[name] = len(re.findall(r"\.param\b", params))
    return found


def check(model: onnx.ModelProto, arch: str) -> None:
    art = cuda_artifact(model, arch)
    ptx = art.assembly
    assert re.search(rf"^\.target {arch}\b", ptx, re.M)
    assert entry_params(ptx) == dict(art.launches)
    assemble(ptx, arch, PTXAS, ("--warning-as-error",))


def test_ptxas_is_installed():
    # The test extra installs it (nvidia-cuda-nvcc-cu12); without it nothing below runs.
    assert PTXAS is not None and PTXAS.is_file()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_benchmark_model_assembles(name, arch):
    check(MODELS[name](), arch)


def _one_op(op: str, shapes, out_shape, dtype=TensorProto.FLOAT, **attrs) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(f"x{k}", dtype, s) for k, s in enumerate(shapes)]
    out = helper.make_tensor_value_info("y", dtype, out_shape)
    node = helper.make_node(op, [i.name for i in inputs], ["y"], **attrs)
    graph = helper.make_graph([node], op.lower(), inputs, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


OPS = {
    "topk": lambda: _topk(),
    "argmax_int64": lambda: _argmax(),
    "softmax": lambda: _one_op("Softmax", [(3, 1000)], (3, 1000), axis=-1),
    "pow_f64": lambda: _one_op("Pow", [(5, 7), (5, 7)], (5, 7), dtype=TensorProto.DOUBLE),
    "reduce_prod_int32": lambda: _one_op("ReduceProd", [(4, 6)], (1, 1),
                                         dtype=TensorProto.INT32),
}


def _topk() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 50))
    k = numpy_helper.from_array(np.array([5], dtype=np.int64), "k")
    vals = helper.make_tensor_value_info("v", TensorProto.FLOAT, (3, 5))
    idx = helper.make_tensor_value_info("i", TensorProto.INT64, (3, 5))
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)
    graph = helper.make_graph([node], "topk", [x], [vals, idx], [k])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _argmax() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 37))
    y = helper.make_tensor_value_info("y", TensorProto.INT64, (4,))
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)
    graph = helper.make_graph([node], "argmax", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(OPS))
def test_op_assembles(name, arch):
    check(OPS[name](), arch)


def test_weights_stay_out_of_the_ptx():
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 64))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 64))
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm", [x], [y],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    art = cuda_artifact(model, "sm_80", kinds=("obj",))
    # No .global array in the PTX holds them: kernels read them through a parameter.
    assert ".global .align" not in art.device_code
    assert w.tobytes() in art.object_code


@pytest.mark.parametrize("ptx_version, driver", [("7.0", 11000), ("7.8", 11080),
                                                 ("8.0", 12000), ("8.8", 12090),
                                                 ("6.0", 9000)])
def test_driver_version_of_a_ptx_version(ptx_version, driver):
    assert driver_version_for(f"//\n.version {ptx_version}\n.target sm_80\n") == driver


def test_compute_capability_of_an_arch():
    assert compute_capability("sm_80") == 80
    assert compute_capability("sm_90a") == 90
    with pytest.raises(XlacError, match="unknown CUDA architecture"):
        compute_capability("compute_80")
