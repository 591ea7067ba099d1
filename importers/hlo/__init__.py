"""The HLO text front end: ``import_hlo(model, name=None) -> Module`` for XLA's HLO
text as JAX prints it; ``is_hlo_text(model)`` tells it from an ONNX model."""
from .importer import REFUSED, import_hlo, is_hlo_text

__all__ = ["import_hlo", "is_hlo_text", "REFUSED"]
