"""What xlac leaves out by design, and why: one table that the importer's errors and the
conformance report (``python -m xlac.conformance --report``) both read.

Compiled code holds tensors of numbers whose shapes are fixed at compile time, runs
inference and needs no state between calls. An ONNX op that cannot fit that is out of
scope, not merely unsupported: no amount of lowering work would make it compile. The
importer names such nodes apart from the unsupported ones, with the reason
(``OutOfScope``), so that a user knows not to wait for them:

    xlac: error: out of scope: StringNormalizer (node 'n'): works on strings, which
    compiled code does not hold

An op in scope may still refuse some attributes or inputs by design (Dropout in
training mode, Compress whose condition is not known at compile time): its handler
decides, ``OUT_OF_SCOPE_IN_PART`` says why for the report. Maps and tensors of strings
are refused wherever they appear. Sequences and optionals are tuples of tensors whose
length and presence are known at compile time (sequence.py): as model inputs the caller
fixes them (``input_shapes``, ``absent_inputs``), as model outputs the graph does, and
each tensor is an argument of its own; what would make them vary at run time is out of
scope (``SEQUENCE_IN_PART``).
"""
from __future__ import annotations

from ...hlo import XlacError

STRINGS = "works on strings, which compiled code does not hold"
# Sequences and optionals inside the graph are supported when known at compile time.
SEQUENCE_IN_PART = ("a sequence or an optional whose length or presence, or a position "
                    "into it, is known only at run time (compiled code holds only dense "
                    "tensors of fixed shape); one known at compile time is supported, as a "
                    "model input (pinned with input_shapes / absent_inputs) and output too")
RUN_TIME_STRUCTURE = ("compiled code holds a sequence or an optional only where its length "
                      "and presence are known at compile time")
LOOP_CHANGES_STRUCTURE = ("a loop-carried sequence or optional whose length or presence "
                          "changes per iteration would need a run-time representation, which "
                          "compiled code does not have (only dense tensors of fixed shape)")
MAPS = "works on maps, which compiled code does not hold (only tensors of fixed shape)"
TRAINING = "a training op (gradients, optimizer updates); xlac compiles inference"
RANDOM = ("draws random numbers from a generator each runtime chooses, so no compiled result "
          "can be checked; pass random values in as an input")
# Dropout in training mode with a nonzero ratio (with ratio 0 it is the identity).
RANDOM_MASK = ("draws a random mask from a generator each runtime chooses, so no compiled "
               "result can be checked")
DATA_SHAPE = ("the shape of its output depends on the input values, and compiled code has "
              "shapes fixed at compile time")
# Classifiers and encoders given string class labels or categories.
STRING_LABELS = "string labels, which compiled code does not hold (use integer labels)"
IMAGE_DECODE = ("decodes image files (JPEG, PNG, ...), whose output shape depends on the bytes "
                "and which compiled code does not parse")

# Values that are not dense tensors, by the field of onnx.TypeProto that says so.
NOT_TENSOR = {"sequence_type": "a sequence", "optional_type": "an optional",
              "map_type": "a map", "sparse_tensor_type": "a sparse tensor"}

ML = "ai.onnx.ml"
TRAINING_DOMAIN = "ai.onnx.preview.training"

# (domain, op type) -> why it is out of scope. "" is the default domain (ai.onnx).
OUT_OF_SCOPE: dict[tuple[str, str], str] = {
    **{("", op): STRINGS for op in (
        "StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch")},
    (ML, "CategoryMapper"): STRINGS,
    (ML, "CastMap"): MAPS,
    (ML, "DictVectorizer"): MAPS,
    (ML, "ZipMap"): MAPS,
    **{(TRAINING_DOMAIN, op): TRAINING for op in ("Adagrad", "Adam", "Gradient", "Momentum")},
    **{("", op): RANDOM for op in (
        "Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
        "RandomUniformLike")},
    **{("", op): DATA_SHAPE for op in ("NonZero", "NonMaxSuppression", "Unique")},
    ("", "ImageDecoder"): IMAGE_DECODE,
}

# Ops in scope but for some attributes or inputs, which their handlers refuse
# (ctx.out_of_scope; a value that can be pinned asks for --const-input instead): what
# the report notes beside them.
OUT_OF_SCOPE_IN_PART: dict[tuple[str, str], str] = {
    ("", "Dropout"): "training_mode=1 with a nonzero ratio " + RANDOM_MASK,
    ("", "Compress"): ("a condition not known at compile time (pin it with --const-input): "
                       "the shape of the output would depend on its values"),
    **{(ML, op): "classlabels_strings: " + STRING_LABELS for op in (
        "LinearClassifier", "SVMClassifier", "TreeEnsembleClassifier")},
    (ML, "OneHotEncoder"): "cats_strings: " + STRING_LABELS,
    ("", "RoiAlign"): ("sampling_ratio=0 with rois not known at compile time (pin them with "
                       "--const-input): each roi's count of samples would depend on them"),
    ("", "TfIdfVectorizer"): "n-grams of strings (pool_strings): " + STRINGS,
    **{("", op): SEQUENCE_IN_PART for op in (
        "ConcatFromSequence", "SequenceAt", "SequenceConstruct", "SequenceEmpty",
        "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap",
        "SplitToSequence", "Optional", "OptionalGetElement", "OptionalHasElement")},
    ("", "Loop"): (LOOP_CHANGES_STRUCTURE + "; a loop whose trip count and condition are "
                   "known at compile time (or pinned with --const-input) is unrolled instead"),
    ("", "If"): ("branches that return sequences of different lengths (or optionals, one "
                 "empty) under a condition known only at run time (one that model inputs "
                 "give can be pinned with --const-input): " + RUN_TIME_STRUCTURE),
}


class OutOfScope(XlacError):
    """The model needs something xlac leaves out by design (see ``OUT_OF_SCOPE``)."""


def out_of_scope_reason(domain: str, op_type: str) -> str | None:
    """Why ``op_type`` of ``domain`` is out of scope, or None."""
    return OUT_OF_SCOPE.get(("" if domain in ("", "ai.onnx") else domain, op_type))


def boundary_type(type_proto, what: str) -> tuple[str, bool, object]:
    """What a model input or output of this ``onnx.TypeProto`` is in compiled code:
    ``(kind, optional, tensor_type)``, kind "tensor" or "sequence" (one tensor per element,
    its length fixed at compile time), ``optional`` where the model declares an optional
    of either, and the ``TypeProto.Tensor`` of the tensor or of the elements. Raises
    ``OutOfScope`` for anything else (maps, sparse tensors, nested sequences); ``what``
    names the value ("input 'x'"). The element type is checked where it is read."""
    optional = type_proto.WhichOneof("value") == "optional_type"
    t = type_proto.optional_type.elem_type if optional else type_proto
    kind = "tensor"
    if t.WhichOneof("value") == "sequence_type":
        kind, t = "sequence", t.sequence_type.elem_type
    found = t.WhichOneof("value")
    if found != "tensor_type":
        inner = NOT_TENSOR.get(found, "a value of no declared type")
        holder = " of a sequence" if kind == "sequence" else ""
        raise OutOfScope(f"out of scope: {what} holds {inner}{holder}, which compiled code "
                         "does not hold (tensors of numbers of fixed shape, sequences and "
                         "optionals of those)")
    return kind, optional, t.tensor_type


def strings_error(what: str) -> OutOfScope:
    return OutOfScope(f"out of scope: {what} holds strings, which compiled code does not hold")
