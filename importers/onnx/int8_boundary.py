"""int8 at the boundary (``int8_io``): a QDQ model's quantized inputs and outputs as the
caller's 8-bit tensors, as TensorFlow Lite Micro takes them.

A quantized model's float input x is read only by QuantizeLinear nodes with one
constant scale and zero point; the caller then passes x's quantized values, the graph
input takes their type and the nodes leave (their outputs are the input). A float
output y made by DequantizeLinear with a constant scale and zero point becomes that
node's 8-bit input, under y's name. The scale and zero point of each such port go into
the signature (``TensorSpec.quantization``) and the header (NAME_x_SCALE,
NAME_x_ZERO_POINT: the real value is (q - ZERO_POINT) * SCALE). The arithmetic inside
is unchanged: the integers the model computed from a float input are the ones the caller
passes.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ...hlo import XlacError

_EIGHT_BITS = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)


def int8_boundary(model: onnx.ModelProto) -> dict[str, tuple[float, int]]:
    """Rewrite ``model`` in place; returns each rewritten port's (scale, zero point).
    Raises XlacError where an input or output is not quantized so."""
    graph = model.graph
    consts = _constants(graph)
    weights = {i.name for i in graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    producer: dict[str, onnx.NodeProto] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
        for name in node.output:
            producer[name] = node
    found: dict[str, tuple[float, int]] = {}
    drop: list[onnx.NodeProto] = []
    renames: dict[str, str] = {}
    for value in graph.input:
        if value.name in weights:
            continue
        nodes = readers.get(value.name, [])
        params = {_params(n, consts) for n in nodes}
        if (not nodes or any(n.op_type != "QuantizeLinear" or n.input[0] != value.name
                             for n in nodes) or len(params) != 1 or None in params):
            raise XlacError(f"int8 at the boundary: input '{value.name}' is not read only by "
                            "QuantizeLinear with one constant scalar scale and zero point")
        scale, zero, dtype = params.pop()
        value.type.tensor_type.elem_type = dtype
        found[value.name] = (scale, zero)
        for n in nodes:
            renames[n.output[0]] = value.name
            drop.append(n)
    for value in graph.output:
        node = producer.get(value.name)
        params = _params(node, consts) if node is not None and \
            node.op_type == "DequantizeLinear" else None
        if params is None or readers.get(value.name):
            raise XlacError(f"int8 at the boundary: output '{value.name}' is not made by "
                            "DequantizeLinear with a constant scalar scale and zero point "
                            "(and read by nothing else)")
        scale, zero, dtype = params
        value.type.tensor_type.elem_type = dtype
        found[value.name] = (scale, zero)
        renames[node.input[0]] = value.name
        drop.append(node)
    for node in drop:
        graph.node.remove(node)
    for node in graph.node:
        for k, name in enumerate(node.input):
            node.input[k] = renames.get(name, name)
        for k, name in enumerate(node.output):
            node.output[k] = renames.get(name, name)
    # Shapes recorded for the renamed tensors would now name other values.
    kept = [v for v in graph.value_info if v.name not in renames and v.name not in found]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    return found


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _params(node: onnx.NodeProto, consts) -> tuple[float, int, int] | None:
    """(scale, zero point, the 8-bit type) of a QuantizeLinear / DequantizeLinear with a
    constant scalar scale and zero point, else None."""
    if len(node.input) < 3 or node.input[1] not in consts or node.input[2] not in consts:
        return None
    scale, zero = consts[node.input[1]], consts[node.input[2]]
    dtype = onnx.helper.np_dtype_to_tensor_dtype(zero.dtype)
    if scale.size != 1 or zero.size != 1 or dtype not in _EIGHT_BITS:
        return None
    return float(scale.reshape(())), int(zero.reshape(())), dtype
