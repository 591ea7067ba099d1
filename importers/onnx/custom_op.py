"""ONNX ops of custom domains as custom calls of C functions the user links:
``custom_ops={"com.example.FancyOp": "fancy_op"}`` (``--custom-op
com.example.FancyOp=fancy_op``).

Each such node becomes one custom-call (emitter/custom_call.py): its present inputs
the operands, its attributes the backend_config as JSON (``{"alpha": 0.5, "axes": [1,
2], "mode": "fast"}``), its outputs typed by the model's value_info or graph outputs,
which ONNX's shape inference cannot fill for an op it has no schema for.
"""
from __future__ import annotations

import json
import re

import numpy as np
import onnx

from ...hlo import Opcode, Shape, XlacError
from .context import node_label
from .registry import OpRule, canonical_domain
from .types import hlo_dtype


def custom_op_table(given: dict) -> dict[tuple[str, str], str]:
    """``{"com.example.FancyOp": "fancy_op"}`` -> {("com.example", "FancyOp"): "fancy_op"}."""
    table = {}
    for op, symbol in given.items():
        domain, _, name = str(op).rpartition(".")
        if not name or not isinstance(symbol, str) or \
                re.fullmatch(r"[A-Za-z_]\w*", symbol) is None:
            raise XlacError(f"custom_ops maps 'domain.OpType' to a C function name, got "
                            f"{op!r}: {symbol!r}",
                            cli=f"--custom-op takes DOMAIN.OP=C_FUNCTION, got {op}={symbol}")
        table[canonical_domain(domain), name] = symbol
    return table


class CustomOps:
    """The custom ops of one model: the rule of each, and the types its outputs have."""

    def __init__(self, table: dict[tuple[str, str], str], models):
        """``models``: the model and its inferred skeleton (or None), whose value_info
        and outputs give types, the first one's first."""
        self.table = table
        self._types = {}
        for model in reversed([m for m in models if m is not None]):
            graph = model.graph
            self._types.update((v.name, v.type) for v in [*graph.value_info, *graph.output])

    def rule(self, domain: str, op_type: str) -> OpRule | None:
        symbol = self.table.get((domain, op_type))
        if symbol is None:
            return None
        return OpRule(domain, op_type, 1, lambda ctx, node: self._lower(ctx, node, symbol),
                      frozenset())

    def _lower(self, ctx, node: onnx.NodeProto, symbol: str):
        inputs = ctx.inputs(node)
        config = json.dumps({a.name: _json(ctx.attr(node, a.name)) for a in node.attribute},
                            separators=(",", ":"))
        shapes = [self._shape(node, name) for name in node.output]
        shape = shapes[0] if len(shapes) == 1 else Shape.tuple_(shapes)
        call = ctx.b.op(Opcode.CUSTOM_CALL, *inputs, shape=shape, custom_call_target=symbol,
                        backend_config=config)
        if len(shapes) == 1:
            return [call]
        return [ctx.b.get_tuple_element(call, k) for k in range(len(shapes))]

    def _shape(self, node: onnx.NodeProto, name: str) -> Shape:
        t = self._types.get(name)
        what = f"output '{name}' of custom op {node.domain}.{node.op_type} (node " \
               f"'{node_label(node)}')"
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape") \
                or any(not d.HasField("dim_value") for d in t.tensor_type.shape.dim):
            raise XlacError(f"{what} has no static shape: give its type and shape in the "
                            "model's value_info")
        tt = t.tensor_type
        return Shape.array(hlo_dtype(tt.elem_type, what), tuple(d.dim_value
                                                                 for d in tt.shape.dim))


def _json(value):
    if isinstance(value, np.ndarray):
        raise XlacError("a custom op's tensor attribute cannot be passed as JSON")
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    return value
