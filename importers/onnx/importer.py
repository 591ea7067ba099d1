"""ONNX model -> HLO module: load, check, pin shapes, infer shapes, lower each node.

The steps, in order, each with its own user-facing error:
  1. load (path, bytes or ModelProto)          "cannot read ONNX model ..."
     an opset newer than the onnx package knows: an XlacWarning
  2. every node, in subgraphs too, has a handler, and the graph's inputs and
     outputs are tensors of numbers, or sequences or optionals of those
                                       "unsupported ONNX ops: A (node 'a'), ...;
                                        out of scope: B (node 'b'): why" (scope.py)
     (before the checker, which stops at the first op it has no schema for)
  3. onnx.checker.check_model                  "invalid ONNX model ..."
  4. pin constant inputs (they become weights), pin input shapes (a sequence input's
     length and element shapes; an optional input's absence), reject dynamic dims
                                               "input 'x' has dynamic dimension 'N' ..."
  5. onnx.shape_inference (strict)             "ONNX shape inference failed ..."
  6. lower nodes in graph order into one entry computation. Shapes come from
     the HLO shape rules, not from ONNX's inference, which is only a check of
     the model (it disagrees with onnxruntime on some ceil_mode pools).

Steps 3 and 5 see a skeleton of the model without its large weights, and the model's
own value_info and output shapes are left out of step 5, as onnxruntime ignores them
where they disagree with inference: model_file.py holds these habits of real files.
"""
from __future__ import annotations

import json
import os
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

from ...hlo import (Builder, Instruction, Module, OpMetadata, Shape, ShapeError, Signature,
                    TensorSpec, ValueSpec, XlacError, XlacWarning)
from .context import (ImportContext, InputShapeNeeded, OptionalValue, Sequence, kind_of,
                      node_label)
from .model_file import (check_no_external_data, declared_dims, densify_sparse_initializers,
                         dims_text, disagreements, drop_declared_shapes, skeleton)
from .registry import DEFAULT_DOMAIN, lookup
from .scope import OutOfScope, boundary_type, out_of_scope_reason, strings_error
from .types import hlo_dtype


def import_onnx(model, input_shapes: dict | None = None, name: str | None = None,
                const_inputs: dict | None = None, absent_inputs=None,
                hoist_recurrent_projection: bool = True) -> Module:
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
    ``hoist_recurrent_projection``: RNN/GRU/LSTM compute the input projection of all
    steps before their loop (faster, a buffer of steps x batch x gates) or each step's
    in the loop (the smaller arena); see rnn.py.
    """
    model, source = _load(model)
    opsets = {_domain(o.domain): o.version for o in model.opset_import}
    _warn_future_opset(opsets.get(DEFAULT_DOMAIN, 0), source)
    _reject_unsupported(model.graph, opsets)
    _check_boundary(model.graph)
    densify_sparse_initializers(model)
    _check(skeleton(model), source)
    pin_const_inputs(model, const_inputs or {})
    absent = _check_absent(model.graph, absent_inputs)
    elements = _pin_input_shapes(model, input_shapes or {}, absent)
    _spell_out_function_defaults(model.graph, opsets)
    notes = _infer_shapes(model)
    module = _lower(model, opsets, name or model.graph.name or "model",
                    hoist_recurrent_projection, elements, absent)
    module.notes.extend(notes)
    return module


# -- 1-5: loading and checking ------------------------------------------------

def _load(model) -> tuple[onnx.ModelProto, str]:
    if isinstance(model, onnx.ModelProto):
        m = onnx.ModelProto()
        m.CopyFrom(model)          # input pinning edits the model; keep the caller's intact
        check_no_external_data(m, "<ModelProto>")
        return m, "<ModelProto>"
    if isinstance(model, (bytes, bytearray)):
        source = "<bytes>"
        load = lambda: onnx.load_model_from_string(bytes(model))  # noqa: E731
    else:
        source = os.fspath(model)
        # Weights in external files (every model over 2 GB) are read from the model's folder.
        load = lambda: onnx.load(source)  # noqa: E731
    try:
        m = load()
    except Exception as e:   # protobuf and OS errors alike: the file is not a model we can read
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise XlacError(f"cannot read ONNX model '{source}': {reason}") from None
    check_no_external_data(m, source)
    return m, source


def _warn_future_opset(opset: int, source: str) -> None:
    """Warn when the model's ONNX opset is newer than the onnx package knows: xlac
    compiles each op as the newest opset it knows defines it, which is wrong for an
    op whose meaning changed since."""
    known = onnx.defs.onnx_opset_version()
    if opset > known:
        warnings.warn(f"ONNX model '{source}' uses opset {opset}, newer than the installed "
                      f"onnx package ({onnx.__version__}) knows (opset {known}); its ops are "
                      f"compiled as opset {known} defines them, which is wrong for any op "
                      f"redefined since: upgrade onnx, or export the model for opset {known}",
                      XlacWarning, stacklevel=2)


def _one_line(e: Exception) -> str:
    return " ".join(line.strip() for line in str(e).splitlines() if line.strip())


def _check(model: onnx.ModelProto, source: str) -> None:
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as e:
        raise XlacError(f"invalid ONNX model '{source}': {_one_line(e)}") from None


def _domain(domain: str) -> str:
    return DEFAULT_DOMAIN if domain in ("", "ai.onnx") else domain


def _reject_unsupported(graph: onnx.GraphProto, opsets: dict[str, int]) -> None:
    """One error listing every node without a handler: the unsupported ones, then the
    ones out of scope by design, grouped by reason (scope.OUT_OF_SCOPE)."""
    missing, out_of_scope = [], {}
    for node in all_nodes(graph):
        domain = _domain(node.domain)
        if lookup(domain, node.op_type, opsets.get(domain, 0)) is not None:
            continue
        op = node.op_type if domain == DEFAULT_DOMAIN else f"{domain}.{node.op_type}"
        label = f"{op} (node '{node_label(node)}')"
        reason = out_of_scope_reason(domain, node.op_type)
        if reason is None:
            missing.append(label)
        else:
            out_of_scope.setdefault(reason, []).append(label)
    parts = []
    if missing:
        parts.append("unsupported ONNX ops: " + ", ".join(missing))
    if out_of_scope:
        parts.append("out of scope: " + "; ".join(
            f"{', '.join(labels)}: {reason}" for reason, labels in out_of_scope.items()))
    if parts:
        raise (XlacError if missing else OutOfScope)("; ".join(parts))


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


def _check_boundary(graph: onnx.GraphProto) -> None:
    """Model inputs and outputs are tensors of numbers, or sequences or optionals of those:
    maps and strings are out of scope. An output of no declared type is checked when it
    is lowered."""
    initialized = {t.name for t in graph.initializer}
    values = [("input", vi) for vi in graph.input if vi.name not in initialized]
    values += [("output", vi) for vi in graph.output]
    for kind, vi in values:
        if vi.type.WhichOneof("value") is None:
            continue              # an input of no type: _pin_input_shapes says so
        _, _, tt = boundary_type(vi.type, f"{kind} '{vi.name}'")
        if tt.elem_type == onnx.TensorProto.STRING:
            raise strings_error(f"{kind} '{vi.name}'")


def _check_absent(graph: onnx.GraphProto, absent_inputs) -> frozenset[str]:
    """The names of ``absent_inputs``: each an optional model input."""
    if absent_inputs is None:
        return frozenset()
    if isinstance(absent_inputs, (str, bytes)) or not all(
            isinstance(n, str) for n in absent_inputs):
        raise XlacError(f"absent_inputs must be a list of input names, e.g. "
                        f"absent_inputs=[\"x\"]; got {absent_inputs!r}")
    inputs = {i.name: i for i in _graph_inputs(graph)}
    for n in absent_inputs:
        vi = inputs.get(n)
        if vi is None:
            problem = (f"names '{n}', which is not a model input "
                       f"(inputs: {', '.join(inputs) or 'none'})")
            raise XlacError(f"absent_inputs {problem}", cli=f"--absent-input {problem}")
        if vi.type.WhichOneof("value") != "optional_type":
            problem = (f"names input '{n}', which is not an optional: only an optional may "
                       "be absent")
            raise XlacError(f"absent_inputs {problem}", cli=f"--absent-input {problem}")
    return frozenset(absent_inputs)


def _graph_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """The real inputs: models before IR version 4 also list their initializers as
    inputs, which onnxruntime reads as weights the caller may override."""
    initialized = {t.name for t in graph.initializer}
    return [i for i in graph.input if i.name not in initialized]


def _overridable(graph: onnx.GraphProto) -> dict[str, onnx.ValueInfoProto]:
    """Initializers also listed as graph inputs, by name."""
    initialized = {t.name for t in graph.initializer}
    return {i.name: i for i in graph.input if i.name in initialized}


def _drop_initializer(graph: onnx.GraphProto, name: str) -> None:
    for i, t in enumerate(graph.initializer):
        if t.name == name:
            del graph.initializer[i]
            return


def pin_const_inputs(model: onnx.ModelProto, const_inputs: dict) -> None:
    """Turn the graph inputs named in ``const_inputs`` into initializers holding the given
    values (in place). A value must have the input's element type (or convert to it
    exactly) and fit its declared dimensions. An initializer also listed as an input
    (before IR version 4) takes the given value instead of its own."""
    graph = model.graph
    inputs = {i.name: i for i in _graph_inputs(graph)}
    overridable = _overridable(graph)
    for n, value in const_inputs.items():
        if n not in inputs and n not in overridable:
            raise XlacError(f"constant input '{n}' is not a model input "
                            f"(inputs: {', '.join(inputs) or 'none'})")
        vi = inputs.get(n) or overridable[n]
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise XlacError(f"constant input '{n}' is not a tensor, which xlac does not support")
        dtype = hlo_dtype(tt.elem_type, f"input '{n}'")
        given = np.asarray(value)
        converted = given.astype(dtype.np)
        if given.dtype != converted.dtype and not np.array_equal(
                converted.astype(given.dtype), given, equal_nan=True):
            raise XlacError(f"constant input '{n}' has element type {given.dtype}, which does "
                            f"not convert exactly to the input's {dtype}")
        dims = declared_dims(tt)
        if dims is not None and (len(dims) != converted.ndim or any(
                isinstance(d, int) and d != v for d, v in zip(dims, converted.shape))):
            raise XlacError(f"constant input '{n}' has shape {dims_text(converted.shape)}, "
                            f"but the input is declared {dims_text(dims)}")
        if n in overridable:
            _drop_initializer(graph, n)
        graph.initializer.append(numpy_helper.from_array(converted, n))
        if n in inputs and model.ir_version >= 4:   # before IR 4, initializers are inputs too
            graph.input.remove(inputs[n])


def _pin_input_shapes(model: onnx.ModelProto, input_shapes: dict,
                      absent: frozenset[str]) -> dict[str, list[list[int]]]:
    """Write ``input_shapes`` into the model's inputs (in place); every input dim must
    end up static. An initializer also listed as an input that ``input_shapes`` names
    becomes a real input, as onnxruntime lets a caller override it. Returns the element
    shapes of each sequence input, which its type cannot hold (it has one element
    shape): the type gets what the elements share, for ONNX's shape inference."""
    graph = model.graph
    overridable = _overridable(graph)
    for n in input_shapes:
        if n in overridable:
            _drop_initializer(graph, n)
    inputs = {i.name: i for i in _graph_inputs(graph)}
    for n in input_shapes:
        if n not in inputs:
            known = f"(inputs: {', '.join(inputs) or 'none'})"
            raise XlacError(f"input_shapes names {json.dumps(n)}, which is not a model input "
                            f"{known}", cli=f"--input-shape names '{n}', which is not a model "
                            f"input {known}")
        if n in absent:
            raise XlacError(f"input_shapes gives a shape to input '{n}', which absent_inputs "
                            "names", cli=f"--input-shape gives a shape to input '{n}', which "
                            "--absent-input names")
    elements = {}
    for n, vi in inputs.items():
        if n in absent:
            continue
        if vi.type.WhichOneof("value") is None:
            raise XlacError(f"input '{n}' has no type, which xlac does not support")
        kind, _, tt = boundary_type(vi.type, f"input '{n}'")
        hlo_dtype(tt.elem_type, f"input '{n}'")
        dims = declared_dims(tt)
        if kind == "sequence":
            if n not in input_shapes:
                python, cli = sequence_pin_spelling(n, dims)
                what = (f"input '{n}' is a sequence, whose length and element shapes compiled "
                        "code fixes; pin them with ")
                raise InputShapeNeeded(what + python, (n,), cli=what + cli)
            elements[n] = _check_sequence_pin(n, dims, input_shapes[n])
            _write_shared_dims(tt, elements[n])
        elif n in input_shapes:
            pinned = _check_pin(n, dims, input_shapes[n])
            tt.shape.Clear()
            for p in pinned:
                tt.shape.dim.add().dim_value = p
        elif dims is None:
            python, cli = pin_spelling(n, None)
            raise InputShapeNeeded(f"input '{n}' has no shape; pin it with {python}", (n,),
                                   cli=f"input '{n}' has no shape; pin it with {cli}")
        else:
            dynamic = [d for d in dims if not isinstance(d, int)]
            if dynamic:
                python, cli = pin_spelling(n, [d if isinstance(d, int) else 1 for d in dims])
                which = (f"dimension '{dynamic[0]}'" if len(dynamic) == 1 else
                         "dimensions " + ", ".join(f"'{d}'" for d in dynamic))
                what = f"input '{n}' has dynamic {which} (shape {dims_text(dims)}); pin it with "
                raise InputShapeNeeded(what + python, (n,), cli=what + cli)
    return elements


def _write_shared_dims(tt: onnx.TypeProto.Tensor, shapes: list[list[int]]) -> None:
    """The element shape of a sequence's type: the dims all ``shapes`` share, the others
    unknown; no shape where their ranks differ (an empty sequence keeps the declared)."""
    if not shapes:
        return
    tt.ClearField("shape")
    if len({len(s) for s in shapes}) != 1:
        return
    tt.shape.SetInParent()
    for ds in zip(*shapes):
        d = tt.shape.dim.add()
        if len(set(ds)) == 1:
            d.dim_value = ds[0]


def sequence_pin_spelling(name: str, dims) -> tuple[str, str]:
    """How a caller pins sequence input ``name``, one shape per element, shown for two
    elements of the declared element ``dims`` (dynamic ones as 1)."""
    shape = [1] if dims is None else [d if isinstance(d, int) else 1 for d in dims]
    return (f"input_shapes={{{json.dumps(name)}: [{tuple(shape)}, {tuple(shape)}]}} "
            "(one shape per element)",
            f"--input-shape '{name}=[{dims_text(shape)},{dims_text(shape)}]' "
            "(one shape per element)")


def _check_sequence_pin(name: str, dims: list | None, pinned) -> list[list[int]]:
    """``pinned``, a list of element shapes, each fitting the declared element ``dims``."""
    if isinstance(pinned, (str, bytes)) or not hasattr(pinned, "__len__") or any(
            isinstance(s, (int, np.integer, str, bytes)) or not hasattr(s, "__len__")
            for s in pinned):
        python, _ = sequence_pin_spelling(name, dims)
        raise XlacError(f"input_shapes[{json.dumps(name)}] must be a list of shapes, one per "
                        f"element of the sequence, e.g. {python}; got {pinned!r}",
                        cli=f"--input-shape for sequence input '{name}' must be a list of "
                        f"shapes in brackets, e.g. --input-shape '{name}=[2x3,2x3]'")
    return [_check_pin(name, dims, s, k) for k, s in enumerate(pinned)]


def pin_spelling(name: str, dims) -> tuple[str, str]:
    """How a caller pins input ``name`` to ``dims`` (None: unknown), from Python and from
    the command line: ``input_shapes={"x": (1, 64)}``, ``--input-shape x=1x64``."""
    if dims is None:
        return (f"input_shapes={{{json.dumps(name)}: (D0, D1, ...)}}",
                f"--input-shape {name}=D0xD1x...")
    return (f"input_shapes={{{json.dumps(name)}: {tuple(dims)}}}",
            f"--input-shape {name}={dims_text(dims)}")


def _check_pin(name: str, dims: list | None, pinned, element: int | None = None) -> list[int]:
    """``pinned`` if it is a sequence of dims that fits the declared ``dims`` (None:
    unknown rank); ``element``: its index where it is a sequence's element."""
    if isinstance(pinned, (str, bytes)) or not hasattr(pinned, "__len__") or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in pinned):
        raise XlacError(f"input_shapes[{json.dumps(name)}] must be a tuple of ints, e.g. "
                        f"input_shapes={{{json.dumps(name)}: (1, 64)}}; got {pinned!r}")
    pinned = [int(d) for d in pinned]
    python, cli = pin_spelling(name, pinned)
    of = ""
    if element is not None:
        of = f"element {element} of "
        python = f"element {element}, {tuple(pinned)}, of input_shapes[{json.dumps(name)}]"
        cli = f"element {element}, {dims_text(pinned)}, of --input-shape {name}"

    def error(problem: str) -> XlacError:
        return XlacError(f"{python} {problem}", cli=f"{cli} {problem}")
    if any(d < 0 for d in pinned):
        raise error("has a negative dimension")
    if dims is None:
        return pinned
    if len(pinned) != len(dims):
        raise error(f"has rank {len(pinned)}, but {of}input '{name}' has rank "
                    f"{len(dims)} (shape {dims_text(dims)})")
    if any(isinstance(d, int) and d != p for d, p in zip(dims, pinned)):
        raise error(f"conflicts with the static shape {dims_text(dims)} of {of}input "
                    f"'{name}'")
    return pinned


# Attribute defaults that onnx's shape inference gets wrong when the attribute is
# absent (STFT's onesided defaults to 1 in the spec, to 0 in its inference function):
# they are written out before inference, which changes nothing else.
_DEFAULTS_TO_SPELL_OUT = {("", "STFT"): {"onesided": 1}}


def _spell_out_defaults(graph: onnx.GraphProto) -> None:
    for node in graph.node:
        for name, value in _DEFAULTS_TO_SPELL_OUT.get((_domain(node.domain), node.op_type),
                                                      {}).items():
            if not any(a.name == name for a in node.attribute):
                node.attribute.append(onnx.helper.make_attribute(name, value))


def _spell_out_function_defaults(graph: onnx.GraphProto, opsets: dict[str, int]) -> None:
    """Write the schema's default into every node of a function-defined op that omits
    an attribute: ONNX's shape inference expands the function body without the defaults,
    so a body that reads ``@axes`` fails where the node leaves ``axes`` out
    (MeanVarianceNormalization)."""
    for node in graph.node:
        try:
            schema = onnx.defs.get_schema(node.op_type, opsets.get(_domain(node.domain), 0),
                                          node.domain)
        except onnx.defs.SchemaError:
            continue
        if not schema.has_function:
            continue
        given = {a.name for a in node.attribute}
        for name, a in schema.attributes.items():
            if name not in given and a.default_value.type != onnx.AttributeProto.UNDEFINED:
                node.attribute.append(a.default_value)


def _infer_shapes(model: onnx.ModelProto) -> list[str]:
    """Run ONNX's shape inference as a check of the model; returns notes on the
    tensors whose declared shapes it contradicts."""
    _spell_out_defaults(model.graph)
    skel = skeleton(model)
    declared = drop_declared_shapes(skel)
    try:
        inferred = onnx.shape_inference.infer_shapes(skel, check_type=True, strict_mode=True,
                                                     data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as e:
        raise XlacError(f"ONNX shape inference failed: {_one_line(e)}") from None
    return disagreements(declared, inferred)


# -- 6: lowering ----------------------------------------------------------------

def _lower(model: onnx.ModelProto, opsets: dict[str, int], name: str,
           hoist_recurrent_projection: bool, elements: dict[str, list[list[int]]],
           absent: frozenset[str]) -> Module:
    graph = model.graph
    module = Module(name)
    b = Builder("main")
    ctx = ImportContext(module, b, opsets)
    ctx.hoist_recurrent_projection = hoist_recurrent_projection
    signature = Signature()

    def parameter(value_name: str, spec: TensorSpec) -> Instruction:
        ctx.input_names.append(value_name)
        signature.inputs.append(spec)
        return b.parameter(len(signature.inputs) - 1, Shape.array(spec.dtype, spec.dims),
                           spec.name)

    for vi in _graph_inputs(graph):
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
    domain = _domain(node.domain)
    rule = lookup(domain, node.op_type, ctx.opsets.get(domain, 0))
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
