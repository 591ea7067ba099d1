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

    def __repr__(self) -> str:
        return self.name


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
         rtol=1e-5, atol=1e-6):
    nodes = nodes if isinstance(nodes, list) else [nodes]
    CASES.append(OpCase(name, lambda: make_model(nodes, inputs, outputs, inits, opset),
                        tuple(inputs.values()), rtol, atol))


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
case("Dropout_v9", node("Dropout", ["x"], ratio=0.3), {"x": _X}, opset=9)
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

# -- quantization ------------------------------------------------------------------------
_MS = {"": 13, "com.microsoft": 1}


def q8(*shape, dtype=np.int8):
    info = np.iinfo(dtype)
    return _RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


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
case("MatMulInteger_zero_points", node("MatMulInteger", ["a", "b", "za", "zb"]),
     {"a": q8(3, 7, dtype=np.uint8), "b": q8(7, 4, dtype=np.int8)},
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
         {"as": _scale(), "az": np.uint8(128), "b": q8(4, 6), "bs": _scale(4),
          "bz": np.zeros(4, np.int8), "c": _RNG.integers(-500, 500, 4).astype(np.int32),
          "ys": np.float32(0.01), "yz": np.uint8(120)}, (np.uint8, (3, 4)), transB=1,
         alpha=0.5)
_ms_case("QGemm_float_output", "QGemm", ["a", "as", "az", "b", "bs", "bz", "c"],
         {"a": q8(3, 6, dtype=np.uint8)},
         {"as": _scale(), "az": np.uint8(128), "b": q8(6, 4), "bs": _scale(),
          "bz": np.int8(0), "c": _RNG.integers(-500, 500, 4).astype(np.int32)},
         (np.float32, (3, 4)))
