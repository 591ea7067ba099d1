"""An ONNX model made ready for lowering: ``PREPARATION``, one step after another.

``read_model`` reads the model (a path, bytes or a ModelProto; "cannot read ONNX model
..."), then each step of ``PREPARATION`` checks or edits the ``Prepared`` model in place,
each with its own user-facing error:

  warn_future_opset     an opset newer than the onnx package knows: an XlacWarning
  reject_unsupported    every node, in subgraphs too, has a handler
                        "unsupported ONNX ops: A (node 'a'), ...; out of scope: B (node 'b'):
                        why" (scope.py); before the checker, which stops at the first op
                        it has no schema for
  check_boundary        the graph's inputs and outputs are tensors of numbers, or
                        sequences or optionals of those
  densify_sparse        sparse initializers become dense ones
  check_model           onnx.checker.check_model: "invalid ONNX model ..."
  pin_const_inputs      inputs given values become weights
  check_absent          the inputs compiled empty are optional inputs
  pin_input_shapes      pinned shapes (a sequence input's length and element shapes);
                        "input 'x' has dynamic dimension 'N' ..."
  spell_out_defaults    attribute defaults ONNX's shape inference would miss
  infer_shapes          onnx.shape_inference (strict): "ONNX shape inference failed ..."

The checker and shape inference see a skeleton of the model without its large weights,
and the model's own value_info and output shapes are left out of inference, as
onnxruntime ignores them where they disagree with it: model_file.py holds these habits
of real files. Lowering (importer.py) takes its shapes from the HLO shape rules, not
from ONNX's inference, which is only a check of the model (it disagrees with onnxruntime
on some ceil_mode pools).
"""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import onnx
from onnx import numpy_helper

from ...hlo import XlacError, XlacWarning
from .context import InputShapeNeeded, node_label
from .model_file import (all_nodes, check_no_external_data, declared_dims,
                         densify_sparse_initializers, dims_text, disagreements,
                         drop_declared_shapes, graph_inputs, overridable_initializers, skeleton)
from .registry import DEFAULT_DOMAIN, canonical_domain, lookup
from .scope import OutOfScope, boundary_type, out_of_scope_reason, strings_error
from .types import hlo_dtype


@dataclass
class Prepared:
    """The model on its way to lowering (edited in place), what the caller asked for, and
    what the steps found."""
    model: onnx.ModelProto
    source: str                                   # the path, "<bytes>" or "<ModelProto>"
    input_shapes: dict = field(default_factory=dict)
    const_inputs: dict = field(default_factory=dict)
    absent_inputs: object = None                  # as given; checked into ``absent``
    absent: frozenset[str] = frozenset()
    elements: dict[str, list[list[int]]] = field(default_factory=dict)  # sequence inputs'
    notes: list[str] = field(default_factory=list)     # for module.notes (--report)
    inferred: onnx.ModelProto | None = None       # the skeleton with inferred value_info
    # (domain, op type) -> the C function its custom call makes (custom_op.py)
    custom_ops: dict = field(default_factory=dict)

    @cached_property
    def opsets(self) -> dict[str, int]:
        return {canonical_domain(o.domain): o.version for o in self.model.opset_import}


def read_model(model) -> tuple[onnx.ModelProto, str]:
    """``model`` (a path, bytes or ModelProto) as a ModelProto of its own, and its source
    for messages."""
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


def _one_line(e: Exception) -> str:
    return " ".join(line.strip() for line in str(e).splitlines() if line.strip())


# -- the steps ----------------------------------------------------------------------------

def warn_future_opset(p: Prepared) -> None:
    """Warn when the model's ONNX opset is newer than the onnx package knows: xlac
    compiles each op as the newest opset it knows defines it, which is wrong for an
    op whose meaning changed since."""
    opset, known = p.opsets.get(DEFAULT_DOMAIN, 0), onnx.defs.onnx_opset_version()
    if opset > known:
        warnings.warn(f"ONNX model '{p.source}' uses opset {opset}, newer than the installed "
                      f"onnx package ({onnx.__version__}) knows (opset {known}); its ops are "
                      f"compiled as opset {known} defines them, which is wrong for any op "
                      f"redefined since: upgrade onnx, or export the model for opset {known}",
                      XlacWarning, stacklevel=2)


def reject_unsupported(p: Prepared) -> None:
    """One error listing every node without a handler: the unsupported ones, then the
    ones out of scope by design, grouped by reason (scope.OUT_OF_SCOPE)."""
    missing, out_of_scope = [], {}
    for node in all_nodes(p.model.graph):
        domain = canonical_domain(node.domain)
        if lookup(domain, node.op_type, p.opsets.get(domain, 0)) is not None or \
                (domain, node.op_type) in p.custom_ops:
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


def check_boundary(p: Prepared) -> None:
    """Model inputs and outputs are tensors of numbers, or sequences or optionals of those:
    maps and strings are out of scope. An output of no declared type is checked when it
    is lowered."""
    graph = p.model.graph
    values = [("input", vi) for vi in graph_inputs(graph)]
    values += [("output", vi) for vi in graph.output]
    for kind, vi in values:
        if vi.type.WhichOneof("value") is None:
            continue              # an input of no type: pin_input_shapes says so
        _, _, tt = boundary_type(vi.type, f"{kind} '{vi.name}'")
        if tt.elem_type == onnx.TensorProto.STRING:
            raise strings_error(f"{kind} '{vi.name}'")


def densify_sparse(p: Prepared) -> None:
    """Sparse initializers become dense ones, which the steps after and lowering read."""
    densify_sparse_initializers(p.model)


def check_model(p: Prepared) -> None:
    """ONNX's checker, on the skeleton (model_file.skeleton)."""
    try:
        onnx.checker.check_model(skeleton(p.model))
    except (onnx.checker.ValidationError, ValueError) as e:
        raise XlacError(f"invalid ONNX model '{p.source}': {_one_line(e)}") from None


def pin_const_inputs(p: Prepared) -> None:
    """Turn the graph inputs named in ``const_inputs`` into initializers holding the given
    values. A value must have the input's element type (or convert to it exactly) and
    fit its declared dimensions. An initializer also listed as an input (before IR
    version 4) takes the given value instead of its own."""
    model = p.model
    graph = model.graph
    inputs = {i.name: i for i in graph_inputs(graph)}
    overridable = overridable_initializers(graph)
    for n, value in p.const_inputs.items():
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


def check_absent(p: Prepared) -> None:
    """``absent_inputs`` names optional model inputs: they become ``absent``."""
    absent_inputs = p.absent_inputs
    if absent_inputs is None:
        return
    if isinstance(absent_inputs, (str, bytes)) or not all(
            isinstance(n, str) for n in absent_inputs):
        raise XlacError(f"absent_inputs must be a list of input names, e.g. "
                        f"absent_inputs=[\"x\"]; got {absent_inputs!r}")
    inputs = {i.name: i for i in graph_inputs(p.model.graph)}
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
    p.absent = frozenset(absent_inputs)


def pin_input_shapes(p: Prepared) -> None:
    """Write ``input_shapes`` into the model's inputs; every input dim must end up static.
    An initializer also listed as an input that ``input_shapes`` names becomes a real
    input, as onnxruntime lets a caller override it. A sequence input's element shapes,
    which its type cannot hold (it has one element shape), go to ``elements``: the type
    gets what the elements share, for ONNX's shape inference."""
    graph, input_shapes, absent = p.model.graph, p.input_shapes, p.absent
    overridable = overridable_initializers(graph)
    for n in input_shapes:
        if n in overridable:
            _drop_initializer(graph, n)
    inputs = {i.name: i for i in graph_inputs(graph)}
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
            p.elements[n] = _check_sequence_pin(n, dims, input_shapes[n])
            _write_shared_dims(tt, p.elements[n])
        elif n in input_shapes:
            pinned = _check_pin(n, dims, input_shapes[n])
            tt.shape.Clear()
            for d in pinned:
                tt.shape.dim.add().dim_value = d
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


# Attribute defaults that onnx's shape inference gets wrong when the attribute is
# absent (STFT's onesided defaults to 1 in the spec, to 0 in its inference function):
# they are written out before inference, which changes nothing else.
_DEFAULTS_TO_SPELL_OUT = {("", "STFT"): {"onesided": 1}}


def spell_out_defaults(p: Prepared) -> None:
    """Write the schema's default into every node of a function-defined op that omits
    an attribute: ONNX's shape inference expands the function body without the defaults,
    so a body that reads ``@axes`` fails where the node leaves ``axes`` out
    (MeanVarianceNormalization). Then the defaults of ``_DEFAULTS_TO_SPELL_OUT``."""
    for node in p.model.graph.node:
        try:
            schema = onnx.defs.get_schema(node.op_type,
                                          p.opsets.get(canonical_domain(node.domain), 0),
                                          node.domain)
        except onnx.defs.SchemaError:
            continue
        if not schema.has_function:
            continue
        given = {a.name for a in node.attribute}
        for name, a in schema.attributes.items():
            if name not in given and a.default_value.type != onnx.AttributeProto.UNDEFINED:
                node.attribute.append(a.default_value)
    for node in p.model.graph.node:
        for name, value in _DEFAULTS_TO_SPELL_OUT.get((canonical_domain(node.domain),
                                                       node.op_type), {}).items():
            if not any(a.name == name for a in node.attribute):
                node.attribute.append(onnx.helper.make_attribute(name, value))


def infer_shapes(p: Prepared) -> None:
    """ONNX's shape inference as a check of the model; ``notes`` on the tensors whose
    declared shapes it contradicts. ``inferred``: the skeleton with what it inferred."""
    skel = skeleton(p.model)
    declared = drop_declared_shapes(skel)
    try:
        p.inferred = onnx.shape_inference.infer_shapes(skel, check_type=True, strict_mode=True,
                                                       data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as e:
        raise XlacError(f"ONNX shape inference failed: {_one_line(e)}") from None
    p.notes += disagreements(declared, p.inferred)


PREPARATION = (warn_future_opset, reject_unsupported, check_boundary, densify_sparse,
               check_model, pin_const_inputs, check_absent, pin_input_shapes,
               spell_out_defaults, infer_shapes)


# -- pinning: what a caller gives and how the errors spell it ------------------------------

def _drop_initializer(graph: onnx.GraphProto, name: str) -> None:
    for i, t in enumerate(graph.initializer):
        if t.name == name:
            del graph.initializer[i]
            return


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
