"""A table of small single-op (or few-op) ONNX models with inputs, for tests.

Each ``OpCase`` has a name, ``build()`` -> onnx.ModelProto (outputs typed by
ONNX shape inference) and ``inputs``: one array per graph input, in graph
order. The importer tests evaluate the imported HLO against onnxruntime;
end-to-end tests can run the same cases through the compiled object.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np
import onnx
from onnx import helper, numpy_helper

_RNG = np.random.default_rng(20240607)


@dataclass(frozen=True)
class OpCase:
    name: str
    build: Callable[[], onnx.ModelProto]
    inputs: tuple[np.ndarray, ...]
    rtol: float = 1e-5
    atol: float = 1e-6
    # An ONNX model of the same inputs and outputs for onnxruntime to run in the case's
    # place, where it has no CPU kernel for the op (com.microsoft's BiasAdd, BiasSoftmax,
    # NhwcConv): the op's definition in standard ops.
    reference: Callable[[], onnx.ModelProto] | None = None

    def __repr__(self) -> str:
        return self.name

    def oracle(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """The model onnxruntime runs for this case, given the case's ``model``."""
        return self.reference() if self.reference else model


def make_model(nodes, inputs: dict, outputs=("y",), inits: dict | None = None,
               opset: int | dict = 13) -> onnx.ModelProto:
    """A model over ``nodes``; graph inputs typed from the arrays in ``inputs``.

    An output is a name (typed by ONNX shape inference) or (name, dtype, dims)
    where inference cannot tell. ``opset`` is the default domain's version, or a dict
    of versions by domain.
    """
    vis = [_value_info(n, a.dtype, a.shape) for n, a in inputs.items()]
    outs = [helper.make_empty_tensor_value_info(o) if isinstance(o, str) else _value_info(*o)
            for o in outputs]
    graph = helper.make_graph(
        nodes, "case", vis, outs,
        [numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()])
    opsets = opset if isinstance(opset, dict) else {"": opset}
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                    for d, v in opsets.items()])
    model.ir_version = min(model.ir_version, 10)    # what onnxruntime reads
    return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)


def _value_info(name, dtype, dims):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                         dims)


def f32(*shape, low=None, high=None):
    if low is not None:
        return _RNG.uniform(low, high, shape).astype(np.float32)
    return _RNG.standard_normal(shape).astype(np.float32)


def i64(*shape, low=-5, high=5):
    return _RNG.integers(low, high, shape).astype(np.int64)


def boolean(*shape):
    return _RNG.random(shape) < 0.5


CASES: list[OpCase] = []


def case(name, nodes, inputs: dict, outputs=("y",), inits=None, opset=13,
         rtol=1e-5, atol=1e-6, reference=None, reference_opset=13):
    """``reference``: the nodes of OpCase.reference, over the same inputs and weights."""
    nodes = nodes if isinstance(nodes, list) else [nodes]
    ref = reference and (lambda: make_model(reference, inputs, [o if isinstance(o, str)
                                                                else o[0] for o in outputs],
                                            inits, reference_opset))
    CASES.append(OpCase(name, lambda: make_model(nodes, inputs, outputs, inits, opset),
                        tuple(inputs.values()), rtol, atol, ref))


def node(op, ins, outs=("y",), name=None, **attrs):
    return helper.make_node(op, list(ins), list(outs), name=name or f"{op.lower()}_0", **attrs)


# -- element-wise unary -------------------------------------------------------------
_X = f32(2, 3, 4)
for _op, _x, _tol in [
        ("Abs", _X, 1e-5), ("Neg", _X, 1e-5), ("Sqrt", f32(2, 3, 4, low=0.1, high=4), 1e-5),
        ("Exp", _X, 1e-4), ("Log", f32(2, 3, 4, low=0.1, high=4), 1e-4),
        ("Sigmoid", _X, 1e-4), ("Tanh", _X, 1e-4), ("Erf", _X, 1e-4), ("Floor", _X * 3, 1e-5),
        ("Ceil", _X * 3, 1e-5), ("Sign", np.array([-2, 0, 3.5], np.float32), 1e-5),
        ("Round", np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.2, 7.7], np.float32), 1e-5),
        ("Reciprocal", f32(2, 3, 4, low=0.5, high=3), 1e-5), ("Relu", _X, 1e-5),
        ("Sin", _X, 1e-4), ("Cos", _X, 1e-4), ("Tan", f32(2, 3, low=-1.2, high=1.2), 1e-4),
        ("Softplus", _X * 10, 1e-4), ("Not", boolean(3, 4), 1e-5)]:
    case(_op, node(_op, ["x"]), {"x": _x}, rtol=_tol)

for _op, _x in [("Acos", f32(2, 3, 4, low=-1, high=1)), ("Asin", f32(2, 3, 4, low=-1, high=1)),
               ("Atan", _X * 3), ("Acosh", f32(2, 3, 4, low=1, high=20)), ("Asinh", _X * 5),
               ("Atanh", f32(2, 3, 4, low=-0.99, high=0.99)), ("Cosh", _X * 4),
               ("Sinh", _X * 4), ("Softsign", _X * 3)]:
    case(_op, node(_op, ["x"]), {"x": _x}, rtol=1e-4)
case("LeakyRelu", node("LeakyRelu", ["x"], alpha=0.2), {"x": _X})
case("Elu", node("Elu", ["x"], alpha=0.5), {"x": _X}, rtol=1e-4)
case("Selu", node("Selu", ["x"]), {"x": _X}, rtol=1e-4)
case("HardSigmoid", node("HardSigmoid", ["x"], alpha=0.3, beta=0.4), {"x": _X * 3})
case("PRelu", node("PRelu", ["x", "s"]), {"x": f32(2, 3, 4, 4)}, inits={"s": f32(3, 1, 1)})
case("Celu", node("Celu", ["x"], alpha=0.7), {"x": _X * 3}, rtol=1e-4)
case("Gelu_none", node("Gelu", ["x"]), {"x": _X * 3}, opset=20, rtol=1e-4, atol=1e-5)
case("Gelu_tanh", node("Gelu", ["x"], approximate="tanh"), {"x": _X * 3}, opset=20, rtol=1e-4,
     atol=1e-5)
case("Gelu_f16", node("Gelu", ["x"]), {"x": (_X * 3).astype(np.float16)}, opset=20, rtol=2e-3,
     atol=2e-3)
case("HardSwish", node("HardSwish", ["x"]), {"x": _X * 5}, opset=14)
case("Mish", node("Mish", ["x"]), {"x": _X * 5}, opset=18, rtol=1e-4, atol=1e-6)
case("ThresholdedRelu", node("ThresholdedRelu", ["x"], alpha=0.3), {"x": _X}, opset=10)
case("Shrink", node("Shrink", ["x"], lambd=0.4, bias=0.1), {"x": _X}, opset=9)
case("Shrink_int8", node("Shrink", ["x"], lambd=2.0, bias=1.0),
     {"x": np.arange(-5, 6, dtype=np.int8)}, opset=9)
case("Swish", node("Swish", ["x"], alpha=0.6), {"x": _X * 4}, opset=24, rtol=1e-4)
case("Clip_v6_attrs", node("Clip", ["x"], min=-0.5, max=0.7), {"x": _X}, opset=6)
case("Clip_v11_min_only", node("Clip", ["x", "lo"]), {"x": _X},
     inits={"lo": np.float32(-0.3)}, opset=11)
case("Clip_v13_both", node("Clip", ["x", "lo", "hi"]), {"x": _X, "lo": np.array(-0.2, np.float32),
                                                       "hi": np.array(0.6, np.float32)})
case("Clip_no_bounds", node("Clip", ["x"]), {"x": _X})

# -- element-wise binary, broadcasting ----------------------------------------------------
for _op in ("Add", "Sub", "Mul", "Div"):
    case(f"{_op}_broadcast", node(_op, ["a", "b"]), {"a": f32(2, 3, 4), "b": f32(3, 1)})
case("Add_int64", node("Add", ["a", "b"]), {"a": i64(2, 3), "b": i64(3)})
case("Div_scalar", node("Div", ["a", "b"]), {"a": f32(2, 3)}, inits={"b": np.float32(4.0)})
case("Pow", node("Pow", ["a", "b"]), {"a": f32(3, 4, low=0.5, high=2), "b": f32(4)},
     rtol=1e-4)
case("Pow_int_exponent", node("Pow", ["a", "b"]), {"a": f32(3, 4)},
     inits={"b": np.array(3, np.int64)}, rtol=1e-4)
for _op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
    case(_op, node(_op, ["a", "b"]), {"a": i64(3, 4, low=0, high=3), "b": i64(4, low=0,
                                                                             high=3)})
case("Less_float", node("Less", ["a", "b"]), {"a": f32(2, 3), "b": f32(2, 1)})
for _op in ("And", "Or", "Xor"):
    case(_op, node(_op, ["a", "b"]), {"a": boolean(3, 4), "b": boolean(1, 4)})
case("Where", node("Where", ["c", "a", "b"]), {"c": boolean(3, 1), "a": f32(3, 4),
                                               "b": f32(4)})
for _op in ("Max", "Min", "Sum", "Mean"):
    case(f"{_op}_variadic", node(_op, ["a", "b", "c"]),
         {"a": f32(2, 3, 4), "b": f32(3, 4), "c": f32(1, 4)})
case("Sum_single", node("Sum", ["a"]), {"a": f32(2, 3)})
case("Cast_to_int32", node("Cast", ["x"], to=onnx.TensorProto.INT32), {"x": _X * 4})
case("Cast_to_bool", node("Cast", ["x"], to=onnx.TensorProto.BOOL),
     {"x": np.array([0, 1.5, -2, 0], np.float32)})
case("Cast_int64_to_float", node("Cast", ["x"], to=onnx.TensorProto.FLOAT), {"x": i64(5)})
case("Add_f16", node("Add", ["a", "b"]), {"a": f32(3, 4).astype(np.float16),
                                          "b": f32(4).astype(np.float16)})
case("Less_f16", node("Less", ["a", "b"]), {"a": f32(3, 4).astype(np.float16),
                                            "b": f32(4).astype(np.float16)})
case("IsNaN", node("IsNaN", ["x"]), {"x": np.array([1, np.nan, -np.inf], np.float32)})
for _attrs in ({}, {"detect_positive": 0}, {"detect_negative": 0}):
    case("IsInf" + "".join(f"_{k}0" for k in _attrs), node("IsInf", ["x"], **_attrs),
         {"x": np.array([1, np.nan, -np.inf, np.inf, 0], np.float32)}, opset=20)
_INTS = _RNG.integers(-100, 100, (3, 4)).astype(np.int32)
for _op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
    case(f"{_op}_int32", node(_op, ["a", "b"]), {"a": _INTS, "b": _INTS[::-1].copy()}, opset=18)
    case(f"{_op}_uint8_broadcast", node(_op, ["a", "b"]),
         {"a": _INTS.astype(np.uint8), "b": np.array([3, 250, 17, 128], np.uint8)}, opset=18)
case("BitwiseNot_int16", node("BitwiseNot", ["x"]), {"x": _INTS.astype(np.int16)}, opset=18)
case("BitwiseNot_uint8", node("BitwiseNot", ["x"]), {"x": _INTS.astype(np.uint8)}, opset=18)
for _dir in ("LEFT", "RIGHT"):
    case(f"BitShift_{_dir}_uint8", node("BitShift", ["a", "b"], direction=_dir),
         {"a": np.array([1, 255, 16, 7], np.uint8), "b": np.array([1, 3, 4, 7], np.uint8)},
         opset=11)
    case(f"BitShift_{_dir}_uint32", node("BitShift", ["a", "b"], direction=_dir),
         {"a": np.array([1, 2**31 + 5, 16, 7], np.uint32), "b": np.array([31], np.uint32)},
         opset=11)
_DIVIDEND = np.array([-7, 7, -7, 7, 5, -5, 0, 9], np.int32)
_DIVISOR = np.array([3, -3, -3, 3, 5, 2, -4, 4], np.int32)
for _fmod in (0, 1):
    case(f"Mod_int32_fmod{_fmod}", node("Mod", ["a", "b"], fmod=_fmod),
         {"a": _DIVIDEND, "b": _DIVISOR})
    # Before opset 28, fmod=0 was defined for integers only.
    case(f"Mod_float_fmod{_fmod}", node("Mod", ["a", "b"], fmod=_fmod),
         {"a": (_DIVIDEND * 1.25).astype(np.float32), "b": (_DIVISOR * 0.75).astype(np.float32)},
         opset=13 if _fmod else 28)
case("Mod_uint8", node("Mod", ["a", "b"]), {"a": np.array([7, 200, 3], np.uint8),
                                            "b": np.array([3, 7, 5], np.uint8)})
case("BitCast_float_to_int32", node("BitCast", ["x"], to=onnx.TensorProto.INT32),
     {"x": np.array([1, -2.5, np.inf, 0], np.float32)}, opset=26)
# The narrow types, through a Cast there and back (onnxruntime's Python API does not
# take or give them). Float -> 4- and 2-bit integers: onnxruntime rounds where ONNX's
# reference truncates, so the inputs are whole numbers.
_NARROW_IN = np.array([0.3, -1e6, 500, np.nan, -np.inf, 1e-7, 17.3, -9.6, 2.5, 0.0234375,
                       -0.0, 1e-3, 240.5], np.float32)
_T = onnx.TensorProto
for _to, _opset in [("FLOAT8E4M3FN", 21), ("FLOAT8E4M3FNUZ", 21), ("FLOAT8E5M2", 21),
                    ("FLOAT8E5M2FNUZ", 21), ("BFLOAT16", 21), ("FLOAT16", 21),
                    ("INT4", 21), ("UINT4", 21), ("INT2", 25), ("UINT2", 25),
                    ("FLOAT8E8M0", 25)]:
    _x = _NARROW_IN
    if "INT" in _to:
        _x = np.array([-20, -9, -8, -3, -1, 0, 1, 2, 3, 7, 8, 15, 16, 300], np.float32)
    elif _to == "FLOAT8E8M0":                 # negative values are undefined
        _x = np.abs(_NARROW_IN[np.isfinite(_NARROW_IN)]) + np.float32(2 ** -30)
    for _sat in ((0, 1) if "FLOAT8E" in _to and _to != "FLOAT8E8M0" else (None,)):
        _attrs = {} if _sat is None else {"saturate": _sat}
        case(f"Cast_{_to}_round_trip" + ("" if _sat is None else f"_saturate{_sat}"),
             [node("Cast", ["x"], ["t"], name="there", to=getattr(_T, _to), **_attrs),
              node("Cast", ["t"], ["y"], name="back", to=_T.FLOAT)], {"x": _x}, opset=_opset)
# Packed 4- and 2-bit initializers (two or four to a byte in the file) are unpacked.
for _t, _opset in [(ml_dtypes.int4, 21), (ml_dtypes.uint4, 21), (ml_dtypes.int2, 25),
                   (ml_dtypes.uint2, 25)]:
    _w = _RNG.integers(0, 4, (3, 5)).astype(_t)
    case(f"{np.dtype(_t).name}_initializer", [node("Cast", ["w"], ["wf"], to=_T.FLOAT),
                                             node("Mul", ["x", "wf"])],
         {"x": f32(3, 5)}, inits={"w": _w}, opset=_opset)
case("CastLike_float_to_float16", node("CastLike", ["x", "like"]),
     {"x": _NARROW_IN}, inits={"like": np.zeros(1, np.float16)}, opset=21)

# -- Gemm / MatMul ----------------------------------------------------------------------
case("Gemm_plain", node("Gemm", ["a", "b", "c"]), {"a": f32(3, 5), "b": f32(5, 4),
                                                   "c": f32(3, 4)})
case("Gemm_transA_transB_alpha_beta",
     node("Gemm", ["a", "b", "c"], transA=1, transB=1, alpha=0.5, beta=2.0),
     {"a": f32(5, 3), "b": f32(4, 5)}, inits={"c": f32(4)})
case("Gemm_C_column", node("Gemm", ["a", "b", "c"], transB=1),
     {"a": f32(3, 5), "b": f32(4, 5), "c": f32(3, 1)})
case("Gemm_C_scalar", node("Gemm", ["a", "b", "c"]), {"a": f32(3, 5), "b": f32(5, 4)},
     inits={"c": np.float32(1.5)})
case("Gemm_no_C", node("Gemm", ["a", "b"], alpha=2.0), {"a": f32(3, 5), "b": f32(5, 4)})
case("Gemm_opset9", node("Gemm", ["a", "b", "c"], transB=1), {"a": f32(2, 5)},
     inits={"b": f32(4, 5), "c": f32(4)}, opset=9)
for _name, _a, _b in [("2d", (3, 4), (4, 5)), ("batched", (2, 3, 4), (2, 4, 5)),
                      ("broadcast_batch", (2, 1, 3, 4), (5, 4, 6)),
                      ("nd_by_2d", (2, 3, 4), (4, 5)), ("vec_by_mat", (4,), (4, 5)),
                      ("mat_by_vec", (2, 3, 4), (4,)), ("vec_by_vec", (4,), (4,))]:
    case(f"MatMul_{_name}", node("MatMul", ["a", "b"]), {"a": f32(*_a), "b": f32(*_b)},
         rtol=1e-4, atol=1e-5)

# -- Conv ----------------------------------------------------------------------------
_IMG = f32(2, 4, 7, 7)
for _name, _w, _attrs in [
        ("pads", (6, 4, 3, 3), dict(pads=[1, 1, 1, 1])),
        ("asymmetric_pads_stride", (6, 4, 3, 3), dict(pads=[0, 1, 2, 1], strides=[2, 2])),
        ("dilations", (6, 4, 3, 3), dict(dilations=[2, 2], pads=[2, 1, 2, 1])),
        ("group2", (6, 2, 3, 3), dict(group=2)),
        ("depthwise", (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1])),
        ("same_upper_stride2", (6, 4, 4, 4), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
        ("same_lower_stride2", (6, 4, 4, 4), dict(auto_pad="SAME_LOWER", strides=[2, 2])),
        ("valid", (6, 4, 2, 3), dict(auto_pad="VALID", kernel_shape=[2, 3]))]:
    case(f"Conv_{_name}", node("Conv", ["x", "w", "b"], **_attrs), {"x": _IMG},
         inits={"w": f32(*_w), "b": f32(_w[0])}, rtol=1e-4, atol=1e-5)
case("Conv_no_bias", node("Conv", ["x", "w"]), {"x": _IMG}, inits={"w": f32(3, 4, 1, 1)},
     rtol=1e-4, atol=1e-5)
case("Conv_1d", node("Conv", ["x", "w"], strides=[2], pads=[1, 2]), {"x": f32(2, 3, 11)},
     inits={"w": f32(5, 3, 3)}, rtol=1e-4, atol=1e-5)
case("Conv_3d", node("Conv", ["x", "w", "b"], pads=[1, 0, 1, 1, 0, 1]),
     {"x": f32(1, 2, 4, 5, 4)}, inits={"w": f32(3, 2, 3, 2, 3), "b": f32(3)},
     rtol=1e-4, atol=1e-5)

# -- pools ---------------------------------------------------------------------------
_POOL_X = f32(2, 3, 7, 8)
for _name, _attrs in [
        ("basic", dict(kernel_shape=[2, 2])),
        ("strides_pads", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        ("ceil_mode", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
        ("ceil_mode_pads", dict(kernel_shape=[2, 2], strides=[2, 3], pads=[1, 0, 1, 1],
                                ceil_mode=1)),
        ("same_upper", dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER")),
        ("same_lower", dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_LOWER"))]:
    case(f"MaxPool_{_name}", node("MaxPool", ["x"], **_attrs), {"x": _POOL_X})
    for _inc in (0, 1):
        case(f"AveragePool_{_name}_count_include_pad{_inc}",
             node("AveragePool", ["x"], count_include_pad=_inc, **_attrs), {"x": _POOL_X})
case("MaxPool_dilations", node("MaxPool", ["x"], kernel_shape=[2, 2], dilations=[2, 2]),
     {"x": _POOL_X})
case("MaxPool_1d", node("MaxPool", ["x"], kernel_shape=[3], strides=[2]), {"x": f32(2, 3, 9)})
case("MaxPool_int8", node("MaxPool", ["x"], kernel_shape=[2, 2], pads=[1, 1, 1, 1]),
     {"x": _RNG.integers(-100, 100, (1, 2, 5, 5)).astype(np.int8)})
case("AveragePool_opset9_light_models", node("AveragePool", ["x"], kernel_shape=[3, 3],
                                             strides=[1, 1], pads=[1, 1, 1, 1]),
     {"x": _POOL_X}, opset=9)
case("GlobalAveragePool", node("GlobalAveragePool", ["x"]), {"x": _POOL_X})
case("GlobalMaxPool", node("GlobalMaxPool", ["x"]), {"x": _POOL_X})

# -- normalization, softmax, dropout ------------------------------------------------------
_BN = {"s": f32(3), "b": f32(3), "m": f32(3), "v": f32(3, low=0.5, high=2)}
case("BatchNormalization_opset9", node("BatchNormalization", ["x", "s", "b", "m", "v"],
                                       epsilon=1e-3), {"x": _POOL_X}, inits=_BN, opset=9,
     rtol=1e-4, atol=1e-5)
case("BatchNormalization_opset15", node("BatchNormalization", ["x", "s", "b", "m", "v"]),
     {"x": _POOL_X}, inits=_BN, opset=15, rtol=1e-4, atol=1e-5)
case("LRN_size3", node("LRN", ["x"], size=3, alpha=1e-3, beta=0.75, bias=2.0),
     {"x": f32(2, 5, 3, 3)}, rtol=1e-4)
case("LRN_size5", node("LRN", ["x"], size=5), {"x": f32(1, 6, 2, 3)}, rtol=1e-4)
_SM = f32(2, 3, 4)
for _op in ("Softmax", "LogSoftmax"):
    case(f"{_op}_v11_axis1_coerced", node(_op, ["x"], axis=1), {"x": _SM}, opset=11,
         rtol=1e-4)
    case(f"{_op}_v11_default", node(_op, ["x"]), {"x": _SM}, opset=11, rtol=1e-4)
    case(f"{_op}_v13_axis1", node(_op, ["x"], axis=1), {"x": _SM}, rtol=1e-4)
    case(f"{_op}_v13_default", node(_op, ["x"]), {"x": _SM * 30}, rtol=1e-4)
_LN = f32(2, 3, 8) * 3 + 1
case("LayerNormalization_last_axis_stats", node("LayerNormalization", ["x", "s", "b"],
                                                ["y", "mean", "inv"]),
     {"x": _LN}, outputs=("y", "mean", "inv"), inits={"s": f32(8), "b": f32(8)}, opset=17,
     rtol=1e-4, atol=1e-5)
case("LayerNormalization_axis1_no_bias", node("LayerNormalization", ["x", "s"], axis=1,
                                              epsilon=1e-3),
     {"x": _LN, "s": f32(3, 8)}, opset=17, rtol=1e-4, atol=1e-5)
case("LayerNormalization_f16", node("LayerNormalization", ["x", "s", "b"]),
     {"x": _LN.astype(np.float16)}, inits={"s": f32(8).astype(np.float16),
                                           "b": f32(8).astype(np.float16)},
     opset=17, rtol=2e-3, atol=2e-3)
case("RMSNormalization_axis_neg2", node("RMSNormalization", ["x", "s"], axis=-2, epsilon=1e-4),
     {"x": _LN}, inits={"s": f32(3, 8)}, opset=23, rtol=1e-4, atol=1e-5)
case("GroupNormalization_v21", node("GroupNormalization", ["x", "s", "b"], num_groups=2),
     {"x": f32(2, 6, 3, 2)}, outputs=[("y", np.float32, (2, 6, 3, 2))],
     inits={"s": f32(6), "b": f32(6)}, opset=21, rtol=1e-4, atol=1e-5)
case("InstanceNormalization", node("InstanceNormalization", ["x", "s", "b"], epsilon=1e-3),
     {"x": f32(2, 3, 4, 5) + 2}, inits={"s": f32(3), "b": f32(3)}, rtol=1e-4, atol=1e-5)
case("InstanceNormalization_1d_v22", node("InstanceNormalization", ["x", "s", "b"]),
     {"x": f32(2, 3, 7), "s": f32(3), "b": f32(3)}, opset=22, rtol=1e-4, atol=1e-5)
for _p in (1, 2):
    case(f"LpNormalization_p{_p}_axis0", node("LpNormalization", ["x"], axis=0, p=_p),
         {"x": f32(3, 4)}, opset=22, rtol=1e-5)
case("MeanVarianceNormalization_axes", node("MeanVarianceNormalization", ["x"], axes=[1, 2]),
     {"x": f32(2, 3, 4) + 1}, rtol=1e-4, atol=1e-5)
case("Dropout_v9", node("Dropout", ["x"], ratio=0.3), {"x": _X}, opset=9)

# -- transformer ops ---------------------------------------------------------------------
# Attention: 4 query heads over 2 KV heads (GQA), 5 queries, 7 keys.
_AQ, _AK, _AV = f32(2, 4, 5, 8), f32(2, 2, 7, 8), f32(2, 2, 7, 6)
_AQ3, _AK3, _AV3 = f32(2, 5, 32), f32(2, 7, 16), f32(2, 7, 12)
_PAST = {"pk": f32(2, 2, 3, 8), "pv": f32(2, 2, 3, 6)}
case("Attention_gqa_causal_float_mask", node("Attention", ["q", "k", "v", "m"], is_causal=1),
     {"q": _AQ, "k": _AK, "v": _AV, "m": f32(5, 7)}, opset=23, rtol=1e-4, atol=1e-5)
case("Attention_bool_mask_4d", node("Attention", ["q", "k", "v", "m"]),
     {"q": _AQ, "k": _AK, "v": _AV, "m": boolean(2, 4, 5, 7) | np.eye(5, 7, dtype=bool)},
     opset=23, rtol=1e-4, atol=1e-5)
case("Attention_softcap_scale", node("Attention", ["q", "k", "v"], softcap=3.0, scale=0.2),
     {"q": _AQ, "k": _AK, "v": _AV}, opset=23, rtol=1e-4, atol=1e-5)
case("Attention_3d_past_present_probs",
     node("Attention", ["q", "k", "v", "m", "pk", "pv"], ["y", "present_k", "present_v", "qk"],
          q_num_heads=4, kv_num_heads=2, qk_matmul_output_mode=3),
     {"q": _AQ3, "k": _AK3, "v": _AV3, "m": f32(5, 10), **_PAST},
     outputs=("y", "present_k", "present_v", "qk"), opset=23, rtol=1e-4, atol=1e-5)
case("Attention_3d_past_causal",
     node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "present_k", "present_v"],
          q_num_heads=4, kv_num_heads=2, is_causal=1),
     {"q": _AQ3, "k": _AK3, "v": _AV3, **_PAST}, outputs=("y", "present_k", "present_v"),
     opset=23, rtol=1e-4, atol=1e-5)
case("Attention_nonpad_kv_seqlen_causal",
     node("Attention", ["q", "k", "v", "", "", "", "n"], is_causal=1),
     {"q": _AQ, "k": _AK, "v": _AV, "n": np.array([7, 4], np.int64)}, opset=24,
     rtol=1e-4, atol=1e-5)
case("Attention_f16_causal", node("Attention", ["q", "k", "v"], is_causal=1),
     {"q": _AQ.astype(np.float16), "k": _AK.astype(np.float16),
      "v": _AV.astype(np.float16)}, opset=23, rtol=2e-3, atol=2e-3)
_POS = _RNG.integers(0, 20, (2, 5)).astype(np.int64)
case("RotaryEmbedding_4d", node("RotaryEmbedding", ["x", "c", "s", "p"]),
     {"x": f32(2, 3, 5, 8), "p": _POS}, inits={"c": f32(20, 4), "s": f32(20, 4)}, opset=23)
case("RotaryEmbedding_3d_interleaved_partial",
     node("RotaryEmbedding", ["x", "c", "s", "p"], interleaved=1, rotary_embedding_dim=4,
          num_heads=3),
     {"x": f32(2, 5, 24), "c": f32(20, 2), "s": f32(20, 2), "p": _POS}, opset=23)
# LinearAttention over 200 tokens (a while over them): gated delta rule, 4 query heads
# over 2 KV heads, a past state; keys of unit length per head, as models normalize them.
_LT = 200
_LK = f32(2, _LT, 2, 8)
_LK = (_LK / np.linalg.norm(_LK, axis=-1, keepdims=True)).reshape(2, _LT, 16)
case("LinearAttention_gated_delta_200_tokens",
     node("LinearAttention", ["q", "k", "v", "p", "g", "b"], ["y", "s"], q_num_heads=4,
          kv_num_heads=2),
     {"q": f32(2, _LT, 32), "k": _LK, "v": f32(2, _LT, 12), "p": f32(2, 2, 8, 6),
      "g": f32(2, _LT, 2, low=-0.3, high=0), "b": f32(2, _LT, 2, low=0, high=1)},
     outputs=[("y", np.float32, (2, _LT, 24)), ("s", np.float32, (2, 2, 8, 6))], opset=27,
     rtol=1e-4, atol=1e-5)
case("LinearAttention_linear_200_tokens_f16",
     node("LinearAttention", ["q", "k", "v"], ["y", "s"], q_num_heads=2, kv_num_heads=2,
          update_rule="linear", scale=0.1),
     {"q": f32(1, _LT, 8).astype(np.float16), "k": f32(1, _LT, 8).astype(np.float16),
      "v": f32(1, _LT, 8).astype(np.float16)},
     outputs=[("y", np.float16, (1, _LT, 8)), ("s", np.float16, (1, 2, 4, 4))], opset=27,
     rtol=2e-3, atol=2e-2)
case("Dropout_v13_mask", node("Dropout", ["x", "r"], ["y", "mask"]), {"x": _X},
     outputs=("y", "mask"), inits={"r": np.float32(0.4)})
case("Dropout_training_ratio0", node("Dropout", ["x", "r", "t"], ["y", "mask"]), {"x": _X},
     outputs=("y", "mask"), inits={"r": np.float32(0.0), "t": np.array(True)})
case("BatchNormalization_training", node("BatchNormalization", ["x", "s", "b", "m", "v"],
                                         ["y", "rm", "rv"], training_mode=1, momentum=0.8),
     {"x": _POOL_X}, outputs=("y", "rm", "rv"), inits=_BN, opset=15, rtol=1e-4, atol=1e-5)
_HM = np.array([[[3, 1, 3], [0, 2, 2]], [[-1, -1, -5], [7, 7, 7]]], np.float32)
case("Hardmax_v13_axis0", node("Hardmax", ["x"], axis=0), {"x": _HM})
case("Hardmax_v13_default", node("Hardmax", ["x"]), {"x": _HM})
case("Hardmax_v11_coerced", node("Hardmax", ["x"]), {"x": _HM}, opset=11)
_ML = {"": 13, "ai.onnx.ml": 4}
case("Binarizer", helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml",
                                   threshold=0.1), {"x": _X}, opset=_ML)
case("LabelEncoder_int_to_float", helper.make_node(
    "LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_int64s=[1, 2, 3],
    values_floats=[0.5, 1.5, 2.5], default_float=-1.0), {"x": np.array([1, 5, 3, 2], np.int64)},
    opset=_ML)
case("LabelEncoder_float_to_int", helper.make_node(
    "LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_floats=[0.5, -1.0],
    values_int64s=[7, 9]), {"x": np.array([[0.5, 3.0], [-1.0, 0.5]], np.float32)}, opset=_ML)
case("LabelEncoder_tensors", helper.make_node(
    "LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
    keys_tensor=numpy_helper.from_array(np.array([4, -1], np.int64)),
    values_tensor=numpy_helper.from_array(np.array([0.25, 8.0], np.float32)),
    default_tensor=numpy_helper.from_array(np.array([42.0], np.float32))),
    {"x": np.array([[4, 3], [-1, 4]], np.int64)}, opset=_ML)

# TfIdfVectorizer: unigrams 2, 3, 5, 7 then bigrams (5, 6), (7, 8), (2, 3), counted with skips
_TOKENS = np.array([[2, 3, 5, 4, 5, 6, 7, 8, 6, 7], [7, 2, 2, 3, 8, 5, 5, 6, 3, 3]], np.int64)
_TFIDF = dict(min_gram_length=1, max_gram_length=2, max_skip_count=2, ngram_counts=[0, 4],
              ngram_indexes=[6, 1, 0, 2, 4, 3, 5], pool_int64s=[2, 3, 5, 7, 5, 6, 7, 8, 2, 3])
_IDF_W = [0.5, 2.0, 1.5, 0.25, 3.0, 1.0, 0.75]
case("TfIdfVectorizer_TF_batch", node("TfIdfVectorizer", ["x"], mode="TF", **_TFIDF),
     {"x": _TOKENS}, opset=9)
case("TfIdfVectorizer_IDF_weights_int32", node("TfIdfVectorizer", ["x"], mode="IDF",
                                               weights=_IDF_W, **_TFIDF),
     {"x": _TOKENS[0].astype(np.int32)}, opset=9)
case("TfIdfVectorizer_IDF_unweighted", node("TfIdfVectorizer", ["x"], mode="IDF", **_TFIDF),
     {"x": _TOKENS}, opset=9)
case("TfIdfVectorizer_TFIDF_bigrams_only", node("TfIdfVectorizer", ["x"], mode="TFIDF",
                                                weights=_IDF_W,
                                                **{**_TFIDF, "min_gram_length": 2}),
     {"x": _TOKENS}, opset=9)

# -- tensor ops ----------------------------------------------------------------------------
_T = f32(2, 3, 4)
for _axis in (0, 2, -1):
    case(f"Flatten_axis{_axis}", node("Flatten", ["x"], axis=_axis), {"x": _T})
case("Reshape_zero_and_minus_one", node("Reshape", ["x", "s"]), {"x": _T},
     inits={"s": np.array([0, -1, 2], np.int64)})
case("Reshape_allowzero", node("Reshape", ["x", "s"], allowzero=1), {"x": _T},
     inits={"s": np.array([4, 6], np.int64)}, opset=14)
case("Transpose_default", node("Transpose", ["x"]), {"x": _T})
case("Transpose_perm", node("Transpose", ["x"], perm=[1, 2, 0]), {"x": _T})
case("Concat_negative_axis", node("Concat", ["a", "b"], axis=-2),
     {"a": f32(2, 3, 4), "b": f32(2, 1, 4)})
case("Squeeze_v11_attr", node("Squeeze", ["x"], axes=[-1]), {"x": f32(3, 1, 1)}, opset=11)
case("Squeeze_v13_input", node("Squeeze", ["x", "a"]), {"x": f32(3, 1, 1)},
     inits={"a": np.array([1], np.int64)})
case("Squeeze_all", node("Squeeze", ["x"]), {"x": f32(1, 3, 1)})
case("Unsqueeze_v11_attr", node("Unsqueeze", ["x"], axes=[0, 3]), {"x": f32(3, 4)}, opset=11)
case("Unsqueeze_v13_negative", node("Unsqueeze", ["x", "a"]), {"x": f32(3, 4)},
     inits={"a": np.array([-1, 1], np.int64)})
case("Identity", node("Identity", ["x"]), {"x": _T})
case("Shape_gather_concat_reshape", [
    node("Shape", ["x"], ["s"]),
    node("Gather", ["s", "i0"], ["d0"], axis=0),
    node("Unsqueeze", ["d0", "ax"], ["d0u"]),
    node("Concat", ["d0u", "minus1"], ["shape"], axis=0),
    node("Reshape", ["x", "shape"])], {"x": _T}, outputs=[("y", np.float32, (2, 12))],
    inits={"i0": np.array(0, np.int64), "ax": np.array([0], np.int64),
           "minus1": np.array([-1], np.int64)})
case("Shape_start_end", node("Shape", ["x"], start=1, end=-1), {"x": _T}, opset=15)
case("Size", node("Size", ["x"]), {"x": _T})
case("Constant_value_floats", [node("Constant", [], ["c"], value_floats=[1.0, 2.0, 3.0, 4.0]),
                               node("Mul", ["x", "c"])], {"x": _T})
case("Constant_tensor", [node("Constant", [], ["c"], value=numpy_helper.from_array(
    f32(3, 1), "c")), node("Add", ["x", "c"])], {"x": _T})
# Every value form of Constant, as exporters write them (opset 11: sparse, 12: scalars).
case("Constant_value_float", [node("Constant", [], ["c"], value_float=0.5),
                              node("Mul", ["x", "c"])], {"x": _T})
case("Constant_value_int_ints", [node("Constant", [], ["k"], value_int=-1),
                                 node("Constant", [], ["d"], value_ints=[2]),
                                 node("Unsqueeze", ["k", "zero"], ["k1"]),
                                 node("Concat", ["d", "k1"], ["s"], axis=0),
                                 node("Reshape", ["x", "s"])], {"x": _T},
     outputs=[("y", np.float32, (2, 12))], inits={"zero": np.array([0], np.int64)})
case("Constant_sparse_linear", [node("Constant", [], ["c"], sparse_value=helper.make_sparse_tensor(
    numpy_helper.from_array(np.array([1.5, -2.0, 3.0], np.float32), "v"),
    numpy_helper.from_array(np.array([0, 5, 11], np.int64), "i"), [3, 4])),
    node("Add", ["x", "c"])], {"x": _T[0]}, opset=11)
case("Constant_sparse_coordinates", [node("Constant", [], ["c"],
                                          sparse_value=helper.make_sparse_tensor(
    numpy_helper.from_array(np.array([4, 7], np.int64), "v"),
    numpy_helper.from_array(np.array([[0, 1], [2, 3]], np.int64), "i"), [3, 4])),
    node("Mul", ["x", "c"])], {"x": i64(3, 4)}, opset=11)
# Range over a shape (YOLO exporters' grid): folded once the input shape is pinned.
case("Range_over_shape", [node("Shape", ["x"], ["s"]),
                          node("Gather", ["s", "one"], ["n"], axis=0),
                          node("Cast", ["n"], ["nf"], to=onnx.TensorProto.FLOAT),
                          node("Range", ["half", "nf", "step"], ["r"]),
                          node("Add", ["x", "r"])], {"x": _T},
     inits={"one": np.array(2, np.int64), "half": np.float32(0.5), "step": np.float32(1.0)},
     opset=11)
case("Range_int_negative_delta", node("Range", ["a", "b", "d"]), {},
     inits={"a": np.int32(10), "b": np.int32(-3), "d": np.int32(-4)}, opset=11)
case("ConstantOfShape", [node("ConstantOfShape", ["s"], ["c"],
                              value=numpy_helper.from_array(np.array([2.5], np.float32))),
                         node("Mul", ["x", "c"])], {"x": _T},
     inits={"s": np.array([3, 4], np.int64)})
case("ConstantOfShape_int_output", node("ConstantOfShape", ["s"],
                                        value=numpy_helper.from_array(np.array([7], np.int32))),
     {}, inits={"s": np.array([2, 3], np.int64)})
case("Gather_axis0_negative", node("Gather", ["x", "i"]), {"x": f32(5, 3)},
     inits={"i": np.array([[0, -1], [2, -5]], np.int64)})
case("Gather_axis1_input_indices", node("Gather", ["x", "i"], axis=1),
     {"x": f32(2, 5, 3), "i": np.array([4, -2, 0], np.int64)})
case("Gather_scalar_index", node("Gather", ["x", "i"], axis=-1), {"x": f32(2, 5)},
     inits={"i": np.array(-1, np.int32)})
case("Slice_v1_attrs", node("Slice", ["x"], starts=[1, 0], ends=[1000, -1], axes=[0, 2]),
     {"x": _T}, opset=9)
case("Slice_steps", node("Slice", ["x", "s", "e", "a", "st"]), {"x": f32(6, 7)},
     inits={"s": np.array([1, -6], np.int64), "e": np.array([6, 9999], np.int64),
            "a": np.array([0, -1], np.int64), "st": np.array([2, 3], np.int64)})
case("Slice_negative_steps", node("Slice", ["x", "s", "e", "a", "st"]), {"x": f32(6, 7)},
     inits={"s": np.array([-1, 100], np.int64), "e": np.array([-9999, 1], np.int64),
            "a": np.array([0, 1], np.int64), "st": np.array([-1, -2], np.int64)})
case("Slice_empty", node("Slice", ["x", "s", "e"]), {"x": f32(4, 3)},
     inits={"s": np.array([3], np.int64), "e": np.array([1], np.int64)})
case("Expand", node("Expand", ["x", "s"]), {"x": f32(3, 1)},
     inits={"s": np.array([2, 1, 4], np.int64)})
case("Tile", node("Tile", ["x", "r"]), {"x": f32(2, 3)}, inits={"r": np.array([2, 3], np.int64)})

# -- reductions ----------------------------------------------------------------------------
_R = f32(3, 4, 5, low=0.5, high=2)
for _op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
            "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"):
    case(f"{_op}_v11_axes_keepdims", node(_op, ["x"], axes=[0, -1]), {"x": _R}, opset=11,
         rtol=1e-4)
    case(f"{_op}_v11_all_no_keepdims", node(_op, ["x"], keepdims=0), {"x": _R}, opset=11,
         rtol=1e-4)
    case(f"{_op}_v18_axes_input", node(_op, ["x", "a"], keepdims=0), {"x": _R},
         inits={"a": np.array([1], np.int64)}, opset=18, rtol=1e-4)
case("ReduceSum_v13_axes_input", node("ReduceSum", ["x", "a"]), {"x": _R},
     inits={"a": np.array([-2], np.int64)})
case("ReduceSum_v13_noop_empty_axes", node("ReduceSum", ["x"], noop_with_empty_axes=1),
     {"x": _R})
case("ReduceMax_int64", node("ReduceMax", ["x"], axes=[1], keepdims=0), {"x": i64(3, 4)},
     opset=13)


# -- ArgMax / ArgMin, TopK, CumSum / CumProd -----------------------------------------------
_TIES = _RNG.integers(-2, 3, (3, 5, 4)).astype(np.float32)     # many equal values
for _op in ("ArgMax", "ArgMin"):
    case(f"{_op}_axis1_keepdims", node(_op, ["x"], axis=1), {"x": _TIES})
    case(f"{_op}_last_index_no_keepdims",
         node(_op, ["x"], axis=-1, keepdims=0, select_last_index=1), {"x": _TIES})
    case(f"{_op}_int64_default_axis", node(_op, ["x"]), {"x": i64(4, 3)})
case("TopK_k_input_ties", node("TopK", ["x", "k"], ["v", "i"], axis=1), {"x": _TIES},
     outputs=("v", "i"), inits={"k": np.array([3], np.int64)})
case("TopK_smallest_unsorted_rows", node("TopK", ["x", "k"], ["v", "i"], largest=0, sorted=1),
     {"x": f32(2, 3, 40)}, outputs=("v", "i"), inits={"k": np.array([7], np.int64)})
case("TopK_opset1_attr_k", node("TopK", ["x"], ["v", "i"], k=2, axis=0), {"x": f32(5, 3)},
     outputs=("v", "i"), opset=1)
for _name, _attrs in [("default", {}), ("exclusive", dict(exclusive=1)),
                      ("reverse", dict(reverse=1)),
                      ("reverse_exclusive", dict(exclusive=1, reverse=1))]:
    case(f"CumSum_{_name}", node("CumSum", ["x", "a"], **_attrs), {"x": f32(3, 7)},
         inits={"a": np.array(-1, np.int64)})
case("CumSum_int32_axis0", node("CumSum", ["x", "a"]), {"x": i64(6, 2).astype(np.int32)},
     inits={"a": np.array(0, np.int32)})
# Long axes: a while over the axis (the short ones above are a reduce-window).
for _name, _attrs in [("default", {}), ("reverse_exclusive", dict(exclusive=1, reverse=1))]:
    case(f"CumSum_4096_{_name}", node("CumSum", ["x", "a"], **_attrs), {"x": f32(3, 4096)},
         inits={"a": np.array(1, np.int64)}, rtol=1e-5, atol=1e-4)
case("CumSum_4096_exclusive_axis0", node("CumSum", ["x", "a"], exclusive=1),
     {"x": f32(4096, 2)}, inits={"a": np.array(0, np.int64)}, rtol=1e-5, atol=1e-4)
case("CumSum_int32_4096_reverse", node("CumSum", ["x", "a"], reverse=1),
     {"x": i64(4096).astype(np.int32)}, inits={"a": np.array(-1, np.int32)})

# -- pools: LpPool, MaxPool's Indices ------------------------------------------------------
case("LpPool_p3_pads_strides", node("LpPool", ["x"], kernel_shape=[3, 2], p=3,
                                    pads=[1, 0, 1, 1], strides=[2, 1]),
     {"x": _POOL_X}, opset=18, rtol=1e-4)
case("GlobalLpPool_p3", node("GlobalLpPool", ["x"], p=3), {"x": _POOL_X}, rtol=1e-4)
case("ReduceLogSumExp_infinite_rows", node("ReduceLogSumExp", ["x"], axes=[1], keepdims=0),
     {"x": np.array([[-np.inf, -np.inf], [np.inf, 1.0], [0.5, -np.inf]], np.float32)})
case("LpPool_p1_same_upper", node("LpPool", ["x"], kernel_shape=[2, 2], p=1,
                                  auto_pad="SAME_UPPER"), {"x": _POOL_X}, opset=11)
for _name, _attrs in [("pads", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])),
                      ("storage_order1", dict(kernel_shape=[2, 3], strides=[2, 1],
                                              storage_order=1)),
                      ("ceil_dilated", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
                                            dilations=[1, 2]))]:
    case(f"MaxPool_indices_{_name}", node("MaxPool", ["x"], ["y", "i"], **_attrs),
         {"x": _POOL_X}, outputs=("y", "i"), opset=12)
case("MaxPool_indices_3d", node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2, 2]),
     {"x": f32(1, 2, 3, 4, 5)}, outputs=("y", "i"), opset=12)

# -- ConvTranspose -------------------------------------------------------------------------
for _name, _x, _w, _attrs in [
        ("stride2_pads", (1, 3, 5, 4), (3, 2, 3, 3), dict(strides=[2, 2], pads=[1, 0, 1, 1])),
        ("groups_dilations", (2, 4, 4, 5), (4, 3, 2, 3), dict(group=2, dilations=[2, 1],
                                                              strides=[1, 2])),
        ("output_padding", (1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[3, 2],
                                                            output_padding=[2, 1])),
        ("output_shape", (1, 2, 4, 3), (2, 3, 3, 3), dict(strides=[2, 2],
                                                          output_shape=[9, 7])),
        ("same_upper", (1, 2, 3, 5), (2, 2, 4, 3), dict(strides=[2, 3], auto_pad="SAME_UPPER")),
        ("same_lower", (1, 2, 3, 5), (2, 2, 4, 3), dict(strides=[2, 3], auto_pad="SAME_LOWER")),
        ("1d_stride4", (2, 3, 7), (3, 4, 5), dict(strides=[4], pads=[1, 2])),
        ("3d", (1, 2, 3, 3, 2), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2]))]:
    case(f"ConvTranspose_{_name}", node("ConvTranspose", ["x", "w", "b"], **_attrs),
         {"x": f32(*_x)}, inits={"w": f32(*_w), "b": f32(_w[1] * _attrs.get("group", 1))},
         rtol=1e-4, atol=1e-5)

# -- Einsum, Det -----------------------------------------------------------------------------
for _name, _eq, _shapes in [
        ("matmul", "ij,jk->ik", [(3, 4), (4, 5)]),
        ("batch_transpose", "bij,bkj->bki", [(2, 3, 4), (2, 5, 4)]),
        ("diagonal_trace", "ii", [(4, 4)]),
        ("ellipsis_broadcast", "...ij,...jk->...ik", [(2, 1, 3, 4), (1, 5, 4, 2)]),
        ("three_operands", "abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]),
        ("outer_implicit", "i,j", [(3,), (4,)]),
        ("bilinear", "bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)])]:
    _names = [f"x{k}" for k in range(len(_shapes))]
    case(f"Einsum_{_name}", node("Einsum", _names, equation=_eq),
         {n: f32(*s) for n, s in zip(_names, _shapes)}, opset=12, rtol=1e-4, atol=1e-5)
case("Det_batched", node("Det", ["x"]), {"x": f32(2, 3, 5, 5)}, rtol=1e-4, atol=1e-5)

# -- signal: DFT, STFT, windows, MelWeightMatrix -----------------------------------------------
case("DFT_v17_complex_inverse", node("DFT", ["x"], inverse=1, axis=1), {"x": f32(2, 8, 3, 2)},
     opset=17, rtol=1e-4, atol=1e-5)
case("DFT_v20_real_onesided_length", node("DFT", ["x", "n", "a"], onesided=1),
     {"x": f32(2, 9, 3, 1)}, inits={"n": np.array(12, np.int64), "a": np.array(1, np.int64)},
     opset=20, rtol=1e-4, atol=1e-5)
case("DFT_v20_irfft", node("DFT", ["x", "", "a"], onesided=1, inverse=1),
     {"x": f32(1, 5, 4, 2)}, inits={"a": np.array(-2, np.int64)}, opset=20, rtol=1e-4,
     atol=1e-5)
case("STFT_window_complex", node("STFT", ["x", "s", "w"], onesided=0),
     {"x": f32(2, 40, 2)}, inits={"s": np.array(6, np.int64), "w": f32(10, low=0, high=1)},
     opset=17, rtol=1e-4, atol=1e-5)
for _op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
    case(f"{_op}_symmetric_double", node(_op, ["n"], periodic=0,
                                         output_datatype=onnx.TensorProto.DOUBLE),
         {}, inits={"n": np.array(11, np.int64)}, opset=17)
case("MelWeightMatrix", node("MelWeightMatrix", ["m", "n", "r", "lo", "hi"]), {},
     inits={"m": np.array(8, np.int64), "n": np.array(64, np.int64),
            "r": np.array(8000, np.int64), "lo": np.array(60, np.float32),
            "hi": np.array(3800, np.float32)}, opset=17)

# -- losses ---------------------------------------------------------------------------------
_SCORES, _LABELS = f32(3, 5, 2, 2), _RNG.integers(0, 5, (3, 2, 2)).astype(np.int64)
_LABELS[0, 0, 0] = _LABELS[2, 1, 0] = -1
for _red in ("none", "sum", "mean"):
    case(f"NegativeLogLikelihoodLoss_{_red}_weight_ignore",
         node("NegativeLogLikelihoodLoss", ["x", "t", "w"], reduction=_red, ignore_index=-1),
         {"x": _SCORES, "t": _LABELS}, inits={"w": f32(5, low=0.5, high=2)}, rtol=1e-4)
    case(f"SoftmaxCrossEntropyLoss_{_red}_log_prob",
         node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y", "lp"], reduction=_red),
         {"x": _SCORES, "t": np.clip(_LABELS, 0, 4)}, outputs=("y", "lp"), rtol=1e-4)

# -- ai.onnx.ml TreeEnsemble ----------------------------------------------------------------
def _forest(aggregate, post=0):
    # two trees over 3 features: tree 0 splits on x0 <= 0.5 then x2 < -0.2 (NaN goes
    # true); tree 1 tests x1 membership in {1, 3}
    return node("TreeEnsemble", ["x"], domain="ai.onnx.ml",
                nodes_featureids=[0, 2, 1], nodes_modes=numpy_helper.from_array(
                    np.array([0, 1, 6], np.uint8)),
                nodes_splits=numpy_helper.from_array(np.array([0.5, -0.2, 0], np.float32)),
                nodes_truenodeids=[1, 0, 3], nodes_trueleafs=[0, 1, 1],
                nodes_falsenodeids=[2, 1, 4], nodes_falseleafs=[1, 1, 1],
                nodes_missing_value_tracks_true=[0, 1, 0],
                membership_values=numpy_helper.from_array(
                    np.array([1, 3, np.nan], np.float32)),
                leaf_targetids=[0, 1, 1, 0, 1],
                leaf_weights=numpy_helper.from_array(
                    np.array([1.5, -2.0, 0.25, 3.0, -1.0], np.float32)),
                tree_roots=[0, 2], n_targets=2, aggregate_function=aggregate,
                post_transform=post)


_FOREST_X = f32(6, 3)
_FOREST_X[1, 2] = np.nan
_FOREST_X[2:4, 1] = [1.0, 3.0]
# post_transform 1 and 2 are left out: onnxruntime swaps SOFTMAX (1) and LOGISTIC (2)
for _agg, _post in ((1, 0), (0, 3), (2, 0), (3, 0)):
    case(f"TreeEnsemble_aggregate{_agg}_post{_post}", _forest(_agg, _post), {"x": _FOREST_X},
         outputs=[("y", np.float32, (6, 2))], opset={"": 13, "ai.onnx.ml": 5}, rtol=1e-5)
# -- ai.onnx.ml classic models (skl2onnx) ------------------------------------------------------
_ML1 = {"": 13, "ai.onnx.ml": 1}
_MLX = f32(5, 4)
_MLX[2, 1] = 0.0


def _ml(op, inputs=("x",), outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), domain="ai.onnx.ml", **attrs)


for _norm in ("MAX", "L1", "L2"):
    case(f"Normalizer_{_norm}", _ml("Normalizer", norm=_norm),
         {"x": np.vstack([_MLX, np.zeros((1, 4), np.float32)])},
         outputs=[("y", np.float32, (6, 4))], opset=_ML1)
case("Normalizer_int64_1d", _ml("Normalizer", norm="L2"), {"x": i64(6)},
     outputs=[("y", np.float32, (6,))], opset=_ML1)
case("Scaler_per_column", _ml("Scaler", offset=[0.5, -1.0, 0.0, 2.0], scale=[2.0, 0.5, 1.0, -1.0]),
     {"x": _MLX}, outputs=[("y", np.float32, (5, 4))], opset=_ML1)
case("Scaler_int64_one_value", _ml("Scaler", offset=[1.5], scale=[0.25]), {"x": i64(3, 4)},
     outputs=[("y", np.float32, (3, 4))], opset=_ML1)
case("Imputer_float_zero", _ml("Imputer", imputed_value_floats=[9.0, 8.0, 7.0, 6.0],
                               replaced_value_float=0.0), {"x": _MLX},
     outputs=[("y", np.float32, (5, 4))], opset=_ML1)
_NANX = _MLX.copy()
_NANX[[0, 3], [2, 0]] = np.nan
case("Imputer_float_nan_one_value", _ml("Imputer", imputed_value_floats=[-1.0],
                                        replaced_value_float=float("nan")), {"x": _NANX},
     outputs=[("y", np.float32, (5, 4))], opset=_ML1)
case("Imputer_int64", _ml("Imputer", imputed_value_int64s=[10, 20, 30], replaced_value_int64=-2),
     {"x": i64(4, 3)}, outputs=[("y", np.int64, (4, 3))], opset=_ML1)
for _zeros in (0, 1):
    case(f"OneHotEncoder_int64_zeros{_zeros}",
         _ml("OneHotEncoder", cats_int64s=[3, -1, 0, 2], zeros=_zeros),
         {"x": np.array([[3, 0], [2, -1], [0, 0]], np.int64)},
         outputs=[("y", np.float32, (3, 2, 4))], opset=_ML1)
case("OneHotEncoder_float_unknown", _ml("OneHotEncoder", cats_int64s=[1, 2, 4]),
     {"x": np.array([1.0, 4.0, 5.0, 2.0], np.float32)}, outputs=[("y", np.float32, (4, 3))],
     opset=_ML1)
case("FeatureVectorizer_cut_and_pad", _ml("FeatureVectorizer", ["a", "b", "c"],
                                          inputdimensions=[2, 3, 1]),
     {"a": f32(3, 4), "b": f32(3, 2), "c": f32(3, 1)}, outputs=[("y", np.float32, (3, 6))],
     opset=_ML1)
_COEF3 = f32(3, 4).reshape(-1).tolist()
for _post in ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"):
    _px = _MLX * 0.1 if _post == "PROBIT" else _MLX
    case(f"LinearClassifier_multiclass_{_post}",
         _ml("LinearClassifier", outputs=("l", "z"), coefficients=_COEF3,
             intercepts=[0.1, 0.0, -0.2], classlabels_ints=[7, 3, 5], post_transform=_post),
         {"x": _px}, outputs=[("l", np.int64, (5,)), ("z", np.float32, (5, 3))], opset=_ML1,
         rtol=1e-4, atol=1e-5)
    if _post == "PROBIT":
        continue            # refused: onnxruntime fills half of the output
    case(f"LinearClassifier_binary_{_post}",
         _ml("LinearClassifier", outputs=("l", "z"), coefficients=[0.05, -0.1, 0.2, 0.1],
             intercepts=[0.3], classlabels_ints=[4, 9], post_transform=_post),
         {"x": _MLX},
         outputs=[("l", np.int64, (5,)), ("z", np.float32, (5, 2))],
         opset=_ML1, rtol=1e-4, atol=1e-5)
case("LinearClassifier_int_input_binary",
     _ml("LinearClassifier", outputs=("l", "z"), coefficients=[0.5, -1.0, 0.25],
         intercepts=[0.5], classlabels_ints=[0, 1]),
     {"x": i64(4, 3)}, outputs=[("l", np.int64, (4,)), ("z", np.float32, (4, 2))], opset=_ML1)
for _post in ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"):
    case(f"LinearRegressor_two_targets_{_post}",
         _ml("LinearRegressor", coefficients=(f32(2, 4) * 0.1).reshape(-1).tolist(),
             intercepts=[0.2, -0.1], targets=2, post_transform=_post),
         {"x": _MLX * 0.5}, outputs=[("y", np.float32, (5, 2))], opset=_ML1, rtol=1e-4, atol=1e-5)
case("LinearRegressor_one_target", _ml("LinearRegressor", coefficients=[1.0, -2.0, 0.5]),
     {"x": _MLX[:, :3]}, outputs=[("y", np.float32, (5, 1))], opset=_ML1)
_SV = f32(6, 4)                     # support vectors: 2, 1 and 3 of classes 0, 1, 2
_SVK = {"LINEAR": [0.0, 0.0, 0.0], "POLY": [0.4, 0.5, 3.0], "RBF": [0.3, 0.0, 0.0],
        "SIGMOID": [0.2, -0.1, 0.0]}
for _kernel, _params in _SVK.items():
    case(f"SVMRegressor_{_kernel}", _ml("SVMRegressor", kernel_type=_kernel, kernel_params=_params,
                                        support_vectors=_SV.reshape(-1).tolist(), n_supports=6,
                                        coefficients=[0.5, -1.0, 0.25, 0.75, -0.5, 1.0], rho=[0.1]),
         {"x": _MLX}, outputs=[("y", np.float32, (5, 1))], opset=_ML1, rtol=1e-4, atol=1e-5)
    for _post in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"):
        if _post != "NONE" and _kernel not in ("RBF", "POLY"):
            continue
        case(f"SVMClassifier_ovo3_{_kernel}_{_post}",
             _ml("SVMClassifier", outputs=("l", "z"), kernel_type=_kernel, kernel_params=_params,
                 support_vectors=_SV.reshape(-1).tolist(), vectors_per_class=[2, 1, 3],
                 coefficients=(f32(2, 6) * 0.2 if _post == "PROBIT" else f32(2, 6))
                 .reshape(-1).tolist(),
                 rho=[0.1, -0.2, 0.05], classlabels_ints=[10, 20, 30], post_transform=_post),
             {"x": _MLX}, outputs=[("l", np.int64, (5,)), ("z", np.float32, (5, 3))], opset=_ML1,
             rtol=1e-4, atol=1e-4 if _post == "PROBIT" else 1e-5)
for _post in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"):
    case(f"SVMClassifier_binary_RBF_{_post}",
         _ml("SVMClassifier", outputs=("l", "z"), kernel_type="RBF", kernel_params=[0.3, 0, 0],
             support_vectors=_SV[:3].reshape(-1).tolist(), vectors_per_class=[1, 2],
             coefficients=[0.7, -0.4, -0.3], rho=[-0.05], classlabels_ints=[0, 1],
             post_transform=_post),
         {"x": _MLX}, outputs=[("l", np.int64, (5,)), ("z", np.float32, (5, 2))], opset=_ML1,
         rtol=1e-4, atol=1e-5)
case("SVMClassifier_int_input_POLY",
     _ml("SVMClassifier", outputs=("l", "z"), kernel_type="POLY", kernel_params=[0.1, 1.0, 2.0],
         support_vectors=_SV.reshape(-1).tolist(), vectors_per_class=[2, 1, 3],
         coefficients=f32(2, 6).reshape(-1).tolist(), rho=[0.1, -0.2, 0.05],
         classlabels_ints=[2, 1, 0]),
     {"x": i64(5, 4)}, outputs=[("l", np.int64, (5,)), ("z", np.float32, (5, 3))], opset=_ML1,
     rtol=1e-4, atol=1e-5)
# Platt probabilities (prob_a, prob_b) through onnxruntime's pairwise coupling, whose
# sweeps stop on convergence: each of the 16 rows stops after its own number of sweeps
# (1 to 4). A local generator keeps the draws of the cases below unchanged.
_PRNG = np.random.default_rng(26)
_PX = _PRNG.standard_normal((16, 4)).astype(np.float32)


def _svc_proba(k, kernel, post="NONE"):
    per = [1 + c % 3 for c in range(k)]
    total, pairs = sum(per), k * (k - 1) // 2

    def draw(*shape, scale=1.0):
        return (_PRNG.standard_normal(shape) * scale).astype(np.float32).reshape(-1).tolist()
    return _ml("SVMClassifier", outputs=("l", "z"), kernel_type=kernel,
               kernel_params=_SVK[kernel], support_vectors=draw(total, 4),
               vectors_per_class=per, coefficients=draw(k - 1, total), rho=draw(pairs, scale=0.3),
               prob_a=(-1 - _PRNG.random(pairs)).tolist(), prob_b=draw(pairs, scale=0.2),
               classlabels_ints=list(range(10, 10 + k)), post_transform=post)


for _k, _kernel, _post in [(k, kernel, "NONE") for k in (2, 3, 5)
                           for kernel in ("LINEAR", "RBF", "POLY")] + [(3, "RBF", "SOFTMAX"),
                                                                       (2, "POLY", "LOGISTIC")]:
    case(f"SVMClassifier_proba{_k}_{_kernel}_{_post}", _svc_proba(_k, _kernel, _post),
         {"x": _PX}, outputs=[("l", np.int64, (16,)), ("z", np.float32, (16, _k))],
         opset=_ML1, rtol=0, atol=1e-6)
# linear mode: prob_a/prob_b leave the scores alone, but the two-class label becomes the
# best score's (3 on three rows where, with class 3's score the best and above 0, it was 8)
case("SVMClassifier_linear_binary_proba",
     _ml("SVMClassifier", outputs=("l", "z"),
         coefficients=[0.1, -0.2, 0.5, 0.3, -0.2, 0.1, 0.4, -0.6], rho=[0.05],
         classlabels_ints=[3, 8], kernel_params=[0.0, 0.0, 0.0], prob_a=[-1.0], prob_b=[0.1]),
     {"x": _MLX}, outputs=[("l", np.int64, (5,)), ("z", np.float32, (5, 2))], opset=_ML1,
     rtol=1e-4, atol=1e-5)
for _name, _coef in (("positive", [0.1, 0.2, 0.0, 0.3, 0.2, 0.1, 0.4, 0.0]),
                     ("mixed", [0.1, -0.2, 0.5, 0.3, -0.2, 0.1, 0.4, -0.6])):
    case(f"SVMClassifier_linear_binary_{_name}",
         _ml("SVMClassifier", outputs=("l", "z"), coefficients=_coef, rho=[0.05],
             classlabels_ints=[3, 8], kernel_params=[0.0, 0.0, 0.0]),
         {"x": _MLX}, outputs=[("l", np.int64, (5,)), ("z", np.float32, (5, 2))], opset=_ML1,
         rtol=1e-4, atol=1e-5)
case("SVMClassifier_linear_multiclass_SOFTMAX",
     _ml("SVMClassifier", outputs=("l", "z"), coefficients=f32(3, 4).reshape(-1).tolist(),
         rho=[0.05], classlabels_ints=[0, 1, 2], post_transform="SOFTMAX",
         kernel_params=[0.0, 0.0, 0.0]),
     {"x": _MLX}, outputs=[("l", np.int64, (5,)), ("z", np.float32, (5, 3))], opset=_ML1,
     rtol=1e-4, atol=1e-5)
case("SVMRegressor_linear_one_class",
     _ml("SVMRegressor", coefficients=[0.5, -1.0, 0.25, 0.1], rho=[0.1], one_class=1,
         kernel_params=[0.0, 0.0, 0.0]),
     {"x": _MLX}, outputs=[("y", np.float32, (5, 1))], opset=_ML1)
case("SVMRegressor_post_transform_ignored",     # by onnxruntime, so by xlac
     _ml("SVMRegressor", coefficients=[0.05, -0.1, 0.025, 0.01], rho=[0.5],
         post_transform="PROBIT", kernel_params=[0.0, 0.0, 0.0]),
     {"x": _MLX}, outputs=[("y", np.float32, (5, 1))], opset=_ML1)
case("SVMRegressor_RBF_one_class",
     _ml("SVMRegressor", kernel_type="RBF", kernel_params=[0.3, 0.0, 0.0], one_class=1,
         support_vectors=_SV.reshape(-1).tolist(), n_supports=6,
         coefficients=[0.5, -1.0, 0.25, 0.75, -0.5, 1.0], rho=[-0.3]),
     {"x": _MLX}, outputs=[("y", np.float32, (5, 1))], opset=_ML1)
# the deprecated forms: two trees over 3 features as (tree id, node id); leaves may weigh
# several targets
_OLD_NODES = dict(nodes_treeids=[0, 0, 0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2],
                  nodes_featureids=[0, 2, 0, 0, 0, 1, 0, 0],
                  nodes_modes=["BRANCH_LEQ", "BRANCH_LT", "LEAF", "LEAF", "LEAF", "BRANCH_GT",
                               "LEAF", "LEAF"],
                  nodes_values=[0.5, -0.2, 0, 0, 0, 0.1, 0, 0],
                  nodes_truenodeids=[1, 3, 0, 0, 0, 1, 0, 0],
                  nodes_falsenodeids=[2, 4, 0, 0, 0, 2, 0, 0],
                  nodes_missing_value_tracks_true=[0, 1, 0, 0, 0, 0, 0, 0])
_OLD_LEAVES = dict(treeids=[0, 0, 0, 0, 1, 1, 1], nodeids=[2, 2, 3, 4, 1, 2, 2],
                   ids=[0, 1, 1, 0, 0, 1, 0], weights=[1.5, -0.5, 2.0, 0.25, 3.0, -1.0, 0.5])
_OLD_X = _FOREST_X.copy()


def _old_tree(op, prefix, leaves=_OLD_LEAVES, nodes=_OLD_NODES, **attrs):
    leaf_attrs = {f"{prefix}_{k}": v for k, v in leaves.items()}
    outs = ("l", "z") if op == "TreeEnsembleClassifier" else ("y",)
    return _ml(op, outputs=outs, **nodes, **leaf_attrs, **attrs)


for _agg, _post, _base in (("SUM", "NONE", None), ("AVERAGE", "SOFTMAX", [0.1, -0.2]),
                           ("MIN", "LOGISTIC", None), ("MAX", "SOFTMAX_ZERO", [0.5, 0.0]),
                           ("SUM", "PROBIT", None), ("SUM", "NONE", [1.0, -2.0]),
                           ("MAX", "NONE", [1.0, -2.0]), ("MIN", "NONE", [1.0, -2.0])):
    _scale = dict(weights=[w * 0.1 for w in _OLD_LEAVES["weights"]]) if _post == "PROBIT" else {}
    case(f"TreeEnsembleRegressor_{_agg}_{_post}" + ("_base" if _base else ""),
         _old_tree("TreeEnsembleRegressor", "target", {**_OLD_LEAVES, **_scale}, n_targets=2,
                   aggregate_function=_agg, post_transform=_post,
                   **({"base_values": _base} if _base else {})),
         {"x": _OLD_X}, outputs=[("y", np.float32, (6, 2))], opset=_ML1, rtol=1e-4, atol=1e-5)
case("TreeEnsembleRegressor_modes_one_target",
     _old_tree("TreeEnsembleRegressor", "target",
               dict(treeids=[0, 0, 0, 1, 1], nodeids=[2, 3, 4, 1, 2], ids=[0] * 5,
                    weights=[1.0, 2.0, 3.0, 4.0, 5.0]),
               nodes={**_OLD_NODES, "nodes_modes": ["BRANCH_GTE", "BRANCH_EQ", "LEAF", "LEAF",
                                                    "LEAF", "BRANCH_NEQ", "LEAF", "LEAF"],
                      "nodes_values": [0.0, 1.0, 0, 0, 0, 2.0, 0, 0]},
               base_values=[0.5], n_targets=1),
     {"x": i64(6, 3, low=-1, high=3).astype(np.float32)}, outputs=[("y", np.float32, (6, 1))],
     opset=_ML1)
_OLD3 = dict(_OLD_LEAVES, ids=[0, 1, 2, 0, 2, 1, 0])
for _post, _base in (("NONE", None), ("SOFTMAX", [0.1, 0.0, -0.3]), ("LOGISTIC", None)):
    case(f"TreeEnsembleClassifier_3class_{_post}",
         _old_tree("TreeEnsembleClassifier", "class", _OLD3, classlabels_int64s=[5, 6, 7],
                   post_transform=_post, **({"base_values": _base} if _base else {})),
         {"x": _OLD_X}, outputs=[("l", np.int64, (6,)), ("z", np.float32, (6, 3))], opset=_ML1,
         rtol=1e-4, atol=1e-5)
# two classes: every leaf weighs both (a random forest's probabilities); only class 0
# weighed, mixed signs, one base value (gradient boosting); class 1 at some leaves only;
# two base values
_BOTH = dict(treeids=[0, 0, 0, 0, 0, 0, 1, 1, 1, 1], nodeids=[2, 2, 3, 3, 4, 4, 1, 1, 2, 2],
             ids=[0, 1] * 5, weights=[0.2, 0.8, 0.6, 0.4, 0.5, 0.5, 0.9, 0.1, 0.3, 0.7])
_ONLY0 = dict(treeids=[0, 0, 0, 1, 1], nodeids=[2, 3, 4, 1, 2], ids=[0] * 5,
              weights=[0.4, -0.7, 0.2, -0.1, 0.6])
for _name, _leaves, _post, _base in (
        ("both_NONE", _BOTH, "NONE", None), ("both_SOFTMAX", _BOTH, "SOFTMAX", None),
        ("class0_LOGISTIC_base", _ONLY0, "LOGISTIC", [-0.1]), ("class0_NONE", _ONLY0, "NONE", None),
        ("some_class1_NONE", _OLD_LEAVES, "NONE", None),
        ("some_class1_LOGISTIC", _OLD_LEAVES, "LOGISTIC", None),
        ("two_base_values", _OLD_LEAVES, "NONE", [0.25, 0.25]),
        ("both_two_base_values", _BOTH, "LOGISTIC", [0.1, 0.1])):
    case(f"TreeEnsembleClassifier_binary_{_name}",
         _old_tree("TreeEnsembleClassifier", "class", _leaves, classlabels_int64s=[3, 9],
                   post_transform=_post, **({"base_values": _base} if _base else {})),
         {"x": _OLD_X}, outputs=[("l", np.int64, (6,)), ("z", np.float32, (6, 2))], opset=_ML1,
         rtol=1e-4, atol=1e-5)
# rois (batch, x1, y1, x2, y2) given at run time: scaled and rounded corners, rois past
# the map's edge, one of a single position, one reversed (extent clamped to 1)
_ROIS = np.array([[0, 0, 0, 9, 7], [1, 2.4, 1.5, 6.6, 5.2], [0, 6, 4, 14, 12], [1, 3, 3, 3, 3],
                  [0, 5, 6, 2, 1]], np.float32)
for _shape, _scale in (([2, 3], 1.0), ([3, 2], 0.5)):
    case(f"MaxRoiPool_{_shape[0]}x{_shape[1]}_scale{_scale}",
         node("MaxRoiPool", ["x", "rois"], pooled_shape=_shape, spatial_scale=_scale),
         {"x": f32(2, 3, 8, 10), "rois": _ROIS}, opset=1)
# -- recurrent networks ----------------------------------------------------------------------
# Y, Y_h (and Y_c) against onnxruntime: sequence lengths given at run time (shorter ones
# freeze the state and zero Y; the reverse direction reverses within each length),
# initial states, peepholes, activations with alpha/beta, clip. onnxruntime has no
# layout 1: test_onnx_recurrent.py checks it against layout 0.


def _recurrent(op, gates, hidden, x, dirs=1, outs=("Y", "Y_h"), lens=None, h0=False,
               c0=False, peep=False, layout=0, bias=True, weights_as_inputs=True, **attrs):
    steps, batch, inputs = (x.shape if layout == 0 else (x.shape[1], x.shape[0], x.shape[2]))
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    values = {"X": x, "W": f32(dirs, gates * hidden, inputs) * 0.5,
              "R": f32(dirs, gates * hidden, hidden) * 0.5}
    if bias:
        values["B"] = f32(dirs, 2 * gates * hidden) * 0.3
    optional = {"sequence_lens": np.asarray(lens, np.int32) if lens is not None else None,
                "initial_h": f32(*state) if h0 else None,
                "initial_c": f32(*state) if c0 else None,
                "P": f32(dirs, 3 * hidden) * 0.3 if peep else None}
    names = ["X", "W", "R", "B"]
    for n, v in optional.items():
        if op != "LSTM" and n in ("initial_c", "P"):
            continue
        names.append(n)
        if v is not None:
            values[n] = v
    present = [n if n in values else "" for n in names]
    while present and not present[-1]:
        present.pop()
    inputs = {n: v for n, v in values.items() if weights_as_inputs or n not in ("W", "R", "B")}
    inits = {n: v for n, v in values.items() if n not in inputs}
    if dirs == 2:
        attrs.setdefault("direction", "bidirectional")
    out_names = [o if o in outs else "" for o in ("Y", "Y_h", "Y_c")[:len(outs) + 1]]
    while out_names and not out_names[-1]:
        out_names.pop()
    return dict(nodes=node(op, present, out_names, hidden_size=hidden, layout=layout, **attrs),
                inputs=inputs, outputs=list(outs), inits=inits, opset=14, rtol=1e-4, atol=1e-5)


case("LSTM_bidirectional_lengths_all_outputs",
     **_recurrent("LSTM", 4, 5, f32(6, 3, 4), dirs=2, outs=("Y", "Y_h", "Y_c"),
                  lens=[6, 2, 4], h0=True, c0=True, peep=True))
case("LSTM_reverse_lengths_constant_weights",
     **_recurrent("LSTM", 4, 3, f32(5, 3, 2), outs=("Y", "Y_h", "Y_c"), lens=[1, 5, 3],
                  h0=True, direction="reverse", weights_as_inputs=False))
case("LSTM_clip_input_forget_activations",
     **_recurrent("LSTM", 4, 4, f32(4, 2, 3) * 3, outs=("Y", "Y_h", "Y_c"), clip=1.5,
                  input_forget=1, activations=["HardSigmoid", "Tanh", "Softsign"],
                  activation_alpha=[0.3], activation_beta=[0.4]))
case("GRU_linear_before_reset_bidirectional_lengths",
     **_recurrent("GRU", 3, 4, f32(5, 2, 3), dirs=2, lens=[3, 5], h0=True,
                  linear_before_reset=1))
case("GRU_activations",
     **_recurrent("GRU", 3, 4, f32(4, 2, 3), h0=True,
                  activations=["HardSigmoid", "LeakyRelu"], activation_alpha=[0.25, 0.1],
                  activation_beta=[0.45], weights_as_inputs=False))
case("RNN_relu_reverse_lengths",
     **_recurrent("RNN", 1, 4, f32(4, 3, 2), lens=[4, 1, 2], h0=True,
                  direction="reverse", activations=["Relu"]))
case("RNN_bidirectional_no_bias",
     **_recurrent("RNN", 1, 3, f32(4, 2, 5), dirs=2, bias=False,
                  activations=["Tanh", "Sigmoid"]))

# -- control flow ----------------------------------------------------------------------------
_F = onnx.TensorProto.FLOAT


def _graph(name, nodes, ins, outs):
    return helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, t, s)
                                           for n, t, s in ins],
                             [helper.make_tensor_value_info(n, t, s) for n, t, s in outs])


# A branch reading a value of the enclosing graph computed at run time, two outputs.
case("If_runtime_condition_captures",
     [node("ReduceSum", ["x"], ["s"], keepdims=0),
      helper.make_node("Greater", ["s", "zero"], ["c"]),
      helper.make_node("Exp", ["x"], ["e"]),
      helper.make_node("If", ["c"], ["y", "z"], then_branch=_graph(
          "then", [helper.make_node("Mul", ["e", "x"], ["t1"]),
                   helper.make_node("Neg", ["x"], ["t2"])], [],
          [("t1", _F, [3, 4]), ("t2", _F, [3, 4])]),
          else_branch=_graph("else", [helper.make_node("Add", ["x", "k"], ["e1"]),
                                      helper.make_node("Abs", ["e"], ["e2"])], [],
                             [("e1", _F, [3, 4]), ("e2", _F, [3, 4])]))],
     {"x": f32(3, 4)}, outputs=["y", "z"], inits={"zero": np.array(0, np.float32),
                                                   "k": np.float32(2.5)})
# A loop with M given at run time: carried values, a captured value, no scan outputs.
case("Loop_runtime_trip_count",
     helper.make_node("Loop", ["m", "", "a"], ["y"], body=_graph(
         "body", [helper.make_node("Mul", ["a_in", "w"], ["p"]),
                  helper.make_node("Tanh", ["p"], ["a_out"]),
                  helper.make_node("Identity", ["cond_in"], ["cond_out"])],
         [("i", onnx.TensorProto.INT64, []), ("cond_in", onnx.TensorProto.BOOL, []),
          ("a_in", _F, [2, 3])],
         [("cond_out", onnx.TensorProto.BOOL, []), ("a_out", _F, [2, 3])])),
     {"m": np.array(4, np.int64), "a": f32(2, 3), "w": f32(2, 3)},
     outputs=[("y", np.float32, (2, 3))], opset=13)
# Scan along axis 1, one input reversed, a scan output stacked along axis 1 in reverse.
case("Scan_axes_and_directions",
     helper.make_node("Scan", ["s0", "x", "v"], ["s", "y"], num_scan_inputs=2,
                      scan_input_axes=[1, 0], scan_input_directions=[0, 1],
                      scan_output_axes=[1], scan_output_directions=[1], body=_graph(
         "step", [helper.make_node("Add", ["s_in", "x_t"], ["a"]),
                  helper.make_node("Mul", ["a", "v_t"], ["s_out"]),
                  helper.make_node("Sigmoid", ["s_out"], ["y_t"])],
         [("s_in", _F, [2]), ("x_t", _F, [2]), ("v_t", _F, [2])],
         [("s_out", _F, [2]), ("y_t", _F, [2])])),
     {"s0": f32(2), "x": f32(2, 5), "v": f32(5, 2, low=0.5, high=1.0)}, outputs=["s", "y"],
     opset=16)
# Nested: a Loop whose body branches on the step's parity (If) and runs a Scan over a
# value of the enclosing graph; the loop also has scan outputs (M known).
_I64 = onnx.TensorProto.INT64
case("Loop_nesting_If_and_Scan",
     helper.make_node("Loop", ["m", "", "a"], ["y", "rows"], body=_graph(
         "outer", [
             helper.make_node("Div", ["i", "two"], ["half"]),
             helper.make_node("Mul", ["half", "two"], ["even_part"]),
             helper.make_node("Sub", ["i", "even_part"], ["parity"]),
             helper.make_node("Equal", ["parity", "zero64"], ["even"]),
             helper.make_node("If", ["even"], ["b"], then_branch=_graph(
                 "double", [helper.make_node("Add", ["a_in", "a_in"], ["t"])], [],
                 [("t", _F, [4])]),
                 else_branch=_graph("shift", [helper.make_node("Sub", ["a_in", "one"], ["e"])],
                                    [], [("e", _F, [4])])),
             helper.make_node("Scan", ["b", "x"], ["a_out", "partial"], num_scan_inputs=1,
                              body=_graph("rowsum", [
                                  helper.make_node("Add", ["s_in", "row"], ["s_out"]),
                                  helper.make_node("Tanh", ["s_out"], ["p"])],
                                  [("s_in", _F, [4]), ("row", _F, [4])],
                                  [("s_out", _F, [4]), ("p", _F, [4])])),
             helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("ReduceSum", ["partial"], ["r"], keepdims=0)],
         [("i", _I64, []), ("cond_in", onnx.TensorProto.BOOL, []), ("a_in", _F, [4])],
         [("cond_out", onnx.TensorProto.BOOL, []), ("a_out", _F, [4]), ("r", _F, [])])),
     {"a": f32(4), "x": f32(3, 4)}, outputs=[("y", np.float32, (4,)), ("rows", np.float32, (3,))],
     inits={"m": np.array(3, np.int64), "two": np.array(2, np.int64),
            "zero64": np.array(0, np.int64), "one": np.float32(1)}, opset=13)
# -- sequences and optionals inside the graph (tuples of tensors at compile time) ------------
_SEQ = helper.make_tensor_sequence_value_info
_n = helper.make_node       # unnamed nodes: several of one op per model


def _seq_graph(name, nodes, ins, outs):
    """A subgraph whose inputs and outputs may be sequences: (name, elem, dims, is_seq)."""
    def info(n, t, dims, seq=False):
        return (_SEQ if seq else helper.make_tensor_value_info)(n, t, dims)
    return helper.make_graph(nodes, name, [info(*i) for i in ins], [info(*o) for o in outs])


# Construct, insert (negative position: before the last), erase the front, read from the
# back; the length as a tensor.
case("Sequence_construct_insert_erase_at",
     [_n("SequenceConstruct", ["x", "y", "z"], ["s"]),
      _n("SequenceInsert", ["s", "w", "minus1"], ["s2"]),
      _n("SequenceErase", ["s2", "zero"], ["s3"]),
      _n("SequenceAt", ["s3", "minus2"], ["a"]),
      _n("SequenceLength", ["s3"], ["n"]),
      _n("SequenceInsert", ["s3", "x"], ["s4"]),       # appended
      _n("SequenceAt", ["s4", "minus1"], ["b"]),
      _n("Add", ["a", "b"], ["out"])],
     {"x": f32(2, 3), "y": f32(2, 3), "z": f32(2, 3), "w": f32(2, 3)}, outputs=["out", "n"],
     inits={"minus1": np.array(-1, np.int64), "minus2": np.array(-2, np.int32),
            "zero": np.array(0, np.int64)}, opset=13)
# Split by a chunk size (the last chunk smaller), reordered, concatenated back; split
# one per index without the axis and stacked at a new last axis.
case("Sequence_split_reorder_concat_stack",
     [_n("SplitToSequence", ["x", "four"], ["parts"], axis=1),
      _n("SequenceAt", ["parts", "minus1"], ["tail"]),
      _n("SequenceErase", ["parts"], ["head"]),
      _n("SequenceInsert", ["head", "tail", "zero"], ["rot"]),
      _n("ConcatFromSequence", ["rot"], ["y"], axis=1),
      _n("SplitToSequence", ["x"], ["rows"], keepdims=0),
      _n("ConcatFromSequence", ["rows"], ["z"], axis=-1, new_axis=1),
      _n("SplitToSequence", ["x", "sizes"], ["cols"], axis=-1),
      _n("ConcatFromSequence", ["cols"], ["v"], axis=-1)],
     {"x": f32(3, 6)}, outputs=["y", "z", "v"],
     inits={"four": np.array(4, np.int64), "minus1": np.array(-1, np.int64),
            "zero": np.array(0, np.int64), "sizes": np.array([1, 3, 2], np.int64)}, opset=13)
# SequenceMap inlined per element: a sequence and a tensor in, two sequences out, the
# body reading a value of the enclosing graph.
case("SequenceMap_sequence_and_tensor",
     [_n("SplitToSequence", ["x"], ["rows"], keepdims=0),
      helper.make_node("SequenceMap", ["rows", "b"], ["m", "r"], body=_seq_graph(
          "body", [_n("Mul", ["e", "k"], ["p"]), _n("Add", ["p", "b_in"], ["m_out"]),
                   _n("ReduceMax", ["e"], ["r_out"], keepdims=1)],
          [("e", _F, [4]), ("b_in", _F, [4])], [("m_out", _F, [4]), ("r_out", _F, [1])])),
      _n("ConcatFromSequence", ["m"], ["y"], axis=0, new_axis=1),
      _n("ConcatFromSequence", ["r"], ["z"], axis=0)],
     {"x": f32(3, 4), "b": f32(4)}, outputs=["y", "z"], inits={"k": np.float32(1.5)},
     opset=18)
# Optionals whose presence is known: a present one read back, an empty one tested.
case("Optional_present_and_empty",
     [_n("Optional", ["x"], ["o"]),
      _n("OptionalHasElement", ["o"], ["h"]),
      _n("OptionalGetElement", ["o"], ["g"]),
      _n("Optional", [], ["none"], type=helper.make_tensor_type_proto(_F, [2])),
      _n("OptionalHasElement", ["none"], ["h0"]),
      _n("Identity", ["o"], ["o2"]),
      _n("OptionalGetElement", ["o2"], ["g2"]),
      _n("Add", ["g", "g2"], ["y"])],
     {"x": f32(2, 3)}, outputs=["y", "h", "h0"], opset=18)
# Sequences through a branch chosen at run time (same length both ways) and carried
# through a loop at a fixed length.
case("If_runtime_returns_sequences",
     [_n("ReduceSum", ["x"], ["s"], keepdims=0),
      _n("Greater", ["s", "zero"], ["c"]),
      _n("SplitToSequence", ["x"], ["rows"]),
      helper.make_node("If", ["c"], ["picked"], then_branch=_seq_graph(
          "then", [_n("SequenceErase", ["rows", "zero64"], ["t"])], [],
          [("t", _F, [1, 4], True)]),
          else_branch=_seq_graph("else", [_n("Neg", ["x"], ["nx"]),
                                          _n("SplitToSequence", ["nx"], ["ns"]),
                                          _n("SequenceErase", ["ns", "minus1"], ["e"])],
                                 [], [("e", _F, [1, 4], True)])),
      _n("ConcatFromSequence", ["picked"], ["y"], axis=0)],
     {"x": f32(3, 4)}, inits={"zero": np.float32(0), "zero64": np.array(0, np.int64),
                              "minus1": np.array(-1, np.int64)}, opset=13)
case("Loop_carries_a_sequence_of_fixed_length",
     [_n("SequenceConstruct", ["a", "b"], ["s0"]),
      helper.make_node("Loop", ["m", "", "s0"], ["s"], body=_seq_graph(
          "body", [_n("SequenceAt", ["s_in", "zero64"], ["p"]),
                   _n("SequenceAt", ["s_in", "one64"], ["q"]),
                   _n("Add", ["p", "q"], ["pq"]),
                   _n("Tanh", ["pq"], ["p2"]),
                   _n("Mul", ["p", "half"], ["q2"]),
                   _n("SequenceConstruct", ["p2", "q2"], ["s_out"]),
                   _n("Identity", ["cond_in"], ["cond_out"])],
          [("i", _I64, []), ("cond_in", onnx.TensorProto.BOOL, []), ("s_in", _F, [3], True)],
          [("cond_out", onnx.TensorProto.BOOL, []), ("s_out", _F, [3], True)])),
      _n("ConcatFromSequence", ["s"], ["y"], axis=0)],
     {"a": f32(3), "b": f32(3), "m": np.array(3, np.int64)},
     inits={"zero64": np.array(0, np.int64), "one64": np.array(1, np.int64),
            "half": np.float32(0.5)}, opset=13)
# A loop that grows a sequence, unrolled (its trip count known): element i is x + i, and a
# scan output beside it.
case("Loop_unrolled_grows_a_sequence",
     [_n("SequenceEmpty", [], ["s0"]),
      helper.make_node("Loop", ["m", "", "s0"], ["s", "rows"], body=_seq_graph(
          "body", [_n("Cast", ["i"], ["fi"], to=_F),
                   _n("Add", ["x", "fi"], ["xi"]),
                   _n("SequenceInsert", ["s_in", "xi"], ["s_out"]),
                   _n("Mul", ["x", "fi"], ["row"]),
                   _n("Identity", ["cond_in"], ["cond_out"])],
          [("i", _I64, []), ("cond_in", onnx.TensorProto.BOOL, []), ("s_in", _F, [3], True)],
          [("cond_out", onnx.TensorProto.BOOL, []), ("s_out", _F, [3], True),
           ("row", _F, [3])])),
      _n("ConcatFromSequence", ["s"], ["y"], axis=0, new_axis=1)],
     {"x": f32(3)}, outputs=[("y", np.float32, [4, 3]), ("rows", np.float32, [4, 3])],
     inits={"m": np.array(4, np.int64)}, opset=13)
# -- indexing: gathers and scatters ----------------------------------------------------------
case("GatherElements_axis1_negative", node("GatherElements", ["x", "i"], axis=1),
     {"x": f32(3, 4), "i": i64(3, 2, low=-4, high=4)})
case("GatherElements_smaller_indices", node("GatherElements", ["x", "i"]),
     {"x": f32(4, 3), "i": i64(2, 2, low=-4, high=4)})
case("GatherND_batch_dims1", node("GatherND", ["x", "i"], batch_dims=1),
     {"x": f32(2, 3, 4), "i": i64(2, 2, 1, low=-3, high=3)})
case("GatherND_slices_negative", node("GatherND", ["x", "i"]),
     {"x": f32(3, 4, 2), "i": np.array([[0, -1], [2, 1]], np.int64)})
# Scatters into a computed value (overwritten in place) and into a model input (copied).
case("ScatterElements_axis1_add_duplicates",
     [node("Abs", ["x"], ["d"]), node("ScatterElements", ["d", "i", "u"], axis=1,
                                      reduction="add")],
     {"x": f32(3, 5), "i": np.array([[1, 1, -1], [0, 4, 0], [2, 2, 2]], np.int64),
      "u": f32(3, 3)}, opset=18)
case("ScatterElements_in_arena_feeding_matmul",
     [node("Abs", ["x"], ["d"]), node("ScatterElements", ["d", "i", "u"], ["s"], axis=1),
      node("Transpose", ["s"], ["t"]), node("MatMul", ["s", "t"])],
     {"x": f32(4, 5), "i": np.array([[4], [0], [2], [2]], np.int64), "u": f32(4, 1)},
     rtol=1e-4, atol=1e-5)
case("ScatterElements_smaller_indices_max",
     node("ScatterElements", ["x", "i", "u"], axis=1, reduction="max"),
     {"x": f32(4, 5), "i": i64(2, 3, low=0, high=5), "u": f32(2, 3)}, opset=18)
case("ScatterND_mul_slices", node("ScatterND", ["x", "i", "u"], reduction="mul"),
     {"x": f32(4, 3, 2), "i": np.array([[1], [-1], [1]], np.int64), "u": f32(3, 3, 2)},
     opset=18)
case("ScatterND_elements", node("ScatterND", ["x", "i", "u"]),
     {"x": f32(3, 4), "i": np.array([[0, 1], [2, -1], [1, 0]], np.int64), "u": f32(3)})
case("Scatter_v10", node("Scatter", ["x", "i", "u"], axis=0),
     {"x": f32(3, 3), "i": np.array([[1, 0, 2], [0, 2, 1]], np.int64), "u": f32(2, 3)},
     opset=10)
case("ArrayFeatureExtractor", helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"],
                                                domain="ai.onnx.ml", name="afe_0"),
     {"x": f32(2, 3, 5)}, inits={"i": np.array([[4, 0, 4]], np.int64)},
     opset={"": 13, "ai.onnx.ml": 1})
case("TensorScatter_circular", node("TensorScatter", ["c", "u", "w"], mode="circular", axis=2),
     {"c": f32(2, 3, 5, 4), "u": f32(2, 3, 3, 4), "w": np.array([1, 4], np.int64)}, opset=24)
case("Compress_axis1", node("Compress", ["x", "c"], axis=1), {"x": f32(2, 5)},
     inits={"c": np.array([True, False, True, True], np.bool_)})
case("OneHot_axis0", node("OneHot", ["i", "d", "v"], axis=0),
     {"i": np.array([[1, -1], [7, -3]], np.int64)},
     inits={"d": np.array(4, np.int64), "v": np.array([2, 5], np.float32)}, opset=11)
case("ReverseSequence_batch_axis0",
     node("ReverseSequence", ["x", "l"], time_axis=1, batch_axis=0),
     {"x": f32(3, 5, 2), "l": np.array([5, 1, 3], np.int64)}, opset=10)
# Flat indices over the whole unpooled (2, 3, 4, 6) tensor, one in each 2x2 window, as
# MaxPool gives them. (With an output_shape input onnxruntime reads them in that shape,
# the ONNX reference in the unpooled one, then pads: xlac follows the reference.)
_N, _C, _PH, _PW = np.indices((2, 3, 2, 3))
_UNPOOL_I = ((_N * 3 + _C) * 4 + 2 * _PH + _RNG.integers(0, 2, _N.shape)) * 6 \
    + 2 * _PW + _RNG.integers(0, 2, _N.shape)
case("MaxUnpool", node("MaxUnpool", ["x", "i"], kernel_shape=[2, 2], strides=[2, 2]),
     {"x": f32(2, 3, 2, 3), "i": _UNPOOL_I.astype(np.int64)}, opset=11)
case("MaxUnpool_of_MaxPool_indices",
     [node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 3], strides=[2, 2]),
      node("MaxUnpool", ["p", "i"], kernel_shape=[2, 3], strides=[2, 2])],
     {"x": f32(2, 3, 6, 7)}, opset=11)

# -- splits, pads, rearrangements, generated tensors --------------------------------------------
case("Split_v18_uneven", node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3),
     {"x": f32(2, 7)}, outputs=("a", "b", "c"), opset=18)
case("Split_v13_sizes", node("Split", ["x", "s"], ["a", "b"]), {"x": f32(5, 2)},
     inits={"s": np.array([1, 4], np.int64)}, outputs=("a", "b"))
case("Pad_reflect_axes", node("Pad", ["x", "p", "", "a"], mode="reflect"), {"x": f32(2, 4, 5)},
     inits={"p": np.array([2, 1, 3, 0], np.int64), "a": np.array([1, -1], np.int64)},
     opset=18)
case("Pad_edge_and_crop", node("Pad", ["x", "p"], mode="edge"), {"x": f32(3, 4)},
     inits={"p": np.array([-1, 2, 3, -2], np.int64)})
case("Pad_wrap", node("Pad", ["x", "p"], mode="wrap"), {"x": f32(2, 3)},
     inits={"p": np.array([1, 2, 0, 4], np.int64)}, opset=19)
case("Pad_constant_value_input", node("Pad", ["x", "p", "v"]),
     {"x": f32(2, 3), "v": np.array(1.5, np.float32)},
     inits={"p": np.array([0, 1, 1, -1], np.int64)})
case("CenterCropPad", node("CenterCropPad", ["x", "s"], axes=[0, 2]), {"x": f32(5, 2, 4)},
     inits={"s": np.array([2, 7], np.int64)}, opset=18)
case("DepthToSpace_CRD", node("DepthToSpace", ["x"], blocksize=2, mode="CRD"),
     {"x": f32(1, 8, 2, 3)})
case("SpaceToDepth", node("SpaceToDepth", ["x"], blocksize=2), {"x": f32(2, 2, 4, 6)})
case("Trilu_lower_k_neg1", node("Trilu", ["x", "k"], upper=0), {"x": f32(2, 4, 5)},
     inits={"k": np.array(-1, np.int64)}, opset=14)
case("Trilu_upper", node("Trilu", ["x"]), {"x": i64(5, 3)}, opset=14)
case("EyeLike_k1_int32", node("EyeLike", ["x"], k=1, dtype=onnx.TensorProto.INT32),
     {"x": f32(3, 4)})
case("Range_float", node("Range", ["s", "l", "d"]), {},
     inits={"s": np.array(1.5, np.float32), "l": np.array(-2, np.float32),
            "d": np.array(-0.75, np.float32)}, opset=11)

# -- image: Resize, GridSample, AffineGrid, RoiAlign, Col2Im -----------------------------------
_IMG_SMALL = f32(1, 2, 5, 6)
for _name, _attrs, _scales in [
        ("linear_downsample", dict(mode="linear"), [1, 1, 0.6, 0.5]),
        # (onnxruntime and the ONNX reference differ on align_corners when scale * size
        # is fractional; xlac follows the reference, the backend tests' oracle)
        ("linear_align_corners", dict(mode="linear", coordinate_transformation_mode="align_corners"),
         [1, 1, 1.6, 2]),
        ("cubic_exclude_outside", dict(mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5),
         [1, 1, 2, 1.5]),
        ("nearest_ceil_asymmetric", dict(mode="nearest", nearest_mode="ceil",
                                         coordinate_transformation_mode="asymmetric"),
         [1, 1, 1.7, 0.8]),
        ("linear_antialias", dict(mode="linear", antialias=1), [1, 1, 0.4, 0.5])]:
    case(f"Resize_{_name}", node("Resize", ["x", "", "s"], **_attrs), {"x": _IMG_SMALL},
         inits={"s": np.array(_scales, np.float32)}, opset=19, rtol=1e-4, atol=1e-5)
case("Resize_sizes_cubic_axes", node("Resize", ["x", "", "", "z"], mode="cubic", axes=[3, 2]),
     {"x": _IMG_SMALL}, inits={"z": np.array([9, 3], np.int64)}, opset=19, rtol=1e-4,
     atol=1e-5)
case("Resize_tf_crop_and_resize", node("Resize", ["x", "r", "", "z"], mode="linear",
                                       coordinate_transformation_mode="tf_crop_and_resize",
                                       extrapolation_value=-3.0),
     {"x": _IMG_SMALL}, inits={"r": np.array([0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3], np.float32),
                               "z": np.array([1, 2, 4, 4], np.int64)},
     opset=13, rtol=1e-4, atol=1e-5)
case("Resize_uint8_linear", node("Resize", ["x", "", "s"], mode="linear"),
     {"x": _RNG.integers(0, 256, (1, 1, 4, 5)).astype(np.uint8)},
     inits={"s": np.array([1, 1, 1.5, 1.5], np.float32)}, opset=13, atol=1)
case("Upsample_v9_nearest", node("Upsample", ["x", "s"]), {"x": f32(1, 2, 2, 3)},
     inits={"s": np.array([1, 1, 2, 3], np.float32)}, opset=9)
_GRID = f32(2, 3, 4, 2, low=-1.3, high=1.3)
# (bicubic with border or reflection padding: onnxruntime clamps or reflects each tap as
# PyTorch does, the ONNX reference the sampling position; xlac follows the reference)
for _mode, _padding, _align in [("bilinear", "zeros", 0), ("bicubic", "zeros", 1),
                                ("nearest", "border", 0), ("nearest", "reflection", 1),
                                ("bilinear", "reflection", 0), ("bilinear", "border", 1)]:
    case(f"GridSample_{_mode}_{_padding}_align{_align}",
         node("GridSample", ["x", "g"], mode=_mode, padding_mode=_padding,
              align_corners=_align),
         {"x": f32(2, 3, 4, 5), "g": _GRID}, opset=16, rtol=1e-4, atol=1e-5)
case("AffineGrid_2d", node("AffineGrid", ["t", "s"], align_corners=0), {"t": f32(2, 2, 3)},
     inits={"s": np.array([2, 3, 4, 5], np.int64)}, opset=20, rtol=1e-5, atol=1e-6)
case("AffineGrid_3d_align_corners", node("AffineGrid", ["t", "s"], align_corners=1),
     {"t": f32(1, 3, 4)}, inits={"s": np.array([1, 1, 2, 3, 4], np.int64)}, opset=20,
     rtol=1e-5, atol=1e-6)
_ROIS = np.array([[0.5, 1.0, 6.5, 5.0], [2.0, 0.0, 4.0, 7.5], [-1.0, 3.0, 9.0, 12.0]],
                 np.float32)
case("RoiAlign_avg_half_pixel", node("RoiAlign", ["x", "r", "b"], output_height=3,
                                     output_width=2, sampling_ratio=2, spatial_scale=0.8),
     {"x": f32(2, 3, 8, 9), "r": _ROIS, "b": np.array([1, 0, 1], np.int64)}, opset=16,
     rtol=1e-4, atol=1e-5)
case("RoiAlign_max_adaptive_grid", node("RoiAlign", ["x", "r", "b"], output_height=2,
                                        output_width=3, mode="max",
                                        coordinate_transformation_mode="output_half_pixel"),
     {"x": f32(1, 2, 8, 9), "b": np.array([0, 0, 0], np.int64)}, inits={"r": _ROIS},
     opset=16, rtol=1e-4, atol=1e-5)
case("Col2Im_strides_pads_dilations",
     node("Col2Im", ["x", "i", "k"], strides=[2, 1], pads=[1, 0, 0, 1], dilations=[1, 2]),
     {"x": f32(2, 12, 9)}, inits={"i": np.array([5, 6], np.int64),
                                   "k": np.array([2, 3], np.int64)}, opset=18)
# -- quantization ------------------------------------------------------------------------
_MS = {"": 13, "com.microsoft": 1}


def q8(*shape, dtype=np.int8):
    info = np.iinfo(dtype)
    return _RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def q7(*shape):
    """s8 weights of 7 bits (q8's draws halved) for u8 activations: onnxruntime's u8 x s8
    kernels without VNNI (AVX2) add pairs of products in saturating i16, exact only so (its
    reduce_range): the oracle is then the same on every x86."""
    return q8(*shape) // 2


def _scale(*shape):
    return _RNG.uniform(0.01, 0.05, shape).astype(np.float32) if shape \
        else np.float32(_RNG.uniform(0.01, 0.05))


case("QuantizeLinear_per_axis_int8", node("QuantizeLinear", ["x", "s", "z"], axis=1),
     {"x": f32(2, 3, 4) * 3}, inits={"s": _scale(3), "z": np.array([-3, 0, 5], np.int8)})
case("QuantizeLinear_uint8_default_zero_point", node("QuantizeLinear", ["x", "s"]),
     {"x": f32(2, 3, 4) * 3}, inits={"s": _scale()}, opset=10)
case("DequantizeLinear_per_axis_int8", node("DequantizeLinear", ["x", "s", "z"], axis=0),
     {"x": q8(3, 5)}, inits={"s": _scale(3), "z": np.array([1, 0, -4], np.int8)})
case("DynamicQuantizeLinear", node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]),
     {"x": f32(4, 6)}, outputs=("y", "s", "z"), opset=11)
# the range always holds 0: all positive gives zero point 0, all negative 255; all 0 a
# scale of 1 (onnxruntime's; the spec divides by 0); .5 steps round to even
_DQL_X = {"all_positive": np.arange(1, 25, dtype=np.float32).reshape(4, 6) / 7,
          "all_negative": -np.arange(1, 25, dtype=np.float32).reshape(4, 6) / 7,
          "all_zero": np.zeros((4, 6), np.float32),
          "half_steps": np.array([[0.5, 1.5, 2.5, -0.5, 255, 0]], np.float32)}
for _name, _x in _DQL_X.items():
    case(f"DynamicQuantizeLinear_{_name}",
         node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]), {"x": _x},
         outputs=("y", "s", "z"), opset=11)
case("MatMulInteger_zero_points", node("MatMulInteger", ["a", "b", "za", "zb"]),
     {"a": q8(3, 7, dtype=np.uint8), "b": q7(7, 4)},
     inits={"za": np.uint8(131), "zb": np.int8(-2)}, opset=10)
case("ConvInteger_zero_points", node("ConvInteger", ["x", "w", "zx", "zw"], pads=[1, 1, 1, 1]),
     {"x": q8(1, 2, 5, 5, dtype=np.uint8)},
     inits={"w": q8(3, 2, 3, 3, dtype=np.uint8), "zx": np.uint8(120), "zw": np.uint8(100)},
     opset=10)
case("QLinearConv_s8_per_channel_bias", node(
    "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], pads=[1, 0, 1, 2],
    strides=[2, 1]),
    {"x": q8(1, 3, 7, 6)},
    inits={"xs": _scale(), "xz": np.int8(-7), "w": q8(4, 3, 3, 3), "ws": _scale(4),
           "wz": np.zeros(4, np.int8), "ys": np.float32(0.3), "yz": np.int8(5),
           "b": _RNG.integers(-2000, 2000, 4).astype(np.int32)}, opset=10)
case("QLinearConv_u8_depthwise", node(
    "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], pads=[1, 1, 1, 1], group=4),
    {"x": q8(1, 4, 6, 6, dtype=np.uint8)},
    inits={"xs": _scale(), "xz": np.uint8(128), "w": q8(4, 1, 3, 3, dtype=np.uint8),
           "ws": _scale(), "wz": np.uint8(120), "ys": np.float32(0.02), "yz": np.uint8(100)},
    opset=10)
case("QLinearMatMul_u8", node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]),
     {"a": q8(2, 3, 8, dtype=np.uint8)},
     inits={"as": _scale(), "az": np.uint8(125), "b": q8(8, 5, dtype=np.uint8),
            "bs": _scale(), "bz": np.uint8(130), "ys": np.float32(0.05), "yz": np.uint8(128)},
     opset=10)


def _ms_case(name, op, ins, inputs, inits, out, **attrs):
    """ONNX's shape inference does not know com.microsoft's ops: ``out`` is (dtype, dims)."""
    case(name, node(op, ins, domain="com.microsoft", **attrs), inputs,
         outputs=[("y",) + tuple(out)], inits=inits, opset=_MS)


_QX = q8(1, 3, 4, 5)
_QP = {"xs": _scale(), "xz": np.int8(3), "ys": np.float32(0.03), "yz": np.int8(-2)}
for _op, _ins in (("QLinearAdd", ["a", "xs", "xz", "b", "bs", "bz", "ys", "yz"]),
                  ("QLinearMul", ["a", "xs", "xz", "b", "bs", "bz", "ys", "yz"])):
    _ms_case(_op, _op, _ins, {"a": _QX, "b": q8(3, 1, 1)},
             {**_QP, "bs": _scale(), "bz": np.int8(-1)}, (np.int8, _QX.shape))
for _op in ("QLinearSigmoid", "QLinearLeakyRelu"):
    _ms_case(_op, _op, ["x", "xs", "xz", "ys", "yz"], {"x": _QX},
             {**_QP, "ys": np.float32(1 / 256), "yz": np.int8(-128)}, (np.int8, _QX.shape))
_ms_case("QLinearGlobalAveragePool", "QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"],
         {"x": _QX}, _QP, (np.int8, (1, 3, 1, 1)))
_ms_case("QLinearGlobalAveragePool_channels_last", "QLinearGlobalAveragePool",
         ["x", "xs", "xz", "ys", "yz"], {"x": _QX}, _QP, (np.int8, (1, 1, 1, 5)),
         channels_last=1)
_ms_case("QLinearAveragePool", "QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], {"x": _QX},
         _QP, (np.int8, (1, 3, 4, 3)), kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 1])
_ms_case("QLinearSoftmax", "QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], {"x": _QX},
         {**_QP, "ys": np.float32(1 / 256), "yz": np.int8(-128)}, (np.int8, _QX.shape),
         axis=-1, opset=13)
_ms_case("QLinearConcat", "QLinearConcat", ["ys", "yz", "a", "xs", "xz", "b", "bs", "bz"],
         {"a": _QX, "b": q8(1, 2, 4, 5)}, {**_QP, "bs": _scale(), "bz": np.int8(0)},
         (np.int8, (1, 5, 4, 5)), axis=1)
_ms_case("QGemm_requantized", "QGemm", ["a", "as", "az", "b", "bs", "bz", "c", "ys", "yz"],
         {"a": q8(3, 6, dtype=np.uint8)},
         {"as": _scale(), "az": np.uint8(128), "b": q7(4, 6), "bs": _scale(4),
          "bz": np.zeros(4, np.int8), "c": _RNG.integers(-500, 500, 4).astype(np.int32),
          "ys": np.float32(0.01), "yz": np.uint8(120)}, (np.uint8, (3, 4)), transB=1,
         alpha=0.5)
_ms_case("QGemm_float_output", "QGemm", ["a", "as", "az", "b", "bs", "bz", "c"],
         {"a": q8(3, 6, dtype=np.uint8)},
         {"as": _scale(), "az": np.uint8(128), "b": q7(6, 4), "bs": _scale(),
          "bz": np.int8(0), "c": _RNG.integers(-500, 500, 4).astype(np.int32)},
         (np.float32, (3, 4)))


# -- onnxruntime's roundings, equal to the bit ----------------------------------------------
# onnxruntime's table arithmetic: with the usual 1/255 the largest value is yz + 254
_ms_case("QLinearSoftmax_scale_1_255", "QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"],
         {"x": np.concatenate([_QX, np.full((1, 3, 4, 1), 127, np.int8)], axis=3)},
         {**_QP, "xs": np.float32(0.2), "ys": np.float32(1 / 255), "yz": np.int8(-128)},
         (np.int8, (1, 3, 4, 6)), axis=-1, opset=13)
_ms_case("QLinearSoftmax_u8_opset12", "QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"],
         {"x": q8(2, 3, 4, 5, dtype=np.uint8)},
         {"xs": np.float32(0.05), "xz": np.uint8(128), "ys": np.float32(1 / 255),
          "yz": np.uint8(0)}, (np.uint8, (2, 3, 4, 5)), axis=1, opset=12)


# -- onnxruntime's contrib ops (com.microsoft), as its transformer tools write them --------
# ONNX's shape inference does not know them: outputs are (name, dtype, dims).

def _ort_case(name, op, ins, inputs, outs, inits=None, rtol=1e-5, atol=1e-6, reference=None,
              reference_opset=13, domain="com.microsoft", opset=_MS, **attrs):
    case(name, node(op, ins, [o[0] for o in outs], domain=domain, **attrs), inputs,
         outputs=[o for o in outs if o[0]], inits=inits, opset=opset, rtol=rtol, atol=atol, reference=reference,
         reference_opset=reference_opset)


_H = f32(2, 3, 8)
_GELU_TOL = {"rtol": 1e-4, "atol": 1e-5}
_ort_case("ms_Gelu", "Gelu", ["x"], {"x": _H * 3}, [("y", np.float32, _H.shape)], **_GELU_TOL)
_ort_case("BiasGelu", "BiasGelu", ["x", "b"], {"x": _H * 3}, [("y", np.float32, _H.shape)],
          inits={"b": f32(8)}, **_GELU_TOL)
_ort_case("FastGelu_bias", "FastGelu", ["x", "b"], {"x": _H * 3},
          [("y", np.float32, _H.shape)], inits={"b": f32(8)}, **_GELU_TOL)
_ort_case("FastGelu", "FastGelu", ["x"], {"x": _H * 3}, [("y", np.float32, _H.shape)],
          **_GELU_TOL)
_ort_case("QuickGelu", "QuickGelu", ["x"], {"x": _H * 3}, [("y", np.float32, _H.shape)],
          **_GELU_TOL)
_ort_case("QuickGelu_alpha", "QuickGelu", ["x"], {"x": _H * 3}, [("y", np.float32, _H.shape)],
          alpha=0.8, **_GELU_TOL)
_ort_case("BiasAdd", "BiasAdd", ["x", "b", "s"], {"x": _H, "s": f32(2, 3, 8)},
          [("y", np.float32, _H.shape)], inits={"b": f32(8)},
          reference=[node("Add", ["x", "b"], ["xb"], name="bias"), node("Add", ["xb", "s"])])
_ort_case("BiasSoftmax_inner", "BiasSoftmax", ["x", "m"], {"x": f32(2, 3, 4, 5) * 3},
          [("y", np.float32, (2, 3, 4, 5))], inits={"m": f32(2, 1, 1, 5) * 3}, axis=3,
          is_inner_broadcast=1,
          reference=[node("Add", ["x", "m"], ["xm"]), node("Softmax", ["xm"], axis=3)])
_ort_case("BiasSoftmax_outer_two_dims", "BiasSoftmax", ["x", "m"], {"x": f32(2, 3, 4, 5) * 3},
          [("y", np.float32, (2, 3, 4, 5))], inits={"m": f32(3, 4, 5) * 3}, axis=2,
          is_inner_broadcast=0,
          reference=[node("Add", ["x", "m"], ["xm"]), node("Softmax", ["xm"], axis=2)],
          reference_opset=11)     # before 13, Softmax runs over every dim from axis on
for _name, _dims, _a, _b, _attrs in [
        ("trans", (2, 3, 4), f32(2, 5, 3), f32(2, 4, 5), {"transA": 1, "transB": 1, "alpha": 0.5}),
        ("transBatchA", (2, 3, 5), f32(3, 2, 4), f32(2, 4, 5), {"transBatchA": 1}),
        ("transBatchB_transB", (2, 3, 5), f32(2, 3, 4), f32(5, 2, 4), {"transBatchB": 1, "transB": 1}),
        ("transBatch_4d", (2, 2, 3, 5), f32(3, 2, 2, 4), f32(2, 2, 4, 5), {"transBatchA": 1, "alpha": 2.0}),
        ("matrix_by_batch", (2, 3, 5), f32(4, 3), f32(2, 4, 5), {"transA": 1})]:
    _ort_case(f"FusedMatMul_{_name}", "FusedMatMul", ["a", "b"], {"a": _a, "b": _b},
              [("y", np.float32, _dims)], atol=1e-5, **_attrs)
_X4 = f32(1, 3, 6, 6)
_ort_case("FusedConv_relu", "FusedConv", ["x", "w", "b"], {"x": _X4}, [("y", np.float32, (1, 4, 6, 6))],
          inits={"w": f32(4, 3, 3, 3), "b": f32(4)}, pads=[1, 1, 1, 1], activation="Relu",
          atol=1e-5)
_ort_case("FusedConv_sum_leaky_relu", "FusedConv", ["x", "w", "b", "z"],
          {"x": _X4, "z": f32(1, 4, 3, 3)}, [("y", np.float32, (1, 4, 3, 3))],
          inits={"w": f32(4, 3, 3, 3), "b": f32(4)}, strides=[2, 2], pads=[1, 1, 0, 0],
          activation="LeakyRelu", activation_params=[0.2], atol=1e-5)
_ort_case("FusedConv_depthwise_clip", "FusedConv", ["x", "w"], {"x": _X4},
          [("y", np.float32, (1, 3, 4, 4))], inits={"w": f32(3, 1, 3, 3)}, group=3,
          activation="Clip", activation_params=[-0.5, 1.0], atol=1e-5)
_ort_case("FusedConv_hard_sigmoid", "FusedConv", ["x", "w"], {"x": _X4},
          [("y", np.float32, (1, 2, 6, 6))], inits={"w": f32(2, 3, 1, 1)}, activation="HardSigmoid",
          activation_params=[0.3, 0.4], atol=1e-5)
_ort_case("FusedConv_sigmoid_no_activation_params", "FusedConv", ["x", "w"], {"x": _X4},
          [("y", np.float32, (1, 2, 2, 2))], inits={"w": f32(2, 3, 3, 3)}, activation="Sigmoid",
          dilations=[2, 2], atol=1e-5)
_ort_case("FusedConv_tanh", "FusedConv", ["x", "w"], {"x": _X4}, [("y", np.float32, (1, 2, 6, 6))],
          inits={"w": f32(2, 3, 3, 3)}, activation="Tanh", auto_pad="SAME_UPPER", atol=1e-5)
_ort_case("FusedConv_no_activation", "FusedConv", ["x", "w"], {"x": _X4},
          [("y", np.float32, (1, 2, 4, 4))], inits={"w": f32(2, 3, 3, 3)}, atol=1e-5)
_W_NHWC = f32(4, 3, 3, 3)
_ort_case("NhwcConv", "NhwcConv", ["x", "w", "b"], {"x": f32(1, 7, 6, 3)},
          [("y", np.float32, (1, 4, 3, 4))], inits={"w": _W_NHWC, "b": f32(4)},
          strides=[2, 2], pads=[1, 1, 1, 1], atol=1e-5,
          reference=[node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
                     node("Transpose", ["w"], ["wt"], name="wt", perm=[0, 3, 1, 2]),
                     node("Conv", ["xt", "wt", "b"], ["yt"], strides=[2, 2], pads=[1, 1, 1, 1]),
                     node("Transpose", ["yt"], name="yt", perm=[0, 2, 3, 1])])
_SKIP_OUTS = [("y", np.float32, (2, 3, 8)), ("mean", np.float32, (2, 3, 1)),
              ("inv_std_var", np.float32, (2, 3, 1)), ("sum", np.float32, (2, 3, 8))]
_NORM_TOL = {"rtol": 1e-4, "atol": 1e-5}
_ort_case("SkipLayerNormalization_all_outputs", "SkipLayerNormalization",
          ["x", "s", "g", "beta", "bias"], {"x": _H, "s": f32(2, 3, 8)}, _SKIP_OUTS,
          inits={"g": f32(8), "beta": f32(8), "bias": f32(8)}, epsilon=1e-5, **_NORM_TOL)
_ort_case("SkipLayerNormalization_skip_2d_no_beta", "SkipLayerNormalization", ["x", "s", "g"],
          {"x": _H, "s": f32(3, 8)}, _SKIP_OUTS[:1], inits={"g": f32(8)}, **_NORM_TOL)
_ort_case("SkipLayerNormalization_sum_only", "SkipLayerNormalization",
          ["x", "s", "g", "", "bias"], {"x": _H, "s": f32(1, 3, 8)},
          [("y", np.float32, (2, 3, 8)), ("", None, None), ("", None, None),
           ("sum", np.float32, (2, 3, 8))], inits={"g": f32(8), "bias": f32(8)}, **_NORM_TOL)
_ort_case("SkipLayerNormalization_f16", "SkipLayerNormalization", ["x", "s", "g", "beta"],
          {"x": _H.astype(np.float16), "s": f32(2, 3, 8).astype(np.float16)},
          [("y", np.float16, (2, 3, 8)), ("", None, None), ("", None, None),
           ("sum", np.float16, (2, 3, 8))],
          inits={"g": f32(8).astype(np.float16), "beta": f32(8).astype(np.float16)},
          rtol=2e-3, atol=2e-3)
_ort_case("SkipSimplifiedLayerNormalization_outputs", "SkipSimplifiedLayerNormalization",
          ["x", "s", "g", "bias"], {"x": _H, "s": f32(2, 3, 8)},
          [_SKIP_OUTS[0], ("", None, None)] + _SKIP_OUTS[2:],
          inits={"g": f32(8), "bias": f32(8)}, epsilon=1e-5, **_NORM_TOL)
_ort_case("SimplifiedLayerNormalization", "SimplifiedLayerNormalization", ["x", "g"],
          {"x": _H}, [("y", np.float32, (2, 3, 8)), ("inv_std_var", np.float32, (2, 3, 1))],
          inits={"g": f32(8)}, domain="", opset=17, **_NORM_TOL)
_ort_case("SimplifiedLayerNormalization_axis1", "SimplifiedLayerNormalization", ["x", "g"],
          {"x": _H}, [("y", np.float32, (2, 3, 8))], inits={"g": f32(3, 8)}, axis=1,
          epsilon=1e-3, domain="", opset=17, **_NORM_TOL)
_IDS = np.array([[3, 0, 7, 9, 1], [2, 2, 5, 8, 4]], np.int32)
_EMBED = {"word": f32(10, 8), "pos": f32(6, 8), "seg": f32(2, 8), "g": f32(8), "beta": f32(8)}
_ort_case("EmbedLayerNormalization_segments_mask_positions", "EmbedLayerNormalization",
          ["ids", "segs", "word", "pos", "seg", "g", "beta", "mask", "pids"],
          {"ids": _IDS, "segs": np.array([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]], np.int32),
           "mask": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32),
           "pids": np.array([[0, 1, 2, 3, 4], [5, 4, 3, 2, 1]], np.int32)},
          [("y", np.float32, (2, 5, 8)), ("mask_index", np.int32, (2,)),
           ("sum", np.float32, (2, 5, 8))], inits=_EMBED, epsilon=1e-5, mask_index_type=1,
          **_NORM_TOL)
_ort_case("EmbedLayerNormalization_positions_1xS", "EmbedLayerNormalization",
          ["ids", "", "word", "pos", "", "g", "beta", "", "pids"],
          {"ids": _IDS, "pids": np.array([[1, 2, 3, 4, 5]], np.int32)},
          [("y", np.float32, (2, 5, 8)), ("mask_index", np.int32, (2,))],
          inits={k: v for k, v in _EMBED.items() if k != "seg"}, **_NORM_TOL)
_ort_case("EmbedLayerNormalization_default_positions", "EmbedLayerNormalization",
          ["ids", "", "word", "pos", "", "g", "beta"], {"ids": _IDS},
          [("y", np.float32, (2, 5, 8))], inits={k: v for k, v in _EMBED.items() if k != "seg"},
          mask_index_type=0, **_NORM_TOL)
_ATT_X = f32(2, 4, 16)
_ATT_W = {"w": f32(16, 48) * 0.5, "bqkv": f32(48)}
_ATT_TOL = {"rtol": 1e-4, "atol": 1e-5}
_ort_case("Attention_sequence_lengths", "Attention", ["x", "w", "bqkv", "m"],
          {"x": _ATT_X, "m": np.array([4, 2], np.int32)}, [("y", np.float32, (2, 4, 16))],
          inits=_ATT_W, num_heads=2, **_ATT_TOL)
_ort_case("Attention_end_and_start", "Attention", ["x", "w", "bqkv", "m"],
          {"x": _ATT_X, "m": np.array([3, 4, 1, 0], np.int32)}, [("y", np.float32, (2, 4, 16))],
          inits=_ATT_W, num_heads=4, **_ATT_TOL)
_ort_case("Attention_past_causal_raw_mask", "Attention", ["x", "w", "bqkv", "m", "past"],
          {"x": _ATT_X, "m": np.array([[0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 0]], np.int32),
           "past": f32(2, 2, 2, 3, 8)},
          [("y", np.float32, (2, 4, 16)), ("present", np.float32, (2, 2, 2, 7, 8))],
          inits=_ATT_W, num_heads=2, unidirectional=1, **_ATT_TOL)
_ort_case("Attention_3d_mask_bias_scale", "Attention", ["x", "w", "", "m", "", "ab"],
          {"x": _ATT_X, "m": boolean(2, 4, 4).astype(np.int32), "ab": f32(1, 2, 4, 4)},
          [("y", np.float32, (2, 4, 16))], inits={"w": _ATT_W["w"]}, num_heads=2, scale=0.3,
          mask_filter_value=-1000.0, **_ATT_TOL)
_ort_case("Attention_qkv_hidden_sizes", "Attention", ["x", "w", "b"], {"x": _ATT_X},
          [("y", np.float32, (2, 4, 8))], inits={"w": f32(16, 40) * 0.5, "b": f32(40)},
          num_heads=2, qkv_hidden_sizes=[16, 16, 8], unidirectional=1, **_ATT_TOL)
_COS, _SIN = np.cos(np.arange(16)[:, None] * f32(1, 4)), np.sin(np.arange(16)[:, None] * f32(1, 4))
for _name, _x, _pos, _attrs in [
        ("3d_offset", f32(2, 3, 16), np.array([5], np.int64), {}),
        ("3d_ids_interleaved", f32(2, 3, 16), i64(2, 3, low=0, high=16), {"interleaved": 1}),
        ("4d_partial", f32(2, 2, 3, 12), i64(2, 3, low=0, high=16),
         {"rotary_embedding_dim": 8, "num_heads": 2})]:
    _ort_case(f"ms_RotaryEmbedding_{_name}", "RotaryEmbedding", ["x", "pos", "cos", "sin"],
              {"x": _x, "pos": _pos}, [("y", np.float32, _x.shape)],
              inits={"cos": _COS.astype(np.float32), "sin": _SIN.astype(np.float32)},
              atol=1e-5, **_attrs)
_MHA_Q, _MHA_K, _MHA_V = f32(2, 3, 16), f32(2, 5, 16), f32(2, 5, 8)
_ort_case("MultiHeadAttention_cross_bias_mask", "MultiHeadAttention",
          ["q", "k", "v", "b", "m"],
          {"q": _MHA_Q, "k": _MHA_K, "v": _MHA_V, "m": np.array([5, 3], np.int32)},
          [("y", np.float32, (2, 3, 8))], inits={"b": f32(40)}, num_heads=2, **_ATT_TOL)
_ort_case("MultiHeadAttention_past_causal_raw_mask_bias", "MultiHeadAttention",
          ["q", "k", "v", "", "m", "ab", "pk", "pv"],
          {"q": _MHA_Q, "k": f32(2, 3, 16), "v": f32(2, 3, 16),
           "m": np.array([[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]], np.int32), "ab": f32(2, 1, 3, 5),
           "pk": f32(2, 4, 2, 4), "pv": f32(2, 4, 2, 4)},
          [("y", np.float32, (2, 3, 16)), ("pres_k", np.float32, (2, 4, 5, 4)),
           ("pres_v", np.float32, (2, 4, 5, 4))], num_heads=4, unidirectional=1, scale=0.4,
          **_ATT_TOL)


# -- onnxruntime's quantized contrib ops, as its quantizers and session optimizer write them
# Integer products are exact; the float outputs differ by the order of f32 sums.
_ort_case("MatMulIntegerToFloat_per_column", "MatMulIntegerToFloat",
          ["a", "b", "as", "bs", "az", "bz", "bias"], {"a": q8(2, 3, 8, dtype=np.uint8)},
          [("y", np.float32, (2, 3, 5))],
          inits={"b": q7(8, 5), "as": _scale(), "bs": _scale(5), "az": np.uint8(131),
                 "bz": np.array([0, 2, -3, 1, 0], np.int8), "bias": f32(5)}, atol=1e-5)
_ort_case("MatMulIntegerToFloat_u8_weights", "MatMulIntegerToFloat", ["a", "b", "as", "bs"],
          {"a": q8(4, 8, dtype=np.uint8)}, [("y", np.float32, (4, 3))],
          inits={"b": q8(8, 3, dtype=np.uint8), "as": _scale(), "bs": _scale()}, atol=1e-5)
_ort_case("DynamicQuantizeMatMul", "DynamicQuantizeMatMul", ["a", "b", "bs", "bz", "bias"],
          {"a": f32(2, 3, 8) * 2}, [("y", np.float32, (2, 3, 5))],
          inits={"b": q7(8, 5), "bs": _scale(5), "bz": np.int8(2), "bias": f32(5)}, atol=1e-5)


def _packed(q, bits):
    """onnxruntime's packing of ``bits``-bit values along the last axis, lowest first."""
    per = 8 // bits
    q = np.concatenate([q, np.zeros(q.shape[:-1] + (-q.shape[-1] % per,), q.dtype)], -1)
    q = q.reshape(q.shape[:-1] + (-1, per)).astype(np.uint8)
    return np.bitwise_or.reduce(q << (bits * np.arange(per, dtype=np.uint8)), -1)


def _nbits(n, k, bits, block, zero_points="packed"):
    """MatMulNBits' B, scales and zero points (packed, float, or none) for N x K."""
    blocks = -(-k // block)
    q = _RNG.integers(0, 1 << bits, (n, blocks * block))
    inits = {"b": _packed(q, bits).reshape(n, blocks, block * bits // 8),
             "s": _scale(n * blocks)}
    if zero_points == "packed":
        inits["z"] = _packed(_RNG.integers(0, 1 << bits, (n, blocks)), bits).reshape(-1)
    elif zero_points == "float":
        inits["z"] = _RNG.uniform(0, (1 << bits) - 1, n * blocks).astype(np.float32)
    return inits


for _name, _bits, _k, _zp, _ins, _extra in [
        ("4bit", 4, 64, "packed", ["a", "b", "s", "z"], {}),
        ("4bit_symmetric_bias_partial_block", 4, 40, None, ["a", "b", "s", "", "", "bias"],
         {"bias": f32(6)}),
        ("4bit_float_zero_points", 4, 32, "float", ["a", "b", "s", "z"], {}),
        ("8bit", 8, 48, "packed", ["a", "b", "s", "z"], {}),
        ("2bit", 2, 32, "packed", ["a", "b", "s", "z"], {})]:
    _ort_case(f"MatMulNBits_{_name}", "MatMulNBits", _ins, {"a": f32(2, 3, _k)},
              [("y", np.float32, (2, 3, 6))], inits={**_nbits(6, _k, _bits, 16, _zp), **_extra},
              K=_k, N=6, bits=_bits, block_size=16, atol=1e-5, rtol=1e-5)
_GBQ = _RNG.integers(-8, 8, (10, 32))
_GBQ_IDX = np.array([[3, -1], [0, 9]], np.int64)
_ort_case("GatherBlockQuantized_uint4_zero_points", "GatherBlockQuantized",
          ["d", "i", "s", "z"], {"i": _GBQ_IDX}, [("y", np.float32, (2, 2, 32))],
          inits={"d": (_GBQ + 8).astype(ml_dtypes.uint4), "s": _scale(10, 2),
                 "z": _RNG.integers(0, 16, (10, 2)).astype(ml_dtypes.uint4)}, block_size=16)
_ort_case("GatherBlockQuantized_int4_axis1", "GatherBlockQuantized", ["d", "i", "s"],
          {"i": np.array([1, 7, 7], np.int32)}, [("y", np.float32, (3, 10))],
          inits={"d": _GBQ.T.astype(ml_dtypes.int4), "s": _scale(2, 10)}, block_size=16,
          gather_axis=1, quantize_axis=0)
_ort_case("GatherBlockQuantized_u8_packed", "GatherBlockQuantized", ["d", "i", "s", "z"],
          {"i": _GBQ_IDX}, [("y", np.float32, (2, 2, 32))],
          inits={"d": _packed(_GBQ + 8, 4), "s": _scale(10, 2),
                 "z": _packed(_RNG.integers(0, 16, (10, 2)), 4)}, block_size=16, bits=4)
# DynamicQuantizeLSTM: batch 1, since onnxruntime quantizes H per group of batch rows, a
# group per thread (its batch_parallel_), so that larger batches depend on the machine.
_DQ_LSTM = {"x": f32(4, 1, 6) * 2}
_ort_case("DynamicQuantizeLSTM", "DynamicQuantizeLSTM",
          ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"], _DQ_LSTM,
          [("y", np.float32, (4, 1, 1, 5)), ("yh", np.float32, (1, 1, 5)),
           ("yc", np.float32, (1, 1, 5))],
          inits={"w": q7(1, 6, 20), "r": q7(1, 5, 20), "b": f32(1, 40), "ws": _scale(1) * 3,
                 "wz": np.int8([2]), "rs": _scale(1, 20) * 3, "rz": np.zeros((1, 20), np.int8)},
          hidden_size=5, atol=1e-5)
_ort_case("DynamicQuantizeLSTM_bidirectional_u8", "DynamicQuantizeLSTM",
          ["x", "w", "r", "", "", "h0", "c0", "", "ws", "wz", "rs", "rz"],
          {**_DQ_LSTM, "h0": f32(2, 1, 5), "c0": f32(2, 1, 5)},
          [("y", np.float32, (4, 2, 1, 5))],
          inits={"w": q8(2, 6, 20, dtype=np.uint8) // 2, "r": q8(2, 5, 20, dtype=np.uint8) // 2,
                 "ws": _scale(2, 20) * 3, "wz": np.full((2, 20), 64, np.uint8),
                 "rs": _scale(2) * 3, "rz": np.uint8([60, 70])},
          hidden_size=5, direction="bidirectional", atol=1e-5)
# GroupQueryAttention: 4 query heads over 2 KV heads of 8; total_sequence_length constant.
_GQA_OUT = [("y", np.float32, (2, 4, 32)), ("pk", np.float32, (2, 2, 4, 8)),
            ("pv", np.float32, (2, 2, 4, 8))]
_ort_case("GroupQueryAttention_first_prompt_packed", "GroupQueryAttention",
          ["qkv", "", "", "", "", "sk", "t"],
          {"qkv": f32(2, 4, 64), "sk": np.array([3, 3], np.int32)}, _GQA_OUT,
          inits={"t": np.int32(4)}, num_heads=4, kv_num_heads=2, atol=1e-5)
# onnxruntime's rotary needs heads of a multiple of 16
_GQA_ANGLES = np.arange(16)[:, None] * f32(1, 8)
_GQA_CACHES = {"cos": np.cos(_GQA_ANGLES).astype(np.float32),
               "sin": np.sin(_GQA_ANGLES).astype(np.float32)}
_ort_case("GroupQueryAttention_decode_rotary_window_softcap", "GroupQueryAttention",
          ["q", "k", "v", "pk_in", "pv_in", "sk", "t", "cos", "sin"],
          {"q": f32(2, 1, 64), "k": f32(2, 1, 32), "v": f32(2, 1, 32),
           "pk_in": f32(2, 2, 6, 16), "pv_in": f32(2, 2, 6, 16),
           "sk": np.array([4, 6], np.int32)},
          [("y", np.float32, (2, 1, 64)), ("pk", np.float32, (2, 2, 7, 16)),
           ("pv", np.float32, (2, 2, 7, 16))],
          inits={"t": np.int32(7), **_GQA_CACHES},
          num_heads=4, kv_num_heads=2, do_rotary=1, local_window_size=3, softcap=2.0,
          scale=0.5, atol=1e-5)
_ort_case("GroupQueryAttention_subsequent_prompt_interleaved", "GroupQueryAttention",
          ["q", "k", "v", "pk_in", "pv_in", "sk", "t", "cos", "sin"],
          {"q": f32(1, 3, 64), "k": f32(1, 3, 32), "v": f32(1, 3, 32),
           "pk_in": f32(1, 2, 8, 16), "pv_in": f32(1, 2, 8, 16), "sk": np.array([7], np.int32)},
          [("y", np.float32, (1, 3, 64)), ("pk", np.float32, (1, 2, 8, 16)),
           ("pv", np.float32, (1, 2, 8, 16))],
          inits={"t": np.int32(8), **_GQA_CACHES},
          num_heads=4, kv_num_heads=2, do_rotary=1, rotary_interleaved=1, atol=1e-5)
