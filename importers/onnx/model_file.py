"""What real ONNX files hold besides the graph, read as onnxruntime reads it.

Exporters other than our own write things the graph builder never does:

* dynamic dimensions spelled as a negative ``dim_value`` (paddle2onnx writes -1)
  or as a dim with neither value nor name. A ``dim_value`` of 0 is an empty
  dimension, not a dynamic one: onnxruntime requires an input of size 0 there;
* weights as ``sparse_initializer`` or as sparse ``Constant`` values;
* weights in external files beside the model (``onnx.save(...,
  save_as_external_data=True)``, and every model over 2 GB, protobuf's limit);
* initializers listed as graph inputs too (before IR version 4), which a caller may
  override (``graph_inputs`` are the others);
* ``value_info`` and output shapes that disagree with shape inference (stale
  after an exporter's own rewrites): like onnxruntime, xlac trusts inference, and
  says so in the report.

ONNX's checker and shape inference need weights' types and shapes, never their
values (shape-like operands, which they do read, are small): they run on a
*skeleton* of the model whose large weights are graph inputs of the same type, so
neither copies hundreds of MB of weights nor hits protobuf's 2 GB limit.

Subgraphs (If branches, Loop and Scan bodies) are node attributes: ``all_nodes`` and
``subgraphs`` walk them.
"""
from __future__ import annotations

from math import prod

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...hlo import XlacError

# Initializers and Constant values up to this many elements stay in the skeleton
# (shape inference reads shapes, axes and pads from them); larger ones are weights.
SKELETON_ELEMENTS = 1 << 14


def declared_dims(tt: onnx.TypeProto.Tensor) -> list | None:
    """A tensor type's dims: an int for a static dim, a label for a dynamic one (its
    ``dim_param``, the negative ``dim_value`` as text, or ``'?'``); None when the
    rank is unknown. As in onnxruntime, a negative ``dim_value`` is dynamic."""
    if not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(d.dim_value)
        elif d.HasField("dim_value"):
            dims.append(str(d.dim_value))
        else:
            dims.append(d.dim_param or "?")
    return dims


def dims_text(dims) -> str:
    return "x".join(str(d) for d in dims)


def _shape_words(dims) -> str:
    return dims_text(dims) if dims else "a scalar"


def sparse_to_array(sparse: onnx.SparseTensorProto) -> np.ndarray:
    """The dense value of a sparse tensor: ``indices`` are [NNZ] linear indices or
    [NNZ, rank] coordinates; every other element is zero."""
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dense = np.zeros(tuple(sparse.dims), values.dtype)
    if indices.ndim == 1:
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


def densify_sparse_initializers(model: onnx.ModelProto) -> None:
    """``graph.sparse_initializer`` -> dense ``graph.initializer`` entries (in place)."""
    graph = model.graph
    for sparse in graph.sparse_initializer:
        graph.initializer.append(numpy_helper.from_array(sparse_to_array(sparse),
                                                         sparse.values.name))
    graph.ClearField("sparse_initializer")


def check_no_external_data(model: onnx.ModelProto, source: str) -> None:
    """A model read from bytes or a ModelProto cannot reach files beside it: its
    external data must already be loaded (``onnx.load`` does so for a path)."""
    for t in _tensors(model.graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in t.external_data if e.key == "location"), "?")
            raise XlacError(f"ONNX model {source}: tensor '{t.name}' keeps its data in the "
                            f"external file '{location}', which xlac reads only when given "
                            "the model's path (or load it first with onnx.load(path))")


def _tensors(graph: onnx.GraphProto):
    yield from graph.initializer
    for node in graph.node:
        yield from (a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR)
        for g in subgraphs(node):
            yield from _tensors(g)


def all_nodes(graph: onnx.GraphProto):
    """The nodes of ``graph`` and of the subgraphs its nodes hold (If, Loop, Scan)."""
    for node in graph.node:
        yield node
        for g in subgraphs(node):
            yield from all_nodes(g)


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    A = onnx.AttributeProto
    return [g for a in node.attribute
            for g in ([a.g] if a.type == A.GRAPH else list(a.graphs) if a.type == A.GRAPHS
                      else [])]


def graph_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """The real inputs: models before IR version 4 also list their initializers as
    inputs, which onnxruntime reads as weights the caller may override."""
    initialized = {t.name for t in graph.initializer}
    return [i for i in graph.input if i.name not in initialized]


def overridable_initializers(graph: onnx.GraphProto) -> dict[str, onnx.ValueInfoProto]:
    """Initializers also listed as graph inputs, by name."""
    initialized = {t.name for t in graph.initializer}
    return {i.name: i for i in graph.input if i.name in initialized}


def skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` for ONNX's checker and shape inference: initializers and
    Constant nodes over SKELETON_ELEMENTS elements become graph inputs of their type
    and shape. Nothing else changes, and no weight is copied."""
    graph = model.graph
    skel = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name,
                           producer_version=model.producer_version, domain=model.domain,
                           model_version=model.model_version)
    skel.opset_import.extend(model.opset_import)
    skel.functions.extend(model.functions)
    g = skel.graph
    g.name, g.doc_string = graph.name, graph.doc_string
    listed = {i.name for i in graph.input}
    g.input.extend(graph.input)
    for t in graph.initializer:
        if prod(t.dims) <= SKELETON_ELEMENTS:
            g.initializer.append(t)
        elif t.name not in listed:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, t.dims))
    for node in graph.node:
        big = _large_constant(node)
        if _onnxruntime_onnx_domain_op(node):
            g.node.append(node)
            g.node[-1].domain = _ORT_ONNX_DOMAIN
        elif big is None:
            g.node.append(node)
        else:
            g.input.append(helper.make_tensor_value_info(node.output[0], big.data_type,
                                                         big.dims))
    g.output.extend(graph.output)
    g.value_info.extend(graph.value_info)
    if any(n.domain == _ORT_ONNX_DOMAIN for n in g.node):
        skel.opset_import.append(helper.make_opsetid(_ORT_ONNX_DOMAIN, 1))
    return skel


# onnxruntime defines these contrib ops in the ONNX domain, where ONNX's checker finds no
# schema for them: the skeleton moves them to a domain of their own, which it leaves alone.
_ORT_ONNX_DOMAIN_OPS = frozenset({"SimplifiedLayerNormalization"})
_ORT_ONNX_DOMAIN = "xlac.onnxruntime-onnx-domain"


def _onnxruntime_onnx_domain_op(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in _ORT_ONNX_DOMAIN_OPS


def _large_constant(node: onnx.NodeProto) -> onnx.TensorProto | None:
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
        return None
    for a in node.attribute:
        if a.name == "value" and prod(a.t.dims) > SKELETON_ELEMENTS:
            return a.t
    return None


def drop_declared_shapes(model: onnx.ModelProto) -> dict[str, list | None]:
    """Remove ``value_info`` and the graph outputs' shapes (in place), so that shape
    inference computes them afresh rather than failing where they disagree; returns
    the declared dims by tensor name, for ``disagreements``."""
    graph = model.graph
    declared = {}
    for vi in (*graph.value_info, *graph.output):
        if vi.type.HasField("tensor_type"):
            declared[vi.name] = declared_dims(vi.type.tensor_type)
    graph.ClearField("value_info")
    for o in graph.output:
        if o.type.HasField("tensor_type"):
            o.type.tensor_type.ClearField("shape")
    return declared


def disagreements(declared: dict[str, list | None], inferred: onnx.ModelProto) -> list[str]:
    """One note per tensor whose declared static dims differ from the inferred ones."""
    graph = inferred.graph
    notes = []
    for vi in (*graph.value_info, *graph.output):
        dims = declared.get(vi.name)
        if dims is None or not vi.type.HasField("tensor_type"):
            continue
        got = declared_dims(vi.type.tensor_type)
        if got is None:
            continue
        if len(got) != len(dims) or any(isinstance(a, int) and isinstance(b, int) and a != b
                                        for a, b in zip(dims, got)):
            notes.append(f"the model declares tensor '{vi.name}' as {_shape_words(dims)}, "
                         f"but shape inference gives {_shape_words(got)}: xlac follows "
                         "inference, as onnxruntime does")
    return notes
