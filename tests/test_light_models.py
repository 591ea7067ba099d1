"""The onnx package's nine light CNNs, compiled by xlac and run through xlac.load.

Each model is checked twice:

* as shipped (weights are ConstantOfShape fills), against the output stored beside
  it, on the input the onnx backend runner makes for these models
  (``onnx.backend.test.runner.Runner.generate_dummy_data(random=False)``);
* with every weight replaced by seeded random values of a sensible scale, against
  onnxruntime, on the logits before the final softmax (an extra graph output) as
  well as on the model's own output. Constant fills hide wrong indexing (every
  weight is the same); random weights do not.

Per model the compile time, the arena against the naive sum of intermediate buffers
and the largest errors are printed at the end of the module and written to
``build/light_models.json``. A model's two compiles happen in one module-scoped
fixture that keeps only the outputs, so at most one model (VGG-19 holds 550 MB of
weights) is in memory at a time.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import xlac

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
NAMES = sorted(p.name[len("light_"):-len(".onnx")] for p in LIGHT_DIR.glob("light_*.onnx"))
RECORD = Path(__file__).resolve().parents[1] / "build" / "light_models.json"

# Squeezenet's stored logits reach ~1e10 with many classes tied, so its stored
# softmax depends on the f32 summation order; its logits are compared with
# onnxruntime instead (as tests/test_importer_onnx.py does).
LOGITS_ONLY = {"squeezenet"}
# Ops that only move a weight on its way to the op that uses it.
PASS_THROUGH = {"Unsqueeze", "Reshape", "Identity"}
# A batch-norm scale feeding a residual sum is damped, as in Fixup / zero-init-gamma
# training, so that activations do not double at every residual block.
RESIDUAL_SCALE = 0.5
# Ops after which a layer's output goes on without a nonlinearity.
LINEAR_USERS = {"Sum", "Conv", "Gemm", "Softmax"}
RTOL = 1e-4


def dummy_input(model: onnx.ModelProto, random: bool) -> np.ndarray:
    """The onnx backend runner's generate_dummy_data for the model's one real input."""
    inits = {i.name for i in model.graph.initializer}
    (x,) = [i for i in model.graph.input if i.name not in inits]
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                  for d in x.type.tensor_type.shape.dim)
    if random:
        return np.random.default_rng(seed=0).random(shape, np.float32)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def expose_logits(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with the input of a final Softmax added as a second graph output."""
    model = onnx.shape_inference.infer_shapes(model)
    last = model.graph.node[-1]
    if last.op_type == "Softmax":
        model.graph.output.append(
            next(v for v in model.graph.value_info if v.name == last.input[0]))
    return model


# -- random weights ---------------------------------------------------------------------

def _users(graph) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    users: dict[str, list] = {}
    for n in graph.node:
        for k, name in enumerate(n.input):
            users.setdefault(name, []).append((n, k))
    return users


def _weight_use(name, users) -> tuple[onnx.NodeProto, int] | None:
    """The node and input slot that consume a weight, looking through PASS_THROUGH ops."""
    uses, todo = [], [name]
    while todo:
        for n, k in users.get(todo.pop(), []):
            if n.op_type in PASS_THROUGH and k == 0:
                todo.append(n.output[0])
            else:
                uses.append((n, k))
    assert len(uses) <= 1, f"weight {name} has several uses: {uses}"
    return uses[0] if uses else None


def _next_ops(node, users) -> set[str]:
    """The op types reading ``node``'s output, looking through a batch norm."""
    nxt = [n for n, _ in users.get(node.output[0], [])]
    if len(nxt) == 1 and nxt[0].op_type == "BatchNormalization":
        nxt = [n for n, _ in users.get(nxt[0].output[0], [])]
    return {n.op_type for n in nxt}


def _random_weight(rng, shape, node, slot, users) -> np.ndarray:
    normal = rng.standard_normal(shape)
    op = node.op_type
    if (op, slot) in (("Conv", 1), ("Gemm", 1)):
        if op == "Conv":
            fan_in = int(np.prod(shape[1:]))
        else:
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            fan_in = shape[1] if trans_b else shape[0]
        # He: variance 2 / fan-in where a ReLU follows (it halves the variance),
        # 1 / fan-in where the output goes on linearly (or is the model's output).
        gain = 1.0 if _next_ops(node, users) <= LINEAR_USERS else 2.0
        return normal * np.sqrt(gain / fan_in)
    if (op, slot) == ("BatchNormalization", 1) or (op, slot) == ("Mul", 1):  # scales ~ 1
        damp = RESIDUAL_SCALE if "Sum" in {n.op_type for n, _ in users.get(node.output[0], [])} \
            else 1.0
        return damp * (1 + 0.1 * normal)
    if (op, slot) == ("BatchNormalization", 4):                              # variance ~ 1
        return rng.uniform(0.5, 1.5, shape)
    if (op, slot) in (("Conv", 2), ("Gemm", 2), ("BatchNormalization", 2),   # biases, means
                      ("BatchNormalization", 3), ("Add", 1)):
        return 0.1 * normal
    raise AssertionError(f"no rule for a weight used as input {slot} of {op}")


def randomize_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy of ``model`` whose float weights (initializers and ConstantOfShape fills)
    are seeded random initializers; the fills' shape tensors are dropped."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph, rng = model.graph, np.random.default_rng(seed)
    users = _users(graph)
    inits = {i.name: i for i in graph.initializer}
    shapes = {i.name: tuple(i.dims) for i in graph.initializer
              if i.data_type == onnx.TensorProto.FLOAT}
    fills = {n.output[0]: n for n in graph.node if n.op_type == "ConstantOfShape"}
    for out, n in fills.items():
        shapes[out] = tuple(int(d) for d in numpy_helper.to_array(inits[n.input[0]]))
    weights, dropped = {}, set()
    for name, shape in shapes.items():
        use = _weight_use(name, users)
        if use is None:
            continue
        weights[name] = numpy_helper.from_array(
            _random_weight(rng, shape, *use, users).astype(np.float32), name)
        if name in fills:
            dropped.add(fills[name].input[0])
    nodes = [n for n in graph.node if n.output[0] not in weights]
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [i for i in graph.initializer if i.name not in weights and i.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(kept + list(weights.values()))
    graph_inputs = [i for i in graph.input if i.name not in dropped and i.name not in weights]
    if model.ir_version < 4:             # before IR 4 every initializer is a graph input too
        graph_inputs += [onnx.helper.make_tensor_value_info(w.name, w.data_type, w.dims)
                         for w in weights.values()]
    del graph.input[:]
    graph.input.extend(graph_inputs)
    return model


# -- running ---------------------------------------------------------------------------

def run_onnxruntime(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3          # the shipped models carry unused initializers
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


@dataclass
class Compiled:
    outputs: list[np.ndarray]
    compile_s: float
    arena_bytes: int
    naive_bytes: int
    lower_bound_bytes: int
    memory_peak_bytes: int       # the peak of --report-memory's live bytes


def compile_and_run(model, folder: Path, name: str, x: np.ndarray) -> Compiled:
    start = time.perf_counter()
    result = xlac.compile(model, folder / f"{name}.o", name=name, report=True)
    seconds = time.perf_counter() - start
    outputs = xlac.load(result.output)(x)
    report = result.report
    return Compiled(outputs, seconds, report["arena_bytes"], report["naive_activation_bytes"],
                    report["lower_bound_bytes"], report["memory"]["peak_bytes"])


def max_errors(got, want) -> dict:
    err = float(np.max(np.abs(got - want)))
    return {"max_abs_error": err, "max_abs_value": float(np.max(np.abs(want)))}


@dataclass
class LightResult:
    name: str
    stored: Compiled
    stored_expected: list[np.ndarray]       # stored output, or onnxruntime's logits
    random: Compiled
    random_expected: list[np.ndarray]       # onnxruntime: model output (, logits)


@pytest.fixture(scope="module")
def records():
    table: dict[str, dict] = {}
    yield table
    if not table:
        return
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(table, indent=2) + "\n")
    print(f"\nlight models ({RECORD}):")
    print(f"{'model':14} {'compile s':>9} {'arena KiB':>10} {'naive KiB':>10} "
          f"{'shipped err':>11} {'logits err':>10} {'|logits|':>9}")
    for name, r in table.items():
        print(f"{name:14} {r['compile_s']['random_weights']:9.1f} {r['arena_bytes'] / 1024:10.0f} "
              f"{r['naive_bytes'] / 1024:10.0f} {r['shipped']['max_abs_error']:11.2e} "
              f"{r['random_logits']['max_abs_error']:10.2e} "
              f"{r['random_logits']['max_abs_value']:9.1f}")


@pytest.fixture(scope="module", params=NAMES)
def light(request, records, tmp_path_factory) -> LightResult:
    name = request.param
    folder = tmp_path_factory.mktemp(name)
    path = LIGHT_DIR / f"light_{name}.onnx"
    model = onnx.load(path)

    x = dummy_input(model, random=False)
    if name in LOGITS_ONLY:
        shipped = expose_logits(model)
        stored = compile_and_run(shipped, folder, "stored", x)
        stored.outputs = stored.outputs[1:]
        stored_expected = run_onnxruntime(shipped, x)[1:]
    else:
        stored = compile_and_run(model, folder, "stored", x)
        stored_expected = [numpy_helper.to_array(onnx.load_tensor(
            str(path)[:-len(".onnx")] + "_output_0.pb"))]

    rand_model = expose_logits(randomize_weights(model))
    del model
    x = dummy_input(rand_model, random=True)
    rand = compile_and_run(rand_model, folder, "random", x)
    rand_expected = run_onnxruntime(rand_model, x)
    del rand_model

    result = LightResult(name, stored, stored_expected, rand, rand_expected)
    records[name] = {
        "compile_s": {"shipped_weights": round(stored.compile_s, 2),
                      "random_weights": round(rand.compile_s, 2)},
        "arena_bytes": stored.arena_bytes, "naive_bytes": stored.naive_bytes,
        "lower_bound_bytes": stored.lower_bound_bytes,
        "shipped": max_errors(stored.outputs[0], stored_expected[0]),
        "random_output": max_errors(rand.outputs[0], rand_expected[0]),
        "random_logits": max_errors(rand.outputs[-1], rand_expected[-1]),
    }
    return result


def _assert_close(got, want):
    # Summation order differs between the two, and the error of a sum grows with the
    # size of its terms, not of the result: scale the absolute tolerance with the data.
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=RTOL,
                               atol=1e-5 * max(1.0, float(np.max(np.abs(want)))))


def test_shipped_weights_match_stored_output(light):
    for got, want in zip(light.stored.outputs, light.stored_expected, strict=True):
        _assert_close(got, want)


def test_random_weights_match_onnxruntime(light):
    """The model's output and, where it ends in a softmax, the logits before it."""
    for got, want in zip(light.random.outputs, light.random_expected, strict=True):
        _assert_close(got, want)


def test_random_logits_are_not_degenerate(light):
    """The random weights give spread-out logits, so the comparison above means something."""
    logits = light.random_expected[-1]
    assert 1e-2 < float(np.std(logits)) < 1e3


def test_arena_reuses_buffers(light):
    c = light.stored
    assert c.lower_bound_bytes <= c.arena_bytes < c.naive_bytes
    # The memory report counts the same bytes live as the heap simulation (in-place
    # results, concatenation slices and kernel scratch included).
    assert c.memory_peak_bytes == c.lower_bound_bytes
    assert c.arena_bytes == light.random.arena_bytes      # the weights do not change the plan
