"""The memory an ONNX file's own node order needs: tensor lifetimes and their peak.

Issue 3 defines the ONNX-order lower bound as "the largest total of intermediate
bytes live at once when the nodes run in the file's order, graph inputs and outputs
and weights not counted". No arena packing of that order can be smaller, so it is
the bar a compiler that reorders and fuses has to beat.

    onnx_order_intervals(model, input_shapes=None) -> list[TensorLife]
    onnx_order_lower_bound(model, input_shapes=None) -> int
    order_bound(graph, typed) -> int | None     # the importer's, on its prepared model

Steps are indices into ``graph.node``. A node reads its inputs and writes its
outputs in the same step, so an output overlaps its inputs (no op here works in
place). Only the top-level graph is counted: the tensors inside If/Loop/Scan bodies
are not, but an outer tensor a body reads stays live until the node that owns the
body has run.
"""
from __future__ import annotations

from dataclasses import dataclass

import onnx

from ...hlo import XlacError
from .model_file import drop_declared_shapes, subgraphs
from .prepare import read_model   # the same path/bytes/ModelProto rules and errors


@dataclass(frozen=True)
class TensorLife:
    name: str
    size_bytes: int
    first: int       # the step of the node that produces it
    last: int        # the step of its last reader (``first`` when nobody reads it)


def onnx_order_intervals(model, input_shapes: dict[str, tuple[int, ...]] | None = None
                         ) -> list[TensorLife]:
    """The lifetime of every intermediate tensor when ``model`` runs in its node order.

    ``model`` is a path, bytes or ``onnx.ModelProto`` (left unchanged). ``input_shapes``
    maps graph input names to dims that replace the declared ones. Not counted: graph
    inputs and outputs, initializers, and weights-only tensors (outputs of Constant
    nodes and of nodes whose inputs are all weights-only, such as a Shape->Gather->
    Concat chain on constants). A tensor computed from a graph input counts however
    small it is. An output nobody reads lives one step, unless ONNX's shape inference
    gives it no type (Dropout-7's mask): then it is left out. Raises ``XlacError``
    when any other tensor's size is unknown.
    """
    model, _ = read_model(model)
    _pin_inputs(model.graph, input_shapes or {})
    drop_declared_shapes(model)       # stale value_info would stop inference, as in the importer
    try:
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as e:
        raise XlacError(f"ONNX shape inference failed: {' '.join(str(e).split())}") from None
    return _intervals(model.graph, model)


def onnx_order_lower_bound(model, input_shapes: dict[str, tuple[int, ...]] | None = None
                           ) -> int:
    """The most intermediate bytes live at once in ``model``'s node order."""
    return peak_bytes(onnx_order_intervals(model, input_shapes))


def order_bound(graph: onnx.GraphProto, typed: onnx.ModelProto) -> int | None:
    """The most intermediate bytes live at once in ``graph``'s node order, the tensors'
    types read from ``typed`` (the importer's skeleton after its shape inference, which
    holds the same nodes but for large constants); None where a size is unknown."""
    try:
        return peak_bytes(_intervals(graph, typed))
    except XlacError:
        return None


def _intervals(graph: onnx.GraphProto, typed: onnx.ModelProto) -> list[TensorLife]:
    """``onnx_order_intervals`` of ``graph``, the types from ``typed``'s value_info,
    inputs and outputs."""
    types = {vi.name: vi.type
             for vi in (*typed.graph.value_info, *typed.graph.input, *typed.graph.output)}
    weights = _weights_only(graph)
    outputs = {o.name for o in graph.output}

    last_read: dict[str, int] = {}
    for step, node in enumerate(graph.node):
        for name in (*node.input, *_captured(node)):
            last_read[name] = step

    lives = []
    for step, node in enumerate(graph.node):
        for name in node.output:
            if not name or name in weights or name in outputs:
                continue
            if name not in last_read and not _has_shape(types.get(name)):
                # An unread output ONNX cannot type (Dropout-7's mask): runtimes skip
                # computing it, and nothing could tell its size.
                continue
            lives.append(TensorLife(name, _size_bytes(name, step, node, types.get(name)),
                                    step, max(step, last_read.get(name, step))))
    return lives


def peak_bytes(lives: list[TensorLife]) -> int:
    """The largest sum of sizes over the steps, a tensor counting from first to last."""
    if not lives:
        return 0
    # Sizes enter at ``first`` and leave after ``last``: a running sum over the steps.
    delta = [0] * (max(t.last for t in lives) + 2)
    for t in lives:
        delta[t.first] += t.size_bytes
        delta[t.last + 1] -= t.size_bytes
    peak = live = 0
    for d in delta:
        live += d
        peak = max(peak, live)
    return peak


def _pin_inputs(graph: onnx.GraphProto, input_shapes: dict) -> None:
    inputs = {i.name: i for i in graph.input}
    for name, dims in input_shapes.items():
        if name not in inputs:
            raise XlacError(f"input_shapes names '{name}', which is not a graph input "
                            f"(inputs: {', '.join(inputs) or 'none'})")
        if not inputs[name].type.HasField("tensor_type"):
            raise XlacError(f"input '{name}' is no tensor: the ONNX-order bound sizes "
                            "tensors only")
        shape = inputs[name].type.tensor_type.shape
        shape.Clear()
        for d in dims:
            shape.dim.add().dim_value = int(d)


def _weights_only(graph: onnx.GraphProto) -> set[str]:
    """Initializers and every node output computed from them alone, in one pass over
    the node order (ONNX nodes are topologically sorted)."""
    weights = {t.name for t in graph.initializer}
    for node in graph.node:
        # An omitted optional input ('') reads nothing; a node reading an outer tensor
        # from inside a body depends on it just as on an input.
        reads = [n for n in (*node.input, *_captured(node)) if n]
        if all(n in weights for n in reads):
            weights.update(o for o in node.output if o)
    return weights


def _captured(node: onnx.NodeProto) -> set[str]:
    """Outer-scope tensors read inside the node's subgraphs (If/Loop/Scan bodies)."""
    names: set[str] = set()
    for body in subgraphs(node):
        local = ({i.name for i in body.input} | {t.name for t in body.initializer}
                 | {o for n in body.node for o in n.output})
        names.update(n for inner in body.node
                     for n in (*inner.input, *_captured(inner)) if n and n not in local)
    return names


def _has_shape(type_: onnx.TypeProto | None) -> bool:
    return type_ is not None and type_.HasField("tensor_type") \
        and type_.tensor_type.HasField("shape")


def _size_bytes(name: str, step: int, node: onnx.NodeProto,
                type_: onnx.TypeProto | None) -> int:
    label = f" '{node.name}'" if node.name else ""
    where = f"tensor '{name}' (output of node {step}, {node.op_type}{label})"
    if not _has_shape(type_):
        raise XlacError(f"{where} has an unknown shape; pin the graph inputs' dynamic "
                        "dimensions with input_shapes")
    tt = type_.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
            for d in tt.shape.dim]
    if not all(isinstance(d, int) for d in dims):
        raise XlacError(f"{where} has the dynamic shape {'x'.join(map(str, dims))}; pin the "
                        "graph inputs' dynamic dimensions with input_shapes")
    if tt.elem_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        raise XlacError(f"{where} has no fixed element size")
    count = 1
    for d in dims:
        count *= d
    return count * onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).itemsize
