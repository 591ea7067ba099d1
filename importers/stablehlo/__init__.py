"""The StableHLO front end: ``import_stablehlo(model, name=None) -> Module`` for MLIR
text as JAX prints it (``lowered.as_text()``); ``is_stablehlo_text(model)`` tells it
from HLO text and ONNX."""
from .importer import REFUSED, import_stablehlo, is_stablehlo_text

__all__ = ["import_stablehlo", "is_stablehlo_text", "REFUSED"]
