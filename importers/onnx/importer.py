"""ONNX model -> HLO module: the model made ready (prepare.py), then its nodes lowered.

``import_onnx`` reads the model and runs the steps of ``prepare.PREPARATION`` on it
(checks, pinning, shape inference, each with its own user-facing error), then lowers
the nodes in graph order into one entry computation; If/Loop/Scan bodies become
computations of their own (subgraph.py). Shapes come from the HLO shape rules, not
from ONNX's inference.
"""
from __future__ import annotations

import onnx
from onnx import numpy_helper

from ...hlo import (Builder, Instruction, Module, OpMetadata, Shape, ShapeError, Signature,
                    TensorSpec, ValueSpec, XlacError)
from .context import ImportContext, OptionalValue, Sequence, kind_of, node_label
from .custom_op import CustomOps, custom_op_table
from .liveness import order_bound
from .model_file import all_nodes, graph_inputs
from .prepare import PREPARATION, Prepared, read_model
from .registry import canonical_domain, lookup
from .scope import OutOfScope, boundary_type
from .types import hlo_dtype


def import_onnx(model, input_shapes: dict | None = None, name: str | None = None,
                const_inputs: dict | None = None, absent_inputs=None,
                onnx_order_bound: bool = False, custom_ops: dict | None = None) -> Module:
    """Lower an ONNX model (path, bytes or ModelProto) to an HLO module.

    ``input_shapes`` maps input names to dims that replace the model's
    (possibly dynamic) input shapes; a sequence input's to a list of dims, one per
    element (its length and element shapes). ``const_inputs`` maps input names to arrays:
    those inputs become weights with that value and leave the signature.
    ``absent_inputs`` names optional inputs compiled empty; they leave the signature too.
    The signature is flat: entry parameter i is the i-th tensor of the remaining graph
    inputs that have no initializer (a sequence gives one per element); the entry root
    is the single output tensor, or a tuple of all of them in graph order.
    ``module.signature``'s values say which tensors make which model input and output.
    ``onnx_order_bound``: also set
    ``module.source_order_bound``, the most intermediate bytes live at once in the ONNX
    file's own node order (liveness.py; None where ONNX's inference leaves a size
    unknown), for the report. ``custom_ops``: "domain.Op" -> the C function a custom
    call of it makes (custom_op.py).
    """
    prepared = Prepared(*read_model(model), input_shapes=input_shapes or {},
                        const_inputs=const_inputs or {}, absent_inputs=absent_inputs,
                        custom_ops=custom_op_table(custom_ops or {}))
    for step in PREPARATION:
        step(prepared)
    module = _lower(prepared, name or prepared.model.graph.name or "model")
    module.notes.extend(prepared.notes)
    if onnx_order_bound:
        module.source_order_bound = order_bound(prepared.model.graph, prepared.inferred)
    return module


def _lower(prepared: Prepared, name: str) -> Module:
    graph, absent, elements = prepared.model.graph, prepared.absent, prepared.elements
    module = Module(name)
    b = Builder("main")
    ctx = ImportContext(module, b, prepared.opsets)
    ctx.custom_ops = CustomOps(prepared.custom_ops, [prepared.model, prepared.inferred])
    signature = Signature()

    def parameter(value_name: str, spec: TensorSpec) -> Instruction:
        ctx.input_names.append(value_name)
        signature.inputs.append(spec)
        return b.parameter(len(signature.inputs) - 1, Shape.array(spec.dtype, spec.dims),
                           spec.name)

    for vi in graph_inputs(graph):
        n = vi.name
        kind, optional, tt = boundary_type(vi.type, f"input '{n}'")
        if n in absent:
            ctx.values[n] = OptionalValue(None)
            signature.input_values.append(ValueSpec(n, "absent", 0, optional=True))
            continue
        dtype = hlo_dtype(tt.elem_type, f"input '{n}'")
        if kind == "sequence":
            value = Sequence(tuple(parameter(n, TensorSpec(f"{n}[{k}]", dtype, tuple(dims)))
                                   for k, dims in enumerate(elements[n])), dtype)
            count = len(value.items)
        else:
            value = parameter(n, TensorSpec(n, dtype, tuple(d.dim_value
                                                             for d in tt.shape.dim)))
            count = 1
        ctx.values[n] = OptionalValue(value) if optional else value
        signature.input_values.append(ValueSpec(n, kind, count, optional))
    for t in graph.initializer:
        dtype = hlo_dtype(t.data_type, f"initializer '{t.name}'")
        ctx.values[t.name] = b.constant(numpy_helper.to_array(t).astype(dtype.np, copy=False),
                                        dtype, name=t.name)

    lower_nodes(ctx, graph)

    if not graph.output:
        raise XlacError("the ONNX model has no outputs")
    outputs = []
    for o in graph.output:
        value, spec = _output_value(o, ctx.values[o.name])
        signature.output_values.append(spec)
        for k, x in enumerate(value):
            name = o.name if spec.kind == "tensor" else f"{o.name}[{k}]"
            signature.outputs.append(TensorSpec(name, x.shape.dtype, x.shape.dims))
            outputs.append(x)
    if not outputs:
        raise XlacError("every output of the ONNX model is an empty sequence or an empty "
                        "optional: the compiled code would compute nothing")
    root = outputs[0] if len(outputs) == 1 else b.tuple(outputs)
    module.add_computation(b.build(root), entry=True)
    module.signature = signature
    return module


def _output_value(o: onnx.ValueInfoProto, x) -> tuple[list[Instruction], ValueSpec]:
    """The tensors model output ``o`` holds (value ``x``) and its ``ValueSpec``."""
    optional = isinstance(x, OptionalValue)
    content = x.value if optional else x
    if o.type.WhichOneof("value") is not None:
        optional = optional or o.type.WhichOneof("value") == "optional_type"
    if content is None:
        return [], ValueSpec(o.name, "absent", 0, optional=True)
    if isinstance(content, Sequence):
        return list(content.items), ValueSpec(o.name, "sequence", len(content.items), optional)
    if not isinstance(content, Instruction):      # an optional of an optional
        raise OutOfScope(f"out of scope: output '{o.name}' is {kind_of(x)} of "
                         f"{kind_of(content)}, which compiled code does not hold (tensors of "
                         "numbers of fixed shape, sequences and optionals of those)")
    return [content], ValueSpec(o.name, "tensor", 1, optional)


def lower_nodes(ctx: ImportContext, graph: onnx.GraphProto) -> None:
    """Lower the nodes of ``graph`` into ``ctx`` (whose values hold what they read from
    outside: graph inputs, initializers, values of enclosing graphs)."""
    used = {o.name for o in graph.output} | {n for node in all_nodes(graph) for n in node.input}
    for node in graph.node:
        _lower_node(ctx, node, used)


def _lower_node(ctx: ImportContext, node: onnx.NodeProto, used: set[str]) -> None:
    domain = canonical_domain(node.domain)
    rule = lookup(domain, node.op_type, ctx.opsets.get(domain, 0))
    if rule is None and ctx.custom_ops is not None:
        rule = ctx.custom_ops.rule(domain, node.op_type)
    ctx.begin_node(node)
    instructions = ctx.b.computation.instructions
    first_new = len(instructions)
    try:
        outs = list(rule.handler(ctx, node))
    except ShapeError as e:
        raise ctx.error(node, str(e)) from None
    origin = OpMetadata(node.op_type, node_label(node))
    for instr in instructions[first_new:]:
        instr.metadata = instr.metadata or origin
    for a in ctx.unread_attributes():
        if a not in rule.ignore:
            raise ctx.error(node, f"unsupported attribute '{a}'")
    for i in ctx.unread_inputs():
        raise ctx.error(node, f"unsupported input {i} ('{node.input[i]}')")
    for i, out in enumerate(node.output):
        if not out:
            continue
        if i < len(outs) and outs[i] is not None:
            ctx.values[out] = outs[i]
        elif out in used:
            raise ctx.error(node, f"output {i} ('{out}') is not supported")
