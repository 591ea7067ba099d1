"""The ONNX front end: ``import_onnx(model, input_shapes=None, name=None, const_inputs=None,
absent_inputs=None) -> Module``; ``read_model`` reads a path, bytes or ModelProto as it does.

One module per op family registers its handlers in ``registry`` on import.
"""
# imported to register their handlers
from . import (activations, cast, contrib_attention, contrib_quantization,  # noqa: F401
               control, conv, elementwise, image, indexing, linalg, loss, math, ml, ml_models, nn,
               normalization, quantization, reduce, rnn, sequence, signal, sort, tensor, text,
               transformer)
from .context import ConstantInputNeeded, InputShapeNeeded
from .importer import import_onnx
from .prepare import read_model
from .registry import supported_ops
from .scope import OUT_OF_SCOPE, OUT_OF_SCOPE_IN_PART, OutOfScope

__all__ = ["import_onnx", "read_model", "supported_ops", "ConstantInputNeeded",
           "InputShapeNeeded", "OutOfScope", "OUT_OF_SCOPE", "OUT_OF_SCOPE_IN_PART"]
